"""sweep.name is one path component (a number is a name too); a rejected or dry sweep writes nothing anywhere."""
from __future__ import annotations

from pathlib import Path

import pytest

from jobs import plan
from tests.helpers import problems, sweep


@pytest.mark.parametrize("name", ["../../../x", "/tmp/abs", "", ".", "..", "a/b", "-x"])
def test_unsafe_sweep_name_rejected(make_cfg, name):
    (why,) = problems(make_cfg, f"sweep.name={name}")
    assert why.startswith(f"sweep.name={name!r} must be one path component")


def test_numeric_sweep_name_is_a_name(make_cfg):
    cfg = make_cfg("sweep.name=2024")
    assert plan.make_point(cfg, []).problems == [] and cfg["sweep"]["name"] == "2024"


def test_rejected_or_dry_sweep_writes_nothing(tmp_path):
    """Names that escape runs/ are rejected (exit 2) and nothing at all is written; nor by a dry run."""
    cwd = tmp_path / "a" / "b" / "c"
    cwd.mkdir(parents=True)
    proc = sweep(cwd, "-m", "sweep.name=../../../x,.,/tmp/accelsweep-abs", "cards=1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("must be one path component") == 3
    single = sweep(cwd, "sweep.name=../../escape")          # without -m: Hydra's run mode
    assert single.returncode == 2 and "must be one path component" in single.stderr
    dry = sweep(cwd, "-m", "cards=1,2", "dry_run=true")
    assert dry.returncode == 0 and "dry run: nothing submitted" in dry.stdout
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [] and not (cwd / "runs").exists()
    assert not Path("/tmp/accelsweep-abs").exists()
