"""One self-contained HTML page about a pipeline run, built from ML Metadata.

The lineage graph (inline SVG: executions and the artifacts between them, laid out left to right
in pure Python, pipeline.mlmd.lineage_layout), per-component times with cached executions linked
to the run whose outputs they reused, train and eval statistics side by side (min, max,
histograms), anomalies, the evaluation (thresholds, baseline model, candidate against baseline,
TFMA's verdict), artifact URIs. No scripts, no external resources: the file can be mailed,
archived or opened from a bucket. Written by `python -m pipeline.mlmd report [RUN]`.
"""

from __future__ import annotations

import collections
import html
import os

from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2

from pipeline.mlmd import artifacts, diff, evaluation, lineage_layout, runs, tables
from pipeline.mlmd.records import Store

STATE_COLORS = {
    "COMPLETE": "#cdeccd",
    "CACHED": "#e4e4e4",
    "FAILED": "#f6c6c6",
    "RUNNING": "#fff1b8",
}
ARTIFACT_COLOR = "#eaf1fd"
CHAR_PX = 7.2  # width of one character at the drawing's 12 px sans-serif, rounded up
LINE_PX = 15
HIST_W, HIST_H = 120, 28
# Runs searched, newest first, for what a resolver feeds when it resolved nothing in this run.
RESOLVER_LOOKBACK_RUNS = 20


def report_file_name(row: int) -> str:
    """The default file name of a run's report; cached executions link to it."""
    return f"report-{row}.html"


def _is_resolver(db: Store, execution_id: int) -> bool:
    [execution] = db.executions_by_id([execution_id])
    return db.execution_types.get(execution.type_id, "").endswith("Resolver")


def _outside_inputs(executions: list[dict]) -> dict[int, set[int]]:
    """{execution id: its inputs that no execution of the run output}: what a resolver (a
    baseline model, say) brought in from an earlier run."""
    outputs = {a for e in executions for a in e["outputs"]}
    return {e["execution"]: set(e["inputs"]) - outputs for e in executions}


def _resolver_consumers(db: Store, run, resolver_components: set[str]) -> set[str]:
    """Components a resolver fed in the newest earlier or later run where it resolved
    something (MLMD records no edge for a resolver that found nothing)."""
    for other in reversed(db.runs()[-RESOLVER_LOOKBACK_RUNS:]):
        if other.id == run.id:
            continue
        rows = runs.describe_executions(db, other)
        if not any(r["component"] in resolver_components for r in rows):
            continue
        outside = _outside_inputs(rows)
        fed = {r["component"] for r in rows if outside[r["execution"]] and r["state"] != "CACHED"}
        if fed:
            return fed
    return set()


def _box_size(lines: list[str]) -> tuple[float, float]:
    return (max(len(line) for line in lines) * CHAR_PX + 18, len(lines) * LINE_PX + 12)


def lineage_graph(db: Store, run, executions: list[dict]) -> dict:
    """The run's executions and the artifacts they read and wrote, as drawing nodes and edges:
    {"nodes": {id: {"kind", "lines", "state"}}, "edges": [(tail, head, dashed)]}."""
    nodes: dict[str, dict] = {}
    edges: list[tuple[str, str, bool]] = []
    artifact_ids = sorted({a for e in executions for a in e["inputs"] + e["outputs"]})
    by_id = {a.id: a for a in db.artifacts_by_id(artifact_ids)}
    for artifact_id in artifact_ids:
        type_name = db.artifact_types.get(by_id[artifact_id].type_id, "?")
        nodes[f"a{artifact_id}"] = {
            "kind": "artifact",
            "lines": [type_name, f"#{artifact_id}"],
            "state": None,
        }
    resolvers = [e for e in executions if _is_resolver(db, e["execution"])]
    for e in executions:
        nodes[f"e{e['execution']}"] = {
            "kind": "execution",
            "lines": [e["component"], e["state"]],
            "state": e["state"],
        }
        edges.extend((f"a{a}", f"e{e['execution']}", False) for a in e["inputs"])
        edges.extend((f"e{e['execution']}", f"a{a}", False) for a in e["outputs"])
    outside = _outside_inputs(executions)
    brought_in = sorted({a for ids in outside.values() for a in ids})
    for resolver in resolvers:
        for artifact_id in brought_in:
            edges.append((f"e{resolver['execution']}", f"a{artifact_id}", True))
        if not brought_in:
            nodes[f"e{resolver['execution']}"]["lines"].append("resolved nothing")
            fed = _resolver_consumers(db, run, {r["component"] for r in resolvers})
            for e in executions:
                if e["component"] in fed:
                    edges.append((f"e{resolver['execution']}", f"e{e['execution']}", True))
    return {"nodes": nodes, "edges": edges}


