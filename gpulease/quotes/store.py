"""The shipped, dated quote data file and the cache of live quotes: schema, loading, writing.

- ``gpulease/quotes/data/<version>.json`` (format ``gpulease-quotes/1``): published rates (USD per
  node-hour) for Capacity Blocks / flex-start / calendar mode and the Spot Instance Advisor
  bands, each row with its source and the date it was published; what gpulease answers offline.
- the cache (``$GPULEASE_QUOTES_CACHE``, default ``~/.cache/gpulease/quotes.json``; format
  ``gpulease-quotes-cache/1``): what `gpulease catalog quotes` read from the APIs, each with its
  time of quote. Reading it is reading untrusted input: a malformed file is a located error
  (exit 2), never a traceback.
"""
from __future__ import annotations

import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt,
                      StrictStr, ValidationError, model_validator)

from gpulease import datafiles
from gpulease.catalog.schema import findings_from
from gpulease.clouds import registry
from gpulease.errors import CatalogError, Finding
from gpulease.purchase import CAPACITY_BLOCK
from gpulease.quotes import CB_MAX_INSTANCES, QUOTE_KINDS, valid_block_count
from gpulease.quotes.model import Quote, QuoteBook, SpotRisk, parse_time

FORMAT = "gpulease-quotes/1"
CACHE_FORMAT = "gpulease-quotes-cache/1"
DATA_DIR = datafiles.package_path("quotes", "data")
CACHE_ENV = "GPULEASE_QUOTES_CACHE"
#: a cache or data file larger than this is not a quote file (the shipped one is ~60 KB).
MAX_FILE_BYTES = 16 << 20

