"""accelsweep rescore and report --slo: serving points scored again under another SLO from their requests files,
equal to metrics.summary computed afresh; points without a requests file listed with why; bad input refused naming
the value; the Serving page saying which SLO its goodput is under."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from analysis.aggregate import aggregate, write_table
from jobs import records
from jobs.workloads import serving
from jobs.workloads.serving import metrics, requests_file, rescore
from jobs.workloads.serving.load import Request
from tests.helpers import point
from tests.test_serving_load import FakeServer, serve  # noqa: F401 - the stand-in endpoint and its fixture

INTERACTIVE = metrics.Slo.preset("interactive")


def _request(ttft: float, tpot: float, n: int = 10, ok: bool = True) -> Request:
    return Request(prompt_tokens=8, asked_tokens=n, ok=ok, ttft=ttft if ok else None,
                   e2e=ttft + tpot * (n - 1) if ok else None, output_tokens=n if ok else 0,
                   chunk_times=[ttft + i * tpot for i in range(n)] if ok else [],
                   chunk_tokens=[1] * n if ok else [], error=None if ok else "HTTP 500")


# within the server SLO, within both interactive limits, over interactive's TTFT, over its TPOT, a failed request
REQUESTS = [_request(0.1, 0.01), _request(0.3, 0.03), _request(0.6, 0.01), _request(0.1, 0.08),
            _request(0.0, 0.0, ok=False)]
WINDOW_S = 2.5


def _write_point(sweep: Path, make_cfg, level: int, *, keep: bool = True, status: str = "ok") -> str:
    """One serving point's record as the workload writes it (its summary split into samples and info, the requests
    file beside it unless `keep` is false: a sweep from before requests were kept); its point id."""
    pt = point(make_cfg, "workload=serving", f"workload.level={level}", f"sweep.name={sweep.name}")
    figures = metrics.summary(REQUESTS, WINDOW_S, 1, serving.slo(pt.cfg["workload"])) | {"window_s": WINDOW_S}
    samples, info = serving.split(figures)
    folder = sweep / "points" / pt.point_id
    if keep:
        info["requests_file"] = requests_file.write(folder, REQUESTS)
    error = None if status == "ok" else records.error_info(type_="ServerStart", message="no server")
    rec = records.make_record(point=pt.spec(), status=status, samples=samples if status == "ok" else None,
                              info=info if status == "ok" else {}, error=error,
                              provenance=records.provenance(start_time=records.now()))
    records.write_record(records.record_path(sweep / "points", pt.point_id), rec)
    return pt.point_id


@pytest.fixture
def sweep(tmp_path, make_cfg) -> tuple[Path, dict[str, str]]:
    """A serving sweep directory: two points with requests files, one recorded without, one failed."""
    sweep = tmp_path / "runs" / "yesterday"
    ids = {"kept1": _write_point(sweep, make_cfg, 1), "kept4": _write_point(sweep, make_cfg, 4),
           "old": _write_point(sweep, make_cfg, 2, keep=False), "failed": _write_point(sweep, make_cfg, 8,
                                                                                      keep=False, status="failed")}
    return sweep, ids


def test_rescoring_a_requests_file_equals_a_fresh_summary_under_the_new_slo(tmp_path):
    name = requests_file.write(tmp_path, REQUESTS)
    got, why = rescore.rescored_file(tmp_path / name, WINDOW_S, 1, INTERACTIVE)
    fresh = metrics.summary(REQUESTS, WINDOW_S, 1, INTERACTIVE)
    assert why == "" and {k: got[k] for k in fresh} == fresh
    assert got["goodput_req_s"] == pytest.approx(2 / WINDOW_S)   # the first two of the four answered
    assert got["met_share"] == pytest.approx(2 / 5)              # of all five measured, the failed one included
    server, _ = rescore.rescored_file(tmp_path / name, WINDOW_S, 1, metrics.Slo())
    assert server["goodput_req_s"] == pytest.approx(4 / WINDOW_S) and server["met_share"] == pytest.approx(4 / 5)


def test_one_limit_overrides_the_preset_as_the_workloads_slo_keys_do():
    assert rescore.slo_of("interactive", tpot_s="0.1") == metrics.Slo(0.45, 0.1)
    assert rescore.slo_of(None, ttft_s=1) == metrics.Slo(1.0, 0.2)   # the server preset's other limit
    assert rescore.describe(metrics.Slo(0.45, 0.04)) == "interactive: TTFT <= 0.45 s, TPOT <= 0.04 s"
    assert rescore.describe(metrics.Slo(1, 0.2), "server") == "server with TTFT <= 1 s, TPOT <= 0.2 s"


def _rescore(capsys, *argv: str) -> tuple[int, str, str]:
    """`accelsweep rescore ARGV` in this process: (exit status, stdout, stderr)."""
    try:
        rc = rescore.main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_command_scores_each_point_and_lists_those_without_a_requests_file(sweep, capsys):
    sweep_dir, ids = sweep
    rc, out, err = _rescore(capsys, str(sweep_dir), "--slo", "interactive", "--json")
    assert rc == 0, err
    got = json.loads(out)
    assert got["slo"] == {"preset": "interactive", "ttft_s": 0.45, "tpot_s": 0.04,
                          "text": "interactive: TTFT <= 0.45 s, TPOT <= 0.04 s"}
    rows = {r["point_id"]: r for r in got["points"]}
    assert set(rows) == set(ids.values())
    fresh = metrics.summary(REQUESTS, WINDOW_S, 1, INTERACTIVE)
    for key in ("kept1", "kept4"):
        r = rows[ids[key]]
        assert r["goodput_req_s"] == fresh["goodput_req_s"] and r["ttft_p99_s"] == fresh["ttft_p99_s"]
        assert r["tpot_p99_s"] == fresh["tpot_p99_s"] and (r["ok_requests"], r["requests"]) == (4, 5)
        assert r["met_share"] == pytest.approx(0.4) and r["why"] is None
        assert r["recorded_slo"] == "server: TTFT <= 2 s, TPOT <= 0.2 s"
        assert r["recorded_goodput_req_s"] == pytest.approx(4 / WINDOW_S)
        assert (r["hardware"], r["engine"], r["mode"], r["cards"]) == ("cpu", "vllm", "concurrency", 1)
    assert {rows[ids["kept1"]]["level"], rows[ids["kept4"]]["level"]} == {1, 4}
    assert rows[ids["old"]]["goodput_req_s"] is None and "recorded before every request was kept" in \
        rows[ids["old"]]["why"] and rows[ids["old"]]["recorded_goodput_req_s"] == pytest.approx(4 / WINDOW_S)
    assert "status failed (ServerStart)" in rows[ids["failed"]]["why"]


def test_the_table_and_the_csv_give_the_same_points(sweep, capsys):
    sweep_dir, ids = sweep
    rc, out, err = _rescore(capsys, str(sweep_dir.parent), "--ttft-s", "0.2", "--tpot-s", "0.05", "--csv")
    assert rc == 0, err
    rows = {r["point_id"]: r for r in csv.DictReader(io.StringIO(out))}
    assert list(next(csv.reader(io.StringIO(out)))) == list(rescore.COLUMNS)
    fresh = metrics.summary(REQUESTS, WINDOW_S, 1, metrics.Slo(0.2, 0.05))
    assert float(rows[ids["kept1"]]["goodput_req_s"]) == fresh["goodput_req_s"] == 1 / WINDOW_S
    rc, out, err = _rescore(capsys, str(sweep_dir), "--slo", "server", "--tpot-s", "0.05")
    assert rc == 0, err
    assert "server with TTFT <= 2 s, TPOT <= 0.05 s" in out and ids["kept4"] in out
    assert f"{ids['old']} ({sweep_dir}): not scored: recorded before" in out


@pytest.mark.parametrize("argv, words", [
    (["--slo", "mlperf"], "--slo 'mlperf' is no SLO preset: allowed server, interactive"),
    (["--ttft-s", "-1"], "--ttft-s '-1': give a finite number of seconds >= 0"),
    (["--slo", "server", "--tpot-s", "fast"], "--tpot-s 'fast' is not a number"),
    (["--ttft-s", "nan"], "--ttft-s 'nan': give a finite number"),
    ([], "give the SLO to score with: --slo PRESET (server, interactive)"),
    (["--slo", "server", "--json", "--csv"], "not allowed with argument"),
])
def test_a_bad_slo_is_refused_naming_the_value(sweep, capsys, argv, words):
    rc, out, err = _rescore(capsys, str(sweep[0]), *argv)
    assert rc == 2 and words in err and not out


def test_a_directory_that_is_not_a_sweep_is_refused_naming_it(tmp_path, sweep, capsys):
    (tmp_path / "notes").mkdir()
    rc, _, err = _rescore(capsys, str(sweep[0]), str(tmp_path / "notes"), "--slo", "server")
    assert rc == 2 and f"{tmp_path / 'notes'} is not a sweep directory" in err
    rc, _, err = _rescore(capsys, str(tmp_path / "nowhere"), "--slo", "server")
    assert rc == 2 and f"{tmp_path / 'nowhere'}: no such directory" in err


def test_a_missing_or_torn_requests_file_is_a_reason_not_an_error(sweep, capsys):
    sweep_dir, ids = sweep
    (sweep_dir / "points" / ids["kept1"] / requests_file.NAME).unlink()
    (sweep_dir / "points" / ids["kept4"] / requests_file.NAME).write_bytes(b"not parquet")
    rc, out, _ = _rescore(capsys, str(sweep_dir), "--slo", "server", "--json")
    rows = {r["point_id"]: r for r in json.loads(out)["points"]}
    assert rc == 0 and "requests file requests.parquet is missing" in rows[ids["kept1"]]["why"]
    assert "cannot be read" in rows[ids["kept4"]]["why"] and rows[ids["kept4"]]["goodput_req_s"] is None


def _site(sweep_dir: Path, tmp_path: Path, *argv: str) -> str:
    from report import build

    write_table(aggregate([sweep_dir]), sweep_dir, csv=False)
    out = tmp_path / "site"
    assert build.main([str(sweep_dir), "--out", str(out), *argv]) == 0
    return (out / "serving.html").read_text()


def test_the_serving_page_says_which_slo_its_goodput_is_under(sweep, tmp_path):
    sweep_dir, _ = sweep
    page = _site(sweep_dir, tmp_path, "--slo", "interactive")
    assert "<strong>interactive: TTFT &lt;= 0.45 s, TPOT &lt;= 0.04 s</strong>" in page
    assert "<strong>1 point had no requests\nfile</strong>" in page and "<em>recorded</em>" in page
    assert f'<td class="num">{2 / WINDOW_S:g}</td>' in page.replace(" <em>recorded</em>", "")   # 0.8 req/s
    own = _site(sweep_dir, tmp_path, "--slo-ttft-s", "0.2", "--slo-tpot-s", "0.05")
    assert "<strong>TTFT &lt;= 0.2 s, TPOT &lt;= 0.05 s</strong>" in own
    plain = _site(sweep_dir, tmp_path)
    assert "under each point's own SLO" in plain and "<em>recorded</em>" not in plain


def test_the_report_refuses_a_bad_slo_naming_it(sweep, tmp_path, capsys):
    from report import build

    sweep_dir, _ = sweep
    write_table(aggregate([sweep_dir]), sweep_dir, csv=False)
    for argv, words in ((["--slo", "fast"], "--slo 'fast' is no SLO preset: allowed server, interactive"),
                        (["--slo-tpot-s", "-0.1"], "--slo-tpot-s '-0.1': give a finite number of seconds >= 0")):
        with pytest.raises(SystemExit) as exc:
            build.main([str(sweep_dir), "--out", str(tmp_path / "site"), *argv])
        assert exc.value.code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


@pytest.mark.slow
def test_rescore_on_a_real_endpoint_sweep_equals_a_fresh_summary(serve, tmp_path):  # noqa: F811 - the fixture
    """A sweep that measured a stand-in endpoint (tests/test_serving_load.FakeServer) through the workload, scored
    again by `accelsweep rescore` in a process of its own: the figures of each point's own requests file."""
    import subprocess
    import sys

    from tests.helpers import ENV
    from tests.helpers import sweep as run_sweep

    url = serve(FakeServer(ttft=0.01, gap=0.002))
    out = run_sweep(tmp_path, "-m", "workload=serving", f"workload.endpoint={url}", "workload.level=1,2",
                    "workload.requests=6", "workload.warmup_requests=0", "workload.shape=8x4", "sweep.name=ep",
                    "sweep.report=false")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    sweep_dir, slo = tmp_path / "runs" / "ep", metrics.Slo(0.011, 0.0025)
    got = subprocess.run([sys.executable, "-m", "jobs.cli", "rescore", str(sweep_dir), "--ttft-s", "0.011",
                          "--tpot-s", "0.0025", "--json"], env=ENV, capture_output=True, text=True, timeout=120,
                         check=False)
    assert got.returncode == 0, got.stderr
    points = json.loads(got.stdout)["points"]
    assert len(points) == 2
    for row in points:
        rec = json.loads((sweep_dir / "points" / row["point_id"] / records.RECORD_NAME).read_text())
        kept = requests_file.read(sweep_dir / "points" / row["point_id"] / rec["info"]["requests_file"])
        fresh = metrics.summary(kept, rec["info"]["window_s"], 1, slo)
        assert row["goodput_req_s"] == fresh["goodput_req_s"] and row["ttft_p99_s"] == fresh["ttft_p99_s"]
        assert (row["ok_requests"], row["requests"], row["why"]) == (6, 6, None)
