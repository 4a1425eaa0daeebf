"""Bad input and faults (issue 14): each test is one row of the "Bad input and faults" table (docs/explanation/faults.md)."""
from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from analysis import aggregate
from jobs import files, plan, records, sweepdir, watchdog
from jobs.manifest import Manifest, ManifestError

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def sweep(cwd: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=600, check=False, **kw)


def problems(make_cfg, *overrides: str) -> list[str]:
    return plan.make_point(make_cfg(*overrides), list(overrides)).problems


def _spec(pid: str = "0123456789ab") -> dict:
    return {"point_id": pid, "sweep": "t", "command": "python -m jobs.sweep",
            "params": {"workload": "inference", "hardware": "cpu", "model": "m", "precision": "fp32", "cards": 1,
                       "nodes": 1}}


def _record(status: str = "ok", start: str = "2026-01-01T00:00:00+00:00", pid: str = "0123456789ab") -> dict:
    prov = {**records.provenance(start_time=start), "start_time": start}
    return records.make_record(point=_spec(pid), status=status, samples={"latency_s": [1.0, 2.0]}, provenance=prov,
                               error=None if status == "ok" else records.error_info(type_="X", message="m"))


# --------------------------------------------------------------------------- paths and names

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


# --------------------------------------------------------------------------- values

@pytest.mark.parametrize("override,message", [
    ("dry_run=no", "dry_run='no' must be true or false"),
    ("force=no", "force='no' must be true or false"),
    ("sweep.report=yes", "sweep.report='yes' must be true or false"),
    ("workload.hf.compile=1", "workload.hf.compile=1 must be true or false"),
    ("cluster.max_parallel=abc", "cluster.max_parallel='abc' must be a whole number >= 1"),
    ("cluster.max_parallel=0", "cluster.max_parallel=0 must be a whole number >= 1"),
    ("seed=abc", "seed='abc' must be a whole number >= 0"),
    ("seed=1.5", "seed=1.5 must be a whole number >= 0"),
    ("seed=1180591620717411303424", "seed=1180591620717411303424 must be a whole number >= 0 and <= 2147483647"),
    ("sweep.name=" + "a" * 129, "must be one path component of at most 128 letters"),
    ("workload.batch_size=true", "workload.batch_size=True must be a whole number >= 1"),
    ("workload.vllm.gpu_memory_utilization=1.5", "must be a number >= 0.01 and <= 1"),
    ("device_override=tpu", "device_override='tpu' is not allowed; allowed: cuda, rocm, hpu, cpu"),
    ("+cluster.max_paralel=2", "cluster.max_paralel is not a known key"),
])
def test_typed_config(make_cfg, override, message):
    found = problems(make_cfg, override)
    assert len(found) == 1 and message in found[0], found


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


