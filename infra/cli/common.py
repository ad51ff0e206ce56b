"""Shared CLI plumbing: stack/config/catalog arguments and loading a stack for a command."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from infra.errors import ConfigError, Finding

if TYPE_CHECKING:  # imported where used: `--help` must not load pydantic, the catalog or Pulumi
    from infra.catalog import Catalog
    from infra.model import StackSpec


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


@dataclass
class LoadedStack:
    spec: StackSpec
    catalog: Catalog
    values: dict          # raw `config:` mapping of the stack file
    path: Path
    source: str           # path as shown in messages


def stack_path(args: argparse.Namespace) -> Path:
    from infra.config import stack_file

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
    from infra.catalog import load_catalog
    from infra.config import (catalog_selection, display_path, parse_stack_config,
                              read_stack_file, stack_file, stack_name_from_path)

    if stack_arg is not None:
        path = stack_file(stack_arg)
    else:
        path = stack_path(args)
    values = read_stack_file(path)
    source = display_path(path)
    c_path, c_version = catalog_selection(values)
    catalog = load_catalog(getattr(args, "catalog", None) or (None if getattr(args, "catalog_version", None) else c_path),
                           getattr(args, "catalog_version", None) or (None if getattr(args, "catalog", None) else c_version))
    spec = parse_stack_config(values, stack=stack_name_from_path(path), source=source,
                              catalog=catalog)
    if announce_warnings:
        from infra.cli import ui

        for w in spec.warnings:
            ui.warning(str(w))
    return LoadedStack(spec=spec, catalog=catalog, values=values, path=path, source=source)


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def progress(msg: str) -> None:
    """A line on stderr (written files, notes), so that --json output stays clean. Steps of a
    long command go through ``infra.cli.ui.steps`` instead (a spinner on a terminal)."""
    print(msg, file=sys.stderr, flush=True)
