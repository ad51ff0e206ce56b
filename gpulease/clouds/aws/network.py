"""AWS network per region: the existing VPC/subnets from config, or a private VPC with a NAT,
plus the region's spot-event notifications (EventBridge -> SNS)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_aws as aws

from gpulease.clouds.aws import builders
from gpulease.costing.context import shared
from gpulease.purchase import SPOT

VPC_CIDR = "10.64.0.0/16"
#: /19 private subnets: 8k addresses each. An EFA node takes one IP (EFA-only cards take none),
#: but a large spot fleet churns through addresses while old ENIs are released.
PRIVATE_CIDRS = ("10.64.0.0/19", "10.64.32.0/19", "10.64.64.0/19")
PUBLIC_CIDR = "10.64.192.0/24"
#: AZs of a created network when no cluster names a zone: two spread spot pools over two
#: AZs; distributed clusters use one of them.
DEFAULT_AZ_COUNT = 2


@dataclass
class Subnet:
    id: pulumi.Input[str]
    #: AZ name when known at program time (explicit zones), else None.
    zone: Optional[str]
    #: AZ name as an output; None for an existing subnet until :meth:`Network.zone_of` looks
    #: it up (only a reservation needs it, so plans without one make no extra provider call).
    availability_zone: Optional[pulumi.Input[str]] = None


@dataclass
class NetworkArgs:
    region: str
    provider: aws.Provider
    #: existing VPC id / private subnet ids (``gpulease:clouds.aws.vpc_id`` / ``subnet_ids``).
    vpc_id: Optional[str] = None
    subnet_ids: tuple[str, ...] = ()
    #: AZ IDs or names the region's clusters ask for (decided or catalog zones); empty = any.
    zones: tuple[str, ...] = ()
    #: zone (ID or name, as in ``zones``) -> AZ name, from the region's zone lookup.
    zone_names: dict = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.zone_names is None:
            self.zone_names = {}


class Network(pulumi.ComponentResource):
    """A region's network for GPU nodes: private subnets only, egress through a NAT gateway,
    S3 through a gateway endpoint (free, and keeps dataset reads off the NAT's per-GB fee)."""

    vpc_id: pulumi.Output[str]
    subnets: list[Subnet]

    def __init__(self, name: str, args: NetworkArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpulease:aws:Network", name, None, opts)
        self.cost_context = shared()
        self.region = args.region
        self._provider = args.provider
        self._zone_names = dict(args.zone_names or {})
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        if args.vpc_id:
            self.created = False
            self.vpc_id = pulumi.Output.from_input(args.vpc_id)
            self.subnets = [Subnet(id=s, zone=None) for s in args.subnet_ids]
        else:
            self.created = True
            self._create(name, args, child)
        self.register_outputs({"vpc_id": self.vpc_id,
                               "subnet_ids": [s.id for s in self.subnets]})

    def _create(self, name: str, args: NetworkArgs, child: pulumi.ResourceOptions) -> None:
        vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=VPC_CIDR, enable_dns_hostnames=True,
                          enable_dns_support=True, tags={"Name": f"{name}-vpc"}, opts=child)
        self.vpc_id = vpc.id
        zones = list(dict.fromkeys(args.zones))[:len(PRIVATE_CIDRS)]
        if zones:
            az_plan = [(z, z) for z in zones]
        else:
            azs = aws.get_availability_zones_output(
                state="available", opts=pulumi.InvokeOutputOptions(parent=self,
                                                                   provider=args.provider))
            az_plan = [(None, azs.names[i]) for i in range(DEFAULT_AZ_COUNT)]
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id,
                                      tags={"Name": f"{name}-igw"}, opts=child)
        public = aws.ec2.Subnet(f"{name}-public", vpc_id=vpc.id, cidr_block=PUBLIC_CIDR,
                                **(builders.subnet_zone_args(az_plan[0][0]) if az_plan[0][0]
                                   else {"availability_zone": az_plan[0][1]}),
                                map_public_ip_on_launch=False,
                                tags={"Name": f"{name}-public"}, opts=child)
        public_rt = aws.ec2.RouteTable(f"{name}-public-rt", vpc_id=vpc.id,
                                       routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
                                       tags={"Name": f"{name}-public-rt"}, opts=child)
        aws.ec2.RouteTableAssociation(f"{name}-public-rta", subnet_id=public.id,
                                      route_table_id=public_rt.id, opts=child)
        eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags={"Name": f"{name}-nat-eip"},
                          opts=child)
        # One NAT per region, not per AZ: nodes only pull packages/images and call AWS APIs
        # through it, and each NAT gateway is billed per hour (catalog `nat_gateway_hour`).
        nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=eip.id, subnet_id=public.id,
                                 tags={"Name": f"{name}-nat"},
                                 opts=pulumi.ResourceOptions.merge(
                                     child, pulumi.ResourceOptions(depends_on=[igw])))
        private_rt = aws.ec2.RouteTable(
            f"{name}-private-rt", vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
            tags={"Name": f"{name}-private-rt"}, opts=child)
        aws.ec2.VpcEndpoint(f"{name}-s3", vpc_id=vpc.id,
                            service_name=f"com.amazonaws.{args.region}.s3",
                            vpc_endpoint_type="Gateway", route_table_ids=[private_rt.id],
                            tags={"Name": f"{name}-s3"}, opts=child)
        self.subnets = []
        for i, (zone, az) in enumerate(az_plan):
            sn = aws.ec2.Subnet(f"{name}-private-{i}", vpc_id=vpc.id,
                                cidr_block=PRIVATE_CIDRS[i],
                                **(builders.subnet_zone_args(zone) if zone
                                   else {"availability_zone": az}),
                                map_public_ip_on_launch=False,
                                tags={"Name": f"{name}-private-{i}"}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-private-{i}-rta", subnet_id=sn.id,
                                          route_table_id=private_rt.id, opts=child)
            self.subnets.append(Subnet(
                id=sn.id, zone=zone,
                availability_zone=args.zone_names.get(zone) if zone else sn.availability_zone))

    def subnets_for(self, zones: tuple[str, ...], *, one_az: bool) -> list[Subnet]:
        """Subnets a cluster uses: those in its zones (when known), a single one when the
        cluster needs one AZ (EFA + cluster placement group)."""
        names = self._zone_names   # zone ID or name -> name: "use1-az2" and "us-east-1b" match
        wanted = {names.get(z, z) for z in zones}
        chosen = [s for s in self.subnets if zones and s.zone is not None
                  and names.get(s.zone, s.zone) in wanted] or list(self.subnets)
        return chosen[:1] if one_az else chosen

    def zone_of(self, subnet: Subnet) -> pulumi.Input[str]:
        """AZ of a subnet (existing subnets: ``aws:ec2/getSubnet:getSubnet``)."""
        if subnet.availability_zone is None:
            subnet.availability_zone = aws.ec2.get_subnet_output(
                id=subnet.id, opts=pulumi.InvokeOutputOptions(
                    parent=self, provider=self._provider)).availability_zone
        return subnet.availability_zone


