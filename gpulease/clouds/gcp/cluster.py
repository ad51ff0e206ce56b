"""`gpulease:gcp:GpuCluster`: node service account, GPU networks, firewall, placement, capacity.

One instance template and one zonal MIG per purchase model the plan uses (reserved /
on-demand / spot), a specific reservation for the reserved nodes, compact placement for
distributed clusters, and the cluster's work bucket when its dataset lives elsewhere. With a
demand profile each MIG starts with its standing nodes (baseline and reserved) and grows by
the burst; its template labels the VMs with their demand part and the MIG's baseline floor.
The assembly follows the pure builders in :mod:`gpulease.clouds.gcp.builders`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import pulumi
import pulumi_gcp as gcp

from gpulease import money, naming
from gpulease.clouds.gcp import builders, node_iam, staging
from gpulease.clouds.gcp.cloud import cluster_migs, mig_name  # (there: the reaper's IAM and the node scripts read them)
from gpulease.clouds.gcp.reservation import GceReservation
from gpulease.clouds.gcp.storage import make_bucket
from gpulease import tags
from gpulease.costing.context import CostContext
from gpulease.clock import format_utc
from gpulease.model import ClusterDecision, StackSpec, StorageSpec
from gpulease.naming import StagingRoute
from gpulease.purchase import (CALENDAR, FLEX_START, MIXED, ON_DEMAND, RESERVATION, RESERVED,
                               SPOT)

CLUSTER_TYPE = "gpulease:gcp:GpuCluster"
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


def render_user_data(*, stack: StackSpec, decision: ClusterDecision, purchase_model: str) -> str:
    """The node cloud-config from the bootstrap templates (``gpulease.bootstrap.render``)."""
    try:
        from gpulease.bootstrap.render import render_user_data as render
    except ModuleNotFoundError as exc:  # pragma: no cover - only before the bootstrap lands
        if exc.name != "gpulease.bootstrap.render":
            raise
        raise RuntimeError("gpulease/bootstrap/render.py is missing: the GCP component needs "
                           "render_user_data() for the node cloud-config") from None
    return render(stack=stack, decision=decision, purchase_model=purchase_model)


@dataclass(frozen=True)
class GpuClusterArgs:
    """What the component reads: the decision, the names and paths the stack gives it
    (``gpulease.naming``), and this cloud's network and project (the same order as the AWS
    component's fields, then the GCP ones)."""

    decision: ClusterDecision
    #: the stack's environment (names and descriptions of the children)
    environment: str
    #: the cluster's work bucket (staged dataset and checkpoints); None = none, the cluster
    #: runs beside its dataset (``gpulease.naming.needs_work_bucket``)
    work_bucket_name: Optional[str]
    #: buckets are protected (a prod stack)
    protect_buckets: bool
    #: where the nodes read the dataset (None = no dataset) and write checkpoints
    dataset_uri: Optional[str]
    checkpoint_uri: str
    #: the monthly copy of the dataset into the work bucket; None = none
    staging: Optional[StagingRoute]
    #: purchase model -> rendered cloud-config (:func:`render_user_data`)
    user_data: Callable[[str], str]
    #: primary network (self link / name) and the subnetwork of the cluster's region.
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    project: str
    #: GCE name of the reservation of the reserved nodes (:func:`reservation_name`)
    reservation_name: str
    #: the stack configures AWS (staging from S3 declares the role there)
    aws_configured: bool = False
    spot_termination_action: str = "DELETE"
    ssh_via_iap: bool = False
    #: resources the bucket IAM bindings wait for (the Storage components of the datasets).
    bucket_dependencies: tuple = ()
    #: window work on spot (gpulease.deadline.controls): the restart overhead of a switch in
    #: minutes; the component then declares an on-demand MIG of the same nodes at 0 beside the
    #: spot MIG, both labelled for the reaper's deadline step. None = none.
    deadline_restart_minutes: Optional[float] = None


def resource_names(name: str, decision: ClusterDecision, work_bucket: bool) -> dict:
    """Logical names of the children the cost context refers to."""
    models = builders.models_with_nodes(decision)
    return {
        "models": models,
        "migs": {m: f"{name}-{m}" for m in models},
        "templates": {m: f"{name}-{builders.gcp_name(m)}-template" for m in models},
        "work_bucket": f"{name}-work" if work_bucket else None,
    }


def reservation_name(stack: StackSpec, name: str) -> str:
    """Explicit GCE name of a compact-placement reservation (dynamic resources are not
    auto-named): unique per environment and cluster, at most 63 characters."""
    return naming.fit_name(f"{stack.name_prefix}-{stack.environment}-{name}-reserved")


