"""Issue 31's size limits, read from the code itself (AST): no function over 100 lines in
gpulease/clouds/, config/ and policy/, and none over 60 in the Pulumi components (the modules of
gpulease/clouds/ that define a ``pulumi.ComponentResource``: their constructors call named
steps)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "gpulease"
LIMIT = 100
COMPONENT_LIMIT = 60


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def _defines_component(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                if name == "ComponentResource":
                    return True
    return False


def too_long(package: str) -> list[str]:
    out = []
    for path in sorted((PKG / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        limit = COMPONENT_LIMIT if package == "clouds" and _defines_component(tree) else LIMIT
        for name, line, length in _functions(tree):
            if length > limit:
                out.append(f"{path.relative_to(PKG)}:{line} {name} is {length} lines "
                           f"(at most {limit})")
    return out


@pytest.mark.parametrize("package", ["clouds", "config", "policy"])
def test_no_function_over_the_limit(package):
    assert not too_long(package), "split into named steps: " + "; ".join(too_long(package))


def test_the_components_are_found_and_the_scan_counts_lines():
    components = [p.relative_to(PKG).as_posix() for p in sorted((PKG / "clouds").rglob("*.py"))
                  if _defines_component(ast.parse(p.read_text(encoding="utf-8")))]
    assert {"clouds/aws/cluster.py", "clouds/gcp/cluster.py"} <= set(components)
    code = "def f():\n" + "    x = 1\n" * 61 + "\nclass C(pulumi.ComponentResource):\n    pass\n"
    tree = ast.parse(code)
    assert _defines_component(tree)
    assert [length for _, _, length in _functions(tree)] == [62]
