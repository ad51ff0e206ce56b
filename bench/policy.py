"""Policy benchmark: decision time and peak memory vs cluster count, against the targets of
issue 23; a 3x larger catalog; reference portfolio vs naive; demand profiles vs the
all-or-nothing plan of the same peak; what the gang restriction costs.

Run: python bench/policy.py [--sizes 1000,10000] [--profiles 0.5] [--catalog PATH]
     [--old-up-to 1000] [--repeat 3]
Uses the shipped catalog (every cloud and region in it enabled) and synthetic stacks built from
ClusterSpec with a fixed seed, so runs are comparable. ``--profiles`` is the share of synthetic
clusters that carry a 2-3 step demand profile (timed separately too).

Every time is CPU time (user + system of this process; wall time beside it), the best of
``--repeat`` runs, with two references measured in the same run on the same clusters: the
one-pass pricing alone (``gpulease.policy.pricing.price_clusters``), and up to ``--old-up-to``
clusters the old path (a full ``candidates.evaluate`` of every (cluster, offering) pair, what
``decide`` did before issue 23). On a busy machine the ratios stay comparable. A decision's
explanation (rationale, alternatives, commitment terms) is built when first read: "explained s"
is ``decide`` plus reading every cluster's, what `gpulease explain` or a plan's views pay.
Targets (issue 23): 1,000 clusters <= 0.5 s, 10,000 <= 5 s and <= 200 MiB peak (tracemalloc),
the 3x catalog <= 1.5x the time of the shipped one.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import random
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchlib  # noqa: E402
from gpulease.catalog import load_catalog  # noqa: E402
from gpulease.model import CloudSpec, ClusterSpec, DemandStep, StackSpec  # noqa: E402
from gpulease.policy import decide  # noqa: E402
from gpulease.policy.candidates import Context, candidates_for  # noqa: E402
from gpulease.policy.costmodel import CostInputs, Rates, blend_costs  # noqa: E402
from gpulease.policy.pricing import price_clusters  # noqa: E402
from gpulease.policy.rules import PolicyRules  # noqa: E402

#: issue 23's targets
TARGET_1K_S, TARGET_10K_S, TARGET_10K_MIB, TARGET_3X = 0.5, 5.0, 200.0, 1.5

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

    def draw() -> ClusterSpec:
        priority = rng.randint(1, 10)
        spec = ClusterSpec(
            name="c", gpu=rng.choice(committed if priority > 8 else gpus),
            gpus=rng.choice([1, 2, 4, 8, 16, 32]),
            hours_per_month=rng.choice([40, 120, 200, 360, 500, 730]) + rng.random(),
            priority=priority, checkpoint_minutes=rng.choice([None, 15, 30, 60]),
            distributed=rng.choice([None, False]))
        if spec.gpus > 1 and rng.random() < profiles:
            steps = random_profile(rng, spec.gpus, spec.hours_per_month)
            if len(steps) > 1:
                spec = dataclasses.replace(spec, hours_per_month=steps[0].hours_per_month,
                                           demand=steps)
        return spec

    clusters: list[ClusterSpec] = []
    while len(clusters) < n:
        batch = [draw() for _ in range(max(64, n - len(clusters)))]
        # keep what a user could deploy (e.g. no multi-node distributed A100 without RDMA)
        for spec, q in zip(batch, price_clusters(batch, ctx)):
            if len(clusters) < n and q.feasible.any():
                clusters.append(dataclasses.replace(spec, name=f"c{len(clusters)}",
                                                    index=len(clusters)))
    return StackSpec(stack="bench", environment="bench", owner="bench", cost_center="bench",
                     budget_monthly_usd=1e12, clouds=clouds, storage=(),
                     clusters=tuple(clusters), policy=PolicyRules(), source="bench")


def tripled(catalog):
    """The catalog three times over: every offering also in two more copies of its region
    (``<region>-x2`` at 103 % of its prices, ``<region>-x3`` at 97 %), as a catalog 3x as large
    with the same GPU models and the same shape of choices."""
    def copy(o, suffix: str, f: float):
        def scaled(v):
            return None if v is None else v * f
        return dataclasses.replace(
            o, region=o.region + suffix, on_demand_usd=scaled(o.on_demand_usd),
            spot_usd=scaled(o.spot_usd), commit_1y_usd=scaled(o.commit_1y_usd),
            commit_3y_usd=scaled(o.commit_3y_usd),
            zone_spot_usd=tuple((z, u * f) for z, u in o.zone_spot_usd))
    more = [copy(o, sfx, f) for sfx, f in (("-x2", 1.03), ("-x3", 0.97))
            for o in catalog.offerings]
    return dataclasses.replace(catalog, version=catalog.version + "x3",
                               offerings=catalog.offerings + tuple(more))


def old_path(stack: StackSpec, catalog) -> int:
    """What decide did before issue 23 for the same clusters: a full candidate (evaluate) for
    every (cluster, offering) pair, ranked (returns the number of pairs)."""
    ctx = Context.build(stack, catalog, stack.policy)
    return sum(len(candidates_for(spec, ctx)) for spec in stack.clusters)


def explained(stack: StackSpec, catalog) -> int:
    """decide, then read every cluster's explanation (rationale, alternatives, commitment
    terms: built when first read), as `gpulease explain` or a plan's views read them."""
    env = decide(stack, catalog)
    return sum(len(c.rationale) + len(c.alternatives) + len(c.terms) for c in env.clusters)


