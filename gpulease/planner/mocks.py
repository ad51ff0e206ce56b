"""Run a Pulumi program in-process under Pulumi's mock runtime, answering as the providers would.

This is how `gpulease plan` runs THE SAME program that `pulumi up` runs, with no engine, no
cloud and no credentials, and how the tests inspect resources. The mocks imitate what the
providers do before any cloud call (docs/offline-plan.md):

- **auto-naming**: a resource whose name the program leaves unset gets the name pulumi-aws /
  pulumi-gcp would give it (logical name + separator + 7 hex characters, per-type maximum
  length and lowercasing, :data:`AUTONAME`), seeded so runs are deterministic; a name that
  cannot fit fails the plan as the provider fails `pulumi up`. Each recorded resource carries
  its ``physical_name``.
- **preview mode** (``preview=True``): like `pulumi preview`, every output the provider
  computes (ids, ARNs, self links, emails, ...) is unknown; only inputs and auto-names are known.
  ``preview=False`` is `pulumi up`: computed outputs get deterministic values.
- **data sources** answer from ``gpulease/planner/data/lookups.json`` (zones, capacity-block
  offerings, SSM parameters, images, subnets): what is not listed answers the way the provider
  does when nothing matches. Unknown data-source tokens fail (``KNOWN_CALLS``).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import json
import keyword
import logging
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as _mocks
from pulumi.runtime import resource as _runtime_resource
from pulumi.runtime import rpc
from pulumi.runtime.proto import source_pb2
from pulumi.runtime.sync_await import _sync_await

from gpulease.clouds import registry
from gpulease import datafiles
from gpulease import gctuning
from gpulease.errors import Finding, InputError
from gpulease.purchase import CAPACITY_BLOCK
from gpulease.text import plural

SECRET_MASK = "[secret]"
UNKNOWN_MASK = "[unknown]"
_SIG = rpc._special_sig_key  # type: ignore[attr-defined]
_SECRET_SIG = rpc._special_secret_sig  # type: ignore[attr-defined]
_RESOURCE_SIG = rpc._special_resource_sig  # type: ignore[attr-defined]

_LOCK = threading.Lock()  # the Pulumi runtime settings are process-global

LOOKUPS_PATH = datafiles.package_path("planner", "data", "lookups.json")
#: seed of the auto-name suffixes (any string; the same seed gives the same names).
DEFAULT_SEED = "gpulease-plan"
#: the Pulumi project the program runs as: Pulumi.yaml's ``name`` (tests/test_against_identity.py
#: keeps them equal); the second part of every URN
PROJECT = "gpulease"


class ProviderRejected(InputError):
    """What a provider would refuse before calling the cloud (exit 2, nothing applied)."""


# ---- auto-naming ----------------------------------------------------------------------------
@dataclass(frozen=True)
class AutoName:
    """How a provider fills an unset name: ``<logical name><separator><randlen hex>``.

    ``field`` is the input (camelCase) that holds the physical name; ``maxlen`` the longest name
    the provider generates (longer fails, pulumi-terraform-bridge ``NewUniqueHex``: "name 'x-'
    plus 7 random chars is longer than maximum length N"); ``lowercase`` applies to the prefix.
    """

    field: str = "name"
    maxlen: int = 255
    lowercase: bool = False
    separator: str = "-"
    randlen: int = 7


#: Both providers call ``SetAutonaming(255, "-")``: every resource with an input string ``name``
#: is auto-named with at most 255 characters (pulumi-gcp provider/resources.go; pulumi-aws
#: provider/autonaming.go).
DEFAULT_AUTONAME = AutoName()
_GCP_LOWER_63 = AutoName(maxlen=63, lowercase=True)
#: Per-type overrides, read in the providers' sources: pulumi-gcp ``provider/resources.go``
#: (``lowercaseAutoName()`` = 63 chars lowercased; bucket 222; service account id 30) at commit
#: ed6078aa (2026-08-21), pulumi-aws ``provider/resource_overrides.go`` (S3 bucket 63 lowercased,
#: IAM role 64, EventBridge rule 64, Lambda 64, SNS 80, ...). ``None`` = never auto-named.
AUTONAME: dict[str, Optional[AutoName]] = {
    "gcp:compute/network:Network": _GCP_LOWER_63,
    "gcp:compute/subnetwork:Subnetwork": _GCP_LOWER_63,
    "gcp:compute/router:Router": _GCP_LOWER_63,
    "gcp:compute/routerNat:RouterNat": _GCP_LOWER_63,
    "gcp:compute/backendService:BackendService": _GCP_LOWER_63,
    "gcp:compute/httpHealthCheck:HttpHealthCheck": _GCP_LOWER_63,
    "gcp:compute/httpsHealthCheck:HttpsHealthCheck": _GCP_LOWER_63,
    "gcp:compute/securityPolicy:SecurityPolicy": _GCP_LOWER_63,
    "gcp:compute/targetHttpProxy:TargetHttpProxy": _GCP_LOWER_63,
    "gcp:compute/targetHttpsProxy:TargetHttpsProxy": _GCP_LOWER_63,
    "gcp:compute/uRLMap:URLMap": _GCP_LOWER_63,
    "gcp:cloudrun/service:Service": _GCP_LOWER_63,
    "gcp:firestore/database:Database": _GCP_LOWER_63,
    "gcp:cloudrunv2/service:Service": AutoName(maxlen=50, lowercase=True),
    "gcp:cloudfunctions/function:Function": AutoName(maxlen=63),
    "gcp:storage/bucket:Bucket": AutoName(maxlen=222),
    "gcp:serviceaccount/account:Account": AutoName("accountId", 30),
    "gcp:projects/iAMCustomRole:IAMCustomRole": AutoName("roleId", 255),
    "gcp:organizations/iAMCustomRole:IAMCustomRole": AutoName("roleId", 255, separator="_"),
    "gcp:organizations/project:Project": AutoName("projectId", 30, lowercase=True),
    "aws:s3/bucket:Bucket": AutoName("bucket", 63, lowercase=True),
    "aws:s3/bucketV2:BucketV2": AutoName("bucket", 63, lowercase=True),
    "aws:iam/role:Role": AutoName(maxlen=64),
    "aws:cloudwatch/eventRule:EventRule": AutoName(maxlen=64),
    "aws:cloudwatch/eventTarget:EventTarget": AutoName("targetId", 255),
    "aws:lambda/function:Function": AutoName(maxlen=64),
    "aws:lambda/permission:Permission": AutoName("statementId", 100),
    "aws:sns/topic:Topic": AutoName(maxlen=80),
    "aws:sqs/queue:Queue": AutoName(maxlen=80),
    "aws:ec2/keyPair:KeyPair": AutoName("keyName", 255),
    # Route 53 record names are DNS names, never auto-named (pulumi-aws overrides).
    "aws:route53/record:Record": None,
}
_SDK = registry.sdk_packages()   # provider package -> its Python SDK
#: Kubernetes objects (owned pools): named by ``metadata.name``, else auto-named with 8
#: random characters after ``-``.
KUBERNETES_PREFIX = "kubernetes:"
KUBERNETES_AUTONAME = AutoName("metadata.name", 253, randlen=8)


@lru_cache(maxsize=None)
def autoname_rule(type_token: str) -> Optional[AutoName]:
    """The provider's auto-naming of a resource type, or None (the type has no name input)."""
    if type_token in AUTONAME:
        return AUTONAME[type_token]
    pkg, _, rest = type_token.partition(":")
    if pkg not in _SDK:
        return None
    mod, _, cls = rest.partition(":")
    sub = mod.split("/")[0]
    if keyword.iskeyword(sub):
        sub += "_"  # pulumi_aws.lambda_
    try:
        module = importlib.import_module(_SDK[pkg] if sub == "index" else f"{_SDK[pkg]}.{sub}")
        params = inspect.signature(getattr(module, cls)._internal_init).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    return DEFAULT_AUTONAME if "name" in params else None


def generated_name(rule: AutoName, logical: str, *, seed: str, type_token: str) -> str:
    """The name the provider would generate; the suffix is a hash of seed, type and logical
    name, so the same program and seed always give the same names (the providers draw it at
    random once and keep it in the state)."""
    prefix = logical + rule.separator
    if rule.lowercase:
        prefix = prefix.lower()
    suffix = hashlib.sha256(f"{seed}:{type_token}:{logical}".encode()).hexdigest()[:rule.randlen]
    return prefix + suffix


# ---- data sources -------------------------------------------------------------------------
@lru_cache(maxsize=4)
def _read_lookups(path: str) -> dict:
    return json.loads(Path(path).read_text())


def load_lookups(path: Optional[str | Path] = None) -> dict:
    """The data-source answers the offline plan assumes (``gpulease/planner/data/lookups.json``)."""
    return _read_lookups(str(path or LOOKUPS_PATH))


class _NoMatch(Exception):
    """A data source found nothing: raised as the provider raises it."""


def _aws_zones(data: dict, region: str) -> list[dict]:
    zones = data["aws"]["zones"].get(region)
    if zones is None:
        raise _NoMatch(f"reading EC2 Availability Zones: region {region!r} is not enabled or "
                       "does not exist")
    return zones


def _aws_azs(a: dict, region: str, data: dict) -> dict:
    zones = [z for z in _aws_zones(data, region)
             if z["name"] not in (a.get("excludeNames") or [])
             and z["id"] not in (a.get("excludeZoneIds") or [])]
    return {"names": [z["name"] for z in zones], "zoneIds": [z["id"] for z in zones],
            "id": region, "region": region, "groupNames": [region], "state": "available"}


def _aws_subnet(a: dict, region: str, data: dict) -> dict:
    sub = data["aws"]["subnets"].get(a.get("id") or "")
    if sub is None:
        raise _NoMatch(f"no matching EC2 Subnet found (id {a.get('id')!r}; the offline plan "
                       "knows the subnets listed in gpulease/planner/data/lookups.json aws.subnets)")
    return {"id": a.get("id"), "availabilityZone": sub["availability_zone"],
            "availabilityZoneId": sub["availability_zone_id"], "vpcId": sub["vpc_id"],
            "region": region}


def capacity_block_quote(a: dict, region: str, data: dict, now: float) -> dict:
    """The offering DescribeCapacityBlockOfferings would quote at ``now``, offline: where
    lookups.json ``aws.capacity_block_offerings`` assumes AWS has one, priced at the published
    rate of the shipped quotes (``gpulease.quotes``, the one place Capacity Block rates live), the
    earliest block of the asked duration starting at 11:30 UTC at least ``lead_hours`` after
    ``now`` (or at/after the asked ``startDateRange``) and at most eight weeks ahead. Its id
    changes with its start: a quote read on another day is another offering, and it expires at
    its start."""
    from gpulease import quotes
    from gpulease.clock import format_utc
    from gpulease.model import parse_utc
    from gpulease.quotes.store import shipped_book

    rules = data["aws"].get("capacity_block_quotes") or {}
    hours = int(a.get("capacityDurationHours") or 0)
    count = int(a.get("instanceCount") or 0)
    if not quotes.valid_block_count(count):   # the API refuses a size it does not sell
        raise _NoMatch(f"InvalidParameterValue: instanceCount {count} is not a Capacity Block "
                       f"size (AWS sells blocks of {quotes.CB_INSTANCE_COUNTS[0]} to "
                       f"{quotes.CB_MAX_INSTANCES} instances; gpulease.quotes."
                       "CB_INSTANCE_COUNTS)")
    for o in data["aws"]["capacity_block_offerings"]:
        if (o["region"], o["instance_type"]) != (region, a.get("instanceType")) \
                or not 1 <= count <= o["max_instance_count"]:
            continue
        rates = [q.node_hour_usd for q in shipped_book().for_offering(
            CAPACITY_BLOCK, "aws", region, o["instance_type"]) if q.node_hour_usd]
        if not rates:
            continue
        if not quotes.valid_block_hours(hours):
            raise _NoMatch(f"InvalidParameterValue: capacityDurationHours {hours} is not a "
                           "Capacity Block duration")
        earliest = now + 3600.0 * rules.get("lead_hours", 24)
        if a.get("startDateRange"):
            earliest = max(earliest, parse_utc(a["startDateRange"]))
        hh, mm = quotes.CB_END_UTC      # blocks start and end at 11:30 UTC
        start = earliest - earliest % 86400.0 + 3600.0 * hh + 60.0 * mm
        if start < earliest:
            start += 86400.0
        end = start + 3600.0 * hours
        if start > now + 86400.0 * quotes.CB_MAX_ADVANCE_DAYS or (
                a.get("endDateRange") and end > parse_utc(a["endDateRange"])):
            break
        zone = o.get("availability_zone") or _aws_zones(data, region)[0]["name"]
        key = f"{region}:{o['instance_type']}:{count}:{format_utc(start)}:{hours}"
        fee = round(rates[0] * hours * count, 2)
        return {"capacityBlockOfferingId": "cb-" + hashlib.sha256(key.encode()).hexdigest()[:17],
                "availabilityZone": zone, "currencyCode": "USD", "upfrontFee": f"{fee:.2f}",
                "tenancy": "default", "region": region, "instanceType": o["instance_type"],
                "instanceCount": count, "capacityDurationHours": hours,
                "startDateRange": format_utc(start), "endDateRange": format_utc(end)}
    raise _NoMatch(f"no EC2 Capacity Block Offering found matching criteria "
                   f"({a.get('instanceCount')} x {a.get('instanceType')} for "
                   f"{a.get('capacityDurationHours')} h in {region}); try different search")


def _aws_capacity_block(a: dict, region: str, data: dict, now: Optional[float] = None) -> dict:
    import time

    return capacity_block_quote(a, region, data, time.time() if now is None else now)


def _aws_ssm(a: dict, region: str, data: dict) -> dict:
    p = data["aws"]["ssm_parameters"].get(a.get("name") or "")
    if p is None or region not in p["regions"]:
        raise _NoMatch(f"reading SSM Parameter ({a.get('name')}): ParameterNotFound "
                       f"in {region}")
    return {"name": a.get("name"), "type": p["type"], "value": p["value"],
            "insecureValue": p["value"], "id": a.get("name"),
            "arn": f"arn:aws:ssm:{region}::parameter{a.get('name')}"}


def _gcp_zones(a: dict, region: str, data: dict) -> dict:
    r = a.get("region") or region
    zones = data["gcp"]["zones"].get(r)
    if zones is None:
        raise _NoMatch(f"Error retrieving available zones: googleapi: Error 404: The resource "
                       f"'projects/{a.get('project', 'p')}/regions/{r}' was not found, notFound")
    return {"names": list(zones), "id": f"projects/{a.get('project', 'p')}/regions/{r}",
            "region": r, "project": a.get("project")}


def _gcp_image(a: dict, region: str, data: dict) -> dict:
    key = f"{a.get('project')}/{a.get('family') or a.get('name')}"
    if key not in data["gcp"]["images"]:
        raise _NoMatch(f"error retrieving image information: googleapi: Error 404: The resource "
                       f"'projects/{key.replace('/', '/global/images/family/', 1)}' was not found")
    return {"selfLink": f"https://www.googleapis.com/compute/v1/projects/{a.get('project')}/"
                        f"global/images/{a.get('family')}-plan",
            "name": f"{a.get('family')}-plan", "family": a.get("family"), "id": "image"}


def _data(fn: Callable[..., dict]) -> Callable[..., dict]:
    """Adapt a lookups-backed answer to the ``(args, region[, data[, now]]) -> dict`` shape of
    KNOWN_CALLS (``now``: the moment the plan answers for, for answers that change over time)."""
    timed = len(inspect.signature(fn).parameters) >= 4

    def answer(args: dict, region: str, data: Optional[dict] = None,
               now: Optional[float] = None) -> dict:
        data = data if data is not None else load_lookups()
        return fn(args, region, data, now) if timed else fn(args, region, data)
    return answer


#: data-source tokens the program may call, with deterministic answers.
KNOWN_CALLS: dict[str, Callable[..., dict]] = {
    "aws:index/getAvailabilityZones:getAvailabilityZones": _data(_aws_azs),
    "aws:index/getCallerIdentity:getCallerIdentity": lambda a, r, d=None: {
        "accountId": "123456789012", "arn": "arn:aws:iam::123456789012:user/plan",
        "userId": "AIDPLAN", "id": "123456789012"},
    "aws:index/getPartition:getPartition": lambda a, r, d=None: {
        "partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws",
        "reverseDnsPrefix": "com.amazonaws"},
    "aws:index/getRegion:getRegion": lambda a, r, d=None: {
        "name": r, "region": r, "id": r, "endpoint": f"ec2.{r}.amazonaws.com",
        "description": r},
    "aws:ssm/getParameter:getParameter": _data(_aws_ssm),
    "aws:iam/getPolicyDocument:getPolicyDocument": lambda a, r, d=None: {
        "json": json.dumps({"Version": "2012-10-17", "Statement": a.get("statements", [])}),
        "id": "policy"},
    "aws:ec2/getCapacityBlockOffering:getCapacityBlockOffering": _data(_aws_capacity_block),
    "aws:ec2/getSubnet:getSubnet": _data(_aws_subnet),
    "gcp:compute/getZones:getZones": _data(_gcp_zones),
    "gcp:organizations/getProject:getProject": lambda a, r, d=None: {
        "projectId": a.get("projectId", "plan-project"), "number": "123456789012",
        "id": a.get("projectId", "plan-project")},
    "gcp:storage/getTransferProjectServiceAccount:getTransferProjectServiceAccount":
        lambda a, r, d=None: {
            "email": "project-123456789012@storage-transfer-service.iam.gserviceaccount.com",
            "member": "serviceAccount:project-123456789012@storage-transfer-service.iam."
                      "gserviceaccount.com",
            "subjectId": "100000000000000000001", "project": a.get("project") or "plan-project",
            "id": a.get("project") or "plan-project"},
    "gcp:compute/getImage:getImage": _data(_gcp_image),
}


# ---- recording ----------------------------------------------------------------------------
@dataclass
class RecordedResource:
    urn: str
    type: str
    name: str
    inputs: dict
    custom: bool
    parent: str
    provider: str = ""
    protect: bool = False
    retain_on_delete: bool = False
    ignore_changes: tuple = ()
    depends_on: tuple = ()
    outputs: dict = field(default_factory=dict)
    #: the name the resource gets in the cloud: its explicit name input (``name``, ``bucket``,
    #: ``accountId``, ...) or the provider's auto-name; None for types that have no name.
    physical_name: Optional[str] = None
    #: the input the provider filled with an auto-name (the program left it unset), else None;
    #: a later `pulumi up` keeps the name the state holds for it.
    autoname: Optional[str] = None


def _scrub(value: Any) -> Any:
    """JSON-able copy of a serialized property value: secrets masked, unknowns marked."""
    if isinstance(value, dict):
        sig = value.get(_SIG)
        if sig == _SECRET_SIG:
            return SECRET_MASK
        if sig == _RESOURCE_SIG:
            return value.get("urn", "")
        if sig is not None and "value" in value:
            return _scrub(value["value"])
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if value == rpc.UNKNOWN:
        return UNKNOWN_MASK
    return value


ACCOUNT_ID = "123456789012"
#: ARN shapes of the AWS types whose ARN other resources embed (IAM User Guide / S3 / EC2 / SNS
#: "ARN formats"); other types get ``arn:aws:plan:::<type>/<name>``.
_ARNS = {
    "aws:s3/bucket:Bucket": "arn:aws:s3:::{n}",
    "aws:iam/role:Role": "arn:aws:iam::{a}:role/{n}",
    "aws:iam/instanceProfile:InstanceProfile": "arn:aws:iam::{a}:instance-profile/{n}",
    "aws:ec2/placementGroup:PlacementGroup": "arn:aws:ec2:{r}:{a}:placement-group/{n}",
    "aws:sns/topic:Topic": "arn:aws:sns:{r}:{a}:{n}",
    "aws:lambda/function:Function": "arn:aws:lambda:{r}:{a}:function:{n}",
    "aws:cloudwatch/eventRule:EventRule": "arn:aws:events:{r}:{a}:rule/{n}",
}


GCE_API = "https://www.googleapis.com/compute/v1"


def _gcp_self_link(typ: str, name: str, inputs: dict, project: Optional[str]) -> str:
    """The self link the Compute API gives a resource (``.../projects/P/regions/R/
    resourcePolicies/N``): dynamic providers and conformance read these, so they have the
    API's shape; other GCP types get a placeholder link."""
    from gpulease.conformance.names import GCE

    where = GCE.get(typ)
    project = inputs.get("project") or project or "plan-project"
    if where is None:
        if typ == "gcp:storage/bucket:Bucket":
            return f"https://www.googleapis.com/storage/v1/b/{name}"
        return f"https://plan.invalid/{name}"
    collection, scope = where
    if scope == "global":
        return f"{GCE_API}/projects/{project}/global/{collection}/{name}"
    place = inputs.get(scope) or "plan-" + scope
    return f"{GCE_API}/projects/{project}/{scope}s/{place}/{collection}/{name}"


def _computed_outputs(typ: str, name: str, inputs: dict, physical: Optional[str],
                      region: str = "us-east-1", project: Optional[str] = None) -> dict:
    """Deterministic values of what the provider computes on create (`pulumi up` mode)."""
    out: dict = {}
    if typ.startswith("aws:"):
        shape = _ARNS.get(typ, "arn:aws:plan:::" + typ.split(":")[-1].lower() + "/{n}")
        out["arn"] = shape.format(n=physical or name, a=ACCOUNT_ID, r=region)
    if typ.startswith("gcp:"):
        out["selfLink"] = _gcp_self_link(typ, physical or name, inputs, project)
    if typ == "gcp:cloudfunctionsv2/function:Function":
        out["url"] = (f"https://{inputs.get('location', 'region')}-plan-project."
                      f"cloudfunctions.net/{physical or name}")
    if typ == "gcp:serviceaccount/account:Account":
        out["email"] = f"{physical or name}@plan.iam.gserviceaccount.com"
    if typ == "gcp:projects/iAMCustomRole:IAMCustomRole":
        out["name"] = f"projects/{inputs.get('project', 'plan-project')}/roles/{physical}"
    if typ == "gcp:storage/hmacKey:HmacKey":
        # Deterministic key id (61 chars at most, like real GOOG1... ids); the secret comes
        # back marked secret, as the engine does for the SDK's additional_secret_outputs.
        out["accessId"] = f"GOOG1PLAN{name.upper().replace('-', '')}"[:61]
        out["secret"] = {_SIG: _SECRET_SIG, "value": f"plan-secret-{name}"}
    return out


class _Recorder(_mocks.Mocks):
    def __init__(self, *, preview: bool, seed: str, lookups: dict, strict_calls: bool = True,
                 now: Optional[float] = None):
        import time

        self.preview = preview
        #: the moment lookups answer for (epoch seconds; quotes change over time)
        self.now = time.time() if now is None else now
        self.seed = seed
        self.lookups = lookups
        self.strict_calls = strict_calls
        self.calls: list[tuple[str, dict]] = []
        self.rejections: list[Finding] = []
        self.physical: dict[tuple[str, str], Optional[str]] = {}  # (type, name) -> name
        self.autonamed: dict[tuple[str, str], str] = {}  # (type, name) -> auto-named input
        #: AWS provider resource (type, name) -> region
        self.provider_regions: dict[tuple[str, str], str] = {}
        #: GCP provider resource name -> project
        self.provider_projects: dict[str, str] = {}

    def new_resource(self, args: _mocks.MockResourceArgs):
        inputs = dict(args.inputs)
        physical = None
        rule = autoname_rule(args.typ) if args.custom else None
        if rule is not None:
            given = inputs.get(rule.field)
            if given in (None, ""):
                physical = generated_name(rule, args.name, seed=self.seed,
                                          type_token=args.typ)
                if len(physical) > rule.maxlen:
                    prefix = physical[:-rule.randlen]
                    self.rejections.append(Finding(
                        f"{args.typ} {args.name}",
                        f"the provider auto-names it \"{prefix}\" plus {rule.randlen} random "
                        f"characters, longer than its maximum length {rule.maxlen} (\"name "
                        f"'{prefix}' plus {rule.randlen} random chars is longer than maximum "
                        f"length {rule.maxlen}\"); shorten the cluster / storage / environment "
                        "name it is built from"))
                inputs[rule.field] = physical
                self.autonamed[(args.typ, args.name)] = rule.field
            elif isinstance(given, str):
                physical = given
        elif args.typ.startswith("pulumi-python:dynamic") and isinstance(inputs.get("name"), str):
            physical = inputs["name"]
        elif args.typ.startswith(KUBERNETES_PREFIX) and args.custom:
            physical = self._kubernetes_name(args, inputs)
        self.physical[(args.typ, args.name)] = physical
        if args.typ.startswith("pulumi:providers:"):
            # Providers are configured, not created: their reference stays usable by invokes.
            if args.typ == "pulumi:providers:aws":
                self.provider_regions[("pulumi:providers:aws", args.name)] = \
                    inputs.get("region", "")
            if args.typ == "pulumi:providers:gcp":
                self.provider_projects[args.name] = inputs.get("project", "")
            return f"{args.name}-id", inputs
        if self.preview:
            # `pulumi preview` of a create: the checked inputs (auto-name included) are known,
            # everything the provider computes, and the id, are unknown.
            return "", inputs
        outputs = {**_computed_outputs(args.typ, args.name, inputs, physical,
                                       self._provider_region(args.provider) or "us-east-1",
                                       self._provider_project(args.provider)),
                   **inputs}
        return f"{args.name}-id", outputs

    def _kubernetes_name(self, args, inputs: dict) -> Optional[str]:
        """pulumi-kubernetes names an object without ``metadata.name`` ``<logical name>-<8
        random characters>`` (its provider's auto-naming, pulumi-kubernetes
        ``provider/pkg/metadata/naming.go``); the mock fills it the same way."""
        meta = inputs.get("metadata")
        meta = dict(meta) if isinstance(meta, dict) else {}
        name = meta.get("name")
        if isinstance(name, str) and name:
            return name
        physical = generated_name(KUBERNETES_AUTONAME, args.name, seed=self.seed,
                                  type_token=args.typ)
        meta["name"] = physical
        inputs["metadata"] = meta
        self.autonamed[(args.typ, args.name)] = "metadata.name"
        return physical

    def call(self, args: _mocks.MockCallArgs):
        self.calls.append((args.token, dict(args.args)))
        fn = KNOWN_CALLS.get(args.token)
        if fn is None:
            raise RuntimeError(f"unexpected provider call {args.token} in the program: add a "
                               "deterministic answer to gpulease/planner/mocks.py KNOWN_CALLS")
        region = args.args.get("region") or self._provider_region(args.provider) or "us-east-1"
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        if len(params) >= 4:
            return fn(dict(args.args), region, self.lookups, self.now)
        if len(params) >= 3:
            return fn(dict(args.args), region, self.lookups)
        return fn(dict(args.args), region)

    def _provider_project(self, ref: Optional[str]) -> Optional[str]:
        """Project of the GCP provider a resource names (``urn:...::pulumi:providers:gcp::N::id``)."""
        if not ref:
            return None
        urn = ref.rsplit("::", 1)[0]
        return self.provider_projects.get(urn.rsplit("::", 1)[-1])

    def _provider_region(self, ref: Optional[str]) -> Optional[str]:
        """Region of the AWS provider an invoke names (``urn:...::pulumi:providers:aws::N::id``)."""
        if not ref:
            return None
        urn = ref.rsplit("::", 1)[0]
        return self.provider_regions.get(("pulumi:providers:aws", urn.rsplit("::", 1)[-1]))


class _RecordingMonitor(_mocks.MockMonitor):
    def __init__(self, mocks: _Recorder):
        super().__init__(mocks)
        self.recorded: list[RecordedResource] = []
        self._mocks_ref = mocks

    def RegisterResource(self, request):  # noqa: N802 (gRPC name)
        resp = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return resp
        raw = json_format.MessageToDict(request.object, preserving_proto_field_name=True)
        out = json_format.MessageToDict(resp.object, preserving_proto_field_name=True) \
            if resp.object is not None else {}
        self.recorded.append(RecordedResource(
            urn=resp.urn, type=request.type, name=request.name, inputs=_scrub(raw),
            custom=bool(request.custom), parent=request.parent, provider=request.provider,
            protect=bool(getattr(request, "protect", False)),
            retain_on_delete=bool(getattr(request, "retainOnDelete", False)),
            ignore_changes=tuple(request.ignoreChanges),
            depends_on=tuple(request.dependencies), outputs=_scrub(out),
            physical_name=self._mocks_ref.physical.get((request.type, request.name)),
            autoname=self._mocks_ref.autonamed.get((request.type, request.name))))
        return resp


@dataclass
class ProgramRun:
    resources: list[RecordedResource]
    result: Any
    outputs: dict
    calls: list
    #: what the program logged at warning level or above (`pulumi up` shows these as warnings).
    warnings: list = field(default_factory=list)
    preview: bool = False
    #: the moment (epoch seconds) the lookups answered for
    now: float = 0.0
    _index: dict = field(default_factory=dict, repr=False, compare=False)
    _index_len: int = field(default=-1, repr=False, compare=False)

    def by_type(self, typ: str) -> list[RecordedResource]:
        # indexed once per length of ``resources`` (a test looks up thousands of resources of
        # a run of thousands: a scan per lookup made that quadratic)
        if self._index_len != len(self.resources):
            index: dict[str, list[RecordedResource]] = {}
            for r in self.resources:
                index.setdefault(r.type, []).append(r)
            self._index, self._index_len = index, len(self.resources)
        return list(self._index.get(typ, ()))

    def one(self, typ: str, name: Optional[str] = None) -> RecordedResource:
        found = [r for r in self.by_type(typ) if name is None or r.name == name]
        if len(found) != 1:
            raise AssertionError(f"expected one {typ} {name or ''}, found "
                                 f"{[r.urn for r in found]}")
        return found[0]

    @property
    def custom(self) -> list[RecordedResource]:
        return [r for r in self.resources if r.custom]


def _capturing_logger() -> tuple[logging.Logger, list[str]]:
    """A private logger for the mock engine: the program's `pulumi.log.warn` messages are
    collected (the plan shows them) instead of printed by the root logger."""
    captured: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record.getMessage())

    logger = logging.Logger("gpulease.program", level=logging.WARNING)
    logger.addHandler(_Collect())
    logger.propagate = False
    return logger, captured