def test_launcher_fast_path_values_are_validated():
    """The launcher sets plain values on a copy of a resolved config; the plan still checks their types."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from hydra_plugins.accelsweep_launcher import PointComposer

    with initialize_config_module(config_module="hydra_conf", version_base="1.3"):
        compose_point = PointComposer(GlobalHydra.instance().config_loader(),
                                      compose("config", return_hydra_config=True))
        cfg = compose_point(["dry_run=no", "cluster.max_parallel=abc"])
    assert {p.split(" must")[0] for p in plan.make_point(cfg, []).problems} == {
        "dry_run='no'", "cluster.max_parallel='abc'"}


def test_shipped_configs_follow_the_schema(make_cfg):
    for group in ("hardware", "model", "precision", "cluster"):
        for f in sorted((ROOT / "hydra_conf" / group).glob("*.yaml")):
            assert plan.typed_problems(make_cfg(f"{group}={f.stem}")) == [], f


def test_pretrained_path_must_be_a_checkpoint(make_cfg, tmp_path):
    (why,) = [p for p in problems(make_cfg, "model=tinyllama-1.1b", f"model.path={tmp_path}") if "model.path" in p]
    assert "is not a checkpoint (no config.json in it)" in why
    (tmp_path / "config.json").write_text("{}")
    assert not [p for p in problems(make_cfg, "model=tinyllama-1.1b", f"model.path={tmp_path}") if "model.path" in p]


# --------------------------------------------------------------------------- one owner, no lost record

def test_second_sweep_on_a_directory_is_refused(tmp_path):
    with sweepdir.Lock(tmp_path), pytest.raises(sweepdir.SweepDirError,
                                                match=f"in use by another sweep \\(pid {os.getpid()} on "):
        sweepdir.Lock(tmp_path).__enter__()
    with sweepdir.Lock(tmp_path):   # released at exit
        pass


def test_observed_failure_never_replaces_an_ok_measurement(tmp_path):
    """The JobDied fault: a run's end-of-job check must not overwrite another run's ok record."""
    from jobs.point import failure_record

    path = records.record_path(tmp_path / "points", "0123456789ab")
    records.write_point_record(path, _record("ok", start="2026-01-01T00:00:05+00:00"))
    failure_record(_spec(), str(tmp_path), status="failed", start_time="2026-01-01T00:00:09+00:00",
                   error=records.error_info(type_="JobDied", message="job ended without a record"))
    assert records.read_record(path)["status"] == "ok"


@pytest.mark.parametrize("old,new,observed,replaced", [
    (("failed", "10"), ("ok", "11"), False, True),      # a newer measurement replaces
    (("ok", "10"), ("failed", "11"), False, True),      # ... whatever its status (force=true re-ran it)
    (("ok", "11"), ("ok", "10"), False, False),         # an older one never does
    (("ok", "10"), ("failed", "10"), False, False),     # same start: ok stays
    (("failed", "10"), ("failed", "11"), True, True),   # a job that died after an older failure
    (("failed", "11"), ("failed", "10"), True, False),  # the attempt's own record beats the observer
])
def test_record_replacement_rule(tmp_path, old, new, observed, replaced):
    path = tmp_path / "record.json"
    first = _record(old[0], start=f"2026-01-01T00:00:{old[1]}+00:00")
    records.write_point_record(path, first)
    second = _record(new[0], start=f"2026-01-01T00:00:{new[1]}+00:00")
    assert records.write_point_record(path, second, observed=observed) is replaced
    assert records.read_record(path) == (second if replaced else first)


def _default_sigint() -> None:
    """A pytest started in the background (`cmd &` in a script) passes SIGINT on ignored, and one started under
    nohup SIGHUP (which the sweep then keeps ignored, as it should): the interrupt under test must reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _ignore_sigint() -> None:
    """As a script's `python -m jobs.sweep ... &` (non-interactive shell) starts it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _interrupt_sweep(cwd: Path, sig: signal.Signals, inherited=_default_sigint) -> tuple[subprocess.Popen, str,
                                                                                         float]:
    """Start a long one-point local sweep (under umask 000), send `sig` to the sweep process alone once its
    worker measures; returns (process, output, seconds until no worker was left)."""
    name = sig.name.lower()
    proc = subprocess.Popen([sys.executable, "-m", "jobs.sweep", "-m", "workload.repeats=500",
                             "workload.output_tokens=64", f"sweep.name={name}", "sweep.report=false"], cwd=cwd,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            umask=0, preexec_fn=inherited)  # noqa: PLW1509 (it only sets a signal)
    worker = f"runs/{name}/submitit"
    deadline = time.monotonic() + 120
    while not any("accelsweep] point" in p.read_text() for p in (cwd / worker).glob("*/*_log.out")):
        assert time.monotonic() < deadline and proc.poll() is None, "the worker never started"
        time.sleep(0.5)
    time.sleep(2)
    proc.send_signal(sig)
    t0 = time.monotonic()
    out = proc.communicate(timeout=120)[0]
    while subprocess.run(["pgrep", "-f", str(cwd / worker)], capture_output=True, check=False).returncode == 0:
        assert time.monotonic() - t0 < 60, "the worker kept running after its sweep"
        time.sleep(0.2)
    return proc, out, time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_sweep_stops_its_workers(tmp_path, sig):
    proc, out, _ = _interrupt_sweep(tmp_path, sig)
    sweep_dir = tmp_path / "runs" / sig.name.lower()
    (rec,) = [json.loads(p.read_text()) for p in (sweep_dir / "points").glob("*/record.json")]
    assert rec["status"] == "cancelled" and "was interrupted or is gone" in rec["error"]["message"], rec["error"]
    if sig != signal.SIGKILL:
        assert proc.returncode == 1 and "cancelled" in out and "interrupted" in out, out
        assert "Traceback" not in out
    # private files under umask 000: submitit unpickles what it finds there
    for path in [sweep_dir, *sweep_dir.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
    assert list(sweep_dir.rglob("*.pkl"))


def _points(pids: list[str]) -> list[plan.Point]:
    res = plan.Resources(cluster="local", partition=None, nodes=1, tasks_per_node=1, gpus_per_node=0,
                         gpu_request="none", gres_name=None, cpus_per_task=None, mem_gb=None, time_min=30,
                         account=None, qos=None)
    return [plan.Point(point_id=pid, sweep="t", overrides=[f"seed={i}"], cfg={}, params=_spec(pid)["params"],
                       command="c", resources=res) for i, pid in enumerate(pids)]


def test_cancel_records_only_points_that_ran(tmp_path, monkeypatch):
    """Interrupted while a shared worker runs its first of three points, which ends ok as the worker stops: the
    two it never started get no record (none saying they ran); the sweep said '1 running, 2 not started'."""
    from jobs.schedulers import local

    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]

    class Job:
        job_id = "1"

        def __init__(self, owner):
            self.owner, self.polls = owner, 0

        def done(self):
            self.polls += 1
            if self.polls == 2:
                watchdog.stop(self.owner)     # as jobs.cancel from another shell
            if watchdog.stopped(self.owner) and self.polls > 2:   # finishes the point it ran, starts no other
                path = records.record_path(tmp_path / "points", ids[0])
                if not path.exists():
                    records.write_record(path, _record("ok", start=records.now(), pid=ids[0]))
                return True
            return False

        def result(self):
            return ["ok"]

        def exception(self):
            return None

        def cancel(self):
            pass

        def stdout(self):
            return ""

        stderr = stdout

    class Executor:
        def submit(self, fn, specs, sweep_dir, owner, limit_s=None):
            return Job(owner)

    monkeypatch.setattr(local, "_executor", lambda *args: Executor())
    with pytest.raises(KeyboardInterrupt):
        local.run({"g": _points(ids)}, tmp_path, max_parallel=1)
    found = {p.parent.name: json.loads(p.read_text())["status"] for p in (tmp_path / "points").glob("*/record.json")}
    assert found == {ids[0]: "ok"}


@pytest.mark.slow
@pytest.mark.parametrize("sig,inherited", [(signal.SIGINT, _ignore_sigint), (signal.SIGHUP, _default_sigint)])
def test_sweep_takes_its_own_signals(tmp_path, sig, inherited):
    """Started with SIGINT ignored (`cmd &` from a script), Ctrl-C still cancels it; so does a hangup."""
    proc, out, _ = _interrupt_sweep(tmp_path, sig, inherited)
    (rec,) = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/points/*/record.json")]
    assert rec["status"] == "cancelled" and proc.returncode == 1 and "interrupted" in out, out


def test_worker_watchdog_interrupts_when_its_sweep_stops(tmp_path):
    owner = watchdog.identity(tmp_path)
    assert not watchdog.stopped(owner)
    watchdog.stop(owner)
    assert watchdog.stopped(owner)
    watchdog.release(owner)
    assert not watchdog.stopped(owner)
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert watchdog.stopped(watchdog.identity(tmp_path, pid=gone.pid))


# --------------------------------------------------------------------------- invalid records

@pytest.mark.parametrize("broken", ["id_and_status_only", "no_p10", "truncated"])
def test_invalid_record_is_skipped_and_listed(tmp_path, broken, capsys):
    from report.build import build

    good = _record("ok", pid="aaaaaaaaaaaa")
    bad = _record("ok", pid="bbbbbbbbbbbb")
    records.write_record(records.record_path(tmp_path / "points", "aaaaaaaaaaaa"), good)
    bad_path = records.record_path(tmp_path / "points", "bbbbbbbbbbbb")
    if broken == "id_and_status_only":
        records.write_record(bad_path, {"point_id": "bbbbbbbbbbbb", "status": "ok"})
    elif broken == "no_p10":
        del bad["metrics"]["latency_s"]["p10"]
        records.write_record(bad_path, bad)
    else:
        bad_path.parent.mkdir(parents=True)
        bad_path.write_text(json.dumps(bad)[:200])
    table = aggregate.aggregate([tmp_path])
    assert f"warning: skipping {bad_path}" in capsys.readouterr().err
    assert table.set_index("point_id")["status"].to_dict() == {"aaaaaaaaaaaa": "ok", "bbbbbbbbbbbb": "invalid"}
    build(table, tmp_path / "site")
    failures = (tmp_path / "site" / "failures.html").read_text()
    assert "InvalidRecord" in failures and str(bad_path) in failures


def test_invalid_ok_record_is_measured_again(tmp_path):
    from jobs.submit import split_measured

    records.write_record(records.record_path(tmp_path / "points", "bbbbbbbbbbbb"),
                         {"point_id": "bbbbbbbbbbbb", "status": "ok"})
    point = plan.Point(point_id="bbbbbbbbbbbb", sweep="t", overrides=[], cfg={}, params={}, command="")
    assert split_measured([point], tmp_path, force=False) == ([point], [], [])


def test_records_are_only_what_they_claim_to_be(tmp_path, capsys):
    """A record whose point_id is not its folder's (renamed, or copied into another point's folder), or a record
    file that is a link out of the sweep directory, is not that point's: aggregate lists it `invalid`, resume
    measures the point again and jobs.status says so; all three by records.read_point, so their counts agree."""
    from jobs import status
    from jobs.submit import split_measured

    sweep_dir = tmp_path / "runs" / "s"
    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd"]
    a = records.record_path(sweep_dir / "points", ids[0])
    records.write_record(a, _record("ok", pid=ids[0]))
    b = records.record_path(sweep_dir / "points", ids[1])       # a copy of a's record
    b.parent.mkdir(parents=True)
    b.write_bytes(a.read_bytes())
    records.write_record(records.record_path(sweep_dir / "points", ids[2]), _record("ok", pid="ffffffffffff"))
    outside = records.record_path(tmp_path / "elsewhere" / "points", ids[3])
    records.write_record(outside, _record("ok", pid=ids[3]))
    d = records.record_path(sweep_dir / "points", ids[3])
    d.parent.mkdir(parents=True)
    d.symlink_to(outside)
    table = aggregate.aggregate([sweep_dir]).set_index("point_id")
    err = capsys.readouterr().err
    assert table["status"].to_dict() == {ids[0]: "ok", ids[1]: "invalid", ids[2]: "invalid", ids[3]: "invalid"}
    assert f"its point_id '{ids[0]}' is not its folder's ('{ids[1]}')" in table.loc[ids[1], "error_message"]
    assert "its point_id 'ffffffffffff' is not its folder's" in table.loc[ids[2], "error_message"]
    assert "leads out of its sweep directory" in table.loc[ids[3], "error_message"] and "elsewhere" in err
    pts = [plan.Point(point_id=pid, sweep="s", overrides=[], cfg={}, params={}, command="") for pid in ids]
    todo, measured, _ = split_measured(pts, sweep_dir, force=False)
    assert [p.point_id for p in measured] == [ids[0]] and [p.point_id for p in todo] == ids[1:]
    seen = status._records(sweep_dir, dict.fromkeys(ids))
    assert {pid: r[0] for pid, r in seen.items()} == table["status"].to_dict()   # (status, start, message)
    assert "not its folder's" in seen[ids[1]][2]


# --------------------------------------------------------------------------- disk full, unwritable

@pytest.fixture
def disk_full(monkeypatch):
    """Every fsync fails as on a full disk (the data was written to a temp file, the rename never happens)."""
    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)


def test_table_written_whole_or_not_at_all(tmp_path, disk_full):
    (tmp_path / "results.parquet").write_bytes(b"old table")
    table = pd.DataFrame({"point_id": ["a"], "sweep": ["s"], "status": ["ok"]})
    with pytest.raises(files.WriteFailed, match="could not write .*results.parquet: No space left on device"):
        aggregate.write_table(table, tmp_path)
    assert (tmp_path / "results.parquet").read_bytes() == b"old table"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.parquet"]   # no temp file left


def test_site_written_whole_or_not_at_all(tmp_path, monkeypatch):
    from report import build as report_build

    site = tmp_path / "site"
    (site / "assets").mkdir(parents=True)
    (site / "assets" / "vega.js").write_text("old vega")
    (site / report_build.STAMP).write_text("")   # a site report.build wrote: it may replace its files
    real_fsync = os.fsync

    def fail_on_bundle(fd):
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(".vega.js."):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fail_on_bundle)
    table = pd.DataFrame({"point_id": ["a"], "sweep": ["s"], "status": ["ok"]})
    with pytest.raises(files.WriteFailed, match="vega.js: No space left on device"):
        report_build.build(table, site)
    assert (site / "assets" / "vega.js").read_text() == "old vega"
    assert not [p for p in site.rglob("*.tmp")]


def test_point_whose_record_cannot_be_written_does_not_stop_the_others(tmp_path, monkeypatch, capsys):
    """ENOSPC or an unwritable points directory: the point fails with a message; the sweep goes on."""
    from jobs.schedulers import local

    class Job:
        def done(self):
            return True

        def exception(self):
            return RuntimeError("worker could not write its record")

        def stdout(self):
            return "log line"

        stderr = stdout

    class Executor:
        def __init__(self):
            self.n = 0

        def submit(self, fn, *args):
            self.n += 1
            if self.n == 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return Job()

    executor = Executor()
    monkeypatch.setattr(local, "_executor", lambda *args: executor)
    real = records.write_point_record

    def write(path, rec, observed=False):
        if rec["point_id"] == "bbbbbbbbbbbb":
            raise files.WriteFailed(errno.EACCES, "Permission denied", str(path))
        return real(path, rec, observed=observed)
    monkeypatch.setattr(records, "write_point_record", write)
    res = plan.Resources(cluster="local", partition=None, nodes=1, tasks_per_node=1, gpus_per_node=0,
                         gpu_request="none", gres_name=None, cpus_per_task=None, mem_gb=None, time_min=30,
                         account=None, qos=None)
    pts = [plan.Point(point_id=pid, sweep="t", overrides=[f"seed={i}"], cfg={}, params=_spec(pid)["params"],
                      command="c", resources=res) for i, pid in enumerate(["aaaaaaaaaaaa", "bbbbbbbbbbbb",
                                                                             "cccccccccccc"])]
    status = local.run({"g": pts}, tmp_path, max_parallel=1)
    assert status == {"aaaaaaaaaaaa": "failed", "bbbbbbbbbbbb": "failed", "cccccccccccc": "failed"}
    assert "no record could be written: could not write" in capsys.readouterr().err
    written = {p.parent.name for p in (tmp_path / "points").glob("*/record.json")}
    assert written == {"aaaaaaaaaaaa", "cccccccccccc"}


def test_runs_dir_checked_up_front(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(sweepdir.SweepDirError, match="cannot write to the sweep directory .*choose another"):
        sweepdir.prepare(blocker / "name")
    monkeypatch.setattr(sweepdir.shutil, "disk_usage", lambda p: type("U", (), {"free": 5 * 2**20})())
    with pytest.raises(sweepdir.SweepDirError, match="only 5 MB free"):
        sweepdir.prepare(tmp_path / "ok")


def test_job_file_written_whole_or_not_at_all(tmp_path):
    """A disk that fills while submitit writes a job pickle (here: a file size limit of 4 KiB, as the truncated
    4,096-byte pickle seen) leaves no truncated pickle that submitit would unpickle later."""
    import resource

    from jobs.schedulers import local

    ex = local._executor(_points(["aaaaaaaaaaaa"])[0].resources, tmp_path / "submitit")
    limits, xfsz = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
    try:
        with pytest.raises(OSError, match=r"could not write .*\.pkl: File too large"):
            ex.submit(len, b"x" * 100_000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, xfsz)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_refused_runs_dir_leaves_no_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(sweepdir.shutil, "disk_usage", lambda p: type("U", (), {"free": 30 * 2**20})())
    (tmp_path / "runs").mkdir()
    for sweep_dir in (tmp_path / "runs" / "x", tmp_path / "new" / "runs" / "x"):
        with pytest.raises(sweepdir.SweepDirError, match="only 30 MB free"):
            sweepdir.prepare(sweep_dir)
    assert [p.name for p in tmp_path.rglob("*")] == ["runs"]   # what was there stays


def test_unwritable_runs_dir_is_a_message(tmp_path):
    (tmp_path / "runs").write_text("a file where the runs directory should be")
    proc = sweep(tmp_path, "-m", "cards=1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot write to the sweep directory" in proc.stderr


# --------------------------------------------------------------------------- exit codes and messages

def _cli(capsys, main, *argv) -> tuple[int, str]:
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


def test_out_that_is_a_file(tmp_path, capsys):
    from report.build import main as build_main

    records.write_record(records.record_path(tmp_path / "points", "aaaaaaaaaaaa"), _record("ok", pid="aaaaaaaaaaaa"))
    (tmp_path / "out").write_text("")
    rc, err = _cli(capsys, aggregate.main, str(tmp_path), "--out", str(tmp_path / "out"))
    assert rc == 2 and "is a file; give a directory" in err
    aggregate.main([str(tmp_path)])
    rc, err = _cli(capsys, build_main, str(tmp_path), "--out", str(tmp_path / "out"))
    assert rc == 2 and "is a file; give a directory" in err


def test_site_never_written_onto_its_inputs(tmp_path, capsys):
    from report.build import main as build_main

    sweep_dir = tmp_path / "runs" / "s"
    records.write_record(records.record_path(sweep_dir / "points", "aaaaaaaaaaaa"), _record("ok", pid="aaaaaaaaaaaa"))
    aggregate.main([str(sweep_dir)])
    before = sorted(tmp_path.rglob("*"))
    for out, why in [(sweep_dir, "is the input"), (sweep_dir.parent, "or a directory above it"), (Path("/"), "above"),
                     (sweep_dir / "points", "holds records")]:
        rc, err = _cli(capsys, build_main, str(sweep_dir), "--out", str(out))
        assert rc == 2 and why in err, err
    rc, err = _cli(capsys, build_main, str(tmp_path / "runs" / "s" / "results.parquet"), "--out", str(tmp_path / "runs"))
    assert rc == 2 and "above" in err
    other = tmp_path / "other"
    records.write_record(records.record_path(other / "points", "bbbbbbbbbbbb"), _record("ok", pid="bbbbbbbbbbbb"))
    rc, err = _cli(capsys, build_main, str(sweep_dir), "--out", str(other))
    assert rc == 2 and "holds records" in err
    assert sorted(tmp_path.rglob("*")) == sorted([*before, *other.rglob("*"), other]) and not Path("/index.html").exists()
    assert build_main([str(sweep_dir), "--out", str(sweep_dir / "site")]) == 0   # where the sweep puts it


def test_empty_input_is_an_error_unless_allowed(tmp_path, capsys):
    from report.build import main as build_main

    (tmp_path / "runs").mkdir()
    rc, err = _cli(capsys, aggregate.main, str(tmp_path / "runs"))
    assert rc == 2 and "no records found" in err and "--allow-empty" in err
    assert list((tmp_path / "runs").iterdir()) == []
    rc, err = _cli(capsys, build_main, str(tmp_path / "runs"), "--out", str(tmp_path / "site"))
    assert rc == 2 and "no points found" in err and not (tmp_path / "site").exists()
    assert aggregate.main([str(tmp_path / "runs"), "--allow-empty"]) == 0
    assert build_main([str(tmp_path / "runs"), "--out", str(tmp_path / "site"), "--allow-empty"]) == 0


def test_garbage_results_table(tmp_path, capsys):
    from report.build import main as build_main

    (tmp_path / "results.parquet").write_bytes(b"not parquet at all")
    rc, err = _cli(capsys, build_main, str(tmp_path), "--out", str(tmp_path / "site"))
    assert rc == 2 and "is not a results table (parquet)" in err


@pytest.mark.parametrize("content", ["", "{\"points\": {", "[]"])
def test_corrupt_manifest(tmp_path, capsys, content):
    from jobs.status import main as status_main

    (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(ManifestError, match="move it aside"):
        Manifest(tmp_path)
    rc, err = _cli(capsys, status_main, str(tmp_path))
    assert rc == 2 and "manifest.json" in err and "Traceback" not in err


def test_publish_onto_its_own_site(tmp_path, capsys):
    from report.publish import main as publish_main

    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>x</p>")
    for target in (site, site / "www"):
        rc, err = _cli(capsys, publish_main, str(site), str(target))
        assert rc == 2 and "is the site" in err, err
    assert publish_main([str(site), str(tmp_path / "www")]) == 0
    assert stat.S_IMODE((tmp_path / "www" / "index.html").stat().st_mode) == 0o666 & ~_umask()


@pytest.mark.parametrize("link", ["file", "dir"])
def test_publish_copies_regular_files_only(tmp_path, capsys, link):
    from report.publish import main as publish_main

    site = tmp_path / "site"
    (site / "data").mkdir(parents=True)
    (site / "index.html").write_text("<p>x</p>")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "shadow").write_text("root:hash")
    if link == "file":
        (site / "data" / "leak.txt").symlink_to(secret / "shadow")
    else:
        (site / "data" / "leak").symlink_to(secret)
    rc, err = _cli(capsys, publish_main, str(site), str(tmp_path / "www"))
    assert rc == 2 and "is a symbolic link" in err and "regular files only" in err, err
    assert not (tmp_path / "www").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --------------------------------------------------------------------------- security

def test_private_and_group_readable_modes(tmp_path):
    old = os.umask(0)
    try:
        sweepdir.prepare(tmp_path / "private")
        files.write_text(tmp_path / "private" / "f", "x")
        assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o700
        assert stat.S_IMODE((tmp_path / "private" / "f").stat().st_mode) == 0o600
        sweepdir.prepare(tmp_path / "shared", group_readable=True)
        files.write_text(tmp_path / "shared" / "f", "x")
        assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o750
        assert stat.S_IMODE((tmp_path / "shared" / "f").stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_outputs_by_hand_follow_the_sweeps_mode(tmp_path):
    """analysis.aggregate and report.build run by hand (umask 022) inside a private sweep directory write 0600
    files and 0700 directories, as the sweep would; report.publish still writes with the user's umask."""
    from report.build import main as build_main
    from report.publish import main as publish_main

    sweep_dir = tmp_path / "s"
    old = os.umask(0o077)
    try:
        sweepdir.prepare(sweep_dir)
        records.write_record(records.record_path(sweep_dir / "points", "aaaaaaaaaaaa"),
                             _record("ok", pid="aaaaaaaaaaaa"))
        os.umask(0o022)
        assert aggregate.main([str(sweep_dir)]) == 0
        assert build_main([str(sweep_dir), "--out", str(sweep_dir / "site")]) == 0
        for path in [sweep_dir / "results.parquet", *(sweep_dir / "site").rglob("*")]:
            want = 0o700 if path.is_dir() else 0o600
            assert stat.S_IMODE(path.stat().st_mode) == want, path
        assert publish_main([str(sweep_dir / "site"), str(tmp_path / "www")]) == 0
        assert stat.S_IMODE((tmp_path / "www" / "index.html").stat().st_mode) == 0o644
    finally:
        os.umask(old)


