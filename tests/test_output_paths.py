"""Bad input and faults, fourth probe: output paths. Each test is one row of the table in
docs/explanation/faults.md."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import aggregate
from jobs import cluster, records
from jobs.manifest import Manifest
from report import build, publish
from tests.fakes import _points, _record
from tests.helpers import ENV, _cli, files_under

PID = "aaaaaaaaaaaa"
PROC = Path("/proc")   # a directory where no file can be made, even by root


def run(cwd: Path, *args: str, env: dict | None = None, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env or ENV, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=300, check=False)


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    d = tmp_path / "runs" / "s"
    records.write_record(records.record_path(d / "points", PID), _record("ok", pid=PID))
    return d


# --------------------------------------------------------------------------- output paths of the CLIs

def test_history_csv_that_cannot_be_written_is_refused_up_front(tmp_path, sweep_dir):
    """--csv under a file or in /proc: one `error:` line, exit 2, before the table is printed; nothing written."""
    (tmp_path / "afile").write_text("")
    before = files_under(tmp_path)
    cases = [(tmp_path / "afile" / "h.csv", f"{tmp_path / 'afile'} is a file, not a directory"),
             (sweep_dir, "is a directory; give a file")]
    if PROC.is_dir():
        cases.append((PROC / "x.csv", "no file can be created in /proc"))
    for csv, why in cases:
        proc = run(tmp_path, "analysis.history", str(sweep_dir), "--csv", str(csv))
        err = proc.stderr.strip().splitlines()[-1]   # after argparse's usage, as its other refusals
        assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
        assert err.startswith("python -m analysis.history: error: --csv ") and str(csv) in err and why in err, err
    assert files_under(tmp_path) == before
    # a missing parent is made, as for every other output path (aggregate --out, report.build --out)
    proc = run(tmp_path, "analysis.history", str(sweep_dir), "--csv", "reports/history.csv")
    assert proc.returncode == 0 and (tmp_path / "reports" / "history.csv").is_file(), proc.stderr


def test_every_output_directory_option_is_checked_up_front(tmp_path, sweep_dir, capsys):
    """aggregate --out, report.build --out and report.publish's target under a file or in /proc: exit 2 naming
    the path, before anything is read or written (they failed with exit 1 once the work was done)."""
    assert aggregate.main([str(sweep_dir)]) == 0
    assert build.main([str(sweep_dir), "--out", str(sweep_dir / "site")]) == 0
    (tmp_path / "afile").write_text("")
    before = files_under(tmp_path)
    bad = [(tmp_path / "afile" / "out", "afile is a file, not a directory")]
    if PROC.is_dir():
        bad.append((PROC / "nope", "no file can be created in /proc"))
    for out, why in bad:
        for main, argv, name in [(aggregate.main, [str(sweep_dir), "--out", str(out)], "--out"),
                                 (build.main, [str(sweep_dir), "--out", str(out)], "--out"),
                                 (publish.main, [str(sweep_dir / "site"), str(out)], "the target")]:
            rc, err = _cli(capsys, main, *argv)
            assert rc == 2 and f"error: {name} {out} cannot be written: " in err and why in err, err
    assert files_under(tmp_path) == before


# --------------------------------------------------------------------------- jobs.cluster init

@pytest.fixture
def user_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "config"
    monkeypatch.setenv("ACCELSWEEP_CONFIG_DIR", str(d))
    monkeypatch.delenv("ACCELSWEEP_CLUSTER", raising=False)
    return d


def test_cluster_init_output_that_cannot_be_written(tmp_path, user_dir, monkeypatch, capsys):
    """--out under a file or in /proc, $ACCELSWEEP_CONFIG_DIR a file: exit 2 naming the path, before the
    scheduler is asked (they were tracebacks from mkdir); nothing written."""
    from jobs.schedulers import base

    def asked(kind):
        raise AssertionError("the scheduler was asked before the output path was checked")

    monkeypatch.setattr(base, "get", asked)
    afile = tmp_path / "afile"
    afile.write_text("")
    under_a_file = f"error: --out {afile / 's4.yaml'} cannot be written: {afile} is a file, not a directory"
    cases = [(["--no-default", "--out", str(afile / "s4.yaml")], under_a_file)]
    if PROC.is_dir():
        in_proc = "error: --out /proc/s5.yaml cannot be written: no file can be created in /proc"
        cases.append((["--no-default", "--out", "/proc/s5.yaml"], in_proc))
    for argv, why in cases:
        rc, err = _cli(capsys, cluster.main, "init", "s", *argv)
        assert rc == 2 and err.startswith(why) and len(err.strip().splitlines()) == 1, err
    monkeypatch.setenv("ACCELSWEEP_CONFIG_DIR", str(afile))
    rc, err = _cli(capsys, cluster.main, "init", "s1")
    assert rc == 2 and f"the cluster file {afile / 'cluster' / 's1.yaml'} cannot be written: {afile} is a file" \
        in err and "ACCELSWEEP_CONFIG_DIR" in err, err
    (user_dir / "defaults.yaml").mkdir(parents=True)   # made the default: that file is written too
    monkeypatch.setenv("ACCELSWEEP_CONFIG_DIR", str(user_dir))
    rc, err = _cli(capsys, cluster.main, "init", "s1")
    assert rc == 2 and f"the defaults file {user_dir / 'defaults.yaml'} is a directory" in err, err
    assert files_under(tmp_path) == [afile, user_dir, user_dir / "defaults.yaml"]


def test_cluster_show_with_a_default_that_has_no_file(user_dir, capsys):
    user_dir.mkdir()
    (user_dir / "defaults.yaml").write_text("cluster: gone\n")
    rc, err = _cli(capsys, cluster.main, "show")
    assert rc == 2 and err.startswith("error: the default cluster 'gone' (from ") and "has no cluster file" in err
    (user_dir / "cluster").mkdir()
    (user_dir / "cluster" / "gone.yaml").write_text("name: gone\nkind: local\n")
    assert cluster.main(["show"]) == 0


# --------------------------------------------------------------------------- report.publish

def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    for rel, text in [("index.html", "<p>site</p>"), ("assets/style.css", "site css"), ("data/deep/x.csv", "a,b")]:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return site


def test_publish_never_writes_through_a_link_in_the_target(tmp_path, capsys):
    """www/assets -> other/ (and a link deeper down): the links are replaced by real directories, as a linked
    index.html is replaced by the site's file; other/ is untouched."""
    site, www, other = _site(tmp_path), tmp_path / "www", tmp_path / "other"
    (other / "deep").mkdir(parents=True)
    (other / "style.css").write_text("mine")
    (www / "data").mkdir(parents=True)
    (www / "assets").symlink_to(other)
    (www / "data" / "deep").symlink_to(other / "deep")
    (www / "index.html").symlink_to(other / "style.css")
    assert publish.main([str(site), str(www)]) == 0
    assert "www/assets was a symbolic link" in capsys.readouterr().err
    assert files_under(other) == [other / "deep", other / "style.css"] and (other / "style.css").read_text() == "mine"
    for rel in ("index.html", "assets/style.css", "data/deep/x.csv"):
        assert not (www / rel).is_symlink() and (www / rel).read_text() == (site / rel).read_text()
    assert not (www / "assets").is_symlink() and not (www / "data" / "deep").is_symlink()


