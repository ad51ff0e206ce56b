"""The input boundary: every file gpulease reads passes here before anything trusts it.

Stack files, price catalogs, saved plans, SkyPilot CSVs and the answers of metric APIs are
untrusted input. Here, and only here, they are checked against one set of limits: a size cap
before reading, text that is UTF-8 (a BOM tolerated, UTF-16 and binary named as such), JSON
without NaN / Infinity / numbers beyond :data:`MAX_MAGNITUDE`, nesting at most
:data:`MAX_DEPTH` deep and at most :data:`MAX_VALUES` values (YAML aliases included). A file
that breaks a limit is bad input: an :class:`~gpulease.errors.InputError` subclass chosen by the
caller, naming the file and the field, exit 2.

Domain bounds (GPUs per cluster, prices per GPU-hour) stay with their owners (``gpulease.config``,
``gpulease.catalog.schema``); the limits here are the generic ones every reader shares.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterator, Optional

from gpulease.errors import Finding, InputError

#: a Pulumi stack file (Pulumi itself reads them whole; a stack file of 1 MiB is a mistake).
MAX_STACK_FILE_BYTES = 1 << 20
#: catalogs, saved plans, CSVs: 64 MiB (the shipped catalog is 0.9 MB, prod's plan 1.6 MB).
MAX_DOCUMENT_BYTES = 64 << 20
#: nesting of JSON and YAML documents (a catalog nests 4 deep, a plan 8).
MAX_DEPTH = 64
#: values in one document, containers included, after YAML aliases are expanded.
MAX_VALUES = 2_000_000
#: largest magnitude of any number read: products of a few such numbers (price x hours x
#: nodes x months) stay far from float overflow, and no honest input comes close.
MAX_MAGNITUDE = 1e15
#: largest amount of money, in USD, any input may state (a month of every GPU on earth is less).
MAX_USD = 1e12


class _Refused(Exception):
    """A limit broken while walking a document (turned into a Finding by the caller)."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path, self.message = path, message


def _raise(error: type[InputError], field: str, message: str, source: str,
           headline: Optional[str] = None) -> None:
    raise error([Finding(field, message, source=source)], headline=headline)


# ---- bytes and text --------------------------------------------------------------------------
def read_bytes(path: Any, *, error: type[InputError] = InputError, field: str = "file",
               limit: int = MAX_DOCUMENT_BYTES, what: str = "file", hint: str = "",
               headline: Optional[str] = None) -> bytes:
    """The file's bytes, refused before reading when it is not a regular file or over
    ``limit``."""
    p = Path(path)
    source = str(path)
    try:
        if p.is_dir():
            _raise(error, field, f"{p} is a directory, not a {what}{hint}", source, headline)
        size = p.stat().st_size
        if size > limit:
            _raise(error, field, f"the file is {_size(size)}; a {what} is at most "
                   f"{_size(limit)}: is this the right file?", source, headline)
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        _raise(error, field, f"cannot read {p}: {exc.strerror or exc}{hint}", source, headline)
    if len(data) > limit:   # grew while read, or a device/FIFO without a size
        _raise(error, field, f"more than {_size(limit)}; a {what} is at most {_size(limit)}",
               source, headline)
    return data


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n:,} bytes"


def decode(data: bytes, *, source: str, error: type[InputError] = InputError,
           field: str = "file", hint: str = "", headline: Optional[str] = None) -> str:
    """UTF-8 text (a leading BOM dropped). UTF-16 / UTF-32 and binary data are named as such;
    other undecodable bytes are located by line."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or data[:4] in (b"\x00\x00\xfe\xff",
                                                              b"\xff\xfe\x00\x00"):
        _raise(error, field, f"UTF-16/UTF-32 text (byte-order mark {data[:2].hex()}); save the "
               f"file as UTF-8{hint}", source, headline)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    nul = data.find(b"\x00", 0, 1 << 16)
    if nul >= 0:
        kind = "UTF-16 text without a byte-order mark" if _looks_utf16(data) else "binary data"
        _raise(error, field, f"{kind} (a NUL byte at offset {nul}), not UTF-8 text; save the "
               f"file as UTF-8{hint}", source, headline)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        _raise(error, field, f"not UTF-8 text (byte {data[exc.start]:#04x} at line {line}); "
               f"save the file as UTF-8{hint}", source, headline)
    raise AssertionError("unreachable")  # pragma: no cover


def _looks_utf16(data: bytes) -> bool:
    head = data[:512]
    return len(head) >= 4 and (head[1::2].count(0) > len(head) // 4
                               or head[0::2].count(0) > len(head) // 4)


# ---- JSON ------------------------------------------------------------------------------------
def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows (numbers must be finite)")


def parse_json(text: str, *, source: str, error: type[InputError] = InputError,
               field: str = "file", hint: str = "", headline: Optional[str] = None) -> Any:
    """Strict JSON (no NaN / Infinity), then :func:`check_tree`'s limits."""
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        _raise(error, field, f"nested more than {MAX_DEPTH} levels deep; no gpulease document "
               f"nests so deep{hint}", source, headline)
    except ValueError as exc:
        lineno = getattr(exc, "lineno", None)
        where = f"line {lineno} column {exc.colno}: {exc.msg}" if lineno else str(exc)
        _raise(error, field, f"not valid JSON ({where}){hint}", source, headline)
    check_tree(doc, source=source, error=error, hint=hint, headline=headline)
    return doc