def _path(points: tuple[tuple[float, float], ...]) -> str:
    (x0, y0), rest = points[0], points[1:]
    segments = [f"M{x0:.1f},{y0:.1f}"]
    for i in range(0, len(rest) - len(rest) % 3, 3):
        (x1, y1), (x2, y2), (x3, y3) = rest[i : i + 3]
        segments.append(f"C{x1:.1f},{y1:.1f} {x2:.1f},{y2:.1f} {x3:.1f},{y3:.1f}")
    return " ".join(segments)


def lineage_svg(graph: dict) -> str:
    sizes = {name: _box_size(node["lines"]) for name, node in graph["nodes"].items()}
    dashed = {(tail, head): is_dashed for tail, head, is_dashed in graph["edges"]}
    placed = lineage_layout.layout(sizes, [(t, h) for t, h, _ in graph["edges"]])
    pad = 10
    parts = [
        f'<svg width="{placed.width + 2 * pad:.0f}" height="{placed.height + 2 * pad:.0f}" '
        f'viewBox="{-pad} {-pad} {placed.width + 2 * pad:.0f} {placed.height + 2 * pad:.0f}" '
        'role="img" aria-label="lineage graph" font-family="sans-serif" '
        'style="max-width: 100%; height: auto">',
        '<defs><marker id="arrow" markerWidth="7" markerHeight="7" refX="7" refY="3.5" '
        'orient="auto"><path d="M0,0 L7,3.5 L0,7 z" fill="#555"/></marker></defs>',
    ]
    for edge in placed.edges:
        style = ' stroke-dasharray="5,4"' if dashed.get((edge.tail, edge.head)) else ""
        parts.append(
            f'<path class="edge" data-tail="{edge.tail}" data-head="{edge.head}" '
            f'd="{_path(edge.points)}" fill="none" stroke="#555" stroke-width="1.3"{style} '
            'marker-end="url(#arrow)"/>'
        )
    for name, box in placed.boxes.items():
        node = graph["nodes"][name]
        is_execution = node["kind"] == "execution"
        fill = STATE_COLORS.get(node["state"], "#ffffff") if is_execution else ARTIFACT_COLOR
        css = "node" if is_execution else "artifact"
        radius = 4 if is_execution else 12
        parts.append(
            f'<g class="{css}" data-id="{name}"><rect class="box" x="{box.x:.1f}" '
            f'y="{box.y:.1f}" width="{box.width:.1f}" height="{box.height:.1f}" '
            f'rx="{radius}" fill="{fill}" stroke="#333"/>'
        )
        for index, line in enumerate(node["lines"]):
            weight = ' font-weight="bold"' if index == 0 and is_execution else ""
            baseline = box.y + 3 + LINE_PX * (index + 1)
            parts.append(
                f'<text x="{box.x + box.width / 2:.1f}" y="{baseline:.1f}" '
                f'text-anchor="middle" font-size="12"{weight}>{html.escape(line)}</text>'
            )
        parts.append("</g>")
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


