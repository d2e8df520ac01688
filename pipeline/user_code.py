"""A user's own code, before any component runs: TFX's `module_file` contract, the project's model
hook, and the checks that turn a broken module into one clear error.

    --module_file FILE     a Python file with any of:
                             preprocessing_fn(inputs) or (inputs, custom_config)   -> Transform
                             run_fn(fn_args)                                        -> Trainer
                             build_model(model_inputs) -> compiled keras.Model      -> the hook
    --preprocessing_fn / --run_fn / --model_fn PKG.MODULE.FUNCTION   the same, by dotted path
                           (an installed module, or one in --module_file's folder)
    --custom_config JSON   passed to preprocessing_fn and fn_args.custom_config (and the hook)
    --eval_config FILE     a TFMA EvalConfig in text format, for the Evaluator

A run_fn is TFX's: it gets TFX's own FnArgs and trains and saves the model itself. The hook is the
project's: its run_fn calls build_model inside strategy.scope(), so the model gets the project's
input pipeline, every strategy and launcher, checkpoints, the serving and TFMA signatures and the
default Evaluator configuration (components.ml.model.ModelInputs says what it receives).

check() runs in the runner's process before anything is written: the file and the modules it
imports from its own folder are parsed, it is imported (an import it needs that is not installed
is named), the functions are found and their signatures checked, and a preprocessing_fn is traced
on the schema's features (its outputs must be tensors and keep the label). A check that passed is
remembered per digest of everything it read, so a rerun of unchanged code pays nothing.
stage() then copies the files under the pipeline root, in a directory named by the digest of
their syntax trees (components.user_code), which every component, training task, pod and Beam
worker imports from.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Iterator
from typing import Any

from components.ml import features
from components.user_code import MANIFEST_FILE, UserModule
from pipeline import fingerprints

PREPROCESSING_FN, RUN_FN, MODEL_FN = "preprocessing_fn", "run_fn", "build_model"
# How many positional parameters each function takes.
_ARITY = {PREPROCESSING_FN: (1, 2), RUN_FN: (1,), MODEL_FN: (1,)}
_WHAT = {
    PREPROCESSING_FN: "preprocessing_fn(inputs) or preprocessing_fn(inputs, custom_config)",
    RUN_FN: "run_fn(fn_args)",
    MODEL_FN: "build_model(model_inputs)",
}
STAGING_DIR = "_user_code"
# What runs the user's code, and the module-level functions each ignores in the module file.
TRANSFORM, TRAINER, EVALUATOR = "Transform", "Trainer", "Evaluator"
ROLES = {
    TRANSFORM: ("run_fn", "build_model", "tuner_fn"),
    TRAINER: ("preprocessing_fn", "stats_options_updater_fn"),
    EVALUATOR: (),
}
_CHECKS_FILE = "user_code_checks.json"


class UserCodeError(ValueError):
    """The user's module cannot run; the message names the file, the function and what to do."""


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


@dataclasses.dataclass(frozen=True)
class UserCode:
    """The user's code as the pipeline uses it (empty: the project's own everywhere).

    Functions are dotted paths; those from --module_file start with its module name, which
    `module` (set by stage()) makes importable wherever a component runs."""

    preprocessing_fn: str = ""
    run_fn: str = ""
    model_fn: str = ""
    # JSON object: the user's custom_config.
    custom_config: str = ""
    # A TFMA EvalConfig in text format (the file's content).
    eval_config: str = ""
    eval_config_file: str = ""
    # --module_file as given, its absolute path, its import name, and {path in its folder:
    # digest of its syntax tree} of it and every module it imports from its folder.
    module_file: str = ""
    module_path: str = ""
    module_name: str = ""
    files: tuple[tuple[str, str], ...] = ()
    # The same per component role (ROLES): the module file's digest without the functions of the
    # other role, so that an edit to run_fn does not rerun Transform, nor one to preprocessing_fn
    # the Trainer (beyond what Transform's new output reruns).
    role_files: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # The transformed label's name in a user preprocessing_fn's outputs (from the trace).
    transformed_label: str = ""
    # Modules in --module_file's folder that --eval_config's metrics name (`module:`), staged
    # with it: the Evaluator and its Beam SDK workers import them.
    eval_modules: tuple[str, ...] = ()
    # The staged copies (stage()), per role.
    modules: tuple[tuple[str, UserModule], ...] = ()

    @property
    def digest(self) -> str:
        return _digest(self.files)

    def files_for(self, role: str) -> tuple[tuple[str, str], ...]:
        return dict(self.role_files).get(role, self.files)

    def module_for(self, role: str) -> UserModule | None:
        return dict(self.modules).get(role)

    def custom_config_dict(self) -> dict[str, Any]:
        return json.loads(self.custom_config) if self.custom_config else {}

    def from_module(self, function_path: str) -> bool:
        return bool(self.module_name) and function_path.startswith(self.module_name + ".")

    def fingerprint_files(self, role: str) -> dict[str, str]:
        """{label: digest} for the cache fingerprint of the component of `role`."""
        return {f"--module_file {path}": digest for path, digest in self.files_for(role)}


