"""Build the shipped quote data file (``gpulease/quotes/data/<version>.json``); re-runnable.

    python -m tools.quotes_build --spot-advisor spot-advisor-data.json --out gpulease/quotes/data/

Inputs (none is committed):
- ``--spot-advisor``: a copy of the AWS Spot Instance Advisor's data file
  (https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json). The shipped file was built
  from the copy in alexei-led/spotinfo at commit 5eedf20 (``internal/spot/data/
  spot-advisor-data.json``, committed 2025-06-28): the band of every AWS GPU offering of the
  catalog that the copy lists for Linux.
- ``CAPACITY_BLOCK_RATES`` below: the published Capacity Block rates, each with its source.

Nothing else is in the file: where no figure was found (flex-start and calendar-mode prices,
GCP spot risk, Spot Placement Scores) the offline answer is "no quote", and `gpulease catalog
quotes` reads them live (docs/catalog.md, "Quotes").
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpulease.catalog import load_catalog
from gpulease.purchase import CAPACITY_BLOCK
from gpulease.quotes.aws import spot_advisor_bands
from gpulease.clock import format_utc
from gpulease.quotes.model import parse_time
from gpulease.quotes.store import FORMAT, parse_document

VERSION, AS_OF = "2026.12.03", "2026-12-03"
ADVISOR_SOURCE = "aws-spot-advisor-2025-06"
ADVISOR_AS_OF = "2025-06-28"

SOURCES = {
    "aws-capacity-blocks-pricing": {
        "url": "https://aws.amazon.com/ec2/capacityblocks/pricing/",
        "title": "Amazon EC2 Capacity Blocks for ML pricing: 'Effective Instance Hourly Rate' "
                 "of the reservation fee, charged up front; p5.48xlarge US East (N. Virginia) "
                 "and US East (Ohio) $39.33, p4d.24xlarge US East (Ohio) and US West (Oregon) "
                 "$14.75. The stored copy says 'The current prices are scheduled to be updated "
                 "on January 1, 2025': these are the rates in force until then. An operating "
                 "system fee per running hour comes on top; the copy's table of it is cut off, "
                 "so it is not counted here (Linux).",
        "retrieved": AS_OF, "published": "2024-12-31"},
    "capacity-blocks-h200-2026": {
        "url": "https://administraciondesistemas.com/aws-encarece-un-15-sus-capacity-blocks-"
               "con-nvidia-h200-aviso-para-sysadmins-que-viven-de-la-previsibilidad",
        "title": "Report of a ~15 % increase of Capacity Block rates: p5e.48xlarge from $34.61 "
                 "to $39.80 and p5en.48xlarge from $36.18 to $41.61 per hour 'in most "
                 "regions'. The stored copy carries no publication date; the figures are dated "
                 "by their reading. Regions: where the EC2 User Guide lists the types as sold "
                 "as Capacity Blocks (p5e and p5en: US East (Ohio)).",
        "retrieved": AS_OF},
    "aws-capacity-blocks-user-guide": {
        "url": "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html",
        "title": "EC2 User Guide, Capacity Blocks for ML: types and regions sold as blocks, "
                 "durations (1-14 days in 1-day steps, 7-day steps to 182 days), up to 64 "
                 "instances a block, start up to eight weeks ahead, blocks end at 11:30 UTC.",
        "retrieved": AS_OF},
    ADVISOR_SOURCE: {
        "url": "https://github.com/alexei-led/spotinfo/blob/5eedf20/internal/spot/data/"
               "spot-advisor-data.json",
        "title": "AWS Spot Instance Advisor data (spot-advisor-data.json) as embedded in "
                 "spotinfo, committed 2025-06-28: per region and Linux instance type the "
                 "'frequency of interruption' range (share of spot capacity reclaimed in the "
                 "trailing month: <5%, 5-10%, 10-15%, 15-20%, >20%; each range's upper edge "
                 "'max' 5, 11, 16, 22, 100 as the file states them).",
        "retrieved": AS_OF, "published": ADVISOR_AS_OF},
}

#: (instance type, region, USD per instance-hour, source, date the figure stands for).
CAPACITY_BLOCK_RATES = (
    ("p5.48xlarge", "us-east-1", 39.33, "aws-capacity-blocks-pricing", "2024-12-31"),
    ("p5.48xlarge", "us-east-2", 39.33, "aws-capacity-blocks-pricing", "2024-12-31"),
    ("p4d.24xlarge", "us-east-2", 14.75, "aws-capacity-blocks-pricing", "2024-12-31"),
    ("p4d.24xlarge", "us-west-2", 14.75, "aws-capacity-blocks-pricing", "2024-12-31"),
    ("p5e.48xlarge", "us-east-2", 39.80, "capacity-blocks-h200-2026", AS_OF),
    ("p5en.48xlarge", "us-east-2", 41.61, "capacity-blocks-h200-2026", AS_OF),
)


def build(spot_advisor: Path) -> dict:
    catalog = load_catalog()
    doc = json.loads(spot_advisor.read_text(encoding="utf-8"))
    pairs = {(o.region, o.instance_type) for o in catalog.offerings if o.cloud == "aws"}
    bands = spot_advisor_bands(doc, pairs=pairs, as_of=parse_time(ADVISOR_AS_OF),
                               source=ADVISOR_SOURCE)
    quotes = [{"kind": CAPACITY_BLOCK, "cloud": "aws", "region": region,
               "instance_type": itype, "hourly_usd": usd, "quoted_at": date, "source": src,
               "note": "published rate per instance-hour; an offering's fee = rate x "
                       "instances x hours"}
              for itype, region, usd, src, date in CAPACITY_BLOCK_RATES]
    risks = [{"cloud": "aws", "region": b.region, "instance_type": b.instance_type,
              "band": b.band, "band_max_percent": b.band_max_percent,
              "as_of": ADVISOR_AS_OF, "source": ADVISOR_SOURCE} for b in bands]
    out = {"format": FORMAT, "version": VERSION, "as_of": AS_OF,
           "description": "Offline quotes: published Capacity Block rates and the Spot "
                          "Instance Advisor's interruption bands of the catalog's AWS GPU "
                          "types, each with its source and date (docs/catalog.md, \"Quotes\").",
           "sources": SOURCES, "quotes": quotes, "spot_risk": risks,
           "spot_advisor_ranges": doc["ranges"],
           "generated_by": "python -m tools.quotes_build --spot-advisor <spot-advisor-data.json>"}
    parse_document(out, source="<build>")   # what the loader would refuse, refuse now
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spot-advisor", type=Path, required=True)
    # the checkout's quote data folder (tools/ ships in the sdist, never in the wheel)
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parents[1] / "gpulease" / "quotes" / "data")
    args = ap.parse_args(argv)
    doc = build(args.spot_advisor)
    path = args.out / f"{VERSION}.json" if args.out.is_dir() else args.out
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}: {len(doc['quotes'])} rates, {len(doc['spot_risk'])} spot bands "
          f"(as of {format_utc(parse_time(ADVISOR_AS_OF))[:10]})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