def _histogram_svg(values: list[tuple[str, float]]) -> str:
    """Bars of equal width for (label, count); the label is each bar's tooltip."""
    if not values:
        return ""
    top = max(count for _, count in values) or 1
    width = HIST_W / len(values)
    bars = "".join(
        f'<rect x="{i * width:.1f}" y="{HIST_H - HIST_H * count / top:.1f}" '
        f'width="{max(width - 1, 1):.1f}" height="{HIST_H * count / top:.1f}" fill="#5b8def">'
        f"<title>{html.escape(label)}: {count:g}</title></rect>"
        for i, (label, count) in enumerate(values)
    )
    return (
        f'<svg class="hist" width="{HIST_W}" height="{HIST_H}" role="img" '
        f'aria-label="histogram">{bars}</svg>'
    )


def feature_statistics(feature, num_examples: int) -> dict:
    """One feature of one split: count, missing, mean/std/min/max or unique/top values, and a
    histogram (numeric: TFDV's standard histogram; strings: the most frequent values)."""
    kind = feature.WhichOneof("stats")
    common = getattr(feature, kind).common_stats if kind in ("num_stats", "string_stats") else None
    present = common.num_non_missing if common else 0
    cell = {
        "count": present,
        "missing": f"{100 * (1 - present / (num_examples or 1)):.1f}%",
    }
    if kind == "num_stats":
        stats = feature.num_stats
        standard = [h for h in stats.histograms if h.type == statistics_pb2.Histogram.STANDARD]
        buckets = standard[0].buckets if standard else []
        cell.update(
            mean=f"{stats.mean:.4g}",
            std=f"{stats.std_dev:.4g}",
            min=f"{stats.min:.4g}",
            max=f"{stats.max:.4g}",
            histogram=_histogram_svg(
                [(f"{b.low_value:.4g}-{b.high_value:.4g}", b.sample_count) for b in buckets]
            ),
        )
    elif kind == "string_stats":
        stats = feature.string_stats
        top = list(stats.top_values[:10])
        cell.update(
            unique=stats.unique,
            top=", ".join(f"{v.value} ({v.frequency:g})" for v in top[:3]),
            histogram=_histogram_svg([(v.value, v.frequency) for v in top]),
        )
    return cell


def statistics_by_feature(uri: str) -> tuple[list[str], list[dict]]:
    """(split names, one row per feature: {"feature", "type", "splits": {split: cell}})."""
    splits: list[str] = []
    rows: dict[str, dict] = {}
    for split, stats in _split_protos(
        uri, "FeatureStats.pb", statistics_pb2.DatasetFeatureStatisticsList
    ):
        splits.append(split)
        for dataset in stats.datasets:
            for feature in dataset.features:
                name = ".".join(feature.path.step) or feature.name
                row = rows.setdefault(
                    name,
                    {
                        "feature": name,
                        "type": statistics_pb2.FeatureNameStatistics.Type.Name(feature.type),
                        "splits": {},
                    },
                )
                row["splits"][split] = dict(
                    feature_statistics(feature, dataset.num_examples),
                    examples=dataset.num_examples,
                )
    # train, then eval, then any other split, as TFX's splits read
    order = {"train": 0, "eval": 1}
    splits.sort(key=lambda name: (order.get(name, 2), name))
    return splits, [rows[name] for name in sorted(rows)]


