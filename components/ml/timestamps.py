"""Timestamp-like text columns (`2013-01-01 05:00:00`, `2013-01-01T05:00`, `2013-01-01`): what
is recognised as one, and the numbers the transform graph makes of it.

A text column whose every value is such a date or date and time (pipeline.preflight tests the
whole column read before the run) would otherwise get a vocabulary of thousands of values that
says nothing about order or the time of day, and its unseen future values would all be
out-of-vocabulary. The project's preprocessing_fn instead parses it, in the transform graph (so
serving parses the raw string the same way), into three numeric columns that are imputed,
z-scored and given missing indicators like any other number (components.ml.preprocessing):

  <column>_hour     the hour of the day, minutes and seconds as its fraction (0 <= h < 24)
  <column>_weekday  the day of the week, Monday 0 to Sunday 6
  <column>_time     days since 1970-01-01, the time of day as its fraction (a continuous time)

A value that does not parse at serving time (or is missing) is a missing value of the three.
"""

from __future__ import annotations

# YYYY-MM-DD, optionally a space or T and HH:MM, optionally :SS and a fraction of a second; no
# time zone (a column that has one stays text).
PATTERN = r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?"
# The derived columns, in this order: the part's name and what it is.
PARTS = ("hour", "weekday", "time")


def part_names(column: str) -> list[str]:
    """The numeric columns a timestamp column becomes (before Transform's _xf suffix)."""
    return [f"{column}_{part}" for part in PARTS]


def is_timestamp_column(values) -> bool:
    """Whether every value of a pyarrow string array (nulls left out; at least one value) is a
    date or date and time of PATTERN that is a real calendar date and time (the whole column is
    parsed, not a sample)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = values.drop_null()
    if len(values) == 0 or not pa.types.is_string(values.type):
        return False
    pattern = f"^{PATTERN}$"
    # The first values decide most columns at a fraction of the cost; then every value.
    for part in (values.slice(0, 1000), values):
        if not pc.all(pc.match_substring_regex(part, pattern)).as_py():
            return False
    # The calendar: 2013-02-30 or 25:00 match the pattern and are no time. Completed to
    # YYYY-MM-DD HH:MM:SS as the transform graph completes them.
    date_time = pc.replace_substring_regex(pc.utf8_slice_codeunits(values, 0, 19), "T", " ")
    date_time = pc.replace_substring_regex(date_time, r"^(.{10})$", r"\1 00:00")
    padded = pc.replace_substring_regex(date_time, r"^(.{16})$", r"\1:00")
    try:
        parsed = pc.strptime(padded, "%Y-%m-%d %H:%M:%S", "s")
    except (pa.ArrowInvalid, ValueError):
        return False
    # Arrow's parse rolls 02-30 over to 03-02: a real date prints back as it was written.
    return pc.all(pc.equal(pc.strftime(parsed, "%Y-%m-%d %H:%M:%S"), padded)).as_py()


def numeric_parts(value, tf):
    """A string column (dense [batch] / [batch, 1], or a SparseTensor [batch, <= 1]) -> the
    three PARTS as float32 SparseTensors [batch, 1], with a value in the rows whose string
    matches PATTERN. `tf` is tensorflow (imported by the caller: this module is also read by the
    pre-flight check, which does not load TensorFlow)."""
    if isinstance(value, tf.SparseTensor):
        indices, strings, shape = value.indices, value.values, value.dense_shape
    else:
        column = tf.reshape(value, [-1, 1])
        shape = tf.shape(column, out_type=tf.int64)
        indices = tf.where(tf.ones_like(column, tf.bool))
        strings = tf.reshape(column, [-1])
    parsed = tf.strings.regex_full_match(strings, PATTERN)
    indices, strings = tf.boolean_mask(indices, parsed), tf.boolean_mask(strings, parsed)
    # Every value to YYYY-MM-DD HH:MM:SS (a date alone is midnight, HH:MM is :00).
    strings = tf.strings.regex_replace(strings, r"^(\d{4}-\d{2}-\d{2})$", r"\1 00:00")
    strings = tf.strings.regex_replace(strings, r"^(.{16})$", r"\1:00")

    def number(start, length):
        return tf.strings.to_number(tf.strings.substr(strings, start, length), tf.int64)

    year, month, day = number(0, 4), number(5, 2), number(8, 2)
    seconds = number(11, 2) * 3600 + number(14, 2) * 60 + number(17, 2)
    days = days_from_civil(year, month, day, tf)
    hour = tf.cast(seconds, tf.float32) / 3600.0
    weekday = tf.cast((days + 3) % 7, tf.float32)
    time = tf.cast(days, tf.float32) + tf.cast(seconds, tf.float32) / 86400.0
    return [tf.SparseTensor(indices, part, shape) for part in (hour, weekday, time)]


def days_from_civil(year, month, day, tf):
    """Days since 1970-01-01 of a proleptic Gregorian date (int64 tensors; H. Hinnant's
    days_from_civil)."""
    year = year - tf.cast(month <= 2, tf.int64)
    era = tf.math.floordiv(year, 400)
    year_of_era = year - era * 400
    month_from_march = tf.where(month > 2, month - 3, month + 9)
    day_of_year = tf.math.floordiv(153 * month_from_march + 2, 5) + day - 1
    day_of_era = (
        year_of_era * 365
        + tf.math.floordiv(year_of_era, 4)
        - tf.math.floordiv(year_of_era, 100)
        + day_of_year
    )
    return era * 146097 + day_of_era - 719468
