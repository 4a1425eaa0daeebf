"""Chart helpers shared by every page: palette, Chart container, spec embedding, summaries.

A page module returns a list of :class:`Chart`; the templates render each one with the
``chart`` macro in ``templates/_macros.html``. Charts are built with altair and rendered
client-side by vegaEmbed from the JSON spec embedded in the page.
"""
from __future__ import annotations

import json
import math
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


def empty_chart(chart_id: str, title: str, reason: str = NO_DATA) -> Chart:
    return Chart(chart_id, title, reason, None)


def to_spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """Altair chart -> Vega-Lite dict with NaN replaced by null (JSON has no NaN).

    ``$schema`` is dropped: it is only a URL (never fetched) and the page passes mode "vega-lite".
    """
    spec = _clean(chart.to_dict())
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


def base_config(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    return chart.configure_axis(labelFontSize=11, titleFontSize=12).configure_title(fontSize=14, anchor="start")


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

