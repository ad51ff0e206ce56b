"""`python -m gpulease.cli` = `gpulease`."""
from gpulease.cli import console

console()
