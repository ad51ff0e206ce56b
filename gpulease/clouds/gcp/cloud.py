"""Google Cloud as the shared code sees it: its Cloud object (words, encodings, defaults, module
paths), and the names of its node groups (the reaper's IAM condition needs them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from gpulease import tags
from gpulease.clouds.base import Cloud
from gpulease.purchase import (CALENDAR, COMMITMENT, FLEX_START, FUTURE_RESERVATION,
                               ON_DEMAND, RESERVATION, SPOT)

#: accelerator-optimized series sold with flex-start (Dynamic Workload Scheduler) and as
#: calendar-mode future reservations.
WINDOW_SERIES = ("a2", "a3", "a4", "g2")
#: GCP project ids: 6-30 characters, lowercase letters, digits and hyphens, starting with a letter,
#: not ending with a hyphen (Resource Manager docs, "Creating and managing projects"). The stack
#: config's schema and the GCE reservation provider both check with it.
GCP_PROJECT_PATTERN = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$"

#: region prefix -> continent (GCP region names: ``<area>-<direction><n>``).
_CONTINENTS = {"us": "north-america", "northamerica": "north-america",
               "southamerica": "south-america", "europe": "europe", "asia": "asia",
               "australia": "oceania", "me": "middle-east", "africa": "africa"}


def mig_name(name: str, model: str) -> str:
    """GCP name of the cluster's MIG for one purchase model (``on_demand`` -> ``on-demand``)."""
    return f"{name}-{model.replace('_', '-')}"


def cluster_migs(name: str, models: Iterable[str], *, deadline_standby: bool = False
                 ) -> tuple[str, ...]:
    """GCP names of every MIG of a cluster, sorted: one per purchase model with nodes, and the
    on-demand standby MIG of window work on spot (gpulease/clouds/gcp/cluster.py declares the
    same; the node's read fence and its scripts both take the list from here)."""
    used = list(models)
    if deadline_standby and used == [SPOT]:
        used.append(ON_DEMAND)
    return tuple(sorted({mig_name(name, m) for m in used}))


def prefix_condition(bucket: str, prefix: str, title: str) -> dict:
    """IAM condition limiting object access to a prefix.

    Object reads/writes are checked against the object's resource name; listing is checked
    against the bucket, so the bucket itself stays allowed ("IAM Conditions for Cloud Storage:
    resource.name.startsWith"), which lets gcsfuse list while data access stays in the prefix.
    """
    return {
        "title": title,
        "description": f"only gs://{bucket}/{prefix}",
        "expression": (f'resource.type == "storage.googleapis.com/Bucket" || '
                       f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}")'),
    }


@dataclass(frozen=True)
class GcpCloud(Cloud):
    def default_zone(self, region: str) -> str:
        return f"{region}-a"

    def continent_of(self, region: str) -> str:
        head = region.split("-", 1)[0]
        return _CONTINENTS.get(head, head)

    def family_of(self, instance_type: str) -> str:
        # a3-highgpu-8g -> a3-highgpu; n1-highmem-8 -> n1 (N1 takes attached GPUs)
        if instance_type.startswith("n1-"):
            return "n1"
        return "-".join(instance_type.split("-")[:2])

    def tag_value(self, value: object) -> str:
        return tags.label_value(value)

    def cost_tags(self, values: Mapping[str, str], monthly_usd: Any,
                  one_time_usd: Any = 0) -> dict[str, str]:
        out = {tags.label_key(k): tags.label_value(v) for k, v in values.items()}
        out[tags.MONTHLY_CENTS] = tags.cents(monthly_usd)   # labels cannot hold "."
        if one_time_usd:
            out[tags.ONE_TIME_CENTS] = tags.cents(one_time_usd)
        return out

    def node_group_models(self, used: tuple[str, ...]) -> tuple[str, ...]:
        return used                                   # one MIG per purchase model

    def node_group_names(self, cluster: str, models: tuple[str, ...], *,
                         deadline_standby: bool) -> tuple[str, ...]:
        return cluster_migs(cluster, models, deadline_standby=deadline_standby)

    def encode_user_data(self, cloud_config: str) -> str:
        # the ``user-data`` metadata value may hold 256 KB: the cloud-config text itself
        return cloud_config

    def project(self, cloud_spec: Optional[object]) -> str:
        return getattr(cloud_spec, "project", None) or ""

    def keeps_sshd(self, cloud_spec: Optional[object]) -> bool:
        # the stack opted into SSH through IAP (AWS nodes are reached through SSM)
        return bool(cloud_spec is not None and getattr(cloud_spec, "ssh_via_iap", False))

    def window_options_by_default(self, instance_type: str) -> frozenset[str]:
        if instance_type.split("-")[0] in WINDOW_SERIES:
            return frozenset({FLEX_START, FUTURE_RESERVATION})
        return frozenset()


GCP = GcpCloud(
    name="gcp", title="Google Cloud", provider="gcp", sdk_package="pulumi_gcp",
    tag_style="labels", node_group="managed instance group", node_templates="instance templates",
    url_scheme="gs", location_scope="project", region_pattern=r"^[a-z]+-[a-z]+\d+$",
    region_example="us-central1",
    zone_pattern=r"^[a-z]+-[a-z]+\d+-[a-z]$", zones_in_region=True,
    zone_text="a GCP zone of {region} like {region}-a",
    zones_text="GCP zones of {region} like {region}-a",
    # GCS storage classes
    storage_classes=("STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"),
    tier_classes=("STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"), min_transition_days=(),
    # GCS Archive stays online: nothing to restore
    restore_classes=(),
    window_models=frozenset({FLEX_START, CALENDAR}), quote_picks_zone=True,
    price_precedence=(
        (ON_DEMAND, "the Cloud Billing Catalog export (Cyclenerd) is Google's SKU list itself; "
                    "SkyPilot's GPU figures match no on-demand SKU in it"),
        (SPOT, "SkyPilot's per-zone spot prices place a cluster in its zone; the export gives "
               "one regional figure")),
    # Spot notice: about 30 s (Compute Engine, "Spot VMs", "Preemption process")
    notice_window_seconds=30, poll_seconds=2, metadata_url="http://metadata.google.internal",
    node_files=(("ops-agent.yaml.j2", "/etc/google-cloud-ops-agent/config.yaml"),),
    credentials_hint="run `gcloud auth application-default login`, or set "
                     "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file",
    deploy_module="gpulease.clouds.gcp.deploy", reaper_module="gpulease.reaper.gcp",
    reaper_deploy_module="gpulease.reaper.gcp_deploy",
    quotes_module="gpulease.quotes.gcp", fetcher_module="gpulease.catalog.fetchers.gcp",
    credentials_module="gpulease.credentials.gcp", cli_module="gpulease.cli.clouds.gcp",
    inventory_kinds=(("gce-commitment", COMMITMENT), ("gce-reservation", RESERVATION),
                     ("gce-future-reservation", FUTURE_RESERVATION)),
    inventory_module="gpulease.inventory.gcp",
)

__all__ = ["GCP", "GcpCloud", "WINDOW_SERIES", "cluster_migs", "mig_name"]
