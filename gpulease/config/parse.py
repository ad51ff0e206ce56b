"""Parsing the stack config into a StackSpec: the ``gpulease:*`` values as the program sees them,
the schema, the cross-checks, every finding at once (one ConfigError listing them all)."""
from __future__ import annotations

import datetime as _dt
import json
import re
from typing import Any, Mapping, Optional

from pydantic import ValidationError

from gpulease.catalog import Catalog
from gpulease.clouds import registry
from gpulease.clouds.aws.cloud import AWS
from gpulease.config.checks import demand_findings, reference_findings
from gpulease.config.messages import finding_order, findings_from_validation, headline
from gpulease.config.schema import (ENVIRONMENT_PATTERN, ENVIRONMENT_RULE, NAMESPACE,
                                    STRUCTURED_KEYS, TOP_LEVEL_KEYS, CapacityBlockConfig,
                                    CloudsConfig, ClusterConfig, OwnedPoolConfig, StackConfigModel,
                                    StorageConfig)
from gpulease.errors import ConfigError, Finding, did_you_mean
from gpulease.model import (HOURS_PER_MONTH, CapacityBlockPin, CloudSpec, ClusterSpec, DemandStep,
                            OwnedPool,
                            StackSpec, StorageSpec, Window, parse_utc)
from gpulease.policy.templates import template_names
from gpulease.quotes import CB_MAX_DAYS, block_window_problem, valid_block_hours
from gpulease.tags import label_value


def parse_stack_config(values: Mapping[str, Any], *, stack: str, source: str,
                       catalog: Catalog) -> StackSpec:
    """Validate ``{"gpulease:key": value}`` (other namespaces ignored) into a StackSpec.

    Raises ConfigError with every finding (errors and warnings) when anything is wrong.
    """
    data, findings = _key_findings(values, source)

    def bad(path: str, msg: str, level: str = "error") -> None:
        findings.append(Finding(path, msg, level=level, source=source))

    references = reference_findings(data, catalog, source) + demand_findings(data, source)
    _environment_check(data, stack, bad)
    model = _validate(data, findings, references, source)
    findings.extend(references)
    clouds = _clouds(model.clouds, bad)
    storage = _storage(model.storage, clouds, catalog, bad)
    clusters = _clusters(model.clusters, clouds, catalog, bad)
    owned = _owned(model.owned, catalog, bad)
    _stack_checks(model, catalog, bad)

    errors = [f for f in findings if f.level == "error"]
    if errors:
        raise ConfigError(sorted(findings, key=finding_order), headline=headline(source))
    return StackSpec(
        stack=stack, environment=model.environment or stack, owner=model.owner,
        cost_center=model.cost_center, budget_monthly_usd=model.budget_monthly_usd,
        clouds=clouds, storage=tuple(storage), clusters=tuple(clusters), policy=model.policy,
        reaper=model.reaper, bootstrap=model.bootstrap, source=source,
        name_prefix=model.name_prefix, catalog_version=model.catalog_version,
        allow_prepaid_replacement=tuple(model.allow_prepaid_replacement),
        owned=tuple(owned), inventory=model.inventory, buy_vs_rent=model.buy_vs_rent,
        gate=None if model.gate is None else model.gate.model_dump(),
        warnings=tuple(sorted((f for f in findings if f.level != "error"), key=finding_order)))


# ---- the values as the program sees them ----------------------------------------------------
def _decode(key: str, value: Any) -> Any:
    """A config value as the program sees it through `pulumi.Config`: strings, with mappings and
    lists JSON-encoded. Structured keys are decoded from JSON; scalars stay strings and pydantic
    converts them to the field's type ("5000" -> 5000.0), so a file read by the CLI and the
    values the engine passes parse identically."""
    if value is None:
        return None
    if not isinstance(value, str):
        try:
            value = json.dumps(value)
        except (TypeError, ValueError):
            return value  # reported by the schema ("must be a string", ...)
    if key in STRUCTURED_KEYS and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _key_findings(values: Mapping[Any, Any], source: str) -> tuple[dict[str, Any], list[Finding]]:
    """The ``gpulease:*`` values, and findings for keys that look meant for gpulease but are not
    (a typo in the namespace, no namespace): such keys would otherwise be ignored silently."""
    data: dict[str, Any] = {}
    findings: list[Finding] = []
    ours = [f"{NAMESPACE}:{k}" for k in TOP_LEVEL_KEYS]
    for key, value in values.items():
        if not isinstance(key, str):
            findings.append(Finding("config", f"config keys are strings like \"{NAMESPACE}:owner\" "
                                    f"(got {key!r}); quote the key", source=source))
            continue
        ns, sep, name = key.partition(":")
        if not sep:
            findings.append(Finding(key, "a config key needs a namespace: gpulease's keys are "
                                    f'written "{NAMESPACE}:<key>"{did_you_mean(key, ours)}',
                                    source=source))
            continue
        if ns != NAMESPACE:
            hint = did_you_mean(ns, [NAMESPACE])
            if hint:
                findings.append(Finding(key, f'unknown namespace "{ns}"{hint}; gpulease reads '
                                        f'only "{NAMESPACE}:" keys', source=source))
            continue  # another provider's or project's config (aws:region, gcp:project, ...)
        if not name:
            findings.append(Finding(key, f'"{key}" names no key: write "{NAMESPACE}:<key>"',
                                    source=source))
            continue
        data[name] = _decode(name, value)
    return data, findings