@pytest.mark.parametrize("in_the_way", ["file", "dir"])
def test_publish_refuses_what_is_in_the_way(tmp_path, capsys, in_the_way):
    """A file where the site has a directory, or a directory where it has a file: exit 2 naming it; nothing copied."""
    site, www = _site(tmp_path), tmp_path / "www"
    www.mkdir()
    if in_the_way == "file":
        (www / "assets").write_text("")
        path, why = www / "assets", "is a file where the site has a directory"
    else:
        (www / "index.html").mkdir()
        path, why = www / "index.html", "is a directory where the site has a file"
    before = files_under(www)
    rc, err = _cli(capsys, publish.main, str(site), str(www))
    assert rc == 2 and f"error: {path} {why}" in err, err
    assert files_under(www) == before


# --------------------------------------------------------------------------- a closed pipe

@pytest.mark.parametrize("argv", [["jobs.status", "{sweep}"], ["analysis.history", "{sweep}"],
                                  ["analysis.aggregate", "{sweep}"], ["jobs.cluster", "show"],
                                  ["report.build", "{sweep}", "--out", "{sweep}/site"]])
def test_a_closed_pipe_ends_a_command_quietly(tmp_path, sweep_dir, argv):
    """`python -m jobs.status runs/x | head`: the reader gone, the command ends without a traceback (exit 1, as
    rich's console does)."""
    if argv[0] == "jobs.status":
        m = Manifest(sweep_dir)
        m.begin(_points([PID]), cluster={"name": "local", "kind": "local"}, argv=["x"])
        m.save()
    if argv[0] == "report.build":
        assert aggregate.main([str(sweep_dir)]) == 0
    read, write = os.pipe()
    os.close(read)   # the reader went away before the first line
    try:
        proc = run(tmp_path, *[a.format(sweep=sweep_dir) for a in argv], stdout=write)
    finally:
        os.close(write)
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr


