"""Metric declarations and the shared statistics.

Each workload declares its metrics in a MetricSet (`METRICS` in its package,
e.g. jobs/workloads/inference/metrics.py): name, unit, definition, which way
is better, how one repeat's value is taken, whether it may be compared
across hardware, and its main throughput with its unit of work. The main
throughput is the basis of the derived metrics below (scaling efficiency,
generation speedup), which analysis.derived computes for every workload.
analysis/ and report/ read these declarations through jobs.workloads.metric_set;
they name no workload's metric themselves.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.study import Study

HIGHER, LOWER = "higher", "lower"
PER_REPEAT = "one value per timed repeat"
PER_POINT = "one value per point, over the whole measured window"


@dataclass(frozen=True)
class Metric:
    name: str                     # column in the table; the unit is in the name where it has one
    unit: str
    definition: str
    better: str | None            # "higher" | "lower" | None: not compared (a ratio of points compared themselves)
    repeat: str = PER_REPEAT      # how a repeat's value is computed
    cross_hardware: bool = True   # False: a property of the result (perplexity, PSNR), not of the hardware's speed
    label: str = ""               # short human name for headlines and axes (default: the name)

    def __post_init__(self):
        if self.better not in (HIGHER, LOWER, None):
            raise ValueError(f"metric {self.name}: better={self.better!r} must be {HIGHER!r}, {LOWER!r} or None")

    @property
    def title(self) -> str:
        return self.label or self.name


@dataclass(frozen=True)
class MetricSet:
    """What one workload measures."""

    workload: str
    metrics: tuple[Metric, ...]
    throughput: str               # the main throughput: the basis of scaling efficiency and generation speedup
    work: str                     # its unit of work (tokens, samples, images), counted per second
    # Parameters (table columns) that say what work a point did: two points are compared by a derived metric
    # only when these are equal. The shared ones (model, precision, seed, ...) are in analysis.derived.
    keys: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()  # parameters that name a series in charts and tables
    varied: tuple[str, ...] = ()  # parameters named in labels too, but only where they take several values
    overview: tuple[str, ...] = ()  # metrics shown in the overview's points table besides the throughput
    # Parameters that name the software that did the work (the engine): two points that differ in one are compared
    # only with the difference said ("engine differs: hf vs vllm"); headlines are given per value.
    software: tuple[str, ...] = ()
    # (value of a software parameter, the table column that records its version): a hardware comparison
    # (analysis.hardware) matches points on that version's major.minor too (vllm 0.11.x with vllm 0.11.y).
    versions: tuple[tuple[str, str], ...] = ()
    scaling_mode: str | None = None  # the parameter that says strong or weak scaling (what stays fixed as cards grow)
    order: tuple[str, ...] = ()   # parameters that sort the table after workload, hardware, model, precision, cards
    # Parameters that, after hardware, model, precision and cards, name one point in a list of points (failures).
    title_fields: tuple[str, ...] = ()
    # (parameter, word): labels show its value after the word ("batch 4", "engine vllm"); whole numbers as such.
    words: tuple[tuple[str, str], ...] = ()
    studies: tuple[Study, ...] = ()   # published studies its points are compared with (jobs.study)
    # (parameter, value, why): points where the parameter has that value measured a speed that is not what the
    # point names (quantize's apply=fake: the float model's speed); no "fastest" claim is made of them.
    unranked: tuple[tuple[str, str, str], ...] = ()
    # What the workload's work costs where the cluster file prices a card-hour (jobs.cost): None, no cost metric.
    cost: Cost | None = None

    def __post_init__(self):
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"workload {self.workload}: a metric is declared twice in {names}")
        main = self.get(self.throughput)
        if main is None or main.better != HIGHER or not main.cross_hardware:
            raise ValueError(f"workload {self.workload}: main throughput {self.throughput!r} must be a declared "
                             "metric, higher is better, compared across hardware")
        unknown = [n for n in self.overview if n not in names]
        if unknown:
            raise ValueError(f"workload {self.workload}: overview names undeclared metric(s) {unknown}")
        if self.cost is not None and not {self.cost.metric, self.cost.basis, self.cost.beside or self.cost.metric} \
                <= set(names):
            raise ValueError(f"workload {self.workload}: cost {self.cost.metric!r} from {self.cost.basis!r} (beside "
                             f"{self.cost.beside!r}) must name declared metrics")
        studies = [s.name for s in self.studies]
        if len(set(studies)) != len(studies):
            raise ValueError(f"workload {self.workload}: a study is declared twice in {studies}")

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.metrics]

    def get(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)

    @property
    def main(self) -> Metric:
        return self.get(self.throughput)


# Declared alike by every workload that measures memory and energy (one definition, shared).
PEAK_MEM = Metric("peak_mem_gb", "GB", "peak memory of the measured runs: device allocator peak on accelerators, "
                                       "peak resident set size of the process on the CPU (largest over cards)", LOWER,
                  repeat=PER_POINT, label="peak memory")
ENERGY = Metric("energy_j", "J", "energy over the measured window only, summed over all devices of the job", LOWER,
                repeat=PER_POINT, label="energy")

# Cost: the price of a card-hour (the cluster file's `prices`, jobs.cost) times the cards a point held, per unit of
# its work. Each workload that has one declares which of its metrics it follows from (MetricSet.cost).
PER_MTOK, PER_RUN = "per_mtok", "per_run"
COST_PER_MTOK, COST_PER_RUN = "cost_per_mtok", "cost_per_run"
_PRICE = ("P = cluster.prices.card_hour.<hardware> (the price of one card for one hour, in cluster.prices.currency; "
          "the record's `price`)")


@dataclass(frozen=True)
class Cost:
    """How a workload's cost metric follows from the price of a card-hour and one of its own metrics (`basis`):
    PER_MTOK, per million units of work from a throughput in work/s; PER_RUN, per run from the minutes one run
    takes. `beside`: the workload's energy efficiency (work per joule), which the report shows next to it."""

    metric: str
    basis: str
    kind: str
    beside: str | None = None

    def __post_init__(self):
        if self.kind not in (PER_MTOK, PER_RUN):
            raise ValueError(f"cost {self.metric}: kind={self.kind!r} must be {PER_MTOK!r} or {PER_RUN!r}")

    def of(self, basis: float, card_hour: float, cards: int) -> float:
        """The cost of one value of the basis metric, for `cards` cards at `card_hour` each."""
        if not (math.isfinite(basis) and basis > 0):
            raise ValueError(f"cost {self.metric}: {self.basis}={basis!r} must be a finite number > 0")
        if self.kind == PER_MTOK:
            return card_hour * cards * 1e6 / (basis * 3600)
        return card_hour * cards * basis / 60


