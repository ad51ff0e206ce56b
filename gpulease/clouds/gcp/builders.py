"""Pure builders for the GCP components: NIC layouts, MTUs, CIDRs, names, lifecycle, scheduling.

Everything here is a plain function of the domain model (no Pulumi), so it is table-tested in
``tests/test_gcp_layout.py``; the ComponentResources only assemble what these return.
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Optional

from gpulease.catalog import TIER_CLASSES
from gpulease.errors import ConfigError, Finding
from gpulease.model import ClusterDecision, Offering, StorageSpec
from gpulease.clouds.gcp.cloud import prefix_condition  # noqa: F401 (lives there: staging reads it too)
from gpulease.purchase import CALENDAR, FLEX_START, NODE_MODELS, ON_DEMAND, RESERVED, SPOT

#: IAP TCP forwarding source range ("Using IAP for TCP forwarding": allow ingress from
#: 35.235.240.0/20 to reach VMs without external IPs).
IAP_RANGE = "35.235.240.0/20"

#: GPUDirect-TCPX / TCPXO GPU NIC networks use MTU 8244 ("Maximize GPU network bandwidth with
#: GPUDirect-TCPX/TCPXO": every VPC network is created with --mtu=8244).
GPUDIRECT_MTU = 8244
#: RoCE (RDMA network profile) and the gVNIC networks of A3 Ultra / A4 use 8896, the largest
#: MTU a VPC network accepts (Google's A3 Ultra guest-environment test sets `Mtu = 8896 // Max`).
RDMA_MTU = 8896
#: VPC default MTU when nothing needs jumbo frames.
DEFAULT_MTU = 1460

#: Extra GPU NICs per fabric ("GPU machine types / network bandwidth": A3 High has 4 GPU NICs
#: for GPUDirect-TCPX, A3 Mega 8 for TCPXO; A3 Ultra / A4 have 8 ConnectX-7 MRDMA NICs plus
#: 2 gVNICs, the second gVNIC on its own regular VPC).
GPU_NICS = {"gpudirect-tcpx": 4, "gpudirect-tcpxo": 8, "rdma": 8}

#: Machine series (prefix of the machine type) that accept a compact placement policy among
#: the GPU series gpulease uses ("Placement policies overview": A2, A3, A4, G2 are supported;
#: N1 is not).
COMPACT_PLACEMENT_SERIES = ("a2-", "a3-", "a4-", "g2-")
#: Upper bound on ``vm_count`` of one compact placement policy. With ``collocation=COLLOCATED``
#: the provider requires ``vm_count`` and exactly that many VMs must be created together
#: (pulumi-gcp ResourcePolicyGroupPlacementPolicy docs), so the policy is sized per MIG.
COMPACT_PLACEMENT_MAX_VMS = 1500

#: Boot disk types: A3 Ultra and A4 boot only from Hyperdisk ("A3 Ultra / A4 machine series:
#: supported disk types: Hyperdisk Balanced ..."); the others boot from pd-balanced.
HYPERDISK_ONLY_SERIES = ("a3-ultragpu-", "a4-")
BOOT_DISK_GB = 200
#: Ubuntu accelerator images ship the NVIDIA driver and run cloud-init, so the `user-data`
#: metadata key (our rendered cloud-config) is applied at boot (AI Hypercomputer "OS images").
BOOT_IMAGE = ("projects/ubuntu-os-accelerator-images/global/images/family/"
              "ubuntu-accelerator-2204-amd64-with-nvidia-570")

#: Least-privilege project roles of a node service account (bucket roles are granted on the
#: buckets themselves): metrics and logs written by the Ops Agent. Its one compute read (the
#: instance list: rendezvous peers, autostop labels) is a custom role of one permission
#: (gpulease.clouds.gcp.node_iam), not roles/compute.viewer; it holds no compute write.
PROJECT_ROLES = ("roles/monitoring.metricWriter", "roles/logging.logWriter")
DATASET_ROLE = "roles/storage.objectViewer"
CHECKPOINT_ROLE = "roles/storage.objectUser"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)

# ---- NICs and networks ------------------------------------------------------------------
def fabric_of(offering: Offering, network: Optional[str] = None) -> str:
    """The fabric a node is wired for: the decision's network, else the offering's RDMA kind."""
    fabric = offering.rdma if network is None else network
    return fabric if fabric in GPU_NICS else "none"


def nic_type(offering: Offering) -> Optional[str]:
    """gVNIC on every series that supports it; N1 keeps the default virtio-net."""
    return None if offering.instance_type.startswith("n1-") else "GVNIC"


def nic_layout(offering: Offering, network: Optional[str] = None) -> list[dict]:
    """Network interfaces of one node, in attachment order.

    Each entry: ``index``, ``network`` (key: "primary", "gpu-<i>", "gvnic-1" or "rdma"),
    ``subnet`` (key of the subnet inside that network), ``nic_type`` (None = default) and
    ``mtu`` (of the network the NIC attaches to; None = the primary network's own MTU).
    """
    fabric = fabric_of(offering, network)
    primary = {"index": 0, "network": "primary", "subnet": "primary",
               "nic_type": nic_type(offering), "mtu": None}
    if fabric in ("gpudirect-tcpx", "gpudirect-tcpxo"):
        return [primary] + [
            {"index": i + 1, "network": f"gpu-{i}", "subnet": f"gpu-{i}", "nic_type": "GVNIC",
             "mtu": GPUDIRECT_MTU} for i in range(GPU_NICS[fabric])]
    if fabric == "rdma":
        return [primary, {"index": 1, "network": "gvnic-1", "subnet": "gvnic-1",
                          "nic_type": "GVNIC", "mtu": RDMA_MTU}] + [
            {"index": i + 2, "network": "rdma", "subnet": f"rdma-{i}", "nic_type": "MRDMA",
             "mtu": RDMA_MTU} for i in range(GPU_NICS["rdma"])]
    return [primary]


def extra_networks(layout: list[dict]) -> dict[str, dict]:
    """Cluster-owned networks a layout needs: key -> {"mtu", "subnets": [...], "rdma": bool}."""
    out: dict[str, dict] = {}
    for nic in layout:
        if nic["network"] == "primary":
            continue
        net = out.setdefault(nic["network"], {"mtu": nic["mtu"], "subnets": [],
                                              "rdma": nic["nic_type"] == "MRDMA"})
        net["subnets"].append(nic["subnet"])
    return out


def primary_mtu(offerings_and_networks: Iterable[tuple[Offering, str]]) -> int:
    """MTU of the created primary VPC: the largest any cluster in it is wired for.

    Google's GPUDirect guides create the management (primary) network with the same jumbo MTU
    as the GPU networks; plain GPU nodes keep the VPC default.
    """
    mtu = DEFAULT_MTU
    for offering, network in offerings_and_networks:
        fabric = fabric_of(offering, network)
        if fabric in ("gpudirect-tcpx", "gpudirect-tcpxo"):
            mtu = max(mtu, GPUDIRECT_MTU)
        elif fabric == "rdma":
            mtu = max(mtu, RDMA_MTU)
    return mtu


def primary_subnet_cidr(index: int) -> str:
    """CIDR of the primary subnet of the index-th region (sorted): 10.(20+i).0.0/16."""
    if not 0 <= index < 200:
        raise ValueError(f"region index {index} out of range")
    return f"10.{20 + index}.0.0/16"


def extra_subnet_cidr(position: int) -> str:
    """CIDR of the position-th subnet of a cluster's GPU networks (each its own VPC)."""
    if not 0 <= position < 250:
        raise ValueError(f"subnet position {position} out of range")
    return f"192.168.{position + 1}.0/24"


def rdma_network_profile(project: str, zone: str) -> str:
    """RoCE network profile URL: ``ZONE-vpc-roce`` ("RDMA network profiles")."""
    return f"projects/{project}/global/networkProfiles/{zone}-vpc-roce"


# ---- placement, zone, machine ----------------------------------------------------------------
def supports_compact_placement(offering: Offering) -> bool:
    return offering.instance_type.startswith(COMPACT_PLACEMENT_SERIES)


def standing_nodes(decision: ClusterDecision, model: str) -> int:
    """Nodes of one purchase model's MIG started when it is created (its ``target_size``): the
    baseline's and the reserved ones (billed every hour anyway). The burst above is added by
    resizing the MIG and removed by node autostop / the reaper."""
    return sum(b.nodes for b in decision.node_blocks if b.purchase == model
               and (b.part == "baseline" or b.purchase == RESERVED))


def created_whole(decision: ClusterDecision, model: str) -> bool:
    """True when a MIG's nodes start together: all at creation, or all in one burst step."""
    blocks = [b for b in decision.node_blocks if b.purchase == model]
    standing = standing_nodes(decision, model)
    nodes = sum(b.nodes for b in blocks)
    return standing == nodes or (standing == 0 and len({b.step for b in blocks}) == 1)


def placement_vm_count(decision: ClusterDecision, model: str) -> Optional[int]:
    """``vm_count`` of the compact placement policy of one MIG, or None (no policy).

    Only distributed clusters on a supporting series get one, the reserved MIG included: its
    reservation is created with the same policy (``gpulease.clouds.gcp.reservation``), since a VM
    with a compact policy only consumes a reservation that carries it. A COLLOCATED policy needs
    exactly ``vm_count`` VMs created together (pulumi-gcp ResourcePolicyGroupPlacementPolicy),
    so a MIG whose nodes start in more than one step (baseline plus burst, or several burst
    steps of a demand profile) gets none: its VMs stay in the cluster's one zone.
    """
    nodes = getattr(decision.purchase, model)
    if window_model(decision) in (FLEX_START, CALENDAR):
        return None   # a queued flex-start run / a calendar-mode reservation: no compact policy
    if (not decision.distributed or nodes < 2
            or not supports_compact_placement(decision.offering)
            or not created_whole(decision, model)):
        return None
    if nodes > COMPACT_PLACEMENT_MAX_VMS:
        raise ConfigError([Finding(
            decision.spec.config_path,
            f"{nodes} {model} nodes exceed the {COMPACT_PLACEMENT_MAX_VMS} VMs one GCP compact "
            "placement policy can hold; lower gpus or split the cluster")])
    return nodes


def cluster_zone(decision: ClusterDecision) -> Optional[str]:
    """The single zone of the cluster: the decision's, else the first catalog zone, else None."""
    if decision.zone:
        return decision.zone
    return decision.offering.zones[0] if decision.offering.zones else None


def boot_disk_type(offering: Offering) -> str:
    return ("hyperdisk-balanced" if offering.instance_type.startswith(HYPERDISK_ONLY_SERIES)
            else "pd-balanced")


def guest_accelerators(offering: Offering) -> list[dict]:
    """Attached GPUs: only N1 takes them (A2/A3/A4/G2 have their GPUs built in)."""
    if offering.accelerator_type and offering.instance_type.startswith("n1-"):
        return [{"type": offering.accelerator_type, "count": offering.gpus_per_node}]
    return []


def window_model(decision: ClusterDecision) -> Optional[str]:
    """How a cluster's window is bought (None for a monthly load)."""
    w = getattr(decision, "window", None)
    return w.model if w is not None else None


def flex_run_seconds(decision: ClusterDecision) -> int:
    """A flex-start window's run in whole seconds (``maxRunDuration`` / the resize request's
    ``requestedRunDuration``), rounded up."""
    return int(-(-decision.window.run_hours * 3600 // 1))


def scheduling(model: str, termination_action: str, *,
               flex_run_seconds: Optional[int] = None) -> dict:
    """Instance template scheduling block for a purchase model.

    GPU VMs cannot live-migrate: ``on_host_maintenance`` must be TERMINATE ("GPUs on Compute
    Engine: handling host events"). Spot needs ``provisioning_model=SPOT`` with
    ``preemptible=True`` and ``automatic_restart=False`` (the provider rejects SPOT otherwise).
    A flex-start window (``flex_run_seconds``) runs its nodes as ``FLEX_START``: the provider
    wants ``automatic_restart`` false, ``instance_termination_action`` DELETE and a
    ``max_run_duration`` (pulumi-gcp 10.2, InstanceTemplate scheduling.provisioning_model).
    """
    if flex_run_seconds is not None:
        return {"provisioning_model": "FLEX_START", "automatic_restart": False,
                "on_host_maintenance": "TERMINATE", "instance_termination_action": "DELETE",
                "max_run_duration": {"seconds": flex_run_seconds}}
    if model == SPOT:
        return {"provisioning_model": "SPOT", "preemptible": True, "automatic_restart": False,
                "on_host_maintenance": "TERMINATE",
                "instance_termination_action": termination_action}
    if model in (ON_DEMAND, RESERVED):
        return {"provisioning_model": "STANDARD", "preemptible": False,
                "automatic_restart": True, "on_host_maintenance": "TERMINATE"}
    raise ValueError(f"unknown purchase model {model!r}")


def node_metadata(user_data: str) -> dict[str, str]:
    """Instance metadata: OS Login on, project-wide SSH keys and the serial console off, guest
    attributes on (the node writes its busy witness there through the metadata server:
    contract C10, docs/reaper.md)."""
    return {"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE",
            "serial-port-enable": "FALSE", "enable-guest-attributes": "TRUE",
            "user-data": user_data}


def models_with_nodes(decision: ClusterDecision) -> list[str]:
    return [m for m in NODE_MODELS if getattr(decision.purchase, m) > 0]


def gcp_name(value: str) -> str:
    """A GCP resource name fragment: purchase model ``on_demand`` -> ``on-demand``."""
    return value.replace("_", "-")


# ---- IAM ---------------------------------------------------------------------------------
def service_account_id(environment: str, cluster: str) -> str:
    """Service account id (6-30 chars, ``[a-z]([-a-z0-9]*[a-z0-9])``), unique per env+cluster."""
    base = f"gpu-{environment}-{cluster}"
    if len(base) > 30:
        digest = hashlib.sha1(base.encode()).hexdigest()[:5]
        base = f"{base[:24].rstrip('-')}-{digest}"
    return base


def split_gs_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/prefix/`` -> ("bucket", "prefix/")."""
    if not uri.startswith("gs://"):
        raise ValueError(f"not a gs:// URI: {uri}")
    bucket, _, prefix = uri[len("gs://"):].partition("/")
    return bucket, prefix


# ---- storage lifecycle ---------------------------------------------------------------------
def lifecycle_rules(spec: StorageSpec, *, noncurrent: bool = True) -> list[dict]:
    """GCS lifecycle rules: SetStorageClass by age down the tiers, and noncurrent cleanup.

    Each transition only matches objects still in a warmer class, so a later rule never moves
    data back up (GCS applies SetStorageClass only to colder classes anyway).
    """
    classes = TIER_CLASSES["gcp"]
    ages = (spec.warm_after_days, spec.cold_after_days, spec.archive_after_days)
    rules: list[dict] = []
    warmer = [classes[0]]
    last = 0
    for cls, age in zip(classes[1:], ages):
        if age is None:
            continue
        if age <= last:
            raise ConfigError([Finding(
                f"gpulease:storage[{spec.name}]",
                f"tier ages must increase: {cls} after {age} days is not after {last}")])
        rules.append({"action": {"type": "SetStorageClass", "storage_class": cls},
                      "condition": {"age": age, "matches_storage_classes": list(warmer)}})
        warmer.append(cls)
        last = age
    if noncurrent:
        rules.append({"action": {"type": "Delete"},
                      "condition": {"days_since_noncurrent_time": spec.noncurrent_days,
                                    "with_state": "ARCHIVED"}})
    return rules
