"""Catalog refresh: fetch current prices, merge them into a new versioned catalog, diff, write.

The merge is conservative: a row is only changed with what an API actually returned; anything
not returned (region down, API throttled, no credentials, no SKU) keeps the snapshot's value and
says so in the row's ``price_sources`` (``"kept:<old version>"``) and ``notes``. Rows are added
only in regions the user asked for that the old catalog lacks, and removed only when the
region's APIs all answered and the capacity API says the type is not offered there.

A refreshed file carries ``generated_by`` and a ``checksum`` (sha256 of the canonical JSON of
its data sections), so a later refresh can tell a file it wrote from one edited by hand.
"""
from __future__ import annotations

import copy
import datetime as dt
import hashlib
import importlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from gpulease import inputs
from gpulease.clouds import registry
from gpulease.catalog import FORMAT_V2, Catalog, parse_catalog
from gpulease.catalog.fetchers import API_SOURCES, PRICE_COLUMNS, CloudFetch, Failure, Progress
from gpulease.errors import CatalogError, Finding, InputError, did_you_mean
from gpulease.purchase import COMMITMENT, ON_DEMAND, SPOT
from gpulease.text import plural

GENERATOR = "gpulease catalog refresh"
#: Sections covered by the checksum (everything that carries prices or specs).
CHECKSUM_SECTIONS = ("offerings", "storage", "egress", "infra", "spot_interruptions")
#: Spec columns an API may update on an existing row. gpu / gpu_memory_gb / rdma /
#: network_gbps stay as the catalog states them: they are the planner's vocabulary and the
#: marketed figures (describe_instance_types reports an L4 as 22,888 MiB, not "24 GB").
REFRESHED_SPECS = ("vcpus", "memory_gb", "network_cards", "efa_interfaces", "local_nvme_gb")
_VERSION_RE = re.compile(r"^\d{4}\.\d{2}\.\d{2}(\.\d+)?$")


