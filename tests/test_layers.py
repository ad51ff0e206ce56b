"""The layering, enforced (issue 31 item 5): import-linter's contracts in pyproject.toml
``[tool.importlinter]`` hold, every module of the package sits in a layer, every known violation
names the issue item that removes it, and docs/architecture.md names every package."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.timeouts import HANG_S

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpulease"
PYPROJECT = ROOT / "pyproject.toml"
#: import-linter's command, installed beside this interpreter (the `test` extra)
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(config: Path) -> subprocess.CompletedProcess:
    # --no-cache: nothing written into the checkout (.import_linter_cache), a fresh graph
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_S)


def _contracts() -> list[dict]:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_hold():
    """No import runs up the layers, no cloud's module imports another cloud's, no loop between
    the modules of a package (function-local imports included). On failure the output names
    each offending import chain, file and line."""
    p = _lint(PYPROJECT)
    assert p.returncode == 0, f"import-linter: a contract is broken\n{p.stdout}{p.stderr}"
    assert "0 broken" in p.stdout, p.stdout


def test_a_contract_the_code_breaks_fails_with_the_chain(tmp_path):
    """The check bites: the layers upside down (the model above the command) fail, naming an
    import chain from the command down to the model."""
    config = tmp_path / "upside-down.toml"
    config.write_text('[tool.importlinter]\nroot_package = "gpulease"\n\n'
                      '[[tool.importlinter.contracts]]\nname = "upside down"\ntype = "layers"\n'
                      'layers = ["gpulease.model", "gpulease.cli"]\n', encoding="utf-8")
    p = _lint(config)
    assert p.returncode != 0, p.stdout
    assert "BROKEN" in p.stdout and "gpulease.cli is not allowed to import gpulease.model" \
        in p.stdout, p.stdout
    assert re.search(r"- gpulease\.cli\S* -> ", p.stdout), p.stdout


def test_every_module_of_the_package_sits_in_a_layer():
    """A new top-level module or package of gpulease is placed in the layers contract (one
    left out would be checked by nothing)."""
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    named = {m.strip() for layer in layers["layers"] for m in re.split(r"[|:]", layer)}
    children = {f"gpulease.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    children |= {f"gpulease.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    assert children - named == set(), f"not in a layer of pyproject.toml: {sorted(children - named)}"
    assert named - children == set(), f"layers name no such module: {sorted(named - children)}"


def test_every_ignored_import_says_why():
    """``ignore_imports`` holds two kinds of entry, each with a comment line above it:
    - a known violation, only until its fix lands (the comment names the issue item; import-linter
      fails on an entry that no longer matches an import, so a fixed one must be deleted);
    - the cloud registry's standing exception (a wildcard entry: clouds/base.py, registry.py and
      each clouds/<cloud>/cloud.py are bottom-layer modules inside clouds/; the "cloud-registry"
      contract keeps them there), whose comment says so."""
    lines = PYPROJECT.read_text(encoding="utf-8").splitlines()
    entries = [(i, ln) for i, ln in enumerate(lines)
               if re.fullmatch(r'\s*"[\w.*]+ -> [\w.*]+",?', ln)]
    ignored = [e for c in _contracts() for e in c.get("ignore_imports", ())]
    assert len(entries) == len(ignored), "an ignore_imports entry not on a line of its own"
    for i, entry in entries:
        above = i - 1
        while re.fullmatch(r'\s*"[\w.*]+ -> [\w.*]+",?', lines[above]):
            above -= 1            # a group of entries under one comment
        comment = lines[above].strip()
        if "*" in entry:
            assert comment.startswith("#") and "registry" in comment, \
                f"pyproject.toml:{i + 1}: {entry.strip()}: a wildcard entry is the cloud " \
                f"registry's standing exception; say so in the comment above it"
            assert "registry" in entry or ".cloud" in entry or ".base" in entry, entry
        else:
            assert re.match(r"# issue \d+ item \d+: \S", comment), \
                f"pyproject.toml:{i + 1}: {entry.strip()} needs a comment line above it naming " \
                f"the issue item that removes it, e.g. '# issue 31 item 2: why it is a violation'"


# ---- docs/architecture.md ------------------------------------------------------------------------
def test_the_architecture_doc_names_every_package_and_top_level_module():
    """docs/architecture.md says what each package (a directory with __init__.py) and each
    top-level module of gpulease holds: a new one fails here until the doc names it
    (``catalog/fetchers/``, ``tags.py``)."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(str(p.parent.relative_to(PACKAGE)) + "/" for p in PACKAGE.rglob("__init__.py")
                      if p.parent != PACKAGE and "__pycache__" not in p.parts)
    modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    missing = [n for n in packages + modules if not re.search(rf"(?<![\w/]){re.escape(n)}", doc)
               and f"gpulease/{n}" not in doc]
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_the_architecture_doc_states_the_layers_of_the_contract():
    """The layers the doc lists are the contract's, in its order."""
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = doc.split("## Layers", 1)[1].split("```", 2)[1]
    rows = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
    want = [" | ".join(m.strip().removeprefix("gpulease.") for m in re.split(r"[|:]", layer))
            for layer in layers["layers"]]
    got = [re.sub(r"\s+", " ", r.split("  ", 1)[0].strip()) for r in rows]
    assert got == want, "docs/architecture.md '## Layers' differs from pyproject.toml"
