"""Where in the stack file a finding is: ``FILE:LINE:COLUMN`` from PyYAML's node marks, for
findings on a config path and for YAML syntax errors."""
from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import yaml

from gpulease.errors import Finding, InputError

#: libyaml's loader when PyYAML has it (a 1 MiB file in ~0.1 s instead of ~1 s), else pure Python.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_marks(text: str) -> dict[str, tuple[Any, Any]]:
    """Config path (``gpulease:clusters[2].gpus``, the paths findings name) -> (mark of its key,
    None for a list item; its value's node) for every key and list item of a stack file's
    ``config:``, from PyYAML's node graph (``yaml.compose``: nodes keep their start marks, loaded
    values do not). ``"config"`` is the ``config:`` key itself. A node reached again through a
    YAML alias is not walked twice (an alias bomb stays one walk of the file)."""
    try:
        root = yaml.compose(text, Loader=YAML_LOADER)  # noqa: S506 - a SafeLoader
    except (yaml.YAMLError, ValueError, RecursionError):
        return {}
    out: dict[str, tuple[Any, Any]] = {}
    if not isinstance(root, yaml.MappingNode):
        return out
    top = None
    for k, v in root.value:
        if isinstance(k, yaml.ScalarNode) and k.value == "config":
            out["config"], top = (k.start_mark, v), v
    if not isinstance(top, yaml.MappingNode):
        return out
    seen: set = set()
    todo: list = [(str(k.value), k.start_mark, v) for k, v in reversed(top.value)
                  if isinstance(k, yaml.ScalarNode)]
    while todo:
        path, key_mark, node = todo.pop()
        out[path] = (key_mark, node)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            todo += [(f"{path}.{k.value}", k.start_mark, v) for k, v in reversed(node.value)
                     if isinstance(k, yaml.ScalarNode)]
        elif isinstance(node, yaml.SequenceNode):
            todo += [(f"{path}[{i}]", None, v) for i, v in reversed(list(enumerate(node.value)))]
    return out


#: findings about a key itself (not its value): located at the key.
_ABOUT_THE_KEY = re.compile(r"unknown key|unknown namespace|a config key needs|keys are strings|"
                            r"config keys are strings|\"[^\"]*\" names no key")


def _enclosing(path: str) -> str:
    """``gpulease:clusters[2].gpus`` -> ``gpulease:clusters[2]`` -> ``gpulease:clusters``."""
    return re.sub(r"(\.[^.\[\]]*|\[\d+\])$", "", path)


def locate(findings: Iterable[Finding], source: str, text: str) -> list[Finding]:
    """Each finding on ``source`` (the stack file whose text is ``text``) with the file's
    ``:LINE:COLUMN`` added to its source, as compilers print them: the value's position for a
    bad value, the key's for an unknown key or a mapping or list, the item's for a list item. A
    path the file does not hold (a missing key) points at the nearest enclosing key or item it
    does hold. Findings on other sources, or already located, are returned unchanged."""
    findings = list(findings)
    if not any(f.source == source for f in findings):
        return findings
    marks = yaml_marks(text)
    out = []
    for f in findings:
        path = f.path
        while f.source == source and path not in marks and _enclosing(path) != path:
            path = _enclosing(path)
        if path not in marks:
            path = "config"    # a top-level key the file lacks: its `config:` mapping
        if f.source != source or path not in marks:
            out.append(f)
            continue
        key, node = marks[path]
        value_itself = (path == f.path and isinstance(node, yaml.ScalarNode)
                        and not _ABOUT_THE_KEY.match(f.message))
        mark = node.start_mark if value_itself or key is None else key
        out.append(Finding(f.path, f.message, level=f.level,
                           source=f"{source}:{mark.line + 1}:{mark.column + 1}"))
    return out


@contextmanager
def located(source: str, text: Optional[str] = None, *,
            path: Optional[Path] = None) -> Iterator[None]:
    """Re-raise an input error's findings on ``source`` with their line and column
    (:func:`locate`) in ``text``, or in the file at ``path`` read only when there is an error."""
    try:
        yield
    except InputError as exc:
        if text is None:
            try:
                text = Path(path).read_text(encoding="utf-8") if path is not None else ""
            except (OSError, UnicodeDecodeError):
                text = ""
        found = locate(exc.findings, source, text)
        if found == exc.findings:
            raise
        raise type(exc)(found, headline=exc.headline) from None


def yaml_syntax_finding(text: str, exc: "yaml.YAMLError", source: str) -> Finding:
    """A YAML syntax error as ``FILE:LINE:COLUMN: KEY: not valid YAML: ...`` — the position is
    PyYAML's mark (where the parser stopped), the key the one whose value was being read there
    (``gpulease:clusters[0].gpu``, from the events parsed before the error), and a tab in the
    indentation gets the fix: YAML indents with spaces only."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where, hint = source, ""
    if mark is not None:
        where = f"{source}:{mark.line + 1}:{mark.column + 1}"
        lines = text.split("\n")
        line = lines[mark.line] if mark.line < len(lines) else ""
        lead = line[:len(line) - len(line.lstrip(" \t"))]
        if "\t" in lead or "tab" in problem or "'\\t'" in problem:
            col = (lead.index("\t") if "\t" in lead else mark.column) + 1
            hint = (f"; line {mark.line + 1} is indented with a tab (column {col}): YAML "
                    "indents with spaces only, so replace the tab with spaces")
        problem = problem.replace("'\\t'", "a tab")
        m = re.match(r"\s*(?:-\s+)?([^\s:#'\"][^#]*?)\s*:(?:\s|$)", line)
        line_key = m.group(1) if m else ""
    else:
        line_key = ""
    return Finding(_key_before_error(text, line_key, mark.line if mark else -1) or "config",
                   f"not valid YAML: {problem}{hint}", source=where)


def _key_before_error(text: str, line_key: str = "", error_line: int = -1) -> str:
    """The config path (``gpulease:clusters[1].gpus``) whose value PyYAML was reading when it
    stopped on a syntax error: replays the event stream up to the error (the parser is lazy, so
    the events before it are exactly the document read so far)."""
    frames: list[list] = []   # [kind, key_or_index, awaiting_key, line of the key]

    def consumed() -> None:   # a value (scalar or collection) completed in the top frame
        if frames and frames[-1][0] == "map":
            frames[-1][2] = not frames[-1][2]

    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if frames and frames[-1][0] == "seq":
                    frames[-1][1] += 1
                frames.append(["map", None, True, -1] if isinstance(ev, yaml.MappingStartEvent)
                              else ["seq", -1, False, -1])
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                frames.pop()
                consumed()
            elif isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent)):
                top = frames[-1] if frames else None
                if top and top[0] == "map" and top[2]:
                    top[1], top[3] = getattr(ev, "value", None), ev.start_mark.line
                elif top and top[0] == "seq":
                    top[1] += 1
                    continue
                consumed()
    except yaml.YAMLError:
        pass
    parts: list[str] = []
    for kind, key, awaiting, _ in frames:
        if kind == "seq":
            parts.append(f"[{max(key, 0)}]")
        elif not awaiting and key is not None:   # a key whose value was being read
            parts.append(str(key))
    top = frames[-1] if frames else None
    if line_key and top and top[0] == "map" and (top[2] or error_line > top[3]):
        parts.append(line_key)   # stopped at a key of its own line (before its value began)
    if parts[:1] == ["config"]:  # the stack file's `config:` is not part of config paths
        parts = parts[1:]
    return "".join(p if p.startswith("[") or i == 0 else "." + p for i, p in enumerate(parts))
