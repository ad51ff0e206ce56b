"""No test waits with a bound of its own: every timeout in tests/ is tests/timeouts.py:HANG_S."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.timeouts import HANG_S

TESTS = Path(__file__).resolve().parent
WAITS = ("wait", "join", "result")   # Event/Barrier.wait, Thread.join, futures: timeout first
# queue.get(True, timeout): the bound is the second argument (a dict's .get(1, 0) is a key and a default)


def _literal_bounds(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg in ("timeout", "connect_timeout", "read_timeout") and \
                    isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, (int, float)):
                found.append((node.lineno, f"{kw.arg}={kw.value.value}"))
        fn = node.func
        if isinstance(fn, ast.Attribute) and fn.attr in WAITS and node.args and \
                isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, (int, float)) and \
                not isinstance(node.args[0].value, bool):
            found.append((node.lineno, f".{fn.attr}({node.args[0].value})"))
        if isinstance(fn, ast.Attribute) and fn.attr == "get" and len(node.args) >= 2 and \
                isinstance(node.args[0], ast.Constant) and node.args[0].value is True and \
                isinstance(node.args[1], ast.Constant) and \
                isinstance(node.args[1].value, (int, float)) and \
                not isinstance(node.args[1].value, bool):
            found.append((node.lineno, f".get(_, {node.args[1].value})"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + \
                list(node.args.defaults) + list(node.args.kw_defaults)
            for a, dflt in zip(args, defaults):
                if "timeout" in a.arg and isinstance(dflt, ast.Constant) and \
                        isinstance(dflt.value, (int, float)):
                    found.append((node.lineno, f"{a.arg}={dflt.value} (default)"))
    return found


def test_no_literal_timeouts_in_the_tests():
    bad = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "timeouts.py":
            continue
        for line, what in _literal_bounds(ast.parse(path.read_text(encoding="utf-8"))):
            bad.append(f"{path.relative_to(TESTS.parent)}:{line}: {what}")
    assert bad == [], "use tests.timeouts.HANG_S instead of a bound of your own:\n" + \
        "\n".join(bad)


def test_the_scan_finds_literal_bounds():
    """Negative control: each form the scan must catch."""
    src = ("subprocess.run(['x'], timeout=600)\nrequests.post(u, timeout=10)\n"
           "event.wait(120)\nthread.join(60)\nConfig(read_timeout=30)\n"
           "def _run(script, timeout: float = 30): pass\n"
           "q.get(True, 5)\nlimits.get(1)\nlimits.get(1, 0)\n"
           "subprocess.run(['x'], timeout=HANG_S)\nevent.wait(HANG_S)\n")
    found = [what for _, what in _literal_bounds(ast.parse(src))]
    assert found == ["timeout=600", "timeout=10", ".wait(120)", ".join(60)", "read_timeout=30",
                     ".get(_, 5)", "timeout=30 (default)"]
    assert HANG_S >= 3600
