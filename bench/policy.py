"""Policy benchmark: decision time and peak memory vs cluster count; reference portfolio vs naive.

Run: python bench/policy.py [--sizes 10,100,1000,10000] [--catalog PATH]
Uses the shipped catalog (every cloud and region in it enabled) and synthetic stacks built from
ClusterSpec with a fixed seed, so runs are comparable.
"""
from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc

from infra.catalog import load_catalog
from infra.model import CloudSpec, ClusterSpec, StackSpec
from infra.policy import decide
from infra.policy.candidates import Context, candidates_for
from infra.policy.rules import PolicyRules

#: the reference portfolio: mixed priorities, sizes and interruptibility (name, gpu, gpus,
#: hours/month, priority, checkpoint minutes, distributed).
PORTFOLIO = (
    ("pretrain", "H100", 64, 730, 9, None, True),
    ("finetune", "A100-80GB", 16, 360, 7, 30, True),
    ("research", "H100", 16, 200, 4, 30, True),
    ("eval-batch", "L4", 8, 300, 3, 15, False),
    ("inference-tests", "T4", 4, 500, 2, 10, False),
    ("nightly", "A100", 8, 120, 6, None, None),
    ("vision", "L40S", 4, 400, 5, 60, None),
    ("dev-box", "L4", 1, 160, 3, 30, None),
)
POPULAR_REGION = "us-east-1"


def all_clouds(catalog) -> dict:
    return {cl: CloudSpec(cloud=cl, regions=tuple(catalog.regions(cl)),
                          project="bench" if cl == "gcp" else None)
            for cl in ("aws", "gcp") if catalog.regions(cl)}


def synthetic_stack(n: int, catalog, *, seed: int = 7) -> StackSpec:
    rng = random.Random(seed)
    gpus = catalog.gpus
    # priority > 8 needs a commitment price (guaranteed capacity); draw those GPUs from the
    # models the catalog prices a 1-year commitment for.
    committed = sorted({o.gpu for o in catalog.offerings if o.commit_1y_usd is not None})
    clouds = all_clouds(catalog)
    probe = StackSpec(stack="bench", environment="bench", owner="bench", cost_center="bench",
                      budget_monthly_usd=1e12, clouds=clouds, storage=(), clusters=(),
                      policy=PolicyRules(), source="bench")
    ctx = Context.build(probe, catalog, PolicyRules())
    clusters = []
    while len(clusters) < n:
        priority = rng.randint(1, 10)
        spec = ClusterSpec(
            name=f"c{len(clusters)}", gpu=rng.choice(committed if priority > 8 else gpus),
            gpus=rng.choice([1, 2, 4, 8, 16, 32]),
            hours_per_month=rng.choice([40, 120, 200, 360, 500, 730]) + rng.random(),
            priority=priority, checkpoint_minutes=rng.choice([None, 15, 30, 60]),
            distributed=rng.choice([None, False]), index=len(clusters))
        # keep what a user could deploy (e.g. no multi-node distributed A100 without RDMA)
        if any(c.feasible for c in candidates_for(spec, ctx)):
            clusters.append(spec)
    return StackSpec(stack="bench", environment="bench", owner="bench", cost_center="bench",
                     budget_monthly_usd=1e12, clouds=clouds, storage=(),
                     clusters=tuple(clusters), policy=PolicyRules(), source="bench")


def measure(n: int, catalog) -> tuple[float, float, float]:
    stack = synthetic_stack(n, catalog)
    gc.collect()
    t0 = time.perf_counter()
    env = decide(stack, catalog)
    elapsed = time.perf_counter() - t0
    gc.collect()
    tracemalloc.start()
    decide(stack, catalog)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return elapsed, peak / 2**20, env.monthly_usd


def portfolio_stack(catalog) -> StackSpec:
    clusters = tuple(ClusterSpec(name=n, gpu=g, gpus=k, hours_per_month=h, priority=p,
                                 checkpoint_minutes=c, distributed=d, index=i)
                     for i, (n, g, k, h, p, c, d) in enumerate(PORTFOLIO) if g in catalog.gpus)
    return StackSpec(stack="portfolio", environment="prod", owner="bench", cost_center="bench",
                     budget_monthly_usd=1e12, clouds=all_clouds(catalog), storage=(),
                     clusters=clusters, policy=PolicyRules(), source="bench")


def naive_cost(spec: ClusterSpec, ctx: Context) -> tuple[float, str]:
    """Everything on-demand in one popular region, keeping the hard rules (node shape, RDMA).

    The cheapest on-demand shape of the GPU in us-east-1, or in the GPU's own cheapest region
    when us-east-1 does not sell it.
    """
    shapes = [c for c in candidates_for(spec, ctx) if c.offering.on_demand_usd is not None
              and (c.rejected is None or c.rejected.startswith(("no price", "quota")))]
    local = [c for c in shapes if c.offering.region == POPULAR_REGION] or shapes
    best = min(local, key=lambda c: c.nodes * c.offering.on_demand_usd)
    return (best.nodes * best.offering.on_demand_usd * spec.hours_per_month,
            f"{best.offering.region} {best.offering.instance_type}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000,10000")
    ap.add_argument("--catalog", help="catalog file (default: the shipped one)")
    args = ap.parse_args(argv)
    catalog = load_catalog(args.catalog)
    print(f"catalog {catalog.version}: {len(catalog.offerings)} offerings, "
          f"{len(catalog.gpus)} GPU models, {len(catalog.regions())} regions")
    print(f"{'clusters':>9} {'seconds':>9} {'peak MiB':>9} {'us/cluster':>11}")
    for n in (int(x) for x in args.sizes.split(",")):
        secs, mib, _ = measure(n, catalog)
        print(f"{n:>9} {secs:>9.3f} {mib:>9.1f} {secs / n * 1e6:>11.0f}")
    pstack = portfolio_stack(catalog)
    env = decide(pstack, catalog)
    ctx = Context.build(pstack, catalog, pstack.policy)
    print("\nreference portfolio: policy vs naive (all on-demand in "
          f"{POPULAR_REGION} or the GPU's cheapest on-demand region)")
    tot_p = tot_n = 0.0
    for c in env.clusters:
        naive, where = naive_cost(c.spec, ctx)
        tot_p += c.monthly_usd
        tot_n += naive
        print(f"  {c.name:<16} {c.cloud}:{c.region:<14} {c.offering.instance_type:<18} "
              f"R{c.purchase.reserved}/OD{c.purchase.on_demand}/S{c.purchase.spot:<3} "
              f"{c.template:<18} ${c.monthly_usd:>12,.2f}   naive ${naive:>12,.2f} ({where})")
    print(f"  {'total':<16} policy ${tot_p:,.2f}/month vs naive ${tot_n:,.2f}/month: "
          f"{tot_p / tot_n:.1%} of naive, saves ${tot_n - tot_p:,.2f}/month")
    return 0


if __name__ == "__main__":
    sys.exit(main())
