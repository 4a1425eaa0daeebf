"""Hardware ratio (jobs.metrics HARDWARE_RATIO): every hardware's main throughput against a baseline hardware's,
configuration by configuration, across vendors and generations alike.

Two ok points are matched when they share the workload, model, precision, cards, device_override, the workload's
parameters (MetricSet.keys, analysis.derived.param_keys), its software (MetricSet.software: the engine) and that
software's version to the minor (MetricSet.versions: vllm 0.11.1 with vllm 0.11.2, not with 0.10). Where a hardware
has no such point for a configuration but the baseline has one that differs only in engine, engine version or
precision, that pair is compared too and labelled ("engine differs: hf vs vllm"); summaries count it apart.

ratio = median(hardware) / median(baseline), with the 95 % interval of analysis.derived.ratio_intervals (the
scaling and speedup intervals' bootstrap over both points' per-repeat samples, where each has two or more: a
point measured once, as a serving load is, gives no interval); a hardware is "ahead" where the
whole interval is above 1, "behind" where it is below, "no clear difference" where it holds 1. An interval above
or below 1 is "unconfirmed" where either point did not reach its noise target or shared its cores with other
processes (uncertain()): the interval is over each point's repeats, and such a point's median moves between runs by
more than that (the same CPU under three hardware names, measured one point after another on a 2-core VM, gave
0.75x to 1.47x over four sweeps, mostly between points that had not settled). Beside it: the
ratio of work per unit of cost (the throughput ratio x the baseline's card-hour price / the hardware's, where both
are priced in one currency; its interval scaled alike), of work per joule (the workload's metric in work/J) and of
each latency the workload's overview lists (lower is better: below 1, the hardware answers faster). Per card, the
ratio is the throughput ratio itself: matched points have equal cards.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.derived import basis, client_bound, has_samples, param_keys, ratio_intervals, workload_sets
from jobs.metrics import HIGHER, LOWER, MetricSet
from jobs.noise import median_ci

AHEAD, BEHIND, NO_CLEAR, NO_INTERVAL = "ahead", "behind", "no clear difference", "no interval"
UNCONFIRMED = "unconfirmed"
VERDICTS = (AHEAD, BEHIND, UNCONFIRMED, NO_CLEAR, NO_INTERVAL)
_VERSION = "_software_version"   # helper column: each point's engine version to the minor ("" where unrecorded)


@dataclass
class HardwareComparison:
    baseline: str | None       # the baseline hardware (None: the table has no ok point)
    # one row per hardware x matched configuration: workload, hardware, baseline, row and base_row (the two points'
    # index labels in the table given), cards, value, value_base, n, n_base, ratio, lo, hi, verdict, differs ("" like
    # for like), software and software_base (e.g. "vllm 0.11"), cost_ratio/_lo/_hi, joule_ratio, <latency>_ratio
    pairs: pd.DataFrame
    latency: dict[str, list[str]]   # workload -> the latency metrics whose ratios `pairs` holds


def ok_hardware_counts(table: pd.DataFrame) -> pd.Series:
    """Ok points per hardware, most first (ties by name)."""
    if table.empty or "hardware" not in table or "status" not in table:
        return pd.Series(dtype=int)
    counts = table.loc[table["status"].eq("ok"), "hardware"].dropna().astype(str).value_counts()
    return counts.sort_index().sort_values(ascending=False, kind="stable")


def default_baseline(table: pd.DataFrame) -> str | None:
    """The hardware with the most ok points (the first by name among equals)."""
    counts = ok_hardware_counts(table)
    return str(counts.index[0]) if len(counts) else None


def check_baseline(table: pd.DataFrame, baseline: str) -> str | None:
    """Why `baseline` cannot be the baseline hardware of `table`, or None."""
    counts = ok_hardware_counts(table)
    if baseline in counts.index:
        return None
    have = ", ".join(f"{h} ({n} ok)" for h, n in counts.items()) or "none"
    return f"baseline hardware {baseline!r} has no ok point in the results; hardware with ok points: {have}"


def latency_metrics(ms: MetricSet) -> list[str]:
    """The latencies compared across hardware: the overview's metrics in seconds where lower is better."""
    return [m for m in ms.overview if (d := ms.get(m)) and d.better == LOWER and d.unit == "s" and d.cross_hardware]


