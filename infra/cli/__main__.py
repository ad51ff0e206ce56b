"""`python -m infra.cli` = `gpulease`."""
from infra.cli import console

console()