def test_directories_made_keep_a_shared_directorys_group_bit(tmp_path):
    (tmp_path / "project").mkdir()
    os.chmod(tmp_path / "project", 0o2750)
    files.mkdirs(tmp_path / "project" / "runs" / "x")
    assert stat.S_IMODE((tmp_path / "project" / "runs" / "x").stat().st_mode) & 0o2000


def test_git_is_read_without_locks(monkeypatch):
    """Every sweep reads the checkout's commit; `git status` must not take .git/index.lock from the user."""
    seen = []
    real = subprocess.run

    def run(cmd, **kw):
        seen.append((cmd, (kw.get("env") or os.environ).get("GIT_OPTIONAL_LOCKS")))
        return real(cmd, **kw)
    monkeypatch.setattr(records.subprocess, "run", run)
    records.git_commit.__wrapped__()   # past its cache
    assert [c[0][3] for c in seen] == ["rev-parse", "status"] and {c[1] for c in seen} == {"0"}


def test_credentials_in_urls_and_names_are_redacted():
    env = {"HF_ENDPOINT": "https://user:pw@hf.example/x", "ACCELSWEEP_DB": "postgres://u:pw@db:5432/x",
           "ACCELSWEEP_DB_PASS_FILE": "/run/secret", "HF_MIRROR": "https://hf.example/x?token=abc&rev=1",
           "ACCELSWEEP_AUTH_HEADER": "Bearer x", "HF_HOME": "/data/hf"}
    assert records.redacted_env(env) == {
        "HF_ENDPOINT": "https://<redacted>@hf.example/x", "ACCELSWEEP_DB": "postgres://<redacted>@db:5432/x",
        "ACCELSWEEP_DB_PASS_FILE": "<redacted>", "HF_MIRROR": "https://hf.example/x?token=<redacted>&rev=1",
        "ACCELSWEEP_AUTH_HEADER": "<redacted>", "HF_HOME": "/data/hf"}


