"""A user's functions checked before any component runs (pipeline.user_code.check): the module
and the modules named by --eval_config's metrics imported (a dependency that is not installed is
named), each function found and its signature held against TFX's contract, a preprocessing_fn
traced on the schema's features (tensors out, the label kept), and what passed remembered per
digest of everything it read, so a rerun of unchanged code pays nothing."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Iterator
from typing import Any

from components.ml import features
from pipeline import fingerprints


@dataclasses.dataclass(frozen=True)
class UserCodeChoice:
    """What the user-code flags ask for (paths as given)."""

    module_file: str | None = None
    preprocessing_fn: str | None = None
    run_fn: str | None = None
    model_fn: str | None = None
    custom_config: str = ""
    eval_config: str | None = None

    @property
    def given(self) -> bool:
        return any(
            (
                self.module_file,
                self.preprocessing_fn,
                self.run_fn,
                self.model_fn,
                self.custom_config,
                self.eval_config,
            )
        )


PREPROCESSING_FN, RUN_FN, MODEL_FN = "preprocessing_fn", "run_fn", "build_model"
TUNER_FN = "tuner_fn"
# How many positional parameters each function takes.
_ARITY = {PREPROCESSING_FN: (1, 2), RUN_FN: (1,), MODEL_FN: (1,), TUNER_FN: (1,)}
_WHAT = {
    PREPROCESSING_FN: "preprocessing_fn(inputs) or preprocessing_fn(inputs, custom_config)",
    RUN_FN: "run_fn(fn_args)",
    MODEL_FN: "build_model(model_inputs)",
    TUNER_FN: "tuner_fn(fn_args) -> TunerFnResult",
}
_CHECKS_FILE = "user_code_checks.json"


class UserCodeError(ValueError):
    """The user's module cannot run; the message names the file, the function and what to do."""


@contextlib.contextmanager
def _importable(folder: str | None, names: list[str]) -> Iterator[None]:
    """`folder` first on sys.path while checking; its modules are forgotten afterwards, so that
    components import the staged copy."""
    if folder:
        sys.path.insert(0, folder)
    before = set(sys.modules)
    try:
        yield
    finally:
        if folder:
            sys.path.remove(folder)
            tops = {name.split(".")[0] for name in names}
            for name in set(sys.modules) - before:
                if name.split(".")[0] in tops:
                    del sys.modules[name]


def _import(module: str, where: str, own: set[str]):
    """Imports `module`; ModuleNotFoundError for a name that is not the user's own is a missing
    dependency and says to install it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing and missing not in own and missing != module.split(".")[0]:
            raise UserCodeError(
                f"{where} imports {error.name!r}, which is not installed here: install it into "
                f"the project's environment (.venv/bin/pip install {missing}) and, for Kubeflow "
                "and Beam workers, into the image"
            ) from None
        raise UserCodeError(f"{where}: cannot import {module!r}: {error}") from None
    except SyntaxError as error:
        raise UserCodeError(
            f"{error.filename}:{error.lineno}: syntax error: {error.msg}; fix the file and rerun"
        ) from None
    except Exception as error:
        raise UserCodeError(
            f"{where}: importing it raised {type(error).__name__}: {error} "
            f"({_user_frame(error)}); fix the module and rerun"
        ) from None


def _user_frame(error: BaseException) -> str:
    """file:line of the innermost frame of the user's code in a traceback (else the last)."""
    frames = traceback.extract_tb(error.__traceback__)
    site = os.sep + "site-packages" + os.sep
    own = [f for f in frames if site not in f.filename and "/components/" not in f.filename]
    chosen = own or list(frames)
    return f"{chosen[-1].filename}:{chosen[-1].lineno}" if chosen else "no traceback"


def _check_signature(function, role: str, where: str) -> None:
    if not callable(function):
        raise UserCodeError(f"{where}: {role} is not a function; define {_WHAT[role]}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    parameters = list(signature.parameters.values())
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    optional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is not p.empty
    ]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in parameters)
    allowed = _ARITY[role]
    fits = any(
        len(positional) <= n <= len(positional) + len(optional)
        or (variadic and n >= len(positional))
        for n in allowed
    )
    if not fits:
        raise UserCodeError(
            f"{where}: {function.__name__}{signature} has the wrong signature; the contract is "
            f"{_WHAT[role]}"
        )


