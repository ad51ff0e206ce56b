"""`gpulease plan --against EXPORT`: reading and comparing a `pulumi stack export` of N
reservations, each used by a launch template (the node group's), all of which the new plan
deletes (every deletion of a reservation asks whether another resource uses it).

Run: python bench/against.py [--sizes 250,2500,25000] [--repeat 3]

For each size: the export is written to a temporary file, then timed (median of --repeat, wall
and CPU): ``json.load`` of the file (the reference, measured in the same run), then
``load_previous`` (read, validate: URNs, types, identity) and ``compare`` against a plan of
the same stack and project that declares none of them. The per-resource time should stay
flat as N grows (linear); before issue 35 the in-use check scanned every other resource per
reservation (quadratic: 2,500 reservations took about a minute).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import benchlib  # noqa: E402

STACK = "bench"
RES = "aws:ec2/capacityReservation:CapacityReservation"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


def export(n: int) -> dict:
    from gpulease.planner.mocks import PROJECT

    base = f"urn:pulumi:{STACK}::{PROJECT}::"
    resources = [{"urn": f"{base}pulumi:pulumi:Stack::{PROJECT}-{STACK}", "custom": False,
                  "type": "pulumi:pulumi:Stack"}]
    for i in range(n):
        rid = f"cr-{i:017x}"
        tags = {"gpulease-cluster": f"c{i % 50}", "gpulease-monthly-usd": "1000.00"}
        resources.append({"urn": f"{base}{RES}::c{i}-odcr", "custom": True, "id": rid,
                          "type": RES, "inputs": {"instanceType": "p4d.24xlarge",
                                                  "instanceCount": 2, "tags": tags},
                          "outputs": {"id": rid}, "protect": False})
        resources.append({"urn": f"{base}{LT}::c{i}-lt", "custom": True, "id": f"lt-{i}",
                          "type": LT, "inputs": {"capacityReservationSpecification": {
                              "capacityReservationTarget": {"capacityReservationId": rid}},
                              "tags": tags}, "outputs": {}, "protect": False})
    return {"version": 3, "deployment": {"manifest": {"version": "v3.272.0"},
                                         "resources": resources}}


def median(fn, repeat: int):
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        out, wall, c = benchlib.timed(fn)
        walls.append(wall)
        cpus.append(c)
    return out, statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="250,2500,25000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from gpulease.planner.against import compare, load_previous

    benchlib.header("plan --against: a stack export of N reservations, each in use, all deleted")
    plan = {"stack": STACK, "resources": [], "clusters": []}
    print(f"{'reservations':>12} {'resources':>9} {'json.load s':>11} {'read s':>8} "
          f"{'compare s':>9} {'(read+compare)/json.load':>24} {'us/resource':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            path = Path(tmp, f"export-{n}.json")
            path.write_text(json.dumps(export(n)))

            def ref():
                with path.open(encoding="utf-8") as fh:
                    return json.load(fh)

            _, ref_wall, _ = median(ref, args.repeat)
            prev, read_wall, _ = median(lambda: load_previous(str(path)), args.repeat)
            result, cmp_wall, _ = median(lambda: compare(prev, plan, stack=STACK),
                                         args.repeat)
            assert len(result["blocked"]) == n, len(result["blocked"])   # each one in use
            total = read_wall + cmp_wall
            print(f"{n:>12,} {2 * n + 1:>9,} {ref_wall:>11.3f} {read_wall:>8.3f} "
                  f"{cmp_wall:>9.3f} {total / ref_wall:>24.1f} "
                  f"{total / (2 * n + 1) * 1e6:>11.1f}", flush=True)
    benchlib.footer()


if __name__ == "__main__":
    main()
