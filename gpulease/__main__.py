"""``python -m gpulease``: the `gpulease` command."""
from gpulease.cli import console

console()