# --------------------------------------------------------------------------- Slurm faults (unit; tests/test_slurm_hardening.py runs them on the cluster)

def test_time_limit_signal_mid_import_is_a_timeout(monkeypatch):
    """submitit's USR2 handler raises inside an import that a library's try/except swallows; the point then fails
    with ModuleNotFoundError: it is still a timeout."""
    from jobs import point

    class UncompletedJobError(RuntimeError):
        pass

    def submitit_handler(signum, frame):
        raise UncompletedJobError("timed-out and not checkpointable")

    old = signal.signal(signal.SIGUSR2, submitit_handler)
    monkeypatch.setattr(watchdog, "LIMIT_SIGNAL", __import__("threading").Event())
    try:
        watchdog.observe_limit()
        watchdog.observe_limit()   # idempotent
        try:                       # a library's `try: import x except Exception:`
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(1)
        except Exception:  # noqa: BLE001, S110
            pass
        status, message = point.ended(ModuleNotFoundError("No module named 'torch._C'"), None)
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert status == "timeout" and "time-limit signal" in message and "ModuleNotFoundError" in message
    assert point.ended(ModuleNotFoundError("x"), None)[0] == "timeout"
    monkeypatch.setattr(watchdog, "LIMIT_SIGNAL", __import__("threading").Event())
    assert point.ended(ModuleNotFoundError("x"), None) == ("failed", None)