# ---- the steps of parse_stack_config ----------------------------------------------------------
def _environment_check(data: dict, stack: str, bad) -> None:
    """The environment defaults to the stack name: that name must be a valid environment."""
    if "environment" not in data and not re.fullmatch(ENVIRONMENT_PATTERN, stack):
        suggestion = label_value(stack).replace("_", "-").strip("-")[:30].rstrip("-") or "dev"
        if not suggestion[0].isalpha():
            suggestion = ("env-" + suggestion)[:30].rstrip("-")
        bad("gpulease:environment", f'the environment defaults to the stack name "{stack}", '
            f"which is not a valid environment name ({ENVIRONMENT_RULE}): every tag, label, "
            f'bucket and protect decision derives from it; set gpulease:environment: '
            f'"{suggestion}" or rename the stack')


def _validate(data: dict, findings: list[Finding], references: list[Finding],
              source: str) -> StackConfigModel:
    """The schema's model of ``data``. On a type or structure error, raises with the findings so
    far, the schema's, and the cross-checks' on paths the schema did not report."""
    try:
        return StackConfigModel.model_validate(data)
    except ValidationError as exc:
        structural = findings_from_validation(exc, source)
        seen = {f.path for f in structural}
        raise ConfigError(sorted(findings + structural
                                 + [f for f in references if f.path not in seen],
                                 key=finding_order),
                          headline=headline(source)) from None


def _clouds(cfg: CloudsConfig, bad) -> dict[str, CloudSpec]:
    """The configured clouds (quotas within their regions, networks given whole)."""
    clouds: dict[str, CloudSpec] = {}
    if cfg.aws is None and cfg.gcp is None:
        bad("gpulease:clouds", "configure at least one cloud (aws or gcp)")
    for cname in registry.NAMES:
        ccfg = getattr(cfg, cname)
        if ccfg is None:
            continue
        for r, n in ccfg.quota_gpus.items():
            if r not in ccfg.regions:
                bad(f"gpulease:clouds.{cname}.quota_gpus.{r}",
                    f'quota for "{r}", which is not in gpulease:clouds.{cname}.regions'
                    f"{did_you_mean(r, ccfg.regions)}")
            if n < 0:
                bad(f"gpulease:clouds.{cname}.quota_gpus.{r}", f"must be >= 0 (got {n})")
        clouds[cname] = ccfg.spec(bad)     # the cloud's own checks (its config section's)
    return clouds


def _storage(entries: list[StorageConfig], clouds: dict[str, CloudSpec], catalog: Catalog,
             bad) -> list[StorageSpec]:
    """The datasets (unique names, a home on a configured cloud and a catalog region, the
    lifecycle ages in order)."""
    storage: list[StorageSpec] = []
    names: set[str] = set()
    for i, s in enumerate(entries):
        path = f"gpulease:storage[{i}]"
        if s.name in names:
            bad(f"{path}.name", f'duplicate storage name "{s.name}"')
        names.add(s.name)
        hc, _, hr = s.home.partition(":")
        if not registry.is_cloud(hc) or not hr:
            bad(f"{path}.home", f'must be "<cloud>:<region>", e.g. "aws:us-east-1" (got "{s.home}")')
        elif hc not in clouds:
            bad(f"{path}.home", f'cloud "{hc}" is not configured under gpulease:clouds')
        elif hr not in catalog.regions(hc):
            bad(f"{path}.home", f'region "{hr}" is not in the catalog'
                f"{did_you_mean(hr, catalog.regions(hc))}")
        days = [(k, getattr(s, k)) for k in ("warm_after_days", "cold_after_days",
                                             "archive_after_days")]
        present = [(k, d) for k, d in days if d is not None]
        for (k1, d1), (k2, d2) in zip(present, present[1:]):
            if d2 <= d1:
                bad(f"{path}.{k2}", f"must be greater than {k1} ({d1}) (got {d2})")
        storage.append(StorageSpec(
            name=s.name, size_tb=s.size_tb, home_cloud=hc, home_region=hr,
            warm_after_days=s.warm_after_days, cold_after_days=s.cold_after_days,
            archive_after_days=s.archive_after_days, age_horizon_days=s.age_horizon_days,
            noncurrent_days=s.noncurrent_days))
    return storage


