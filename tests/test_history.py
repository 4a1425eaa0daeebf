"""analysis.history (the same point over several sweeps), analysis.refcheck (ReFrame-style references), jobs.inject
(a slowed device) and the History page, on made-up records (test input, not measurements)."""
from __future__ import annotations

import hashlib
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis import history as hist
from analysis import refcheck
from analysis.aggregate import table_from_records
from analysis.derived import ratio_interval
from jobs import inject
from jobs.devices import Device
from jobs.records import make_record, write_record

PROV = {"hostname": "h", "nodes": ["h"], "slurm_job_id": None, "device_name": "d", "device_runtime": None,
        "packages": {}, "git_commit": None, "container": None, "env": {}}


def record(hw: str, sweep: str, start: str, scale: float = 1.0, jitter: float = 0.01, status: str = "ok",
           batch: int = 1, override: str | None = None, info: dict | None = None) -> dict:
    """An inference record whose throughput samples are 100 x scale x (1 +- jitter); latency its inverse."""
    params = {"hardware": hw, "hardware_previous": None, "workload": "inference", "model": "tiny-llama",
              "precision": "fp32", "cards": 1, "nodes": 1,
              "batch_size": batch, "shape": "16x16", "engine": "hf", "device_override": override, "repeats": 3}
    pid = hashlib.sha256(f"{hw}-{batch}-{override}".encode()).hexdigest()[:12]
    point = {"point_id": pid, "sweep": sweep, "params": params, "command": "python -m jobs.sweep"}
    prov = {**PROV, "start_time": start, "finish_time": start}
    if status != "ok":
        return make_record(point=point, status=status, provenance=prov,
                           error={"type": "E", "message": "m", "log_tail": ""})
    x = [100 * scale * (1 + jitter * math.sin(i)) for i in range(12)]
    return make_record(point=point, status="ok", provenance=prov, info=info,
                       samples={"throughput_out_tok_s": x, "latency_s": [16 / v for v in x],
                                "peak_mem_gb": [0.5]})


def runs(*groups) -> list[tuple[str, pd.DataFrame]]:
    return [(name, table_from_records(recs)) for name, recs in groups]


JAN, FEB, MAR = "2026-01-05T00:00:00+00:00", "2026-02-05T00:00:00+00:00", "2026-03-05T00:00:00+00:00"


def test_change_interval_and_flags():
    # given newest first: ordered by the records' start times
    h = hist.history(runs(("feb", [record("h100", "feb", FEB, 0.8), record("a100", "feb", FEB, 1.01, 0.001)]),
                          ("jan", [record("h100", "jan", JAN), record("a100", "jan", JAN, jitter=0.001)])))
    assert list(h.runs["run"]) == ["jan", "feb"]
    tput = h.changes[h.changes["metric"].eq("throughput_out_tok_s")].set_index("hardware")
    slow = tput.loc["h100"]
    assert slow["change"] == pytest.approx(-0.2) and slow["verdict"] == hist.REGRESSION
    # the interval is derived.ratio_interval of the two runs' samples, less 1
    lo, hi = ratio_interval([100 * 0.8 * (1 + 0.01 * math.sin(i)) for i in range(12)],
                            [100 * (1 + 0.01 * math.sin(i)) for i in range(12)])
    assert (slow["change_lo"], slow["change_hi"]) == pytest.approx((lo - 1, hi - 1))
    # +1 %: the intervals separate (tight samples) but the change is within the tolerance
    assert tput.loc["a100", "verdict"] == hist.WITHIN and tput.loc["a100", "change_lo"] > 0
    # latency has no samples in the table: judged on the p10-p90 ranges (they do not overlap: flagged, lower better)
    lat = h.changes[h.changes["metric"].eq("latency_s")].set_index("hardware")
    assert lat.loc["h100", "basis"] == "p10–p90 ranges" and lat.loc["h100", "verdict"] == hist.REGRESSION
    assert np.isnan(lat.loc["h100", "change_lo"])
    # one value per point: no interval, never flagged
    assert set(h.changes.loc[h.changes["metric"].eq("peak_mem_gb"), "verdict"]) == {hist.NO_INTERVAL}
    assert set(h.flagged["hardware"]) == {"h100"} and h.count(hist.REGRESSION) == 2
    assert list(h.flagged["verdict"]) == [hist.REGRESSION, hist.REGRESSION]


def test_noisy_change_beyond_tolerance_is_not_flagged_when_the_intervals_overlap():
    h = hist.history(runs(("jan", [record("h100", "jan", JAN, jitter=0.4)]),
                          ("feb", [record("h100", "feb", FEB, 0.9, jitter=0.4)])), tolerance=0.05)
    row = h.changes[h.changes["metric"].eq("throughput_out_tok_s")].iloc[0]
    assert row["change"] == pytest.approx(-0.1) and row["change_lo"] < 0 < row["change_hi"]
    assert row["verdict"] == hist.WITHIN and h.flagged.empty


