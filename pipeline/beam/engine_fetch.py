"""Flink, Spark and Beam's job servers for them, obtained from PyPI and Maven Central and cached
(`python -m pipeline.beam.engines fetch`; pipeline/beam/engines.py starts them).

The cache is ~/.cache/tfx-scaleout/engines, or $TFX_SCALEOUT_ENGINES:
- Flink's distribution from PyPI: `apache-flink-libraries` (lib/, plugins/) and `apache-flink`
  (bin/, conf/), both sdists, downloaded with `pip download --no-deps` and unpacked, never
  installed (apache-flink's own pins conflict with Beam 2.59);
- Beam's Flink job server from Maven Central: the unshaded `beam-runners-flink-<flink>` and
  `beam-runners-java-job-service` jars with their dependencies (`mvn dependency:copy-dependencies`
  on a small pom), plus a launcher jar whose manifest names them, so that Beam's
  `--flink_job_server_jar` (`java -jar`) runs it;
- Spark: `pyspark`'s sdist from PyPI carries Spark's jars/, bin/ and sbin/ (unpacked the same
  way: a SPARK_HOME, never installed); Beam's Spark job server is `beam-runners-spark-3` with
  `beam-runners-java-job-service`, whose Spark dependencies are `provided`: the launcher names
  Spark's own jars first, then Beam's.

Which versions, and why: see pipeline/beam/engines.py and docs/beam.md."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

FLINK_VERSION = "1.16.3"
# The Flink minor version the job server's Flink client is built for (beam-runners-flink-1.16).
FLINK_MINOR = "1.16"
BEAM_JOB_SERVER_VERSION = "2.56.0"
JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"
SPARK_VERSION = "3.5.3"
SPARK_JOB_SERVER_MAIN = "org.apache.beam.runners.spark.SparkJobServerDriver"
# The logger binding the job server logs through (its slf4j-api is 1.7.30).
SLF4J_VERSION = "1.7.30"

# What Java 17 needs opened for Flink 1.16 and Beam's Flink runner (reflection into java.base:
# Kryo, Flink's closure cleaner, the memory managers).
JAVA_OPENS = tuple(
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in (
        "java.lang",
        "java.lang.invoke",
        "java.lang.reflect",
        "java.io",
        "java.math",
        "java.net",
        "java.nio",
        "java.text",
        "java.time",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "sun.nio.ch",
        "sun.net.util",
    )
)


# Spark 3.5 on Java 17 opens these as well (Spark's launcher JavaModuleOptions).
SPARK_JAVA_OPENS = JAVA_OPENS + tuple(
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in ("sun.nio.cs", "sun.security.action", "sun.util.calendar")
)


class EngineError(RuntimeError):
    """Obtaining or starting an engine failed; the message says which step and why."""


def cache_root() -> str:
    return os.environ.get("TFX_SCALEOUT_ENGINES") or os.path.join(
        os.path.expanduser("~"), ".cache", "tfx-scaleout", "engines"
    )


def _run(command: list[str], step: str, timeout: float = 900, cwd: str | None = None) -> None:
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
        )
    except FileNotFoundError as error:
        raise EngineError(f"{step}: {error}") from error
    if result.returncode != 0:
        raise EngineError(
            f"{step} failed (exit {result.returncode}): {(result.stdout + result.stderr)[-3000:]}"
        )


def _pip_download(requirement: str, dest: str) -> str:
    """The sdist of `requirement`, downloaded (not built, not installed) into dest."""
    os.makedirs(dest, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    command += ["--disable-pip-version-check", "-d", dest, requirement]
    _run(command, f"pip download {requirement}")
    name, version = requirement.split("==")
    prefix = f"{name.replace('-', '_')}-{version}", f"{name}-{version}"
    found = [f for f in os.listdir(dest) if f.startswith(prefix) and f.endswith(".tar.gz")]
    if len(found) != 1:
        raise EngineError(f"pip download {requirement}: no single sdist in {dest}: {found}")
    return os.path.join(dest, found[0])


def _extract(sdist: str, members: tuple[str, ...], target: str) -> None:
    """The sdist's `<top>/deps/<member>` trees, written under target/<member>."""
    with tarfile.open(sdist) as archive:
        for info in archive.getmembers():
            parts = info.name.split("/")
            if len(parts) < 4 or parts[1] != "deps" or parts[2] not in members:
                continue
            if not (info.isfile() or info.isdir()):
                continue
            info.name = "/".join(parts[2:])
            archive.extract(info, target)  # noqa: S202  (names checked above: deps/<member>/...)