def test_broken_import_reported_by_the_workload_is_a_timeout_after_the_signal(monkeypatch):
    """Seen on the test cluster: the signal broke transformers' lazy import, and the workload reported a missing
    engine (`unsupported`, EngineMissing: Could not import module 'AutoModelForCausalLM')."""
    import threading

    from jobs import point
    from jobs.workloads import Result

    missing = Result(samples={}, status="unsupported", error_type="EngineMissing",
                     error="Could not import module 'AutoModelForCausalLM'")
    monkeypatch.setattr(watchdog, "LIMIT_SIGNAL", threading.Event())
    assert point.limited(missing) is missing
    watchdog.LIMIT_SIGNAL.set()
    out = point.limited(missing)
    assert out.status == "timeout" and "ended unsupported (EngineMissing: Could not import" in out.error
    assert point.limited(Result(samples={"x": [1.0]})).status == "ok"


@pytest.mark.parametrize("exit_code,killed", [("0:12", True), ("12:0", True), ("140:0", True), ("1:0", False),
                                              ("0:9", False), ("", False)])
def test_job_killed_by_the_limit_signal_itself(exit_code, killed):
    from jobs import status

    assert status.limit_signal_killed(exit_code) is killed


def test_job_that_saw_the_limit_signal_is_recorded_timeout(tmp_path, monkeypatch):
    """The observer's side (jobs.status --record, the report job): sacct says FAILED, submitit's log says the
    time-limit signal came."""
    from jobs import status

    log = tmp_path / "log.err"
    log.write_text("... Caught signal SIGUSR2 on n1: this job is timed-out.\nModuleNotFoundError: No module named x\n")
    row = {"point_id": "aaaaaaaaaaaa", "fresh_record": False, "kind": "slurm", "job": "7_0", "submitted": None,
           "job_state": {"state": "failed", "native": "FAILED", "exit_code": "1:0", "elapsed": "00:00:50",
                         "nodes": "n1"}}

    class Sched:
        kind, source = "slurm", "sacct"

        def log_paths(self, sweep_dir, job):
            return [log]

    class M:
        def spec(self, pid):
            return _spec(pid)

    monkeypatch.setattr(status, "point_states", lambda *a: [row])
    monkeypatch.setattr(status, "_scheduler", lambda kind: Sched())
    assert status.record_ended(tmp_path, M()) == ["aaaaaaaaaaaa"]
    rec = records.read_record(records.record_path(tmp_path / "points", "aaaaaaaaaaaa"))
    assert rec["status"] == "timeout" and "killed at the job's time limit" in rec["error"]["message"]