def choice_from_args(args) -> UserCodeChoice:
    return UserCodeChoice(
        module_file=args.module_file,
        preprocessing_fn=args.preprocessing_fn,
        run_fn=args.run_fn,
        model_fn=args.model_fn,
        custom_config=args.custom_config or "",
        eval_config=args.eval_config,
    )


def add_flags(parser) -> None:
    group = parser.add_argument_group("your own code (TFX's module_file contract)")
    group.add_argument(
        "--module_file",
        default=None,
        metavar="FILE",
        help="a Python module with preprocessing_fn (Transform), run_fn (Trainer) and/or "
        "build_model (the project's model hook), as TFX's Transform and Trainer take it",
    )
    for name, what in (
        (PREPROCESSING_FN, "Transform's preprocessing_fn"),
        (RUN_FN, "the Trainer's run_fn (TFX's FnArgs)"),
        ("model_fn", "the model hook (build_model(model_inputs) -> compiled keras.Model)"),
    ):
        group.add_argument(
            f"--{name}",
            default=None,
            metavar="PKG.MODULE.FN",
            help=f"{what} by dotted path (installed, or in --module_file's folder)",
        )
    group.add_argument(
        "--custom_config",
        default=None,
        metavar="JSON",
        help="a JSON object passed to preprocessing_fn(inputs, custom_config), "
        "fn_args.custom_config and the model hook",
    )
    group.add_argument(
        "--eval_config",
        default=None,
        metavar="FILE",
        help="the Evaluator's TFMA EvalConfig (text proto; default: accuracy for a classifier, "
        "MSE skill for a regressor, read from the serving_default signature)",
    )


# --- the module's files ----------------------------------------------------------------------


def _digest(files) -> str:
    return hashlib.sha256(json.dumps(sorted(files)).encode()).hexdigest()[:16]


def _module_closure(module_path: str, also: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """(import name, {path in its folder: digest}) of the module, of the modules `also` names
    (in its folder) and of what they import from its folder. A syntax error names the file and
    line."""
    folder, file_name = os.path.split(module_path)
    name = file_name[: -len(".py")]
    try:
        closure = fingerprints.source_closure([name, *also], folder, packages=None)
    except SyntaxError as error:
        raise UserCodeError(
            f"{error.filename}:{error.lineno}: syntax error: {error.msg}; fix the file and rerun"
        ) from None
    return name, closure


def _role_files(module_path: str, files: dict[str, str], drop) -> tuple[tuple[str, str], ...]:
    """files with the module file's digest taken over its syntax tree without the top-level
    functions named in `drop`."""
    with open(module_path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    tree.body = [
        node
        for node in tree.body
        if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in drop)
    ]
    digest = hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]
    main = os.path.basename(module_path)
    return tuple(sorted({**files, main: digest}.items()))


def _check_module_file(given: str) -> str:
    path = os.path.abspath(given)
    if not os.path.isfile(path):
        raise UserCodeError(
            f"--module_file {given}: no such file; give the path of your Python module "
            "(preprocessing_fn, run_fn or build_model in it)"
        )
    if not path.endswith(".py"):
        raise UserCodeError(f"--module_file {given}: not a .py file (TFX's module_file is one)")
    name = os.path.basename(path)[: -len(".py")]
    if not name.isidentifier():
        raise UserCodeError(
            f"--module_file {given}: {name!r} is not a Python module name; rename the file "
            "(letters, digits and underscores)"
        )
    if name in fingerprints.PROJECT_PACKAGES or name in ("pipeline", "kubeflow", "tfx"):
        raise UserCodeError(
            f"--module_file {given}: a module named {name!r} would hide the package of the same "
            "name; rename the file"
        )
    return path


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


