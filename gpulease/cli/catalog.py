"""`gpulease catalog`: list offerings and prices, show shipped versions, refresh from cloud APIs."""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from typing import Any, Optional

from gpulease.clouds import registry
from gpulease.cli import COMMANDS, ui
from gpulease.cli.common import (add_catalog_args, add_output_args, check_cloud_clients,
                                 cloud_cli, cloud_needs, print_json)
from gpulease.errors import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, CloudError, Finding, InputError,
                             did_you_mean)
from gpulease.purchase import ON_DEMAND, SPOT

DESCRIPTION = """\
Show the GPU price catalog the planner uses (hourly USD per node: on-demand, spot, 1-year and
3-year commitment), list the shipped catalog versions, or refresh the catalog from the clouds'
pricing APIs into a new versioned file, or import SkyPilot's catalog. Prices are USD per
node-hour; instance types and regions are listed in natural order (g4dn.2xlarge before
g4dn.12xlarge)."""

EPILOG = """\
examples:
  gpulease catalog list --gpu H100
  gpulease catalog list --cloud gcp --region us-central1 --json
  gpulease catalog versions
  gpulease catalog refresh --cloud aws --region us-east-1 --region us-west-2
  gpulease catalog refresh --out ./catalogs/          # new versioned file in ./catalogs/
  gpulease catalog import skypilot tests/fixtures/skypilot/good --out /tmp/catalogs/
  gpulease catalog quotes --source offline --gpu H100
  gpulease plan --stack dev --catalog gpulease/catalog/data/2026.12.03.json

`refresh` calls the clouds' pricing APIs (credentials or local emulators needed); the
others run offline.

exit codes: 0 ok · 1 nothing could be refreshed · 2 bad arguments (did-you-mean
            suggestions for --gpu/--cloud/--region) or refusing to overwrite a file"""

