"""The built-in models' hyperparameter search space (the Tuner's, with --tune) and how a point of
it becomes training settings. No KerasTuner import: the runner checks a space, and the Trainer
applies the best point, without loading it (components.training.tuning defines the space in
KerasTuner's terms).

A space is {setting: values}, each either a list of choices or a range:
    {"min": LOW, "max": HIGH[, "step": STEP][, "sampling": "linear" | "log"]}
Settings: width (the first hidden layer; each next one half as wide), depth (hidden layers),
learning_rate (Adam's), dropout (after each hidden layer). --custom_config '{"tune_space":
{...}}' replaces the default of each setting it names; a setting given as [] is not tuned.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from components import ConfigError

# The --custom_config key whose object overrides the default space.
SPACE_KEY = "tune_space"
INT_SETTINGS = ("width", "depth")
FLOAT_SETTINGS = ("learning_rate", "dropout")
TABULAR_SPACE: dict[str, Any] = {
    "width": [16, 32, 64],
    "depth": [1, 2, 3],
    "learning_rate": {"min": 0.001, "max": 0.03, "sampling": "log"},
    "dropout": [0.0, 0.1, 0.2],
}
# The image models: width and depth are the MLP's; the CNN's head keeps its layers.
IMAGE_SPACE: dict[str, Any] = {
    "learning_rate": {"min": 0.0003, "max": 0.003, "sampling": "log"},
    "dropout": [0.1, 0.2, 0.3],
}
_WHERE = f"--custom_config {SPACE_KEY}"


def default_space(images: bool) -> dict[str, Any]:
    return json.loads(json.dumps(IMAGE_SPACE if images else TABULAR_SPACE))


def space_for(custom_config: dict[str, Any], images: bool) -> dict[str, Any]:
    """The default space with --custom_config's tune_space over it, checked: ConfigError names
    the setting and what is wrong with it."""
    space = default_space(images)
    given = custom_config.get(SPACE_KEY, {})
    if not isinstance(given, dict):
        raise ConfigError(f"{_WHERE}: a JSON object of setting -> values is needed, got {given!r}")
    tunable = (FLOAT_SETTINGS[0], FLOAT_SETTINGS[1]) if images else INT_SETTINGS + FLOAT_SETTINGS
    for name, values in given.items():
        if name not in tunable:
            raise ConfigError(
                f"{_WHERE}: {name!r} is not a setting of the built-in "
                f"{'image' if images else 'tabular'} model; tunable: {', '.join(tunable)}"
            )
        if values == []:
            space.pop(name, None)
            continue
        _check(name, values)
        space[name] = values
    if not space:
        raise ConfigError(f"{_WHERE}: every setting was left out ([]); nothing to tune")
    return space


def _valid(name: str, value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if name in INT_SETTINGS:
        return isinstance(value, int) and value >= 1
    if name == "dropout":
        return 0 <= value < 1
    return value > 0


def _bounds(name: str) -> str:
    return {
        "width": "integers >= 1",
        "depth": "integers >= 1",
        "dropout": "numbers in [0, 1)",
        "learning_rate": "numbers > 0",
    }[name]


def _check(name: str, values: Any) -> None:
    where = f"{_WHERE} {name}"
    if isinstance(values, list):
        bad = [v for v in values if not _valid(name, v)]
        if bad:
            raise ConfigError(f"{where}: choices must be {_bounds(name)}, got {bad}")
        if len(set(values)) != len(values):
            raise ConfigError(f"{where}: repeated choices in {values}")
        return
    if not isinstance(values, dict):
        raise ConfigError(
            f'{where}: a list of choices or {{"min": .., "max": ..}} is needed, got {values!r}'
        )
    unknown = sorted(set(values) - {"min", "max", "step", "sampling"})
    if unknown or "min" not in values or "max" not in values:
        raise ConfigError(
            f"{where}: a range has min, max and optionally step, sampling; got keys "
            f"{sorted(values)}"
        )
    low, high = values["min"], values["max"]
    if not (_valid(name, low) and _valid(name, high)) or low >= high:
        raise ConfigError(
            f"{where}: min and max must be {_bounds(name)} with min < max, got {low!r}, {high!r}"
        )
    sampling = values.get("sampling", "linear")
    if sampling not in ("linear", "log"):
        raise ConfigError(f"{where}: sampling must be linear or log, got {sampling!r}")
    if sampling == "log" and low <= 0:
        raise ConfigError(f"{where}: log sampling needs min > 0, got {low!r}")
    step = values.get("step")
    if step is not None and (
        isinstance(step, bool)
        or not isinstance(step, (int, float))
        or step <= 0
        or (name in INT_SETTINGS and not isinstance(step, int))
    ):
        raise ConfigError(f"{where}: step must be a positive number, got {step!r}")


def describe(space: dict[str, Any]) -> str:
    """One line: `width 16|32|64, learning_rate 0.001..0.03 (log)`."""
    parts = []
    for name, values in space.items():
        if isinstance(values, list):
            parts.append(f"{name} {'|'.join(f'{v:g}' for v in values)}")
        else:
            extra = [f"step {values['step']:g}"] if values.get("step") else []
            if values.get("sampling", "linear") == "log":
                extra.append("log")
            suffix = f" ({', '.join(extra)})" if extra else ""
            parts.append(f"{name} {values['min']:g}..{values['max']:g}{suffix}")
    return ", ".join(parts)


def choices(space: dict[str, Any]) -> int | None:
    """How many points a space of choices only has (None: a range makes it unbounded)."""
    count = 1
    for values in space.values():
        if not isinstance(values, list):
            return None
        count *= len(values)
    return count


def with_hyperparameters(settings, values: dict[str, Any]):
    """The TrainingConfig `settings` with a point of the space: width and depth make the hidden
    layers (each half the previous, at least 1 unit), learning_rate and dropout as they are.
    Values of names that are not settings (a user's own hyperparameters) are ignored."""
    changes: dict[str, Any] = {}
    if "width" in values or "depth" in values:
        width = int(values.get("width", settings.hidden_units[0]))
        depth = int(values.get("depth", len(settings.hidden_units)))
        changes["hidden_units"] = tuple(max(1, width >> i) for i in range(depth))
    if "learning_rate" in values:
        changes["learning_rate"] = float(values["learning_rate"])
    if "dropout" in values:
        changes["dropout"] = float(values["dropout"])
    return dataclasses.replace(settings, **changes)


def tuned_settings(settings) -> dict[str, Any]:
    """The settings a point of the space decides, as JSON types (recorded on the Model)."""
    return {
        "hidden_units": list(settings.hidden_units),
        "learning_rate": settings.learning_rate,
        "dropout": settings.dropout,
    }
