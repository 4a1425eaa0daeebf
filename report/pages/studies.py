"""studies.html: a study preset's published figures overlaid on the measured ones, for every metric the study
reports (hydra_conf/experiment/<preset>.yaml `metrics`), where measured points match a published configuration
(declared by each workload: jobs.study, analysis.references.studies). Built only when some measured point
matches."""
from __future__ import annotations

import functools
from typing import Any

import altair as alt
import pandas as pd

from analysis import references
from jobs import experiment, workloads
from jobs.study import Study
from report.charts import HEIGHT, WIDTH, Chart, anchor, base_config, color, fmt_num, records, to_spec
from report.pages import MAX_ROWS, Page, label, per_table


@functools.cache
def published(name: str) -> pd.DataFrame:
    """Study `name`'s published figures, loaded once per process (callers copy before changing them)."""
    return references.load(references.studies()[name])


def figures(study: Study) -> pd.DataFrame:
    """A copy of the study's published figures for a page; none (its columns) where its file cannot be read."""
    try:
        return published(study.name).copy()
    except (OSError, ValueError, KeyError, TypeError):   # a broken reference file must not break the report
        return pd.DataFrame(columns=list(study.columns))


@per_table
def comparisons(table: pd.DataFrame) -> list[tuple[dict[str, Any], Study, pd.DataFrame]]:
    """(preset, study, compare_study rows) for every preset whose study matches a measured point."""
    out = []
    known = references.studies()
    for preset in experiment.presets(user=True):
        name = preset.get("reference")
        if name not in known or table.empty:
            continue
        try:
            rows = references.compare_study(table, known[name], list(preset.get("metrics") or []), published(name))
        except (OSError, ValueError, KeyError, TypeError):   # a broken reference file must not break the report
            continue
        if len(rows):
            out.append((preset, known[name], rows))
    return out


SIDES = ("published", "measured")


def ran(study: Study) -> list[str]:
    """The columns of compare_study that say what ran each side: the study's software column and
    measured_<it>, as SIDES (none where the study names no software)."""
    return [study.software, f"measured_{study.software}"] if study.software else []


def chart_id(preset: str, metric: str) -> str:
    return f"study-{anchor(preset, metric)}"


def _unit(metric: str) -> str:
    for ms in workloads.metric_sets():
        if ms.get(metric):
            return ms.get(metric).unit
    return ""


def charts(table: pd.DataFrame) -> list[Chart]:
    out = []
    for preset, study, rows in comparisons(table):
        for metric, d in rows.groupby("metric", sort=False):
            unit = _unit(metric)
            d = d.assign(config=label(d, [k for k in study.keys if k != "hardware"]).to_numpy(),
                         model=d["model"].astype(str) if "model" in d else "")
            t = f"{metric}: measured vs published — {study.title}"
            top = float(max(d["published"].max(), d["measured"].max()))
            tooltip = [alt.Tooltip("hardware:N"), alt.Tooltip("config:N", title="configuration"),
                       *(alt.Tooltip(f"{c}:N", title=f"{w} {study.software}") for c, w in zip(ran(study), SIDES)),
                       alt.Tooltip("published:Q", format=",.4~g"), alt.Tooltip("measured:Q", format=",.4~g"),
                       alt.Tooltip("ratio:Q", title="measured / published", format=".3f")]
            points = alt.Chart(alt.Data(values=records(d[["hardware", "config", *ran(study),
                                                          "model", "published", "measured", "ratio"]]))).mark_point(
                filled=True, size=60).encode(
                x=alt.X("published:Q", title=f"Published {metric} ({unit})", scale=alt.Scale(zero=True)),
                y=alt.Y("measured:Q", title=f"Measured {metric}, median ({unit})", scale=alt.Scale(zero=True)),
                color=color("model", "model"), shape=alt.Shape("hardware:N"), tooltip=tooltip)
            same = alt.Chart(alt.Data(values=[{"x": 0, "y": 0}, {"x": top, "y": top}])).mark_line(
                color="#555", strokeDash=[6, 4]).encode(x=alt.X("x:Q"), y=alt.Y("y:Q"))
            per = f"configuration and published {study.software}" if study.software else "configuration"
            subtitle = f"one mark per matched {per}; dashed: measured = published"
            spec = to_spec(base_config(alt.layer(same, points).properties(
                width=WIDTH, height=HEIGHT, title=alt.Title(t, subtitle=subtitle))))
            summary = (f"{len(d)} comparison{'s' if len(d) != 1 else ''}; measured / published: median "
                       f"{fmt_num(d['ratio'].median())}, from {fmt_num(d['ratio'].min())} to "
                       f"{fmt_num(d['ratio'].max())}.")
            note = study.notes.get(metric)
            out.append(Chart(chart_id(preset["file"], metric), t, summary + (f" Published: {note}." if note else ""),
                             spec))
    return out


def context(table: pd.DataFrame) -> dict[str, Any]:
    sections = []
    for preset, study, rows in comparisons(table):
        shown = rows.head(MAX_ROWS)
        sections.append({
            "id": anchor(preset["file"]), "title": study.title, "preset": preset["file"],
            "notes": str(preset.get("notes") or ""), "attribution": study.attribution,
            "metrics": [{"name": m, "note": study.notes.get(m, ""), "id": chart_id(preset["file"], m)}
                        for m in rows["metric"].unique()],
            "keys": list(study.keys), "n": len(rows), "software": study.software,
            "rows": [{"keys": [r[k] for k in study.keys],
                      "ran": [r[c] for c in ran(study)],
                      "metric": r["metric"], "published": fmt_num(r["published"]), "measured": fmt_num(r["measured"]),
                      "ratio": fmt_num(r["ratio"])} for _, r in shown.iterrows()]})
    return {"sections": sections, "max_rows": MAX_ROWS}


PAGE = Page(slug="studies", title="Published studies", template="studies.html", context=context, charts=charts,
            applies=lambda table: bool(comparisons(table)), order=60)
