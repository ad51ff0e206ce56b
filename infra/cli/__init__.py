"""The `gpulease` command. Each subcommand lives in its own module with a ``register``.

Errors are handled here, once: a GpuleaseError prints its message (no traceback) and exits
with its code (see infra.errors for the codes).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from infra import __version__
from infra.errors import EXIT_BAD_INPUT, EXIT_FAILED, GpuleaseError

#: subcommand modules, in `--help` order. A module missing here is simply not offered.
COMMANDS = ("plan", "explain", "catalog", "render", "reap")

EPILOG = """\
exit codes: 0 ok · 1 failed at run time · 2 bad input (nothing done) ·
            3 cost increase over --fail-on-increase · 4 mandatory guardrail failed

examples:
  gpulease plan --stack dev                 offline cost-tagged plan of stacks/Pulumi.dev.yaml
  gpulease plan --stack prod --json         the same plan as one JSON document
  gpulease explain --stack prod             why each cluster runs where it runs
  gpulease catalog list --gpu H100          GPU offerings and prices
  gpulease catalog refresh --cloud aws      new price file from the AWS pricing APIs
  gpulease render --stack dev --cluster sandbox --out boot/   what a node boots with
  gpulease reap --all                       dry-run: which clusters are idle
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpulease",
        description="Cost-optimized hybrid GPU training clusters on AWS and GCP, declared with "
                    "Pulumi. Plans run offline: no cloud, no credentials, no Pulumi CLI.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpulease {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"infra.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"infra.cli.{name}":
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args) or 0)
    except GpuleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
