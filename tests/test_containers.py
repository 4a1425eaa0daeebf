"""Container templates (jobs/containers.py): the command and srun arguments each runtime gives, the image's identity,
and the refusals of bad settings at plan time. The points run inside Charliecloud in tests/test_containers_e2e.py."""
import hashlib
import json
from pathlib import Path

import pytest

from jobs import containers, plan
from jobs.schedulers import slurm


def _container(runtime: str, image: str, **extra: str) -> str:
    keys = ",".join(f"{k}:{v}" for k, v in {"runtime": runtime, "image": f"'{image}'", **extra}.items())
    return f"++cluster.slurm.container={{{keys}}}"


def _script(make_cfg, *overrides: str, sweep_dir: Path = Path("/scratch/sweep")) -> str:
    cfg = make_cfg("cluster=localslurm", *overrides)
    return slurm.script(plan.resources_for(cfg), 1, "n", sweep_dir, cfg["cluster"])


@pytest.mark.parametrize("runtime, device, expected", [
    ("charliecloud", "cpu", ("ch-run --home --unset-env=PYTHONPATH -b /scratch/sweep:/scratch/sweep --cd=/scratch/sweep IMG -- python3 -u -m "
                            "submitit.core._submit")),
    ("apptainer", "cuda", "apptainer exec --nv --bind /scratch/sweep:/scratch/sweep --pwd /scratch/sweep IMG python3"),
    ("apptainer", "rocm", "apptainer exec --rocm --bind"),
    ("podman-hpc", "cuda", "podman-hpc run --rm --gpu -v /scratch/sweep:/scratch/sweep -w /scratch/sweep IMG python3"),
    ("sarus", "cuda", ("sarus run --mount=type=bind,source=/scratch/sweep,destination=/scratch/sweep "
                      "--workdir=/scratch/sweep IMG python3")),
])
def test_each_runtime_wraps_the_jobs_python(make_cfg, runtime, device, expected, tmp_path):
    image = tmp_path / "IMG"
    image.write_bytes(b"image")
    by_name = not containers.RUNTIMES[runtime].paths   # podman-hpc and sarus run images by name only
    hw = {"cpu": "cpu", "cuda": "h100", "rocm": "mi300x"}[device]
    text = _script(make_cfg, f"hardware={hw}", _container(runtime, "ubuntu:22.04" if by_name else str(image)))
    assert expected.replace("IMG", "ubuntu:22.04" if by_name else str(image)) in text, text
    binary = containers.RUNTIMES[runtime].binary
    assert f"command -v {binary} >/dev/null ||" in text and "is not installed on $(hostname)" in text
    assert f"export {containers.VERSION_ENV}=" in text and 'export USER="${USER:-$(id -un)}"' in text
    identity = json.loads(text.split(f"export {containers.ENV}='")[1].split("'")[0])
    assert identity == ({"runtime": runtime, "image": "ubuntu:22.04", "digest": None} if by_name else
                        {"runtime": runtime, "image": str(image),
                         "digest": f"sha256:{hashlib.sha256(b'image').hexdigest()}"})


def test_enroot_puts_srun_itself_in_the_image_through_pyxis(make_cfg):
    text = _script(make_cfg, "hardware=h100", "cards=4", _container("enroot", "nvcr.io#nvidia/pytorch:25.01-py3",
                                                                    python="/usr/bin/python"))
    assert ("'--container-image=nvcr.io#nvidia/pytorch:25.01-py3' --container-mounts=/scratch/sweep:/scratch/sweep "
            "--container-workdir=/scratch/sweep /usr/bin/python -u -m submitit.core._submit") in text, text
    assert '"digest": null' in text   # a registry reference: its digest is the registry's, not read here


def test_a_command_prefix_is_kept_as_given(make_cfg):
    text = _script(make_cfg, "hardware.slurm.container=apptainer exec --nv img.sif")
    assert "apptainer exec --nv img.sif " in text and containers.ENV not in text


def test_binds_go_beside_the_sweep_directory(make_cfg, tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "bin").mkdir()   # an image directory: a root file system
    text = _script(make_cfg, _container("charliecloud", str(tmp_path / "img"), binds=f"[{tmp_path}:/data]"))
    assert f"-b /scratch/sweep:/scratch/sweep -b {tmp_path}:/data " in text


