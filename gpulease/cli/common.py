"""Shared CLI plumbing: stack/config/catalog arguments and loading a stack for a command."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from contextlib import contextmanager, redirect_stdout, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

from gpulease.clouds import registry
from gpulease.errors import ConfigError, Finding

if TYPE_CHECKING:  # imported where used: `--help` must not load pydantic, the catalog or Pulumi
    from gpulease.catalog import Catalog
    from gpulease.model import StackSpec


def cloud_cli(cloud: str) -> Any:
    """The commands' part on ``cloud`` (``Cloud.cli_module``: gpulease/cli/clouds/<cloud>.py):
    its client factories and ``NEEDS``."""
    return importlib.import_module(registry.get(cloud).cli_module)


def check_cloud_clients(clients: dict) -> None:
    """Injected clients are keyed by cloud name (``aws=...``): a TypeError for any other key."""
    unknown = sorted(c for c in clients if not registry.is_cloud(c))
    if unknown:
        raise TypeError(f"clients for unknown clouds {unknown} (known: "
                        f"{', '.join(registry.NAMES)})")


def cloud_needs(command: str) -> dict[str, str]:
    """Cloud -> what ``command`` reads there (its "no credentials" message says it)."""
    return {c.name: cloud_cli(c.name).NEEDS[command] for c in registry.CLOUDS}


def add_stack_args(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """--stack ENV | --config PATH, plus the catalog selection flags."""
    g = parser.add_mutually_exclusive_group(required=required)
    g.add_argument("--stack", metavar="ENV", help="stack name: reads stacks/Pulumi.ENV.yaml")
    g.add_argument("--config", metavar="PATH", help="any Pulumi stack file to read instead")
    add_catalog_args(parser)


def add_catalog_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalog", metavar="PATH",
                        help="price catalog file to use (format: docs/catalog.md)")
    parser.add_argument("--catalog-version", metavar="V",
                        help="use a shipped catalog version (reproduces an old plan's numbers)")


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document for scripts")


#: report formats: `table` (text for people), `json` (one document for scripts), `html`.
FORMATS = ("table", "json", "html")


def add_output_args(parser: argparse.ArgumentParser, *, formats: tuple[str, ...] = ("table",
                    "json"), out: bool = True) -> None:
    """The output convention every report command shares (docs/cli.md, "Output"):
    ``--format table|json[|html]`` and ``--out FILE``; ``--json`` stays as the alias of
    ``--format json``. ``out=False`` where ``--out`` already names what the command writes
    (`render --out DIR`, `catalog import --out PATH`)."""
    default_help = "table" if "table" in formats else formats[0]
    parser.add_argument("--format", type=str.lower, choices=formats, default=None,
                        metavar="|".join(formats),
                        help=f"output format (default {default_help}): table is text for "
                             "people, json one document for scripts"
                        + (", html the self-contained report" if "html" in formats else "")
                        + (", markdown a pull-request comment (docs/pipeline.md)"
                           if "markdown" in formats else ""))
    if out:
        parser.add_argument("--out", dest="report_out", metavar="FILE",
                            help="write the report to FILE instead of stdout (its directory is "
                                 "created; the file is replaced only when the report is "
                                 "complete)")
    parser.add_argument("--json", action="store_true", help="the same as --format json")


def resolve_output(args: argparse.Namespace) -> None:
    """--json and --format agreed into ``args.format`` (and ``args.json`` kept in step), for
    commands with :func:`add_output_args`."""
    if not hasattr(args, "format"):
        return
    fmt = args.format
    if getattr(args, "json", False):
        if fmt not in (None, "json"):
            raise ConfigError([Finding("--json", f"--json means --format json, which "
                                       f"contradicts --format {fmt}: give one of them")])
        fmt = "json"
    args.format = fmt or "table"
    args.json = args.format == "json"


@contextmanager
def report_to(path: Optional[str]) -> Iterator[None]:
    """With ``--out FILE``: everything the command prints on stdout goes to FILE, written to a
    temporary file beside it and moved into place when the command finishes (whatever its exit
    code: a report that ends in exit 3 or 4 is still a report). Bad input raised before that
    leaves no file. Progress and errors stay on stderr."""
    if not path:
        yield
        return
    import os
    import tempfile

    target = Path(path)
    if target.is_dir():
        raise ConfigError([Finding("--out", f"{target} is a directory: give a file name, e.g. "
                                   f"--out {target / 'report.txt'}")])
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                   dir=target.parent)
    except OSError as exc:
        raise ConfigError([Finding("--out", f"cannot write {target}: {exc.strerror or exc}; "
                                   "choose another path")]) from None
    ok = False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh, redirect_stdout(fh):
            yield
        ok = True
    finally:
        if ok:
            os.replace(tmp, target)
            progress(f"wrote {target}")
        else:
            with suppress(OSError):
                os.unlink(tmp)


@dataclass
class LoadedStack:
    spec: StackSpec
    catalog: Catalog
    values: dict          # raw `config:` mapping of the stack file
    path: Path
    source: str           # path as shown in messages


def stack_path(args: argparse.Namespace) -> Path:
    from gpulease.config import stack_file

    if getattr(args, "config", None):
        p = Path(args.config)
        if not p.is_file():
            raise ConfigError([Finding("--config", f"{p} does not exist")])
        return p
    return stack_file(args.stack)


def load_stack(args: argparse.Namespace, *, stack_arg: Optional[str] = None,
               announce_warnings: bool = True) -> LoadedStack:
    """Read, validate and resolve the catalog for the stack named by --stack/--config.

    Config warnings go to stderr unless ``announce_warnings`` is False (`plan` shows them in
    the plan instead)."""
    import dataclasses

    from gpulease.config import (display_path, load_stack_catalog, locate, located,
                                 parse_stack_config, read_stack_file, stack_file,
                                 stack_name_from_path)

    if stack_arg is not None:
        path = stack_file(stack_arg)
    else:
        path = stack_path(args)
    values = read_stack_file(path)
    source = display_path(path)
    with located(source, path=path):   # every finding with the file's line:column
        catalog = load_stack_catalog(values, source=source, path=getattr(args, "catalog", None),
                                     version=getattr(args, "catalog_version", None))
        spec = parse_stack_config(values, stack=stack_name_from_path(path), source=source,
                                  catalog=catalog)
    if spec.warnings:
        spec = dataclasses.replace(spec, warnings=tuple(locate(
            spec.warnings, source, path.read_text(encoding="utf-8"))))
    if announce_warnings:
        from gpulease.cli import ui

        for w in spec.warnings:
            ui.warning(str(w))
    return LoadedStack(spec=spec, catalog=catalog, values=values, path=path, source=source)


def print_json(obj: Any) -> None:
    """One strict JSON document on stdout: NaN or Infinity anywhere is a bug (ValueError, which
    the CLI reports as an internal error), never a document other parsers reject."""
    text = json.dumps(obj, indent=2, sort_keys=False, default=str, allow_nan=False)
    sys.stdout.write(text + "\n")


def progress(msg: str) -> None:
    """A line on stderr (written files, notes), so that --json output stays clean. Steps of a
    long command go through ``gpulease.cli.ui.steps`` instead (a spinner on a terminal)."""
    print(msg, file=sys.stderr, flush=True)
