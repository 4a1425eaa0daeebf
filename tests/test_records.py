import os
import subprocess

import jsonschema
import pytest

from jobs import records
from tests.fakes import _record, _spec


def test_record_follows_schema(tmp_path):
    rec = records.make_record(point=_spec(), status="ok", samples={"latency_s": [0.1, 0.2]},
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
    rec = records.make_record(point=_spec(), status="failed", error=err,
                              provenance=records.provenance(start_time="x"))
    records.validate(rec)
    assert err["type"] == "RuntimeError" and "boom" in err["log_tail"]


def test_unknown_status_rejected():
    with pytest.raises(ValueError, match="status 'meh'"):
        records.make_record(point=_spec(), status="meh", provenance={})


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


# --------------------------------------------------------------------------- which record a point keeps

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


# --------------------------------------------------------------------------- provenance

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
