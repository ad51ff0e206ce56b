"""Policy benchmark: decision time and peak memory vs cluster count; reference portfolio vs naive;
demand profiles vs the all-or-nothing plan of the same peak; what the gang restriction costs.

Run: python bench/policy.py [--sizes 10,100,1000,10000] [--profiles 0.5] [--catalog PATH]
Uses the shipped catalog (every cloud and region in it enabled) and synthetic stacks built from
ClusterSpec with a fixed seed, so runs are comparable. ``--profiles`` is the share of synthetic
clusters that carry a 2-3 step demand profile (timed separately too).
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import random
import sys
import time
import tracemalloc

from infra.catalog import load_catalog
from infra.model import CloudSpec, ClusterSpec, DemandStep, StackSpec
from infra.policy import decide
from infra.policy.candidates import Context, candidates_for
from infra.policy.costmodel import CostInputs, Rates, blend_costs
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

#: reference demand profiles: (name, gpu, steps (gpus, hours/month), priority, checkpoint
#: minutes, distributed). Each is compared with the all-or-nothing cluster of the same peak
#: that runs the baseline's hours (what `gpus` + `hours_per_month` would have said).
PROFILES = (
    ("pretrain", "H100", ((32, 730), (64, 200)), 9, None, True),
    ("finetune", "A100-80GB", ((8, 730), (16, 250)), 7, 30, True),
    ("research", "H100", ((8, 400), (16, 120)), 4, 30, True),
    ("eval-batch", "L4", ((2, 730), (8, 150)), 3, 15, False),
    ("inference-tests", "T4", ((1, 730), (4, 200)), 6, None, False),
    ("nightly", "A100", ((8, 240), (16, 60)), 6, None, None),
)


def all_clouds(catalog) -> dict:
    return {cl: CloudSpec(cloud=cl, regions=tuple(catalog.regions(cl)),
                          project="bench" if cl == "gcp" else None)
            for cl in ("aws", "gcp") if catalog.regions(cl)}


def random_profile(rng: random.Random, gpus: int, hours: float) -> tuple[DemandStep, ...]:
    """2-3 steps ending at (gpus, fewer hours), starting below gpus at ``hours``."""
    k = rng.choice([2, 3]) if gpus >= 4 else 2
    sizes = sorted(rng.sample(range(1, gpus), k - 1)) + [gpus] if gpus > k - 1 else [gpus]
    hs = sorted(rng.sample([730, 500, 360, 200, 120, 40, 10], len(sizes)), reverse=True)
    hs[0] = max(hs[0], hours)
    return tuple(DemandStep(g, float(h)) for g, h in zip(sizes, hs))


def synthetic_stack(n: int, catalog, *, seed: int = 7, profiles: float = 0.0) -> StackSpec:
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
        if spec.gpus > 1 and rng.random() < profiles:
            steps = random_profile(rng, spec.gpus, spec.hours_per_month)
            if len(steps) > 1:
                spec = dataclasses.replace(spec, hours_per_month=steps[0].hours_per_month,
                                           demand=steps)
        # keep what a user could deploy (e.g. no multi-node distributed A100 without RDMA)
        if any(c.feasible for c in candidates_for(spec, ctx)):
            clusters.append(spec)
    return StackSpec(stack="bench", environment="bench", owner="bench", cost_center="bench",
                     budget_monthly_usd=1e12, clouds=clouds, storage=(),
                     clusters=tuple(clusters), policy=PolicyRules(), source="bench")


def measure(n: int, catalog, profiles: float = 0.0) -> tuple[float, float, float]:
    stack = synthetic_stack(n, catalog, profiles=profiles)
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


def profile_vs_all_or_nothing(catalog) -> list[tuple[str, float, float, str, str]]:
    """(name, profile plan $/month, all-or-nothing $/month, profile purchase, a-o-n purchase)."""
    out = []
    for i, (name, gpu, steps, prio, ckpt, dist) in enumerate(PROFILES):
        if gpu not in catalog.gpus:
            continue
        demand = tuple(DemandStep(g, float(h)) for g, h in steps)
        prof = ClusterSpec(name=name, gpu=gpu, gpus=demand[-1].gpus,
                           hours_per_month=demand[0].hours_per_month, priority=prio,
                           checkpoint_minutes=ckpt, distributed=dist, index=0, demand=demand)
        flat = dataclasses.replace(prof, demand=())
        got = []
        for spec in (prof, flat):
            env = decide(StackSpec(stack="p", environment="prod", owner="b", cost_center="b",
                                   budget_monthly_usd=1e12, clouds=all_clouds(catalog),
                                   storage=(), clusters=(spec,), policy=PolicyRules(),
                                   source="bench"), catalog)
            c = env.clusters[0]
            mix = c.purchase
            got.append((c.monthly_usd, f"{c.cloud}:{c.offering.instance_type} "
                                       f"R{mix.reserved}/OD{mix.on_demand}/S{mix.spot}"))
        out.append((name, got[0][0], got[1][0], got[0][1], got[1][1]))
    return out


def gang_restriction_gap(samples: int = 2000, seed: int = 11) -> tuple[int, int, float]:
    """On random small gangs (2-5 nodes, 1-3 steps, the spot band), how often and by how much
    the best per-node assignment beats the best one-model-per-step monotone blend the policy
    searches: (cases, cases where it is cheaper, largest relative gap)."""
    rng = random.Random(seed)
    models = ("reserved", "on_demand", "spot")
    worse, gap = 0, 0.0
    for _ in range(samples):
        n = rng.randint(2, 5)
        cuts = sorted(rng.sample(range(1, n), rng.randint(0, min(2, n - 1))))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [n])]
        hours = sorted(rng.sample([730, 500, 300, 150, 50], len(sizes)), reverse=True)
        node_h = [h for s_, h in zip(sizes, hours) for _ in range(s_)]
        step = [j for j, s_ in enumerate(sizes) for _ in range(s_)]
        od = 10.0
        k = CostInputs(rates=Rates(od * rng.uniform(0.35, 0.9), od, od * rng.uniform(0.1, 0.9)),
                       gang=True, tcp_gang=False,
                       interruptions_per_hour=rng.choice([0.0003, 0.05, 0.5]),
                       checkpoint_minutes=rng.choice([10, 30, 120]), restart_minutes=10,
                       communication_share=0.0)

        def cost(assign):
            return blend_costs(tuple((1, h, m) for h, m in zip(node_h, assign)), k)[0].monthly_usd
        free = min(cost(a) for a in itertools.product(models, repeat=n))
        carried = min(cost(a) for a in itertools.product(models, repeat=n)
                      if all(a[i] == a[j] for i in range(n) for j in range(n)
                             if step[i] == step[j])
                      and [models.index(x) for x in a] == sorted(models.index(x) for x in a))
        if free < carried - 1e-6:
            worse += 1
            gap = max(gap, (carried - free) / carried)
    return samples, worse, gap


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000,10000")
    ap.add_argument("--profiles", type=float, default=0.5,
                    help="share of synthetic clusters with a demand profile in the second run")
    ap.add_argument("--catalog", help="catalog file (default: the shipped one)")
    args = ap.parse_args(argv)
    catalog = load_catalog(args.catalog)
    print(f"catalog {catalog.version}: {len(catalog.offerings)} offerings, "
          f"{len(catalog.gpus)} GPU models, {len(catalog.regions())} regions")
    print(f"{'clusters':>9} {'seconds':>9} {'peak MiB':>9} {'us/cluster':>11}")
    for n in (int(x) for x in args.sizes.split(",")):
        secs, mib, _ = measure(n, catalog)
        print(f"{n:>9} {secs:>9.3f} {mib:>9.1f} {secs / n * 1e6:>11.0f}")
    print(f"\nwith {args.profiles:.0%} of the clusters on a 2-3 step demand profile:")
    print(f"{'clusters':>9} {'seconds':>9} {'peak MiB':>9} {'us/cluster':>11}")
    for n in (int(x) for x in args.sizes.split(",")):
        secs, mib, _ = measure(n, catalog, profiles=args.profiles)
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

    print("\ndemand profiles vs the all-or-nothing cluster of the same peak (baseline's hours)")
    tot_p = tot_f = 0.0
    for name, prof, flat, pmix, fmix in profile_vs_all_or_nothing(catalog):
        tot_p, tot_f = tot_p + prof, tot_f + flat
        print(f"  {name:<16} profile ${prof:>12,.2f} ({pmix})  all-or-nothing ${flat:>12,.2f} "
              f"({fmix})  {prof / flat:.1%}")
    print(f"  {'total':<16} profiles ${tot_p:,.2f}/month vs all-or-nothing ${tot_f:,.2f}/month: "
          f"{tot_p / tot_f:.1%}, saves ${tot_f - tot_p:,.2f}/month")
    cases, worse, gap = gang_restriction_gap()
    print(f"\ngang restriction (one model per step, reserved -> on-demand -> spot) vs every "
          f"per-node assignment: {worse} of {cases} random gangs cheaper per node, by at most "
          f"{gap:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
