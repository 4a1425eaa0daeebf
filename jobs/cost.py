"""What a point's work costs: the cluster file's price of a card-hour per hardware kind, checked at plan time, and
the cost metrics a record carries (each workload's MetricSet.cost says which, and from which of its metrics).

    prices:
      currency: EUR          # the unit every price and cost is in
      card_hour:             # hardware name -> the price of one card for one hour
        h100: 2.10
        gaudi3: 1.40

A point is priced by its hardware's name (device_override runs keep it: their report marks them). The record
keeps the price that applied when it ran (`price`), so a table of old records keeps the prices of their time;
a point whose hardware has no price has no price block and no cost metric (blank in the table, never 0).
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from jobs.metrics import MetricSet

KEYS = ("currency", "card_hour")
_CURRENCY = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,15}$")
CURRENCY_RULE = "a currency code or unit of 1-16 letters, digits, '_', '.', '-' starting with a letter (EUR, USD, credits)"


def check_prices(cluster: dict[str, Any], hardware: Iterable[str] = ()) -> list[str]:
    """Problems of the cluster file's `prices` block ([] when it is absent or valid); `hardware`: the names a price
    may be given for (the hardware files, the sweep's and the cluster's kinds)."""
    block = cluster.get("prices")
    if block is None:
        return []
    if not isinstance(block, dict):
        return [f"cluster.prices={block!r} must be a mapping with keys {', '.join(KEYS)}, e.g. "
                "{currency: EUR, card_hour: {h100: 2.10}}"]
    problems = [f"cluster.prices.{k} is not a key; allowed: {', '.join(KEYS)}" for k in block if k not in KEYS]
    currency, card_hour = block.get("currency"), block.get("card_hour")
    if currency is None and card_hour:
        problems.append(f"cluster.prices.currency must be set ({CURRENCY_RULE}) when cluster.prices.card_hour "
                        "gives prices")
    elif currency is not None and not (isinstance(currency, str) and _CURRENCY.match(currency)):
        problems.append(f"cluster.prices.currency={currency!r} must be {CURRENCY_RULE}")
    if card_hour is None:
        return problems
    if not isinstance(card_hour, dict):
        return problems + [f"cluster.prices.card_hour={card_hour!r} must map hardware names to the price of one "
                           "card-hour, e.g. {h100: 2.10, gaudi3: 1.40}"]
    known = set(hardware) | set(cluster.get("hardware") or ())
    for name, price in card_hour.items():
        where = f"cluster.prices.card_hour.{name}"
        if known and name not in known:
            problems.append(f"{where}: no hardware is called {name!r}; hardware: {', '.join(sorted(known))}")
        if price is None:   # a hardware kind left unpriced on purpose
            continue
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price <= 0:
            problems.append(f"{where}={price!r} must be a number > 0 (the price of one card for one hour, in "
                            f"cluster.prices.currency), or null for no price")
    return problems


def price_of(cfg: dict[str, Any] | None) -> dict[str, Any] | None:
    """The price block of a point's record: {currency, card_hour, hardware, cluster}, or None where the cluster file
    prices no card-hour of the point's hardware."""
    cluster = (cfg or {}).get("cluster") or {}
    prices = cluster.get("prices") or {}
    hardware = ((cfg or {}).get("hardware") or {}).get("name")
    card_hour = (prices.get("card_hour") or {}).get(hardware)
    if card_hour is None or not prices.get("currency"):
        return None
    return {"currency": str(prices["currency"]), "card_hour": float(card_hour), "hardware": str(hardware),
            "cluster": str(cluster.get("name"))}


def cost_samples(ms: MetricSet | None, price: dict[str, Any] | None, cards: int,
                 samples: dict[str, list[float]]) -> dict[str, list[float]]:
    """The workload's cost metric, one value per value of its basis metric ({} without a price, a cost
    declaration or basis values; a basis value that is not > 0 has no cost)."""
    if ms is None or ms.cost is None or price is None:
        return {}
    basis = [x for x in samples.get(ms.cost.basis) or () if math.isfinite(x) and x > 0]
    if not basis:
        return {}
    return {ms.cost.metric: [ms.cost.of(x, price["card_hour"], int(cards)) for x in basis]}


def plan_line(cluster: dict[str, Any], hardware: Iterable[str]) -> str | None:
    """What the sweep's points will be priced at, for the plan's output (None where the cluster file has no prices):
    e.g. "prices (cluster.prices): h100 2.1 EUR per card-hour; no price for gaudi3 (no cost metric)"."""
    prices = cluster.get("prices") or {}
    card_hour = prices.get("card_hour") or {}
    if not card_hour:
        return None
    names = sorted(set(hardware))
    priced = [f"{h} {card_hour[h]:g} {prices.get('currency')} per card-hour" for h in names
              if card_hour.get(h) is not None]
    unpriced = [h for h in names if card_hour.get(h) is None]
    parts = ["; ".join(priced)] if priced else []
    parts += [f"no price for {', '.join(unpriced)} (no cost metric)"] if unpriced else []
    return f"prices (cluster.prices): {'; '.join(parts)}" if parts else None


def unit(metric_unit: str, currencies: Iterable[Any]) -> str:
    """A cost metric's unit with its currency where one is named ("currency/1M tokens" -> "EUR/1M tokens")."""
    found = sorted({str(c) for c in currencies if isinstance(c, str) and c})
    return metric_unit.replace("currency", found[0], 1) if len(found) == 1 else metric_unit
