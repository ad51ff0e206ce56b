"""The `gpulease` command. Each subcommand lives in its own module with a ``register``.

Only the module of the command being run is imported (``gpulease --help`` imports none), and
command modules import their heavy dependencies (Pulumi, the policy, cloud SDKs) inside the
functions that run, so every ``--help`` answers quickly (bench/cli_help.py measures it).

Errors are handled here, once: a GpuleaseError prints its message (no traceback) and exits
with its code (see gpulease.errors for the codes). Every non-zero exit prints a reason on stderr.
Any other exception is a bug: it is reported in one line naming a full report file
(gpulease.cli.crash), exit 1 -- never a raw traceback on the terminal.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from gpulease import __version__
from gpulease.errors import EXIT_BAD_INPUT, EXIT_FAILED, GpuleaseError, did_you_mean

#: subcommands in `--help` order, with the one line `gpulease --help` shows for each.
COMMANDS = {
    "plan": "offline cost-tagged plan of a stack (what `pulumi up` would create)",
    "explain": "why each cluster runs where it runs: costs, rationale, alternatives",
    "catalog": "GPU offerings and prices; refresh or import the price catalog",
    "render": "write the files a cluster's nodes boot with",
    "reap": "scale idle clusters to zero (dry run by default)",
    "recommend": "demand profiles (baseline + burst) sized from observed GPU use",
    "inventory": "read what the accounts already paid for (commitments, reservations)",
    "comment": "post a plan as a pull-request comment (GitHub, GitLab)",
    "spend": "the plan beside the clouds' bill: planned, billed, why they differ",
}

EPILOG = """\
examples:
  gpulease plan --stack dev                  offline cost-tagged plan of stacks/Pulumi.dev.yaml
  gpulease plan --stack prod --json          the same plan as one JSON document
  gpulease plan --stack prod --diff staging  what prod costs more than staging, per resource
  gpulease explain --stack prod              why each cluster runs where it runs
  gpulease catalog list --gpu H100           GPU offerings and prices
  gpulease catalog refresh --cloud aws       new price file from the AWS pricing APIs
  gpulease render --stack dev --cluster sandbox --out boot/    what a node boots with
  gpulease reap --all                        dry-run: which clusters are idle
  gpulease inventory --stack prod            what prod's accounts already paid for
  gpulease spend --stack prod --bill focus/  the plan beside what the clouds billed

`gpulease COMMAND --help` explains each command, with examples and its exit codes.

output: tables and colour on a terminal (a table taller than the screen is printed plainly,
unwrapped); plain, stable text when piped (NO_COLOR or --no-color turn colour off,
FORCE_COLOR turns it on); progress goes to stderr.

exit codes: 0 ok · 1 failed at run time · 2 bad input (nothing done) ·
            3 cost over a gate threshold (--fail-on-increase, gpulease:gate.block) ·
            4 mandatory guardrail failed or conformance error;
            every non-zero exit prints its reason on stderr
"""


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a mistyped command or choice."""

    def error(self, message: str):  # noqa: D401 - argparse's signature
        if "invalid choice: " in message:
            bad = message.split("invalid choice: ", 1)[1].split("'")[1] \
                if "'" in message else ""
            choices = [a for a in self._choices_in(message)]
            hint = did_you_mean(bad, choices) if bad else ""
            message = message + hint
        elif message.startswith("unrecognized arguments: "):
            flags = [a.split("=", 1)[0] for a in message.split(": ", 1)[1].split()
                     if a.startswith("--")]
            if flags:
                message += did_you_mean(flags[0], sorted(self._option_strings()))
        super().error(message)

    def _option_strings(self) -> set[str]:
        """Every long option of this parser and the command parsers under it."""
        out = {o for a in self._actions for o in a.option_strings if o.startswith("--")}
        for a in self._actions:
            if isinstance(a, argparse._SubParsersAction):
                for child in a.choices.values():
                    if isinstance(child, Parser):
                        out |= child._option_strings()
        return out

    @staticmethod
    def _choices_in(message: str) -> list[str]:
        if "(choose from " not in message:
            return []
        inner = message.split("(choose from ", 1)[1].rsplit(")", 1)[0]
        return [c.strip().strip("'\"") for c in inner.split(",")]


