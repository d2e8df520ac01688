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
imports from its own folder are parsed, then pipeline.user_functions imports it (an import it
needs that is not installed is named), finds the functions and checks their signatures, and
traces a preprocessing_fn on the schema's features (its outputs must be tensors and keep the
label). A check that passed is remembered per digest of everything it read, so a rerun of
unchanged code pays nothing.
stage() then copies the files under the pipeline root, in a directory named by the digest of
their syntax trees (components.user_code), which every component, training task, pod and Beam
worker imports from.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from typing import Any

from components.user_code import MANIFEST_FILE, UserModule
from pipeline import fingerprints, user_functions
from pipeline.user_functions import (
    MODEL_FN,
    PREPROCESSING_FN,
    RUN_FN,
    TUNER_FN,
    UserCodeChoice,
    UserCodeError,
)

STAGING_DIR = "_user_code"
# What runs the user's code, and the module-level functions each ignores in the module file.
TRANSFORM, TRAINER, EVALUATOR, TUNER = "Transform", "Trainer", "Evaluator", "Tuner"
ROLES = {
    TRANSFORM: ("run_fn", "build_model", "tuner_fn"),
    TRAINER: ("preprocessing_fn", "stats_options_updater_fn", "tuner_fn"),
    EVALUATOR: (),
    TUNER: ("preprocessing_fn", "stats_options_updater_fn", "run_fn"),
}


@dataclasses.dataclass(frozen=True)
class UserCode:
    """The user's code as the pipeline uses it (empty: the project's own everywhere).

    Functions are dotted paths; those from --module_file start with its module name, which
    `module` (set by stage()) makes importable wherever a component runs."""

    preprocessing_fn: str = ""
    run_fn: str = ""
    model_fn: str = ""
    # The module's tuner_fn (TFX's Tuner contract), run with --tune.
    tuner_fn: str = ""
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

    def component_config(self) -> dict[str, Any]:
        """The custom_config Transform and the Trainer get: without the Tuner's search space
        (tune_space), so that a new space reruns the Tuner (and what its result changes) only."""
        from components.training.search_space import SPACE_KEY

        return {k: v for k, v in self.custom_config_dict().items() if k != SPACE_KEY}

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
    metrics = user_functions.eval_metric_classes(eval_config_text)
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
    cache_key = user_functions.cache_key(
        choice, files, custom_config, label_key, task, schema_path, image_size, metrics
    )
    cached = user_functions.cached(cache_dir, cache_key)
    if cached is not None:
        functions, transformed_label = cached
    else:
        functions, transformed_label = user_functions.check_functions(
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
        user_functions.check_metrics(choice.eval_config or "", metrics, module_path, files)
        user_functions.remember(cache_dir, cache_key, functions, transformed_label)
    return UserCode(
        preprocessing_fn=functions.get(PREPROCESSING_FN, ""),
        run_fn=functions.get(RUN_FN, ""),
        model_fn=functions.get(MODEL_FN, ""),
        tuner_fn=functions.get(TUNER_FN, ""),
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
    # mkdtemp makes it 0700: the pods that import the module may run as another user (on a
    # volume, the image's), and read it as any other file of the volume.
    os.chmod(scratch, 0o755)
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