def cost_per_mtok(throughput: str, tokens: str, repeat: str = PER_REPEAT) -> Metric:
    """The cost of a million tokens at the throughput metric `throughput` (tokens/s); `tokens`: which ones."""
    return Metric(COST_PER_MTOK, "currency/1M tokens",
                  f"what one million {tokens} cost at the measured speed: P x cards x 1e6 / ({throughput} x 3600), "
                  f"with {_PRICE}; from each value of {throughput}; none (blank, never 0) where the cluster file "
                  "prices no card-hour of the hardware", LOWER, repeat=repeat, label="cost per 1M tokens")


def cost_per_run(minutes: str, run: str) -> Metric:
    """The cost of one training run that takes the metric `minutes`; `run`: what one run is."""
    return Metric(COST_PER_RUN, "currency/run",
                  f"what one training run costs at the measured speed: P x cards x {minutes} / 60, with {_PRICE}; "
                  f"a run is {run}; none (blank, never 0) where the cluster file prices no card-hour of the hardware",
                  LOWER, label="cost per training run")


SCALING_EFFICIENCY, SPEEDUP, HARDWARE_RATIO = "scaling_efficiency", "speedup_vs_previous", "hardware_ratio"
# Metrics that compare points; analysis.derived computes them from each workload's main throughput.
DERIVED: tuple[Metric, ...] = (
    Metric(SCALING_EFFICIENCY, "fraction",
           "strong: T(1) / (N x T(N)) for fixed total work; weak: X(N) / (N x X(1)) for fixed per-card work; "
           "computed from the workload's main throughput against the 1-card point with otherwise equal parameters",
           HIGHER, repeat="from the medians of two points"),
    Metric(SPEEDUP, "x",
           "main throughput(hardware) / main throughput(previous generation of the same family), same workload, "
           "model, precision, cards and workload parameters", None, repeat="from the medians of two points"),
    Metric(HARDWARE_RATIO, "x",
           "main throughput(hardware) / main throughput(baseline hardware, report.baseline_hardware), same workload, "
           "model, precision, cards, engine and its version's major.minor and workload parameters, across vendors "
           "and generations alike; computed by analysis/hardware.py for the report's Hardware comparison page, with "
           "the same ratio per unit of cost and per joule, and the ratio of each latency the workload's overview "
           "lists (below 1: lower latency than the baseline); ahead or behind only where the 95 % interval leaves "
           "out 1 and both points reached their noise target on cores of their own (else unconfirmed)", None,
           repeat="from the medians of two points"),
)

def directions(sets: Sequence[MetricSet]) -> dict[str, str]:
    """Metric name -> "higher" | "lower" for every compared metric of `sets` and the derived ones."""
    out: dict[str, str] = {}
    for m in [m for s in sets for m in s.metrics] + list(DERIVED):
        if m.better and out.setdefault(m.name, m.better) != m.better:
            raise ValueError(f"metric {m.name} is declared {out[m.name]}-is-better and {m.better}-is-better by two "
                             "workloads; one name must mean one thing")
    return out


def declared(sets: Sequence[MetricSet], attr: str) -> list[str]:
    """The parameters `attr` (e.g. "order") of every set in `sets`, each once, in the order first declared."""
    return list(dict.fromkeys(p for s in sets for p in getattr(s, attr)))


def label_words(sets: Sequence[MetricSet]) -> dict[str, str]:
    """Parameter -> the word its value follows in labels, over `sets` (MetricSet.words)."""
    out: dict[str, str] = {}
    for param, word in (w for s in sets for w in s.words):
        if out.setdefault(param, word) != word:
            raise ValueError(f"parameter {param} is labelled {out[param]!r} and {word!r} by two workloads; one name "
                             "must mean one thing")
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} is outside [0, 100]")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarise(samples: Sequence[float]) -> dict:
    xs = [float(x) for x in samples]
    if any(not math.isfinite(x) for x in xs):
        raise ValueError(f"non-finite sample in {xs}")
    return {
        "samples": xs,
        "n": len(xs),
        "median": percentile(xs, 50),
        "mean": sum(xs) / len(xs) if xs else None,
        "p10": percentile(xs, 10),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "min": min(xs) if xs else None,
        "max": max(xs) if xs else None,
    }