def test_three_runs_each_against_the_previous_and_status_changes():
    h = hist.history(runs(("jan", [record("h100", "jan", JAN), record("a100", "jan", JAN)]),
                          ("feb", [record("h100", "feb", FEB, 0.5), record("a100", "feb", FEB, status="failed")]),
                          ("mar", [record("h100", "mar", MAR, 0.5), record("a100", "mar", MAR)]),
                          ("apr", [record("mi300x", "apr", "2026-04-05T00:00:00+00:00")])))
    t = h.series[h.series["metric"].eq("throughput_out_tok_s") & h.series["hardware"].eq("h100")]
    assert list(t["run"]) == ["jan", "feb", "mar"] and list(t["previous_run"].fillna("")) == ["", "jan", "feb"]
    assert list(t["verdict"].fillna("")) == ["", hist.REGRESSION, hist.WITHIN]
    # a100: ok -> failed -> ok; its march value is compared with january's (the previous ok run)
    st = h.status_changes.set_index("run")
    assert st.loc["feb", "verdict"] == hist.REGRESSION and st.loc["mar", "verdict"] == hist.IMPROVEMENT
    a = h.series[h.series["metric"].eq("throughput_out_tok_s") & h.series["hardware"].eq("a100")]
    assert list(a["previous_run"].fillna("")) == ["", "jan"]
    assert "mi300x" not in set(h.series["hardware"])   # one run only: no history
    assert h.repeated == 2


def test_bad_inputs():
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        hist.history([], tolerance=-1)
    with pytest.raises(ValueError, match="unknown metric.*declare"):
        hist.history(runs(("jan", [record("h100", "jan", JAN)])), metrics=["tok_s"])
    assert hist.history([]).series.empty


def write_sweep(root, name, recs):
    for rec in recs:
        write_record(root / name / "points" / rec["point_id"] / "record.json", rec)


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "analysis.history", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_cli_exit_status_references_and_csv(tmp_path):
    write_sweep(tmp_path, "jan", [record("h100", "jan", JAN), record("a100", "jan", JAN)])
    write_sweep(tmp_path, "feb", [record("h100", "feb", FEB, 0.8, info={inject.INFO: 1.25}),
                                  record("a100", "feb", FEB)])
    ref = tmp_path / "ref.yaml"
    ref.write_text("h100:\n  throughput_out_tok_s: [100, -10%, null, tokens/s]\n"
                   "'* batch_size=1':\n  throughput_out_tok_s: [100, -0.1, 0.1]\n")
    proc = cli(tmp_path, "--references", ref, "--csv", tmp_path / "series.csv")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    out = proc.stdout
    assert "h100 [injected slowdown 1.25x]" in out and "regression" in out and "a100" not in out.split(
        "flagged changes")[1].split("references")[0]
    violated = [ln for ln in out.splitlines() if "VIOLATED" in ln]
    assert len(violated) == 2 and all("h100" in ln and "throughput_out_tok_s = 80" in ln and "below" in ln
                                      for ln in violated), out
    assert pd.read_csv(tmp_path / "series.csv")["point_id"].nunique() == 2
    assert cli(tmp_path, "--fail-on", "none").returncode == 0
    assert cli(tmp_path).returncode == 1
    assert cli(tmp_path / "jan").returncode == 0   # one run: nothing to compare
    bad = cli(tmp_path, "--references", "no-such-reference")
    assert bad.returncode == 2 and "no reference file or config 'no-such-reference'" in bad.stderr
    assert cli(tmp_path / "nowhere").returncode == 2


# --------------------------------------------------------------------------- references

def test_reference_bounds_and_percentages():
    (b,) = refcheck.parse({"h100": {"throughput_out_tok_s": [1500, "-5%", "+10%", "tokens/s"]}})
    assert (b.lo, b.hi, b.hardware, b.where) == (pytest.approx(1425), pytest.approx(1650), "h100", ())
    (b,) = refcheck.parse({"* cards=8 batch_size=64": {"ttft_s": [0.05, None, 0.2]}})
    assert b.lo == -math.inf and b.hi == pytest.approx(0.06) and b.where == (("cards", "8"), ("batch_size", "64"))
    (b,) = refcheck.parse({"h100": {"ttft_s": [-2.0, -0.5, 0.5]}})   # ReFrame: tolerances of |value|
    assert (b.lo, b.hi) == (pytest.approx(-3.0), pytest.approx(-1.0))
    assert refcheck.parse({}) == [] and refcheck.parse(None) == []


