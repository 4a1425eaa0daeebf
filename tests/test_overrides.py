"""Command-line overrides Hydra would refuse are named before it composes: one error line, exit 2 (jobs.overrides)."""
from __future__ import annotations

import pytest

from tests.helpers import ROOT, sweep


@pytest.mark.parametrize("args,message", [
    (["hardware=nonexistent"], "hardware='nonexistent' is not a hardware config; allowed: a100, cpu, "),
    (["model=../../etc"], "model='../../etc' is not a model config; allowed: gemma-2-27b, "),
    (["model=../hardware/cpu"], "model='../hardware/cpu' is not a model config; allowed: "),
    (["-m", "model=tiny-llama,../hardware/cpu"], "model='../hardware/cpu' is not a model config"),
    (["cluster=nonexistent"], "cluster='nonexistent' is not a cluster config; allowed: example-site, local, "),
    (["+experiment=nonexistent"], "experiment='nonexistent' is not a preset; allowed: llm-inference-bench, "),
    (["sweep.name=café"], ("'sweep.name=café' cannot be read (token recognition error at: 'é'); sweep.name must "
                           "be one path component")),
    (["cards=choice()"], ("'cards=choice()' cannot be read (ValueError while evaluating 'choice()': empty choice is "
                          "not legal); cards must be a whole number >= 1")),
    (["workload=superres", "workload.shape=8x2"], ("workload.shape is not a key of workload=superres (its keys: "
                                                   "name, phase, ")),
    (["workload.shapes=8x2"], "workload.shapes is not a key of workload=inference (its keys: name, "),
    (["foo=1"], "foo is not a key of the config (its keys: cards, seed, "),
])
def test_hydra_refusals_are_named(args, message):
    """What Hydra would refuse with its own text and exit 1 is named before it composes (jobs.overrides)."""
    from jobs import overrides

    (why,) = overrides.problems(args)
    assert why.startswith(message), why


def test_hydra_refusals_exit_2(tmp_path):
    """The command line: exit 2 and one error: line, from the checks and from Hydra's own exceptions alike."""
    for args, message in [(["-m", "hardware=nonexistent"], "error: hardware='nonexistent' is not a hardware config"),
                          (["model.config.x=2"], "error: Could not override 'model.config.x'")]:
        proc = sweep(tmp_path, *args)
        assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_default_workload_is_the_configs():
    from jobs import overrides

    assert "- workload: " + overrides.DEFAULT_WORKLOAD in (ROOT / "hydra_conf" / "config.yaml").read_text()
