"""The AWS GPU cluster component: launch template, mixed-instances ASG, reservations, IAM, SG."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Callable, Optional

import pulumi
import pulumi_aws as aws


from gpulease.bootstrap.render import encode_user_data
from gpulease.clouds.aws import builders, staging
from gpulease.clouds.aws import cloud as aws_cloud
from gpulease.clouds.aws.network import Network
from gpulease.clouds.aws.storage import Storage, StorageArgs
from gpulease.clouds.staging import GcsHmac
from gpulease import deadline, money, tags
from gpulease.costing.context import CostContext
from gpulease.model import CapacityBlockPin, ClusterDecision
from gpulease.naming import StagingRoute
from gpulease.purchase import NODE_MODELS, ON_DEMAND, RESERVED, SPOT

CLUSTER_TYPE = "gpulease:aws:GpuCluster"
#: Types sold as EC2 Capacity Blocks for ML (one list: ``gpulease.clouds.aws.cloud``). Other
#: types fall back to an ODCR.
CAPACITY_BLOCK_TYPES = aws_cloud.CAPACITY_BLOCK_TYPES
#: the reaper scales the groups to zero: no drift from it
_SCALED_BY_REAPER = ["desiredCapacity", "minSize"]


@dataclass(frozen=True)
class GpuClusterArgs:
    """What the component reads: the decision, the names and paths the stack gives it
    (``gpulease.naming``), and this cloud's network, provider and capacity (the same order as
    the GCP component's fields, then the AWS ones)."""

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
    #: purchase model ("mixed", "spot", ...) -> rendered cloud-config
    #: (``gpulease.bootstrap.render.render_user_data``); None or a None result = no bootstrap.
    user_data: Optional[Callable[[str], Optional[str]]]
    network: Network
    provider: aws.Provider
    #: the reserved nodes are held in a reservation (``builders.wants_reservation``): the
    #: Capacity Block below, else an On-Demand Capacity Reservation
    reserve: bool
    #: the approved Capacity Block of the reserved nodes (the stack's pin, CONTRACTS C2),
    #: checked by the adaptor before anything is declared; None = no Capacity Block.
    capacity_block: Optional[CapacityBlockPin] = None
    #: the Capacity Block is protected (not in the stack's allow_prepaid_replacement)
    protect_block: bool = True
    #: the stack's GCP project, where a reader of a GCS dataset is declared; None = none
    gcp_project: Optional[str] = None
    #: An existing HMAC key reading the dataset when it lives on GCS (the monthly DataSync copy
    #: into the work bucket's stage/); None = gpulease declares a reader service account and its
    #: key in ``gcp_project`` (``gpulease.clouds.staging.gcs_reader_key``), else warns, no copy.
    gcs_hmac: Optional[GcsHmac] = None
    #: Resources declaring the GCS dataset bucket (the GCP adaptor's Storage), so the reader's
    #: bucket IAM waits for the bucket; empty = none known (the bucket already exists).
    gcs_bucket_dependencies: tuple = ()
    #: window work on spot (gpulease.deadline.controls): the restart overhead of a switch in
    #: minutes (gpulease.deadline.restart_minutes); the component then declares an on-demand
    #: group of the same nodes at zero beside the spot group, both tagged for the reaper's
    #: deadline step. None = no such group.
    deadline_restart_minutes: Optional[float] = None


