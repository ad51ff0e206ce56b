"""GCP adaptor: turns the GCP part of an EnvironmentDecision into Pulumi components.

Contract used by the program: ``deploy(env, catalog) -> list[pulumi.Resource]``.
"""
from __future__ import annotations

from typing import Collection, Mapping, Optional

import pulumi
import pulumi_gcp as gcp

from gpulease import naming
from gpulease.clouds import deadline as deadline_groups
from gpulease.catalog import Catalog
from gpulease.clouds.gcp.cluster import (GpuCluster, GpuClusterArgs, render_user_data,
                                          reservation_name)
from gpulease.clouds.gcp.builders import cluster_zone, nic_layout, primary_mtu
from gpulease.clouds.gcp.network import Network, NetworkArgs
from gpulease.clouds.gcp.storage import Storage, StorageArgs
from gpulease.errors import ConfigError, Finding
from gpulease.model import ClusterDecision, EnvironmentDecision, StackSpec

def cluster_args(c: ClusterDecision, stack: StackSpec, *, network: pulumi.Input[str],
                 subnetwork: pulumi.Input[str], bucket_dependencies: tuple) -> GpuClusterArgs:
    """What the cluster component reads of the stack, worked out here."""
    spec = stack.clouds["gcp"]
    return GpuClusterArgs(
        decision=c, environment=stack.environment,
        work_bucket_name=naming.work_bucket_name(stack, c.name)
        if naming.needs_work_bucket(stack, c) else None,
        protect_buckets=stack.is_prod, dataset_uri=naming.dataset_uri(stack, c),
        checkpoint_uri=naming.checkpoint_uri(stack, c), staging=naming.staging_route(stack, c),
        user_data=lambda model: render_user_data(stack=stack, decision=c,
                                                 purchase_model=model),
        network=network, subnetwork=subnetwork, project=spec.project,
        reservation_name=reservation_name(stack, c.name),
        aws_configured="aws" in stack.clouds,
        spot_termination_action=spec.spot_termination_action, ssh_via_iap=spec.ssh_via_iap,
        bucket_dependencies=bucket_dependencies,
        deadline_restart_minutes=deadline_groups.restart_minutes(stack, c))


def _zone_findings(clusters, project: str, provider: gcp.Provider, source: str) -> list[Finding]:
    """Every cluster needs one zone of its region (the decision's, else the catalog's); a zone
    the region does not have (``compute.zones.list``, offline: lookups.json) is an error."""
    findings, zones_of = [], {}
    for c in clusters:
        zone = cluster_zone(c)
        if zone is None:
            findings.append(Finding(c.spec.config_path, f'no zone is known for '
                                    f'{c.offering.instance_type} in {c.region} (the catalog row '
                                    "lists none): refresh the catalog", source=source))
            continue
        if c.region not in zones_of:
            zones_of[c.region] = list(gcp.compute.get_zones(
                region=c.region, project=project, status="UP",
                opts=pulumi.InvokeOptions(provider=provider)).names or [])
        if zone not in zones_of[c.region]:
            findings.append(Finding(c.spec.config_path, f'cluster "{c.name}" is placed in zone '
                                    f'"{zone}", which {c.region} does not have (its zones: '
                                    f"{', '.join(zones_of[c.region])}); refresh the catalog or "
                                    f"limit {c.spec.config_path}.regions", source=source))
    return findings


__all__ = ["deploy", "GpuCluster", "GpuClusterArgs", "Network", "NetworkArgs", "Storage",
           "StorageArgs", "nic_layout"]


def deploy(env: EnvironmentDecision, catalog: Catalog, *,
           storage: Optional[Mapping[str, pulumi.Resource]] = None,
           only_clusters: Optional[Collection[str]] = None) -> list[pulumi.Resource]:
    """Declare everything the decision puts on GCP; returns the top-level resources.

    ``storage``: storage components other clouds declared before (unused here: a GCP cluster
    staging an S3 dataset only names the bucket in its transfer job). ``only_clusters``: declare
    the cluster components of these names only (everything shared is declared as always);
    ``the program's main (infra/__main__.py)``'s ``clusters``.
    """
    clusters = [c for c in env.clusters if c.cloud == "gcp"]
    stores = [s for s in env.storage if s.cloud == "gcp"]
    if not clusters and not stores:
        return []
    naming.check_bucket_names(env)
    source = env.stack.source
    spec = env.stack.clouds.get("gcp")
    if spec is None or not spec.project:
        raise ConfigError([Finding("gpulease:clouds.gcp.project", "the plan places resources "
                                   "on GCP but no GCP project is configured; add "
                                   "gpulease:clouds.gcp.project", source=source)])
    missing = [c for c in clusters
               if c.offering.instance_type not in catalog.instance_types("gcp")]
    if missing:
        raise ConfigError([Finding(c.spec.config_path, f'machine type '
                                   f'"{c.offering.instance_type}" is not in catalog '
                                   f'{catalog.version}', source=source) for c in missing])

    provider = gcp.Provider("gcp", project=spec.project)
    opts = pulumi.ResourceOptions(providers=[provider])
    out: list[pulumi.Resource] = [provider]
    zone_findings = _zone_findings(clusters, spec.project, provider, source)
    if zone_findings:
        raise ConfigError(zone_findings)

    storage = {}
    for s in stores:
        storage[s.name] = Storage(s.name, StorageArgs(stack=env.stack, decision=s), opts)
        out.append(storage[s.name])
    if not clusters:
        return out

    network = Network("gcp-network", NetworkArgs(
        cloud=spec, regions=tuple(sorted({c.region for c in clusters})),
        mtu=primary_mtu((c.offering, c.network) for c in clusters),
        environment=env.stack.environment), opts)
    out.append(network)
    findings = [Finding("gpulease:clouds.gcp.subnetwork",
                        f'cluster "{c.name}" runs in {c.region} but the configured network has '
                        f"no subnetwork there; set a subnetwork in {c.region}", source=source)
                for c in clusters if c.region not in network.subnets]
    if findings:
        raise ConfigError(findings)
    for c in clusters:
        if only_clusters is not None and c.name not in only_clusters:
            continue
        deps = tuple(storage[n] for n in (c.spec.dataset,) if n in storage)
        out.append(GpuCluster(c.name, cluster_args(
            c, env.stack, network=network.network, subnetwork=network.subnets[c.region],
            bucket_dependencies=deps), opts))
    return out