Money = Annotated[Union[StrictInt, StrictFloat], Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[Union[StrictInt, StrictFloat], Field(gt=0, allow_inf_nan=False)]
Name = Annotated[StrictStr, Field(min_length=1, max_length=64)]
Text = Annotated[StrictStr, Field(max_length=2000)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QuoteRow(_Strict):
    kind: Literal[QUOTE_KINDS]  # type: ignore[valid-type]
    cloud: Literal[registry.NAMES]  # type: ignore[valid-type]
    region: Name
    instance_type: Name
    quoted_at: Annotated[StrictStr, Field(min_length=10, max_length=40)]
    source: Name
    start: Optional[StrictStr] = None
    end: Optional[StrictStr] = None
    hours: Optional[Money] = None          # written by as_dict; recomputed, not trusted
    instance_count: Optional[Annotated[StrictInt, Field(ge=1, le=100_000)]] = None
    upfront_usd: Optional[Money] = None
    hourly_usd: Optional[Positive] = None
    zone: Optional[Name] = None
    offering_id: Optional[Annotated[StrictStr, Field(min_length=1, max_length=128)]] = None
    currency: Literal["USD"] = "USD"
    tenancy: Optional[Literal["default", "dedicated"]] = None
    live: StrictBool = False
    note: Text = ""

    @model_validator(mode="after")
    def _shape(self) -> "QuoteRow":
        problems = []
        times = {}
        for key in ("quoted_at", "start", "end"):
            v = getattr(self, key)
            if v is not None:
                try:
                    # a published rate's quoted_at may be its publication date (midnight UTC);
                    # an offering's start and end are times with a zone
                    times[key] = parse_time(v, date_ok=key == "quoted_at")
                except ValueError as exc:
                    problems.append(f"{key}: {exc}")
        if (self.start is None) != (self.end is None):
            problems.append("an offering has both start and end (a rate has neither)")
        elif self.start is not None:
            if "start" in times and "end" in times and times["end"] <= times["start"]:
                problems.append("end must be after start")
            if self.upfront_usd is None and self.kind == CAPACITY_BLOCK:
                problems.append("a Capacity Block offering needs upfront_usd (its price)")
            if self.instance_count is None:
                problems.append("an offering needs instance_count")
        elif self.hourly_usd is None:
            problems.append("a rate needs hourly_usd (USD per node-hour)")
        if self.kind == CAPACITY_BLOCK and self.instance_count is not None \
                and not valid_block_count(self.instance_count):
            problems.append(f"a Capacity Block has 1 to {CB_MAX_INSTANCES} instances (the "
                            "sizes AWS sells: gpulease.quotes.CB_INSTANCE_COUNTS)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def to_quote(self) -> Quote:
        return Quote(kind=self.kind, cloud=self.cloud, region=self.region,
                     instance_type=self.instance_type,
                     quoted_at=parse_time(self.quoted_at, date_ok=True),
                     source=self.source, start=parse_time(self.start) if self.start else None,
                     end=parse_time(self.end) if self.end else None,
                     instance_count=self.instance_count, upfront_usd=self.upfront_usd,
                     hourly_usd=self.hourly_usd if self.start is None else None,
                     zone=self.zone, offering_id=self.offering_id, currency=self.currency,
                     tenancy=self.tenancy, live=self.live, note=self.note)


class RiskRow(_Strict):
    cloud: Literal[registry.NAMES]  # type: ignore[valid-type]
    region: Name
    instance_type: Name
    as_of: Annotated[StrictStr, Field(min_length=10, max_length=40)]
    source: Name
    zone: Optional[Name] = None
    band: Optional[Literal["<5%", "5-10%", "10-15%", "15-20%", ">20%"]] = None
    band_max_percent: Optional[Annotated[Union[StrictInt, StrictFloat],
                                         Field(gt=0, le=100, allow_inf_nan=False)]] = None
    interruptions_per_hour: Optional[Money] = None   # written by as_dict; recomputed
    placement_score: Optional[Annotated[StrictInt, Field(ge=1, le=10)]] = None
    obtainability: Optional[Annotated[Union[StrictInt, StrictFloat],
                                      Field(ge=0, le=1, allow_inf_nan=False)]] = None
    estimated_uptime_hours: Optional[Positive] = None
    live: StrictBool = False

    @model_validator(mode="after")
    def _shape(self) -> "RiskRow":
        try:
            parse_time(self.as_of, date_ok=True)    # a published figure's date, or a time
        except ValueError as exc:
            raise ValueError(f"as_of: {exc}") from None
        if (self.band is None) != (self.band_max_percent is None):
            raise ValueError("band and band_max_percent come together (the Advisor's label and "
                             "its range's upper edge)")
        return self

    def to_risk(self) -> SpotRisk:
        return SpotRisk(cloud=self.cloud, region=self.region, instance_type=self.instance_type,
                        as_of=parse_time(self.as_of, date_ok=True), source=self.source,
                        zone=self.zone,
                        band=self.band, band_max_percent=self.band_max_percent,
                        placement_score=self.placement_score,
                        obtainability=self.obtainability,
                        estimated_uptime_hours=self.estimated_uptime_hours, live=self.live)


class SourceRow(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    url: Optional[StrictStr] = None
    title: Optional[StrictStr] = None


class QuoteDoc(_Strict):
    format: Literal["gpulease-quotes/1", "gpulease-quotes-cache/1"]
    version: Optional[Annotated[StrictStr, Field(pattern=r"^[0-9A-Za-z][0-9A-Za-z._-]{0,63}$")]] = None
    as_of: Optional[StrictStr] = None
    description: Text = ""
    sources: dict[StrictStr, SourceRow] = {}
    quotes: list[Any] = []
    spot_risk: list[Any] = []
    #: the Spot Advisor's ranges array the bands were read with (kept for reference).
    spot_advisor_ranges: list[Any] = []
    generated_by: Text = ""


def _headline(path: str) -> str:
    return f"{path}: invalid quote file (see docs/catalog.md, \"Quotes\"):"


def parse_document(raw: Any, *, source: str, book: Optional[QuoteBook] = None) -> QuoteBook:
    """Validate a quote data or cache document into a QuoteBook (all findings at once)."""
    errors: list[Finding] = []
    if not isinstance(raw, dict):
        raise CatalogError([Finding("", f"a quote file is a JSON object (got "
                                    f"{type(raw).__name__})", source=source)],
                           headline=_headline(source))
    try:
        doc = QuoteDoc.model_validate(raw)
    except ValidationError as exc:
        raise CatalogError(findings_from(exc, prefix="", source=source),
                           headline=_headline(source)) from None
    book = book if book is not None else QuoteBook()
    quotes, risks = [], []
    for section, model, out in (("quotes", QuoteRow, quotes), ("spot_risk", RiskRow, risks)):
        for i, row in enumerate(getattr(doc, section)):
            label = " ".join(str(row.get(k)) for k in ("kind", "cloud", "region",
                                                       "instance_type")
                             if isinstance(row, dict) and isinstance(row.get(k), str))
            try:
                r = model.model_validate(row)
            except ValidationError as exc:
                errors += findings_from(exc, prefix=f"{section}[{i}]", source=source,
                                        label=label)
                continue
            if doc.sources and r.source not in doc.sources and not getattr(r, "live", False):
                errors.append(Finding(f"{section}[{i}] ({label}).source",
                                      f'"{r.source}" is not a key of sources', source=source))
                continue
            out.append(r.to_quote() if section == "quotes" else r.to_risk())
    if errors:
        raise CatalogError(errors, headline=_headline(source))
    book.add(quotes, risks)
    book.sources.update({k: v.model_dump(exclude_none=True) for k, v in doc.sources.items()})
    book.origins = book.origins + (source,)
    if doc.version and not book.version:
        book.version = doc.version
    return book


def read_json(path: Path) -> Any:
    """A quote file's JSON through the input boundary (gpulease/inputs.py: size, UTF-8, strict
    JSON, depth, finite numbers); located errors otherwise."""
    from gpulease import inputs

    return inputs.load_json(path, error=CatalogError, field="", what="quote file",
                            limit=MAX_FILE_BYTES, headline=_headline(str(path)),
                            hint="; delete the file or refresh it with `gpulease catalog "
                                 "quotes --source live`")


def available_versions() -> list[str]:
    return list(_versions(str(DATA_DIR), _mtime(DATA_DIR)))


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


@lru_cache(maxsize=8)
def _versions(directory: str, _mtime: int) -> tuple[str, ...]:
    """The data files of ``directory`` (kept until the directory changes: every decision
    without a quote book asks)."""
    return tuple(sorted(p.stem for p in Path(directory).glob("*.json")))


def data_path(version: Optional[str] = None) -> Path:
    versions = available_versions()
    if not versions:
        raise CatalogError([Finding("quotes", f"no quote data file in {DATA_DIR}")])
    return DATA_DIR / f"{version or versions[-1]}.json"


@lru_cache(maxsize=8)
def _shipped(path: str, _mtime: int) -> tuple:
    book = parse_document(read_json(Path(path)), source=_display(Path(path)))
    return (tuple(book.quotes), tuple(book.risks), dict(book.sources), book.origins,
            book.version, book.fingerprint())


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path(__file__).resolve().parents[2]))
    except ValueError:
        return str(path)


def shipped_book(version: Optional[str] = None) -> QuoteBook:
    """The dated data file (the offline answer), as a fresh QuoteBook."""
    p = data_path(version)
    quotes, risks, sources, origins, ver, fp = _shipped(str(p), p.stat().st_mtime_ns)
    # the fingerprint of the same records (computed once: the policy's caches are keyed on it;
    # adding records to the book resets it)
    return QuoteBook(quotes=list(quotes), risks=list(risks), sources=dict(sources),
                     origins=origins, version=ver, _fingerprint=fp)


def cache_path() -> Path:
    env = os.environ
    return _cache_path(env.get(CACHE_ENV), env.get("XDG_CACHE_HOME"), env.get("HOME"))


@lru_cache(maxsize=8)
def _cache_path(explicit: Optional[str], xdg: Optional[str], _home: Optional[str]) -> Path:
    """(keyed on the variables it reads: every decision without a quote book asks)"""
    if explicit:
        return Path(explicit)
    base = xdg or os.path.join(str(Path.home()), ".cache")
    return Path(os.path.join(base, "gpulease", "quotes.json"))


def load_book(*, cache: bool = True, path: Optional[Path] = None) -> QuoteBook:
    """The shipped data file plus, with ``cache``, the live quotes cached at ``path`` (default
    ``cache_path()``); a missing cache is no error."""
    book = shipped_book()
    if cache:
        p = path or cache_path()
        if p.is_file():
            parse_document(read_json(p), source=str(p), book=book)
    return book


def write_cache(quotes: list[Quote], risks: list[SpotRisk], *, path: Optional[Path] = None,
                keep: bool = True) -> Path:
    """Add live answers to the cache (atomically: a temp file renamed over it). With ``keep``
    the cache's earlier records stay, except those the new answers replace (same kind, cloud,
    region, type and, for risks, zone)."""
    p = path or cache_path()
    old_q: list[dict] = []
    old_r: list[dict] = []
    if keep and p.is_file():
        old = parse_document(read_json(p), source=str(p))
        fresh = {(q.kind, q.cloud, q.region, q.instance_type) for q in quotes}
        old_q = [q.as_dict() for q in old.quotes
                 if (q.kind, q.cloud, q.region, q.instance_type) not in fresh]
        fresh_r = {(r.cloud, r.region, r.instance_type, r.zone) for r in risks}
        old_r = [r.as_dict() for r in old.risks
                 if (r.cloud, r.region, r.instance_type, r.zone) not in fresh_r]
    doc = {"format": CACHE_FORMAT,
           "description": "Live quotes read by `gpulease catalog quotes`, each with its time "
                          "of quote (docs/catalog.md, \"Quotes\").",
           "quotes": old_q + [q.as_dict() for q in quotes],
           "spot_risk": old_r + [r.as_dict() for r in risks]}
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".quotes-", dir=str(p.parent))
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, allow_nan=False)
        fh.write("\n")
    os.replace(tmp, p)
    return p