class GpuCluster(pulumi.ComponentResource):
    """Every AWS resource of one decided GPU cluster.

    Children: [work bucket] -> security group -> IAM role/profile -> [placement group] ->
    [ODCR | Capacity Block] -> launch template -> Auto Scaling group(s).
    """

    uses_capacity_block = staticmethod(builders.uses_capacity_block)

    def __init__(self, name: str, args: GpuClusterArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(CLUSTER_TYPE, name, None, opts)
        self._choose_capacity(args)
        self._cost_context(name, args)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self._work_bucket(name, args)
        self._network(name, args, child)
        self._identity(name, args, child)
        self._reservation(name, args, child)
        self._launch_templates(name, args, child)
        self._node_groups(name, args, child)
        self.register_outputs({
            "asg": self.asg.name if self.asg else None,
            "block_asg": self.block_asg.name if self.block_asg else None,
            "on_demand_asg": self.od_asg.name if self.od_asg else None,
            "launch_template": self.launch_template.id,
            "role": self.role.arn, "security_group": self.security_group.id,
            "reservation": self.reservation.id if self.reservation else None})

    def _choose_capacity(self, args: GpuClusterArgs) -> None:
        """How the reserved nodes are held (Capacity Block, ODCR or neither), and the groups'
        purchase labels."""
        d = args.decision
        p = d.purchase
        self.use_block = args.capacity_block is not None
        self.use_odcr = args.reserve and not self.use_block
        self.work_bucket_needed = args.work_bucket_name is not None
        self.main_nodes = d.nodes - (p.reserved if self.use_block else 0)
        self.label = builders.purchase_label(d)
        # With a Capacity Block the reserved nodes live in their own group.
        self.main_model = self.label if not self.use_block else builders.purchase_label(
            dataclasses.replace(d, purchase=dataclasses.replace(p, reserved=0)))

    def _cost_context(self, name: str, args: GpuClusterArgs) -> None:
        """What the cost transform stamps on each child (roles, demand parts, prepaid ends)."""
        d = args.decision
        asg_name, block_asg_name = f"{name}-asg", f"{name}-block-asg"
        roles = {}
        if self.main_nodes > 0:
            roles[asg_name] = self.main_model
        if self.use_block:
            roles[block_asg_name] = RESERVED
        self.cost_context = CostContext(
            cluster=d.name, template=d.template, purchase_model=self.label, decision=d,
            roles=roles, anchor=asg_name if self.main_nodes > 0 else block_asg_name,
            reservation_created=self.use_odcr or self.use_block,
            idle_minutes=d.spec.idle_minutes,
            egress_anchor=f"{name}-work-bucket" if self.work_bucket_needed else None)
        self.deadline = args.deadline_restart_minutes is not None and self.main_nodes > 0
        if self.deadline:
            # the on-demand group of a window job on spot: it runs nothing until the reaper's
            # deadline step switches to it, so it carries no cost in the plan (the expected
            # fallback is priced with the spot work, gpulease.policy.windows)
            od_asg, od_lt = f"{name}-od-asg", f"{name}-od-lt"
            roles[od_asg] = ON_DEMAND
            self.cost_context.roles[od_lt] = ON_DEMAND
            self.cost_context.fixed_monthly[od_asg] = money.ZERO
            uri = f"{args.checkpoint_uri.rstrip('/')}/{deadline.PROGRESS_OBJECT}"
            for res, role in ((asg_name, SPOT), (od_asg, ON_DEMAND)):
                self.cost_context.stamp_deadline(
                    res, role, restart_minutes=args.deadline_restart_minutes, progress_uri=uri)
        # Demand parts (clusters with a demand profile): which nodes each resource runs or
        # reserves, and the baseline floor of each group, for the bill and the reaper.
        main_models = (ON_DEMAND, SPOT) if self.use_block else NODE_MODELS
        for res, models in ((asg_name, main_models), (f"{name}-lt", main_models),
                            (f"{name}-odcr", (RESERVED,)), (f"{name}-block", (RESERVED,)),
                            (block_asg_name, (RESERVED,)), (f"{name}-block-lt", (RESERVED,))):
            self.cost_context.stamp_demand(res, models,
                                           floor=res in (asg_name, block_asg_name))

        # A window's block: its group's nodes are prepaid until the block ends (C3).
        block_window = builders.window_block(d) if self.use_block else None
        if block_window is not None:
            from gpulease.quotes.model import parse_time

            pinned = args.capacity_block
            until = parse_time(pinned.end if pinned is not None and pinned.end
                               else block_window["end"]).timestamp()
            for res in (block_asg_name, f"{name}-block-lt"):
                self.cost_context.billed_until[res] = until

    def _work_bucket(self, name: str, args: GpuClusterArgs) -> None:
        """The storage the nodes write to, and the monthly dataset copy into its stage/."""
        d = args.decision
        self.work_bucket: Optional[Storage] = None
        if self.work_bucket_needed:
            self.work_bucket = Storage(f"{name}-work", StorageArgs(
                bucket_name=args.work_bucket_name, provider=args.provider,
                lifecycle_rules=builders.lifecycle_rules(None), protect=args.protect_buckets,
                cluster=d), opts=pulumi.ResourceOptions(parent=self))
            # The monthly dataset copy into stage/ that the policy's egress_usd pays for.
            self.staging_task = staging.declare_staging(
                name, route=args.staging, environment=args.environment,
                gcp_project=args.gcp_project, decision=d,
                work_bucket_arn=self.work_bucket.bucket.arn, provider=args.provider,
                parent=self, gcs_hmac=args.gcs_hmac,
                gcs_bucket_dependencies=args.gcs_bucket_dependencies)

    def _network(self, name: str, args: GpuClusterArgs, child: pulumi.ResourceOptions) -> None:
        """Security group, subnets, and the placement group of a distributed cluster."""
        d = args.decision
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg", vpc_id=args.network.vpc_id,
            description=f"gpulease {d.name}: cluster-internal all traffic, HTTPS egress",
            # EFA needs all traffic to and from the group itself, in and out (EC2 User Guide,
            # "Get started with EFA": "Prepare an EFA-enabled security group"). Nothing else
            # comes in: operators use SSM Session Manager, so no port 22 anywhere.
            ingress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True,
                      "description": "EFA/NCCL and rendezvous between cluster nodes"}],
            # Egress: the group itself (EFA), and HTTPS for AWS APIs (SSM, S3, CloudWatch,
            # EC2), package and container registries. DNS (VPC+2), NTP (169.254.169.123) and
            # IMDS are link-local/VPC services that security groups do not filter.
            egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True,
                     "description": "EFA/NCCL between cluster nodes"},
                    {"protocol": "tcp", "from_port": 443, "to_port": 443,
                     "cidr_blocks": ["0.0.0.0/0"], "description": "HTTPS"}],
            tags={"Name": f"{name}-sg"}, opts=child)
        one_az = d.distributed or self.use_odcr
        self.subnets = args.network.subnets_for(builders.cluster_zones(d), one_az=one_az)

        self.placement_group = None
        if d.distributed:
            # Cluster strategy packs the nodes close for the lowest EFA latency (EC2 User
            # Guide, "Placement strategies"); all members must be in one AZ.
            self.placement_group = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster",
                                                          opts=child)

    def _identity(self, name: str, args: GpuClusterArgs, child: pulumi.ResourceOptions) -> None:
        """The nodes' IAM role, its policy (dataset and checkpoints) and instance profile."""
        d = args.decision
        partition = builders.partition_of(d.region)
        self.role = aws.iam.Role(
            f"{name}-role", assume_role_policy=json.dumps(builders.assume_role_policy()),
            description=f"gpulease {args.environment}/{d.name} GPU nodes", opts=child)
        ds_uri = args.dataset_uri
        ds_bucket, ds_prefix = _split_uri(ds_uri) if ds_uri else (None, None)
        ck_bucket, ck_prefix = _split_uri(args.checkpoint_uri)
        self.node_policy_args = dict(
            dataset_bucket=ds_bucket, dataset_prefix=ds_prefix, checkpoint_bucket=ck_bucket,
            checkpoint_prefix=ck_prefix)
        aws.iam.RolePolicy(
            f"{name}-node-policy", role=self.role.id,
            policy=json.dumps(builders.node_policy(partition=partition,
                                                   **self.node_policy_args)), opts=child)
        aws.iam.RolePolicyAttachment(
            f"{name}-ssm", role=self.role.name,
            policy_arn=f"arn:{partition}:iam::aws:policy/AmazonSSMManagedInstanceCore",
            opts=child)
        self.profile = aws.iam.InstanceProfile(f"{name}-profile", role=self.role.name,
                                               opts=child)

    def _reservation(self, name: str, args: GpuClusterArgs,
                     child: pulumi.ResourceOptions) -> None:
        """The reserved nodes' capacity: an ODCR, or the Capacity Block bought."""
        d = args.decision
        self.reservation = None
        self.reservation_spec = None
        if self.use_odcr:
            az = args.network.zone_of(self.subnets[0])
            self.reservation = aws.ec2.CapacityReservation(
                f"{name}-odcr", instance_type=d.offering.instance_type,
                instance_platform="Linux/UNIX", availability_zone=az,
                # nodes existing holdings cover are not reserved again (policy.holdings)
                instance_count=d.purchase.reserved - d.covered_nodes,
                instance_match_criteria="targeted",
                # a window's reservation ends with its run (billed from creation: pulumi-aws
                # 7.51 has no start date for future-dated reservations; docs/policy.md)
                **({"end_date_type": "limited", "end_date": builders.reservation_end(d)}
                   if builders.reservation_end(d) else {"end_date_type": "unlimited"}),
                placement_group_arn=self.placement_group.arn if self.placement_group else None,
                opts=child)
            self.reservation_spec = {"capacity_reservation_target": {
                "capacity_reservation_id": self.reservation.id}}
        elif self.use_block:
            # Prepaid and not refundable: `protect` makes the engine refuse to replace (buy a
            # second block) or drop it, unless the stack opts in (allow_prepaid_replacement).
            self.reservation = aws.ec2.CapacityBlockReservation(
                f"{name}-block", capacity_block_offering_id=args.capacity_block.offering_id,
                instance_platform="Linux/UNIX", opts=pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(protect=args.protect_block)))

    def _launch_templates(self, name: str, args: GpuClusterArgs,
                          child: pulumi.ResourceOptions) -> None:
        """The main group's launch template (the block group's comes with its group), and the
        instance types the group may launch: the policy's fallbacks."""
        invoke = pulumi.InvokeOutputOptions(parent=self, provider=args.provider)
        self.ami = aws.ssm.get_parameter_output(name=builders.DLAMI_PARAMETER,
                                                opts=invoke).value
        self.launch_template = self._launch_template(
            f"{name}-lt", args, child, market=None, crs=self.reservation_spec,
            model=self.main_model)
        d = args.decision
        self.types = list(d.fallback_types or (d.offering.instance_type,))

    def _launch_template(self, lt_name: str, args: GpuClusterArgs,
                         child: pulumi.ResourceOptions, *, market: Optional[dict],
                         crs: Optional[dict], model: str) -> aws.ec2.LaunchTemplate:
        d = args.decision
        text = args.user_data(model) if args.user_data is not None else None
        # gzip + base64: the cloud-config is ~20-25 KB, over EC2's 16 KB user-data limit;
        # cloud-init detects and unzips gzip user data itself.
        encoded = encode_user_data(text, cloud="aws") if text is not None else None
        return aws.ec2.LaunchTemplate(
            lt_name, image_id=self.ami, instance_type=d.offering.instance_type,
            update_default_version=True, iam_instance_profile={"arn": self.profile.arn},
            network_interfaces=[{**ni, "security_groups": [self.security_group.id]}
                                for ni in builders.interfaces_for(d)],
            metadata_options={"http_endpoint": "enabled", "http_tokens": "required",
                              "http_put_response_hop_limit": builders.IMDS_HOP_LIMIT},
            block_device_mappings=[{"device_name": builders.ROOT_DEVICE, "ebs": {
                "volume_size": builders.ROOT_VOLUME_GB, "volume_type": "gp3",
                "encrypted": "true", "delete_on_termination": "true"}}],
            # Instance-store NVMe needs no mapping on Nitro types: the volumes are always
            # attached (EC2 User Guide, "SSD instance store volumes"); the bootstrap
            # assembles them into the scratch RAID-0 and wipes it at shutdown.
            monitoring={"enabled": True}, user_data=encoded,
            instance_market_options=market, capacity_reservation_specification=crs,
            # the node publishes its busy witness (contract C10): the reaper reads its
            # gpulease-busy-at, and counts it busy when that is missing or unreadable
            tag_specifications=[{"resource_type": "instance",
                                 "tags": {tags.BUSY_WITNESS: "1"}}],
            tags={"Name": lt_name}, opts=child)

    def _group_common(self) -> dict:
        """Arguments every node group of the cluster shares."""
        return dict(
            vpc_zone_identifiers=[s.id for s in self.subnets], capacity_rebalance=True,
            health_check_grace_period=builders.HEALTH_CHECK_GRACE_SECONDS,
            # GPU capacity can take long to arrive; `pulumi up` must not fail waiting for it.
            wait_for_capacity_timeout="0",
            # min 0: node-side autostop terminates with ShouldDecrementDesiredCapacity, which
            # the group refuses below its minimum.
            min_size=0)

    def _node_groups(self, name: str, args: GpuClusterArgs,
                     child: pulumi.ResourceOptions) -> None:
        """The mixed-instances Auto Scaling group, and the Capacity Block's own group."""
        d = args.decision
        self.asg = None
        if self.main_nodes > 0:
            size = builders.asg_capacity(d, without_reserved=self.use_block)
            self.asg = aws.autoscaling.Group(
                f"{name}-asg", max_size=size["max_size"],
                desired_capacity=size["desired_capacity"],
                placement_group=self.placement_group.id if self.placement_group else None,
                mixed_instances_policy={
                    "instances_distribution": {
                        "on_demand_base_capacity": size["on_demand_base_capacity"],
                        "on_demand_percentage_above_base_capacity":
                            size["on_demand_percentage_above_base_capacity"],
                        "on_demand_allocation_strategy": builders.ON_DEMAND_ALLOCATION,
                        "spot_allocation_strategy": builders.SPOT_ALLOCATION},
                    "launch_template": {
                        "launch_template_specification": {
                            "launch_template_id": self.launch_template.id,
                            "version": "$Latest"},
                        "overrides": [{"instance_type": t} for t in self.types]}},
                # On-demand launches go to the ODCR first; spot never consumes it (EC2 Auto
                # Scaling user guide, "Target Capacity Reservations from your Auto Scaling group").
                capacity_reservation_specification={
                    "capacity_reservation_preference": "capacity-reservations-first",
                    "capacity_reservation_target": {
                        "capacity_reservation_ids": [self.reservation.id]}}
                if self.use_odcr else None,
                tags=[{"key": "Name", "value": d.name, "propagate_at_launch": True}],
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                    ignore_changes=_SCALED_BY_REAPER)), **self._group_common())
        self.od_asg = None
        if self.deadline:
            self._on_demand_group(name, args, child)
        self.block_asg = None
        if self.use_block:
            self._block_group(name, args, child)

    def _on_demand_group(self, name: str, args: GpuClusterArgs,
                         child: pulumi.ResourceOptions) -> None:
        """Window work on spot: an on-demand group of the same nodes (types, subnets,
        placement) at desired 0, its own launch template rendered for on-demand. Only the
        reaper's deadline step sizes it (ignore_changes: `pulumi up` does not undo a switch)."""
        d = args.decision
        self.od_launch_template = self._launch_template(
            f"{name}-od-lt", args, child, market=None, crs=None, model=ON_DEMAND)
        self.od_asg = aws.autoscaling.Group(
            f"{name}-od-asg", max_size=d.nodes, desired_capacity=0,
            placement_group=self.placement_group.id if self.placement_group else None,
            mixed_instances_policy={
                "instances_distribution": {
                    "on_demand_base_capacity": d.nodes,
                    "on_demand_percentage_above_base_capacity": 100,
                    "on_demand_allocation_strategy": builders.ON_DEMAND_ALLOCATION},
                "launch_template": {
                    "launch_template_specification": {
                        "launch_template_id": self.od_launch_template.id,
                        "version": "$Latest"},
                    "overrides": [{"instance_type": t} for t in self.types]}},
            tags=[{"key": "Name", "value": d.name, "propagate_at_launch": True}],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                ignore_changes=_SCALED_BY_REAPER)), **self._group_common())

    def _block_group(self, name: str, args: GpuClusterArgs,
                     child: pulumi.ResourceOptions) -> None:
        """The Capacity Block's launch template, group and (a window's) start/drain schedules."""
        d, reserved = args.decision, args.decision.purchase.reserved
        # Capacity Blocks need the capacity-block market type on the launch template and
        # the block as the group's target (EC2 Auto Scaling user guide, "Target Capacity
        # Blocks ... from a launch template").
        self.block_launch_template = self._launch_template(
            f"{name}-block-lt", args, child, market={"market_type": "capacity-block"},
            crs={"capacity_reservation_target": {
                "capacity_reservation_id": self.reservation.id}}, model=RESERVED)
        window = builders.window_block(d)
        if window and args.capacity_block is not None and args.capacity_block.start:
            # the block bought (pinned): its own start and end
            window = dict(window, start=args.capacity_block.start,
                          end=args.capacity_block.end)
        schedule, size = [], reserved
        if window:
            from gpulease import clock
            from gpulease.quotes.blocks import due_schedule

            # a window's block: empty until the block starts (the schedules below); actions
            # whose time has passed are left out, the group at the size they set
            schedule, size, notes = due_schedule(
                dict(window, nodes=reserved), clock.now().timestamp())
            for note in notes:
                pulumi.log.warn(f"{d.name}: {note}")
        self.block_asg = aws.autoscaling.Group(
            f"{name}-block-asg", max_size=reserved,
            desired_capacity=size,
            launch_template={"id": self.block_launch_template.id, "version": "$Latest"},
            capacity_reservation_specification={
                "capacity_reservation_preference": "capacity-reservations-only",
                "capacity_reservation_target": {
                    "capacity_reservation_ids": [self.reservation.id]}},
            tags=[{"key": "Name", "value": d.name, "propagate_at_launch": True}],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                ignore_changes=_SCALED_BY_REAPER)),
            # The block's instances launch in the offering's AZ only.
            **{**self._group_common(), "vpc_zone_identifiers": [
                s.id for s in args.network.subnets_for(
                    (args.capacity_block.availability_zone,), one_az=True)]})
        self.block_schedules = []
        if window:
            # Scale up when the block starts; drain before AWS begins to terminate its
            # instances (30 min before the end), leaving the nodes time to checkpoint.
            for suffix, when, size in schedule:
                self.block_schedules.append(aws.autoscaling.Schedule(
                    f"{name}-block-{suffix}", autoscaling_group_name=self.block_asg.name,
                    scheduled_action_name=f"gpulease-{d.name}-block-{suffix}",
                    start_time=when, desired_capacity=size, min_size=0,
                    max_size=reserved, opts=child))


def _split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix/`` -> (bucket, prefix)."""
    rest = uri.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix
