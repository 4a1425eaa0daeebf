import pytest

from jobs.energy import NoneMeter, RaplMeter, make_meter


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
    assert isinstance(make_meter("auto", "cpu", False), NoneMeter)   # another rank owns the node counter
    with pytest.raises(ValueError, match="allowed: auto, none, rapl"):
        make_meter("joulemeter", "cpu", True)
