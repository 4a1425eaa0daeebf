"""Cost (jobs.cost): the cluster file's prices, checked at plan time; the arithmetic; what records, the table and the
report carry; and one real local sweep priced by a cluster file of the user's config directory."""
import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest

from analysis.aggregate import aggregate
from jobs import cost, metrics, plan, records, workloads
from jobs.metrics import COST_PER_MTOK, COST_PER_RUN, PER_MTOK, PER_RUN, Cost
from tests.browser import CHROMIUM, check_pages

PRICED = ("++cluster.prices.currency=EUR", "++cluster.prices.card_hour.cpu=0.5", "++cluster.prices.card_hour.h100=2.1")


# ---- arithmetic ---------------------------------------------------------------------------------------------

def test_cost_per_million_tokens_and_per_run():
    per_mtok = Cost(COST_PER_MTOK, "x", PER_MTOK)
    # 4 cards at 2.10 an hour make 1000 tokens/s: 8.40 an hour for 3.6 M tokens
    assert per_mtok.of(1000.0, 2.10, 4) == pytest.approx(8.40 / 3.6)
    assert per_mtok.of(2000.0, 2.10, 4) == pytest.approx(per_mtok.of(1000.0, 2.10, 4) / 2)
    per_run = Cost(COST_PER_RUN, "m", PER_RUN)
    assert per_run.of(90.0, 1.40, 8) == pytest.approx(1.40 * 8 * 1.5)   # 8 cards for 90 minutes
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="must be a finite number > 0"):
            per_mtok.of(bad, 2.10, 1)
    with pytest.raises(ValueError, match="kind='per_hour' must be"):
        Cost(COST_PER_MTOK, "x", "per_hour")


def test_cost_declarations_name_declared_metrics():
    x = metrics.Metric("x_per_s", "x/s", "x", metrics.HIGHER)
    with pytest.raises(ValueError, match="must name declared metrics"):
        metrics.MetricSet("w", (x,), "x_per_s", "x", cost=Cost(COST_PER_MTOK, "x_per_s", PER_MTOK))
    declared = {ms.workload: ms.cost for ms in workloads.metric_sets() if ms.cost}
    assert declared == {
        "inference": Cost(COST_PER_MTOK, "throughput_out_tok_s", PER_MTOK, "tok_per_j"),
        "serving": Cost(COST_PER_MTOK, "output_tok_s", PER_MTOK, "tok_per_j"),
        "finetune": Cost(COST_PER_RUN, "time_to_budget_min", PER_RUN, "train_tok_per_j"),
        "superres": Cost(COST_PER_RUN, "train_minutes", PER_RUN, "images_per_j")}
    # what a run is, said where the metric is defined
    assert "workload.token_budget" in workloads.metric_set("finetune").get(COST_PER_RUN).definition
    assert "workload.budget_samples" in workloads.metric_set("superres").get(COST_PER_RUN).definition


def test_cost_samples_follow_the_basis_and_need_a_price():
    ms = workloads.metric_set("inference")
    price = {"currency": "EUR", "card_hour": 3.6, "hardware": "h100", "cluster": "site"}
    got = cost.cost_samples(ms, price, 2, {"throughput_out_tok_s": [100.0, 200.0, 0.0], "latency_s": [1.0]})
    assert got == {COST_PER_MTOK: [pytest.approx(20.0), pytest.approx(10.0)]}   # 3.6 x 2 x 1e6 / (x x 3600)
    assert cost.cost_samples(ms, None, 2, {"throughput_out_tok_s": [100.0]}) == {}
    assert cost.cost_samples(workloads.metric_set("quantize"), price, 1, {"eval_tok_s": [1.0]}) == {}
    assert cost.cost_samples(workloads.metric_set("superres"), price, 1, {"images_per_s": [1.0]}) == {}  # sample


def test_the_plan_says_what_points_are_priced_at():
    site = {"prices": {"currency": "EUR", "card_hour": {"h100": 2.1, "gaudi3": None}}}
    assert cost.plan_line(site, ["h100", "gaudi3", "cpu", "h100"]) == (
        "prices (cluster.prices): h100 2.1 EUR per card-hour; no price for cpu, gaudi3 (no cost metric)")
    assert cost.plan_line({}, ["h100"]) is None and cost.plan_line({"prices": {"currency": "EUR"}}, ["h100"]) is None


def test_unit_names_the_currency_when_there_is_one():
    assert cost.unit("currency/1M tokens", ["EUR", None, "EUR"]) == "EUR/1M tokens"
    assert cost.unit("currency/run", ["EUR", "USD"]) == "currency/run"
    assert cost.unit("currency/run", []) == "currency/run"


