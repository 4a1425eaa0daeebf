"""The documentation site builds in MkDocs' strict mode (no broken link, anchor or snippet, every page in the
navigation), and the README stays a short front page that links into it."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_docs_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (tmp_path / "site" / "workloads" / "serving" / "index.html").exists()
    assert "Submission and scale" in (tmp_path / "site" / "benchmarks" / "index.html").read_text()
    shutil.rmtree(tmp_path / "site")


def test_the_readme_is_short_and_its_links_exist():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links and not [link for link in links if not (ROOT / link).exists()]
