"""A user's module before any component: every way it can be broken is one `error:` line that
names the file and the function and says what to do, exit 2, and nothing written; a good one is
resolved, fingerprinted by its syntax tree and staged by digest."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from components import user_code as runtime
from pipeline import run_local, user_code, user_functions

PREPROCESSING = textwrap.dedent(
    """
    import tensorflow as tf
    import tensorflow_transform as tft

    def _dense(value):
        if isinstance(value, tf.sparse.SparseTensor):
            shape = tf.stack([value.dense_shape[0], 1])
            value = tf.sparse.to_dense(tf.SparseTensor(value.indices, value.values, shape))
        return tf.reshape(value, [-1])

    def preprocessing_fn(inputs):
        mass = tf.cast(_dense(inputs["body_mass_g"]), tf.float32)
        outputs = {"body_mass_g_xf": tft.scale_to_z_score(mass)}
        LABEL_LINE
        return outputs
    """
)
WITH_LABEL = PREPROCESSING.replace(
    "LABEL_LINE",
    'outputs["species_xf"] = tft.compute_and_apply_vocabulary(_dense(inputs["species"]))',
)


def run(tmp_path, capsys, *flags) -> tuple[int, str]:
    out = tmp_path / "out"
    code = run_local.main(["--output_root", str(out), *flags])
    err = capsys.readouterr().err
    assert not out.exists(), "bad user code must not write anything"
    return code, err


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_missing_file(tmp_path, capsys):
    code, err = run(tmp_path, capsys, "--module_file", str(tmp_path / "nope.py"))
    assert code == run_local.EXIT_BAD_INPUT
    line = one_error(err)
    assert "--module_file" in line and "nope.py" in line and "no such file" in line


def test_syntax_error_names_file_and_line(tmp_path, capsys):
    path = write(tmp_path, "broken.py", "def run_fn(fn_args):\n    return (\n")
    code, err = run(tmp_path, capsys, "--module_file", path)
    assert code == run_local.EXIT_BAD_INPUT
    line = one_error(err)
    assert f"{path}:" in line and "syntax error" in line


def test_syntax_error_in_a_module_it_imports_from_its_folder(tmp_path, capsys):
    write(tmp_path, "helpers.py", "x = = 1\n")
    path = write(tmp_path, "main_module.py", "import helpers\n\ndef run_fn(fn_args):\n    pass\n")
    code, err = run(tmp_path, capsys, "--module_file", path)
    assert code == run_local.EXIT_BAD_INPUT
    assert "helpers.py:1: syntax error" in one_error(err)


def test_missing_dependency_is_named(tmp_path, capsys):
    path = write(
        tmp_path, "needs_xgb.py", "import xgboost_not_here\n\ndef run_fn(fn_args):\n    pass\n"
    )
    code, err = run(tmp_path, capsys, "--module_file", path)
    assert code == run_local.EXIT_BAD_INPUT
    line = one_error(err)
    assert "'xgboost_not_here'" in line and "not installed" in line and "pip install" in line
    assert path in line


def test_no_known_function(tmp_path, capsys):
    path = write(tmp_path, "nothing.py", "def train(args):\n    pass\n")
    code, err = run(tmp_path, capsys, "--module_file", path)
    line = one_error(err)
    assert code == run_local.EXIT_BAD_INPUT
    assert "defines none of preprocessing_fn, run_fn or build_model" in line
    assert "train" in line  # what it does define


def test_wrong_signature(tmp_path, capsys):
    path = write(tmp_path, "two_args.py", "def run_fn(fn_args, extra):\n    pass\n")
    code, err = run(tmp_path, capsys, "--module_file", path)
    line = one_error(err)
    assert code == run_local.EXIT_BAD_INPUT
    assert "run_fn(fn_args, extra) has the wrong signature" in line and "run_fn(fn_args)" in line


def test_dotted_path_to_a_missing_function(tmp_path, capsys):
    code, err = run(tmp_path, capsys, "--run_fn", "json.no_such_run_fn")
    line = one_error(err)
    assert code == run_local.EXIT_BAD_INPUT
    assert "--run_fn json.no_such_run_fn" in line and "no 'no_such_run_fn'" in line


def test_preprocessing_fn_that_drops_the_label(tmp_path, capsys):
    path = write(tmp_path, "no_label.py", PREPROCESSING.replace("LABEL_LINE", "pass"))
    code, err = run(tmp_path, capsys, "--module_file", path)
    line = one_error(err)
    assert code == run_local.EXIT_BAD_INPUT
    assert "no_label.preprocessing_fn" in line and "drop the label 'species'" in line
    assert "species_xf" in line


def test_preprocessing_fn_outputs_that_are_not_tensors(tmp_path, capsys):
    path = write(
        tmp_path,
        "not_tensors.py",
        WITH_LABEL.replace("return outputs", 'outputs["k"] = 3.0\n    return outputs'),
    )
    code, err = run(tmp_path, capsys, "--module_file", path)
    line = one_error(err)
    assert code == run_local.EXIT_BAD_INPUT
    assert "outputs ['k'] are not tensors" in line


def test_preprocessing_fn_that_fails_on_the_schema_names_its_line(tmp_path, capsys):
    path = write(
        tmp_path, "typo.py", WITH_LABEL.replace('inputs["body_mass_g"]', 'inputs["body_mass"]')
    )
    code, err = run(tmp_path, capsys, "--module_file", path)
    line = one_error(err)
    assert code == run_local.EXIT_BAD_INPUT
    assert "failed on the schema's features" in line and "KeyError" in line
    assert f"{path}:" in line and "body_mass_g" in line  # the inputs it could have read


def test_custom_config_must_be_a_json_object(tmp_path, capsys):
    code, err = run(tmp_path, capsys, "--custom_config", "[1, 2]")
    assert code == run_local.EXIT_BAD_INPUT
    assert "--custom_config: a JSON object is needed" in one_error(err)


def test_eval_config_must_parse(tmp_path, capsys):
    path = write(tmp_path, "eval.pbtxt", "model_specs { nonsense: 1 }\n")
    code, err = run(tmp_path, capsys, "--eval_config", path)
    line = one_error(err)
    assert code == run_local.EXIT_BAD_INPUT
    assert f"--eval_config {path}: not a TFMA EvalConfig" in line


def _recheck(choice):
    """check() without the trace (no schema), as a rerun after an edit does it."""
    return user_code.check(
        choice,
        label_key="species",
        task="classification",
        schema_path=None,
        is_images=False,
        image_size=32,
    )


def test_a_good_module_resolves_fingerprints_and_stages(tmp_path):
    path = write(tmp_path, "good.py", WITH_LABEL)
    choice = user_code.UserCodeChoice(module_file=path)
    resolved = user_code.check(
        choice,
        label_key="species",
        task="classification",
        schema_path=os.path.join("schemas", "penguins", "schema.pbtxt"),
        is_images=False,
        image_size=32,
        cache_dir=str(tmp_path / "cache"),
    )
    assert resolved.preprocessing_fn == "good.preprocessing_fn"
    assert resolved.run_fn == "" and resolved.transformed_label == "species_xf"
    # A comment edit keeps the digest (no rerun); a behaviour edit changes it.
    (tmp_path / "good.py").write_text(WITH_LABEL + "\n# a comment\n")
    same = _recheck(choice)
    assert same.digest == resolved.digest
    (tmp_path / "good.py").write_text(WITH_LABEL.replace("scale_to_z_score", "scale_to_0_1"))
    changed = _recheck(choice)
    assert changed.digest != resolved.digest
    assert list(changed.fingerprint_files(user_code.TRANSFORM)) == ["--module_file good.py"]
    staged = user_code.stage(changed, str(tmp_path / "root"))
    transform = staged.module_for(user_code.TRANSFORM)
    digest = user_code._digest(changed.files_for(user_code.TRANSFORM))
    assert transform.uri.endswith(f"_user_code/{digest}")
    assert runtime.module_names(transform.uri) == ["good"]
    assert (tmp_path / "root" / "_user_code" / digest / "good.py").read_text() == (
        tmp_path / "good.py"
    ).read_text()
    # Readable for pods of another user (a volume's folder, read by the image's user).
    assert os.stat(tmp_path / "root" / "_user_code" / digest).st_mode & 0o777 == 0o755
    # Activating it imports the staged copy, replacing any earlier version.
    runtime.activate(transform)
    module = runtime.load_function("good.preprocessing_fn")
    assert module.__code__.co_filename.startswith(transform.uri)
    # An edit to a run_fn beside it changes the Trainer's digest only.
    (tmp_path / "good.py").write_text(
        (tmp_path / "good.py").read_text() + "\ndef run_fn(fn_args):\n    return 1\n"
    )
    both = _recheck(choice)
    assert both.files_for(user_code.TRANSFORM) == changed.files_for(user_code.TRANSFORM)
    assert both.files_for(user_code.TRAINER) != changed.files_for(user_code.TRAINER)


def test_a_passed_check_is_remembered(tmp_path, monkeypatch):
    path = write(tmp_path, "quick.py", "def build_model(model_inputs):\n    pass\n")
    choice = user_code.UserCodeChoice(module_file=path, custom_config=json.dumps({"a": 1}))
    args = dict(
        label_key="species",
        task="classification",
        schema_path=None,
        is_images=False,
        image_size=32,
        cache_dir=str(tmp_path / "cache"),
    )
    first = user_code.check(choice, **args)
    assert first.model_fn == "quick.build_model"

    def no_import(*_, **__):
        raise AssertionError("a remembered check imports nothing")

    monkeypatch.setattr(user_functions, "check_functions", no_import)
    assert user_code.check(choice, **args) == first
    # A behaviour edit is a new check.
    (tmp_path / "quick.py").write_text("def build_model(model_inputs):\n    return 1\n")
    with pytest.raises(AssertionError, match="imports nothing"):
        user_code.check(choice, **args)
