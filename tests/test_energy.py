import subprocess
import sys
import time
import types

import pytest

from jobs import energy
from jobs.energy import (
    CHOICES,
    AmdSmiMeter,
    HlSmiMeter,
    NodeCounted,
    NoneMeter,
    NvmlMeter,
    RaplMeter,
    make_meter,
    parse_hlsmi_power,
)


def _domain(root, name, value, max_range=1000):
    d = root / name
    d.mkdir()
    (d / "energy_uj").write_text(str(value))
    (d / "max_energy_range_uj").write_text(str(max_range))
    return d


def test_rapl_sums_packages_and_handles_wrap(tmp_path):
    a = _domain(tmp_path, "intel-rapl:0", 900)
    b = _domain(tmp_path, "intel-rapl:1", 100)
    _domain(tmp_path, "intel-rapl:0:0", 5)     # a sub-domain (core) is part of its package: not summed
    m = RaplMeter(tmp_path)
    m.start()
    (a / "energy_uj").write_text("50")         # wrapped: 900 -> 1000 -> 50
    (b / "energy_uj").write_text("400")
    assert m.stop() == pytest.approx((150 + 300) / 1e6)


def test_rapl_absent(tmp_path):
    with pytest.raises(OSError, match="no readable RAPL"):
        RaplMeter(tmp_path)


def test_meter_choice():
    assert isinstance(make_meter("none", "cpu", True), NoneMeter)
    assert isinstance(make_meter("auto", "cpu", False), NodeCounted)   # another rank owns the node counter
    with pytest.raises(ValueError, match="allowed: auto, none, rapl"):
        make_meter("joulemeter", "cpu", True)


def test_rapl_energy_is_summed_per_node(tmp_path, monkeypatch):
    """2 nodes x 2 ranks: each node's local rank 0 reads its node's RAPL counter, the other rank adds 0 J, so the
    point's energy is the sum of one reading per node; a node without a reading leaves the sum out (no undercount)."""
    from jobs.measure import energy as summed

    nodes = []
    for n, joules in (("n1", 3.0), ("n2", 5.0)):
        (tmp_path / n).mkdir()
        nodes.append((_domain(tmp_path / n, "intel-rapl:0", 0, max_range=10**9), tmp_path / n, joules))
    readings = []
    for dom, root, joules in nodes:
        monkeypatch.setattr(energy, "RaplMeter", lambda root=root: RaplMeter(root))
        for local_rank in (0, 1):
            m = make_meter("rapl", "cpu", owns_node_counter=local_rank == 0)
            m.start()
            (dom / "energy_uj").write_text(str(int(joules * 1e6)))
            readings.append({"energy_j": m.stop()})
    assert [r["energy_j"] for r in readings] == [3.0, 0.0, 5.0, 0.0]
    assert summed(readings, work=8.0, per_joule="x_per_j") == {"energy_j": [8.0], "x_per_j": [1.0]}
    readings[2]["energy_j"] = None   # node 2's counter unreadable
    assert summed(readings, work=8.0, per_joule="x_per_j") == {}


# --- vendor meters, faked at the library/subprocess boundary -------------------------------------------
WINDOW_S = 0.3


def _window(meter) -> float | None:
    """Joules of one measured window of about WINDOW_S."""
    meter.start()
    time.sleep(WINDOW_S)
    return meter.stop()


def _integral_of(meter, watts: float) -> float:
    """What a constant `watts` over the meter's own samples integrates to (a definition, not a timing)."""
    stamps = [t for t, _ in meter._sampler.samples]
    assert len(stamps) >= 2 and stamps == sorted(stamps)   # at least the window's start and stop edges
    return watts * (stamps[-1] - stamps[0])