def energy_metric(ms: MetricSet) -> str | None:
    """The workload's work per joule, if it declares one."""
    return next((m.name for m in ms.metrics if m.unit.endswith("/J") and m.better == HIGHER), None)


def version_family(value: object) -> str:
    """'0.11' of '0.11.2+cpu' (major.minor); the text itself where it has no such form; '' where missing."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    text = str(value)
    found = re.match(r"\s*v?(\d+)\.(\d+)", text)
    return f"{found.group(1)}.{found.group(2)}" if found else text


def compare_hardware(table: pd.DataFrame, baseline: str | None = None) -> HardwareComparison:
    """Every hardware against `baseline` (default: default_baseline) at every configuration both measured.
    ValueError (check_baseline's words) for a baseline with no ok point."""
    if "workload" not in table or "hardware" not in table:
        return HardwareComparison(None, pd.DataFrame(columns=["workload", "hardware", "ratio"]), {})
    if baseline is None:
        baseline = default_baseline(table)
    elif why := check_baseline(table, baseline):
        raise ValueError(why)
    parts, latency = [], {}
    if baseline is not None:
        ok = table["status"].eq("ok") & table["hardware"].notna() & ~client_bound(table)
        for ms in workload_sets(table[ok]):
            rows = table.loc[ok & table["workload"].eq(ms.workload), _columns(table, ms)]
            if ms.throughput in rows and rows["hardware"].astype(str).eq(baseline).any():
                latency[ms.workload] = [m for m in latency_metrics(ms) if m in rows]
                parts.append(_compare(rows, ms, baseline, latency[ms.workload]))
    parts = [p for p in parts if len(p)]
    pairs = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["workload", "hardware", "ratio"])
    return HardwareComparison(baseline, pairs, latency)


def _columns(table: pd.DataFrame, ms: MetricSet) -> list[str]:
    """The columns a comparison of `ms`'s points reads (a wide table is not copied whole)."""
    t = ms.throughput
    wanted = ["workload", "hardware", "cards", "precision", *param_keys(table, ms), *ms.software,
              *(c for _, c in ms.versions), t, f"{t}_samples", f"{t}_n", "price_card_hour", "price_currency",
              energy_metric(ms), *latency_metrics(ms), "stable", "cores_shared"]
    return [c for c in dict.fromkeys(wanted) if c and c in table]


def _compare(rows: pd.DataFrame, ms: MetricSet, baseline: str, latency: list[str]) -> pd.DataFrame:
    x = basis(rows)
    rows = rows[x.gt(0)]
    if rows.empty:
        return pd.DataFrame()
    software = [k for k in ms.software if k in rows]
    rows = rows.assign(hardware=rows["hardware"].astype(str), **{_VERSION: _versions(rows, ms, software)})
    like = [k for k in param_keys(rows, ms) if k != "precision" and k not in software] + \
        (["cards"] if "cards" in rows else [])
    differ = [k for k in ("precision", *software, _VERSION) if k in rows]
    loose = rows.groupby(like, dropna=False, sort=False).ngroup().to_numpy() if like else np.zeros(len(rows), int)
    full = rows.groupby(like + differ, dropna=False, sort=False).ngroup().to_numpy()
    ids = pd.DataFrame({"pos": np.arange(len(rows)), "hardware": rows["hardware"].to_numpy(), "loose": loose,
                        "full": full})
    base, other = ids[ids["hardware"].eq(baseline)], ids[~ids["hardware"].eq(baseline)]
    other = other.drop_duplicates(["hardware", "full"])   # the same configuration twice: its first point
    exact = other.merge(base.drop_duplicates("full")[["full", "pos"]], on="full", suffixes=("", "_base"))
    matched = pd.MultiIndex.from_frame(exact[["hardware", "loose"]])
    rest = other[~pd.MultiIndex.from_frame(other[["hardware", "loose"]]).isin(matched)]
    near = rest.merge(base[["loose", "pos"]], on="loose", suffixes=("", "_base"))
    if len(near):   # the baseline point that differs least: same precision first, then same software
        values = rows[differ].astype(str).to_numpy()
        unlike = values[near["pos"].to_numpy()] != values[near["pos_base"].to_numpy()]
        prec = np.array([k == "precision" for k in differ])
        near = near.assign(_score=unlike[:, prec].any(axis=1) * 2 + unlike[:, ~prec].any(axis=1)).sort_values(
            ["pos", "_score"], kind="stable").drop_duplicates("pos").drop(columns="_score")
    pairs = pd.concat([exact.assign(like=True), near.assign(like=False)], ignore_index=True)
    if pairs.empty:
        return pd.DataFrame()
    return _ratios(rows, ms, baseline, pairs["pos"].to_numpy(), pairs["pos_base"].to_numpy(),
                   pairs["like"].to_numpy(bool), software, latency)


