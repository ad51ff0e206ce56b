"""`gpulease inventory`: read what the stack's accounts already paid for into a dated file."""
from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any, Mapping, Optional

from gpulease.cli import COMMANDS, ui
from gpulease.cli.common import add_output_args, add_stack_args, print_json, progress
from gpulease.errors import EXIT_FAILED, EXIT_OK, ConfigError, Finding

DESCRIPTION = """\
Read, with the clouds' SDKs, what the stack's accounts already paid for and write it to one dated
inventory file (format gpulease-inventory/1, docs/inventory.md), which offline plans read: the
file `gpulease:inventory` names, else the default cache ($GPULEASE_INVENTORY_CACHE, default
~/.cache/gpulease/inventory.json). The plan header shows the file's date.

AWS, per region of gpulease:clouds.aws: Reserved Instances, On-Demand Capacity Reservations and
Capacity Blocks (type, zone, count, instances in use, end date), Savings Plans (commitment $/h,
type, family, term) and their rates for the catalog's GPU types. GCP, all regions of
gpulease:clouds.gcp.project: committed use discounts (plan, type, accelerators), reservations
(count, in use) and future reservations (calendar mode included: window, count, status).
Active items, and items that ended in the last 90 days (marked by their state).

Credentials are checked before any call (exit 2 with what to set). The file is written only when
every read succeeded: a partial inventory would make the policy buy what is already owned."""

EPILOG = """\
examples:
  gpulease inventory --stack prod                  read the accounts, write the cache
  gpulease inventory --stack prod --out inv.json   write inv.json (then gpulease:inventory: inv.json)
  gpulease inventory --stack prod --json           the summary as one JSON document (the
                                                   file is written either way)

emulators: AWS_ENDPOINT_URL=http://127.0.0.1:5000 (AWS_ENDPOINT_URL_SAVINGSPLANS for Savings
           Plans alone); GPULEASE_GCP_ENDPOINT=http://127.0.0.1:8085 (Compute REST, no auth)
permissions: ec2:DescribeReservedInstances, ec2:DescribeCapacityReservations,
             savingsplans:DescribeSavingsPlans, savingsplans:DescribeSavingsPlanRates;
             compute.commitments.list, compute.reservations.list,
             compute.futureReservations.list (docs/inventory.md, "Permissions")
exit codes: 0 written · 1 a cloud call failed (refused, throttled past the retries,
            unreachable region; nothing written, the message names the call) · 2 bad
            arguments or stack, or no credentials for a cloud of the stack (the message says
            what to set; nothing called, nothing written)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inventory", help=COMMANDS["inventory"], description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stack_args(p)
    p.add_argument("--out", dest="inventory_out", metavar="FILE",
                   help="write the inventory here (default: the cache, "
                        "$GPULEASE_INVENTORY_CACHE or ~/.cache/gpulease/inventory.json)")
    add_output_args(p, out=False)   # --out is the inventory file this command writes
    p.set_defaults(func=run)


def _target(args: argparse.Namespace) -> Path:
    from gpulease.inventory.model import cache_path

    if not args.inventory_out:
        return cache_path()
    target = Path(args.inventory_out)
    if target.is_dir():
        raise ConfigError([Finding("--out", f"{target} is a directory: give a file name, e.g. "
                                   f"--out {target / 'inventory.json'}")])
    if target.parent.exists() and not target.parent.is_dir():
        raise ConfigError([Finding("--out", f"{target.parent} is not a directory; choose "
                                   "another path")])
    return target


def readers(spec) -> list[tuple[Any, Any, Any]]:
    """(cloud, its spec, its inventory module) for each cloud of the stack, in registry
    order."""
    import importlib

    from gpulease.clouds import registry

    return [(c, spec.clouds[c.name], importlib.import_module(c.inventory_module))
            for c in registry.CLOUDS if c.name in spec.clouds and c.inventory_module]


def run(args: argparse.Namespace, *, clients: Optional[Mapping[str, Any]] = None,
        now: Optional[dt.datetime] = None) -> int:
    """The command. Tests inject clients per cloud name (``clients``) and the time."""
    from gpulease import credentials
    from gpulease.cli.common import load_stack
    from gpulease.errors import CloudError
    from gpulease.inventory.model import FORMAT, Inventory, write

    loaded = load_stack(args)
    spec = loaded.spec
    target = _target(args)
    chosen = readers(spec)
    if not chosen:
        raise ConfigError([Finding("gpulease:clouds", "the stack names no cloud to read",
                                   source=loaded.source)])
    clients = dict(clients or {})
    # before any call: every cloud whose client is not injected needs credentials (exit 2)
    credentials.preflight([c.name for c, _, _ in chosen if c.name not in clients],
                          command="inventory",
                          needs={c.name: mod.NEEDS for c, _, mod in chosen})
    now = now or dt.datetime.now(dt.timezone.utc)
    holdings, sources, failures = [], [], []
    with ui.steps(f"reading what {spec.stack}'s accounts already paid for",
                  piped_lines=not args.json) as steps:
        for cloud, cspec, mod in chosen:
            types = [t for t in loaded.catalog.instance_types(cloud.name)]
            try:
                got, source = mod.collect(cloud.project(cspec), cspec.regions,
                                          progress=steps.step, instance_types=types,
                                          clients=clients.get(cloud.name), now=now)
            except CloudError as exc:
                failures.append(exc)
                continue
            holdings += got
            sources.append(source)
    if failures:
        for exc in failures:
            ui.error(str(exc))
        return ui.exit_reason(EXIT_FAILED, f"{ui.plural(len(failures), 'cloud')} could not be "
                              f"read; nothing written ({target} is unchanged)")
    from gpulease.clock import format_utc

    inv = Inventory(format=FORMAT, generated_at=format_utc(now), sources=sources,
                    holdings=sorted(holdings, key=lambda h: (h.cloud, h.kind, h.region,
                                                             h.zone or "", h.id)))
    try:
        written = write(inv, target)
    except OSError as exc:
        raise ConfigError([Finding("--out", f"cannot write {target}: {exc.strerror or exc}; "
                                   "choose another path")]) from None
    report = summary(inv, written, now)
    if args.json:
        print_json(report)
    else:
        _table(report)
    progress(f"wrote {written} ({ui.plural(len(inv.holdings), 'holding')}); " + _read_by(
        spec, written))
    return EXIT_OK


def _read_by(spec, written: Path) -> str:
    """Whether the stack's plans read what was written (gpulease:inventory, else the cache)."""
    from gpulease.inventory.model import cache_path

    named = getattr(spec, "inventory", None)
    if named:
        if Path(named).resolve() == written.resolve():
            return f"plans of {spec.stack} read it (gpulease:inventory)"
        return (f"plans of {spec.stack} read gpulease:inventory: {named}, not this file: "
                "point the key at it, or pass --out " + named)
    if written.resolve() == cache_path().resolve():
        return f"plans of {spec.stack} read it as the default cache"
    return (f"plans of {spec.stack} read the default cache, not this file: set "
            f"gpulease:inventory: {written} in {spec.source}")


