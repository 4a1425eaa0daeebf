"""Page weight: a 10,000-point table must still give a small site. The table is synthetic test input
(tests/synthetic.py), built through analysis.aggregate like a real one."""
from __future__ import annotations

import json
import re

import pytest

from report.build import build
from tests import synthetic

MAX_SITE_BYTES = 5_000_000   # everything but the data/ downloads
MAX_PAGE_BYTES = 1_500_000


@pytest.mark.slow
def test_10k_point_site_stays_small(tmp_path):
    table = synthetic.table()
    assert len(table) == 10_000 and table["status"].ne("ok").any()
    baseline = table.assign(throughput_out_tok_s=table["throughput_out_tok_s"] * 1.1)   # every point 9% slower now
    site = build(table, tmp_path / "site", baseline=baseline).parent

    files = [p for p in site.rglob("*") if p.is_file() and "data" not in p.relative_to(site).parts]
    total = sum(p.stat().st_size for p in files)
    print(f"\nsite without data/: {total / 1e6:.2f} MB; "
          + ", ".join(f"{p.name} {p.stat().st_size / 1e3:.0f} kB" for p in sorted(files)))
    assert total < MAX_SITE_BYTES
    ids = set(table["point_id"])
    for page in site.glob("*.html"):
        text = page.read_text()
        assert len(text.encode()) < MAX_PAGE_BYTES, page.name
        # no page carries the raw table: few point ids, and chart data aggregated to far fewer rows than points
        assert len(ids & set(re.findall(r"\b[0-9a-f]{12}\b", text))) <= 1_000, page.name
        rows = sum(len(d["values"]) for spec in re.findall(r'type="application/json" id="[^"]+">(.*?)</script>',
                                                           text, re.S)
                   for d in _datasets(json.loads(spec)))
        assert rows < len(table) / 3, (page.name, rows)
    assert "regression" in (site / "baseline.html").read_text()


def _datasets(spec):
    if isinstance(spec, dict):
        if "values" in spec and isinstance(spec["values"], list):
            yield spec
        for v in spec.values():
            yield from _datasets(v)
    elif isinstance(spec, list):
        for v in spec:
            yield from _datasets(v)