REFRESH_EPILOG = """\
Credentials: AWS from the usual boto3 chain (AWS_PROFILE, env, SSO; needs pricing:GetProducts
and ec2:Describe*); GCP from Application Default Credentials (Billing Catalog needs no project;
--gcp-project also reads machine/accelerator types). AWS_ENDPOINT_URL and
GPULEASE_GCP_ENDPOINT=http://host:port point the clients at local fakes.

exit codes: 0 written (possibly with regions kept from the old catalog, listed on stderr) ·
            1 nothing could be refreshed (no file written) · 2 bad arguments / refusing to
            overwrite an existing or hand-edited file without --force / no credentials for a
            cloud to refresh (the message says what to set; nothing called)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("catalog", help=COMMANDS["catalog"],
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    csub = p.add_subparsers(dest="catalog_command", metavar="ACTION")

    lp = csub.add_parser("list", help="offerings and hourly prices per node",
                         description="GPU offerings of the catalog with their hourly USD price "
                         "per node (on-demand, spot, 1-year and 3-year commitment) and the "
                         "on-demand price per GPU-hour, sorted by cloud, region and instance "
                         "type in natural order (--sort price: by the on-demand node price; "
                         "--sort gpu-price: by the on-demand price per GPU-hour; offerings "
                         "without an on-demand price last).",
                         epilog="examples:\n  gpulease catalog list --gpu H100\n"
                                "  gpulease catalog list --gpu A100-80GB --sort gpu-price\n"
                                "  gpulease catalog list --cloud gcp --region us-central1 --json"
                                "\n\nexit codes: 0 ok · 2 unknown --gpu/--cloud/--region "
                                "(with a did-you-mean)",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    lp.add_argument("--gpu", help="only this GPU model (e.g. H100, A100-80GB, L4)")
    lp.add_argument("--cloud", help="only this cloud (aws | gcp)")
    lp.add_argument("--region", help="only this region")
    lp.add_argument("--sort", choices=SORTS, default="natural",
                    help="natural (cloud, region, instance; the default), price (on-demand $ "
                         "per node-hour) or gpu-price (on-demand $ per GPU-hour), cheapest first")
    add_catalog_args(lp)
    add_output_args(lp)
    lp.set_defaults(func=run_list)

    vp = csub.add_parser("versions", help="shipped catalog versions, as-of dates, the default",
                         epilog="exit codes: 0 ok",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_args(vp)
    vp.set_defaults(func=run_versions)

    rp = csub.add_parser("refresh", help="fetch current prices into a new catalog file",
                         epilog=REFRESH_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    rp.add_argument("--cloud", choices=registry.NAMES, help="refresh one cloud only")
    rp.add_argument("--region", action="append", default=[], metavar="R",
                    help="refresh this region (repeatable); default: the catalog's regions")
    rp.add_argument("--out", metavar="PATH",
                    help="file or directory to write (default: $GPULEASE_CATALOG_DIR or "
                         "~/.local/share/gpulease/catalogs/)")
    rp.add_argument("--force", action="store_true",
                    help="overwrite an existing or hand-edited --out file")
    rp.add_argument("--from", dest="from_path", metavar="PATH",
                    help="catalog to start from (default: the current default catalog)")
    rp.add_argument("--gcp-project", metavar="ID",
                    help="GCP project for machine/accelerator types (default: "
                         "$GOOGLE_CLOUD_PROJECT; without it, specs come from the old catalog)")
    add_output_args(rp, out=False)   # --out is the catalog file this command writes
    rp.set_defaults(func=run_refresh)

    ip = csub.add_parser("import", help="convert another tool's catalog into a gpulease catalog",
                         description="Convert SkyPilot's v8 catalog CSVs (DIR/aws/vms.csv, "
                         "DIR/gcp/vms.csv) into a versioned, checksummed gpulease catalog. "
                         "Specs, commitments, storage and egress SkyPilot does not carry come "
                         "from --base; what neither has stays null with a note.",
                         epilog="exit codes: 0 written · 2 malformed CSV, bad arguments, or "
                                "refusing to overwrite an existing file without --force",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    ip.add_argument("tool", choices=("skypilot",), help="whose catalog to import")
    ip.add_argument("dir", nargs="?", default=None, metavar="DIR",
                    help="catalog directory (default: ~/.sky/catalogs/v8)")
    ip.add_argument("--base", metavar="PATH",
                    help="catalog to fill specs/commitments/storage/egress from (default: the "
                         "default catalog)")
    ip.add_argument("--out", metavar="PATH",
                    help="file or directory to write (default: $GPULEASE_CATALOG_DIR or "
                         "~/.local/share/gpulease/catalogs/)")
    ip.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    add_output_args(ip, out=False)   # --out is the catalog file this command writes
    ip.set_defaults(func=run_import)
    from gpulease.cli import quotes

    quotes.register(csub)

    def no_action(_args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return ui.exit_reason(EXIT_BAD_INPUT, "say which action: gpulease catalog "
                              + "|".join(csub.choices) + " (see --help above)")
    p.set_defaults(func=no_action)


# ---- list --------------------------------------------------------------------------------------
def _fmt(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.3f}"


def _check_choice(flag: str, value: Optional[str], choices: list[str], what: str,
                  version: str) -> None:
    if value is not None and value not in choices:
        raise InputError([Finding(flag, f'unknown {what} "{value}"{did_you_mean(value, choices)}; '
                                  f"catalog {version} has: {', '.join(choices)}")])


#: `catalog list --sort`
SORTS = ("natural", "price", "gpu-price")


def list_rows(args: argparse.Namespace) -> tuple[Any, list[dict]]:
    from gpulease.catalog import load_catalog
    from gpulease.model import CLOUDS

    cat = load_catalog(args.catalog, args.catalog_version)
    _check_choice("--cloud", args.cloud, list(CLOUDS), "cloud", cat.version)
    _check_choice("--gpu", args.gpu, ui.natural_sorted(cat.gpus), "GPU", cat.version)
    _check_choice("--region", args.region, ui.natural_sorted(cat.regions(args.cloud)), "region",
                  cat.version)
    rows = cat.rows(gpu=args.gpu, cloud=args.cloud)
    if args.region:
        rows = [r for r in rows if r["region"] == args.region]
    for r in rows:
        od, gpus = r.get("on_demand_usd"), r.get("gpus_per_node") or 0
        r["on_demand_usd_per_gpu"] = round(od / gpus, 4) if od is not None and gpus else None
    rows = ui.natural_sorted(rows, key=lambda r: (r["cloud"], r["region"], r["instance_type"]))
    key = {"price": "on_demand_usd", "gpu-price": "on_demand_usd_per_gpu"}.get(
        getattr(args, "sort", "natural"))
    if key:   # stable: equal prices keep the natural order
        rows.sort(key=lambda r: (r[key] is None, r[key] or 0.0))
    return cat, rows


def run_list(args: argparse.Namespace) -> int:
    cat, rows = list_rows(args)
    if args.json:
        print_json(rows)
        return EXIT_OK
    o = ui.out()
    o.line(("catalog " + cat.version, "bold"), f" (prices as of {cat.as_of}) · USD per "
           f"node-hour · {ui.plural(len(rows), 'offering')}")
    cols = [ui.Col("cloud"), ui.Col("region"), ui.Col("instance", style="cyan"), ui.Col("gpu"),
            ui.Col("gpus", right=True), ui.Col("gpu_gb", right=True),
            ui.Col("vcpus", right=True), ui.Col("mem_gb", right=True),
            ui.Col("net_gbps", right=True), ui.Col("rdma"),
            ui.Col(ON_DEMAND, right=True, style="bold"), ui.Col("$/gpu-h", right=True),
            ui.Col(SPOT, right=True),
            ui.Col("commit_1y", right=True), ui.Col("commit_3y", right=True),
            ui.Col("zones", wrap=True)]
    o.print(o.table(cols, [
        [r["cloud"], r["region"], r["instance_type"], r["gpu"], str(r["gpus_per_node"]),
         f"{r['gpu_memory_gb']:g}", str(r["vcpus"]), f"{r['memory_gb']:g}",
         f"{r['network_gbps']:g}", r["rdma"], _fmt(r["on_demand_usd"]),
         _fmt(r["on_demand_usd_per_gpu"]), _fmt(r["spot_usd"]),
         _fmt(r["commit_1y_usd"]), _fmt(r["commit_3y_usd"]),
         ",".join(ui.natural_sorted(r["zones"])) or "-"] for r in rows]))
    return EXIT_OK


# ---- versions ----------------------------------------------------------------------------------
def run_versions(args: argparse.Namespace) -> int:
    import gpulease.catalog as catalog

    data_dir = catalog.DATA_DIR
    versions = ui.natural_sorted(catalog.available_versions(data_dir))
    env = os.environ.get("GPULEASE_CATALOG")
    default = None if env else (versions[-1] if versions else None)
    rows = []
    for v in versions:
        c = catalog.load_catalog(str(data_dir / f"{v}.json"))
        rows.append({"version": v, "as_of": c.as_of, "offerings": len(c.offerings),
                     "path": str(data_dir / f"{v}.json"), "default": v == default,
                     "format": c.format, "data_dates": c.data_dates,
                     "warnings": len(c.warnings)})
    if args.json:
        print_json({"versions": rows, "default_override": env})
        return EXIT_OK
    o = ui.out()
    if not rows:
        o.print(f"no shipped catalog in {data_dir}")
    else:
        o.print(o.table(
            [ui.Col("version", style="cyan"), ui.Col("as of"), ui.Col("offerings", right=True),
             ui.Col("default"), ui.Col("data as of", wrap=True)],
            [[r["version"], r["as_of"], str(r["offerings"]), ("default", "green")
              if r["default"] else "", "; ".join(f"{k} {d}" for k, d in r["data_dates"].items())
              or "-"] for r in rows]))
    if env:
        o.print(f"default overridden by GPULEASE_CATALOG={env}")
    return EXIT_OK


# ---- refresh -----------------------------------------------------------------------------------
def run_refresh(args: argparse.Namespace, *, now: Optional[dt.datetime] = None,
                **clients: Any) -> int:
    """`catalog refresh`. Tests pass clients per cloud (``aws=...``, ``gcp=...``); otherwise
    each cloud's are made by its ``refresh_clients`` (gpulease/cli/clouds/<cloud>.py)."""
    from gpulease.catalog import load_catalog
    from gpulease.catalog.refresh import (check_writable, diff_catalogs, refresh, render_diff,
                                          resolve_out, select_regions, write_catalog)

    check_cloud_clients(clients)
    now = now or dt.datetime.now(dt.timezone.utc)
    base = load_catalog(args.from_path)
    clouds = [args.cloud] if args.cloud else list(registry.NAMES)
    scope = select_regions(base, clouds, args.region)
    if not scope:
        raise InputError([Finding("--cloud", f"catalog {base.version} has no "
                                  f"{' or '.join(clouds)} offerings to refresh")])
    out_path, version = resolve_out(args.out, now.date(), avoid=(base.version,))
    check_writable(out_path, force=args.force)   # before any API call

    from gpulease import credentials

    make = [c for c in registry.NAMES if c in scope and clients.get(c) is None]
    credentials.preflight(make, command="catalog refresh", needs=cloud_needs("catalog refresh"),
                          only_flag="--cloud")
    errors: dict = {}
    for c in make:
        try:
            clients[c] = cloud_cli(c).refresh_clients(args)
        except CloudError as exc:
            errors[c] = exc
    with ui.steps(f"refreshing catalog {base.version}") as steps:
        steps.step("; ".join(f"{c} {', '.join(ui.natural_sorted(rs))}"
                             for c, rs in scope.items()))
        result = refresh(base, scope=scope, client_errors=errors, version=version, now=now,
                         progress=steps.step, **clients)
    rep = result.report
    for f in rep.failures:
        ui.warning(str(f))
    if result.doc is None:
        ui.error(f"nothing could be refreshed ({ui.plural(len(rep.failures), 'failure')} "
                 f"above); no file written, catalog {base.version} stays current")
        return EXIT_FAILED
    write_catalog(result.doc, out_path, force=args.force)
    diff = diff_catalogs(base, result.catalog)
    if getattr(args, "format", "table") == "json":
        print_json({
            "path": str(out_path), "version": version, "from_version": base.version,
            "refreshed": [list(k) for k in rep.refreshed], "added": [list(k) for k in rep.added],
            "removed": [list(k) for k in rep.removed],
            "kept": [{"row": list(k), "reason": why} for k, why in rep.kept.items()],
            "failures": [str(f) for f in rep.failures], "api_calls": rep.calls,
            "price_moves": [{"row": list(m.key), "column": m.column, "old_usd": m.old,
                             "new_usd": m.new} for m in diff.moves]})
        return EXIT_OK
    o = ui.out()
    o.print(render_diff(diff))
    o.print(f"refreshed {ui.plural(len(rep.refreshed), 'row')}, added {len(rep.added)}, "
            f"removed {len(rep.removed)}, kept {len(rep.kept)} from {base.version} (marked in "
            f"price_sources) using {ui.plural(rep.calls, 'API call')}")
    kept = ui.natural_sorted(rep.kept.items(), key=lambda kv: kv[0])
    for key, reason in kept[:10]:
        o.print(f"kept {'/'.join(key)}: {reason}", indent=2)
    if len(kept) > 10:
        o.print(f"... and {ui.plural(len(kept) - 10, 'more kept row')}", indent=2)
    o.line("wrote ", (str(out_path), "bold"), f" (version {version})")
    o.print(f"use it: gpulease plan --stack dev --catalog {out_path}")
    return EXIT_OK