def _clusters(entries: list[ClusterConfig], clouds: dict[str, CloudSpec], catalog: Catalog,
              bad) -> list[ClusterSpec]:
    """The clusters (unique names, where they may run, their demand); a cluster whose demand
    cannot be read is left out (its findings say why)."""
    clusters: list[ClusterSpec] = []
    cnames: set[str] = set()
    gpus = catalog.gpus
    for i, c in enumerate(entries):
        path = f"gpulease:clusters[{i}]"
        if c.name in cnames:
            bad(f"{path}.name", f'duplicate cluster name "{c.name}"')
        cnames.add(c.name)
        _placement_checks(c, path, clouds, catalog, gpus, bad)
        spec = _cluster(i, c, path, clouds, catalog, bad)
        if spec is not None:
            clusters.append(spec)
    _one_cluster_per_offering(entries, bad)
    if not entries:
        bad("gpulease:clusters", "no clusters configured; the plan would be empty",
            level="warning")
    return clusters


def _owned(entries: list[OwnedPoolConfig], catalog: Catalog, bad) -> list[OwnedPool]:
    """Owned pools: GPU in the catalog, whole nodes, a real purchase date, unique names, a
    kubeconfig context for a `kubernetes` pool."""
    out, seen = [], set()
    for i, p in enumerate(entries):
        path = f"gpulease:owned[{i}]"
        if p.name in seen:
            bad(f"{path}.name", f'"{p.name}" names two owned pools; give each a unique name')
        seen.add(p.name)
        if p.gpu not in catalog.gpus:
            bad(f"{path}.gpu", f'unknown GPU "{p.gpu}"{did_you_mean(p.gpu, catalog.gpus)}; '
                f"the catalog has: {', '.join(catalog.gpus)}")
        if p.gpus % p.gpus_per_node:
            bad(f"{path}.gpus", f"{p.gpus} GPUs is not a whole number of {p.gpus_per_node}-GPU "
                f"nodes; set gpus to a multiple of gpus_per_node")
        try:
            _dt.date.fromisoformat(p.purchased_on)
        except ValueError:
            bad(f"{path}.purchased_on", f'"{p.purchased_on}" is not a calendar date; write '
                f'YYYY-MM-DD, e.g. "2025-03-31"')
        if p.kind == "kubernetes" and not p.kube_context:
            bad(f"{path}.kube_context", "a kubernetes pool needs the kubeconfig context of its "
                "cluster (kube_context), so the program can declare its namespace and quota")
        out.append(OwnedPool(
            index=i, name=p.name, gpu=p.gpu, gpus=p.gpus, gpus_per_node=p.gpus_per_node,
            site=p.site, kind=p.kind, purchase_usd=p.purchase_usd, purchased_on=p.purchased_on,
            depreciation_years=p.depreciation_years, power_kw_per_node=p.power_kw_per_node,
            usd_per_kwh=p.usd_per_kwh, colo_usd_per_month=p.colo_usd_per_month,
            ops_usd_per_month=p.ops_usd_per_month,
            available_hours_per_month=p.available_hours_per_month or HOURS_PER_MONTH,
            regions_equivalent=tuple(p.regions_equivalent), rdma=p.rdma,
            kube_context=p.kube_context))
    return out


def _placement_checks(c: ClusterConfig, path: str, clouds: dict[str, CloudSpec],
                      catalog: Catalog, gpus: list[str], bad) -> None:
    """Where the cluster may run: its residency list names catalog regions, some offering of
    its GPU (``gpus``: the catalog's) is in the configured regions within it, and a forced
    template exists."""
    allowed = [r for cl in clouds.values() for r in cl.regions]
    for j, r in enumerate(c.regions):
        if not any(a == r or a.startswith(r) for a in catalog.regions()):
            bad(f"{path}.regions[{j}]", f'"{r}" matches no catalog region'
                f"{did_you_mean(r, catalog.regions())}")
    if c.gpu in gpus and allowed:
        cands = [o for o in catalog.offerings_for(gpu=c.gpu)
                 if o.cloud in clouds and o.region in clouds[o.cloud].regions
                 and (not c.regions or _matches_residency(o.region, c.regions))]
        if not cands:
            where = [f"{cl}: {', '.join(spec.regions)}" for cl, spec in clouds.items()]
            bad(f"{path}", f'no offering can satisfy cluster "{c.name}": no {c.gpu} in the '
                f"configured regions ({'; '.join(where)})"
                + (f" within residency {c.regions}" if c.regions else "")
                + f"; {c.gpu} is offered in: "
                + ", ".join(sorted({f'{o.cloud}:{o.region}' for o in catalog.offerings_for(gpu=c.gpu)})))
    if c.template is not None:
        tn = template_names()
        if c.template not in tn:
            bad(f"{path}.template", f'unknown template "{c.template}"'
                f"{did_you_mean(c.template, tn)}; templates: {', '.join(tn)}")