def eval_metric_classes(text: str) -> list[tuple[str, str]]:
    """(module, class name) of every metric of an EvalConfig that names its module."""
    if not text:
        return []
    from google.protobuf import text_format
    from tensorflow_model_analysis.proto import config_pb2

    parsed = text_format.Parse(text, config_pb2.EvalConfig())
    return sorted(
        {
            (metric.module, metric.class_name)
            for spec in parsed.metrics_specs
            for metric in spec.metrics
            if metric.module
        }
    )


def check_metrics(
    eval_config_file: str, metrics: list[tuple[str, str]], module_path: str, files: dict
) -> None:
    """Every metric module --eval_config names imports (from --module_file's folder or the
    environment) and defines its class."""
    if not metrics:
        return
    folder = os.path.dirname(module_path) if module_path else None
    own = {path.split(os.sep)[0].removesuffix(".py") for path in files}
    with _importable(folder, sorted(own)):
        for module_name, class_name in metrics:
            where = f"--eval_config {eval_config_file}: metric {class_name} of module {module_name}"
            if folder is None or module_name.split(".")[0] not in own:
                try:
                    importlib.import_module(module_name)
                except ImportError:
                    hint = (
                        f"put {module_name}.py next to --module_file {module_path}"
                        if folder
                        else "give --module_file (the module's folder is staged with it)"
                    )
                    raise UserCodeError(
                        f"{where}: no module {module_name!r} here; {hint}, or install it "
                        "(and into the image, for Kubeflow and Beam workers)"
                    ) from None
            module = _import(module_name, where, own)
            if not hasattr(module, class_name):
                raise UserCodeError(
                    f"{where}: {module.__file__} defines no {class_name!r}; define the metric "
                    "class there or fix class_name"
                )


def cache_key(
    choice, files, custom_config, label_key, task, schema_path, image_size, metrics=()
) -> str:
    schema = fingerprints.file_digest(schema_path) if schema_path else ""
    own = fingerprints.source_closure(["components.ml.model"])
    parts = [
        dataclasses.asdict(choice),
        sorted(files.items()),
        custom_config,
        label_key,
        task,
        schema,
        image_size,
        list(metrics),
        fingerprints.stack_versions(),
        sorted(own.items()),
        fingerprints.file_digest(__file__),
        fingerprints.file_digest(os.path.join(os.path.dirname(__file__), "user_code.py")),
    ]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def cached(cache_dir: str | None, key: str) -> tuple[dict[str, str], str] | None:
    if not cache_dir:
        return None
    try:
        with open(os.path.join(cache_dir, _CHECKS_FILE), encoding="utf-8") as handle:
            entry = json.load(handle).get(key)
    except (OSError, ValueError):
        return None
    if not entry:
        return None
    return dict(entry["functions"]), entry["transformed_label"]


def remember(cache_dir: str | None, key: str, functions: dict, transformed_label: str) -> None:
    """Only what passed; one entry (the last check) per pipeline."""
    if not cache_dir:
        return
    os.makedirs(cache_dir, exist_ok=True)
    entry = {"functions": functions, "transformed_label": transformed_label}
    scratch = os.path.join(cache_dir, f".{_CHECKS_FILE}.tmp")
    with open(scratch, "w", encoding="utf-8") as handle:
        json.dump({key: entry}, handle)
    os.replace(scratch, os.path.join(cache_dir, _CHECKS_FILE))