# ---- the cluster file's prices -------------------------------------------------------------------------------

HW = {"cpu", "h100", "gaudi3"}


def test_valid_prices_pass():
    assert cost.check_prices({}, HW) == []
    assert cost.check_prices({"prices": None}, HW) == []
    assert cost.check_prices({"prices": {"currency": "EUR", "card_hour": {"h100": 2.10, "gaudi3": 1, "cpu": None}}},
                             HW) == []
    assert cost.check_prices({"prices": {"currency": "credits", "card_hour": {}}}, HW) == []


@pytest.mark.parametrize("prices, expected", [
    ("cheap", "cluster.prices='cheap' must be a mapping with keys currency, card_hour"),
    ({"currency": "EUR", "card_hour": {"h100": "abc"}}, "cluster.prices.card_hour.h100='abc' must be a number > 0"),
    ({"currency": "EUR", "card_hour": {"h100": 0}}, "cluster.prices.card_hour.h100=0 must be a number > 0"),
    ({"currency": "EUR", "card_hour": {"h100": -2.1}}, "cluster.prices.card_hour.h100=-2.1 must be a number > 0"),
    ({"currency": "EUR", "card_hour": {"h100": True}}, "cluster.prices.card_hour.h100=True must be a number > 0"),
    ({"currency": "EUR", "card_hour": {"h100": math.inf}}, "cluster.prices.card_hour.h100=inf must be a number"),
    ({"currency": "EUR", "card_hour": {"h200x": 2.0}}, "cluster.prices.card_hour.h200x: no hardware is called "
                                                       "'h200x'; hardware: cpu, gaudi3, h100"),
    ({"currency": "EUR", "card_hour": [2.1]}, "cluster.prices.card_hour=[2.1] must map hardware names"),
    ({"card_hour": {"h100": 2.1}}, "cluster.prices.currency must be set"),
    ({"currency": 12, "card_hour": {"h100": 2.1}}, "cluster.prices.currency=12 must be a currency code"),
    ({"currency": "€", "card_hour": {"h100": 2.1}}, "cluster.prices.currency='€' must be a currency code"),
    ({"currency": "EUR", "card_hours": {"h100": 2.1}}, "cluster.prices.card_hours is not a key; allowed: currency, "
                                                       "card_hour"),
])
def test_bad_prices_are_named_with_what_is_allowed(prices, expected):
    problems = cost.check_prices({"prices": prices}, HW)
    assert any(expected in p for p in problems), problems


def test_plan_rejects_bad_prices_before_anything_runs(make_cfg):
    configs = [(o, make_cfg(*o)) for o in (["++cluster.prices.currency=EUR", "++cluster.prices.card_hour.cpu=abc"],)]
    with pytest.raises(plan.SweepRejected) as err:
        plan.plan(configs)
    assert "cluster: cluster.prices.card_hour.cpu='abc' must be a number > 0" in str(err.value)
    assert "nothing was submitted" in str(err.value)


def test_prices_do_not_change_point_ids(make_cfg):
    assert plan.point_id(make_cfg(*PRICED)) == plan.point_id(make_cfg())
    assert [p.point_id for p in plan.plan([([], make_cfg(*PRICED))])] == [plan.point_id(make_cfg())]


def test_price_of_a_point(make_cfg):
    assert cost.price_of(make_cfg(*PRICED)) == {"currency": "EUR", "card_hour": 0.5, "hardware": "cpu",
                                                "cluster": "local"}
    assert cost.price_of(make_cfg("hardware=h100", "device_override=cpu", *PRICED))["card_hour"] == 2.1
    assert cost.price_of(make_cfg("hardware=gaudi3", *PRICED)) is None   # no price for it
    assert cost.price_of(make_cfg()) is None
    assert cost.price_of(None) is None


# ---- records and the table -------------------------------------------------------------------------------------

def _record(cfg, samples, status="ok"):
    point = plan.make_point(cfg, [])
    return records.make_record(point=point.spec(), status=status, samples=samples,
                               provenance=records.provenance(start_time=records.now()))


