"""Published reference figures compared with measured points: the machinery, whatever the workload.

Each workload declares its studies (jobs.study.Study in its package's study.py, listed in its MetricSet.studies):
how its shipped figures read into its own columns, which columns identify one configuration and what a measured
point must share with them. Here they are loaded, selected, matched and compared. The figures are tidy CSV copies
in ``analysis/published/`` (see its README.md for sources and licences), shipped as package data; a study whose
file is missing loads as an empty table with its columns.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from analysis.derived import add_derived
from analysis.distinct import per_distinct
from jobs import workloads
from jobs.study import Study

REFERENCES = Path(__file__).resolve().parent / "published"


def model_names() -> dict[str, str]:
    """HF id -> accelsweep model name, from the `hf_id` of every shipped model config."""
    from jobs import conf

    return {cfg["hf_id"]: cfg["name"] for cfg in conf.group("model").values() if cfg.get("hf_id")}


def hardware_previous() -> dict[str, str | None]:
    """hardware -> its previous generation, from the shipped hardware files."""
    from jobs import conf

    return {name: hw.get("previous") for name, hw in conf.group("hardware").items()}


def studies() -> dict[str, Study]:
    """Every registered workload's studies, by name (what a preset's experiment.reference names)."""
    out: dict[str, Study] = {}
    for ms in workloads.metric_sets():
        for s in ms.studies:
            if out.setdefault(s.name, s) is not s:
                raise ValueError(f"study {s.name!r} is declared by two workloads; a study has one name")
    return out


def load(study: Study, directory: Path | str = REFERENCES) -> pd.DataFrame:
    """The study's published figures in accelsweep's columns: a model named by its Hugging Face id gets its
    accelsweep name, and with `study.derive` scaling efficiency and generation speedup are computed by
    analysis.derived, the same code as for measured points."""
    rows = study.load(Path(directory))
    if rows is None:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in study.columns})
    if "model" in rows:
        names = model_names()
        rows = rows.assign(model=rows["model"].map(lambda m: names.get(m, m)))
    if study.derive:
        rows = add_derived(rows.assign(hardware_previous=rows["hardware"].map(hardware_previous())))
    return rows[list(study.columns)].reset_index(drop=True)


def _allowed(values: pd.Series, allowed: Iterable[object]) -> pd.Series:
    """Whether each value is one of `allowed`: compared as numbers where those are numbers, else as text."""
    allowed = list(allowed)
    if all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in allowed):
        return pd.to_numeric(values, errors="coerce").isin(allowed)
    return values.astype(str).isin([str(a) for a in allowed])


def measured(study: Study, table: pd.DataFrame | None) -> pd.DataFrame:
    """The ok rows of `table` in the study's setting with a value in every key (no rows when `table` lacks a
    column this needs)."""
    need = list(dict.fromkeys([*study.keys, "status", *study.setting]))
    if table is None or any(c not in table for c in need):
        return pd.DataFrame(columns=need)
    keep = table["status"].astype(str).eq("ok")
    for col, allowed in study.setting.items():
        keep &= _allowed(table[col], allowed)
    return table[keep].dropna(subset=list(study.keys))


def matching(study: Study, table: pd.DataFrame | None, published: pd.DataFrame) -> pd.DataFrame:
    """The rows of `published` whose keys equal those of a measured row in the study's setting."""
    m = measured(study, table)
    if m.empty or published.empty:
        return published.iloc[0:0]
    keys = list(study.keys)
    seen = set(_keys(m[keys]))
    return published[[k in seen for k in _keys(published[keys])]]


def _keys(rows: pd.DataFrame) -> list[tuple]:
    """_key of every row (computed once per distinct row)."""
    return per_distinct(rows, lambda d: [_key(r) for r in d.itertuples(index=False)])


def _key(r: tuple) -> tuple:
    """One configuration, comparable between measured and published rows: hardware in lower case, whole numbers
    as int (a study's keys start with hardware)."""
    hw, *rest = r
    return (str(hw).lower(), *(int(v) if isinstance(v, (int, float)) and float(v).is_integer() else str(v)
                               for v in rest))


def software_names(rows: pd.DataFrame, by: str | list[str], column: str) -> pd.Series:
    """Per group of `rows`: the values of `column` (what ran them), sorted and comma-joined ("" where none was
    recorded)."""
    if not column or column not in rows:
        return pd.Series(dtype=str)
    by = [by] if isinstance(by, str) else by
    e = rows[[*by, column]].dropna(subset=[column]).astype({column: str}).drop_duplicates()
    return e.sort_values(column).groupby(by, sort=False)[column].agg(", ".join)


def compare_study(table: pd.DataFrame, study: Study, metrics: list[str],
                  published: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long table, one row per matched configuration x published software x metric: the configuration's keys,
    the study's software column (the published one) and measured_<software> (what the matching points ran),
    `metric`, `published`, `measured` (median over matching points) and `ratio` = measured / published.
    `published`: the study's figures when the caller has them loaded (default: load them)."""
    sw = study.software
    named = [sw, f"measured_{sw}"] if sw else []
    cols = [*study.keys, *named, "metric", "published", "measured", "ratio"]
    ok = measured(study, table) if table is not None and len(table) else pd.DataFrame()
    pub = matching(study, table, load(study) if published is None else published) if len(ok) else pd.DataFrame()
    if ok.empty or pub.empty:
        return pd.DataFrame(columns=cols)
    keys = list(study.keys)
    ok = ok.assign(_k=_keys(ok[keys]))
    pub = pub.assign(_k=_keys(pub[keys]))
    parts = []
    names = software_names(ok, "_k", sw)
    for metric in [m for m in metrics if m in pub and m in ok]:
        med = ok.groupby("_k")[metric].median()
        d = pub[[*keys, *named[:1], "_k"]].assign(metric=metric,
                                                  published=pd.to_numeric(pub[metric], errors="coerce"))
        d["measured"] = d["_k"].map(med).astype(float)
        if sw:
            d[named[1]] = d["_k"].map(names).fillna("") if sw in ok else d["_k"].map(names)
        parts.append(d[d["published"].notna() & d["measured"].notna()])
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    out["ratio"] = out["measured"] / out["published"]
    return out[cols].sort_values([*keys, *named[:1], "metric"], kind="stable").reset_index(drop=True)
