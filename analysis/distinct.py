"""Work per row done once per distinct row: a 100,000-point table has far fewer distinct configurations."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

SMALL = 100   # rows: below this, finding the distinct ones costs more than it saves


def per_distinct(frame: pd.DataFrame, fn: Callable[[pd.DataFrame], Sequence[Any]]) -> list[Any]:
    """fn(rows) for the distinct rows of `frame` (one value per row it is given), spread back over every row of
    `frame`, in order: the same values as fn(frame), with fn run on each distinct row once."""
    if len(frame) <= SMALL or not len(frame.columns):
        return list(fn(frame))
    values = list(fn(frame.drop_duplicates()))   # first occurrences, in order: ngroup's numbering below
    groups = frame.groupby(list(frame.columns), dropna=False, sort=False).ngroup().to_numpy()
    return [values[g] for g in groups]