def best_of(repeat: int, fn, *args):
    """(result, wall s, CPU s) of the run with the least CPU time of ``repeat``."""
    best = None
    for _ in range(repeat):
        gc.collect()
        got = benchlib.timed(fn, *args)
        if best is None or got[2] < best[2]:
            best = got
    return best


def peak_mib(fn, *args) -> float:
    gc.collect()
    tracemalloc.start()
    fn(*args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def measure(n: int, catalog, profiles: float = 0.0, repeat: int = 3,
            old: bool = False) -> dict:
    stack = synthetic_stack(n, catalog, profiles=profiles)
    env, wall, cpu = best_of(repeat, decide, stack, catalog)
    ctx = Context.build(stack, catalog, stack.policy)
    _, _, ref = best_of(repeat, price_clusters, stack.clusters, ctx)
    _, _, told = best_of(repeat, explained, stack, catalog)
    out = {"clusters": n, "wall": wall, "cpu": cpu, "pricing": ref, "explained": told,
           "mib": peak_mib(decide, stack, catalog), "monthly": env.monthly_usd,
           "old": None}
    if old:
        _, _, out["old"] = best_of(1, old_path, stack, catalog)
    return out


def print_sizes(rows: list[dict]) -> None:
    print(f"{'clusters':>9} {'CPU s':>8} {'wall s':>8} {'peak MiB':>9} {'us/cluster':>11} "
          f"{'pricing s':>10} {'/pricing':>9} {'explained s':>12} {'old path s':>11} "
          f"{'old/new':>8}")
    for m in rows:
        old = f"{m['old']:>11.2f} {m['old'] / m['cpu']:>7.1f}x" if m["old"] else \
            f"{'-':>11} {'-':>8}"
        print(f"{m['clusters']:>9} {m['cpu']:>8.3f} {m['wall']:>8.3f} {m['mib']:>9.1f} "
              f"{m['cpu'] / m['clusters'] * 1e6:>11.0f} {m['pricing']:>10.3f} "
              f"{m['cpu'] / m['pricing']:>8.1f}x {m['explained']:>12.3f} {old}", flush=True)


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


#: the window portfolio: work items of an ML team over the next eight weeks, judged at
#: WINDOW_NOW (name, gpu, gpus, hours of work, earliest start, deadline, priority, checkpoint
#: minutes). Training runs of a few days to two weeks, a guaranteed demo, sweeps and batch work
#: that may run on spot, one job that cannot be checkpointed.
WINDOW_NOW = "2026-12-03T09:00:00Z"
WINDOW_PORTFOLIO = (
    ("pretrain-h100", "H100", 64, 336, "2027-01-04", "2027-01-31", 9, 60),
    ("finetune-a100", "A100", 32, 96, "2026-12-14", "2026-12-24", 7, 30),
    ("rlhf-h200", "H200", 16, 120, "2027-01-11", "2027-01-20", 8, 30),
    ("eval-sweep-h100", "H100", 16, 48, "2026-12-08", "2026-12-12", 4, 15),
    ("batch-infer-l4", "L4", 8, 100, "2026-12-05", "2026-12-15", 3, 10),
    ("ablation-a100", "A100", 8, 72, "2026-12-20", "2027-01-02", 6, None),
    ("demo-h100", "H100", 8, 24, "2026-12-17", "2026-12-18T12:00:00Z", 9, None),
    ("distill-h100", "H100", 32, 200, "2027-01-18", "2027-01-28", 6, 30),
)


def _day(text: str) -> str:
    """A portfolio date as the RFC 3339 time parse_time takes (a bare date: its midnight UTC)."""
    return text if "T" in text else text + "T00:00:00Z"


def window_stack(catalog) -> StackSpec:
    from gpulease.model import Window
    from gpulease.quotes.model import parse_time

    clusters = tuple(
        ClusterSpec(name=n, gpu=g, gpus=k, hours_per_month=min(h, 730.0), priority=p,
                    checkpoint_minutes=c, index=i,
                    window=Window(parse_time(_day(s)), parse_time(_day(e)), float(h)))
        for i, (n, g, k, h, s, e, p, c) in enumerate(WINDOW_PORTFOLIO) if g in catalog.gpus)
    return StackSpec(stack="windows", environment="prod", owner="bench", cost_center="bench",
                     budget_monthly_usd=1e12, clouds=all_clouds(catalog), storage=(),
                     clusters=clusters, policy=PolicyRules(), source="bench")


def without_new_models(book):
    """The same quote book without Capacity Blocks, flex-start and calendar mode: the best
    plan gpulease could make before them (spot risk kept)."""
    from gpulease.quotes.model import QuoteBook

    return QuoteBook(quotes=[], risks=list(book.risks), sources=dict(book.sources),
                     origins=book.origins, version=book.version)


def scaled(book, factor: float):
    """The book with every Capacity Block price x ``factor`` (a sensitivity check: the
    published rates are older than the catalog's on-demand prices)."""
    import dataclasses as dc

    from gpulease.quotes.model import QuoteBook

    qs = [dc.replace(q, hourly_usd=q.hourly_usd * factor if q.hourly_usd else q.hourly_usd,
                     upfront_usd=q.upfront_usd * factor if q.upfront_usd else q.upfront_usd)
          if q.kind == "capacity_block" else q for q in book.quotes]
    return QuoteBook(quotes=qs, risks=list(book.risks), sources=dict(book.sources),
                     origins=book.origins, version=book.version)


def window_portfolio(catalog, cb_factor: float = 1.0) -> list[tuple]:
    """Per work item: (name, with the new models: decision, without them: decision, naive
    all-on-demand total, naive's shape)."""
    from gpulease.quotes.model import parse_time
    from gpulease.quotes.store import shipped_book

    now = parse_time(WINDOW_NOW)
    stack = window_stack(catalog)
    book = scaled(shipped_book(), cb_factor)
    new = decide(stack, catalog, quotes=book, now=now)
    old = decide(stack, catalog, quotes=without_new_models(book), now=now)
    ctx = Context.build(stack, catalog, stack.policy, quotes=book, now=now)
    out = []
    for a, b in zip(new.clusters, old.clusters):
        spec = a.spec
        # naive: on-demand for the work's hours, cheapest on-demand shape in us-east-1 (or the
        # GPU's cheapest region), the rules on node shape kept
        flat = dataclasses.replace(spec, window=None, hours_per_month=spec.window.duration_hours)
        naive, where = naive_cost(flat, ctx)
        out.append((spec.name, a, b, naive, where))
    return out


def print_windows(catalog) -> None:
    print(f"\nwindow portfolio (judged at {WINDOW_NOW}; catalog {catalog.version}, quote data "
          "gpulease/quotes/data): with Capacity Blocks / flex-start / calendar mode vs the best plan "
          "without them vs naive all-on-demand; totals per work item")
    tot_new = tot_old = tot_naive = 0.0
    for name, a, b, naive, where in window_portfolio(catalog):
        tot_new, tot_old, tot_naive = (tot_new + a.window.total_usd, tot_old + b.window.total_usd,
                                       tot_naive + naive)
        q = a.window.quote
        src = (f" [{q['source']} {q['quoted_at'][:10]}{', est.' if a.window.estimated else ''}]"
               if q else "")
        print(f"  {a.name:<16} {a.cloud}:{a.region:<10} {a.offering.instance_type:<15} "
              f"{a.window.model:<14} ${a.window.total_usd:>12,.2f}{src}   without: "
              f"{b.window.model:<12} ${b.window.total_usd:>12,.2f}   naive ${naive:>12,.2f}")
    print(f"  {'total':<16} with ${tot_new:,.2f} vs without ${tot_old:,.2f} "
          f"({1 - tot_new / tot_old:.1%} cheaper) vs naive ${tot_naive:,.2f} "
          f"({1 - tot_new / tot_naive:.1%} cheaper)")
    sens = []
    for factor in (1.05, 1.1, 1.2):
        rows = window_portfolio(catalog, factor)
        a = sum(r[1].window.total_usd for r in rows)
        b = sum(r[2].window.total_usd for r in rows)
        sens.append(f"x{factor:g}: {1 - a / b:.1%}")
    print("  sensitivity - Capacity Block prices x factor, saving against the plan without the "
          "new models: " + ", ".join(sens))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--profiles", type=float, default=0.5,
                    help="share of synthetic clusters with a demand profile in the second run")
    ap.add_argument("--catalog", help="catalog file (default: the shipped one)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the best counts)")
    ap.add_argument("--old-up-to", type=int, default=1000,
                    help="time the old path (evaluate every pair) up to this many clusters")
    ap.add_argument("--windows-only", action="store_true",
                    help="only the window portfolio (costs, no timing)")
    args = ap.parse_args(argv)
    if args.windows_only:
        benchlib.header("bench/policy.py --windows-only: the window portfolio")
        print_windows(load_catalog(args.catalog))
        benchlib.footer()
        return 0
    benchlib.header("bench/policy.py: decision time and memory (CPU seconds, best of "
                    f"{args.repeat})")
    catalog = load_catalog(args.catalog)
    print(f"catalog {catalog.version}: {len(catalog.offerings)} offerings, "
          f"{len(catalog.gpus)} GPU models, {len(catalog.regions())} regions")
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = [measure(n, catalog, repeat=args.repeat, old=n <= args.old_up_to) for n in sizes]
    print_sizes(rows)
    print(f"\nwith {args.profiles:.0%} of the clusters on a 2-3 step demand profile:")
    print_sizes([measure(n, catalog, profiles=args.profiles, repeat=args.repeat,
                         old=n <= args.old_up_to) for n in sizes])

    n3 = min(sizes)
    big = tripled(catalog)
    one, three = rows[0], measure(n3, big, repeat=args.repeat)
    print(f"\n3x catalog ({len(big.offerings)} offerings, same {n3:,} clusters): "
          f"{three['cpu']:.3f} s CPU vs {one['cpu']:.3f} s = {three['cpu'] / one['cpu']:.2f}x "
          f"the time, {three['mib'] / one['mib']:.2f}x the memory; one-pass pricing "
          f"{three['pricing'] / one['pricing']:.2f}x")

    print("\ntargets (issue 23):")
    for m in rows:
        if m["clusters"] == 1000:
            print(f"  1,000 clusters: {m['cpu']:.3f} s CPU <= {TARGET_1K_S} s: "
                  f"{benchlib.verdict(m['cpu'], TARGET_1K_S)}")
        if m["clusters"] == 10000:
            print(f"  10,000 clusters: {m['cpu']:.3f} s CPU <= {TARGET_10K_S} s: "
                  f"{benchlib.verdict(m['cpu'], TARGET_10K_S)}; peak {m['mib']:.1f} MiB <= "
                  f"{TARGET_10K_MIB:.0f} MiB: {benchlib.verdict(m['mib'], TARGET_10K_MIB)}")
    print(f"  3x catalog: {three['cpu'] / one['cpu']:.2f}x the time <= {TARGET_3X}x: "
          f"{benchlib.verdict(three['cpu'] / one['cpu'], TARGET_3X)}")

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
    print_windows(catalog)
    cases, worse, gap = gang_restriction_gap()
    print(f"\ngang restriction (one model per step, reserved -> on-demand -> spot) vs every "
          f"per-node assignment: {worse} of {cases} random gangs cheaper per node, by at most "
          f"{gap:.2%}")
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
