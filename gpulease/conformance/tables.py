"""Pulumi input -> API parameter, one table per resource type the shipped stacks declare.

Each row maps an input path as the engine records it (camelCase, ``a[].b`` walks a list) to the
parameter of the cloud API call the provider makes with it, and the spec that constrains it
(``gpulease.conformance.specs``). Rows name API paths, never copy values: the values are generated
from the SDKs' specs into ``gpulease/conformance/data/specs.json`` (``tools/conformance_specs.py``).
``extra`` lists values the PROVIDER accepts beyond the API (documented in its resource docs) so
the check never rejects what `pulumi up` would send successfully.

Types without a row (route tables, associations, NAT gateways, internet gateways, bucket public
access blocks, GCS bucket objects, Cloud Functions / Run / Scheduler) have no constrained input
the shipped stacks set beyond their tags/labels and names, which the generic rules check.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpulease.conformance import specs
from gpulease.conformance.specs import Constraint


@dataclass(frozen=True)
class Row:
    path: str
    ref: tuple[str, ...]  # the constraint's reference in gpulease/conformance/data/specs.json
    extra: tuple[str, ...] = ()

    def constraint(self) -> Constraint:
        return specs.lookup(self.ref)


def _aws(service: str, operation: str, api_path: str) -> tuple[str, ...]:
    return ("aws_param", service, operation, api_path)


def _enum(message: str, enum: str) -> tuple[str, ...]:
    return ("gcp_enum", message, enum)


_LT = ("ec2", "CreateLaunchTemplate")
_LTD = "LaunchTemplateData."
_ASG = ("autoscaling", "CreateAutoScalingGroup")
_EC2_INSTANCE_TYPE = _aws("ec2", "CreateLaunchTemplate", "LaunchTemplateData.InstanceType")

AWS: dict[str, tuple[Row, ...]] = {
    "aws:ec2/launchTemplate:LaunchTemplate": (
        # CreateLaunchTemplate's member is a bare String; the named LaunchTemplateName shape
        # (3-128, [a-zA-Z0-9().-/_]+) is how every other launch template call types the name.
        Row("name", ("aws_shape", "ec2", "LaunchTemplateName")),
        Row("description", _aws(*_LT, "VersionDescription")),
        Row("instanceType", _aws(*_LT, _LTD + "InstanceType")),
        Row("metadataOptions.httpTokens", _aws(*_LT, _LTD + "MetadataOptions.HttpTokens")),
        Row("metadataOptions.httpEndpoint", _aws(*_LT, _LTD + "MetadataOptions.HttpEndpoint")),
        Row("metadataOptions.httpProtocolIpv6",
            _aws(*_LT, _LTD + "MetadataOptions.HttpProtocolIpv6")),
        Row("metadataOptions.instanceMetadataTags",
            _aws(*_LT, _LTD + "MetadataOptions.InstanceMetadataTags")),
        Row("instanceMarketOptions.marketType",
            _aws(*_LT, _LTD + "InstanceMarketOptions.MarketType")),
        Row("instanceMarketOptions.spotOptions.instanceInterruptionBehavior",
            _aws(*_LT, _LTD + "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior")),
        Row("instanceMarketOptions.spotOptions.spotInstanceType",
            _aws(*_LT, _LTD + "InstanceMarketOptions.SpotOptions.SpotInstanceType")),
        Row("blockDeviceMappings[].ebs.volumeType",
            _aws(*_LT, _LTD + "BlockDeviceMappings[].Ebs.VolumeType")),
        Row("placement.tenancy", _aws(*_LT, _LTD + "Placement.Tenancy")),
        Row("capacityReservationSpecification.capacityReservationPreference",
            _aws(*_LT, _LTD + "CapacityReservationSpecification.CapacityReservationPreference")),
        Row("tagSpecifications[].resourceType", _aws(*_LT, _LTD + "TagSpecifications[].ResourceType")),
    ),
    "aws:autoscaling/group:Group": (
        Row("name", _aws(*_ASG, "AutoScalingGroupName")),
        Row("mixedInstancesPolicy.instancesDistribution.onDemandAllocationStrategy",
            _aws(*_ASG, "MixedInstancesPolicy.InstancesDistribution.OnDemandAllocationStrategy")),
        Row("mixedInstancesPolicy.instancesDistribution.spotAllocationStrategy",
            _aws(*_ASG, "MixedInstancesPolicy.InstancesDistribution.SpotAllocationStrategy")),
        Row("mixedInstancesPolicy.launchTemplate.overrides[].instanceType",
            _aws(*_ASG, "MixedInstancesPolicy.LaunchTemplate.Overrides[].InstanceType")),
        # The override becomes an EC2 instance type: EC2's enum decides whether it exists.
        Row("mixedInstancesPolicy.launchTemplate.overrides[].instanceType", _EC2_INSTANCE_TYPE),
        Row("healthCheckType", _aws(*_ASG, "HealthCheckType")),
        Row("placementGroup", _aws(*_ASG, "PlacementGroup")),
    ),
    "aws:ec2/placementGroup:PlacementGroup": (
        Row("strategy", _aws("ec2", "CreatePlacementGroup", "Strategy")),
        Row("spreadLevel", _aws("ec2", "CreatePlacementGroup", "SpreadLevel")),
    ),
    "aws:ec2/capacityReservation:CapacityReservation": (
        Row("instanceType", _EC2_INSTANCE_TYPE),
        Row("instancePlatform", _aws("ec2", "CreateCapacityReservation", "InstancePlatform")),
        Row("tenancy", _aws("ec2", "CreateCapacityReservation", "Tenancy")),
        Row("endDateType", _aws("ec2", "CreateCapacityReservation", "EndDateType")),
        Row("instanceMatchCriteria",
            _aws("ec2", "CreateCapacityReservation", "InstanceMatchCriteria")),
    ),
    "aws:ec2/capacityBlockReservation:CapacityBlockReservation": (
        Row("instancePlatform", _aws("ec2", "PurchaseCapacityBlock", "InstancePlatform")),
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        Row("vpcEndpointType", _aws("ec2", "CreateVpcEndpoint", "VpcEndpointType")),
        Row("ipAddressType", _aws("ec2", "CreateVpcEndpoint", "IpAddressType")),
    ),
    "aws:ec2/eip:Eip": (Row("domain", _aws("ec2", "AllocateAddress", "Domain")),),
    "aws:ec2/vpc:Vpc": (Row("instanceTenancy", _aws("ec2", "CreateVpc", "InstanceTenancy")),),
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": (
        Row("rules[].transitions[].storageClass", _aws(
            "s3", "PutBucketLifecycleConfiguration",
            "LifecycleConfiguration.Rules[].Transitions[].StorageClass")),
        Row("rules[].noncurrentVersionTransitions[].storageClass", _aws(
            "s3", "PutBucketLifecycleConfiguration",
            "LifecycleConfiguration.Rules[].NoncurrentVersionTransitions[].StorageClass")),
        Row("rules[].status", _aws("s3", "PutBucketLifecycleConfiguration",
                                   "LifecycleConfiguration.Rules[].Status")),
    ),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        Row("rules[].applyServerSideEncryptionByDefault.sseAlgorithm", _aws(
            "s3", "PutBucketEncryption",
            "ServerSideEncryptionConfiguration.Rules[].ApplyServerSideEncryptionByDefault."
            "SSEAlgorithm")),
    ),
    # pulumi-aws BucketVersioning docs: status "Enabled, Suspended, or Disabled" (Disabled only
    # for a bucket that was never versioned; the provider then makes no API call).
    "aws:s3/bucketVersioning:BucketVersioning": (
        Row("versioningConfiguration.status", _aws("s3", "PutBucketVersioning",
                                                   "VersioningConfiguration.Status"),
            extra=("Disabled",)),
        Row("versioningConfiguration.mfaDelete", _aws("s3", "PutBucketVersioning",
                                                      "VersioningConfiguration.MFADelete")),
    ),
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": (
        Row("rule.objectOwnership", _aws("s3", "PutBucketOwnershipControls",
                                         "OwnershipControls.Rules[].ObjectOwnership")),
    ),
    "aws:iam/role:Role": (
        Row("name", _aws("iam", "CreateRole", "RoleName")),
        Row("path", _aws("iam", "CreateRole", "Path")),
        Row("description", _aws("iam", "CreateRole", "Description")),
        Row("maxSessionDuration", _aws("iam", "CreateRole", "MaxSessionDuration")),
        Row("assumeRolePolicy", _aws("iam", "CreateRole", "AssumeRolePolicyDocument")),
    ),
    "aws:iam/rolePolicy:RolePolicy": (
        Row("name", _aws("iam", "PutRolePolicy", "PolicyName")),
        Row("policy", _aws("iam", "PutRolePolicy", "PolicyDocument")),
    ),
    "aws:iam/policy:Policy": (
        Row("name", _aws("iam", "CreatePolicy", "PolicyName")),
        Row("path", _aws("iam", "CreatePolicy", "Path")),
        Row("policy", _aws("iam", "CreatePolicy", "PolicyDocument")),
    ),
    "aws:iam/instanceProfile:InstanceProfile": (
        Row("name", _aws("iam", "CreateInstanceProfile", "InstanceProfileName")),
        Row("path", _aws("iam", "CreateInstanceProfile", "Path")),
    ),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": (
        Row("policyArn", _aws("iam", "AttachRolePolicy", "PolicyArn")),
    ),
    "aws:cloudwatch/eventRule:EventRule": (
        Row("name", _aws("events", "PutRule", "Name")),
        Row("scheduleExpression", _aws("events", "PutRule", "ScheduleExpression")),
        Row("description", _aws("events", "PutRule", "Description")),
        Row("state", _aws("events", "PutRule", "State")),
        Row("eventBusName", _aws("events", "PutRule", "EventBusName")),
    ),
    "aws:cloudwatch/eventTarget:EventTarget": (
        Row("targetId", _aws("events", "PutTargets", "Targets[].Id")),
        Row("rule", _aws("events", "PutTargets", "Rule")),
    ),
    "aws:lambda/function:Function": (
        Row("name", _aws("lambda", "CreateFunction", "FunctionName")),
        Row("runtime", _aws("lambda", "CreateFunction", "Runtime")),
        Row("handler", _aws("lambda", "CreateFunction", "Handler")),
        Row("memorySize", _aws("lambda", "CreateFunction", "MemorySize")),
        Row("timeout", _aws("lambda", "CreateFunction", "Timeout")),
        Row("architectures[]", _aws("lambda", "CreateFunction", "Architectures[]")),
        Row("packageType", _aws("lambda", "CreateFunction", "PackageType")),
        Row("description", _aws("lambda", "CreateFunction", "Description")),
    ),
    "aws:lambda/permission:Permission": (
        Row("statementId", _aws("lambda", "AddPermission", "StatementId")),
        Row("action", _aws("lambda", "AddPermission", "Action")),
        Row("principal", _aws("lambda", "AddPermission", "Principal")),
        Row("function", _aws("lambda", "AddPermission", "FunctionName")),
    ),
    "aws:cloudwatch/logGroup:LogGroup": (
        Row("name", _aws("logs", "CreateLogGroup", "logGroupName")),
        Row("logGroupClass", _aws("logs", "CreateLogGroup", "logGroupClass")),
    ),
    "aws:datasync/task:Task": (Row("name", _aws("datasync", "CreateTask", "Name")),),
    "aws:datasync/s3Location:S3Location": (
        Row("s3StorageClass", _aws("datasync", "CreateLocationS3", "S3StorageClass")),
        Row("subdirectory", _aws("datasync", "CreateLocationS3", "Subdirectory")),
    ),
}

_IT = "gcp:compute/instanceTemplate:InstanceTemplate"
_TEMPLATE_ROWS = (
    Row("scheduling.provisioningModel", _enum("Scheduling", "ProvisioningModel")),
    Row("scheduling.instanceTerminationAction", _enum("Scheduling", "InstanceTerminationAction")),
    Row("scheduling.onHostMaintenance", _enum("Scheduling", "OnHostMaintenance")),
    Row("networkInterfaces[].nicType", _enum("NetworkInterface", "NicType")),
    Row("networkInterfaces[].stackType", _enum("NetworkInterface", "StackType")),
    Row("networkInterfaces[].accessConfigs[].networkTier", _enum("AccessConfig", "NetworkTier")),
    Row("reservationAffinity.type", _enum("ReservationAffinity", "ConsumeReservationType")),
    Row("disks[].type", _enum("AttachedDisk", "Type")),
    Row("disks[].mode", _enum("AttachedDisk", "Mode")),
    Row("disks[].interface", _enum("AttachedDisk", "Interface")),
    Row("confidentialInstanceConfig.confidentialInstanceType",
        _enum("ConfidentialInstanceConfig", "ConfidentialInstanceType")),
)

GCP: dict[str, tuple[Row, ...]] = {
    _IT: _TEMPLATE_ROWS,
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate": _TEMPLATE_ROWS,
    "gcp:compute/instance:Instance": _TEMPLATE_ROWS,
    "gcp:compute/instanceGroupManager:InstanceGroupManager": (
        Row("updatePolicy.type", _enum("InstanceGroupManagerUpdatePolicy", "Type")),
        Row("updatePolicy.replacementMethod",
            _enum("InstanceGroupManagerUpdatePolicy", "ReplacementMethod")),
    ),
    "gcp:compute/reservation:Reservation": (
        Row("shareSettings.shareType", _enum("ShareSettings", "ShareType")),
        Row("deploymentType", _enum("Reservation", "DeploymentType")),
    ),
    # Inputs of gpulease's own dynamic provider: its name is checked as a GCE name (names.GCE);
    # machine type and count are checked by the provider's check() against the Compute API.
    "pulumi-python:dynamic/gpulease:GceReservation": (),
    "gcp:compute/resourcePolicy:ResourcePolicy": (
        Row("groupPlacementPolicy.collocation",
            _enum("ResourcePolicyGroupPlacementPolicy", "Collocation")),
    ),
    "gcp:compute/network:Network": (
        Row("routingMode", _enum("NetworkRoutingConfig", "RoutingMode")),
        Row("mtu", ("gcp_range", "Network", "mtu")),
        Row("networkFirewallPolicyEnforcementOrder",
            _enum("Network", "NetworkFirewallPolicyEnforcementOrder")),
    ),
    "gcp:compute/subnetwork:Subnetwork": (
        Row("purpose", _enum("Subnetwork", "Purpose")),
        Row("role", _enum("Subnetwork", "Role")),
        Row("stackType", _enum("Subnetwork", "StackType")),
        Row("privateIpv6GoogleAccess", _enum("Subnetwork", "PrivateIpv6GoogleAccess")),
        Row("logConfig.aggregationInterval", _enum("SubnetworkLogConfig", "AggregationInterval")),
        Row("logConfig.metadata", _enum("SubnetworkLogConfig", "Metadata")),
    ),
    "gcp:compute/firewall:Firewall": (
        Row("direction", _enum("Firewall", "Direction")),
        Row("logConfig.metadata", _enum("FirewallLogConfig", "Metadata")),
    ),
    "gcp:compute/routerNat:RouterNat": (
        Row("natIpAllocateOption", _enum("RouterNat", "NatIpAllocateOption")),
        Row("sourceSubnetworkIpRangesToNat", _enum("RouterNat", "SourceSubnetworkIpRangesToNat")),
        Row("subnetworks[].sourceIpRangesToNats[]",
            _enum("RouterNatSubnetworkToNat", "SourceIpRangesToNat")),
        Row("logConfig.filter", _enum("RouterNatLogConfig", "Filter")),
        Row("endpointTypes[]", _enum("RouterNat", "EndpointTypes")),
    ),
    "gcp:storage/bucket:Bucket": (
        Row("storageClass", ("gcs_storage_classes",)),
        Row("lifecycleRules[].action.type", ("gcs_lifecycle_actions",)),
        Row("lifecycleRules[].action.storageClass", ("gcs_storage_classes",)),
        Row("lifecycleRules[].condition.matchesStorageClasses[]", ("gcs_storage_classes",)),
        Row("publicAccessPrevention", ("gcs_public_access_prevention",)),
    ),
}

#: CIDR-valued inputs: each must parse as an IP network (EC2 and Compute reject anything else).
CIDR_INPUTS: dict[str, tuple[str, ...]] = {
    "aws:ec2/vpc:Vpc": ("cidrBlock",),
    "aws:ec2/subnet:Subnet": ("cidrBlock", "ipv6CidrBlock"),
    "aws:ec2/securityGroup:SecurityGroup": (
        "ingress[].cidrBlocks[]", "ingress[].ipv6CidrBlocks[]", "egress[].cidrBlocks[]",
        "egress[].ipv6CidrBlocks[]"),
    "aws:ec2/securityGroupRule:SecurityGroupRule": ("cidrBlocks[]", "ipv6CidrBlocks[]"),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": ("cidrIpv4", "cidrIpv6"),
    "aws:ec2/routeTable:RouteTable": ("routes[].cidrBlock", "routes[].ipv6CidrBlock"),
    "gcp:compute/subnetwork:Subnetwork": ("ipCidrRange",),
    "gcp:compute/firewall:Firewall": ("sourceRanges[]", "destinationRanges[]"),
}