def test_record_keeps_its_price_and_cost(make_cfg, tmp_path):
    tput = [40.0, 50.0, 80.0]
    priced = _record(make_cfg("cards=2", *PRICED), {"throughput_out_tok_s": tput, "latency_s": [1.0, 1.0, 1.0]})
    records.validate(priced)
    assert priced["price"] == {"currency": "EUR", "card_hour": 0.5, "hardware": "cpu", "cluster": "local"}
    assert priced["metrics"][COST_PER_MTOK]["samples"] == pytest.approx([0.5 * 2 * 1e6 / (x * 3600) for x in tput])
    assert priced["metrics"][COST_PER_MTOK]["median"] == pytest.approx(0.5 * 2 * 1e6 / (50.0 * 3600))
    plain = _record(make_cfg("cards=1"), {"throughput_out_tok_s": tput})
    records.validate(plain)
    assert "price" not in plain and COST_PER_MTOK not in plain["metrics"]
    failed = _record(make_cfg("cards=4", *PRICED), None, status="failed")
    records.validate(failed)
    assert failed["price"]["card_hour"] == 0.5 and failed["metrics"] == {}
    bad = {**priced, "price": {**priced["price"], "card_hour": 0}}
    with pytest.raises(Exception, match="0"):
        records.validate(bad)

    for rec in (priced, plain):
        records.write_record(records.record_path(tmp_path / "points", rec["point_id"]), rec)
    table = aggregate([tmp_path]).set_index("point_id")
    assert table.loc[priced["point_id"], COST_PER_MTOK] == pytest.approx(priced["metrics"][COST_PER_MTOK]["median"])
    assert table.loc[priced["point_id"], "price_currency"] == "EUR"
    assert table.loc[priced["point_id"], "price_card_hour"] == 0.5
    # a point without a price has a blank cost, never 0
    assert pd.isna(table.loc[plain["point_id"], COST_PER_MTOK])
    assert pd.isna(table.loc[plain["point_id"], "price_card_hour"])


@pytest.mark.parametrize("workload, overrides, basis, values, formula", [
    ("serving", (), "output_tok_s", [120.0], lambda x: 0.5 * 1e6 / (x * 3600)),
    ("finetune", (), "time_to_budget_min", [30.0, 45.0], lambda m: 0.5 * m / 60),
    ("superres", ("workload.phase=train",), "train_minutes", [600.0], lambda m: 0.5 * m / 60),
])
def test_each_workload_records_its_cost(make_cfg, workload, overrides, basis, values, formula):
    rec = _record(make_cfg(f"workload={workload}", *overrides, *PRICED), {basis: values})
    records.validate(rec)
    name = workloads.metric_set(workload).cost.metric
    assert rec["metrics"][name]["samples"] == pytest.approx([formula(x) for x in values])


def test_overview_shows_cost_only_where_priced():
    from report.pages.overview import table_columns

    base = pd.DataFrame({"workload": ["inference"] * 2, "hardware": ["h100", "cpu"], "model": ["m", "m"],
                         "precision": ["fp32"] * 2, "cards": [1, 1], "status": ["ok", "ok"],
                         "throughput_out_tok_s": [10.0, 5.0]})
    assert COST_PER_MTOK not in [c[0] for c in table_columns(base)]
    blank = base.assign(cost_per_mtok=[float("nan")] * 2)
    assert COST_PER_MTOK not in [c[0] for c in table_columns(blank)]
    priced = base.assign(cost_per_mtok=[58.3, float("nan")], price_currency=["EUR", None],
                         tok_per_j=[1.0, float("nan")])
    cols = {c[0]: c for c in table_columns(priced)}
    assert cols[COST_PER_MTOK][2] == "EUR/1M tokens" and "tok_per_j" in cols
    names = list(cols)
    assert names.index("tok_per_j") + 1 == names.index(COST_PER_MTOK)   # next to energy per token
    mixed = priced.assign(price_currency=["EUR", "USD"], cost_per_mtok=[58.3, 1.0])
    cols = {c[0]: c for c in table_columns(mixed)}
    assert cols[COST_PER_MTOK][2] == "currency/1M tokens" and "price_currency" in cols


# ---- one real sweep ---------------------------------------------------------------------------------------------

SITE = """\
name: priced-site
kind: local
max_nodes: 1
max_parallel: 1
time_limit: "00:30:00"
account: null
qos: null
hardware: null
prices:
  currency: EUR
  card_hour: {h100: 2.10}
"""


