"""What a "fastest"/"best" claim may say: only what the numbers support (issue 26).

A ranking names a winner only when the winner's median has a 95% interval, its point reached the noise target,
and no other candidate's interval reaches into the winner's; otherwise it says so ("no clear winner", or the
winner unconfirmed). Points run with device_override measure the override device under several names, and speed
under fake quantization is the float model's speed (a workload declares such points: MetricSet.unranked):
neither is ranked.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from report.charts import fmt_num
from report.overrides import overridden

N_NAMED = 3   # runners-up named in a "no clear winner" sentence; the rest counted


def _num(value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return v


def _has(value: Any) -> bool:
    return pd.notna(_num(value))


def _unstable(value: Any) -> bool:
    """Recorded as not stable (False, numpy's too); missing (None, NaN) is not."""
    return value is not None and not (isinstance(value, float) and pd.isna(value)) and not bool(value)


@dataclass
class Ranking:
    verdict: str              # "clear" | "no clear winner" | "unconfirmed" | "not ranked"
    best: pd.Series | None    # the row with the best median (None: not ranked)
    why: str = ""             # not ranked / unconfirmed: the reason, in words
    close: list[pd.Series] = field(default_factory=list)   # no clear winner: the rows within the spread


def spread_words(row: pd.Series) -> str:
    """'95% interval a–b, n=N' or 'n=N, no interval' (+ ', unstable') for a row of frame()."""
    n = _num(row.get("_n"))
    n_text = f"n={int(n)}" if pd.notna(n) else "n unknown"
    if _has(row.get("_lo")) and _has(row.get("_hi")):
        text = f"95% interval {fmt_num(row['_lo'])}–{fmt_num(row['_hi'])}, {n_text}"
    else:
        text = f"{n_text}, no interval"
    if _unstable(row.get("_stable")):
        text += ", unstable"
    return text


def frame(rows: pd.DataFrame, value: str, lo: str | None = None, hi: str | None = None, n: str | None = None,
          stable: str | None = "stable") -> pd.DataFrame:
    """`rows` with the columns rank() reads: _value, _lo, _hi, _n, _stable (False only where recorded False)."""
    def col(name: str | None) -> pd.Series:
        if name and name in rows:
            return pd.to_numeric(rows[name], errors="coerce")
        return pd.Series(float("nan"), index=rows.index)

    st = rows[stable] if stable and stable in rows else pd.Series(None, index=rows.index, dtype=object)
    flag = pd.Series([False if _unstable(v) else None for v in st], index=rows.index, dtype=object)
    return rows.assign(_value=col(value), _lo=col(lo), _hi=col(hi), _n=col(n), _stable=flag)


def unranked(rows: pd.DataFrame, declared: tuple[tuple[str, str, str], ...]) -> tuple[pd.Series, str] | None:
    """(rows whose speed is not ranked, why) from a MetricSet's `unranked` declarations, or None."""
    mask, why = pd.Series(False, index=rows.index), []
    for column, value, reason in declared:
        if column in rows:
            hit = rows[column].astype(str).eq(str(value))
            if hit.any():
                mask |= hit
                why.append(reason)
    return (mask, "; ".join(why)) if mask.any() else None


def rank(rows: pd.DataFrame, higher: bool = True, *, unranked: tuple[pd.Series, str] | None = None) -> Ranking:
    """The verdict on the best of `rows` (as made by frame()); `unranked`: (rows whose speed is not ranked, why)."""
    if not len(rows):
        return Ranking("not ranked", None, "no points")
    if overridden(rows).all():
        dev = ", ".join(sorted(map(str, rows["device_override"].dropna().unique())))
        return Ranking("not ranked", None, f"every point ran with device_override={dev}: the same device under "
                                           "different hardware names, so their speeds do not rank hardware")
    rows = rows[~overridden(rows)]
    if unranked is not None:
        skip = unranked[0].reindex(rows.index).fillna(False).astype(bool)
        if skip.all():
            return Ranking("not ranked", None, f"every point ran with {unranked[1]}")
        rows = rows[~skip]
    rows = rows[rows["_value"].notna()]
    if not len(rows):
        return Ranking("not ranked", None, "no value")
    best = rows.loc[rows["_value"].idxmax() if higher else rows["_value"].idxmin()]
    if not (_has(best["_lo"]) and _has(best["_hi"])) or _unstable(best["_stable"]):
        what = "it has no interval" if not _has(best["_lo"]) else "it did not reach the noise target"
        return Ranking("unconfirmed", best, f"{what}, so the ranking is not supported by the numbers")
    others = rows.drop(index=best.name)
    close = []
    for _, o in others.iterrows():
        # the other's interval (or, without one, its median) reaches into the best's interval
        edge = o["_hi"] if higher else o["_lo"]
        if not _has(edge):
            edge = o["_value"]
        if (higher and edge >= best["_lo"]) or (not higher and edge <= best["_hi"]):
            close.append(o)
    close.sort(key=lambda o: o["_value"], reverse=higher)
    return Ranking("no clear winner" if close else "clear", best, close=close)


def close_words(r: Ranking, names: pd.Series, unit: str) -> str:
    """'a (12 tokens/s; 95% interval ..., n=6); b (...) and 2 more' for the rows within the best's spread."""
    parts = [f"{names.get(o.name, '?')} ({fmt_num(o['_value'])} {unit}; {spread_words(o)})" for o in r.close[:N_NAMED]]
    more = f" and {len(r.close) - N_NAMED} more" if len(r.close) > N_NAMED else ""
    return "; ".join(parts) + more