def _no_stack_trace() -> source_pb2.StackTrace:
    return source_pb2.StackTrace()


def run_program(program: Callable[[], Any], *, stack: str, config: Optional[dict] = None,
                project: str = PROJECT, preview: bool = False,
                strict_calls: bool = True, seed: str = DEFAULT_SEED,
                lookups: Optional[dict] = None, now: Optional[float] = None,
                pause_gc: bool = True) -> ProgramRun:
    """Run ``program`` under mocks; return every registered resource and the stack outputs.

    ``config`` maps full keys (``gpulease:clusters``) to values as the engine passes them
    (strings; objects JSON-encoded). ``preview``: `pulumi preview` (provider-computed outputs
    unknown) instead of `pulumi up` (deterministic values). ``lookups``: data-source answers
    (default: :func:`load_lookups`). ``now``: the moment (epoch seconds) lookups that change
    over time answer for (Capacity Block quotes; default: the current time).
    ``pause_gc=False`` leaves the cyclic collector running as it does under the real engine
    (``bench/plan.py --in-process --engine-gc`` measures that). Raises
    :class:`ProviderRejected` when a provider would refuse a resource before calling the cloud
    (e.g. an auto-name longer than its maximum).
    """
    with _LOCK:
        mocks = _Recorder(preview=preview, seed=seed, strict_calls=strict_calls,
                          lookups=lookups if lookups is not None else load_lookups(), now=now)
        monitor = _RecordingMonitor(mocks)
        logger, warnings = _capturing_logger()
        pulumi.runtime.set_all_config(dict(config or {}))
        pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=preview,
                                 monitor=monitor, logger=logger)
        from gpulease import clock

        clock.set_now(mocks.now)     # the program's decision judges time as the lookups do
        outputs: dict = {}
        holder: dict = {}
        # Speed (bench/plan.py): the SDK captures a Python stack trace per registration for the
        # engine's source positions, which the mock monitor never reads; and the cyclic
        # collector rescans the growing object graph of a large program again and again.
        # Both are restored afterwards; reference counting still frees acyclic garbage. In a
        # one-shot process what the run built lives until exit: it is frozen out of later
        # collections before the collector resumes (gpulease.gctuning).
        saved_trace = _runtime_resource._get_stack_trace
        _runtime_resource._get_stack_trace = _no_stack_trace
        paused = gctuning.collector_paused() if pause_gc else contextlib.nullcontext()
        try:
            with paused:
                stack_res = pulumi.runtime.settings.get_root_resource()
                holder["result"] = program()
                _sync_await(pulumi.runtime.stack.wait_for_rpcs())
                if stack_res is not None:
                    raw_outputs = getattr(stack_res, "outputs", {}) or {}
                    outputs = {k: _resolve(v) for k, v in raw_outputs.items()}
        finally:
            _runtime_resource._get_stack_trace = saved_trace
            pulumi.runtime.settings.reset_options()  # type: ignore[attr-defined]
            clock.set_now(None)
        if mocks.rejections:
            raise ProviderRejected(mocks.rejections, headline=(
                f"`pulumi up --stack {stack}` would fail: the provider rejects "
                f"{plural(len(mocks.rejections), 'resource')} before calling the cloud"))
        return ProgramRun(resources=monitor.recorded, result=holder.get("result"),
                          outputs=outputs, calls=mocks.calls, preview=preview,
                          warnings=warnings, now=mocks.now)


def _resolve(value: Any) -> Any:
    if isinstance(value, pulumi.Output):
        fut = value.future()
        try:
            return _sync_await(fut) if fut is not None else None
        except Exception:  # noqa: BLE001 - an unresolvable preview output is shown as unknown
            return UNKNOWN_MASK
    return value