@pytest.mark.slow
def test_local_sweep_records_and_tables_its_cost(tmp_path):
    """A cluster file in the user's config directory prices h100 card-hours; a tiny inference point named h100 runs
    on the CPU (device_override) and its record, table and report carry the cost from its own throughput."""
    config = tmp_path / "config"
    (config / "cluster").mkdir(parents=True)
    (config / "cluster" / "priced-site.yaml").write_text(SITE)
    env = {**os.environ, "ACCELSWEEP_CONFIG_DIR": str(config)}
    run = [sys.executable, "-m", "jobs.sweep", "-m", "cluster=priced-site", "hardware=h100", "device_override=cpu",
           "workload.engine=hf", "workload.batch_size=1", "workload.shape=16x16", "workload.repeats=3",
           "workload.noise.target=null"]
    bad = subprocess.run([*run, "++cluster.prices.card_hour.h100=-1"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode != 0 and "cluster.prices.card_hour.h100=-1 must be a number > 0" in bad.stdout + bad.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/points/*"))
    proc = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "prices (cluster.prices): h100 2.1 EUR per card-hour" in proc.stdout
    sweep = tmp_path / "runs" / "default"
    [path] = (sweep / "points").glob("*/record.json")
    rec = json.loads(path.read_text())
    records.validate(rec)
    assert rec["status"] == "ok" and rec["price"] == {"currency": "EUR", "card_hour": 2.1, "hardware": "h100",
                                                      "cluster": "priced-site"}
    tput = rec["metrics"]["throughput_out_tok_s"]["samples"]
    assert len(tput) == 3
    expected = [2.1 * rec["params"]["cards"] * 1e6 / (x * 3600) for x in tput]
    assert rec["metrics"][COST_PER_MTOK]["samples"] == pytest.approx(expected)
    table = pd.read_parquet(sweep / "results.parquet")
    assert table[COST_PER_MTOK].iloc[0] == pytest.approx(sorted(expected)[1])   # the median of three
    assert table["price_currency"].iloc[0] == "EUR"
    index = (sweep / "site" / "index.html").read_text()
    assert "cost per 1M tokens (EUR/1M tokens)" in index
    page = (sweep / "site" / "inference.html").read_text()
    assert "Cost per million generated tokens vs batch size" in page and "lowest median" in page
    if os.path.exists(CHROMIUM):   # the cost chart renders, offline, with no overlapping text
        shots = tmp_path / "shots"
        shots.mkdir()
        check_pages([sweep / "site" / "index.html", sweep / "site" / "inference.html"], shots)


@pytest.mark.slow
def test_local_finetune_sweep_records_its_cost_per_run(tmp_path):
    """A training run is workload.token_budget tokens: its cost is the price x cards x time_to_budget_min / 60 of
    each timed step."""
    from tests.test_finetune import TINY

    config = tmp_path / "config"
    (config / "cluster").mkdir(parents=True)
    (config / "cluster" / "priced-site.yaml").write_text(SITE)
    env = {**os.environ, "ACCELSWEEP_CONFIG_DIR": str(config)}
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "cluster=priced-site", "hardware=h100",
                           "device_override=cpu", "workload=finetune", *TINY, "workload.token_budget=1000000"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [path] = (tmp_path / "runs" / "default" / "points").glob("*/record.json")
    rec = json.loads(path.read_text())
    records.validate(rec)
    assert rec["status"] == "ok" and rec["price"]["card_hour"] == 2.1
    tok_s = rec["metrics"]["train_tok_s"]["samples"]
    expected = [2.1 * rec["params"]["cards"] * (1_000_000 / x / 60) / 60 for x in tok_s]
    assert rec["metrics"][COST_PER_RUN]["samples"] == pytest.approx(expected)
    table = pd.read_parquet(tmp_path / "runs" / "default" / "results.parquet")
    assert table[COST_PER_RUN].iloc[0] == pytest.approx(sorted(expected)[1])
    assert table["token_budget"].iloc[0] == 1_000_000 and table["price_currency"].iloc[0] == "EUR"


def test_inference_page_charts_cost_per_hardware():
    from jobs.workloads.inference.report import cost_chart

    row = {"workload": "inference", "status": "ok", "model": "m", "precision": "fp32", "cards": 1, "shape": "16x16"}
    table = pd.DataFrame([{**row, "hardware": "h100", "batch_size": 1, COST_PER_MTOK: 2.0, "price_currency": "EUR"},
                          {**row, "hardware": "h100", "batch_size": 4, COST_PER_MTOK: 0.6, "price_currency": "EUR"},
                          {**row, "hardware": "cpu", "batch_size": 1, COST_PER_MTOK: float("nan")}])
    chart = cost_chart(table)
    assert chart.spec is not None and "Cost per 1M generated tokens, median (EUR)" in json.dumps(chart.spec)
    assert "lowest median: 0.6 EUR per million generated tokens on h100" in chart.summary
    assert "No price for cpu." in chart.summary
    empty = cost_chart(table.drop(columns=[COST_PER_MTOK, "price_currency"]))
    assert "no prices" in empty.summary