def test_short_time_limit_is_warned_at_plan_time(make_cfg):
    from jobs.schedulers import slurm

    pts = {m: [plan.make_point(make_cfg("cluster=localslurm", f"cluster.time_limit=00:0{m}:00"), [])]
           for m in (1, 2, 3)}
    assert [len(slurm.short_limits({str(m): p})) for m, p in pts.items()] == [1, 1, 0]
    (why,) = slurm.short_limits({"g": pts[1]})
    assert "time limit of 1 min sends Slurm's time-limit signal after 45 s" in why and "at least 3 min" in why


@pytest.mark.parametrize("state,refused", [("idle", False), ("mix", False), ("idle~", False), ("drain", True),
                                           ("drng", True), ("down*", True), ("idle*", True), ("down", True)])
def test_drained_or_down_nodes_refused_at_plan_time(make_cfg, monkeypatch, state, refused):
    from jobs.schedulers import slurm

    monkeypatch.setattr(slurm, "_run", lambda cmd, timeout=60: f"cpu*|localhost|8|16000|(null)|2:00:00|{state}\n")
    monkeypatch.setattr(slurm, "_associations", lambda: None)
    monkeypatch.setattr(slurm.shutil, "which", lambda name: "/usr/bin/" + name)
    p = plan.make_point(make_cfg("cluster=localslurm"), [])
    found = slurm.check({"g": [p]}, p.cfg["cluster"])
    assert bool(found) is refused, found
    if refused:
        assert f"localhost ({state}) take no jobs" in found[0][1] and "ReqNodeNotAvail" in found[0][1]