def _cluster(i: int, c: ClusterConfig, path: str, clouds: dict[str, CloudSpec],
             catalog: Catalog, bad) -> Optional[ClusterSpec]:
    """The ``i``-th cluster's spec: its demand steps (a monthly load, a profile or a window)
    and its pinned Capacity Block; None when its demand cannot be read."""
    window = None
    if c.window is not None and c.gpus is not None:
        from gpulease.quotes.model import parse_time   # for speed: only with a window

        try:
            window = Window(parse_time(c.window.earliest_start, date_ok=True),
                            parse_time(c.window.deadline, date_ok=True),
                            c.window.duration_hours)
        except ValueError:
            return None  # reported by checks._window_findings
        steps = (DemandStep(c.gpus, min(c.window.duration_hours, HOURS_PER_MONTH)),)
    else:
        steps = tuple(DemandStep(d.gpus, d.hours_per_month) for d in c.demand) or (
            (DemandStep(c.gpus, c.hours_per_month),)
            if c.gpus is not None and c.hours_per_month is not None else ())
    if not steps:
        return None  # reported by checks.demand_findings
    pin = _capacity_block_pin(c.capacity_block, f"{path}.capacity_block", clouds, catalog,
                              bad, cluster=c, path_of_cluster=path, window=window)
    return ClusterSpec(
        name=c.name, gpu=c.gpu, gpus=steps[-1].gpus, hours_per_month=steps[0].hours_per_month,
        priority=c.priority, checkpoint_minutes=c.checkpoint_minutes,
        distributed=c.distributed, dataset=c.dataset, regions=tuple(c.regions),
        idle_minutes=c.idle_minutes, template=c.template, index=i,
        schedule=tuple((w.cron, w.minutes) for w in c.schedule),
        schedule_lead_minutes=c.schedule_lead_minutes,
        first_job_grace_minutes=c.first_job_grace_minutes,
        demand=steps if len(steps) > 1 else (), capacity_block=pin, window=window)


def _stack_checks(model: StackConfigModel, catalog: Catalog, bad) -> None:
    """Stack-wide keys that name what the rest of the config holds."""
    cnames = [c.name for c in model.clusters]
    for j, name in enumerate(model.allow_prepaid_replacement):
        if name not in cnames:
            # a warning, not an error: a removed cluster's name is how its prepaid resources
            # may be deleted, and only `plan --against` knows which clusters the state still
            # holds (there, a name of neither is exit 2: planner.against.opt_in_findings). A
            # typo withholds the permission, it never grants one.
            bad(f"gpulease:allow_prepaid_replacement[{j}]", f'"{name}" names no cluster of this '
                f"stack{did_you_mean(name, cnames)}: it opts nothing in unless a cluster of "
                "that name was removed and the state still holds its prepaid resources "
                "(`gpulease plan --against` checks that); fix the name, or remove it",
                level="warning")

    if model.catalog_version and model.catalog_version != catalog.version:
        bad("gpulease:catalog_version", f'stack pins catalog "{model.catalog_version}" but '
            f'catalog "{catalog.version}" was loaded')


def _matches_residency(region: str, allow: list[str]) -> bool:
    return any(region == a or region.startswith(a) for a in allow)


def _one_cluster_per_offering(entries: list[ClusterConfig], bad) -> None:
    """An offering is one block: bought once, its nodes used by one cluster. Two pins of one
    offering id would count its fee twice and declare two purchases of it."""
    first: dict[str, int] = {}
    for i, c in enumerate(entries):
        if c.capacity_block is None:
            continue
        oid = c.capacity_block.offering_id
        if oid in first:
            k = first[oid]
            bad(f"gpulease:clusters[{i}].capacity_block.offering_id", (
                f'"{oid}" is pinned by cluster "{entries[k].name}" too '
                f"(gpulease:clusters[{k}].capacity_block): an offering is one block, bought "
                "once, whose nodes serve one cluster; pin a quote of its own for each cluster "
                "(remove this pin and `gpulease plan` quotes one)"))
        else:
            first[oid] = i