@dataclass
class SpotEventsArgs:
    region: str
    provider: aws.Provider


class SpotEvents(pulumi.ComponentResource):
    """EventBridge rules for spot interruption warnings and rebalance recommendations in a
    region, delivered to an SNS topic operators subscribe to (in addition to the node-side
    watcher, which reacts within the 2-minute notice)."""

    def __init__(self, name: str, args: SpotEventsArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpulease:aws:SpotEvents", name, None, opts)
        self.cost_context = shared(SPOT)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        # Not KMS-encrypted on purpose: EventBridge cannot publish to a topic encrypted with
        # the AWS-managed aws/sns key (EventBridge User Guide, "Amazon SNS permissions").
        self.topic = aws.sns.Topic(f"{name}-topic", opts=child)
        aws.sns.TopicPolicy(f"{name}-topic-policy", arn=self.topic.arn,
                            policy=self.topic.arn.apply(
                                lambda a: json.dumps(builders.sns_events_policy(a))),
                            opts=child)
        self.rules = {}
        for key, detail in builders.SPOT_EVENT_TYPES.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{key}", description=f"gpulease: {detail}",
                event_pattern=json.dumps(builders.spot_event_pattern(detail)), opts=child)
            aws.cloudwatch.EventTarget(f"{name}-{key}-sns", rule=rule.name, arn=self.topic.arn,
                                       opts=child)
            self.rules[key] = rule
        self.register_outputs({"topic_arn": self.topic.arn})