@pytest.mark.parametrize("spec, message", [
    ({"h100": {"tput": [1, -0.1, 0.1]}}, "'tput' is not a declared metric; known: "),
    ({"h100": {"ttft_s": [0, -0.1, 0.1]}}, "value 0 must be a non-zero number"),
    ({"h100": {"ttft_s": ["fast", -0.1, 0.1]}}, "value 'fast' must be a non-zero number"),
    ({"h100": {"ttft_s": [1, 0.1, 0.2]}}, "lower tolerance 0.1 must be between -1 and 0"),
    ({"h100": {"ttft_s": [1, -0.1, -0.2]}}, "upper tolerance -0.2 must be >= 0"),
    ({"h100": {"ttft_s": [1, "-5 percent", 0.1]}}, "lower tolerance '-5 percent' must be a number"),
    ({"h100": {"ttft_s": [1, -0.1]}}, "must be [value, lower, upper] or [value, lower, upper, unit]"),
    ({"h100": {"ttft_s": [1, -0.1, 0.1, "ms"]}}, "unit 'ms' is not ttft_s's unit 's'"),
    ({"h100 cards": {"ttft_s": [1, -0.1, 0.1]}}, "'cards' must be parameter=value"),
    ({"h100": [1, 2]}, "must map metric names to [value, lower, upper(, unit)]"),
    ([1, 2], "must be a mapping of selector"),
])
def test_bad_references_are_named(spec, message):
    with pytest.raises(refcheck.ReferenceError) as exc:
        refcheck.parse(spec)
    assert message in str(exc.value)


def test_reference_check_points_metrics_and_overrides():
    table = table_from_records([record("h100", "s", JAN, 0.8), record("h100", "s", JAN, batch=4),
                                record("a100", "s", JAN, status="failed"),
                                record("h100", "s", JAN, override="cpu")])
    bounds = refcheck.parse({"h100": {"throughput_out_tok_s": [100, -0.1, 0.1], "energy_j": [10, -0.5, 0.5]},
                             "a100": {"throughput_out_tok_s": [100, -0.1, 0.1]},
                             "h100 device_override=cpu": {"throughput_out_tok_s": [50, -0.1, 0.1]},
                             "mi300x": {"throughput_out_tok_s": [100, -0.1, 0.1]}})
    result = refcheck.check(bounds, table)
    why = sorted((v.point.split(" · ")[0], v.metric, v.why) for v in result.violations)
    assert why == [("a100", "throughput_out_tok_s", "failed"), ("h100", "energy_j", "no value"),
                   ("h100", "energy_j", "no value"), ("h100", "throughput_out_tok_s", "below"),
                   ("h100 (override: cpu)", "throughput_out_tok_s", "above")]
    # a real h100 reference does not judge the CPU stand-in; the unmatched selector is listed, not a violation
    assert result.checked == 6 and result.passed == 1 and result.unmatched == ["mi300x"]
    below = next(v for v in result.violations if v.why == "below")
    assert "throughput_out_tok_s = 80.05" in below.text() and "is below its reference [90, 110]" in below.text()
    assert len(refcheck.check(bounds, table, strict=True).violations) == 6
    with pytest.raises(refcheck.ReferenceError, match="batchsize is not a point parameter"):
        refcheck.check(refcheck.parse({"h100 batchsize=4": {"ttft_s": [1, -0.1, 0.1]}}), table)


def test_sweep_rejects_bad_references_before_running(tmp_path, monkeypatch):
    user = tmp_path / "user"
    (user / "reference").mkdir(parents=True)
    (user / "reference" / "bad.yaml").write_text("cpu:\n  throughput_out_tok_s: [100, 0.1, 0.2]\n"
                                                 "'cpu batchsize=4':\n  ttft_s: [1, -0.1, 0.1]\n")
    (user / "reference" / "typo.yaml").write_text("'cpu batchsize=4':\n  ttft_s: [1, -0.1, 0.1]\n")
    env = {**__import__("os").environ, "ACCELSWEEP_CONFIG_DIR": str(user)}
    for name, message in (("bad", "lower tolerance 0.1 must be between -1 and 0"),
                          ("typo", "batchsize is not a point parameter")):
        proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "hardware=cpu", f"reference={name}",
                               "dry_run=true"], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "hardware=cpu", "reference=nope", "dry_run=true"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "reference='nope' is not a reference config; allowed: bad, none, typo" in proc.stderr
    env[inject.ENV] = "cpu=0.5"
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "hardware=cpu", "dry_run=true"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "'cpu=0.5' must be <hardware name>=<factor>, a factor from 1" in proc.stderr


# --------------------------------------------------------------------------- fault injection

def test_injection_factors():
    assert inject.factors("h100=1.25, a100=1") == {"h100": 1.25, "a100": 1.0}
    assert inject.factors("") == {}
    for bad in ("h100", "h100=x", "=1.2", "h100=0.8", "h100=1e9"):
        with pytest.raises(ValueError, match="must be <hardware name>=<factor>"):
            inject.factors(bad)