# --- the checks ------------------------------------------------------------------------------


def check(
    choice: UserCodeChoice,
    *,
    label_key: str,
    task: str,
    schema_path: str | None,
    is_images: bool,
    image_size: int,
    cache_dir: str | None = None,
) -> UserCode:
    """The user's code resolved and checked (UserCodeError names file, function and remedy)."""
    if not choice.given:
        return UserCode()
    custom_config = _custom_config(choice.custom_config)
    eval_config_text = _eval_config(choice.eval_config)
    metrics = _eval_metric_classes(eval_config_text)
    module_path = name = ""
    files: dict[str, str] = {}
    eval_modules: tuple[str, ...] = ()
    if choice.module_file:
        module_path = _check_module_file(choice.module_file)
        folder = os.path.dirname(module_path)
        eval_modules = tuple(
            sorted(
                {
                    module
                    for module, _ in metrics
                    if fingerprints.module_file(module, folder, packages=None)
                }
            )
        )
        name, files = _module_closure(module_path, eval_modules)
    cache_key = _cache_key(
        choice, files, custom_config, label_key, task, schema_path, image_size, metrics
    )
    cached = _cached(cache_dir, cache_key)
    if cached is not None:
        functions, transformed_label = cached
    else:
        functions, transformed_label = _check_functions(
            choice,
            module_path,
            name,
            files,
            custom_config,
            label_key=label_key,
            task=task,
            schema_path=schema_path,
            is_images=is_images,
            image_size=image_size,
        )
        _check_metrics(choice.eval_config or "", metrics, module_path, files)
        _remember(cache_dir, cache_key, functions, transformed_label)
    return UserCode(
        preprocessing_fn=functions.get(PREPROCESSING_FN, ""),
        run_fn=functions.get(RUN_FN, ""),
        model_fn=functions.get(MODEL_FN, ""),
        custom_config=json.dumps(custom_config, sort_keys=True) if custom_config else "",
        eval_config=eval_config_text,
        eval_config_file=choice.eval_config or "",
        module_file=choice.module_file or "",
        module_path=module_path,
        module_name=name,
        files=tuple(sorted(files.items())),
        role_files=tuple(
            (role, _role_files(module_path, files, drop)) for role, drop in ROLES.items()
        )
        if module_path
        else (),
        transformed_label=transformed_label,
        eval_modules=eval_modules,
    )