def load_json(path: Any, *, error: type[InputError] = InputError, field: str = "file",
              limit: int = MAX_DOCUMENT_BYTES, what: str = "file", hint: str = "",
              headline: Optional[str] = None) -> Any:
    """A JSON file read through every check of the boundary."""
    source = str(path)
    kw = dict(error=error, field=field, hint=hint, headline=headline)
    data = read_bytes(path, limit=limit, what=what, **kw)
    text = decode(data, source=source, **kw)
    return parse_json(text, source=source, **kw)


# ---- documents -------------------------------------------------------------------------------
def _path(chain: Optional[tuple]) -> str:
    parts: list = []
    while chain is not None:
        key, chain = chain
        parts.append(key)
    out = ""
    for key in reversed(parts):
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


def walk(doc: Any, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES,
         ) -> Iterator[tuple[Optional[tuple], Any]]:
    """(location, value) of every value in ``doc``, depth first and without recursion; raises
    _Refused past ``max_depth`` or ``max_values``. ``location`` is a linked (key, parent) pair,
    spelled by :func:`location`."""
    stack: list = [(doc, None, 0)]
    count = 0
    while stack:
        node, chain, depth = stack.pop()
        count += 1
        if count > max_values:
            raise _Refused(_path(chain) or "(document)",
                           f"more than {max_values:,} values (YAML aliases expanding?); no "
                           "gpulease document holds so many")
        yield chain, node
        if isinstance(node, (dict, list)):
            if depth >= max_depth:
                raise _Refused(_path(chain) or "(document)",
                               f"nested more than {max_depth} levels deep; no gpulease "
                               "document nests so deep")
            items = list(node.items() if isinstance(node, dict) else enumerate(node))
            # reversed onto the stack: values come out in document order (findings read so)
            stack.extend((v, (k, chain), depth + 1) for k, v in reversed(items))


def location(chain: Optional[tuple]) -> str:
    """A value's place in a document: ``offerings[3].on_demand_usd``."""
    return _path(chain)


def number_problem(value: Any) -> Optional[str]:
    """Why a number cannot be trusted (NaN, infinite, beyond MAX_MAGNITUDE), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if abs(value) > MAX_MAGNITUDE:
        shown = f"{value:.3g}" if isinstance(value, float) else f"a {len(str(abs(value)))}-digit number"
        return f"{shown} is beyond ±{MAX_MAGNITUDE:.0e}: no honest input is so large"
    return None


def _clean(doc: Any, numbers: bool, max_depth: int = MAX_DEPTH,
           max_values: int = MAX_VALUES) -> bool:
    """True when :func:`walk` + :func:`number_problem` would find nothing: the same limits on
    plain JSON values, checked without locating them (a catalog's 100,000 values in a third of
    the walk's time). False on any doubt (a problem, a subclass of dict / list / int / float):
    :func:`tree_findings` then walks the document and locates what it finds."""
    count, todo = 0, [((doc,), -1)]   # the document as the one value of a container above it
    lo, hi = -MAX_MAGNITUDE, MAX_MAGNITUDE
    while todo:
        node, depth = todo.pop()
        if depth >= max_depth:
            return False
        values = node.values() if type(node) is dict else node   # dict, list, the top tuple
        count += len(values)
        if count > max_values:
            return False
        for v in values:
            t = type(v)
            if t is str or v is None or t is bool:
                continue
            if t is dict or t is list:
                todo.append((v, depth + 1))
            elif t is float or t is int:
                if numbers and not lo <= v <= hi:   # NaN and infinities fail too
                    return False
            elif isinstance(v, (dict, list, int, float)):
                return False
    return True


def tree_findings(doc: Any, *, source: str, prefix: str = "",
                  numbers: bool = True) -> list[Finding]:
    """Findings for what no gpulease document may hold: too deep, too many values, and (with
    ``numbers``) a number that is not finite or beyond MAX_MAGNITUDE (the first few)."""
    if _clean(doc, numbers):
        return []
    out: list[Finding] = []
    try:
        for chain, value in walk(doc):
            why = number_problem(value) if numbers else None
            if why is not None:
                out.append(Finding(_join(prefix, location(chain)), why, source=source))
                if len(out) >= 20:
                    break
    except _Refused as exc:
        out.append(Finding(_join(prefix, exc.path), exc.message, source=source))
    return out


def _join(prefix: str, path: str) -> str:
    if not prefix:
        return path or "(document)"
    if not path:
        return prefix
    return prefix + ("" if path.startswith("[") else ".") + path


def check_tree(doc: Any, *, source: str, error: type[InputError] = InputError,
               prefix: str = "", hint: str = "", headline: Optional[str] = None,
               numbers: bool = True) -> None:
    """Raise ``error`` with :func:`tree_findings` when there are any."""
    found = tree_findings(doc, source=source, prefix=prefix, numbers=numbers)
    if found:
        if hint:
            found[-1] = Finding(found[-1].path, found[-1].message + hint, source=source)
        raise error(found, headline=headline)


def money_problem(value: Any, *, signed: bool = False) -> Optional[str]:
    """Why a money amount (USD) cannot be trusted, or None: not a number, not finite,
    negative (unless ``signed``: a difference), or above MAX_USD."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number of USD (got {value!r:.40})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number of USD (got {value})"
    if not signed and value < 0:
        return f"must be >= 0 USD (got {value})"
    if abs(value) > MAX_USD:
        return f"must be at most {MAX_USD:,.0f} USD (got {value:.3g})"
    return None


__all__ = ["MAX_STACK_FILE_BYTES", "MAX_DOCUMENT_BYTES", "MAX_DEPTH", "MAX_VALUES",
           "MAX_MAGNITUDE", "MAX_USD", "read_bytes", "decode", "parse_json", "load_json",
           "walk", "location", "number_problem", "tree_findings", "check_tree",
           "money_problem"]
