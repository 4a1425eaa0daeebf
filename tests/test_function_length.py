"""No function of the product packages is longer than a newcomer reads at once: 80 lines, decorators and docstring
included (a nested function counts inside its parent and on its own)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("jobs", "analysis", "report")
MAX_LINES = 80
EXCEPTIONS: dict[str, str] = {}   # "path:function" -> why it may be longer (none today)


def long_functions(source: str, where: str, limit: int = MAX_LINES) -> list[str]:
    """`where:name (n lines)` of every function in `source` over `limit` lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if (n := node.end_lineno - first + 1) > limit and f"{where}:{node.name}" not in EXCEPTIONS:
                out.append(f"{where}:{node.name} ({n} lines)")
    return out


def test_the_rule_counts_a_function_from_its_decorator_to_its_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    assert long_functions(f"@staticmethod\ndef f():\n{body}\n", "m.py") == ["m.py:f (81 lines)"]
    assert long_functions(f"def f():\n{body}\n", "m.py") == []


def test_no_product_function_is_over_80_lines():
    found = [hit for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
             for hit in long_functions(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, f"split these into named steps (or say why in EXCEPTIONS): {found}"
