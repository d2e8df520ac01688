"""One self-contained HTML page about a pipeline run, built from ML Metadata.

The lineage graph (inline SVG: executions and the artifacts between them, laid out left to right
in pure Python, pipeline.mlmd.lineage_layout), per-component times with cached executions linked
to the run whose outputs they reused, train and eval statistics side by side (min, max,
histograms), anomalies, the evaluation (thresholds, baseline model, candidate against baseline,
TFMA's verdict), artifact URIs. No scripts, no external resources: the file can be mailed,
archived or opened from a bucket. Written by `python -m pipeline.mlmd report [RUN]`.

This module reads what the page shows; the page itself is the Jinja2 templates in
pipeline/mlmd/templates (report.html.j2; its pieces in macros.html.j2 and lineage.svg.j2),
rendered with autoescape on: every value from the store is shown as text.
"""

from __future__ import annotations

import collections
import functools
import os

import jinja2
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
PAD_PX = 10  # around the lineage drawing
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
    """An SVG path through cubic Bezier control points (start, then 3 per segment)."""
    (x0, y0), rest = points[0], points[1:]
    segments = [f"M{x0:.1f},{y0:.1f}"]
    for i in range(0, len(rest) - len(rest) % 3, 3):
        (x1, y1), (x2, y2), (x3, y3) = rest[i : i + 3]
        segments.append(f"C{x1:.1f},{y1:.1f} {x2:.1f},{y2:.1f} {x3:.1f},{y3:.1f}")
    return " ".join(segments)


def lineage_drawing(graph: dict) -> dict:
    """The lineage graph laid out (pipeline.mlmd.lineage_layout), as the template draws it:
    the drawing's size with its padding, each edge's path, each box with its lines of text."""
    sizes = {name: _box_size(node["lines"]) for name, node in graph["nodes"].items()}
    dashed = {(tail, head): is_dashed for tail, head, is_dashed in graph["edges"]}
    placed = lineage_layout.layout(sizes, [(t, h) for t, h, _ in graph["edges"]])
    boxes = []
    for name, box in placed.boxes.items():
        node = graph["nodes"][name]
        is_execution = node["kind"] == "execution"
        boxes.append(
            {
                "id": name,
                "css": "node" if is_execution else "artifact",
                "x": box.x,
                "y": box.y,
                "width": box.width,
                "height": box.height,
                "radius": 4 if is_execution else 12,
                "fill": STATE_COLORS.get(node["state"], "#ffffff")
                if is_execution
                else ARTIFACT_COLOR,
                "lines": [
                    {
                        "text": line,
                        "x": box.x + box.width / 2,
                        "y": box.y + 3 + LINE_PX * (index + 1),
                        "bold": index == 0 and is_execution,
                    }
                    for index, line in enumerate(node["lines"])
                ],
            }
        )
    return {
        "width": placed.width + 2 * PAD_PX,
        "height": placed.height + 2 * PAD_PX,
        "pad": PAD_PX,
        "edges": [
            {
                "tail": edge.tail,
                "head": edge.head,
                "path": _path(edge.points),
                "dashed": dashed.get((edge.tail, edge.head), False),
            }
            for edge in placed.edges
        ],
        "boxes": boxes,
    }


def _split_protos(uri: str, file_name: str, proto_class):
    """(split name, parsed proto) for each Split-<name>/<file_name> under an artifact URI."""
    for split_dir in sorted(os.listdir(uri)) if os.path.isdir(uri) else []:
        path = os.path.join(uri, split_dir, file_name)
        if os.path.exists(path):
            proto = proto_class()
            with open(path, "rb") as handle:
                proto.ParseFromString(handle.read())
            yield split_dir.replace("Split-", ""), proto