# ---- where files go ----------------------------------------------------------------------------
def default_out_dir() -> Path:
    """User catalog dir: $GPULEASE_CATALOG_DIR, else $XDG_DATA_HOME/gpulease/catalogs."""
    env = os.environ.get("GPULEASE_CATALOG_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpulease" / "catalogs"


def next_version(directory: Path, today: dt.date, avoid: tuple[str, ...] = ()) -> str:
    """``YYYY.MM.DD``, or ``YYYY.MM.DD.N`` when that file exists in ``directory`` (or the
    version is in ``avoid``, e.g. the catalog being refreshed)."""
    stem = today.strftime("%Y.%m.%d")
    taken = lambda v: v in avoid or (directory / f"{v}.json").exists()  # noqa: E731
    if not taken(stem):
        return stem
    n = 1
    while taken(f"{stem}.{n}"):
        n += 1
    return f"{stem}.{n}"


def versions_in(directory: Path, *, skip: Optional[Path] = None) -> set[str]:
    """Versions carried by the catalog files in ``directory`` (their ``version`` field, and
    their file stems), so a new file never reuses one."""
    out: set[str] = set()
    if not directory.is_dir():
        return out
    for p in directory.glob("*.json"):
        if skip is not None and p.resolve() == skip.resolve():
            continue
        out.add(p.stem)
        try:
            v = inputs.load_json(p).get("version")
        except (InputError, AttributeError):
            continue
        if isinstance(v, str):
            out.add(v)
    return out


def taken_versions(directory: Path, avoid: tuple[str, ...] = (),
                   skip: Optional[Path] = None) -> set[str]:
    """Every version a new catalog must not carry: the shipped ones, ``avoid`` (the base), and
    those of the files already in ``directory``."""
    from gpulease.catalog import available_versions
    return set(avoid) | set(available_versions()) | versions_in(directory, skip=skip)


def resolve_out(out: Optional[str], today: dt.date,
                avoid: tuple[str, ...] = ()) -> tuple[Path, str]:
    """(file to write, catalog version). ``out`` may be a directory or a file path.

    Versions are unique: a file named like a version (``2026.12.09.json``) carries that version
    unless another catalog (shipped, the base, or a file beside it) already does; any other file
    name gets today's date, with ``.N`` appended until no catalog carries it.
    """
    if out and (out.endswith(".json") and not Path(out).is_dir()):
        p = Path(out)
        taken = taken_versions(p.parent, avoid, skip=p)
        if _VERSION_RE.match(p.stem):
            if p.stem in taken:
                raise InputError([Finding("--out", f"version {p.stem} (from the file name) is "
                                          "already carried by another catalog (shipped, the base, "
                                          f"or a file in {p.parent}); name the file after a new "
                                          "version, or pass a directory to get one")])
            return p, p.stem
        stem = today.strftime("%Y.%m.%d")
        version, n = stem, 0
        while version in taken:
            n += 1
            version = f"{stem}.{n}"
        return p, version
    directory = Path(out) if out else default_out_dir()
    version = next_version(directory, today, tuple(taken_versions(directory, avoid)))
    return directory / f"{version}.json", version


# ---- checksum / hand-edit detection ------------------------------------------------------------
def checksum(doc: dict) -> str:
    data = {k: doc.get(k) for k in CHECKSUM_SECTIONS}
    canon = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def file_state(path: Path) -> str:
    """absent | generated (untouched refresh output) | hand-edited | hand-written | unreadable."""
    if not path.exists():
        return "absent"
    try:
        doc = inputs.load_json(path)
    except InputError:
        return "unreadable"
    if not isinstance(doc, dict) or not doc.get("generated_by"):
        return "hand-written"
    return "generated" if doc.get("checksum") == checksum(doc) else "hand-edited"


def check_writable(path: Path, *, force: bool) -> None:
    """Refuse (exit 2, nothing written) to overwrite an existing file unless --force."""
    state = file_state(path)
    if state == "absent" or force:
        return
    why = {
        "generated": "already exists (an earlier refresh wrote it)",
        "hand-edited": "was edited by hand after `gpulease catalog refresh` wrote it (its "
                       "checksum no longer matches)",
        "hand-written": "exists and was not written by `gpulease catalog refresh` (no "
                        "generated_by), so it may hold hand-entered prices",
        "unreadable": "exists and is not a readable catalog",
    }[state]
    raise InputError([Finding("--out", f"{path} {why}; pass --force to overwrite it, or "
                              "choose another --out (a directory gets a new versioned name)")])


def write_catalog(doc: dict, path: Path, *, force: bool = False) -> None:
    check_writable(path, force=force)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---- scope -------------------------------------------------------------------------------------
def select_regions(base: Catalog, clouds: list[str], regions: list[str]) -> dict[str, list[str]]:
    """cloud -> regions to refresh. Default: the catalog's offering regions of each cloud."""
    have = {c: sorted({o.region for o in base.offerings if o.cloud == c}) for c in clouds}
    if not regions:
        return have
    chosen: dict[str, list[str]] = {c: [] for c in clouds}
    bad: list[Finding] = []
    known = sorted({r for rs in have.values() for r in rs})
    for r in regions:
        owners = [c for c in clouds
                  if r in have[c] or re.match(registry.get(c).region_pattern, r)]
        if not owners:
            bad.append(Finding("--region", f'"{r}" is not a region of '
                               f"{' or '.join(clouds)}{did_you_mean(r, known)}; catalog "
                               f"regions: {', '.join(known)}"))
        for c in owners:
            if r not in chosen[c]:
                chosen[c].append(r)
    if bad:
        raise InputError(bad)
    return {c: rs for c, rs in chosen.items() if rs}


# ---- merge -------------------------------------------------------------------------------------
@dataclass
class RefreshReport:
    refreshed: list = field(default_factory=list)   # keys updated from an API
    kept: dict = field(default_factory=dict)        # key -> reason (old row kept, marked)
    added: list = field(default_factory=list)
    removed: list = field(default_factory=list)
    failures: list = field(default_factory=list)    # [Failure]
    calls: int = 0

    @property
    def anything_refreshed(self) -> bool:
        return bool(self.refreshed or self.added or self.removed)


def _kept_label(old_ps: dict, col: str, base_version: str) -> str:
    prev = (old_ps or {}).get(col)
    return prev if isinstance(prev, str) and prev.startswith("kept:") else f"kept:{base_version}"


def merge(base: Catalog, fetches: dict[str, CloudFetch], scope: dict[str, list[str]], *,
          version: str, now: dt.datetime) -> tuple[dict, RefreshReport]:
    """The new catalog document and what happened to each row."""
    raw = copy.deepcopy(base.raw)
    today = now.date().isoformat()
    report = RefreshReport()
    for f in fetches.values():
        report.failures.extend(f.failures)
        report.calls += f.calls
    fail_by_region: dict = {}
    for fl in report.failures:
        fail_by_region.setdefault((fl.cloud, fl.region), []).append(fl)

    def refreshed_row(old: dict, got, cloud: str) -> dict:
        row = dict(old)
        ps: dict = {}
        kept = []
        for col in PRICE_COLUMNS:
            if col in got.prices:
                row[col] = got.prices[col]
                ps[col] = got.price_sources[col]
            elif old.get(col) is not None:
                ps[col] = _kept_label(old.get("price_sources"), col, base.version)
                kept.append(col)
            else:
                ps[col] = None
        for k in REFRESHED_SPECS:
            if k in got.specs and got.specs[k] is not None:
                row[k] = got.specs[k]
        if got.zones:
            row["zones"] = list(got.zones)
        if got.zone_spot and "spot_usd" in got.prices:
            row["zone_spot_usd"] = {z: got.zone_spot[z] for z in row.get("zones") or []
                                    if z in got.zone_spot}
            row["spot_usd"] = min(row["zone_spot_usd"].values()) if row["zone_spot_usd"] \
                else got.prices["spot_usd"]
            if not row["zone_spot_usd"]:
                row.pop("zone_spot_usd")
        elif "zone_spot_usd" in row and (got.zones or "spot_usd" in got.prices):
            # zones or the spot price moved without per-zone prices: old zone prices are stale
            row.pop("zone_spot_usd")
        row["price_sources"] = ps
        # parts and cross-checks of a price the API replaced describe the old figure: drop them;
        # a price for a way the offering is not sold (purchase_options) is not kept either
        fresh = {c.removesuffix("_usd") for c in PRICE_COLUMNS if c in got.prices}
        # likewise every figure derived from an old price: its parts, and the GPU SKU floor
        # (gpu_sku_usd, the accelerator's own SKUs): after a price cut the old floor would sit
        # above the new price and fail the load-time invariant (issue 35)
        for derived in ("price_components", "gpu_sku_usd"):
            if isinstance(row.get(derived), dict):
                row[derived] = {k: v for k, v in row[derived].items() if k not in fresh}
                if not row[derived]:
                    row.pop(derived)
        if isinstance(row.get("cross_checks"), list):
            row["cross_checks"] = [c for c in row["cross_checks"]
                                   if not (isinstance(c, dict) and c.get("column") in fresh)]
            if not row["cross_checks"]:
                row.pop("cross_checks")
        unsold = []
        opts = row.get("purchase_options")
        if isinstance(opts, list):
            for col, opt in (("on_demand_usd", ON_DEMAND), ("spot_usd", SPOT),
                             ("commit_1y_usd", COMMITMENT), ("commit_3y_usd", COMMITMENT)):
                if row.get(col) is not None and opt not in opts:
                    row[col], ps[col] = None, None
                    unsold.append(col)
            if "spot_usd" in unsold:
                row.pop("zone_spot_usd", None)
        used = {v for v in ps.values() if v and not v.startswith("kept:")}
        if got.specs.get("spec_source") or got.zones:
            used.add(got.specs.get("spec_source") or fetches[cloud].apis[-1])
        old_keys = [k for k in str(old.get("source") or "").split(",") if k] if kept else []
        row["source"] = ",".join(sorted(used) + [k for k in old_keys if k not in used])
        used_sources.update(used)
        row["as_of"] = today
        notes = list(got.notes)
        if kept:
            notes.insert(0, f"kept from catalog {base.version}: {', '.join(kept)}")
        if unsold:
            notes.append(f"{', '.join(unsold)}: not sold that way (purchase_options), dropped")
        if notes:
            row["notes"] = "; ".join(notes)
        else:
            row.pop("notes", None)
        return row

    def kept_row(old: dict, reason: str) -> dict:
        row = dict(old)
        row["price_sources"] = {c: (_kept_label(old.get("price_sources"), c, base.version)
                                    if old.get(c) is not None else None) for c in PRICE_COLUMNS}
        row["notes"] = f"not refreshed ({reason}); prices kept from catalog {base.version}"
        return row

    offerings = []
    used_sources: set = set()
    seen: set = set()
    for old in raw.get("offerings") or []:
        cloud, region, itype = old["cloud"], old["region"], old["instance_type"]
        key = (cloud, region, itype)
        seen.add(key)
        if cloud not in fetches or region not in scope.get(cloud, ()):
            offerings.append(old)
            continue
        fetch = fetches[cloud]
        got = fetch.get(region, itype)
        failures = fail_by_region.get((cloud, region), [])
        if got is not None and got.prices:
            offerings.append(refreshed_row(old, got, cloud))
            report.refreshed.append(key)
            continue
        offered = fetch.offered.get(region)
        if (not failures and region in fetch.priced_regions and offered is not None
                and itype not in offered):
            report.removed.append(key)
            continue
        if failures:
            reason = "; ".join(f"{f.api} failed" for f in failures)
        elif got is not None and got.notes:
            reason = "; ".join(got.notes)
        else:
            reason = "the price API returned no price for it"
        offerings.append(kept_row(old, reason))
        report.kept[key] = reason

    # rows in regions the old catalog did not have
    templates = {}
    for o in raw.get("offerings") or []:
        templates.setdefault((o["cloud"], o["instance_type"]), o)
    for cloud, fetch in fetches.items():
        for (region, itype), got in sorted(fetch.rows.items()):
            key = (cloud, region, itype)
            if key in seen or not got.prices.get("on_demand_usd"):
                continue
            tmpl = templates.get((cloud, itype))
            if tmpl is None:
                continue
            row = {k: v for k, v in tmpl.items() if k not in ("notes", "zones")}
            row["region"] = region
            for col in PRICE_COLUMNS:
                row[col] = None
            row.pop("price_sources", None)
            new = refreshed_row(row, got, cloud)
            if raw.get("format") == FORMAT_V2 and not new.get("zones"):
                # format /2 rows need zones; without an EC2 / Compute answer there are none
                report.kept[key] = "not added: no zones known (the capacity API did not answer)"
                continue
            offerings.append(new)
            report.added.append(key)

    raw["offerings"] = offerings
    raw["version"] = version
    raw["as_of"] = today
    stamp = now.replace(microsecond=0).isoformat()
    sources = dict(raw.get("sources") or {})
    for key in sorted(used_sources):
        url, title = API_SOURCES[key]
        sources[key] = {"url": url, "title": title, "retrieved": stamp}
    sources["refresh"] = {
        "at": stamp, "base_version": base.version,
        "apis": sorted({a for f in fetches.values() for a in f.apis}),
        "regions": {c: list(rs) for c, rs in scope.items()},
        "refreshed_rows": len(report.refreshed), "kept_rows": len(report.kept),
        "added_rows": len(report.added), "removed_rows": len(report.removed),
        "failures": [str(f) for f in report.failures],
    }
    raw["sources"] = sources
    from gpulease import __version__
    raw["generated_by"] = {"tool": GENERATOR, "gpulease_version": __version__, "at": stamp,
                           "base_version": base.version}
    raw.pop("checksum", None)
    raw["checksum"] = checksum(raw)
    return raw, report


# ---- orchestration -----------------------------------------------------------------------------
@dataclass
class RefreshResult:
    doc: Optional[dict]
    catalog: Optional[Catalog]
    report: RefreshReport


def refresh(base: Catalog, *, scope: dict[str, list[str]], client_errors: Optional[dict] = None,
            version: str, now: Optional[dt.datetime] = None,
            progress: Progress = lambda _m: None, **clients: Any) -> RefreshResult:
    """Fetch every cloud in ``scope`` with the given clients and merge into a new document.

    ``clients``: cloud name -> its fetcher's clients (``aws=AwsClients(...)``); each cloud is
    fetched by its ``Cloud.fetcher_module``'s ``fetch``. ``client_errors``: cloud -> CloudError
    raised while creating its clients (e.g. no credentials); that cloud's regions are reported
    as failed and its rows kept, as are those of a cloud given no clients.
    """
    unknown = sorted(c for c in clients if not registry.is_cloud(c))
    if unknown:
        raise TypeError(f"refresh() got clients for unknown clouds {unknown} (known: "
                        f"{', '.join(registry.NAMES)})")
    now = now or dt.datetime.now(dt.timezone.utc)
    client_errors = client_errors or {}
    fetches: dict[str, CloudFetch] = {}
    for cloud, regions in scope.items():
        given = clients.get(cloud)
        if cloud in client_errors or given is None:
            err = client_errors.get(cloud, "no client")
            f = CloudFetch(cloud=cloud)
            f.failures = [Failure(cloud, r, "client", str(err)) for r in regions]
            progress(f"{cloud}: skipped ({err})")
            fetches[cloud] = f
        else:
            fetcher = importlib.import_module(registry.get(cloud).fetcher_module)
            fetches[cloud] = fetcher.fetch(given, base, regions, now=now, progress=progress)
    doc, report = merge(base, fetches, scope, version=version, now=now)
    if not report.anything_refreshed:
        return RefreshResult(doc=None, catalog=None, report=report)
    try:
        cat = parse_catalog(doc, source=f"<refreshed {version}>")
    except CatalogError as exc:  # a fetcher produced something the loader rejects: a bug
        raise AssertionError(f"refreshed catalog does not validate: {exc}") from None
    return RefreshResult(doc=doc, catalog=cat, report=report)


# ---- diff --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PriceMove:
    key: tuple
    column: str
    old: float
    new: float

    @property
    def pct(self) -> float:
        return (self.new - self.old) / self.old * 100.0


@dataclass(frozen=True)
class CatalogDiff:
    old_version: str
    new_version: str
    added: tuple
    removed: tuple
    moves: tuple          # every price change, biggest relative move first
    rows_changed: int


def diff_catalogs(old: Catalog, new: Catalog) -> CatalogDiff:
    o = {x.key: x for x in old.offerings}
    n = {x.key: x for x in new.offerings}
    moves = []
    changed = set()
    for key in o.keys() & n.keys():
        for col in PRICE_COLUMNS:
            a, b = getattr(o[key], col), getattr(n[key], col)
            # the catalog quotes 4 decimals; sub-cent-hundredth noise is not a move
            if a is not None and b is not None and round(a, 4) != round(b, 4):
                moves.append(PriceMove(key, col, a, b))
                changed.add(key)
            elif (a is None) != (b is None):
                changed.add(key)
    moves.sort(key=lambda m: (-abs(m.pct), m.key, m.column))
    return CatalogDiff(old.version, new.version, tuple(sorted(n.keys() - o.keys())),
                       tuple(sorted(o.keys() - n.keys())), tuple(moves), len(changed))


def render_diff(d: CatalogDiff, *, top: int = 10) -> str:
    lines = [f"catalog {d.old_version} -> {d.new_version}: {plural(len(d.added), 'row')} added, "
             f"{len(d.removed)} removed, {d.rows_changed} with price changes"]
    for k in d.added:
        lines.append(f"  + {'/'.join(k)}")
    for k in d.removed:
        lines.append(f"  - {'/'.join(k)}")
    if d.moves:
        lines.append(f"biggest price moves (of {len(d.moves)}):")
        for m in d.moves[:top]:
            lines.append(f"  {'/'.join(m.key):<45} {m.column:<14} {m.old:>10.4f} -> "
                         f"{m.new:>10.4f}  {m.pct:+6.1f}%")
    return "\n".join(lines)


__all__ = ["refresh", "merge", "RefreshResult", "RefreshReport", "diff_catalogs", "render_diff",
           "CatalogDiff", "PriceMove", "checksum", "file_state", "check_writable",
           "write_catalog", "resolve_out", "next_version", "default_out_dir", "select_regions",
           "GENERATOR"]
