"""Points run with device_override: measured on another device than the hardware they are named after.

The report names such a point's hardware "h100 (override: cpu)" wherever it shows hardware (tables, chart
titles, legends, tooltips, headlines), and leaves it out of generation speedups, the hardware comparison
(report.pages.hardware) and headline findings unless
the user asks (report.build --include-overrides): its numbers describe the override device, not the hardware.
"""
from __future__ import annotations

import pandas as pd

from jobs.metrics import SPEEDUP

IN_FINDINGS = "in_findings"   # column: False for points the headline findings leave out


def overridden(table: pd.DataFrame) -> pd.Series:
    """True for rows run with a device_override (tables from before the parameter have none)."""
    if "device_override" not in table:
        return pd.Series(False, index=table.index)
    return table["device_override"].notna() & table["device_override"].astype(str).ne("")


def hardware_name(hardware: str, override: str | None) -> str:
    return f"{hardware} (override: {override})" if override else hardware


def mark(table: pd.DataFrame, include: bool = False) -> pd.DataFrame:
    """The table as the report shows it: override points' hardware names marked, and unless `include` their
    speedups removed and their rows kept out of the headline findings."""
    ov = overridden(table)
    table = table.assign(**{IN_FINDINGS: include | ~ov})
    if not ov.any():
        return table
    dev = table.loc[ov, "device_override"].astype(str)
    for col in ("hardware", "hardware_previous"):
        if col in table:
            named = ov & table[col].notna()
            table[col] = table[col].astype(object)
            table.loc[named, col] = [hardware_name(h, d) for h, d in zip(table.loc[named, col], dev[named[ov]])]
    if not include:
        for col in (SPEEDUP, f"{SPEEDUP}_lo", f"{SPEEDUP}_hi"):
            if col in table:
                table.loc[ov, col] = float("nan")
    return table


def finding(table: pd.DataFrame) -> dict | None:
    """The headline that says override points exist and how they were treated (see mark)."""
    ov = overridden(table)
    if not ov.any():
        return None
    include = IN_FINDINGS not in table or bool(table.loc[ov, IN_FINDINGS].all())
    devices = ", ".join(sorted(map(str, table.loc[ov, "device_override"].unique())))
    hw = ", ".join(sorted({str(h).split(" (override")[0] for h in table.loc[ov, "hardware"].dropna()}))
    how = ("they are included in these findings, the hardware comparison and the generation speedups "
           "(--include-overrides), each of which names them" if include
           else "they are left out of these findings, the hardware comparison and the generation speedups "
                "(report.build --include-overrides puts them in)")
    return {"text": f"{int(ov.sum())} point(s) ran with device_override ({devices}): they measure that device, "
                    f"not the hardware they are named after ({hw}), and carry no roofline fractions; {how}.",
            "href": "#points"}