def _fake_nvml(monkeypatch, energy_mj=None, power_mw=200_000):
    """A pynvml with a scripted energy counter (list of readings; None: not supported) and constant power."""
    class NVMLError(Exception):
        pass

    calls = {"init": 0, "shutdown": 0, "index": []}
    readings = list(energy_mj) if energy_mj is not None else None

    def total_energy(handle):
        if readings is None:
            raise NVMLError("Not Supported")
        value = readings.pop(0) if len(readings) > 1 else readings[0]
        if isinstance(value, Exception):
            raise value
        return value

    fake = types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: calls.__setitem__("init", calls["init"] + 1),
        nvmlShutdown=lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        nvmlDeviceGetHandleByIndex=lambda i: calls["index"].append(i) or f"handle{i}",
        nvmlDeviceGetTotalEnergyConsumption=total_energy,
        nvmlDeviceGetPowerUsage=lambda handle: power_mw,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake, calls


def test_nvml_energy_counter(monkeypatch):
    # the constructor probes the counter once, then start and stop read it
    _, calls = _fake_nvml(monkeypatch, energy_mj=[500, 1000, 6000])
    m = NvmlMeter(device_index=3)
    assert m.name == "nvml" and calls["index"] == [3]
    m.start()
    assert m.stop() == pytest.approx(5.0)
    assert m.note is None and calls["shutdown"] == calls["init"] == 1


def test_nvml_maps_visible_devices(monkeypatch):
    _, calls = _fake_nvml(monkeypatch, energy_mj=[0])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    NvmlMeter(device_index=1)
    assert calls["index"] == [6]   # torch's cuda:1 is the machine's GPU 6


def test_nvml_falls_back_to_power_sampling(monkeypatch):
    _fake_nvml(monkeypatch, energy_mj=None, power_mw=200_000)
    m = NvmlMeter(0, interval_s=0.005)
    assert m.name == "nvml-power-sampling"
    joules = _window(m)
    assert joules == pytest.approx(_integral_of(m, 200)) and m.note is None


def test_nvml_device_lost_at_stop(monkeypatch):
    fake, calls = _fake_nvml(monkeypatch, energy_mj=[0, 1000])
    m = NvmlMeter(0)
    m.start()
    monkeypatch.setattr(fake, "nvmlDeviceGetTotalEnergyConsumption",
                        lambda h: (_ for _ in ()).throw(fake.NVMLError("GPU is lost")))
    assert m.stop() is None
    assert "GPU is lost" in m.note and calls["shutdown"] == 1


def test_nvml_sampling_device_lost_mid_run(monkeypatch):
    fake, _ = _fake_nvml(monkeypatch, energy_mj=None)
    m = NvmlMeter(0, interval_s=0.005)
    m.start()
    monkeypatch.setattr(fake, "nvmlDeviceGetPowerUsage", lambda h: (_ for _ in ()).throw(fake.NVMLError("lost")))
    time.sleep(0.05)
    assert m.stop() is None and "lost" in m.note


def test_parse_hlsmi_power():
    assert parse_hlsmi_power("0, 87 W\n1, 90.5 W\n") == {0: 87.0, 1: 90.5}
    assert parse_hlsmi_power("index, power.draw [W]\n0, 87 W\n7, 87.5 W\n") == {0: 87.0, 7: 87.5}
    assert parse_hlsmi_power("3, 101.25\n") == {3: 101.25}
    assert parse_hlsmi_power("0, N/A\n1, 60 W\n") == {1: 60.0}
    assert parse_hlsmi_power("") == {}


def test_hlsmi_integrates_its_own_device(monkeypatch):
    monkeypatch.setattr(energy, "_run_hlsmi", lambda: "0, 500 W\n1, 100 W\n2, 500 W\n")
    m = HlSmiMeter(device_index=1, interval_s=0.005)
    joules = _window(m)
    assert joules == pytest.approx(_integral_of(m, 100)) and m.note is None


def test_hlsmi_device_vanishes_mid_run(monkeypatch):
    state = {"text": "0, 100 W\n1, 100 W\n"}
    monkeypatch.setattr(energy, "_run_hlsmi", lambda: state["text"])
    m = HlSmiMeter(device_index=1, interval_s=0.005)
    m.start()
    state["text"] = "0, 100 W\n"
    time.sleep(0.05)
    assert m.stop() is None and "device 1" in m.note

    def failing():
        raise subprocess.CalledProcessError(1, "hl-smi")
    state["text"] = "0, 100 W\n1, 100 W\n"
    m.start()
    monkeypatch.setattr(energy, "_run_hlsmi", failing)
    assert m.stop() is None and "CalledProcessError" in m.note