def check_functions(
    choice: UserCodeChoice,
    module_path: str,
    name: str,
    files: dict[str, str],
    custom_config: dict,
    **dataset: Any,
) -> tuple[dict[str, str], str]:
    """{role: dotted path} of the user's functions, imported and checked; the transformed
    label's name when a user preprocessing_fn was traced."""
    folder = os.path.dirname(module_path) if module_path else None
    own = {path.split(os.sep)[0].removesuffix(".py") for path in files}
    functions: dict[str, str] = {}
    with _importable(folder, sorted(own)):
        if module_path:
            where = f"--module_file {choice.module_file}"
            module = _import(name, where, own)
            for role in (PREPROCESSING_FN, RUN_FN, MODEL_FN, TUNER_FN):
                if hasattr(module, role):
                    _check_signature(getattr(module, role), role, f"{where}: {role}")
                    functions[role] = f"{name}.{role}"
            if not functions:
                public = sorted(
                    n for n, v in vars(module).items() if inspect.isfunction(v) and n[0] != "_"
                )
                raise UserCodeError(
                    f"{where}: defines none of preprocessing_fn, run_fn or build_model (its "
                    f"functions: {', '.join(public) or 'none'}); define at least one of "
                    f"{_WHAT[PREPROCESSING_FN]}, {_WHAT[RUN_FN]}, {_WHAT[MODEL_FN]}"
                )
        for role, flag_value in (
            (PREPROCESSING_FN, choice.preprocessing_fn),
            (RUN_FN, choice.run_fn),
            (MODEL_FN, choice.model_fn),
        ):
            if not flag_value:
                continue
            flag = "--model_fn" if role == MODEL_FN else f"--{role}"
            module_name, _, function_name = flag_value.rpartition(".")
            if not module_name:
                raise UserCodeError(f"{flag} {flag_value}: give a dotted path, PKG.MODULE.FUNCTION")
            module = _import(module_name, f"{flag} {flag_value}", own)
            if not hasattr(module, function_name):
                raise UserCodeError(
                    f"{flag} {flag_value}: module {module_name!r} ({module.__file__}) has no "
                    f"{function_name!r}; define {_WHAT[role]} there"
                )
            _check_signature(getattr(module, function_name), role, f"{flag} {flag_value}")
            functions[role] = flag_value
        if RUN_FN in functions and MODEL_FN in functions and choice.model_fn:
            raise UserCodeError(
                "--model_fn is the project's model hook, which its own run_fn calls; your "
                f"run_fn {functions[RUN_FN]} trains by itself: drop one of them"
            )
        if RUN_FN in functions:
            functions.pop(MODEL_FN, None)  # a helper of the user's own run_fn, not the hook
        transformed_label = ""
        if PREPROCESSING_FN in functions:
            transformed_label = _trace(functions[PREPROCESSING_FN], custom_config, **dataset)
    return functions, transformed_label


def _trace(
    path: str,
    custom_config: dict,
    *,
    label_key: str,
    task: str,
    schema_path: str | None,
    is_images: bool,
    image_size: int,
) -> str:
    """Traces the preprocessing_fn on the schema's features, as tf.Transform will, and checks
    its outputs: a dict of tensors that keeps the label. Returns the label's output name. Without
    a schema (one inferred on the first run) there is nothing to trace yet: Transform checks."""
    where = f"preprocessing_fn {path}"
    function = importlib.import_module(path.rpartition(".")[0])
    function = getattr(function, path.rpartition(".")[2])
    if not schema_path:
        return ""
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tensorflow_transform import impl_helper
    from tensorflow_transform.tf_metadata import schema_utils
    from tfx.utils import io_utils

    # The pre-flight check has read this schema already: it parses.
    schema = io_utils.parse_pbtxt_file(schema_path, schema_pb2.Schema())
    feature_spec = schema_utils.schema_as_feature_spec(schema).feature_spec
    config = {
        features.LABEL_KEY_CONFIG: label_key,
        features.TASK_CONFIG: task,
        **({features.IMAGE_SIZE_CONFIG: image_size} if is_images else {}),
        **custom_config,
    }
    takes_config = _takes_custom_config(function)

    def bound(inputs):
        return function(inputs, config) if takes_config else function(inputs)

    try:
        with tempfile.TemporaryDirectory(prefix="trace-") as scratch:
            _, _, outputs = impl_helper.trace_preprocessing_function(
                bound, feature_spec, use_tf_compat_v1=True, base_temp_dir=scratch
            )
    except Exception as error:
        raise UserCodeError(
            f"{where} failed on the schema's features ({schema_path}): {type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''} ({_user_frame(error)}); the "
            f"inputs are {sorted(feature_spec)}"
        ) from None
    if not isinstance(outputs, dict) or not outputs:
        raise UserCodeError(
            f"{where} returned {type(outputs).__name__}, not a dict of tensors; return "
            "{name: tensor}"
        )
    not_tensors = sorted(
        key
        for key, value in outputs.items()
        if not isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor))
    )
    if not_tensors:
        raise UserCodeError(
            f"{where}: outputs {not_tensors} are not tensors (tf.Tensor, tf.SparseTensor); "
            "return tensors computed from the inputs"
        )
    for candidate in (features.transformed_name(label_key), label_key):
        if candidate in outputs:
            return candidate
    raise UserCodeError(
        f"{where}: its outputs {sorted(outputs)} drop the label {label_key!r}; the Trainer and "
        f"the Evaluator read it: add outputs[{features.transformed_name(label_key)!r}]"
    )


def _takes_custom_config(function) -> bool:
    try:
        return len(inspect.signature(function).parameters) >= 2
    except (TypeError, ValueError):
        return False
