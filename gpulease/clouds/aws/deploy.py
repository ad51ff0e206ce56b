"""AWS adaptor: turns the AWS part of an EnvironmentDecision into Pulumi components.

Contract used by the program: :func:`deploy` ``(env, catalog) -> list[pulumi.Resource]``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Collection, Mapping, Optional

import pulumi
import pulumi_aws as aws

from gpulease import money, naming
from gpulease.clouds import deadline as deadline_groups
from gpulease.catalog import Catalog
from gpulease.clouds.aws import builders
from gpulease.clouds.aws.cluster import GpuCluster, GpuClusterArgs
from gpulease.clouds.aws.network import Network, NetworkArgs, SpotEvents, SpotEventsArgs
from gpulease.clouds.staging import GcsHmac
from gpulease.clouds.aws.storage import Storage, StorageArgs
from gpulease.errors import ConfigError, Finding, GuardrailError
from gpulease.model import CapacityBlockPin, ClusterDecision, EnvironmentDecision, StackSpec
from gpulease.policy.pins import PIN_MISFIT_HEADLINE
from gpulease.purchase import CAPACITY_BLOCK

_RENDER = Path(__file__).resolve().parents[2] / "bootstrap" / "render.py"


def user_data(stack: StackSpec, decision: ClusterDecision, purchase_model: str) -> Optional[str]:
    """The node cloud-config from the bootstrap renderer (``gpulease.bootstrap.render``)."""
    if not _RENDER.exists():
        pulumi.log.warn(f"{decision.name}: gpulease/bootstrap/render.py is missing; nodes get no "
                        "bootstrap user data")
        return None
    from gpulease.bootstrap.render import render_user_data

    return render_user_data(stack=stack, decision=decision, purchase_model=purchase_model)


def cluster_args(c: ClusterDecision, stack: StackSpec, *, network: Network,
                 provider: aws.Provider, capacity_block: Optional[CapacityBlockPin],
                 gcs_hmac: Optional[GcsHmac], gcs_bucket_dependencies: tuple) -> GpuClusterArgs:
    """What the cluster component reads of the stack, worked out here; ``capacity_block``:
    the approved block when the cluster uses one (``GpuCluster.uses_capacity_block``)."""
    reserve = builders.wants_reservation(stack, c)
    if reserve and stack.clouds["aws"].capacity_blocks and capacity_block is None:
        pulumi.log.warn(f"{c.name}: {c.offering.instance_type} is not sold as a Capacity "
                        "Block for ML; reserving its nodes with an On-Demand Capacity "
                        "Reservation instead")
    return GpuClusterArgs(
        decision=c, environment=stack.environment,
        work_bucket_name=naming.work_bucket_name(stack, c.name)
        if naming.needs_work_bucket(stack, c) else None,
        protect_buckets=stack.is_prod, dataset_uri=naming.dataset_uri(stack, c),
        checkpoint_uri=naming.checkpoint_uri(stack, c), staging=naming.staging_route(stack, c),
        user_data=lambda model: user_data(stack, c, model), network=network,
        provider=provider, reserve=reserve, capacity_block=capacity_block,
        protect_block=c.name not in stack.allow_prepaid_replacement,
        gcp_project=getattr(stack.clouds.get("gcp"), "project", None), gcs_hmac=gcs_hmac,
        gcs_bucket_dependencies=gcs_bucket_dependencies,
        deadline_restart_minutes=deadline_groups.restart_minutes(stack, c))



def _one_region_per_vpc(cloud, cluster_regions: list[str], stack) -> None:
    """One vpc_id cannot serve two regions (a VPC lives in one region): exit 2 before
    anything is declared."""
    if getattr(cloud, "network", None) and len(cluster_regions) > 1:
        raise ConfigError([Finding(
            "gpulease:clouds.aws.vpc_id",
            f'VPC "{cloud.network}" is used, but the plan puts AWS clusters in '
            f"{', '.join(cluster_regions)}; limit gpulease:clouds.aws.regions (or the "
            "clusters' regions) to the VPC's region, or remove vpc_id to let gpulease create "
            "a network per region", source=stack.source)])


def deploy(env: EnvironmentDecision, catalog: Catalog, *,
           storage: Optional[Mapping[str, pulumi.Resource]] = None,
           gcs_hmac: Optional[GcsHmac] = None,
           only_clusters: Optional[Collection[str]] = None) -> list[pulumi.Resource]:
    """Declare everything the decision puts on AWS; returns the top-level resources.

    ``storage``: storage components other clouds declared before (the program deploys GCP
    first): a cluster staging a GCS dataset makes its reader grants depend on that bucket.
    ``gcs_hmac``: an existing key for DataSync to read datasets homed on GCS; None: each such
    AWS cluster declares a reader service account and its key when GCP is configured, else warns.
    ``only_clusters``: declare the cluster components of these names only (everything shared,
    and every check, as always); ``the program's main (infra/__main__.py)``'s ``clusters``.
    """
    declared_elsewhere = dict(storage or {})
    stack = env.stack
    clusters = [c for c in env.clusters if c.cloud == "aws"]
    storage = [s for s in env.storage if s.cloud == "aws"]
    if not clusters and not storage:
        return []
    naming.check_bucket_names(env)
    cloud = stack.clouds.get("aws")
    regions = sorted({c.region for c in clusters} | {s.region for s in storage})
    providers = {r: aws.Provider(f"aws-{r}", region=r) for r in regions}
    out: list[pulumi.Resource] = list(providers.values())

    for s in storage:
        out.append(Storage(s.name, StorageArgs(
            bucket_name=naming.bucket_name(stack, s.name), provider=providers[s.region],
            lifecycle_rules=builders.lifecycle_rules(
                s.lifecycle, index=builders.storage_index(stack, s.name), source=stack.source),
            protect=stack.is_prod, storage=s)))

    cluster_regions = sorted({c.region for c in clusters})
    _one_region_per_vpc(cloud, cluster_regions, stack)
    zone_names = {r: _region_zones(r, providers[r]) for r in cluster_regions}
    findings = [f for c in clusters for f in _zone_findings(c, zone_names[c.region], stack)]
    blocks, unapproved = {}, []
    for c in clusters:
        if GpuCluster.uses_capacity_block(stack, c):
            block = _capacity_block(c, providers[c.region], stack)
            if isinstance(block, Finding):
                findings.append(block)
            elif isinstance(block, tuple):      # ("guardrail", Finding)
                unapproved.append(block[1])
            elif not block.purchase_approved:
                unapproved.append(
                    _estimate(c, block, stack) if c.spec.capacity_block is None
                    and _answered_offline() else _unapproved(c, block, stack))
            else:
                blocks[c.name] = block
    misfits = []
    for c in clusters:
        pin = c.spec.capacity_block
        if pin is not None and not GpuCluster.uses_capacity_block(stack, c):
            # the pin against the decision: exit 4, as every pin that no longer fits
            # (docs/deploy.md "Capacity Blocks"; gpulease.policy.pins)
            misfits.append(Finding(f"{c.spec.config_path}.capacity_block", (
                f"a Capacity Block is pinned, but the plan reserves no nodes of cluster "
                f'"{c.name}" with a block ({_no_block_reason(c, stack)}); remove the pin, or '
                "change the cluster so its reserved nodes fit the block"), source=stack.source))
    if findings:
        raise ConfigError(findings)
    if unapproved:
        raise GuardrailError(unapproved + misfits, headline=(
            "no prepaid purchase without approval: going on would buy "
            f"{'a Capacity Block' if len(unapproved) == 1 else f'{len(unapproved)} Capacity Blocks'}"
            " the stack does not approve (nothing was planned; exit 4)"))
    if misfits:
        raise GuardrailError(misfits, headline=PIN_MISFIT_HEADLINE)
    networks: dict[str, Network] = {}
    for region in cluster_regions:
        here = [c for c in clusters if c.region == region]
        # A Capacity Block's zone first: the network has a subnet in at most as many zones
        # as it has private ranges, and the block's nodes can launch only there. One entry per
        # AZ (a zone ID and its name are the same AZ).
        zones, seen = [], set()
        for z in ([blocks[c.name].availability_zone for c in here if c.name in blocks]
                  + [z for c in here for z in builders.cluster_zones(c)]):
            if zone_names[region].get(z, z) not in seen:
                seen.add(zone_names[region].get(z, z))
                zones.append(z)
        zones = tuple(zones)
        networks[region] = Network(f"aws-{region}-net", NetworkArgs(
            region=region, provider=providers[region],
            vpc_id=getattr(cloud, "network", None), subnet_ids=tuple(getattr(cloud, "subnets", ())),
            zones=zones, zone_names=zone_names[region]))
        out.append(networks[region])
        if any(c.purchase.spot for c in here):
            out.append(SpotEvents(f"aws-{region}-spot-events", SpotEventsArgs(
                region=region, provider=providers[region])))

    for c in clusters:
        if only_clusters is not None and c.name not in only_clusters:
            continue
        out.append(GpuCluster(c.name, cluster_args(
            c, stack, network=networks[c.region], provider=providers[c.region],
            capacity_block=blocks.get(c.name), gcs_hmac=gcs_hmac, gcs_bucket_dependencies=tuple(
                b for n, b in declared_elsewhere.items() if n == c.spec.dataset))))
    return out


def _region_zones(region: str, provider: aws.Provider) -> dict[str, str]:
    """Zone ID and zone name -> zone name, for every available AZ of the region (the
    provider's ``getAvailabilityZones``; offline: gpulease/planner/data/lookups.json)."""
    azs = aws.get_availability_zones(state="available",
                                     opts=pulumi.InvokeOptions(provider=provider))
    names = list(azs.names or [])
    out = {n: n for n in names}
    out.update({i: n for i, n in zip(azs.zone_ids or [], names)})
    return out


def _zone_findings(c: ClusterDecision, zones: dict[str, str], stack: StackSpec) -> list[Finding]:
    bad = [z for z in builders.cluster_zones(c) if z not in zones]
    return [Finding(c.spec.config_path, f'cluster "{c.name}" is placed in zone "{z}", which '
                    f"{c.region} does not have (its zones: {', '.join(sorted(zones))}); the "
                    "catalog row of its instance type names a wrong zone: refresh the catalog "
                    f"or limit {c.spec.config_path}.regions", source=stack.source)
            for z in bad]


def _capacity_block(c: ClusterDecision, provider: aws.Provider, stack: StackSpec):
    """The Capacity Block of the reserved nodes: the pinned one, verbatim (no lookup: offerings
    change by the hour, and a new offering id would buy a second, prepaid block), or else a
    quote to pin (``DescribeCapacityBlockOfferings`` through the provider's data source). A
    Finding when the pin no longer fits the decision, or when AWS offers none."""
    pin = c.spec.capacity_block
    path = f"{c.spec.config_path}.capacity_block"
    if pin is not None:
        from gpulease import clock

        if clock.now().timestamp() >= pin.end_epoch:
            # the block is spent (`pulumi refresh` drops it): its pin is retired, never bought
            # again; reserved nodes of a monthly load need another block (issue 34)
            return ("guardrail", Finding(path, (
                f"pinned Capacity Block {pin.offering_id} ended at {pin.end}: its nodes are "
                "gone and nothing more is charged for it. The cluster's reserved nodes need "
                "another block: remove the pin to quote a new one (a new prepaid purchase, "
                "which needs its own pin and approval)"), source=stack.source))
        wrong = [(k, got, want) for k, got, want in (
            ("region", pin.region, c.region),
            ("instance_type", pin.instance_type, c.offering.instance_type),
            ("instance_count", pin.instance_count, _block_count(c))) if got != want]
        if wrong:
            return ("guardrail", Finding(path, "the pinned block no longer fits the plan: "
                    + "; ".join(f"{k} is {got!r}, the plan needs {want!r}"
                                for k, got, want in wrong)
                    + ". A Capacity Block cannot be changed once bought, so the only way forward"
                    " is buying another: keep the cluster as the block was bought for (regions,"
                    " gpus, priority), or remove the pin to quote a new block (a second, prepaid"
                    " purchase, which also needs the cluster in "
                    "gpulease:allow_prepaid_replacement)", source=stack.source))
        return pin
    # a window's block: the hours and the dates the policy priced (docs/policy.md "Windows")
    block = builders.window_block(c)
    hours = block["hours"] if block else builders.capacity_block_hours(c.spec.hours_per_month)
    dates = ({"start_date_range": block["start"], "end_date_range": block["end"]} if block
             else {})
    # the block's instance count as AWS sells it (a window's may be rounded up above its nodes)
    count = _block_count(c)
    try:
        offer = aws.ec2.get_capacity_block_offering(
            capacity_duration_hours=hours, instance_count=count,
            instance_type=c.offering.instance_type, opts=pulumi.InvokeOptions(provider=provider),
            **dates)
    except Exception as exc:  # noqa: BLE001 - the provider's "nothing found" is an exception
        return Finding(c.spec.config_path, f"no EC2 Capacity Block offering for "
                       f"{count} x {c.offering.instance_type} for {hours} h in "
                       f"{c.region} ({str(exc).strip().splitlines()[-1][:300]}); set "
                       "gpulease:clouds.aws.capacity_blocks: false (reserve with an ODCR), "
                       f"change {c.spec.config_path}.hours_per_month or its regions",
                       source=stack.source)
    return CapacityBlockPin(
        offering_id=offer.capacity_block_offering_id, region=c.region,
        availability_zone=offer.availability_zone, instance_type=c.offering.instance_type,
        instance_count=count, start=offer.start_date_range or "",
        end=offer.end_date_range or "", upfront_fee_usd=_fee(offer.upfront_fee),
        purchase_approved=False)


def _block_count(c: ClusterDecision) -> int:
    """Instances of the cluster's Capacity Block: a window's block as sold (rounded up to a
    size AWS sells), else the reserved nodes."""
    block = builders.window_block(c)
    return block["count"] if block else c.purchase.reserved


def _fee(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def _unapproved(c: ClusterDecision, pin: CapacityBlockPin, stack: StackSpec) -> Finding:
    """The quote, and the exact lines that pin and approve it."""
    path = f"{c.spec.config_path}.capacity_block"
    if c.spec.capacity_block is not None:
        return Finding(f"{path}.purchase_approved", (
            f"pinned Capacity Block {pin.offering_id} ({pin.instance_count} x "
            f"{pin.instance_type} in {pin.availability_zone}, {pin.start} -> {pin.end}, upfront "
            f"{money.fmt(pin.upfront_fee_usd)}) is not approved: set purchase_approved: true to buy "
            "it with the next `pulumi up` (prepaid, not refundable), or remove the pin"),
            source=stack.source)
    lines = "\n".join("      " + line for line in pin_yaml(pin).splitlines())
    dates = (f"{pin.start} -> {pin.end}" if pin.start and pin.end else
             "dates not returned by the data source: read them with `aws ec2 "
             "describe-capacity-block-offerings` and fill in start and end")
    return Finding(path, (
        f"cluster \"{c.name}\" would buy Capacity Block {pin.offering_id}: "
        f"{pin.instance_count} x {pin.instance_type} in {pin.availability_zone}, {dates}, "
        f"upfront {money.fmt(pin.upfront_fee_usd)} (prepaid, not refundable). A quote is never bought "
        f"without approval: pin it under {c.spec.config_path} and approve it,\n    "
        f"capacity_block:\n{lines}\n    (quotes change by the hour: a later run quotes another "
        "offering until one is pinned)"), source=stack.source)


def _answered_offline() -> bool:
    """True when the data sources answer from `gpulease plan`'s offline lookups (Pulumi's mock
    monitor), not from AWS: an offering found so is an estimate from a published rate, with an
    id made up offline - it cannot be pinned or approved."""
    from pulumi.runtime import mocks, settings

    return isinstance(settings.get_monitor(), mocks.MockMonitor)


def _estimate(c: ClusterDecision, pin: CapacityBlockPin, stack: StackSpec) -> Finding:
    """Exit 4's reason offline: the block the plan needs, priced as an estimate from the
    published rate (named with its source and date), and how to get a real quote to pin."""
    from gpulease.quotes import PUBLISHED_RATE_MAX_AGE_DAYS, stale_age_days, undated_source
    from gpulease.quotes.store import shipped_book

    path = f"{c.spec.config_path}.capacity_block"
    rates = [q for q in shipped_book().for_offering(
        CAPACITY_BLOCK, c.cloud, c.region, c.offering.instance_type) if q.node_hour_usd]
    rate = (f"the published rate ${rates[0].node_hour_usd:,.4f} per instance-hour ({rates[0].source}, "
            f"published {rates[0].quoted_at:%Y-%m-%d})" if rates else "a published rate")
    dates = f"{pin.start} -> {pin.end}" if pin.start and pin.end else "dates to be quoted"
    age = stale_age_days(c.window.quote, c.window.judged_at) if c.window is not None else None
    if rates and undated_source(rates[0].source):
        rate += (", an undated source (the date is the day it was read): AWS may have "
                 "changed it")
    elif age is not None:
        rate += (f", {age} days old (older than {PUBLISHED_RATE_MAX_AGE_DAYS} days: AWS may "
                 "have changed it)")
    return Finding(path, (
        f"cluster \"{c.name}\" needs a Capacity Block: {pin.instance_count} x "
        f"{pin.instance_type} in {c.region}, {dates}, about {money.fmt(pin.upfront_fee_usd)} "
        f"upfront. This is an ESTIMATE from {rate}, answered offline: it is not an offering, "
        "so it can be planned and shown but never pinned or approved. Get a real quote: "
        f"`gpulease catalog quotes --source live --cloud aws --region {c.region} "
        f"--instance-type {pin.instance_type} --count {pin.instance_count}` with AWS "
        "credentials (DescribeCapacityBlockOfferings), or `pulumi preview` with them; it "
        f"prints the offering to pin under {c.spec.config_path} in {stack.source} with "
        "purchase_approved: true"), source=stack.source)


def pin_yaml(pin: CapacityBlockPin, *, approve: bool = True) -> str:
    """The ``capacity_block:`` mapping of a pin, as YAML lines (times quoted)."""
    return "\n".join([
        f"offering_id: {pin.offering_id}", f"region: {pin.region}",
        f"availability_zone: {pin.availability_zone}", f"instance_type: {pin.instance_type}",
        f"instance_count: {pin.instance_count}", f'start: "{pin.start}"', f'end: "{pin.end}"',
        f"upfront_fee_usd: {pin.upfront_fee_usd:.2f}"]
        + ([f'quoted_at: "{pin.quoted_at}"'] if pin.quoted_at else [])
        + [f"purchase_approved: {'true' if approve else 'false'}"])


def _no_block_reason(c: ClusterDecision, stack: StackSpec) -> str:
    model = builders.window_model(c)
    if model is not None:
        return (f"the policy bought its window as {model}, the cheapest its priority allows; "
                f"`gpulease explain --cluster {c.name}` says why")
    if c.purchase.reserved == 0:
        return "it has no reserved nodes"
    if not builders.wants_reservation(stack, c):
        return "gpulease:clouds.aws.capacity_reservations is off"
    return f"{c.offering.instance_type} is not sold as a Capacity Block"


__all__ = ["deploy", "GcsHmac", "GpuCluster", "GpuClusterArgs", "Network", "NetworkArgs",
           "Storage", "StorageArgs", "SpotEvents", "user_data"]