def _custom_config(text: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        raise UserCodeError(f"--custom_config: not JSON ({error}); give a JSON object") from None
    if not isinstance(value, dict):
        raise UserCodeError(f"--custom_config: a JSON object is needed, got {text!r}")
    return value


def _eval_config(path: str | None) -> str:
    if not path:
        return ""
    if not os.path.isfile(path):
        raise UserCodeError(f"--eval_config {path}: no such file (a TFMA EvalConfig text proto)")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    from google.protobuf import text_format
    from tensorflow_model_analysis.proto import config_pb2

    try:
        parsed = text_format.Parse(text, config_pb2.EvalConfig())
    except text_format.ParseError as error:
        raise UserCodeError(
            f"--eval_config {path}: not a TFMA EvalConfig in text format: {error}"
        ) from None
    if not parsed.metrics_specs:
        raise UserCodeError(
            f"--eval_config {path}: no metrics_specs; the Evaluator blesses a model by the "
            "thresholds of its metrics"
        )
    return text


def _eval_metric_classes(text: str) -> list[tuple[str, str]]:
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


def _check_metrics(
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


def _cache_key(
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
    ]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _cached(cache_dir: str | None, key: str) -> tuple[dict[str, str], str] | None:
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


def _remember(cache_dir: str | None, key: str, functions: dict, transformed_label: str) -> None:
    """Only what passed; one entry (the last check) per pipeline."""
    if not cache_dir:
        return
    os.makedirs(cache_dir, exist_ok=True)
    entry = {"functions": functions, "transformed_label": transformed_label}
    scratch = os.path.join(cache_dir, f".{_CHECKS_FILE}.tmp")
    with open(scratch, "w", encoding="utf-8") as handle:
        json.dump({key: entry}, handle)
    os.replace(scratch, os.path.join(cache_dir, _CHECKS_FILE))


def _check_functions(
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
            for role in (PREPROCESSING_FN, RUN_FN, MODEL_FN):
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


# --- staging ---------------------------------------------------------------------------------


def staging_root(pipeline_root: str) -> str:
    """Where stage() puts the module by default: <pipeline_root>/_user_code."""
    return f"{pipeline_root.rstrip('/')}/{STAGING_DIR}"


def stage(
    user: UserCode,
    pipeline_root: str,
    root: str | None = None,
    remedy: str = "the machine that runs this command writes the module there for every "
    "component to import",
) -> UserCode:
    """Copies the module's files to <root>/<digest>/ once per role digest (root:
    <pipeline_root>/_user_code; an object-store URI is written through TensorFlow's file
    systems); an existing directory of that digest is kept: it behaves the same. A root this
    machine cannot write is a UserCodeError naming --module_file, the location and the reason."""
    if not user.module_path:
        return user
    folder = os.path.dirname(user.module_path)
    names = [
        path[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__") for path, _ in user.files
    ]
    manifest = json.dumps({"modules": sorted(names), "files": dict(user.files)}, indent=1)
    modules = []
    for role in ROLES:
        digest = _digest(user.files_for(role))
        uri = f"{(root or staging_root(pipeline_root)).rstrip('/')}/{digest}"
        try:
            if "://" in uri:
                _stage_remote(uri, folder, user.files, manifest)
            else:
                _stage_local(uri, folder, user.files, manifest)
        except Exception as error:  # OSError, TensorFlow's errors.OpError (credentials, network)
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise UserCodeError(
                f"--module_file {user.module_file}: cannot stage it at {uri}: "
                f"{type(error).__name__}: {reason}; {remedy}"
            ) from None
        modules.append(
            (
                role,
                UserModule(
                    module=user.module_name, uri=uri, digest=digest, source=user.module_file
                ),
            )
        )
    return dataclasses.replace(user, modules=tuple(modules))


def _stage_local(uri: str, folder: str, files, manifest: str) -> None:
    if os.path.isfile(os.path.join(uri, MANIFEST_FILE)):
        return
    os.makedirs(os.path.dirname(uri), exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".staging-", dir=os.path.dirname(uri))
    for path, _ in files:
        os.makedirs(os.path.join(scratch, os.path.dirname(path)), exist_ok=True)
        shutil.copyfile(os.path.join(folder, path), os.path.join(scratch, path))
    with open(os.path.join(scratch, MANIFEST_FILE), "w", encoding="utf-8") as handle:
        handle.write(manifest)
    try:
        os.rename(scratch, uri)
    except OSError:  # staged meanwhile by another run
        shutil.rmtree(scratch, ignore_errors=True)


def _stage_remote(uri: str, folder: str, files, manifest: str) -> None:
    import tensorflow as tf

    if tf.io.gfile.exists(f"{uri}/{MANIFEST_FILE}"):
        return
    for path, _ in files:
        target = f"{uri}/{path.replace(os.sep, '/')}"
        tf.io.gfile.makedirs(target.rpartition("/")[0])
        tf.io.gfile.copy(os.path.join(folder, path), target, overwrite=True)
    with tf.io.gfile.GFile(f"{uri}/{MANIFEST_FILE}", "w") as handle:  # last: marks it complete
        handle.write(manifest)


def describe(user: UserCode) -> list[str]:
    """Console lines: which of the user's functions run where."""
    lines = []
    if user.preprocessing_fn:
        lines.append(f"Transform: preprocessing_fn {user.preprocessing_fn}")
    if user.run_fn:
        lines.append(f"Trainer: run_fn {user.run_fn} (TFX's FnArgs)")
    elif user.model_fn:
        lines.append(f"Trainer: the project's run_fn with your model hook {user.model_fn}")
    if user.eval_config_file:
        lines.append(f"Evaluator: EvalConfig {user.eval_config_file}")
    if user.module_path:
        lines.append(f"module {user.module_file}: {len(user.files)} file(s), digest {user.digest}")
    return lines
