"""Pulumi entry point (`main: infra/` in Pulumi.yaml): only wires the program's steps."""
import pulumi

from infra import oneshot
from infra.errors import InputError
from infra.program import main

oneshot.enable()  # the language host runs the program once per process (infra/oneshot.py)
try:
    main()
except InputError as exc:
    # A clear, located message instead of a Python traceback in `pulumi up`.
    raise pulumi.RunError(str(exc)) from None
