"""Bad input and faults, fifth probe: the report's output directory and credentials in config values. Each test is
one row of the table in docs/explanation/faults.md."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis.aggregate import aggregate, write_table
from jobs import config_schema, files, finish, plan, records
from jobs.workloads import serving
from jobs.workloads.serving import load
from report import build, publish
from report.pages import discover, template_dirs
from tests.fakes import _record
from tests.helpers import ENV, _cli, files_under
from tests.test_serving_load import FakeServer, serve  # noqa: F401  (serve: the fixture)

PID = "aaaaaaaaaaaa"


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    d = tmp_path / "runs" / "s"
    records.write_record(records.record_path(d / "points", PID), _record("ok", pid=PID))
    write_table(aggregate([d]), d, csv=False)
    return d


# --------------------------------------------------------------------------- links inside the site

def test_report_build_never_writes_through_a_link_in_its_output(tmp_path, sweep_dir, capsys):
    """--out DIR with DIR/assets -> elsewhere (and DIR/data -> elsewhere): the links are replaced by real
    directories, each named by a `note:`; elsewhere is untouched."""
    out, other = tmp_path / "out", tmp_path / "other"
    other.mkdir()
    (other / "mine").write_text("mine")
    out.mkdir()
    (out / "assets").symlink_to(other)
    (out / "data").symlink_to(other)
    rc, err = _cli(capsys, build.main, str(sweep_dir), "--out", str(out))
    assert rc == 0, err
    assert f"note: {out / 'assets'} was a symbolic link (to {other})" in err and f"{out / 'data'} was" in err
    assert files_under(other) == [other / "mine"]
    assert not (out / "assets").is_symlink() and (out / "assets" / "vega.js").is_file()
    assert not (out / "data").is_symlink() and (out / "data" / "results.parquet").is_file()


def test_the_sweeps_report_stage_never_writes_through_a_link_in_the_sweep(tmp_path, sweep_dir, capsys):
    """runs/x/site/assets -> elsewhere (or runs/x/site -> elsewhere) when the sweep builds its report: replaced by a
    real directory, so nothing is written outside the sweep directory."""
    other = tmp_path / "other"
    other.mkdir()
    (sweep_dir / "site").mkdir()
    (sweep_dir / "site" / "assets").symlink_to(other)
    finish.finish(sweep_dir)
    assert files_under(other) == [] and (sweep_dir / "site" / "assets" / "style.css").is_file()
    assert f"{sweep_dir / 'site' / 'assets'} was a symbolic link" in capsys.readouterr().err
    records.write_record(records.record_path(sweep_dir / "points", "bbbbbbbbbbbb"), _record("ok", pid="bbbbbbbbbbbb"))
    for p in files_under(sweep_dir / "site")[::-1]:
        p.rmdir() if p.is_dir() else p.unlink()
    (sweep_dir / "site").rmdir()
    (sweep_dir / "site").symlink_to(other)
    finish.finish(sweep_dir)
    assert files_under(other) == [] and not (sweep_dir / "site").is_symlink()
    assert (sweep_dir / "site" / "index.html").is_file()


def test_report_build_refuses_a_file_in_the_way_before_writing(tmp_path, sweep_dir, capsys):
    """DIR/assets is a file (or DIR/index.html a directory): exit 2 naming it, nothing written; in the sweep's
    report stage the same is an `error:`, exit 1 (the points were measured; the report could not be written)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "assets").write_text("")
    before = files_under(out)
    rc, err = _cli(capsys, build.main, str(sweep_dir), "--out", str(out))
    assert rc == 2 and f"error: {out / 'assets'} is a file where the site has a directory" in err, err
    assert files_under(out) == before
    (out / "assets").unlink()
    (out / "index.html").mkdir()
    rc, err = _cli(capsys, build.main, str(sweep_dir), "--out", str(out))
    assert rc == 2 and f"error: {out / 'index.html'} is a directory where the site has a file" in err, err
    assert files_under(out) == [out / "index.html"]

    from jobs import sweep

    def run(*a):
        raise files.InTheWay("runs/x/site/assets is a file where the site has a directory")

    sweep_run, sweep.run = sweep.run, run
    try:
        with pytest.raises(SystemExit) as exc:
            sweep.run_or_exit([])
    finally:
        sweep.run = sweep_run
    assert exc.value.code == 1 and capsys.readouterr().err.startswith("error: runs/x/site/assets is a file")


def test_an_interrupted_build_leaves_no_index(tmp_path, sweep_dir):
    """SIGTERM (KeyboardInterrupt) while the pages are made: index.html is written last, so a site cut short has
    no index linking to pages that are not there (and report.publish refuses it: no index.html)."""
    table = aggregate([sweep_dir])
    pages = discover()
    last = [p for p in pages if p.slug != "index" and p.applies(table)][-1]

    def interrupted(table):
        raise KeyboardInterrupt

    pages = [dataclasses.replace(p, context=interrupted) if p is last else p for p in pages]
    with pytest.raises(KeyboardInterrupt):
        build.build(table, tmp_path / "site", pages=pages)
    assert (tmp_path / "site" / "assets" / "vega.js").is_file() and not (tmp_path / "site" / "index.html").exists()