def _capacity_block_pin(cfg: Optional[CapacityBlockConfig], path: str, clouds: dict,
                        catalog: Catalog, bad, *, cluster: ClusterConfig, path_of_cluster: str,
                        window: Optional[Window] = None) -> Optional[CapacityBlockPin]:
    """The pin of a cluster's Capacity Block, with what the stack file alone decides (exit 2):
    an AWS region the stack and the cluster's residency allow, a zone of it, an instance type
    with the cluster's GPU, a valid duration, and for a window a block inside it
    (``gpulease.quotes.block_window_problem``). The decision is checked against the pin later
    (exit 4: ``gpulease.policy.pins``; the AWS adaptor for the reserved nodes). A cluster with
    a window may pin the block the policy chose for it without
    gpulease:clouds.aws.capacity_blocks (that switch is for monthly loads)."""
    if cfg is None:
        return None
    aws_cloud = clouds.get(AWS.name)       # Capacity Blocks are an AWS purchase
    if aws_cloud is None:
        bad(path, "a Capacity Block is an AWS purchase: configure gpulease:clouds.aws")
    elif not aws_cloud.capacity_blocks and window is None:
        bad(path, "pinned, but gpulease:clouds.aws.capacity_blocks is false: set it to true "
                  "to use the block, or remove the pin")
    elif cfg.region not in aws_cloud.regions:
        bad(f"{path}.region", f'"{cfg.region}" is not in gpulease:clouds.aws.regions'
            f"{did_you_mean(cfg.region, aws_cloud.regions)}")
    if not cfg.availability_zone.startswith(cfg.region):
        bad(f"{path}.availability_zone", f'"{cfg.availability_zone}" is not a zone of region '
            f'"{cfg.region}"')
    if cluster.regions and not _matches_residency(cfg.region, cluster.regions):
        bad(f"{path}.region", f'"{cfg.region}" is outside the cluster\'s residency list '
            f"{path_of_cluster}.regions ({', '.join(cluster.regions)}): the cluster can never "
            "run in the block; pin a quote from a region it may use, or remove the pin")
    gpu_of = {o.instance_type: o.gpu for o in catalog.offerings_for(cloud=AWS.name)}
    if cfg.instance_type not in gpu_of:
        bad(f"{path}.instance_type", f'unknown AWS instance type "{cfg.instance_type}"'
            f"{did_you_mean(cfg.instance_type, sorted(gpu_of))}")
    elif gpu_of[cfg.instance_type] != cluster.gpu:
        fits = sorted(t for t, g in gpu_of.items() if g == cluster.gpu)
        bad(f"{path}.instance_type", (
            f'"{cfg.instance_type}" has {gpu_of[cfg.instance_type]} GPUs, but cluster '
            f'"{cluster.name}" runs {cluster.gpu} ({path_of_cluster}.gpu): the policy never '
            "puts it on this block; pin a quote of "
            + (f"an instance type with {cluster.gpu} ({', '.join(fits)})" if fits
               else f"an instance type with {cluster.gpu}")
            + ", or remove the pin"))
    start, end = parse_utc(cfg.start), parse_utc(cfg.end)
    if end <= start:
        bad(f"{path}.end", f"must be after start ({cfg.start}) (got {cfg.end})")
    elif not valid_block_hours((end - start) / 3600.0):
        bad(f"{path}.end", f"the block lasts {(end - start) / 86400.0:g} days; Capacity Blocks "
                           f"last 1-14 whole days or a multiple of 7 days up to {CB_MAX_DAYS} "
                           "(EC2 User Guide, \"Capacity Blocks for ML\")")
    elif window is not None:
        problem = block_window_problem(*(_dt.datetime.fromtimestamp(t, _dt.timezone.utc)
                                         for t in (start, end)),
                                       window.earliest_start, window.deadline)
        if problem is not None:
            field, why = problem
            bad(f"{path}.{field}", f"{why} ({path_of_cluster}.window); pin a quote for this "
                "window (`gpulease plan` prints one), or move the window to the block")
    return CapacityBlockPin(
        offering_id=cfg.offering_id, region=cfg.region,
        availability_zone=cfg.availability_zone, instance_type=cfg.instance_type,
        instance_count=cfg.instance_count, start=cfg.start, end=cfg.end,
        upfront_fee_usd=cfg.upfront_fee_usd, purchase_approved=cfg.purchase_approved,
        quoted_at=cfg.quoted_at)
