"""Commitment coverage of price catalogs: per family, the offerings sold with a commitment
(`purchase_options` lists "commitment"), how many carry a 1-year and a 3-year price, and how
many carry neither (their notes say which sources were read: docs/catalog.md, "Commitments").

Usage: python bench/commitments.py [--catalog PATH | --catalog-version V ...] [--json]
(default: every shipped version that records purchase options, oldest first)
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Optional

from gpulease.catalog import available_versions, load_catalog
from gpulease.errors import GpuleaseError
from gpulease.model import Offering


def family(o: Offering) -> str:
    """AWS: the type's family (p5en); GCP: the machine type's series (a3-megagpu), N1 hosts by
    the GPU they carry (n1 + T4)."""
    if o.cloud == "aws":
        return o.instance_type.split(".")[0]
    if o.instance_type.startswith("n1-"):
        return f"n1 + {o.gpu}"
    return o.instance_type.rsplit("-", 1)[0]


def coverage(offerings) -> dict:
    """{"sold", "priced_1y", "priced_3y", "unpriced", "families": {(cloud, family): {...}}}."""
    fams: dict = {}
    total = Counter()
    for o in offerings:
        if "commitment" not in (o.purchase_options or ()):
            continue
        c = fams.setdefault(f"{o.cloud} {family(o)}", Counter())
        for counter in (c, total):
            counter["sold"] += 1
            counter["priced_1y"] += o.commit_1y_usd is not None
            counter["priced_3y"] += o.commit_3y_usd is not None
            counter["unpriced"] += o.commit_1y_usd is None and o.commit_3y_usd is None
    return {**{k: total[k] for k in ("sold", "priced_1y", "priced_3y", "unpriced")},
            "families": {k: dict(v) for k, v in sorted(fams.items())}}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--catalog", help="a catalog file")
    src.add_argument("--catalog-version", action="append", help="a shipped version (repeatable)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args(argv)
    try:
        cats = ([load_catalog(path=args.catalog)] if args.catalog else
                [load_catalog(version=v) for v in (args.catalog_version or available_versions())])
    except GpuleaseError as exc:
        print(f"bench/commitments.py: {exc}", file=sys.stderr)
        return 2
    cats = [c for c in cats if args.catalog or args.catalog_version
            or any(o.purchase_options_source for o in c.offerings)]
    out = {c.version: coverage(c.offerings) for c in cats}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for version, cov in out.items():
        print(f"catalog {version}: {cov['sold']} offerings sold with a commitment, "
              f"{cov['priced_1y']} with a 1-year price, {cov['priced_3y']} with a 3-year "
              f"price, {cov['unpriced']} with neither")
        print(f"  {'family':24} {'sold':>5} {'1y':>5} {'3y':>5} {'neither':>8}")
        for fam, c in cov["families"].items():
            if c["sold"] > min(c.get("priced_1y", 0), c.get("priced_3y", 0)):
                print(f"  {fam:24} {c['sold']:5d} {c.get('priced_1y', 0):5d} "
                      f"{c.get('priced_3y', 0):5d} {c['unpriced']:8d}")
        print("  (families where every offering has both prices are left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