def _histogram(values: list[tuple[str, float]]) -> list[dict]:
    """Bars of equal width for (label, count), scaled to the tallest; the label is each bar's
    tooltip."""
    if not values:
        return []
    top = max(count for _, count in values) or 1
    width = HIST_W / len(values)
    return [
        {
            "x": i * width,
            "y": HIST_H - HIST_H * count / top,
            "width": max(width - 1, 1),
            "height": HIST_H * count / top,
            "label": label,
            "count": count,
        }
        for i, (label, count) in enumerate(values)
    ]


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
            histogram=_histogram(
                [(f"{b.low_value:.4g}-{b.high_value:.4g}", b.sample_count) for b in buckets]
            ),
        )
    elif kind == "string_stats":
        stats = feature.string_stats
        top = list(stats.top_values[:10])
        cell.update(
            unique=stats.unique,
            top=", ".join(f"{v.value} ({v.frequency:g})" for v in top[:3]),
            histogram=_histogram([(v.value, v.frequency) for v in top]),
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


def anomaly_rows(uri: str) -> list[str]:
    lines = []
    for split, anomalies in _split_protos(uri, "SchemaDiff.pb", anomalies_pb2.Anomalies):
        for feature, info in sorted(anomalies.anomaly_info.items()):
            kinds = ", ".join(anomalies_pb2.AnomalyInfo.Type.Name(r.type) for r in info.reason)
            lines.append(f"{split}: {feature}: {kinds}: {info.description}")
    return lines


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


def statistics_table(uri: str) -> tuple[list[dict], list[dict]]:
    """(splits, each {"name", "examples"}; rows as statistics_by_feature gives them)."""
    splits, rows = statistics_by_feature(uri)
    return [
        {
            "name": split,
            "examples": next(r["splits"][split]["examples"] for r in rows if split in r["splits"]),
        }
        for split in splits
    ], rows


def _classes_section(evaluation_uri: str, names: list[str]) -> dict | None:
    """The confusion matrix to draw and the per-class figures as text (4 decimals; '-' where a
    class was never predicted or never occurs)."""
    detail = evaluation.classification_detail(evaluation_uri, names)
    if detail is None:
        return None

    def text(value):
        return "-" if value is None else f"{value:.4f}"

    detail["per_class"] = [
        {
            "class": row["class"],
            "precision": text(row["precision"]),
            "recall": text(row["recall"]),
            "support": f"{row['support']:g}",
        }
        for row in detail["per_class"]
    ]
    return detail


def evaluation_section(by_type: dict[str, list[dict]]) -> dict:
    """The verdict, where the model was pushed, the candidate and baseline models the blessing
    names, and per evaluation its metrics against the thresholds and TFMA's verdict."""
    blessings = by_type["ModelBlessing"]
    blessed = blessings[0]["properties"].get("blessed") == 1 if blessings else None
    pushed = [
        a["properties"].get("pushed_destination")
        for a in by_type["PushedModel"]
        if a["properties"].get("pushed") == 1
    ]
    blessing = None
    if blessings:
        props = blessings[0]["properties"]
        blessing = {
            "current": str(props.get("current_model")),
            "current_id": props.get("current_model_id", "-"),
            "baseline": props.get("baseline_model"),
            "baseline_id": props.get("baseline_model_id", "-"),
        }
    # Class names by index: the label vocabulary of the run's (or its cache's) Transform.
    names = next(
        (n for g in by_type["TransformGraph"] if (n := evaluation.class_names(g["uri"]))), []
    )
    evaluations: list[dict] = []
    for evaluated in by_type["ModelEvaluation"]:
        if not os.path.isfile(os.path.join(evaluated["uri"], "eval_config.json")):
            evaluations.append({"missing": True})
            continue
        detail = evaluation.evaluation_detail(evaluated["uri"])
        thresholds = {t["metric"]: _threshold_text(t) for t in detail["thresholds"]}
        metrics = [
            {
                "metric": m["metric"],
                "candidate": f"{m['candidate']:.4f}",
                "baseline": None if m["baseline"] is None else f"{m['baseline']:.4f}",
                "change": None if m["change"] is None else f"{m['change']:+.4f}",
                "threshold": thresholds.get(m["metric"]),
            }
            for m in detail["metrics"]
        ]
        evaluations.append(
            {
                "missing": False,
                "metrics": metrics,
                "validation_ok": detail["validation_ok"],
                "failures": detail["failures"],
                "classes": _classes_section(evaluated["uri"], names),
            }
        )
    return {
        "verdict": {True: "Model blessed", False: "Model NOT blessed", None: "No evaluation"}[
            blessed
        ],
        "pushed": pushed[0] if pushed else None,
        "blessing": blessing,
        "evaluations": evaluations,
    }


def time_rows(executions: list[dict], sources: dict[int, dict]) -> list[dict]:
    """Per execution its seconds, a bar scaled to the longest (300 px) and, cached, where its
    outputs come from (the run's report to link to)."""
    longest = max((e["seconds"] for e in executions), default=0) or 1
    rows = []
    for e in executions:
        source = sources.get(e["execution"])
        if source is not None:
            report = report_file_name(source["row"]) if source["row"] is not None else None
            source = dict(source, report=report)
        rows.append(
            {
                "component": e["component"],
                "state": e["state"],
                "seconds": e["seconds"],
                "bar_px": 300 * e["seconds"] / longest,
                "source": source,
            }
        )
    return rows


def drift_rows(changes: list[dict]) -> list[dict]:
    """The statistics drift among a diff's changes, one row per split and feature."""
    return [
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
        for c in changes
        if c.get("kind") == "drift"
    ]


@functools.cache
def _templates() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("pipeline.mlmd", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters["cell"] = tables.cell
    environment.filters["px"] = lambda value: f"{value:.1f}"
    environment.globals.update(hist_width=HIST_W, hist_height=HIST_H)
    return environment


def _artifacts_by_type(db: Store, run) -> tuple[list[dict], dict[str, list[dict]]]:
    described = artifacts.describe_artifacts(db, run, None)
    by_type: dict[str, list[dict]] = collections.defaultdict(list)
    for artifact in described:
        by_type[artifact["type"]].append(artifact)
    return described, by_type


def run_evaluation(db: Store, run) -> dict:
    """The evaluation section of a run (evaluation_section), for `python -m pipeline.mlmd
    evaluation`."""
    return evaluation_section(_artifacts_by_type(db, run)[1])


def build_report(db: Store, run, compare_to=None) -> str:
    """compare_to: another run; its differences from this one (components, metrics, schema,
    statistics drift) get a section of their own."""
    row = db.row_of(run)
    executions = runs.describe_executions(db, run)
    described, by_type = _artifacts_by_type(db, run)
    changes = diff.diff(db, compare_to, run) if compare_to is not None else []
    anomalies = [line for a in by_type["ExampleAnomalies"] for line in anomaly_rows(a["uri"])]
    return (
        _templates()
        .get_template("report.html.j2")
        .render(
            run_name=run.name,
            row=row,
            summary=runs.describe_run(db, run, row),
            drawing=lineage_drawing(lineage_graph(db, run, executions)),
            executions=time_rows(executions, runs.cache_sources(db, executions)),
            statistics_tables=[statistics_table(a["uri"]) for a in by_type["ExampleStatistics"]],
            anomalies=anomalies,
            evaluation_section=evaluation_section(by_type),
            compare_row=db.row_of(compare_to) if compare_to is not None else None,
            other_changes=[c for c in changes if c.get("kind") != "drift"],
            drift_changes=drift_rows(changes),
            artifacts=described,
        )
    )