@pytest.mark.parametrize("setting, message", [
    ("{runtime:docker,image:x}", "container.runtime='docker'; allowed: charliecloud, apptainer, enroot"),
    ("{runtime:charliecloud,image:/no/such.sqfs}", "container.image='/no/such.sqfs': no such file or directory"),
    ("{runtime:charliecloud}", "container.image must name the image"),
    ("{runtime:charliecloud,image:'docker://x',binds:[/no/such:/data]}", "its source '/no/such' does not exist here"),
    ("{runtime:charliecloud,image:'docker://x',gpus:1}", "container.gpus is not a setting; allowed: runtime, image"),
    ("[1]", "container must be a command prefix or a mapping of runtime, image"),
    ("{runtime:charliecloud,image:'docker://x'}", "charliecloud runs a SquashFS file or an image directory, not a "
                                                  "registry reference"),
    ("{runtime:sarus,image:/tmp}", "sarus runs images by name"),
    ("{runtime:apptainer,image:/dev/zero}", "'/dev/zero': apptainer runs a SIF or SquashFS file"),
    ("{runtime:apptainer,image:'docker://x',binds:[data]}", "'data': source and destination must be absolute paths"),
    ("{runtime:apptainer,image:'docker://x',binds:['/tmp:/data:ro']}", "a bind is SRC or SRC:DST"),
    ("{runtime:apptainer,image:'docker://x',binds:['/tmp/a,b']}", "a bind is SRC or SRC:DST"),
    ("{runtime:apptainer,image:'docker://x',binds:true}", "container.binds must be a list of strings, got True"),
    ("{runtime:apptainer,image:'docker://x',python:42}", "container.python=42 must be the image's python"),
    ("{runtime:apptainer,image:'docker://x',python:'python3 -X dev'}", "must be the image's python"),
    ("{runtime:apptainer,image:'docker://x',options:['--bind /x']}", "'--bind /x' is two words in one item"),
    ("{runtime:apptainer,image:'docker://x',options:['--env=HF_TOKEN=abcdef123']}",
     "container.options[0]='--env=HF_TOKEN=<redacted>' sets a secret"),
    ("apptainer", "'apptainer' is a runtime alone, not a command prefix"),
    ("'apptainer exec \"img'", "is not a command line the shell can read"),
    ("{runtime:[apptainer],image:x}", "container.runtime=['apptainer']; allowed"),
    ("{runtime:sarus,image:'docker://x'}", "sarus takes no docker:// reference"),
    ("{runtime:enroot,image:/tmp}", "'/tmp': enroot runs a SquashFS (.sqsh) file"),
    ("{runtime:sarus,image:'ubuntu 22.04'}", "an image name holds no spaces"),
    ("{runtime:apptainer,image:'docker://x',binds:['/tmp','/var:/tmp/']}", "/tmp and /var both bound onto /tmp"),
    ("'apptainer exec img.sif # c'", "holds a shell operator or comment outside quotes"),
    ("charliecloud", "'charliecloud' is a runtime alone"),
    ("{runtime:apptainer,image:'docker://x',options:['--env=PGPASSWORD=abc']}", "'--env=PGPASSWORD=<redacted>' sets"),
    ("{runtime:apptainer,image:'docker://x',options:['--env=DATA=$SCRATCH/d']}", "so $SCRATCH would not be expanded"),
    ("'runtime:charliecloud'", "starts with 'runtime:charliecloud', a setting, not a command: quote the mapping"),
    ("'python:/opt/venv/bin/python'", "a setting, not a command"),
])
def test_bad_container_settings_are_refused_at_plan_time(make_cfg, setting, message):
    with pytest.raises(plan.SweepRejected) as err:
        plan.plan([([], make_cfg("cluster=localslurm", f"++cluster.slurm.container={setting}"))])
    assert message in str(err.value), str(err.value)


def test_an_image_that_cannot_be_one_is_refused_at_plan_time(make_cfg, tmp_path):
    (tmp_path / "fake.sqfs").write_text("not squashfs")
    (tmp_path / "empty").mkdir()
    for image, words in ((tmp_path / "fake.sqfs", "not a SquashFS file"), (tmp_path / "empty", "an empty directory")):
        with pytest.raises(plan.SweepRejected) as err:
            plan.plan([([], make_cfg("cluster=localslurm", _container("charliecloud", str(image))))])
        assert words in str(err.value), str(err.value)


@pytest.mark.parametrize("sweep_dir, binds, message", [
    ("/scratch/a,b/sweep", "[/tmp]", "the sweep directory /scratch/a,b/sweep holds ',' or ':'"),
    ("/scratch/a:b/sweep", "[/tmp]", "holds ',' or ':'"),
    ("/scratch/sweep", "['/tmp:/scratch']", "/tmp:/scratch would be mounted over the sweep directory /scratch/sweep"),
    ("/scratch/sweep", "['/tmp:/scratch/sweep/']", "/tmp:/scratch/sweep would be mounted over the sweep directory"),
    ("/scratch/sweep", "['/tmp:/']", "/tmp:/ would be mounted over"),
])
def test_a_sweep_directory_the_container_cannot_bind_is_refused(make_cfg, sweep_dir, binds, message):
    points = plan.plan([([], make_cfg("cluster=localslurm", _container("apptainer", "docker://x", binds=binds)))])
    problems = plan.container_workdir_problems(points, Path(sweep_dir))
    assert [where for where, _ in problems] == [points[0].label], problems
    assert message in problems[0][1] and "cluster.slurm.container" in problems[0][1], problems


