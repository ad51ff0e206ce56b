"""Documentation that cannot rot: generated references are current."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_config_reference_is_generated_from_the_models():
    from infra.config_reference import render_markdown

    current = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert current == render_markdown(), (
        "docs/config.md is stale: run `python -m infra.config_reference > docs/config.md`")


def test_config_reference_lists_every_key():
    from infra.config import StackConfigModel

    text = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    for key in StackConfigModel.model_fields:
        assert f"`gpulease:{key}`" in text
    for key in ("gpulease:clusters[].checkpoint_minutes", "gpulease:clouds.gcp.project",
                "gpulease:policy.commitment_term", "gpulease:reaper.grace_minutes"):
        assert f"`{key}`" in text