# --------------------------------------------------------------------------- what a local sweep leaves

def test_local_sweep_leaves_no_empty_job_folder(tmp_path):
    """submitit's local controller makes the folder it is given, submitit/%j, which stays empty: it is removed."""
    from jobs.schedulers import local

    assert local.run({"g": _points([PID])}, tmp_path, max_parallel=1) == {PID: "failed"}   # (no config: fails)
    assert [p.name for p in (tmp_path / "submitit").iterdir()] != [] and not (tmp_path / "submitit" / "%j").exists()


def test_worker_result_written_whole_or_not_at_all(tmp_path):
    """A disk that fills while submitit dumps a worker's result leaves no <job>_result.pkl.save_tmp behind (it
    also made submitit's dump of the error fail: 'A temporary saved file already exists')."""
    script = f"""
import resource, signal
from pathlib import Path
from submitit.core import utils
from jobs.point import Worker
Worker.start(None)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    with utils.temporary_save_path(Path({str(tmp_path)!r}) / "1_0_result.pkl") as tmp:
        utils.cloudpickle_dump(("success", b"x" * 100_000), tmp)
except OSError as exc:
    print(type(exc).__name__)
"""
    proc = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "WriteFailed", proc.stderr
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- --out of aggregate and report.build

def test_out_that_is_a_file(tmp_path, capsys):
    from report.build import main as build_main

    records.write_record(records.record_path(tmp_path / "points", "aaaaaaaaaaaa"), _record("ok", pid="aaaaaaaaaaaa"))
    (tmp_path / "out").write_text("")
    rc, err = _cli(capsys, aggregate.main, str(tmp_path), "--out", str(tmp_path / "out"))
    assert rc == 2 and "is a file; give a directory" in err
    rc, err = _cli(capsys, aggregate.main, str(tmp_path / "out"))   # no --out: the input is where it would go
    assert rc == 2 and "the first directory given (no --out)" in err and "--out" not in err.split("(no --out)")[1]
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


def test_aggregate_out_never_replaces_another_sweeps_table(tmp_path, capsys):
    base, other = tmp_path / "runs" / "base", tmp_path / "runs" / "hwname"
    records.write_record(records.record_path(base / "points", "aaaaaaaaaaaa"), _record("ok", pid="aaaaaaaaaaaa"))
    records.write_record(records.record_path(other / "points", "bbbbbbbbbbbb"), _record("ok", pid="bbbbbbbbbbbb"))
    assert aggregate.main([str(other)]) == 0
    before = (other / "results.parquet").read_bytes()
    for out, why in [(other, "is another sweep's directory"), (other / "points", "inside a sweep's points/"),
                     (other / "points" / "bbbbbbbbbbbb", "inside a sweep's points/")]:
        rc, err = _cli(capsys, aggregate.main, str(base), "--out", str(out))
        assert rc == 2 and why in err, err
    rc, err = _cli(capsys, aggregate.main, str(base), str(other), "--out", str(other))
    assert rc == 2 and "is another sweep's directory" in err
    assert (other / "results.parquet").read_bytes() == before
    assert not (other / "points" / "results.parquet").exists() and not (base / "results.parquet").exists()
    assert aggregate.main([str(base), "--out", str(base)]) == 0                  # the sweep itself
    assert aggregate.main([str(base), "--out", str(tmp_path / "tables")]) == 0  # a directory of its own


# --------------------------------------------------------------------------- the target of report.publish

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


# --------------------------------------------------------------------------- cluster init --out

def test_cluster_init_out_elsewhere_does_not_make_it_the_default(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from jobs import cluster, conf

    user = tmp_path / "config"
    monkeypatch.setenv(conf.ENV_DIR, str(user))
    monkeypatch.delenv(cluster.ENV_NAME, raising=False)
    monkeypatch.setattr(cluster.schedulers, "get", lambda kind: SimpleNamespace(describe_site=lambda n: f"name: {n}\n"))
    assert cluster.main(["init", "ok1", "--out", str(tmp_path / "x.yaml")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "x.yaml").read_text() == "name: ok1\n" and not (user / "defaults.yaml").exists()
    assert f"wrote {tmp_path / 'x.yaml'}; not made the default site: cluster=ok1 is looked up as " \
        f"{user / 'cluster' / 'ok1.yaml'}" in out, out
    assert cluster.default_name()[0] is None
    # --out naming the place it is looked up is the plain init
    assert cluster.main(["init", "ok2", "--out", str(user / "cluster" / "ok2.yaml")]) == 0
    assert cluster.default_name()[0] == "ok2"
