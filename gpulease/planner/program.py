"""The Pulumi program `gpulease plan` runs: the very file `pulumi up` runs.

``infra/__main__.py`` (the checkout's, or the copy a wheel carries: ``gpulease.datafiles
.program_file``) is loaded once per process as the module ``gpulease_program`` - not as
``__main__``, so its entry-point block does not run - and its ``main`` is called under the mock
runtime (``gpulease.planner.plan.run``).
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from gpulease import datafiles

#: the name the program's module is loaded under (one per process)
MODULE = "gpulease_program"


def load() -> ModuleType:
    """The program's module, loaded from :func:`gpulease.datafiles.program_file` on first use."""
    module = sys.modules.get(MODULE)
    if module is None:
        path = datafiles.program_file()
        spec = importlib.util.spec_from_file_location(MODULE, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise RuntimeError(f"gpulease's Pulumi program is missing ({path}); reinstall gpulease")
        module = importlib.util.module_from_spec(spec)
        sys.modules[MODULE] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(MODULE, None)
            raise
    return module