def statistics_html(uri: str) -> str:
    splits, rows = statistics_by_feature(uri)
    if not rows:
        return "<p class='none'>no statistics</p>"
    head = "".join(
        f"<th colspan='2'>{html.escape(split)} "
        f"({next(iter(r['splits'][split]['examples'] for r in rows if split in r['splits']))}"
        " examples)</th>"
        for split in splits
    )
    body = []
    for row in rows:
        cells = []
        for split in splits:
            cell = row["splits"].get(split)
            if cell is None:
                cells.append("<td colspan='2' class='none'>-</td>")
                continue
            if "mean" in cell:
                summary = (
                    f"mean {cell['mean']}, std {cell['std']}<br>min {cell['min']}, "
                    f"max {cell['max']}"
                )
            else:
                summary = f"{cell.get('unique', '-')} unique: {html.escape(cell.get('top', ''))}"
            summary += f"<br>missing {cell['missing']}"
            cells.append(f"<td class='stat'>{summary}</td><td>{cell.get('histogram', '')}</td>")
        body.append(
            f"<tr><td><b>{html.escape(row['feature'])}</b><br>"
            f"<span class='dim'>{html.escape(row['type'])}</span></td>{''.join(cells)}</tr>"
        )
    return (
        f"<table class='stats'><thead><tr><th>feature</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


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
        + "".join(f"<td>{html.escape(tables.cell(r.get(c)))}</td>" for c in columns)
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _threshold_text(threshold: dict) -> str:
    parts = []
    value = threshold.get("value") or {}
    if "lowerBound" in value:
        parts.append(f">= {value['lowerBound']:g}")
    if "upperBound" in value:
        parts.append(f"<= {value['upperBound']:g}")
    change = threshold.get("change") or {}
    if change:
        direction = change.get("direction", "")
        bound = change.get("absolute", change.get("relative"))
        kind = "absolute" if "absolute" in change else "relative"
        better = "higher" if direction == "HIGHER_IS_BETTER" else "lower"
        parts.append(f"change vs baseline {kind} {bound:g} ({better} is better)")
    return "; ".join(parts)


def evaluation_html(by_type: dict[str, list[dict]]) -> str:
    blessings = by_type["ModelBlessing"]
    blessed = blessings[0]["properties"].get("blessed") == 1 if blessings else None
    pushed = [
        a["properties"].get("pushed_destination")
        for a in by_type["PushedModel"]
        if a["properties"].get("pushed") == 1
    ]
    verdict = {True: "Model blessed", False: "Model NOT blessed", None: "No evaluation"}[blessed]
    parts = [
        f"<p>{verdict}{'; pushed to ' + html.escape(pushed[0]) if pushed else ''}.</p>",
    ]
    if blessings:
        props = blessings[0]["properties"]
        current = props.get("current_model")
        baseline = props.get("baseline_model")
        parts.append(
            "<p>Candidate model "
            f"<code>{html.escape(str(current))}</code> (artifact "
            f"#{html.escape(str(props.get('current_model_id', '-')))}); baseline "
            + (
                f"<code>{html.escape(str(baseline))}</code> (artifact "
                f"#{html.escape(str(props.get('baseline_model_id', '-')))})"
                if baseline
                else "none (no earlier blessed model: only the absolute thresholds apply)"
            )
            + ".</p>"
        )
    for evaluated in by_type["ModelEvaluation"]:
        if not os.path.isfile(os.path.join(evaluated["uri"], "eval_config.json")):
            parts.append("<p class='none'>the evaluation's files are not on this machine</p>")
            continue
        detail = evaluation.evaluation_detail(evaluated["uri"])
        thresholds = {t["metric"]: _threshold_text(t) for t in detail["thresholds"]}
        rows = [
            {
                "metric": m["metric"],
                "candidate": f"{m['candidate']:.4f}",
                "baseline": None if m["baseline"] is None else f"{m['baseline']:.4f}",
                "change": None if m["change"] is None else f"{m['change']:+.4f}",
                "threshold": thresholds.get(m["metric"]),
            }
            for m in detail["metrics"]
        ]
        parts.append(_table(rows, ["metric", "candidate", "baseline", "change", "threshold"]))
        if detail["validation_ok"] is not None:
            ok = "passed" if detail["validation_ok"] else "FAILED"
            parts.append(f"<p>Threshold validation {ok}.</p>")
        if detail["failures"]:
            parts.append(_table(detail["failures"], ["metric", "value", "threshold"]))
    return "".join(parts)


def times_html(executions: list[dict], sources: dict[int, dict]) -> str:
    longest = max((e["seconds"] for e in executions), default=0) or 1
    rows = []
    for e in executions:
        source = sources.get(e["execution"])
        note = ""
        if source is not None:
            where = (
                f"<a href='{report_file_name(source['row'])}'>run {source['row']}</a> "
                f"({html.escape(str(source['run']))})"
                if source["row"] is not None
                else "an earlier run"
            )
            note = (
                f"outputs reused from {where}, execution {source['execution']}, "
                f"which took {source['seconds']:.1f} s"
            )
        rows.append(
            f"<tr><td>{html.escape(e['component'])}</td><td>{html.escape(e['state'])}</td>"
            f"<td class='num'>{e['seconds']:.1f}</td><td><div class='bar' "
            f"style='width:{300 * e['seconds'] / longest:.0f}px'></div></td><td>{note}</td></tr>"
        )
    return (
        "<table><thead><tr><th>component</th><th>state</th><th>seconds</th><th></th>"
        f"<th>cache</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def diff_html(changes: list[dict]) -> str:
    drift = [c for c in changes if c.get("kind") == "drift"]
    other = [c for c in changes if c.get("kind") != "drift"]
    parts = [_table(other, ["component", "change", "a", "b"])]
    if drift:
        rows = [
            {
                "split": c["split"],
                "feature": c["feature"],
                "measure": c["measure"],
                "value": f"{c['value']:.4f}",
                "threshold": c["threshold"],
                "drifted": "DRIFTED" if c["drifted"] else "",
                "a": c["a"],
                "b": c["b"],
            }
            for c in drift
        ]
        parts.append(
            _table(rows, ["split", "feature", "measure", "value", "threshold", "drifted", "a", "b"])
        )
    return "".join(parts)


def build_report(db: Store, run, compare_to=None) -> str:
    """compare_to: another run; its differences from this one (components, metrics, schema,
    statistics drift) get a section of their own."""
    row = db.row_of(run)
    summary = runs.describe_run(db, run, row)
    executions = runs.describe_executions(db, run)
    described = artifacts.describe_artifacts(db, run, None)
    sources = runs.cache_sources(db, executions)
    by_type: dict[str, list[dict]] = collections.defaultdict(list)
    for artifact in described:
        by_type[artifact["type"]].append(artifact)

    statistics = "".join(statistics_html(a["uri"]) for a in by_type["ExampleStatistics"])
    anomalies = [line for a in by_type["ExampleAnomalies"] for line in anomaly_rows(a["uri"])]
    diff_section = ""
    if compare_to is not None:
        changes = diff.diff(db, compare_to, run)
        diff_section = (
            f"<h2 id='diff'>Changes since run {db.row_of(compare_to)}</h2>{diff_html(changes)}"
        )

    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Pipeline run {html.escape(run.name)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 17px; margin-top: 28px; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }}
td.num {{ text-align: right; }} .bar {{ background: #5b8def; height: 10px; }}
.none, .dim {{ color: #777; }} .status {{ font-weight: bold; }} td.stat {{ white-space: nowrap; }}
</style></head><body>
<h1>Pipeline run {html.escape(run.name)} (row {row})</h1>
<p class="status">Status {html.escape(summary["status"])}: {summary["executed"]} executed,
{summary["cached"]} cached, {summary["failed"]} failed; {html.escape(summary["start"])} to
{html.escape(summary["end"])}.</p>
<h2 id="lineage">Lineage</h2>
{lineage_svg(lineage_graph(db, run, executions))}
<h2 id="times">Component times</h2>
{times_html(executions, sources)}
<h2 id="statistics">Data statistics</h2>
{statistics or "<p class='none'>no statistics in this run</p>"}
<h2 id="anomalies">Anomalies</h2>
{
        "<ul>" + "".join(f"<li>{html.escape(a)}</li>" for a in anomalies) + "</ul>"
        if anomalies
        else "<p class='none'>no anomalies</p>"
    }
<h2 id="evaluation">Evaluation</h2>
{evaluation_html(by_type)}
{diff_section}
<h2 id="artifacts">Artifacts</h2>
{_table(described, ["artifact", "type", "size_bytes", "uri"])}
</body></html>
"""