def test_a_bind_beside_or_of_the_sweep_directory_itself_is_accepted(make_cfg):
    binds = "['/usr:/data','/tmp','/usr:/tmp/models','/usr:/tmpx']"   # sweep directory /tmp
    points = plan.plan([([], make_cfg("cluster=localslurm", _container("apptainer", "docker://x", binds=binds)))])
    assert plan.container_workdir_problems(points, Path("/tmp")) == []


def test_an_image_is_recorded_by_its_absolute_path_and_suits_its_runtime(make_cfg, tmp_path, monkeypatch):
    (tmp_path / "img.sqfs").write_bytes(containers.SQUASHFS_MAGIC + b"image")
    (tmp_path / "img.sif").write_bytes(b"image")
    monkeypatch.chdir(tmp_path)
    text = _script(make_cfg, _container("charliecloud", "img.sqfs", binds=f"[{tmp_path}]"), sweep_dir=tmp_path)
    assert f" {tmp_path / 'img.sqfs'} -- python3" in text and text.count(f"-b {tmp_path}:{tmp_path}") == 1
    with pytest.raises(plan.SweepRejected) as err:
        plan.plan([([], make_cfg("cluster=localslurm", "++cluster.slurm.container={runtime:charliecloud,"
                                 "image:img.sif}"))])
    assert "charliecloud runs a SquashFS file or an image directory, not this kind of file" in str(err.value)


def test_a_dry_run_prints_bracketed_overrides_and_the_whole_srun_line(make_cfg, capsys):
    """An override's [a,b] is text, not rich markup (it was a MarkupError traceback); the job script's long srun
    line is printed whole, so that it can be copied."""
    from jobs import submit

    binds = ",".join(f"/{d}" for d in ("tmp", "var", "usr", "opt", "srv", "home", "mnt", "media", "run", "root"))
    setting = f"{{runtime:apptainer,image:'docker://x',binds:[{binds}]}}"
    cfg = make_cfg("cluster=localslurm", f"++cluster.slurm.container={setting}")
    p = plan.make_point(cfg, [f"cluster.slurm.container={setting}"])
    submit.print_plan({"k": [p]}, Path("/scratch/sweep"), cfg["cluster"])
    out = capsys.readouterr().out
    assert "binds:[/tmp" in out   # the overrides column, as written
    assert any(line.startswith("srun") and f"--bind {'/scratch/sweep:/scratch/sweep'}" in line and "/root:/root" in line
               for line in out.splitlines()), out


def test_enroot_checks_for_pyxis_on_the_node(make_cfg):
    text = _script(make_cfg, _container("enroot", "ubuntu:22.04"))
    assert "command -v srun >/dev/null && srun --help 2>&1 | grep -q -- --container-image ||" in text
    assert "(srun with pyxis) is not installed on $(hostname)" in text


def test_a_per_hardware_container_is_checked_with_the_site(make_cfg):
    cfg = make_cfg("cluster=localslurm", "++cluster.per_hardware.cpu.container={runtime:podman}")
    with pytest.raises(plan.SweepRejected) as err:
        plan.plan([([], cfg)])
    assert "cluster.per_hardware.cpu.container.runtime='podman'; allowed:" in str(err.value)


def test_a_directory_image_digest_follows_its_manifest(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text("x")
    first = containers.digest(str(tmp_path))
    assert first.startswith("manifest-sha256:") and containers.manifest_digest(str(tmp_path)) == first
    (tmp_path / "bin" / "pip").write_text("y")
    assert containers.manifest_digest(str(tmp_path)) != first


def test_the_record_reads_the_container_the_job_exported():
    env = {containers.ENV: json.dumps({"runtime": "charliecloud", "image": "/i.sqfs", "digest": "sha256:ab"}),
           containers.VERSION_ENV: "0.31"}
    assert containers.provenance(env) == {"container": "/i.sqfs", "container_runtime": "0.31",
                                          "container_digest": "sha256:ab"}
    assert containers.provenance({"APPTAINER_CONTAINER": "/x.sif"})["container"] == "/x.sif"
    assert containers.provenance({}) == {"container": None, "container_runtime": None, "container_digest": None}


def test_a_hardware_files_container_is_named_in_its_refusal_and_left_out_of_local_points(make_cfg):
    setting = "++hardware.slurm.container={runtime:apptainer,image:/no/such.sif}"
    with pytest.raises(plan.SweepRejected) as err:
        plan.plan([([], make_cfg("cluster=localslurm", setting))])
    assert "hardware.slurm.container.image='/no/such.sif': no such file" in str(err.value)
    assert plan.resources_for(make_cfg("cluster=local", setting)).container is None   # runs in this environment