def test_publish_refuses_a_site_whose_pages_link_to_missing_files(tmp_path, sweep_dir, capsys):
    """A site with its failures.html (or a data file) gone: exit 2 naming the page and the link; nothing copied."""
    site, www = tmp_path / "site", tmp_path / "www"
    build.build(aggregate([sweep_dir]), site)
    assert publish.main([str(site), str(tmp_path / "whole")]) == 0
    capsys.readouterr()
    (site / "failures.html").unlink()
    rc, err = _cli(capsys, publish.main, str(site), str(www))
    assert rc == 2 and re.search(r"error: \S+\.html links to failures\.html, which the site does not have", err), err
    assert not www.exists()


def test_every_page_link_in_a_template_is_a_page_of_the_report():
    """A template's link to another page (href="x.html") names a page that exists (serving.html linked to a
    metrics.html that no build writes)."""
    slugs = {p.slug for p in discover()}
    found = [(t, m) for d in [build.TEMPLATES, *template_dirs()] for t in Path(d).glob("*.html")
             for m in re.findall(r'href="([A-Za-z0-9_-]+)\.html', t.read_text())]
    assert found and [(t.name, m) for t, m in found if m not in slugs] == []


# --------------------------------------------------------------------------- credentials in config values

def test_an_endpoint_with_credentials_is_refused_at_plan_time(tmp_path):
    """workload.endpoint=http://alice:s3cret@host: exit 2, an `error:` that names the key, hides the password and
    says what to do instead (OPENAI_API_KEY); nothing written, the password nowhere in the output."""
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "workload=serving",
                           "workload.endpoint=http://alice:s3cret@127.0.0.1:9", "workload.requests=1",
                           "sweep.name=x"], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert "workload.endpoint='http://<redacted>@127.0.0.1:9' carries credentials in a URL" in proc.stderr
    assert "OPENAI_API_KEY" in proc.stderr and "s3cret" not in proc.stderr + proc.stdout
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("key, value", [
    ("workload.endpoint", "http://127.0.0.1:9/?api_key=abc123"),
    ("model.path", "https://bob:pw@models.site/m"),
    ("model.hf_id", "https://hf_TOKEN123@huggingface.co/x"),
    ("cluster.setup", ["module load x", "pip install -i https://bob:pw@pypi.site/simple y"]),
    ("model.config", {"nested": ["https://x/y?token=abc"]}),
    ("cluster.partitions", {"cpu": "ftp://u:p@h"}),
])
def test_every_config_value_with_url_credentials_is_refused(make_cfg, key, value):
    """Every string value, in lists and free blocks too: one problem naming the key, the secret hidden."""
    cfg = make_cfg("workload=serving")
    section, leaf = key.split(".")
    cfg[section][leaf] = value
    problems = plan.typed_problems(cfg)
    assert len(problems) == 1 and problems[0].startswith(key) and "carries credentials in a URL" in problems[0], problems
    assert "<redacted>" in problems[0] and not re.search("abc123|pw@|TOKEN123|abc'|u:p", problems[0]), problems


def test_urls_without_literal_secrets_are_accepted(make_cfg):
    """A URL without userinfo, an scp-style git address, and a setup line that reads its secret from the environment
    where it runs ($TOKEN) carry no secret: accepted; the sweep's refusal text hides only literal secrets."""
    cfg = make_cfg("workload=serving", "workload.endpoint=http://inference.site:8000")
    cfg["cluster"]["setup"] = ["pip install -i https://$USER:${PIP_TOKEN}@pypi.site/simple y",
                               "pip install git+https://github.com/o/r", "curl -o x https://h/x?token=$TOKEN",
                               "pip install git+ssh://git@github.com/o/r"]   # SSH's git user is not a secret
    assert plan.typed_problems(cfg) == []
    text = str(plan.SweepRejected([("workload.endpoint=http\\://a\\:b@h", "x"), ("c", "https://$U:$T@h")]))
    assert "a\\:b" not in text and "http\\://<redacted>@h" in text and "https://$U:$T@h" in text
    assert config_schema.redact("http://alice:s3cret@h ?key=k") == records.redact("http://alice:s3cret@h ?key=k")


def test_the_load_sends_the_api_key_as_a_bearer_token(serve, monkeypatch, make_cfg):  # noqa: F811
    """What to do instead of credentials in the URL: OPENAI_API_KEY, sent as `Authorization: Bearer` to an
    endpoint (vLLM's --api-key), never to a server the point started itself."""
    class Keyed(FakeServer):
        def __init__(self):
            super().__init__(ttft=0.001, gap=0.001)
            self.auth = []

        async def completions(self, request):
            self.auth.append(request.headers.get("Authorization"))
            return await super().completions(request)

    server = Keyed()
    url = serve(server)
    load.run(url, "m", load.prompts(100, 4, 2, seed=0), 2, load.Load("concurrency", 1, 2), api_key="k-123")
    load.run(url, "m", load.prompts(100, 4, 1, seed=0), 2, load.Load("concurrency", 1, 1))
    assert server.auth == ["Bearer k-123", "Bearer k-123", None]

    seen = []

    def sent(*args, **kw):
        seen.append(args[-1])   # the warm-up requests, sent first
        raise RuntimeError("stop here")

    monkeypatch.setattr(serving.loads, "run", sent)
    monkeypatch.setenv(load.API_KEY_ENV, "k-456")
    cfg = make_cfg("workload=serving", f"workload.endpoint={url}", "workload.warmup_requests=1",
                   "workload.requests=1")
    with pytest.raises(RuntimeError, match="stop here"):
        serving.run(cfg, SimpleNamespace(rank=0))
    assert seen == ["k-456"]
