"""`gpulease reap --destroy`: tear an environment's whole stack down through Pulumi's Automation API.

Storage survives by construction: the storage components set ``retain_on_delete`` on every
bucket, so `pulumi destroy` drops them from the state without deleting them. Prod also sets
``protect``, and a plain destroy refuses any stack holding a protected resource ("unable to
delete resource ... as it is currently marked for protection", pulumi/pulumi#8158): the
reaper destroys with ``exclude_protected=True`` (`--exclude-protected`, pulumi/pulumi#8359),
which deletes everything else and leaves the protected resources, and what they depend on, in
the stack. The Automation API drives the Pulumi CLI, which must be installed.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Optional

from gpulease.errors import CloudError, ConfigError, Finding

#: the directory holding Pulumi.yaml (the repository root when installed editable).
PROJECT_DIR = Path(__file__).resolve().parents[2]


def pulumi_cli() -> Optional[str]:
    """Path of the `pulumi` binary (PATH, then the installer's ~/.pulumi/bin), or None."""
    found = shutil.which("pulumi")
    if found:
        return found
    home = Path(os.environ.get("PULUMI_HOME", "~/.pulumi")).expanduser() / "bin" / "pulumi"
    return str(home) if home.is_file() and os.access(home, os.X_OK) else None


def require_cli(work_dir: Path) -> None:
    """Refuse `--destroy` up front (exit 2, nothing done) when it could not possibly work."""
    findings = []
    if pulumi_cli() is None:
        findings.append(Finding("--destroy", "needs the Pulumi CLI (the Automation API runs it), "
                                "and no `pulumi` binary is on PATH or in ~/.pulumi/bin; install it "
                                "(https://www.pulumi.com/docs/install/) or scale to zero instead "
                                "(drop --destroy)"))
    if not (work_dir / "Pulumi.yaml").is_file():
        findings.append(Finding("--work-dir", f"{work_dir} has no Pulumi.yaml; point --work-dir "
                                "at the gpulease project directory"))
    if findings:
        raise ConfigError(findings, headline="refusing --destroy:")


def destroyer(work_dir: Path = PROJECT_DIR,
              on_output: Optional[Callable[[str], None]] = None) -> Callable[[str], None]:
    """A function ``destroy(environment)`` for the reaper engine (stack name = environment)."""

    def destroy(environment: str) -> None:
        import pulumi.automation as auto

        try:
            stack = auto.select_stack(stack_name=environment, work_dir=str(work_dir))
            # Protected resources (prod's storage) stay; everything else goes.
            stack.destroy(on_output=on_output, exclude_protected=True)
        except FileNotFoundError as exc:  # the CLI vanished between the check and the call
            raise CloudError("pulumi", f"destroy {environment}", f"Pulumi CLI not found: {exc}")
        except auto.errors.CommandError as exc:
            raise CloudError("pulumi", f"destroy {environment}", str(exc).strip()[-800:])
    return destroy
