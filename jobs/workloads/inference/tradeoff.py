"""The Inference page's quantization trade-off: each quantized point's accuracy loss against its speedup over its
unquantized twin (analysis.quantized), with MLPerf's two quality targets drawn as lines."""
from __future__ import annotations

import altair as alt
import pandas as pd

from analysis.quantized import tradeoffs
from jobs.accuracy import QUALITY_TARGETS
from report.charts import CONFIG, HEIGHT, WIDTH, Chart, empty_chart, fmt_num, to_spec

ID, TITLE = "quant-0", "Quantization: accuracy loss vs speedup"
NONE = ("no quantized point with an unquantized twin: sweep precision=fp32,int8,int4 (for example with "
        "workload.engine=llamacpp) to fill this")


def tradeoff_chart(table: pd.DataFrame) -> Chart:
    data = tradeoffs(table)
    if data.empty:
        return empty_chart(ID, TITLE, NONE)
    data = data.assign(series=data["hardware"].astype(str) + " · " + data["engine"].astype(str) + " · "
                       + data["precision"].astype(str) + " vs " + data["versus"].astype(str),
                       verdict=data["status"].map({"ok": "passed the gate", "inaccurate": "inaccurate"}))
    x = alt.X("speedup:Q", title="Speedup over the unquantized twin (×, 95 % interval)", scale=alt.Scale(zero=False))
    y = alt.Y("accuracy_loss_pct:Q", title="Accuracy loss: 100 × (1 − perplexity ratio) (%)")
    base = alt.Chart(data)
    points = base.mark_point(size=80, filled=True).encode(
        x, y, color=alt.Color("series:N", title="hardware · engine · precision"),
        shape=alt.Shape("verdict:N", title="accuracy gate"),
        tooltip=["hardware", "engine", "model", "precision", "versus", "batch_size", "cards",
                 alt.Tooltip("speedup:Q", format=".3f"), alt.Tooltip("speedup_lo:Q", format=".3f"),
                 alt.Tooltip("speedup_hi:Q", format=".3f"), alt.Tooltip("quality:Q", format=".5f"), "status"])
    bars = base.mark_rule().encode(alt.X("speedup_lo:Q"), alt.X2("speedup_hi:Q"), y, color="series:N")
    lines = pd.DataFrame({"loss": [100 * (1 - t) for t in QUALITY_TARGETS],
                          "target": [f"MLPerf {t:.1%} of the reference" for t in QUALITY_TARGETS]})
    rules = alt.Chart(lines).mark_rule(strokeDash=[4, 3], color="#888").encode(
        y="loss:Q", tooltip=["target"])
    spec = (rules + bars + points).properties(width=WIDTH, height=HEIGHT, title=TITLE, config=CONFIG)
    return Chart(ID, TITLE, _summary(data), to_spec(spec))


def _summary(data: pd.DataFrame) -> str:
    best = data.sort_values("speedup", ascending=False).iloc[0]
    kept = int(data["meets_0.99"].fillna(False).sum())
    return (f"{len(data)} quantized point(s) against their unquantized twins; {kept} keep MLPerf's 99 % of the "
            f"reference's quality. Fastest: {best['precision']} on {best['hardware']} ({best['engine']}, batch "
            f"{fmt_num(best['batch_size'])}) at {best['speedup']:.2f}× [{fmt_num(best['speedup_lo'])}, "
            f"{fmt_num(best['speedup_hi'])}] over {best['versus']}, {_loss(best['accuracy_loss_pct'])}.")


def _loss(pct: float) -> str:
    if pd.isna(pct):
        return "its quality not measured"
    return (f"losing {pct:.2f} % of the reference's quality" if pct >= 0 else
            f"its perplexity {-pct:.2f} % better than the reference's (the quantized model finds the tokens likelier)")
