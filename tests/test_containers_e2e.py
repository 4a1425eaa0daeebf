"""Points inside a container on the test Slurm cluster: Charliecloud's ch-run with the image of ci/container.sh
(Debian 12's python, the CPU torch, this checkout, llama.cpp), on one node and over two `multi` nodes, and the
faults a site's container setting can have: a runtime not installed on the node, a bind the image cannot take.
The records must say which image (its SquashFS digest) and which python ran them: the image's (Debian's 3.11),
not the host's."""
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import containers, records
from tests import helpers

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
IMAGE = os.environ.get("ACCELSWEEP_CONTAINER_IMAGE")
if not (IMAGE and Path(IMAGE).exists() and shutil.which("ch-run") and shutil.which("sbatch")):
    if os.environ.get("ACCELSWEEP_REQUIRE_CONTAINER"):
        raise RuntimeError(f"ACCELSWEEP_REQUIRE_CONTAINER is set but ACCELSWEEP_CONTAINER_IMAGE={IMAGE!r}, ch-run "
                           "or sbatch is missing; run ci/container.sh and ci/slurm.sh start")
    pytest.skip("no Charliecloud image or Slurm cluster here (ci/container.sh, ci/slurm.sh start)",
                allow_module_level=True)

PYTHON = "/opt/accelsweep/bin/python"
CONTAINER = f"++cluster.slurm.container={{runtime:charliecloud,image:'{IMAGE}',python:{PYTHON}}}"
COMMON = ("sweep.poll_s=1", "sweep.poll_max_s=2",
          "sweep.wait=true", "sweep.report=false")
INFERENCE = ("workload=inference", "workload.engine=hf", "model=tiny-llama", "workload.shape=4x3",
             "workload.repeats=3", "workload.warmup=0", "workload.noise.target=null")


def _sweep(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "USER": os.environ.get("USER", "root")}   # ch-run wants USER
    return helpers.sweep(cwd, "-m", *COMMON, *args, env=env, timeout=900, check=check)


_records = helpers.point_records


@pytest.fixture(scope="module")
def image_python() -> str:
    out = subprocess.run(["ch-run", IMAGE, "--", PYTHON, "-c", "import platform; print(platform.python_version())"],
                         capture_output=True, text=True, timeout=60, check=True, env={**os.environ, "USER": "root"})
    version = out.stdout.strip()
    assert version != ".".join(map(str, sys.version_info[:3])), "the image's python is the host's: nothing is shown"
    return version


def _assert_ran_in_the_image(rec: dict, python: str) -> None:
    records.validate(rec)
    assert rec["status"] == "ok", rec.get("error")
    prov = rec["provenance"]
    assert prov["packages"]["python"] == python, prov["packages"]   # the image's interpreter, not the host's
    assert prov["container"] == IMAGE and prov["container_digest"] == containers.digest(IMAGE), prov
    assert prov["container_runtime"].startswith("charliecloud 0."), prov


def test_inference_and_serving_points_run_inside_charliecloud(tmp_path, image_python):
    """An hf inference point and a llama.cpp serving point, each in ch-run on the cluster's node."""
    _sweep(tmp_path, "cluster=localslurm", CONTAINER, *INFERENCE, "sweep.name=inside")
    _sweep(tmp_path, "cluster=localslurm", CONTAINER, "workload=serving", "workload.engine=llamacpp",
           "workload.level=2", "workload.requests=8", "workload.shape=32x16", "workload.warmup_requests=2",
           "sweep.name=inside")
    recs = _records(tmp_path / "runs" / "inside")
    assert sorted(r["params"]["workload"] for r in recs) == ["inference", "serving"]
    for rec in recs:
        _assert_ran_in_the_image(rec, image_python)
    serving = next(r for r in recs if r["params"]["workload"] == "serving")
    assert serving["info"]["ok_requests"] == 8 and serving["accuracy"]["passed"] is True


def test_an_inference_point_runs_inside_charliecloud_over_two_nodes(tmp_path, image_python):
    """cards=4 as 2 nodes x 2 ranks of hf replicas, every rank in its own ch-run on its node (gloo over the
    bridge between the namespace nodes)."""
    _sweep(tmp_path, "cluster=localslurm-multi", "hardware=cpu", "hardware.cards_per_node=2", "cards=4", CONTAINER,
           *INFERENCE, "sweep.name=multi")
    (rec,) = _records(tmp_path / "runs" / "multi")
    _assert_ran_in_the_image(rec, image_python)
    nodes = rec["provenance"]["nodes"]
    assert len(set(nodes)) == 2 and rec["info"]["ranks"] == 4, rec["provenance"]
    assert sorted(rec["info"]["rank_hosts"].split(";")) == sorted(nodes * 2)


def test_a_missing_runtime_and_a_bind_the_image_cannot_take_are_failed_records(tmp_path):
    """Two hardware kinds, two bad container settings: each job ends at once with a failed record that says why."""
    proc = _sweep(tmp_path, "cluster=localslurm", "hardware=cpu,h100", "device_override=cpu", *INFERENCE,
                  # sarus runs images by name (a path is refused at plan time): the node lacks the runtime itself
                  "++cluster.per_hardware.cpu.container={runtime:sarus,image:'debian:12'}",
                  f"++cluster.per_hardware.h100.container={{runtime:charliecloud,image:'{IMAGE}',"
                  f"binds:['{tmp_path}:/no/such/dir']}}", "sweep.name=bad", check=False)
    assert proc.returncode != 0
    subprocess.run([sys.executable, "-m", "jobs.status", "--record", str(tmp_path / "runs" / "bad")], cwd=tmp_path,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=120, check=False)
    recs = {r["params"]["hardware"]: r for r in _records(tmp_path / "runs" / "bad")}
    assert {r["status"] for r in recs.values()} == {"failed"}, recs
    assert f"the container runtime sarus (sarus) is not installed on {socket.gethostname()};" in recs["cpu"]["error"]["log_tail"]
    # ch-run's own words: the read-only SquashFS image has no mount point for the bind's destination
    assert "ch-run" in recs["h100"]["error"]["log_tail"] and "can't mkdir" in recs["h100"]["error"]["log_tail"]