# ---- import ------------------------------------------------------------------------------------
def run_import(args: argparse.Namespace, *, now: Optional[dt.datetime] = None) -> int:
    """`catalog import skypilot DIR`: write a new versioned catalog (exit 0) or exit 2."""
    from pathlib import Path

    from gpulease.catalog import load_catalog, parse_catalog
    from gpulease.catalog.importers.skypilot import import_skypilot
    from gpulease.catalog.refresh import check_writable, resolve_out, write_catalog

    now = now or dt.datetime.now(dt.timezone.utc)
    directory = Path(args.dir).expanduser() if args.dir else \
        Path.home() / ".sky" / "catalogs" / "v8"
    base = load_catalog(args.base)
    out_path, version = resolve_out(args.out, now.date(), avoid=(base.version,))
    check_writable(out_path, force=args.force)
    with ui.steps(f"importing {directory}", piped_lines=not args.json) as steps:
        steps.step("reading SkyPilot's CSVs")
        result = import_skypilot(directory, base, version=version, now=now)
        steps.step("checking the new catalog")
        cat = parse_catalog(result.doc, source=str(out_path))
        steps.step(f"writing {out_path}")
        write_catalog(result.doc, out_path, force=args.force)
    summary = {"path": str(out_path), "version": version, "offerings": result.rows,
               "regions": result.regions, "rows_filled_from_base": result.filled_from_base,
               "null_columns": result.nulls, "base_version": base.version,
               "invariants_rejected": result.rejected,
               "warnings": list(result.warnings) + [str(w) for w in cat.warnings]}
    if args.json:
        print_json(summary)
        return EXIT_OK
    for w in list(result.warnings) + [str(w) for w in cat.warnings]:
        ui.warning(str(w))
    o = ui.out()
    o.print(f"imported {ui.plural(result.rows, 'offering')} in "
            + ", ".join(f"{ui.plural(n, c + ' region')}" for c, n in sorted(result.regions.items()))
            + f" from {directory}; {ui.plural(result.filled_from_base, 'row')} took commitments "
            f"from catalog {base.version}; null: "
            + (", ".join(f"{c} {n}" for c, n in sorted(result.nulls.items())) or "none"))
    o.line("wrote ", (str(out_path), "bold"), f" (version {version})")
    o.print(f"use it: gpulease plan --stack dev --catalog {out_path}")
    return EXIT_OK
