"""The import layers hold (lint-imports, pyproject.toml's [tool.importlinter]) and no two modules import each other,
directly or through others, imports inside functions included."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("jobs", "analysis", "report", "hydra_plugins")


def test_lint_imports_keeps_the_layers():
    lint = shutil.which("lint-imports", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                                os.environ.get("PATH", "")]))
    assert lint, "lint-imports is not installed (pip install -e '.[dev]')"
    proc = subprocess.run([lint, "--no-cache"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "0 broken" in proc.stdout, proc.stdout + proc.stderr


def cycles(graph: grimp.ImportGraph) -> set[frozenset[str]]:
    """The sets of modules that import each other (strongly connected components of more than one module)."""
    out = set()
    for m in graph.modules:
        both = graph.find_upstream_modules(m) & graph.find_downstream_modules(m)
        if both:
            out.add(frozenset({m, *both}))
    return out


def test_no_import_cycles():
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, exclude_type_checking_imports=True)
    found = sorted(sorted(c) for c in cycles(graph))
    assert not found, f"modules that import each other: {found}"


def test_a_cycle_is_found_through_an_import_inside_a_function():
    graph = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b", line_number=1, line_contents="from p import b")
    graph.add_import(importer="p.b", imported="p.c", line_number=9, line_contents="    from p import c")
    assert cycles(graph) == set()
    graph.add_import(importer="p.c", imported="p.a", line_number=5, line_contents="    import p.a")
    assert cycles(graph) == {frozenset({"p.a", "p.b", "p.c"})}