def test_injection_problems_name_a_bad_logit_noise_and_an_unknown_hardware(monkeypatch):
    known = {"cpu", "h100"}
    monkeypatch.setenv(inject.LOGIT_ENV, "cpu/bf16=0.5")
    monkeypatch.setenv(inject.ENV, "h100=1.25")
    assert inject.problems(known) == []
    monkeypatch.setenv(inject.LOGIT_ENV, "cpu=abc")
    assert "must be <hardware name>[/<precision>]=<nats>" in inject.problems(known)[0]
    monkeypatch.setenv(inject.LOGIT_ENV, "cpux=0.5")
    assert inject.problems(known) == [f"{inject.LOGIT_ENV} names hardware 'cpux', which no hardware file has "
                                      "(known: cpu, h100)"]
    monkeypatch.setenv(inject.LOGIT_ENV, "cpu/zzz=0.5")
    assert inject.problems(known)[0].startswith(f"{inject.LOGIT_ENV} names precision 'zzz', which no precision file")
    monkeypatch.setenv(inject.LOGIT_ENV, "cpu=1,cpu=2")
    assert inject.problems(known) == [f"{inject.LOGIT_ENV}='cpu=1,cpu=2': 'cpu' is given twice; give it once"]


def test_slowed_device_stretches_the_time_between_synchronizations(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(inject.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(inject, "spin", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setenv(inject.ENV, "h100=1.25")
    dev, factor = inject.slowed(Device("cpu"), "h100")
    assert factor == 1.25 and dev.torch_device == "cpu"
    assert inject.slowed(Device("cpu"), "a100") == (Device("cpu"), None)
    dev.synchronize()          # starts the clock
    t0 = clock[0]
    clock[0] += 0.4            # device work
    dev.synchronize()
    assert clock[0] - t0 == pytest.approx(0.5)   # 0.4 s of work took 0.5 s: 20 % less throughput


# --------------------------------------------------------------------------- report

def test_history_page_built_only_for_points_in_several_sweeps(tmp_path):
    from analysis.aggregate import write_table
    from report.build import main

    for name, recs in (("jan", [record("h100", "jan", JAN), record("a100", "jan", JAN)]),
                       ("feb", [record("h100", "feb", FEB, 0.8, info={inject.INFO: 1.25}),
                                record("a100", "feb", FEB)])):
        (tmp_path / "runs" / name).mkdir(parents=True)
        write_table(table_from_records(recs), tmp_path / "runs" / name, csv=False)
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "history.html").read_text()
    assert "Flagged changes (2 regressions, 0 improvements)" in page
    flagged = page.split('id="flagged"')[1].split('id="status-changes"')[0]
    assert "h100" in flagged and "a100" not in flagged and "injected slowdown 1.25x" in flagged
    assert page.count('class="vega-chart"') == 3   # throughput, latency, peak memory
    index = (tmp_path / "site" / "index.html").read_text()
    assert 'href="history.html"' in index and "1 point(s) (h100) were measured with an injected slowdown (1.25x" in index
    assert main([str(tmp_path / "runs" / "jan"), "--out", str(tmp_path / "one")]) == 0
    assert not (tmp_path / "one" / "history.html").exists()
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "none"), "--no-history"]) == 0
    assert not (tmp_path / "none" / "history.html").exists()


def test_report_stage_checks_saved_references_for_status(tmp_path, capsys):
    """A Slurm sweep's report job (jobs.finish) checks the references jobs.sweep saved; jobs.status shows them."""
    import json

    from analysis.aggregate import write_table
    from jobs import finish, status

    sweep = tmp_path / "feb"
    sweep.mkdir()
    write_table(table_from_records([record("h100", "feb", FEB, 0.8), record("a100", "feb", FEB)]), sweep, csv=False)
    finish.check_references(sweep)   # nothing saved: nothing checked
    assert status.reference_summary(sweep) == ("", 0)
    (sweep / status.REFERENCE_SPEC).write_text(json.dumps({"*": {"throughput_out_tok_s": [100, -0.1, None]}}))
    finish.check_references(sweep)
    text, violated = status.reference_summary(sweep)
    assert violated == 1 and "VIOLATED h100" in text and "references: 2 check(s), 1 within bounds" in text
    assert "references: 2 check(s)" in capsys.readouterr().out
    (sweep / status.REFERENCE_SPEC).write_text(json.dumps({"*": {"throughput_out_tok_s": [100, 0.1, None]}}))
    finish.check_references(sweep)   # a reference that does not parse any more: said, not raised
    assert status.reference_summary(sweep)[0].startswith("references: not checked: bad reference config")
