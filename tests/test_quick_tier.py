"""The quick tier's list names test modules that exist (a typo would drop one silently)."""
from pathlib import Path

from tests.conftest import QUICK_MODULES


def test_every_quick_module_exists():
    here = Path(__file__).resolve().parent
    missing = sorted(m for m in QUICK_MODULES if not (here / f"{m}.py").is_file())
    assert missing == []