def summary(inv, written: Path, now: dt.datetime) -> dict:
    """The report: where it was written, when, what each source read, and one row per
    holding (kind, where, type, count, end, utilisation, $/h)."""
    rows = []
    for h in inv.holdings:
        rows.append({"cloud": h.cloud, "kind": h.kind, "model": h.model, "id": h.id,
                     "region": h.region, "zone": h.zone,
                     "type": (h.instance_type or h.accelerator_type or h.instance_family
                              or h.detail.get("savings_plan_type")),
                     "instances": h.instances, "accelerators": h.accelerators,
                     "used_instances": h.used_instances, "utilisation": h.utilisation,
                     "start": h.start, "end": h.end, "state": h.state,
                     "active": h.active_at(now), "usd_per_hour": h.usd_per_hour,
                     "upfront_usd": h.upfront_usd, "rates": dict(h.rates)})
    return {"file": str(written), "generated_at": inv.generated_at,
            "sources": [s.model_dump(mode="json") for s in inv.sources],
            "holdings": rows, "count": len(rows),
            "active": sum(1 for r in rows if r["active"])}


def _table(report: dict) -> None:
    o = ui.out()
    o.line(("inventory", "bold"), f" read {report['generated_at']} · "
           f"{ui.plural(report['count'], 'holding')} ({report['active']} active) · "
           + " · ".join(f"{s['cloud']} {s['scope'] or '?'}" for s in report["sources"]))
    if not report["holdings"]:
        o.print("nothing held: no Reserved Instances, Savings Plans, capacity reservations, "
                "commitments or future reservations in the stack's accounts")
    else:
        o.print(o.table(
            [ui.Col("kind"), ui.Col("id", style="cyan"), ui.Col("region/zone"),
             ui.Col("type"), ui.Col("count", right=True), ui.Col("end"),
             ui.Col("state"), ui.Col("in use", right=True),
             ui.Col("$/h", right=True, style="bold")],
            [[r["kind"], r["id"], r["zone"] or r["region"] or "any region",
              r["type"] or "-", _count(r), (r["end"] or "open-ended")[:10], r["state"] or "-",
              f"{r['utilisation'] * 100:.0f}%" if r["utilisation"] is not None else "-",
              ui.money(r["usd_per_hour"]) if r["usd_per_hour"] is not None else "-"]
             for r in report["holdings"]]))
    o.print(f"written: {report['file']}")


def _count(r: dict) -> str:
    if r["instances"]:
        return str(r["instances"])
    if r["accelerators"]:
        return f"{r['accelerators']} GPUs"
    return "-"
