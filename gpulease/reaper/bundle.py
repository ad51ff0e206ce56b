"""What every scheduled reaper's bundle shares: the plain-Python package files it carries.

Each cloud's scheduled reaper (``Cloud.reaper_deploy_module``: gpulease/reaper/<cloud>_deploy.py)
deploys an archive of these files plus its own adaptor and entry point (standard library + the
cloud SDK: no pydantic, no Pulumi); ``gpulease.reaper.deploy.deploy_reaper`` asks each cloud's
module for its component.
"""
from __future__ import annotations

from pathlib import Path

from gpulease import datafiles
from gpulease.clouds import registry

ROOT = datafiles.package_root()  # the `gpulease` package directory (checkout or wheel)
#: the stack setting that turns the scheduled reaper on (named by the errors about it).
SCHEDULE_PATH = "gpulease:reaper.schedule"
#: package files every reaper bundle imports (relative to ROOT); __init__ files are replaced by
#: empty ones in the archive so no package-level import can drag pydantic or Pulumi in. A cloud's
#: bundle adds its adaptor (``reaper/<cloud>.py``) and its entry point.
SHARED_FILES = (
    "errors.py", "limits.py", "model.py", "money.py", "datafiles.py", "retry.py", "text.py",
    "clock.py", "purchase.py", "deadline.py", "naming.py",
    "catalog/__init__.py", "tags.py", "cron.py", "reaper/decision.py", "reaper/defaults.py",
    "reaper/engine.py",
    # the cloud registry (model and the engine ask it); these __init__ files import nothing
    "clouds/__init__.py", "clouds/base.py", "clouds/registry.py",
    *(f for c in registry.CLOUDS for f in (f"clouds/{c.name}/__init__.py",
                                           f"clouds/{c.name}/cloud.py")),
    "reaper/audit.py", "reaper/errors.py", "reaper/claims.py", "reaper/functions.py",
)


def catalog_data_files() -> list[Path]:
    """The shipped catalog files: they ride along for reservation prices."""
    return sorted((ROOT / "catalog" / "data").glob("*.json"))


__all__ = ["ROOT", "SCHEDULE_PATH", "SHARED_FILES", "catalog_data_files"]
