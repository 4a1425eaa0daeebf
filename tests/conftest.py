from __future__ import annotations

import os
from typing import Any

import pytest
from hydra import compose, initialize_config_module

from jobs.config import point_config


@pytest.fixture
def make_cfg():
    """A resolved point config for `overrides`, composed from the shipped hydra_conf."""
    def _make(*overrides: str) -> dict[str, Any]:
        with initialize_config_module(config_module="hydra_conf", version_base="1.3"):
            return point_config(compose("config", overrides=list(overrides)))
    return _make


@pytest.fixture
def toy_workload(monkeypatch):
    """Register the test-only workload in tests/toy_workload for one test (the package does not know it)."""
    from jobs import workloads

    monkeypatch.setitem(workloads.WORKLOADS, "toy", "tests.toy_workload")
    return workloads.metric_set("toy")


@pytest.fixture(autouse=True, scope="session")
def _no_user_site(tmp_path_factory):
    """Tests see no default site of the person running them (jobs.cluster: environment, user config dir), and keep
    the accuracy gate's references in a cache of the session's own (jobs.accuracy)."""
    mp = pytest.MonkeyPatch()
    mp.delenv("ACCELSWEEP_CLUSTER", raising=False)
    mp.setenv("ACCELSWEEP_CONFIG_DIR", str(tmp_path_factory.mktemp("user-config")))
    mp.setenv("ACCELSWEEP_CACHE_DIR", str(tmp_path_factory.mktemp("user-cache")))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _environment_restored():
    """A point run in-process sets the thread variables and vLLM's (jobs.devices, the engines), as a job must:
    the next test starts from the environment this one started with."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