def flink_home(version: str = FLINK_VERSION) -> str:
    """FLINK_HOME of Flink `version` from PyPI, unpacked once into the cache."""
    home = os.path.join(cache_root(), f"flink-{version}")
    if os.path.isfile(os.path.join(home, ".complete")):
        return home
    downloads = os.path.join(cache_root(), "downloads")
    libraries = _pip_download(f"apache-flink-libraries=={version}", downloads)
    scripts = _pip_download(f"apache-flink=={version}", downloads)
    partial = tempfile.mkdtemp(prefix=f"flink-{version}-", dir=cache_root())
    _extract(libraries, ("bin", "lib", "plugins", "opt"), partial)  # bin/: bash-java-utils.jar
    _extract(scripts, ("bin", "conf"), partial)
    for name in ("bin/jobmanager.sh", "bin/bash-java-utils.jar", "lib"):
        if not os.path.exists(os.path.join(partial, name)):
            raise EngineError(f"Flink {version} from PyPI has no {name}")
    for script in os.listdir(os.path.join(partial, "bin")):
        path = os.path.join(partial, "bin", script)
        os.chmod(path, os.stat(path).st_mode | 0o111)
    _publish(partial, home)
    for sdist in (libraries, scripts):  # unpacked: 230 MB less in the cache
        os.remove(sdist)
    return home


