"""Inspect what the pipeline recorded in ML Metadata, without writing MLMD queries.

    python -m pipeline.inspect_mlmd runs
    python -m pipeline.inspect_mlmd executions [RUN]
    python -m pipeline.inspect_mlmd artifacts [--type Examples] [RUN]
    python -m pipeline.inspect_mlmd lineage ARTIFACT_ID
    python -m pipeline.inspect_mlmd diff RUN_A RUN_B
    python -m pipeline.inspect_mlmd report [RUN] [--out FILE]

RUN is a pipeline run id as `runs` lists it (or its row number, 1 = oldest; default: the latest).
Every subcommand takes --json. The store: --metadata FILE (SQLite), or --pipeline NAME under
--output_root (default ./tfx_output; found automatically when there is one pipeline), or MySQL
(--mysql_host/--mysql_port/--mysql_database; user and password from MLMD_MYSQL_USER and
MLMD_MYSQL_PASSWORD, never from flags), or an MLMD gRPC server (--grpc_host/--grpc_port, e.g.
Kubeflow's metadata-grpc-service). Only ml-metadata's public, read-only API is used.

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

from pipeline import config as config_lib
from pipeline import mlmd_read, mlmd_report


def _table(rows: list[dict], columns: list[str], out) -> None:
    if not rows:
        out.write("(none)\n")
        return
    cells = [[mlmd_read.cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _print_tree(node: dict, out, indent: str = "", children_key: str = "produced_by") -> None:
    out.write(f"{indent}{node['type']} #{node['artifact']}  {node['uri']}\n")
    if children_key == "produced_by" and "produced_by" in node:
        step = node["produced_by"]
        source = f" from {step['source']}" if step.get("source") else ""
        out.write(f"{indent}  <- {step['component']} (execution {step['execution']}){source}\n")
        for child in step["inputs"]:
            _print_tree(child, out, indent + "     ", children_key)
    if children_key == "consumed_by":
        for step in node.get("consumed_by", []):
            out.write(f"{indent}  -> {step['component']} (execution {step['execution']})\n")
            for child in step["outputs"]:
                _print_tree(child, out, indent + "     ", children_key)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.inspect_mlmd", description=__doc__.split("\n")[0]
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
    parser.add_argument("--grpc_host", default=None, help="MLMD gRPC server (Kubeflow)")
    parser.add_argument("--grpc_port", type=int, default=8080)
    parser.add_argument(
        "--schema",
        choices=["auto", mlmd_read.TFX_SCHEMA, mlmd_read.KFP_SCHEMA],
        default="auto",
        help="whose records to read: TFX's orchestrators or Kubeflow Pipelines v2 (default: "
        "detected from the store)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("runs", help="pipeline runs: time, status, executed vs cached")
    executions = commands.add_parser("executions", help="component executions of a run")
    executions.add_argument("run", nargs="?")
    artifacts = commands.add_parser("artifacts", help="artifacts a run produced or reused")
    artifacts.add_argument("run", nargs="?")
    artifacts.add_argument("--type", default=None, help="e.g. Examples, Schema, Model")
    lineage_parser = commands.add_parser("lineage", help="upstream and downstream of an artifact")
    lineage_parser.add_argument("artifact", type=int)
    diff = commands.add_parser("diff", help="what differs between two runs")
    diff.add_argument("run_a")
    diff.add_argument("run_b")
    report = commands.add_parser("report", help="a self-contained HTML page about a run")
    report.add_argument("run", nargs="?")
    report.add_argument("--out", default=None, help="default: report-<row>.html in the cwd")
    return parser.parse_args(argv)


def run(args, out) -> None:
    if args.grpc_host and args.mysql_host:
        raise mlmd_read.InspectError("--grpc_host and --mysql_host both name a store; pass one")
    if args.grpc_host:
        config = mlmd_read.grpc_config(args.grpc_host, args.grpc_port)
    elif args.mysql_host:
        config = mlmd_read.mysql_config(args.mysql_host, args.mysql_port, args.mysql_database)
    else:
        config = mlmd_read.sqlite_config(
            args.metadata or mlmd_read.find_sqlite(args.output_root, args.pipeline)
        )
    db = mlmd_read.Store(mlmd_read.connect(config), schema=args.schema, pipeline=args.pipeline)
    # Rows for the table commands; one object for lineage and report (columns None).
    result: list[dict] | dict
    if args.command == "runs":
        result = mlmd_read.describe_runs(db)
        columns = ["row", "run", "start", "end", "status", "executed", "cached", "failed"]
    elif args.command == "executions":
        result = mlmd_read.describe_executions(db, db.run(args.run))
        columns = ["execution", "component", "state", "seconds", "inputs", "outputs"]
    elif args.command == "artifacts":
        result = mlmd_read.describe_artifacts(db, db.run(args.run), args.type)
        columns = ["artifact", "type", "size_bytes", "uri"]
    elif args.command == "lineage":
        result = mlmd_read.lineage(db, args.artifact)
        columns = None
    elif args.command == "report":
        chosen = db.run(args.run)
        row = [r.id for r in db.runs()].index(chosen.id) + 1
        path = os.path.abspath(args.out or f"report-{row}.html")
        with open(path, "w") as handle:
            handle.write(mlmd_report.build_report(db, chosen))
        result = {"report": path, "run": chosen.name}
        if not args.json:
            out.write(f"report of run {chosen.name} written to {path}\n")
            return
        columns = None
    else:
        result = mlmd_read.diff_runs(db, db.run(args.run_a), db.run(args.run_b))
        columns = ["component", "change", "a", "b"]
    if args.json:
        out.write(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    elif columns is None:
        assert isinstance(result, dict), "only lineage (report returns unless --json)"
        out.write("upstream (to the raw data):\n")
        _print_tree(result["upstream"], out, "  ", "produced_by")
        out.write("downstream (to pushed models):\n")
        _print_tree(result["downstream"], out, "  ", "consumed_by")
    else:
        assert isinstance(result, list), "the table commands return rows"
        _table(result, columns, out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args, sys.stdout)
    except mlmd_read.InspectError as error:
        sys.stderr.write(f"error: {error}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
