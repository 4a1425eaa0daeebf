"""The noise control (jobs.noise): the median's interval, the stopping rule on a fake clock, the record block."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import noise, records
from jobs.noise import Settings, Stopper, median_ci


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_median_ci_order_statistics():
    # n=5 at 95%: P(B(5, 1/2) = 0) = 1/32 > 0.025, so no interval; n=6: 1/64 <= 0.025 -> (min, max).
    assert median_ci([1, 2, 3, 4, 5]) is None
    assert median_ci([6, 1, 5, 2, 4, 3]) == (1, 6)
    # n=10: P(B<=1) = 11/1024 = 0.0107 <= 0.025, P(B<=2) = 56/1024 = 0.0547 > 0.025 -> k=2: (x(2), x(9))
    assert median_ci(list(range(1, 11))) == (2, 9)
    # a lower confidence needs fewer samples: n=5 at 90%: 1/32 = 0.031 <= 0.05 -> (min, max)
    assert median_ci([1, 2, 3, 4, 5], confidence=0.9) == (1, 5)


def test_assess_hand_arithmetic():
    xs = [100, 101, 99, 100, 102, 98]
    block = noise.assess(xs, Settings(min_repeats=3, target=0.05), metric="m")
    assert (block["ci_lo"], block["ci_hi"], block["n"]) == (98, 102, 6)
    assert block["rel_width"] == pytest.approx(4 / 100)
    assert block["cv"] == pytest.approx((sum((x - 100) ** 2 for x in xs) / 5) ** 0.5 / 100)
    assert block["stable"] is True and block["stop"] == "stable"
    loose = noise.assess(xs, Settings(min_repeats=3, target=0.01), metric="m")
    assert loose["stable"] is False and loose["stop"] == "max_seconds"   # short of max_repeats: the time budget


def test_stops_when_the_median_is_known():
    clock = FakeClock()
    s = Stopper(Settings(min_repeats=3, target=0.05, max_repeats=30, max_seconds=100), clock=clock)
    done = [s.add(v) for v in [100, 101, 99, 100, 102, 98]]
    assert done == [False] * 5 + [True] and s.reason == "stable"   # 6 samples: the first 95% interval


def test_noisy_point_stops_at_the_repeat_budget_unstable():
    s = Stopper(Settings(min_repeats=3, target=0.05, max_repeats=8, max_seconds=None), clock=FakeClock())
    values = [1, 3] * 10
    n = next(i for i, v in enumerate(values, 1) if s.add(v))
    assert (n, s.reason) == (8, "max_repeats")
    assert noise.assess(s.values, s.settings, metric="m")["stable"] is False


def test_time_budget_on_a_fake_clock():
    clock = FakeClock()
    s = Stopper(Settings(min_repeats=3, target=0.05, max_repeats=100, max_seconds=10), clock=clock)
    for v in [1, 3, 1]:            # the minimum runs whatever the clock says
        clock.t += 20
        stopped = s.add(v)
    assert stopped and s.reason == "max_seconds" and len(s.values) == 3
    clock2 = FakeClock()
    s2 = Stopper(Settings(min_repeats=3, target=0.05, max_repeats=100, max_seconds=10), clock=clock2)
    assert not any(s2.add(v) for v in [1, 3, 1, 3])   # noisy, but no time has passed
    clock2.t = 10
    assert s2.add(1) and s2.reason == "max_seconds"


def test_fixed_repeats_without_target():
    s = Stopper(Settings(min_repeats=4, target=None), clock=FakeClock())
    assert [s.add(v) for v in [1, 5, 9, 2]] == [False, False, False, True] and s.reason == "fixed"


def test_settings_from_config_repeats_is_the_minimum():
    s = Settings.of({"repeats": 50, "noise": {"target": 0.02, "confidence": 0.9, "max_repeats": 30, "max_seconds": 5}})
    assert (s.min_repeats, s.max_repeats, s.target, s.confidence, s.max_seconds) == (50, 50, 0.02, 0.9, 5)
    assert Settings.of({"repeats": 3}).target == noise.DEFAULTS["target"]   # configs from before the noise block


def test_yaml_defaults_are_the_module_defaults():
    import yaml

    wl = yaml.safe_load((Path(__file__).parents[1] / "hydra_conf/workload/inference.yaml").read_text())
    assert wl["noise"] == noise.DEFAULTS


def test_point_id_ignores_default_noise_settings(make_cfg):
    from jobs.plan import point_id

    base = make_cfg()
    no_block = {**base, "workload": {k: v for k, v in base["workload"].items() if k != "noise"}}
    assert point_id(base) == point_id(no_block)
    tighter = {**base, "workload": {**base["workload"], "noise": {**noise.DEFAULTS, "target": 0.02}}}
    assert point_id(tighter) != point_id(base)


def test_record_carries_the_noise_block_and_validates():
    point = {"point_id": "0123456789ab", "sweep": "s", "command": "c",
             "params": {"workload": "inference", "hardware": "cpu", "model": "m", "precision": "fp32", "cards": 1,
                        "nodes": 1, "repeats": 3},
             "cfg": {"workload": {"repeats": 3, "noise": {**noise.DEFAULTS, "max_repeats": 6}}}}
    samples = {"throughput_out_tok_s": [10, 30, 10, 30, 10, 30], "latency_s": [1] * 6}
    rec = records.make_record(point=point, status="ok", samples=samples,
                              provenance=records.provenance(start_time=records.now()))
    records.validate(rec)
    assert rec["noise"]["n"] == 6 and rec["noise"]["stable"] is False and rec["noise"]["stop"] == "max_repeats"
    assert (rec["noise"]["ci_lo"], rec["noise"]["ci_hi"]) == (10, 30)
    old = {k: v for k, v in rec.items() if k != "noise"}   # records from before noise control stay valid
    records.validate(old)


@pytest.mark.skipif(not os.path.exists("/proc/stat") or not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_host_load_sees_another_process_on_the_pinned_core():
    """Issue 26: the record says whether other processes ran on the point's cores (here an orphaned busy loop,
    not of this process tree, on the one core this process is pinned to)."""
    code = """
import json, os, subprocess, time
from jobs.devices import HostLoad
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
subprocess.run(["sh", "-c", "timeout 4 sh -c 'while :; do :; done' >/dev/null 2>&1 &"], check=True)
time.sleep(0.3)
load = HostLoad().start(); time.sleep(1.5); print(json.dumps(load.stop()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    info = json.loads(out.stdout)
    assert info["cores_shared"] is True and info["other_on_cores_frac"] >= 0.3, info
    assert info["load_avg_1m_end"] >= 0 and info["host_cores"] == os.cpu_count()


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_median_ci_past_the_exact_sums_agrees_with_them(confidence, monkeypatch):
    """Past EXACT_UP_TO samples k comes from scipy's binomial CDF: the same k as the exact sums, checked around the
    switch and beyond it (the exact sums forced on by raising the limit)."""
    ns = list(range(2, 60)) + list(range(990, 1012)) + [1500, 2047, 3000]
    fast = [noise.order_statistic(n, confidence) for n in ns]
    monkeypatch.setattr(noise, "EXACT_UP_TO", 10**9)
    assert fast == [noise.order_statistic(n, confidence) for n in ns]