def _pom(name: str, version: str, dependencies: list[tuple[str, str, str]]) -> str:
    """A Maven project whose only job is to resolve `dependencies` (group, artifact, version)."""
    listed = "".join(
        f"""    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{release}</version>
    </dependency>
"""
        for group, artifact, release in dependencies
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>tfx-scaleout</groupId>
  <artifactId>{name}</artifactId>
  <version>{version}</version>
  <dependencies>
{listed}  </dependencies>
</project>
"""


def _resolve(pom: str, what: str, step: str) -> str:
    """A new folder of the cache whose lib/ holds the runtime jars Maven resolves for `pom`."""
    if not shutil.which("mvn"):
        raise EngineError(f"Maven (mvn) is needed to resolve {what}")
    partial = tempfile.mkdtemp(prefix="job-server-", dir=cache_root())
    with open(os.path.join(partial, "pom.xml"), "w") as handle:
        handle.write(pom)
    _run(
        ["mvn", "-B", "-q", "dependency:copy-dependencies", "-DincludeScope=runtime"]
        + ["-DoutputDirectory=lib"],
        step,
        cwd=partial,
    )
    return partial


def _publish(partial: str, final: str, launcher: str = "", manifest: bytes = b"") -> None:
    """Moves a finished folder of the cache into place, writing the launcher jar (a manifest
    only) first when one is given, or the `.complete` mark of an unpacked engine."""
    if launcher:
        with zipfile.ZipFile(os.path.join(partial, os.path.basename(launcher)), "w") as archive:
            archive.writestr("META-INF/MANIFEST.MF", manifest)
    else:
        open(os.path.join(partial, ".complete"), "w").close()
    shutil.rmtree(final, ignore_errors=True)
    os.rename(partial, final)


def _manifest(main_class: str, class_path: list[str], opens: tuple[str, ...] = JAVA_OPENS) -> bytes:
    """A jar manifest; lines of at most 72 bytes, continued with a leading space."""
    lines = []
    for key, value in (
        ("Manifest-Version", "1.0"),
        ("Main-Class", main_class),
        ("Add-Opens", " ".join(o.split("=")[1] for o in opens)),
        ("Class-Path", " ".join(class_path)),
    ):
        text = f"{key}: {value}".encode()
        lines.append(text[:72])
        lines += [b" " + text[i : i + 71] for i in range(72, len(text), 71)]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def flink_job_server_jar(beam: str = BEAM_JOB_SERVER_VERSION, flink: str = FLINK_MINOR) -> str:
    """A runnable jar of Beam's Flink job server (Beam `beam`, Flink `flink`), resolved from
    Maven Central once into the cache: lib/ holds the jars, the launcher names them."""
    root = os.path.join(cache_root(), f"beam-flink-{flink}-job-server-{beam}")
    launcher = os.path.join(root, f"beam-runners-flink-{flink}-job-server-{beam}.jar")
    if os.path.isfile(launcher):
        return launcher
    pom = _pom(
        "beam-flink-job-server",
        beam,
        [
            ("org.apache.beam", f"beam-runners-flink-{flink}", beam),
            ("org.apache.beam", "beam-runners-java-job-service", beam),
            ("org.slf4j", "slf4j-simple", SLF4J_VERSION),
        ],
    )
    partial = _resolve(
        pom, "Beam's Flink job server", f"mvn resolving beam-runners-flink-{flink}:{beam}"
    )
    jars = sorted(f for f in os.listdir(os.path.join(partial, "lib")) if f.endswith(".jar"))
    _publish(partial, root, launcher, _manifest(JOB_SERVER_MAIN, [f"lib/{j}" for j in jars]))
    return launcher


def job_server_classpath(jar: str) -> tuple[str, ...]:
    """The job server's jars other than Flink's own, for the TaskManager's class path.

    Why: Beam's Flink runner keeps a job's SDK workers between its stages (for
    --environment_cache_millis) only when its classes come from Flink's own class loader
    (FlinkExecutableStageContextFactory releases the context at once otherwise), so with the
    job's jar alone every stage of a batch job boots a new SDK worker: 8-10 s each here, five
    of them for a five-stage pipeline. With these jars on the class path and parent-first class
    loading, one worker per job serves every stage."""
    lib = os.path.join(os.path.dirname(jar), "lib")
    return tuple(
        os.path.join(lib, name)
        for name in sorted(os.listdir(lib))
        if name.endswith(".jar") and not name.startswith("flink-")
    )


def spark_home(version: str = SPARK_VERSION) -> str:
    """SPARK_HOME of Spark `version`: jars/, bin/ and sbin/ of pyspark's sdist from PyPI,
    unpacked once into the cache (pyspark itself is never installed)."""
    home = os.path.join(cache_root(), f"spark-{version}")
    if os.path.isfile(os.path.join(home, ".complete")):
        return home
    sdist = _pip_download(f"pyspark=={version}", os.path.join(cache_root(), "downloads"))
    partial = tempfile.mkdtemp(prefix=f"spark-{version}-", dir=cache_root())
    _extract(sdist, ("bin", "sbin", "jars"), partial)
    for name in ("bin/spark-class", f"jars/spark-core_2.12-{version}.jar"):
        if not os.path.exists(os.path.join(partial, name)):
            raise EngineError(f"pyspark {version} from PyPI has no {name}")
    for folder in ("bin", "sbin"):
        for script in os.listdir(os.path.join(partial, folder)):
            path = os.path.join(partial, folder, script)
            os.chmod(path, os.stat(path).st_mode | 0o111)
    # bin/spark-class takes jars/ from a distribution (one with RELEASE), not a source tree.
    with open(os.path.join(partial, "RELEASE"), "w") as handle:
        handle.write(f"Spark {version} (jars, bin and sbin of pyspark {version} from PyPI)\n")
    _publish(partial, home)
    os.remove(sdist)  # unpacked: 317 MB less in the cache
    return home


def spark_job_server_jar(beam: str = BEAM_JOB_SERVER_VERSION, spark: str = SPARK_VERSION) -> str:
    """A runnable jar of Beam's Spark job server for the cached Spark `spark`: Beam's Spark runner
    and job service resolved from Maven Central into lib/ (their Spark dependencies are
    `provided`), the launcher naming Spark's own jars first (so Spark runs with the Jackson,
    Scala and slf4j 2 it is built with), then Beam's, less Beam's slf4j 1.7 API."""
    home = spark_home(spark)
    root = os.path.join(cache_root(), f"beam-spark-3-job-server-{beam}-spark-{spark}")
    launcher = os.path.join(root, f"beam-runners-spark-3-job-server-{beam}.jar")
    if os.path.isfile(launcher):
        return launcher
    pom = _pom(
        "beam-spark-job-server",
        beam,
        [
            ("org.apache.beam", "beam-runners-spark-3", beam),
            ("org.apache.beam", "beam-runners-java-job-service", beam),
        ],
    )
    partial = _resolve(pom, "Beam's Spark job server", f"mvn resolving beam-runners-spark-3:{beam}")
    beam_jars = sorted(
        f"lib/{f}"
        for f in os.listdir(os.path.join(partial, "lib"))
        if f.endswith(".jar") and not f.startswith("slf4j-api-")
    )
    relative = os.path.relpath(os.path.join(home, "jars"), root)
    spark_jars = sorted(
        f"{relative}/{f}" for f in os.listdir(os.path.join(home, "jars")) if f.endswith(".jar")
    )
    manifest = _manifest(SPARK_JOB_SERVER_MAIN, spark_jars + beam_jars, SPARK_JAVA_OPENS)
    _publish(partial, root, launcher, manifest)
    return launcher


@contextlib.contextmanager
def _one_at_a_time(engine: str):
    """Holds the cache's lock for `engine`: two processes fetching at once (the test session's
    early fetch and a test's) fetch once, the second then finds the cache complete."""
    os.makedirs(cache_root(), exist_ok=True)
    with open(os.path.join(cache_root(), f".{engine}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def fetch() -> tuple[str, str]:
    """Flink's home and Beam's Flink job server jar, cached."""
    with _one_at_a_time("flink"):
        return flink_home(), flink_job_server_jar()


def fetch_spark() -> tuple[str, str]:
    """Spark's home and Beam's Spark job server jar, cached."""
    with _one_at_a_time("spark"):
        return spark_home(), spark_job_server_jar()