def _command_in(argv: Sequence[str]) -> Optional[str]:
    """The subcommand named in ``argv`` (the first non-option word), if it is one."""
    for a in argv:
        if a == "--":
            return None
        if a.startswith("-"):
            continue
        return a if a in COMMANDS else None
    return None


def add_global_args(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """Options every command takes (before or after the command name)."""
    parser.add_argument("--no-color", action="store_true",
                        default=False if top else argparse.SUPPRESS,
                        help="no colour, even on a terminal (the same as NO_COLOR=1)")


def build_parser(argv: Optional[Sequence[str]] = None, *,
                 full: bool = False) -> argparse.ArgumentParser:
    """The `gpulease` parser. Only the command named in ``argv`` is registered in full (its
    module imported); the others are listed by name. ``full``: register every command."""
    parser = Parser(
        prog="gpulease",
        description="Cost-optimized hybrid GPU training clusters on AWS and GCP, declared with "
                    "Pulumi. Plans run offline: no cloud, no credentials, no Pulumi CLI.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpulease {__version__}")
    add_global_args(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    wanted = None if full else _command_in(list(argv if argv is not None else sys.argv[1:]))
    for name, summary in COMMANDS.items():
        if full or name == wanted:
            try:
                mod = importlib.import_module(f"gpulease.cli.{name}")
            except ModuleNotFoundError as exc:
                if exc.name == f"gpulease.cli.{name}":
                    continue
                raise
            mod.register(sub)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    for p in sub.choices.values():
        if p.add_help:
            _add_global_to_tree(p)
    return parser


def _add_global_to_tree(p: argparse.ArgumentParser) -> None:
    add_global_args(p)
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_global_to_tree(child)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from gpulease.cli import ui

    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_third_party_warnings()
    parser = build_parser(argv)
    ui.configure()
    args = parser.parse_args(argv)
    ui.configure(no_color=bool(getattr(args, "no_color", False)))
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        ui.error("say which command to run: " + ", ".join(COMMANDS))
        return EXIT_BAD_INPUT
    try:
        from gpulease.cli.common import report_to, resolve_output

        resolve_output(args)
        with report_to(getattr(args, "report_out", None)):
            code = int(args.func(args) or 0)
    except GpuleaseError as exc:
        ui.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        ui.error("interrupted")
        return EXIT_FAILED
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the last resort: one line and a report, never a traceback
        from gpulease import credentials
        from gpulease.cli import crash

        missing = credentials.from_exception(exc, command=_command_words(args))
        if missing is not None:   # an SDK found no credentials after the command's own check
            ui.error(str(missing))
            return missing.exit_code

        ui.error(crash.report(exc, argv))
        return EXIT_FAILED
    if code and not ui.reason_given():
        # safety net: a command that forgot to say why still says something
        ui.exit_reason(code, "see the output above")
    return code


def _command_words(args: argparse.Namespace) -> str:
    """'catalog refresh', 'reap', ... (the command as typed, for messages)."""
    words = [getattr(args, "command", None) or ""]
    for attr in ("catalog_command", "subcommand"):
        if getattr(args, attr, None):
            words.append(getattr(args, attr))
    return " ".join(w for w in words if w)


#: Modules whose warnings reach the terminal: gpulease's own. Third-party libraries warn about
#: their own future (google.api_core's Python-version FutureWarning on every import of a Google
#: client, botocore's deprecations): nothing a gpulease user can act on, so the CLI drops them.
OWN_WARNINGS = r"gpulease(\.|$)"


def quiet_third_party_warnings() -> None:
    """Ignore warnings raised from modules outside gpulease, unless the user asked for warnings
    (``python -W ...`` or PYTHONWARNINGS: their filters win). Called before any command module
    (and so any cloud SDK) is imported."""
    import warnings

    if sys.warnoptions:
        return
    warnings.filterwarnings("ignore", module=r"(?!" + OWN_WARNINGS + ")")


def console() -> None:
    """The `gpulease` console script and `python -m gpulease.cli`: :func:`main` in a one-shot
    process (``gpulease.gctuning``: long-lived data frozen out of the collector's walks, no
    interpreter teardown at exit). Tests call :func:`main`, which does neither."""
    from gpulease import gctuning

    gctuning.enable()
    gctuning.exit(main())


if __name__ == "__main__":  # pragma: no cover
    console()