class GpuCluster(pulumi.ComponentResource):
    service_account: gcp.serviceaccount.Account
    templates: dict
    migs: dict
    reservation: Optional[gcp.compute.Reservation]
    work_bucket: Optional[gcp.storage.Bucket]

    def __init__(self, name: str, args: GpuClusterArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(CLUSTER_TYPE, name, None, opts)
        d = args.decision
        self.names = resource_names(name, d, args.work_bucket_name is not None)
        self.wmodel = builders.window_model(d)
        self.deadline = (args.deadline_restart_minutes is not None
                         and self.names["models"] == [SPOT])
        self._cost_context(name, d)
        if self.deadline:
            self._deadline_groups(name, args.deadline_restart_minutes,
                                  builders.split_gs_uri(args.checkpoint_uri)[0])
        child = pulumi.ResourceOptions(parent=self)
        self.zone = builders.cluster_zone(d)
        if self.zone is None:  # the adaptor reports it, located; no "<region>-a" guess
            raise ValueError(f"{d.name}: no zone for {d.offering.instance_type} in {d.region}")
        self._identity(name, args, child)
        self._work_bucket(name, args)
        self._network(name, args, child)
        self._placement(name, args, child)
        self._reservation(name, args, child)
        self._node_groups(name, args, child)
        self.register_outputs({
            "service_account": self.email,
            "migs": {m: mig.name for m, mig in self.migs.items()},
            "zone": self.zone,
        })

    def _cost_context(self, name: str, d: ClusterDecision) -> None:
        """What the cost transform stamps on each child (roles, demand parts, prepaid ends)."""
        names = self.names
        models: list[str] = names["models"]
        roles = {}
        for m in models:
            roles[names["migs"][m]] = m
            roles[names["templates"][m]] = m
        self.cost_context = CostContext(
            cluster=d.name, template=d.template,
            purchase_model=models[0] if len(models) == 1 else MIXED,
            decision=d, roles=roles,
            anchor=names["migs"][models[0]] if models else None,
            egress_anchor=names["work_bucket"],
            # reserved nodes existing holdings cover buy nothing new (policy.holdings)
            reservation_created=d.buys_reservation,
            idle_minutes=d.spec.idle_minutes)
        # Demand parts (clusters with a demand profile): the nodes each MIG runs; its template
        # labels the VMs with the part and the MIG's baseline floor for the reaper.
        for m in models:
            self.cost_context.stamp_demand(names["migs"][m], (m,))
            self.cost_context.stamp_demand(names["templates"][m], (m,), floor=True)
        self.cost_context.stamp_demand(f"{name}-reservation", (RESERVED,))
        # A window's nodes are billed until its calendar-mode reservation / flex-start run ends
        # whether they run or not (C3): the template labels its VMs, the MIG carries it too.
        if self.wmodel in (CALENDAR, FLEX_START) and d.window.bought_until is not None:
            until = d.window.bought_until.timestamp()
            m = RESERVED if self.wmodel == CALENDAR else ON_DEMAND
            if m in models:
                self.cost_context.billed_until[names["migs"][m]] = until
                self.cost_context.billed_until[names["templates"][m]] = until

    def _deadline_groups(self, name: str, restart_minutes: float, progress_bucket: str) -> None:
        """Window work on spot: an on-demand MIG (and template) of the same nodes at target
        size 0 beside the spot MIG. It runs nothing until the reaper's deadline step switches
        to it, so it carries no cost in the plan; both templates label their VMs with the
        job (tags.DEADLINE_*; no progress URI - a label cannot hold one - but the checkpoint
        bucket's name, tags.DEADLINE_PROGRESS_BUCKET: the object in it is
        gpulease.naming.progress_object of the cluster)."""
        names, ctx = self.names, self.cost_context
        names["models"] = [SPOT, ON_DEMAND]
        names["migs"][ON_DEMAND] = f"{name}-{ON_DEMAND}"
        names["templates"][ON_DEMAND] = f"{name}-{builders.gcp_name(ON_DEMAND)}-template"
        for m in (SPOT, ON_DEMAND):
            for res in (names["migs"][m], names["templates"][m]):
                ctx.roles[res] = m
                ctx.stamp_deadline(res, m, restart_minutes=restart_minutes,
                                   progress_bucket=progress_bucket)
        ctx.fixed_monthly[names["migs"][ON_DEMAND]] = money.ZERO
        ctx.fixed_monthly[names["templates"][ON_DEMAND]] = money.ZERO

    def _identity(self, name: str, args: GpuClusterArgs, child: pulumi.ResourceOptions) -> None:
        """The nodes' service account and its project roles."""
        self.service_account = gcp.serviceaccount.Account(
            f"{name}-sa", account_id=builders.service_account_id(args.environment, name),
            display_name=f"gpulease {args.environment} {name} GPU nodes", opts=child)
        self.email = self.service_account.email
        self.member = self.email.apply(lambda e: f"serviceAccount:{e}")
        for role in builders.PROJECT_ROLES:
            gcp.projects.IAMMember(f"{name}-{role.split('/')[-1].replace('.', '-')}",
                                   project=args.project, role=role, member=self.member,
                                   opts=child)
        # no compute write at all: the node asks to leave, the reaper acts; it reads its own
        # cluster's MIGs and VMs only (node_iam), the MIGs _node_groups declares below
        self.read_role = node_iam.declare_node_reader(
            name, environment=args.environment, project=args.project, zone=self.zone,
            migs=cluster_migs(name, self.names["models"]), member=self.member, parent=self)

    def _work_bucket(self, name: str, args: GpuClusterArgs) -> None:
        """The work bucket (a dataset homed elsewhere), the nodes' dataset and checkpoint
        grants, and the monthly dataset copy the policy charges for."""
        d = args.decision
        self.work_bucket = None
        if self.names["work_bucket"]:
            work_spec = StorageSpec(name=f"{name}-work", size_tb=0.0, home_cloud="gcp",
                                    home_region=d.region, warm_after_days=None,
                                    cold_after_days=None, archive_after_days=None)
            self.work_bucket = make_bucket(
                self.names["work_bucket"], bucket_name=args.work_bucket_name,
                region=d.region, protect=args.protect_buckets,
                lifecycle=builders.lifecycle_rules(work_spec),
                parent=self, purpose="work")
        bucket_deps = list(args.bucket_dependencies) + (
            [self.work_bucket] if self.work_bucket is not None else [])
        iam_opts = pulumi.ResourceOptions(parent=self, depends_on=bucket_deps)
        data_uri = args.dataset_uri
        if data_uri:
            bucket, prefix = builders.split_gs_uri(data_uri)
            gcp.storage.BucketIAMMember(
                f"{name}-dataset-read", bucket=bucket, role=builders.DATASET_ROLE,
                member=self.member,
                condition=builders.prefix_condition(bucket, prefix, "dataset-read-only"),
                opts=iam_opts)
        ckpt_bucket, ckpt_prefix = builders.split_gs_uri(args.checkpoint_uri)
        gcp.storage.BucketIAMMember(
            f"{name}-checkpoints", bucket=ckpt_bucket, role=builders.CHECKPOINT_ROLE,
            member=self.member,
            condition=builders.prefix_condition(ckpt_bucket, ckpt_prefix, "own-checkpoints-only"),
            opts=iam_opts)
        self.staging = staging.declare_staging(
            name, route=args.staging, environment=args.environment,
            aws_configured=args.aws_configured, decision=d, project=args.project,
            work_bucket=self.work_bucket, parent=self,
            bucket_dependencies=tuple(args.bucket_dependencies))

    def _network(self, name: str, args: GpuClusterArgs, child: pulumi.ResourceOptions) -> None:
        """Firewall rules, the GPU NIC networks beyond the primary, and the nodes' interfaces."""
        nics = builders.nic_layout(args.decision.offering, args.decision.network)
        self._internal_firewall(f"{name}-internal", args.network, self.email, child)
        if args.ssh_via_iap:
            gcp.compute.Firewall(
                f"{name}-iap-ssh", network=args.network, direction="INGRESS", priority=1000,
                description="SSH through IAP TCP forwarding only",
                allows=[{"protocol": "tcp", "ports": ["22"]}],
                source_ranges=[builders.IAP_RANGE], target_service_accounts=[self.email],
                opts=child)
        networks: dict = {"primary": args.network}
        subnets: dict = {"primary": args.subnetwork}
        position = 0
        for key, net in builders.extra_networks(nics).items():
            vpc = self._extra_network(name, key, net, args, child)
            networks[key] = vpc.self_link
            for sub_key in net["subnets"]:
                sub = gcp.compute.Subnetwork(
                    f"{name}-{sub_key}" if sub_key != key else f"{name}-{key}-subnet",
                    region=args.decision.region, network=vpc.id,
                    ip_cidr_range=builders.extra_subnet_cidr(position), opts=child)
                subnets[sub_key] = sub.self_link
                position += 1
            if not net["rdma"]:
                # RoCE networks carry only MRDMA NICs of this cluster; Google's A3 Ultra / A4
                # guides create no VPC firewall rule for them.
                self._internal_firewall(f"{name}-{key}-internal", networks[key], self.email,
                                        child)
        self.interfaces = []
        for nic in nics:
            iface = {"network": networks[nic["network"]], "subnetwork": subnets[nic["subnet"]]}
            if nic["nic_type"]:
                iface["nic_type"] = nic["nic_type"]
            self.interfaces.append(iface)  # no access_configs: no external IP

    def _extra_network(self, name: str, key: str, net: dict, args: GpuClusterArgs,
                       child: pulumi.ResourceOptions) -> gcp.compute.Network:
        """One GPU NIC network (RDMA ones on the zone's RoCE profile)."""
        profile = None
        if net["rdma"]:
            profile = pulumi.Output.from_input(self.zone).apply(
                lambda z: builders.rdma_network_profile(args.project, z))
        return gcp.compute.Network(
            f"{name}-{key}", auto_create_subnetworks=False, mtu=net["mtu"],
            network_profile=profile, routing_mode="REGIONAL",
            description=f"gpulease {name} GPU NIC network {key}", opts=child)

    def _placement(self, name: str, args: GpuClusterArgs, child: pulumi.ResourceOptions) -> None:
        """Compact placement policies of the purchase models that need one."""
        d = args.decision
        self.policies: dict = {}
        for model in self.names["models"]:
            vm_count = builders.placement_vm_count(d, model)
            if vm_count:
                self.policies[model] = gcp.compute.ResourcePolicy(
                    f"{name}-{builders.gcp_name(model)}-placement", region=d.region,
                    group_placement_policy={"collocation": "COLLOCATED", "vm_count": vm_count},
                    description=f"gpulease {name}: compact placement of the {model} nodes",
                    opts=child)

    def _reservation(self, name: str, args: GpuClusterArgs,
                     child: pulumi.ResourceOptions) -> None:
        """The reserved nodes' capacity: a calendar-mode future reservation (a window), a
        compact-placement reservation, or a plain specific reservation."""
        d, zone = args.decision, self.zone
        self.reservation = None
        self.reserved_name = None
        acc = builders.guest_accelerators(d.offering)
        props: dict = {"machine_type": d.offering.instance_type}
        if acc:
            props["guest_accelerators"] = [
                {"accelerator_type": a["type"], "accelerator_count": a["count"]} for a in acc]
        if self.wmodel == CALENDAR:
            # A calendar-mode future reservation (Compute Engine, "Reserve capacity in calendar
            # mode"): Google creates the reservation at its start and deletes it at its end.
            self.reserved_name = args.reservation_name
            self.reservation = gcp.compute.FutureReservation(
                f"{name}-reservation", zone=zone, reservation_mode="CALENDAR",
                time_window={"start_time": format_utc(d.window.bought_from),
                             "end_time": format_utc(d.window.bought_until)},
                specific_sku_properties={"total_count": str(d.purchase.reserved),
                                         "instance_properties": props},
                reservation_name=self.reserved_name, specific_reservation_required=True,
                auto_delete_auto_created_reservations=True, planning_status="SUBMITTED",
                description=f"gpulease {name}: calendar-mode reservation for its window",
                opts=child)
        elif not d.buys_reservation:
            # every reserved node is covered by an existing commitment or reservation
            # (docs/owned.md): nothing new is reserved; a covering reservation is consumed
            held = [x.holding for x in d.coverage if x.model == RESERVATION]
            self.reserved_name = held[0] if held else None
        elif d.purchase.reserved > 0 and RESERVED in self.policies:
            # A VM with a compact policy consumes only a reservation created with the same
            # policy, which pulumi-gcp's Reservation cannot express: the Compute API can.
            self.reservation = GceReservation(
                f"{name}-reservation", project=args.project, zone=zone,
                name=args.reservation_name, machine_type=d.offering.instance_type,
                count=d.purchase.reserved - d.covered_nodes, accelerators=acc,
                placement_policy=self.policies[RESERVED].self_link,
                description=f"gpulease {name}: reserved baseline, compact placement",
                opts=child)
        elif d.purchase.reserved > 0:
            self.reservation = gcp.compute.Reservation(
                f"{name}-reservation", zone=zone, specific_reservation_required=True,
                specific_reservation={"count": d.purchase.reserved - d.covered_nodes,
                                      "instance_properties": props},
                description=f"gpulease {name}: reserved baseline", opts=child)

    def _instance_template(self, name: str, model: str, args: GpuClusterArgs,
                           child: pulumi.ResourceOptions) -> gcp.compute.InstanceTemplate:
        """The instance template of one purchase model's nodes."""
        d = args.decision
        # pulumi-gcp 10 types this as one self link ("a max of 1 resource policy").
        policy_link = self.policies[model].self_link if model in self.policies else None
        template_args = dict(
            machine_type=d.offering.instance_type,
            description=f"gpulease {name} {model} node",
            disks=[{"boot": True, "auto_delete": True, "source_image": builders.BOOT_IMAGE,
                    "disk_size_gb": builders.BOOT_DISK_GB,
                    "disk_type": builders.boot_disk_type(d.offering)}],
            network_interfaces=self.interfaces,
            scheduling=builders.scheduling(
                model, args.spot_termination_action,
                flex_run_seconds=builders.flex_run_seconds(d)
                if self.wmodel == FLEX_START and model == ON_DEMAND else None),
            shielded_instance_config={"enable_secure_boot": True, "enable_vtpm": True,
                                      "enable_integrity_monitoring": True},
            metadata=builders.node_metadata(args.user_data(model)),
            service_account={"email": self.email, "scopes": list(builders.SCOPES)},
            resource_policies=policy_link,
            # the node publishes its busy witness (contract C10, a guest attribute)
            labels={tags.BUSY_WITNESS: "1"},
        )
        acc = builders.guest_accelerators(d.offering)
        if acc:
            template_args["guest_accelerators"] = acc
        if model == RESERVED and (self.reservation is not None or self.reserved_name):
            template_args["reservation_affinity"] = {
                "type": "SPECIFIC_RESERVATION",
                "specific_reservation": {"key": RESERVATION_KEY, "values": [
                    self.reserved_name if self.reserved_name else self.reservation.name]}}
        return gcp.compute.InstanceTemplate(self.names["templates"][model], **template_args,
                                            opts=child)

    def _node_groups(self, name: str, args: GpuClusterArgs,
                     child: pulumi.ResourceOptions) -> None:
        """One template and zonal MIG per purchase model, and a flex-start window's resize
        request."""
        d, flex = args.decision, self.wmodel == FLEX_START
        self.templates, self.migs = {}, {}
        for model in self.names["models"]:
            tpl = self.templates[model] = self._instance_template(name, model, args, child)
            self.migs[model] = gcp.compute.InstanceGroupManager(
                self.names["migs"][model], name=mig_name(name, model),
                base_instance_name=name, zone=self.zone,
                versions=[{"instance_template": tpl.self_link, "name": builders.gcp_name(model)}],
                # The standing nodes (baseline, reserved); the burst joins by resizing. A
                # flex-start window starts empty: its resize request brings the nodes.
                target_size=0 if (flex or self.deadline) and model == ON_DEMAND
                else builders.standing_nodes(d, model),
                # Training nodes are replaced only when recreated anyway (no rolling restarts
                # mid-run); RECREATE needs max_surge 0 (no spare GPU capacity to surge into).
                update_policy={"type": "OPPORTUNISTIC", "minimal_action": "REPLACE",
                               "replacement_method": "RECREATE", "max_surge_fixed": 0,
                               "max_unavailable_fixed": 1},
                wait_for_instances=False,
                description=f"gpulease {name}: {model} nodes",
                # The reaper resizes MIGs to 0; that must not show up as drift.
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["targetSize"]))
        self.resize_request = None
        if flex and ON_DEMAND in self.migs:
            # Flex-start: a resize request queues for all N VMs at once (all-or-nothing) and
            # they run at most requestedRunDuration (Compute Engine, "Create a MIG with
            # flex-start VMs"; pulumi-gcp 10.2 compute.ResizeRequest). The request is queued
            # when the stack is deployed: deploy when the window opens.
            self.resize_request = gcp.compute.ResizeRequest(
                f"{name}-flex-start", instance_group_manager=self.migs[ON_DEMAND].name,
                zone=self.zone, resize_by=d.purchase.on_demand,
                requested_run_duration={"seconds": str(builders.flex_run_seconds(d))},
                description=f"gpulease {name}: flex-start run of its window", opts=child)

    def _internal_firewall(self, rname: str, network: pulumi.Input[str],
                           email: pulumi.Output, child: pulumi.ResourceOptions) -> None:
        """All traffic between this cluster's nodes only (matched by their service account)."""
        gcp.compute.Firewall(
            rname, network=network, direction="INGRESS", priority=1000,
            description="gpulease: node-to-node traffic inside one cluster",
            allows=[{"protocol": "tcp"}, {"protocol": "udp"}, {"protocol": "icmp"}],
            source_service_accounts=[email], target_service_accounts=[email], opts=child)
