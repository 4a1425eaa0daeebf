import jsonschema
import pytest

from jobs import records


def _point():
    return {"point_id": "0123456789ab", "sweep": "t", "command": "python -m jobs.sweep",
            "params": {"workload": "inference", "hardware": "cpu", "model": "m", "precision": "fp32",
                       "cards": 1, "nodes": 1}}


def test_record_follows_schema(tmp_path):
    rec = records.make_record(point=_point(), status="ok", samples={"latency_s": [0.1, 0.2]},
                              info={"exact_output_tokens": True}, provenance=records.provenance(start_time="x"))
    records.validate(rec)
    assert rec["metrics"]["latency_s"]["n"] == 2
    bad = dict(rec, status="great")
    with pytest.raises(jsonschema.ValidationError):
        records.validate(bad)


def test_failure_record_follows_schema():
    try:
        raise RuntimeError("boom <b>")
    except RuntimeError as exc:
        err = records.error_info(exc)
    rec = records.make_record(point=_point(), status="failed", error=err,
                              provenance=records.provenance(start_time="x"))
    records.validate(rec)
    assert err["type"] == "RuntimeError" and "boom" in err["log_tail"]


def test_unknown_status_rejected():
    with pytest.raises(ValueError, match="status 'meh'"):
        records.make_record(point=_point(), status="meh", provenance={})


def test_atomic_write_and_tolerant_read(tmp_path):
    path = tmp_path / "p" / "record.json"
    records.write_record(path, {"point_id": "a", "status": "ok"})
    assert records.read_record(path)["status"] == "ok"
    assert list(path.parent.iterdir()) == [path]          # no temp file left behind
    path.write_text('{"point_id": "a", "sta')              # a truncated file reads as missing
    assert records.read_record(path) is None
    assert records.read_record(tmp_path / "nope.json") is None
    with pytest.raises(ValueError):
        records.write_record(path, {"x": float("nan")})
    assert records.read_record(path) is None           # the failed write left the old file alone


def test_secrets_are_redacted():
    env = {"HF_TOKEN": "hf_abc", "SLURM_JOB_ID": "42", "MY_API_KEY": "k", "ACCELSWEEP_PASSWORD": "p",
           "HOME": "/root"}
    out = records.redacted_env(env)
    assert out == {"HF_TOKEN": "<redacted>", "SLURM_JOB_ID": "42", "ACCELSWEEP_PASSWORD": "<redacted>"}
