"""`python -m infra.cli` = `gpulease`."""
import sys

from infra.cli import main

sys.exit(main())
