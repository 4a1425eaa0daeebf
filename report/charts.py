"""Chart helpers shared by every page: palette, Chart container, spec embedding, summaries.

A page module returns a list of :class:`Chart`; the templates render each one with the
``chart`` macro in ``templates/_macros.html``. Charts are built with altair and rendered
client-side by vegaEmbed from the JSON spec embedded in the page.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import altair as alt
import pandas as pd

# Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"): chosen explicitly because its
# eight colours stay distinguishable under protanopia, deuteranopia and tritanopia, which
# tableau10 / category10 / dark2 / set2 do not guarantee. Black is last so it is used least.
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"]
# Yellow (#F0E442) is weak on white for thin lines, so it is moved towards the end.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"]

NO_DATA = "no successful points"
WIDTH, HEIGHT = 560, 300
# A chart draws at most this many series (lines or bar groups); beyond that it is unreadable, and the
# page would grow with the sweep. The table downloads keep everything.
MAX_SERIES = 12


@dataclass
class Chart:
    """One chart on a page. ``spec`` is None when there is nothing to draw (then ``summary`` says why)."""

    id: str
    title: str
    summary: str
    spec: dict[str, Any] | None = None

    @property
    def spec_json(self) -> str:
        return embed_json(self.spec) if self.spec is not None else ""


def embed_json(obj: Any) -> str:
    """JSON safe to put inside <script type="application/json">: no '</', '<!--' or '&' sequences survive."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, default=_json_default)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def anchor(*parts: object) -> str:
    """Stable HTML id fragment from names: a readable slug plus a short hash, so distinct names never collide."""
    raw = "\x1f".join(map(str, parts))
    slug = re.sub(r"[^a-z0-9]+", "-", raw.lower()).strip("-")[:48]
    digest = hashlib.sha1(raw.encode()).hexdigest()[:6]
    return f"{slug}-{digest}" if slug else digest


def limit_series(data: pd.DataFrame, value: str, keys: list[str], within: list[str] | None = None,
                 higher: bool = True, k: int = MAX_SERIES) -> tuple[pd.DataFrame, int, int]:
    """Keep at most ``k`` series per ``within`` group: the best and the worst halves by each series' best
    ``value`` (max if ``higher``), so the chart still shows the whole range. Returns (data, shown, total)."""
    within = within or []
    score = data.groupby(keys, dropna=False, sort=False)[value].agg("max" if higher else "min").rename("_score")
    score = score.reset_index()
    total = len(score)
    if total <= k and not within:
        return data, total, total

    def pick(g: pd.DataFrame) -> pd.DataFrame:
        g = g.sort_values("_score", ascending=not higher, kind="stable")
        return g if len(g) <= k else pd.concat([g.head(k - k // 2), g.tail(k // 2)])

    kept = pd.concat([pick(g) for _, g in score.groupby(within, dropna=False, sort=False)]) if within else pick(score)
    out = data.merge(kept[keys], on=keys, how="inner")
    return out, len(kept), total


def series_note(shown: int, total: int, higher: bool = True) -> str:
    if shown >= total:
        return ""
    best = "highest" if higher else "lowest"
    return (f" {shown} of {total} series drawn (those with the {best} and the {'lowest' if higher else 'highest'} "
            f"values); all are in data/results.parquet and data/results.csv.gz.")


def empty_chart(chart_id: str, title: str, reason: str = NO_DATA) -> Chart:
    return Chart(chart_id, title, reason, None)


def to_spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """Altair chart -> Vega-Lite dict with NaN replaced by null (JSON has no NaN).

    ``$schema`` is dropped: it is only a URL (never fetched) and the page passes mode "vega-lite".
    """
    spec = _clean(chart.to_dict(validate=False))   # validating every spec was a third of a large report's build
    spec.pop("$schema", None)
    return spec


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame -> list of plain dicts (NaN -> None) for inline chart data."""
    out = []
    for row in frame.to_dict(orient="records"):
        out.append({k: _clean(v.item() if hasattr(v, "item") else v) for k, v in row.items()})
    return out


def color(field: str, title: str) -> alt.Color:
    return alt.Color(f"{field}:N", title=title, scale=alt.Scale(range=PALETTE))


# Point shapes cycled beside the colours: 8 colours x 7 shapes name 56 series apart without hovering.
SHAPES = ["circle", "square", "triangle-up", "diamond", "cross", "triangle-down", "triangle-right"]


def series_marks(field: str, title: str) -> dict[str, Any]:
    """Colour and point shape both from `field`, so every series (every combination of the swept parameters
    its label names) is told apart in the chart and one legend lists them."""
    legend = alt.Legend(labelLimit=360, titleLimit=360, symbolLimit=MAX_SERIES * 2)
    return {"color": alt.Color(f"{field}:N", title=title, scale=alt.Scale(range=PALETTE), legend=legend),
            "shape": alt.Shape(f"{field}:N", title=title, scale=alt.Scale(range=SHAPES), legend=legend)}


def series_stroke(field: str) -> alt.Stroke:
    """The colour of `field`'s series for lines and bars beside series_marks' points: the stroke channel with the
    same palette and domain but no legend, so the points' colour and shape make one legend (Vega-Lite merges
    legends only within one channel set)."""
    return alt.Stroke(f"{field}:N", scale=alt.Scale(range=PALETTE), legend=None)


def interval_text(lo: Any, hi: Any, n: Any) -> str:
    """', 95% interval a–b, n=3' for a caption, from a derived metric's bootstrap interval ('' when not known)."""
    parts = [f"95% interval {fmt_num(lo)}–{fmt_num(hi)}" if pd.notna(lo) else "", f"n={int(n)}" if pd.notna(n) else ""]
    return "".join(f", {p}" for p in parts if p)


def spread_text(p10: Any, p90: Any, n: Any) -> str:
    """'p10–p90 a–b, n=3' from what was recorded ('' when nothing was)."""
    parts = []
    if p10 is not None and p90 is not None and pd.notna(p10) and pd.notna(p90):
        parts.append(f"p10–p90 {fmt_num(p10)}–{fmt_num(p90)}")
    if n is not None and pd.notna(n):
        parts.append(f"n={int(n)}")
    return ", ".join(parts)


def fill_hint(values: Any, what: str, sweep: str) -> str:
    """' Only one <what> (v): sweep <key>=a,b to fill this.' when the chart's x axis has a single value."""
    values = sorted({v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))})
    if len(values) != 1:
        return ""
    v = values[0]
    return f" Only one {what} ({int(v) if isinstance(v, float) and v.is_integer() else v}): sweep {sweep} to fill this."


# The axis and title settings of every chart. A layered chart built in one call (alt.layer(..., config=CONFIG))
# is copied once: altair deep-copies every layer on each later properties or configure_* call.
CONFIG = alt.Config(axis=alt.AxisConfig(labelFontSize=11, titleFontSize=12),
                    title=alt.TitleConfig(fontSize=14, anchor="start"))


def base_config(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    return chart.properties(config=CONFIG)


def fmt_num(value: Any, digits: int = 3) -> str:
    """Short human number: 3 significant digits, '—' for missing."""
    if value is None:
        return "—"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(v):
        return "—"
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"

