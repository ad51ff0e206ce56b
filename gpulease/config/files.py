"""Stack files: finding the project and a stack's file, reading its ``config:`` mapping as
plain data (refused with located findings otherwise), and config values as Pulumi passes them."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from gpulease import inputs
from gpulease.config.locate import YAML_LOADER, located, yaml_syntax_finding
from gpulease.config.messages import headline
from gpulease.config.schema import NAMESPACE
from gpulease.errors import ConfigError, Finding, did_you_mean
from gpulease.inputs import MAX_STACK_FILE_BYTES


def find_project_dir(start: Optional[Path] = None) -> Path:
    """The directory holding Pulumi.yaml, searching upward from ``start`` (default: cwd)."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "Pulumi.yaml").is_file():
            return d
    raise ConfigError([Finding("--stack", f"no Pulumi.yaml in {here} or above: run gpulease "
                               "from the project directory, or pass --config PATH")])


def stack_file(stack: str, project_dir: Optional[Path] = None) -> Path:
    root = project_dir or find_project_dir()
    stacks_dir = root / "stacks"
    try:
        proj = yaml.safe_load((root / "Pulumi.yaml").read_text(encoding="utf-8")) or {}
        if isinstance(proj, dict) and isinstance(proj.get("stackConfigDir", "stacks"), str):
            stacks_dir = root / proj.get("stackConfigDir", "stacks")
    except (OSError, ValueError, yaml.YAMLError):   # Pulumi itself reports a broken Pulumi.yaml
        pass
    path = stacks_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        have = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in stacks_dir.glob("Pulumi.*.yaml"))
        raise ConfigError([Finding("--stack", f'no stack "{stack}": {path} does not exist'
                                   f"{did_you_mean(stack, have)}; stacks: {', '.join(have)}")])
    return path


def read_stack_file(path: Path) -> dict[str, Any]:
    """The ``config:`` mapping of a Pulumi stack file (values as YAML gives them).

    Refuses, with located findings, what no Pulumi stack file holds: non-UTF-8 text, files over
    MAX_STACK_FILE_BYTES, non-string keys, and YAML values that are not plain data (``!!binary``,
    dates, sets): Pulumi passes config to programs as strings and JSON.
    """
    source = display_path(path)
    raw = inputs.read_bytes(path, error=ConfigError, field="config", what="stack file",
                            limit=MAX_STACK_FILE_BYTES)
    text = inputs.decode(raw, source=source, error=ConfigError, field="config")
    try:
        doc = yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_syntax_finding(text, exc, source)]) from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a bad !!timestamp
        raise ConfigError([Finding("config", f"not valid YAML: {exc}", source=source)]) from None
    except RecursionError:
        raise ConfigError([Finding("config", f"nested more than {inputs.MAX_DEPTH} levels deep; "
                                   "no stack file nests so deep", source=source)]) from None
    with located(source, text):
        # depth and size after YAML aliases are expanded (numbers: the schema, with every
        # finding)
        inputs.check_tree(doc, source=source, error=ConfigError, headline=headline(source),
                          numbers=False)
        if doc is None:
            doc = {}
        if not isinstance(doc, dict) or not isinstance(doc.get("config", {}), dict):
            raise ConfigError([Finding("config", "a stack file is a mapping with a `config:` "
                                       "mapping of keys", source=source)])
        config = dict(doc.get("config") or {})
        findings = list(_plain_data_findings(config, source))
        if findings:
            raise ConfigError(findings, headline=headline(source))
    return config


_PLAIN = (str, int, float, bool, type(None))


def _plain_data_findings(config: dict, source: str):
    """Findings for keys and values a Pulumi stack config cannot hold (not plain JSON data)."""
    stack: list[tuple[str, Any]] = [(str(k) if isinstance(k, str) else repr(k), v)
                                    for k, v in config.items() if isinstance(k, str)]
    for k in config:
        if not isinstance(k, str):
            yield Finding("config", f"config keys are strings like \"{NAMESPACE}:owner\" (got "
                          f"{k!r}); quote the key", source=source)
    while stack:
        path, v = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    yield Finding(path, f"keys are strings (got {k!r}); quote the key",
                                  source=source)
                    continue
                stack.append((f"{path}.{k}", x))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", x) for i, x in enumerate(v))
        elif not isinstance(v, _PLAIN):
            kind = {"bytes": "binary data (!!binary)", "date": "a date", "datetime": "a timestamp",
                    "set": "a set (!!set)"}.get(type(v).__name__, type(v).__name__)
            yield Finding(path, f"{kind} is not a config value: use a string, number, true/false, "
                          "a list or a mapping (quote dates)", source=source)


def stack_name_from_path(path: Path) -> str:
    m = re.fullmatch(r"Pulumi\.(.+)\.yaml", Path(path).name)
    return m.group(1) if m else Path(path).stem


def display_path(path: Path) -> str:
    """Path as users see it: relative to the project dir when inside it."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(find_project_dir(p.parent)))
    except (ConfigError, ValueError):
        return str(path)


def values_for_pulumi(values: Mapping[str, Any]) -> dict[str, str]:
    """Config values as the Pulumi engine hands them to a program (objects as JSON strings)."""
    out = {}
    for k, v in values.items():
        if not isinstance(k, str) or v is None:
            continue
        out[k] = v if isinstance(v, str) else json.dumps(v)
    return out