def _versions(rows: pd.DataFrame, ms: MetricSet, software: list[str]) -> pd.Series:
    """Each row's software version to the minor, from the column MetricSet.versions names for its software."""
    out = pd.Series("", index=rows.index, dtype=object)
    for value, column in ms.versions:
        if column not in rows:
            continue
        for key in software:
            mine = rows[key].astype(str).eq(value)
            if mine.any():
                found = rows.loc[mine, column]
                out[mine] = found.astype(object).map({v: version_family(v) for v in found.dropna().unique()}) \
                    .astype(object).where(found.notna(), "")
    return out


def _ratios(rows: pd.DataFrame, ms: MetricSet, baseline: str, i: np.ndarray, j: np.ndarray, like: np.ndarray,
            software: list[str], latency: list[str]) -> pd.DataFrame:
    x = basis(rows).to_numpy(float)
    t = ms.throughput
    n = pd.to_numeric(rows[f"{t}_n"], errors="coerce").to_numpy(float) if f"{t}_n" in rows else np.full(len(rows), np.nan)
    out = pd.DataFrame({"workload": ms.workload, "hardware": rows["hardware"].to_numpy()[i], "baseline": baseline,
                        "row": rows.index.to_numpy()[i], "base_row": rows.index.to_numpy()[j],
                        "cards": pd.to_numeric(rows["cards"], errors="coerce").to_numpy()[i] if "cards" in rows
                        else np.nan,
                        "value": x[i], "value_base": x[j], "n": n[i], "n_base": n[j], "ratio": x[i] / x[j],
                        "lo": np.nan, "hi": np.nan, "like": like,
                        "software": _software_text(rows, software, i), "software_base": _software_text(rows, software, j),
                        "differs": _differs(rows, software, i, j, like)})
    samples = rows[f"{t}_samples"].to_numpy(object) if f"{t}_samples" in rows else np.full(len(rows), None)
    has = np.zeros(len(rows), bool)
    used = np.union1d(i, j)   # only the compared points' samples are looked at
    has[used] = [has_samples(samples[k]) and len(samples[k]) > 1 for k in used]   # one value: no spread known
    both = np.flatnonzero(has[i] & has[j])
    if len(both):
        lo, hi = ratio_intervals(samples[i[both]], samples[j[both]], np.ones(len(both)))
        out.loc[both, "lo"], out.loc[both, "hi"] = lo, hi
    shaky = uncertain(rows)
    out["uncertain"] = shaky[i] | shaky[j]
    out["verdict"] = verdicts(out["lo"], out["hi"], out["uncertain"].to_numpy())
    factor = _price_factor(rows, i, j)
    out["cost_ratio"], out["cost_lo"], out["cost_hi"] = (out["ratio"] * factor, out["lo"] * factor,
                                                         out["hi"] * factor)
    energy = energy_metric(ms)
    if energy and energy in rows:
        e = pd.to_numeric(rows[energy], errors="coerce").where(lambda v: v > 0).to_numpy(float)
        out["joule_ratio"] = e[i] / e[j]
    for m in latency:
        v = pd.to_numeric(rows[m], errors="coerce").where(lambda s: s > 0).to_numpy(float)
        out[f"{m}_ratio"] = v[i] / v[j]
    return out


