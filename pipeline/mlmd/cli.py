"""Inspect what the pipeline recorded in ML Metadata, without writing MLMD queries.

    python -m pipeline.mlmd runs
    python -m pipeline.mlmd executions [RUN]
    python -m pipeline.mlmd artifacts [--type Examples] [RUN]
    python -m pipeline.mlmd lineage ARTIFACT_ID
    python -m pipeline.mlmd diff RUN_A RUN_B [--drift_threshold 0.1]
    python -m pipeline.mlmd report [RUN] [--out FILE] [--compare RUN]

RUN is a pipeline run id as `runs` lists it (or its row number, 1 = oldest; default: the latest).
--json (before or after the subcommand) prints machine-readable output. `lineage` prints the
artifact's upstream and downstream as a graph: each execution and artifact once. `diff` adds to
the component and metric changes the schema differences and, per split and feature, TFDV's drift
measure between the two runs' statistics (pipeline.mlmd.diff). Every failure is one `error:` line
and exit code 2.

The store: --metadata FILE (SQLite), or --pipeline NAME under --output_root (default
./tfx_output; found automatically when there is one pipeline), or MySQL
(--mysql_host/--mysql_port/--mysql_database; user and password from MLMD_MYSQL_USER and
MLMD_MYSQL_PASSWORD, never from flags), or an MLMD gRPC server (--grpc_host/--grpc_port, e.g.
Kubeflow's metadata-grpc-service), or, for Kubeflow Pipelines without MLMD, the KFP API server
(--kfp_host URL, --kfp_namespace; bearer token from KFP_API_TOKEN; pipeline.mlmd.kfp_api). For
Kubeflow Pipelines with MLMD (every 2.x release: its API server's tasks carry no artifacts),
--kfp_host with --grpc_host (or --mysql_host, --metadata) reads MLMD's records of the runs the
API server lists. Only ml-metadata's public, read-only API is used.

Two record layouts are understood, and told apart by the types the store holds (--schema forces
one): TFX's own orchestrators (LocalDagRunner: a `pipeline_run` context per run, a `node` context
per component) and Kubeflow Pipelines v2, whose driver and launcher record a `system.PipelineRun`
context per run (named by the KFP run id, child of a `system.Pipeline` context named by the
pipeline), a `system.ContainerExecution` per task (custom property `task_name`: the TFX component
id), a `system.DAGExecution` for the run's root DAG, and artifact types named by their schema
title (`tfx.Examples`, shown as `Examples`). On a Kubeflow store, --pipeline NAME keeps that
pipeline's runs only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

from pipeline import config as config_lib
from pipeline.mlmd import (
    artifacts,
    connection,
    diff,
    kfp_api,
    lineage,
    records,
    runs,
    tables,
)
from pipeline.mlmd.errors import InspectError


def _artifact_label(artifact: dict) -> str:
    return f"{artifact['type']} #{artifact['artifact']}"


def _print_graph(title: str, graph: dict, out) -> None:
    """A lineage part, each execution once (in dependency order) with what it read and wrote."""
    by_id = {a["artifact"]: a for a in graph["artifacts"]}
    reads: dict[int, list[int]] = {}
    writes: dict[int, list[int]] = {}
    for edge in graph["edges"]:
        side = reads if edge["direction"] == "input" else writes
        side.setdefault(edge["execution"], []).append(edge["artifact"])
    out.write(
        f"{title}: {len(graph['executions'])} execution(s), {len(graph['artifacts'])} artifact(s)\n"
    )
    for execution in lineage.topological_executions(graph):
        source = f" from {execution['source']}" if execution.get("source") else ""
        out.write(
            f"  {execution['component']} (execution {execution['execution']}, "
            f"{execution['state']}, run {execution['run']}){source}\n"
        )
        for artifact_id in sorted(reads.get(execution["execution"], [])):
            out.write(f"    <- {_artifact_label(by_id[artifact_id])}\n")
        for artifact_id in sorted(writes.get(execution["execution"], [])):
            artifact = by_id[artifact_id]
            out.write(f"    -> {_artifact_label(artifact)}  {artifact['uri']}\n")


def _drift_detail(row: dict) -> str:
    flag = "DRIFTED " if row["drifted"] else ""
    return f"{flag}{row['measure']} {row['value']:.4f} (threshold {row['threshold']:g})"


def _print_evaluation(run_name: str, section: dict, out) -> None:
    """The verdict, then per evaluation its metrics, failed thresholds, per-class figures and
    the confusion matrix (rows: actual class, columns: predicted) as text tables."""
    pushed = f"; pushed to {section['pushed']}" if section["pushed"] else ""
    out.write(f"evaluation of run {run_name}: {section['verdict']}{pushed}\n")
    for evaluated in section["evaluations"]:
        if evaluated["missing"]:
            out.write("  the evaluation's files are not on this machine\n")
            continue
        tables.write(
            evaluated["metrics"], ["metric", "candidate", "baseline", "change", "threshold"], out
        )
        if evaluated["failures"]:
            out.write("failed thresholds:\n")
            tables.write(evaluated["failures"], ["metric", "value", "message"], out)
        classes = evaluated["classes"]
        if classes:
            out.write("per class (eval split):\n")
            tables.write(classes["per_class"], ["class", "precision", "recall", "support"], out)
            out.write("confusion matrix (rows: actual class, columns: predicted):\n")
            grid = [
                {
                    "actual": row["actual"],
                    **{c["predicted"]: f"{c['count']:g}" for c in row["cells"]},
                }
                for row in classes["rows"]
            ]
            tables.write(grid, ["actual", *classes["classes"]], out)


def _json_flag(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument(
        "--json", action="store_true", default=default, help="machine-readable output"
    )


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.mlmd", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--output_root", default=config_lib.default_output_root())
    parser.add_argument(
        "--pipeline",
        default=None,
        help="pipeline name under --output_root; on a Kubeflow store, its runs only",
    )
    parser.add_argument("--metadata", default=None, help="SQLite MLMD file")
    parser.add_argument("--mysql_host", default=None)
    parser.add_argument("--mysql_port", type=int, default=3306)
    parser.add_argument("--mysql_database", default="metadb")
    parser.add_argument("--grpc_host", default=None, help="MLMD gRPC server (Kubeflow with MLMD)")
    parser.add_argument("--grpc_port", type=int, default=8080)
    parser.add_argument(
        "--kfp_host",
        default=None,
        help="Kubeflow Pipelines API endpoint, e.g. http://localhost:8888 (KFP without MLMD: "
        "runs, tasks and artifacts through its v2beta1 API; with --grpc_host or --mysql_host, "
        "KFP with MLMD: the records of the runs the API lists; bearer token from KFP_API_TOKEN)",
    )
    parser.add_argument(
        "--kfp_namespace", default=None, help="with --kfp_host: the profile namespace"
    )
    parser.add_argument(
        "--schema",
        choices=["auto", records.TFX_SCHEMA, records.KFP_SCHEMA],
        default="auto",
        help="whose records to read: TFX's orchestrators or Kubeflow Pipelines v2 (default: "
        "detected from the store)",
    )
    _json_flag(parser, False)
    commands = parser.add_subparsers(dest="command", required=True)
    subcommands = []
    subcommands.append(
        commands.add_parser("runs", help="pipeline runs: time, status, executed vs cached")
    )
    executions_parser = commands.add_parser("executions", help="component executions of a run")
    executions_parser.add_argument("run", nargs="?")
    artifacts_parser = commands.add_parser("artifacts", help="artifacts a run produced or reused")
    artifacts_parser.add_argument("run", nargs="?")
    artifacts_parser.add_argument("--type", default=None, help="e.g. Examples, Schema, Model")
    lineage_parser = commands.add_parser(
        "lineage", help="upstream and downstream of an artifact, as a graph"
    )
    lineage_parser.add_argument("artifact", type=int)
    diff_parser = commands.add_parser(
        "diff", help="what differs between two runs: components, metrics, schema, data drift"
    )
    diff_parser.add_argument("run_a")
    diff_parser.add_argument("run_b")
    diff_parser.add_argument(
        "--drift_threshold",
        type=float,
        default=diff.DRIFT_THRESHOLD,
        help="distance above which a feature counts as drifted (default %(default)s)",
    )
    evaluation_parser = commands.add_parser(
        "evaluation",
        help="a run's evaluation: blessing, metrics against the thresholds and the baseline, "
        "the majority-class guess, per-class precision and recall, the confusion matrix",
    )
    evaluation_parser.add_argument("run", nargs="?")
    tuning_parser = commands.add_parser(
        "tuning", help="a run's Tuner (--tune): the best hyperparameters, trials, workers"
    )
    tuning_parser.add_argument("run", nargs="?")
    report_parser = commands.add_parser("report", help="a self-contained HTML page about a run")
    report_parser.add_argument("run", nargs="?")
    report_parser.add_argument("--out", default=None, help="default: report-<row>.html in the cwd")
    report_parser.add_argument(
        "--compare", default=None, metavar="RUN", help="add what changed since RUN (diff)"
    )
    subcommands += [executions_parser, artifacts_parser, lineage_parser, diff_parser]
    subcommands += [evaluation_parser, report_parser, tuning_parser]
    for subcommand in subcommands:
        # Accepted after the subcommand too; SUPPRESS keeps a --json given before it.
        _json_flag(subcommand, argparse.SUPPRESS)
    return parser.parse_args(argv)


def _open(args) -> records.Store:
    named = [flag for flag in ("grpc_host", "mysql_host") if getattr(args, flag)]
    if len(named) > 1:
        flags = " and ".join(f"--{flag}" for flag in named)
        raise InspectError(f"{flags} each name a store; pass one")
    token = os.environ.get("KFP_API_TOKEN")
    if args.kfp_host and not named and not args.metadata:
        store = kfp_api.load(args.kfp_host, namespace=args.kfp_namespace, token=token)
        return records.Store(store, schema=records.KFP_SCHEMA, pipeline=args.pipeline)
    if args.grpc_host:
        config = connection.grpc_config(args.grpc_host, args.grpc_port)
    elif args.mysql_host:
        config = connection.mysql_config(args.mysql_host, args.mysql_port, args.mysql_database)
    else:
        config = connection.sqlite_config(
            args.metadata or connection.find_sqlite(args.output_root, args.pipeline)
        )
    if args.kfp_host:
        # Kubeflow Pipelines with ML Metadata (every 2.x release): the records are MLMD's, the
        # runs those the API server lists (a deleted run's records stay in MLMD).
        run_ids = kfp_api.run_ids(args.kfp_host, namespace=args.kfp_namespace, token=token)
        return records.Store(
            connection.connect(config),
            schema=records.KFP_SCHEMA,
            pipeline=args.pipeline,
            run_names=frozenset(run_ids),
        )
    return records.Store(connection.connect(config), schema=args.schema, pipeline=args.pipeline)


def _write_report(path: str, page: str) -> None:
    try:
        with open(path, "w") as handle:
            handle.write(page)
    except OSError as error:
        raise InspectError(
            f"cannot write the report to {path}: {error.strerror or error}"
        ) from error


def run(args, out) -> None:
    db = _open(args)
    # Rows for the table commands; one object for lineage and report (columns None).
    result: list[dict] | dict
    if args.command == "runs":
        result = runs.describe_runs(db)
        columns = ["row", "run", "start", "end", "status", "executed", "cached", "failed"]
    elif args.command == "executions":
        result = runs.describe_executions(db, db.run(args.run))
        columns = ["execution", "component", "state", "seconds", "inputs", "outputs"]
    elif args.command == "artifacts":
        result = artifacts.describe_artifacts(db, db.run(args.run), args.type)
        columns = ["artifact", "type", "size_bytes", "uri"]
    elif args.command == "lineage":
        result = lineage.lineage(db, args.artifact)
        columns = None
    elif args.command == "evaluation":
        from pipeline.mlmd import report

        chosen = db.run(args.run)
        section = report.run_evaluation(db, chosen)
        if args.json:
            out.write(json.dumps(section, indent=2, sort_keys=True, default=str) + "\n")
        else:
            _print_evaluation(chosen.name, section, out)
        return
    elif args.command == "tuning":
        from pipeline.mlmd import tuning

        chosen = db.run(args.run)
        section = tuning.run_tuning(db, chosen)
        if args.json:
            out.write(json.dumps(section, indent=2, sort_keys=True, default=str) + "\n")
        else:
            tuning.print_tuning(chosen.name, section, out)
        return
    elif args.command == "report":
        # Jinja2 and grandalf load with it: only this command pays for them.
        from pipeline.mlmd import report

        chosen = db.run(args.run)
        compare_to = db.run(args.compare) if args.compare else None
        path = os.path.abspath(args.out or report.report_file_name(db.row_of(chosen)))
        if not os.path.isdir(os.path.dirname(path)):
            raise InspectError(
                f"cannot write the report to {path}: no directory {os.path.dirname(path)}"
            )
        _write_report(path, report.build_report(db, chosen, compare_to))
        result = {"report": path, "run": chosen.name}
        if not args.json:
            out.write(f"report of run {chosen.name} written to {path}\n")
            return
        columns = None
    else:
        result = diff.diff(
            db, db.run(args.run_a), db.run(args.run_b), threshold=args.drift_threshold
        )
        columns = ["component", "change", "a", "b", "detail"]
        if not args.json:
            for row in result:
                row["detail"] = _drift_detail(row) if row.get("kind") == "drift" else None
    if args.json:
        out.write(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    elif columns is None:
        assert isinstance(result, dict), "only lineage (report returns unless --json)"
        root = result["artifact"]
        out.write(f"lineage of {_artifact_label(root)}  {root['uri']}\n")
        _print_graph("upstream (to the raw data)", result["upstream"], out)
        _print_graph("downstream (to pushed models)", result["downstream"], out)
    else:
        assert isinstance(result, list), "the table commands return rows"
        tables.write(result, columns, out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # `diff` measures drift with TFDV, which loads TensorFlow and Beam: their start-up lines
    # (CUDA plugin registration, Google client libraries' Python version notices) are not for
    # the user of this command; TFDV's own failures still arrive as Python exceptions.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.api_core")
    try:
        run(args, sys.stdout)
    except InspectError as error:
        sys.stderr.write(f"error: {error}\n")
        return 2
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        sys.stderr.close()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
