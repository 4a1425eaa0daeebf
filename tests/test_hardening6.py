"""Bad input and faults, sixth probe: each test is one row of the table in docs/explanation/faults.md.

A user's config file without its `name:`, a report written over a user's own page, and secrets in the config."""
from __future__ import annotations

import pytest

from jobs import conf, plan
from tests.test_hardening import ENV
from tests.test_hardening2 import sweep

# --------------------------------------------------------------------------- a config file without name:


def test_a_user_model_file_without_name_is_a_message(tmp_path):
    """A model file in the user config directory without `name:` (it ended in KeyError: 'name', a traceback):
    exit 2, one `error:` naming the key and what the file must say; nothing written."""
    user = tmp_path / "config"
    (user / "model").mkdir(parents=True)
    shipped = (conf.SHIPPED / "model" / "tiny-llama.yaml").read_text()
    (user / "model" / "mine.yaml").write_text("".join(line for line in shipped.splitlines(keepends=True)
                                                      if not line.startswith("name:")))
    work = tmp_path / "work"
    work.mkdir()
    proc = sweep(work, "model=mine", "sweep.name=x", env={**ENV, "ACCELSWEEP_CONFIG_DIR": str(user)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "model=mine sweep.name=x: model.name is missing: a model config file names itself (name: " in proc.stderr
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("group", ["hardware", "model", "precision", "workload", "cluster"])
def test_a_config_group_without_name_is_refused_at_plan_time(make_cfg, group):
    """Whichever group's file lacks its name, the plan says so (the point id, the site check and the workload
    lookup all read it): one problem, no KeyError."""
    cfg = make_cfg()
    del cfg[group]["name"]
    with pytest.raises(plan.SweepRejected) as caught:
        plan.plan([([f"{group}=mine"], cfg)])
    assert [why for _, why in caught.value.problems] == [caught.value.problems[0][1]], caught.value.problems
    assert caught.value.problems[0][1].startswith(f"{group}.name is missing: a {group} config file "), caught.value