def verdicts(lo: pd.Series, hi: pd.Series, shaky: np.ndarray | None = None) -> pd.Series:
    """ahead (whole interval above 1), behind (below), unconfirmed (either, with a `shaky` point), no clear
    difference (it holds 1), no interval."""
    out = pd.Series(NO_CLEAR, index=lo.index, dtype=object)
    out[lo.gt(1)] = AHEAD
    out[hi.lt(1)] = BEHIND
    if shaky is not None:
        out[out.isin((AHEAD, BEHIND)).to_numpy() & np.asarray(shaky, bool)] = UNCONFIRMED
    out[lo.isna() | hi.isna()] = NO_INTERVAL
    return out


def uncertain(rows: pd.DataFrame) -> np.ndarray:
    """Points whose median did not reach the noise target (stable False) or that ran while other processes used
    their cores (cores_shared, jobs.devices.HostLoad): their spread between runs can exceed their interval."""
    out = np.zeros(len(rows), bool)
    for col in ("stable", "cores_shared"):
        if col in rows:
            v = rows[col].to_numpy(object)
            out |= np.array([x is not None and not (isinstance(x, float) and np.isnan(x)) and bool(x) == (col != "stable")
                             for x in v], bool)
    return out


def _price_factor(rows: pd.DataFrame, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The baseline's card-hour price / the hardware's, where both are priced in one currency (else NaN)."""
    if "price_card_hour" not in rows:
        return np.full(len(i), np.nan)
    price = pd.to_numeric(rows["price_card_hour"], errors="coerce").where(lambda p: p > 0).to_numpy(float)
    factor = price[j] / price[i]
    if "price_currency" in rows:
        cur = rows["price_currency"].astype(str).to_numpy()
        factor = np.where(cur[i] == cur[j], factor, np.nan)
    return factor


def _software_text(rows: pd.DataFrame, software: list[str], pos: np.ndarray) -> np.ndarray:
    """'vllm 0.11' per row at `pos` (the software and its version to the minor, where recorded)."""
    if not software:
        return np.full(len(pos), "", dtype=object)
    text = rows[software].astype(str).agg(" ".join, axis=1) if len(software) > 1 else rows[software[0]].astype(str)
    text = (text + " " + rows[_VERSION]).str.strip()
    return text.to_numpy(object)[pos]


def _differs(rows: pd.DataFrame, software: list[str], i: np.ndarray, j: np.ndarray, like: np.ndarray) -> list[str]:
    """'engine differs: hf vs vllm; precision differs: bf16 vs fp16' per pair that is not like for like."""
    out = [""] * len(i)
    for k in np.flatnonzero(~like):
        a, b = rows.iloc[i[k]], rows.iloc[j[k]]
        said = []
        for key in software:
            if str(a[key]) != str(b[key]):
                said.append(f"{key} differs: {a[key]} vs {b[key]}")
            elif a[_VERSION] != b[_VERSION]:
                said.append(f"{key} version differs: {a[key]} {a[_VERSION] or '(unrecorded)'} vs "
                            f"{b[_VERSION] or '(unrecorded)'}")
        if "precision" in rows and str(a["precision"]) != str(b["precision"]):
            said.append(f"precision differs: {a['precision']} vs {b['precision']}")
        out[k] = "; ".join(said)
    return out


def summary(pairs: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per workload and hardware, over its like-for-like pairs: configurations, the median ratio and the
    distribution-free interval of that median over the configurations (jobs.noise.median_ci; none below six),
    the count of each verdict, the software on both sides, and how many labelled (not like for like) pairs there
    are besides."""
    out = []
    for (wl, hw), g in pairs.groupby(["workload", "hardware"], sort=True):
        like = g[g["like"].astype(bool)]
        ratios = like["ratio"].dropna().to_numpy(float)
        ci = median_ci(list(ratios), confidence) if len(ratios) else None
        counts = like["verdict"].value_counts()
        out.append({"workload": wl, "hardware": hw, "baseline": g["baseline"].iloc[0], "configs": len(like),
                    "ratio": float(np.median(ratios)) if len(ratios) else np.nan,
                    "lo": ci[0] if ci else np.nan, "hi": ci[1] if ci else np.nan,
                    **{v: int(counts.get(v, 0)) for v in VERDICTS},
                    "software": sorted(set(like["software"]) | set(like["software_base"])),
                    "labelled": int(len(g) - len(like))})
    return pd.DataFrame(out)
