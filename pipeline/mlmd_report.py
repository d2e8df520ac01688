"""One self-contained HTML page about a pipeline run, built from ML Metadata.

The lineage graph (inline SVG), per-component times, data statistics and anomalies, eval metrics
and blessing, artifact URIs. No scripts, no external resources: the file can be mailed, archived
or opened from a bucket. Written by `python -m pipeline.inspect_mlmd report [RUN]`.
"""

from __future__ import annotations

import collections
import html
import os

from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2

from pipeline import mlmd_read

STATE_COLORS = {
    "COMPLETE": "#cdeccd",
    "CACHED": "#e4e4e4",
    "FAILED": "#f6c6c6",
    "RUNNING": "#fff1b8",
}
BOX_W, BOX_H, GAP_X, GAP_Y = 170, 44, 60, 22


def _layers(nodes: list[str], edges: set[tuple[str, str]]) -> dict[str, int]:
    """Longest-path layer of each node (a DAG)."""
    layer = {n: 0 for n in nodes}
    for _ in nodes:
        for a, b in edges:
            layer[b] = max(layer[b], layer[a] + 1)
    return layer


def lineage_svg(executions: list[dict], db: mlmd_read.Store) -> str:
    names = [e["component"] for e in executions]
    producer: dict[int, str] = {}  # artifact id -> the component that wrote it
    for e in executions:
        for artifact_id in e["outputs"]:
            producer.setdefault(artifact_id, e["component"])
    edges = set()
    for e in executions:
        for artifact_id in e["inputs"]:
            source = producer.get(artifact_id)
            if source is None:
                # Produced in an earlier run (a resolved baseline, say): find its component.
                execution_id = db.producer(artifact_id)
                if execution_id is not None:
                    source = db.node_of(db.store.get_executions_by_id([execution_id])[0])
            if source and source != e["component"] and source in names:
                edges.add((source, e["component"]))
    layer = _layers(names, edges)
    rows = collections.defaultdict(list)
    for name in names:
        rows[layer[name]].append(name)
    position = {}
    for column, members in rows.items():
        for row, name in enumerate(members):
            position[name] = (20 + column * (BOX_W + GAP_X), 20 + row * (BOX_H + GAP_Y))
    width = 40 + (max(rows) + 1) * (BOX_W + GAP_X)
    height = 40 + max(len(m) for m in rows.values()) * (BOX_H + GAP_Y)
    state = {e["component"]: e["state"] for e in executions}
    parts = [
        f'<svg width="{width}" height="{height}" role="img" aria-label="lineage graph">',
        '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="8" refY="4" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>',
    ]
    for a, b in sorted(edges):
        (x1, y1), (x2, y2) = position[a], position[b]
        parts.append(
            f'<line x1="{x1 + BOX_W}" y1="{y1 + BOX_H / 2}" x2="{x2}" y2="{y2 + BOX_H / 2}" '
            'stroke="#555" stroke-width="1.4" marker-end="url(#arrow)"/>'
        )
    for name, (x, y) in position.items():
        color = STATE_COLORS.get(state[name], "#ffffff")
        parts.append(
            f'<g class="node"><rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" '
            f'fill="{color}" stroke="#333"/><text x="{x + BOX_W / 2}" y="{y + 19}" '
            f'text-anchor="middle" font-size="13">{html.escape(name)}</text>'
            f'<text x="{x + BOX_W / 2}" y="{y + 35}" text-anchor="middle" font-size="11" '
            f'fill="#444">{html.escape(state[name])}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _split_protos(uri: str, file_name: str, proto_class):
    """(split name, parsed proto) for each Split-<name>/<file_name> under an artifact URI."""
    for split_dir in sorted(os.listdir(uri)) if os.path.isdir(uri) else []:
        path = os.path.join(uri, split_dir, file_name)
        if os.path.exists(path):
            proto = proto_class()
            with open(path, "rb") as handle:
                proto.ParseFromString(handle.read())
            yield split_dir.replace("Split-", ""), proto


def statistics_rows(uri: str) -> list[dict]:
    rows = []
    for split, stats in _split_protos(
        uri, "FeatureStats.pb", statistics_pb2.DatasetFeatureStatisticsList
    ):
        for dataset in stats.datasets:
            for feature in dataset.features:
                name = ".".join(feature.path.step) or feature.name
                kind = feature.WhichOneof("stats")
                common = getattr(feature, kind).common_stats if kind else None
                present = common.num_non_missing if common else 0
                total = dataset.num_examples or 1
                detail = ""
                if kind == "num_stats":
                    detail = (
                        f"mean {feature.num_stats.mean:.3f}, std {feature.num_stats.std_dev:.3f}"
                    )
                elif kind == "string_stats":
                    detail = f"{feature.string_stats.unique} unique"
                rows.append(
                    {
                        "split": split,
                        "examples": dataset.num_examples,
                        "feature": name,
                        "type": statistics_pb2.FeatureNameStatistics.Type.Name(feature.type),
                        "missing": f"{100 * (1 - present / total):.1f}%",
                        "summary": detail,
                    }
                )
    return rows


def anomaly_rows(uri: str) -> list[str]:
    lines = []
    for split, anomalies in _split_protos(uri, "SchemaDiff.pb", anomalies_pb2.Anomalies):
        for feature, info in sorted(anomalies.anomaly_info.items()):
            kinds = ", ".join(anomalies_pb2.AnomalyInfo.Type.Name(r.type) for r in info.reason)
            lines.append(f"{split}: {feature}: {kinds}: {info.description}")
    return lines


def _table(rows: list[dict], columns: list[str]) -> str:
    if not rows:
        return "<p class='none'>none</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(mlmd_read.cell(r.get(c)))}</td>" for c in columns)
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def build_report(db: mlmd_read.Store, run) -> str:
    summary = next(r for r in mlmd_read.describe_runs(db) if r["run"] == run.name)
    executions = mlmd_read.describe_executions(db, run)
    artifacts = mlmd_read.describe_artifacts(db, run, None)
    by_type = collections.defaultdict(list)
    for artifact in artifacts:
        by_type[artifact["type"]].append(artifact)

    longest = max((e["seconds"] for e in executions), default=0) or 1
    time_rows = "".join(
        f"<tr><td>{html.escape(e['component'])}</td><td>{html.escape(e['state'])}</td>"
        f"<td class='num'>{e['seconds']:.1f}</td><td><div class='bar' "
        f"style='width:{300 * e['seconds'] / longest:.0f}px'></div></td></tr>"
        for e in executions
    )
    stats = [row for a in by_type["ExampleStatistics"] for row in statistics_rows(a["uri"])]
    anomalies = [line for a in by_type["ExampleAnomalies"] for line in anomaly_rows(a["uri"])]
    metrics, blessed = {}, None
    for evaluation in by_type["ModelEvaluation"]:
        metrics = mlmd_read.overall_metrics(evaluation["uri"])
    for blessing in by_type["ModelBlessing"]:
        blessed = blessing["properties"].get("blessed") == 1
    pushed = [
        a["properties"].get("pushed_destination")
        for a in by_type["PushedModel"]
        if a["properties"].get("pushed") == 1
    ]
    metric_rows = [{"metric": k, "value": f"{v:.4f}"} for k, v in sorted(metrics.items())]
    blessing_text = {True: "blessed", False: "NOT blessed", None: "no evaluation in this run"}

    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Pipeline run {html.escape(run.name)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 17px; margin-top: 28px; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
td.num {{ text-align: right; }} .bar {{ background: #5b8def; height: 10px; }}
.none {{ color: #777; }} .status {{ font-weight: bold; }}
</style></head><body>
<h1>Pipeline run {html.escape(run.name)}</h1>
<p class="status">Status {html.escape(summary["status"])}: {summary["executed"]} executed,
{summary["cached"]} cached, {summary["failed"]} failed; {html.escape(summary["start"])} to
{html.escape(summary["end"])}.</p>
<h2 id="lineage">Lineage</h2>
{lineage_svg(executions, db)}
<h2 id="times">Component times</h2>
<table><thead><tr><th>component</th><th>state</th><th>seconds</th><th></th></tr></thead>
<tbody>{time_rows}</tbody></table>
<h2 id="statistics">Data statistics</h2>
{_table(stats, ["split", "examples", "feature", "type", "missing", "summary"])}
<h2 id="anomalies">Anomalies</h2>
{
        "<ul>" + "".join(f"<li>{html.escape(a)}</li>" for a in anomalies) + "</ul>"
        if anomalies
        else "<p class='none'>no anomalies</p>"
    }
<h2 id="evaluation">Evaluation</h2>
<p>Model {blessing_text[blessed]}{"; pushed to " + html.escape(pushed[0]) if pushed else ""}.</p>
{_table(metric_rows, ["metric", "value"])}
<h2 id="artifacts">Artifacts</h2>
{_table(artifacts, ["artifact", "type", "size_bytes", "uri"])}
</body></html>
"""
