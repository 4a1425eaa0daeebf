"""A node lost mid-point: a surviving rank writes the record when rank 0 does not."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from jobs import plan

# --------------------------------------------------------------------------- a node lost: who writes the record

@pytest.fixture
def rank1_of_2(make_cfg, monkeypatch, tmp_path):
    """A point's rank 1 of 2 (rank 0 on another node) whose collective fails; returns (spec, its folder, run it)."""
    from jobs import point

    spec = plan.make_point(make_cfg(), []).spec()
    hosts = [socket.gethostname(), "n2.invalid"]
    monkeypatch.setattr(point, "_job_env", lambda: (1, 2, 0, 1, hosts))

    def collective_fails(*args, **kwargs):
        raise RuntimeError("gloo: Timed out waiting 20000ms for recv operation to complete")

    monkeypatch.setattr(point, "setup_device", collective_fails)
    monkeypatch.setattr(point, "lost_nodes", lambda hosts: ["n2.invalid"])   # its slurmd does not answer
    monkeypatch.setattr(point, "RANK0_GRACE_S", 1.0)
    worker = point.Worker(late=False, owner=None, dist=True)
    folder = tmp_path / "points" / spec["point_id"]

    def run() -> None:
        with pytest.raises(RuntimeError, match="Timed out"):
            point._run(spec, str(tmp_path), worker)

    cores = os.sched_getaffinity(0)
    yield spec, folder, run
    os.sched_setaffinity(0, cores)   # the rank pinned this process to its card's core


def test_a_survivor_writes_the_record_when_rank_0_does_not(rank1_of_2):
    """Rank 0 was on the lost node, or srun ended it (--kill-on-bad-exit, once another rank exited) before it wrote:
    a surviving rank writes the failed record naming the lost node, after waiting RANK0_GRACE_S for rank 0's."""
    _, folder, run = rank1_of_2
    t0 = time.monotonic()
    run()
    assert time.monotonic() - t0 >= 1.0   # it waited for rank 0's record first
    rec = json.loads((folder / "record.json").read_text())
    assert rec["status"] == "failed", rec
    assert rec["error"]["message"].startswith("lost node(s) n2.invalid (ranks 1-1): its slurmd does not answer"), rec
    assert rec["error"]["message"].endswith("(recorded by rank 1: rank 0 wrote no record within 1 s of this rank's "
                                            "failure)"), rec["error"]
    assert (folder / "rank1.err").is_file()


def test_a_survivor_leaves_the_record_to_rank_0_when_it_writes_one(rank1_of_2):
    """Rank 0's record comes within the grace: the survivor writes none, and ends only then (its end would have
    srun end rank 0 before it wrote)."""
    from jobs import records

    spec, folder, run = rank1_of_2
    folder.mkdir(parents=True)
    rec = records.make_record(point=spec, provenance=records.provenance(start_time=records.now()), status="failed",
                              error=records.error_info(type_="DistBackendError", message="rank 0's own"))
    threading.Timer(0.3, records.write_point_record, (folder / "record.json", rec)).start()
    run()
    assert json.loads((folder / "record.json").read_text())["error"]["message"] == "rank 0's own"