def test_pending_reason_of_every_pending_group_is_shown():
    from jobs import status

    rows = [{"state": "pending", "group": "g1", "detail": "", "job_state": {"state": "pending", "reason": r}}
            for r in ("ReqNodeNotAvail, UnavailableNodes:n1", "ReqNodeNotAvail, UnavailableNodes:n1", "Priority")]
    rows += [{"state": "pending", "group": "g2", "detail": "", "job_state": {"state": "running"}},
             {"state": "ok", "group": "g3", "detail": "", "job_state": {}}]
    assert status.pending_reasons(rows) == {
        "g1": "Priority (1 point(s)); ReqNodeNotAvail, UnavailableNodes:n1 (2 point(s))",
        "g2": "behind another point of its array task (1 point(s))"}


def test_reused_job_id_marks_the_lost_array_not_sent(make_cfg, tmp_path, capsys):
    """slurmctld killed mid-submission and restarted: it issues a lost array's job id again. The lost array is
    marked not sent (kept so on reload), status says so, and it is not taken as queued: the same command resends it."""
    from jobs import status, submit

    pts = [plan.make_point(make_cfg(f"seed={i}"), [f"seed={i}"]) for i in range(2)]
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    for key, p in zip("ab", pts):
        m.add_group(entry, key, [p], submitted=None, save=False)
    m.save()
    m.sent(entry, "a", submitted=records.now(), job_id="7", tasks=["7"])
    m.sent(entry, "b", submitted=records.now(), job_id="7", tasks=["7"])
    assert "array a (1 point(s)) was lost: job id 7 was issued again" in capsys.readouterr().err
    again = Manifest.load(tmp_path)   # from the journal
    assert again.job_ids() == ["7"]
    rows = {r["point_id"]: r for r in status.point_states(tmp_path, again, jobs={"7": {"state": "running",
                                                                                    "native": "RUNNING"}})}
    assert rows[pts[0].point_id]["state"] == "not submitted" and "lost" in rows[pts[0].point_id]["detail"]
    assert rows[pts[1].point_id]["state"] == "running"
    assert set(submit.active_points(again, {"7": {"state": "running"}})) == {pts[1].point_id}


def test_multi_rank_job_ends_when_a_rank_dies(make_cfg):
    from jobs.schedulers import slurm

    r2 = plan.resources_for(make_cfg("cluster=localslurm", "cards=2"))
    assert slurm.sbatch_params(r2, "n", array_parallelism=1)["srun_args"] == ["--kill-on-bad-exit=1"]
    r1 = plan.resources_for(make_cfg("cluster=localslurm", "cards=1"))
    assert "srun_args" not in slurm.sbatch_params(r1, "n", array_parallelism=1)
