"""Documentation that cannot rot: generated references are current."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_config_reference_is_generated_from_the_models():
    from tools.config_reference import render_markdown

    current = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert current == render_markdown(), (
        "docs/config.md is stale: run `python -m tools.config_reference > docs/config.md`")


def test_config_reference_lists_every_key():
    from gpulease.config import StackConfigModel

    text = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    for key in StackConfigModel.model_fields:
        assert f"`gpulease:{key}`" in text
    for key in ("gpulease:clusters[].checkpoint_minutes", "gpulease:clouds.gcp.project",
                "gpulease:policy.commitment_term", "gpulease:reaper.grace_minutes"):
        assert f"`{key}`" in text


def _declared_types() -> set[str]:
    """Every resource type the shipped stacks and the conformance stress stacks declare."""
    from gpulease.planner.plan import run
    from tests.conftest import SHIPPED_STACKS, program_run
    from tests.test_conformance import _stress_stack

    types = {r.type for s in SHIPPED_STACKS for r in program_run(s).custom}
    for blocks in (False, True):
        doc = _stress_stack("stress", "gpulease", lambda c, m, d, i: f"{c}-{m}-{i}",
                            {"aws": "d1", "gcp": "d2"}, capacity_blocks=blocks)
        types |= {r.type for r in run(doc["config"], stack="stress").custom}
    return types


def test_deploy_doc_lists_every_resource_type_the_program_declares():
    text = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    missing = sorted(t for t in _declared_types() if f"`{t}`" not in text)
    assert missing == [], f"docs/deploy.md: add the permissions for {missing}"


def _readme_block(opening: str) -> str:
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^```[^\n]*\n(" + re.escape(opening) + r".*?)^```", text, re.S | re.M)
    assert m, f"README has no block starting with {opening!r}"
    return m.group(1)


def test_readme_picture_is_what_plan_prints():
    """Every line of README's `gpulease plan --stack dev` picture (but `...`) is a line the
    command prints today, so the picture cannot drift from the product."""
    import os
    import subprocess
    import sys

    block = _readme_block("$ gpulease plan --stack dev")
    out = subprocess.run([sys.executable, "-m", "gpulease.cli", "plan", "--stack", "dev"],
                         cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "NO_COLOR": "1"}).stdout
    printed = {line.rstrip() for line in out.splitlines()}
    shown = [line.rstrip() for line in block.splitlines()[1:] if line.strip() != "..."]
    missing = [line for line in shown if line not in printed]
    assert missing == [], f"README picture lines the plan no longer prints: {missing}"


def test_readme_quick_start_stack_plans(tmp_path):
    import contextlib
    import io

    import yaml

    from gpulease.cli import main

    doc = yaml.safe_load(_readme_block("config:\n  gpulease:owner"))
    path = tmp_path / "Pulumi.mine.yaml"
    path.write_text(yaml.safe_dump(doc))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["plan", "--config", str(path)]) == 0