def test_hlsmi_missing(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(FileNotFoundError, match="hl-smi.*Gaudi driver"):
        HlSmiMeter(0)
    assert isinstance(make_meter("auto", "hpu", True), NoneMeter)


def _fake_amdsmi(monkeypatch, readings, resolution=15.3, key="energy_accumulator"):
    class AmdSmiException(Exception):
        pass

    values = list(readings)

    def energy_count(handle):
        value = values.pop(0) if len(values) > 1 else values[0]
        if isinstance(value, Exception):
            raise value
        return {key: value, "counter_resolution": resolution, "timestamp": 0}

    fake = types.SimpleNamespace(AmdSmiException=AmdSmiException, amdsmi_init=lambda: None,
                                 amdsmi_shut_down=lambda: None,
                                 amdsmi_get_processor_handles=lambda: ["h0", "h1"],
                                 amdsmi_get_energy_count=energy_count)
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    return fake


def test_amdsmi_counter_difference(monkeypatch):
    _fake_amdsmi(monkeypatch, [0, 1_000, 1_000 + 2_000_000], resolution=15.0)
    m = AmdSmiMeter(1)
    m.start()
    assert m.stop() == pytest.approx(2_000_000 * 15.0 / 1e6)   # ticks × µJ/tick


def test_amdsmi_wrap_and_old_key(monkeypatch):
    _fake_amdsmi(monkeypatch, [0, 2 ** 64 - 100, 400], resolution=1.0, key="power")
    m = AmdSmiMeter(0)
    m.start()
    assert m.stop() == pytest.approx(500 / 1e6)


def test_amdsmi_device_lost_at_stop(monkeypatch):
    fake = _fake_amdsmi(monkeypatch, [0, 10])
    m = AmdSmiMeter(0)
    m.start()
    monkeypatch.setattr(fake, "amdsmi_get_energy_count",
                        lambda h: (_ for _ in ()).throw(fake.AmdSmiException("gone")))
    assert m.stop() is None and "gone" in m.note


def test_make_meter_vendor_choices(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)     # nvidia-ml-py not installed
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    assert isinstance(make_meter("auto", "cuda", True), NoneMeter)
    assert isinstance(make_meter("auto", "rocm", True), NoneMeter)
    with pytest.raises(ImportError, match=r"accelsweep\[cuda\]"):
        make_meter("nvml", "cuda", True)
    with pytest.raises(ImportError, match=r"accelsweep\[rocm\]"):
        make_meter("amdsmi", "rocm", True)
    with pytest.raises(ValueError) as err:
        make_meter("joulemeter", "cuda", True)
    assert "joulemeter" in str(err.value) and all(c in str(err.value) for c in CHOICES)


def test_make_meter_auto_picks_vendor(monkeypatch):
    _fake_nvml(monkeypatch, energy_mj=[0])
    m = make_meter("auto", "cuda", owns_node_counter=False, device_index=2)   # every rank meters its own GPU
    assert isinstance(m, NvmlMeter) and m.device_index == 2


def test_make_meter_auto_unreadable_counters(monkeypatch):
    fake, _ = _fake_nvml(monkeypatch, energy_mj=None)
    monkeypatch.setattr(fake, "nvmlDeviceGetPowerUsage", lambda h: (_ for _ in ()).throw(fake.NVMLError("no")))
    assert isinstance(make_meter("auto", "cuda", True), NoneMeter)
    with pytest.raises(energy.MeterUnavailable):
        make_meter("nvml", "cuda", True)


def test_multi_meter_sums_devices_and_needs_every_reading():
    from jobs.energy import MultiMeter

    class Fixed:
        name = "fake"

        def __init__(self, joules):
            self.joules = joules

        def start(self):
            pass

        def stop(self):
            return self.joules

    assert MultiMeter([Fixed(1.5), Fixed(2.5)]).stop() == 4.0
    assert MultiMeter([Fixed(1.5), Fixed(None)]).stop() is None
