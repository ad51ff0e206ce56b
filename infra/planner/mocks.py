"""Run a Pulumi program in-process under Pulumi's mock runtime and record every resource.

This is how `gpulease plan` runs THE SAME program that `pulumi up` runs, with no engine, no
cloud and no credentials, and how the tests inspect resources. The recording mock answers
only the data-source calls it knows (``KNOWN_CALLS``) and fails on anything else, so a new
provider call in the program cannot silently return nothing.
"""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as _mocks
from pulumi.runtime import rpc
from pulumi.runtime.sync_await import _sync_await

SECRET_MASK = "[secret]"
UNKNOWN_MASK = "[unknown]"
_SIG = rpc._special_sig_key  # type: ignore[attr-defined]
_SECRET_SIG = rpc._special_secret_sig  # type: ignore[attr-defined]
_RESOURCE_SIG = rpc._special_resource_sig  # type: ignore[attr-defined]

_LOCK = threading.Lock()  # the Pulumi runtime settings are process-global


def _zones(region: str) -> list[str]:
    return [f"{region}{s}" for s in ("a", "b", "c")]


def _aws_azs(args: dict, region: str) -> dict:
    names = _zones(region)
    return {"names": names, "zoneIds": [f"{region[:2]}{i}-az{i}" for i, _ in enumerate(names, 1)],
            "id": region, "groupNames": [region], "state": "available"}


#: data-source tokens the program may call, with deterministic answers.
KNOWN_CALLS: dict[str, Callable[[dict, str], dict]] = {
    "aws:index/getAvailabilityZones:getAvailabilityZones": _aws_azs,
    "aws:index/getCallerIdentity:getCallerIdentity": lambda a, r: {
        "accountId": "123456789012", "arn": "arn:aws:iam::123456789012:user/plan",
        "userId": "AIDPLAN", "id": "123456789012"},
    "aws:index/getPartition:getPartition": lambda a, r: {
        "partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws",
        "reverseDnsPrefix": "com.amazonaws"},
    "aws:index/getRegion:getRegion": lambda a, r: {"name": r, "region": r, "id": r,
                                                   "endpoint": f"ec2.{r}.amazonaws.com",
                                                   "description": r},
    "aws:ec2/getAmi:getAmi": lambda a, r: {"id": "ami-0123456789abcdef0",
                                           "imageId": "ami-0123456789abcdef0",
                                           "name": (a.get("filters") or [{}])[0].get("values", ["ami"])[0],
                                           "architecture": "x86_64"},
    "aws:ssm/getParameter:getParameter": lambda a, r: {"name": a.get("name"), "type": "String",
                                                       "value": "ami-0123456789abcdef0",
                                                       "id": a.get("name"), "arn": "arn:aws:ssm:"},
    "aws:iam/getPolicyDocument:getPolicyDocument": lambda a, r: {
        "json": json.dumps({"Version": "2012-10-17", "Statement": a.get("statements", [])}),
        "id": "policy"},
    "aws:ec2/getCapacityBlockOffering:getCapacityBlockOffering": lambda a, r: {
        "capacityBlockOfferingId": "cb-0123456789abcdef0", "availabilityZone": r + "a",
        "currencyCode": "USD", "upfrontFee": "0", "tenancy": "default", "id": "cb", **a},
    "aws:ec2/getSubnet:getSubnet": lambda a, r: {"id": a.get("id"), "availabilityZone": r + "a",
                                                 "vpcId": "vpc-plan"},
    "gcp:compute/getZones:getZones": lambda a, r: {"names": _zones(a.get("region", r) + "-"),
                                                   "id": "zones"},
    "gcp:organizations/getProject:getProject": lambda a, r: {
        "projectId": a.get("projectId", "plan-project"), "number": "123456789012",
        "id": a.get("projectId", "plan-project")},
    "gcp:storage/getTransferProjectServiceAccount:getTransferProjectServiceAccount": lambda a, r: {
        "email": "project-123456789012@storage-transfer-service.iam.gserviceaccount.com",
        "member": "serviceAccount:project-123456789012@storage-transfer-service.iam."
                  "gserviceaccount.com",
        "subjectId": "100000000000000000001", "project": a.get("project") or "plan-project",
        "id": a.get("project") or "plan-project"},
    "gcp:compute/getImage:getImage": lambda a, r: {
        "selfLink": f"projects/{a.get('project', 'p')}/global/images/family/{a.get('family', 'img')}",
        "name": a.get("family", "img"), "id": "image"},
}


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


class _Recorder(_mocks.Mocks):
    def __init__(self, strict_calls: bool = True):
        self.strict_calls = strict_calls
        self.calls: list[tuple[str, dict]] = []

    def new_resource(self, args: _mocks.MockResourceArgs):
        outputs = dict(args.inputs)
        # Deterministic ids/arns so dependent resources resolve during the plan.
        rid = f"{args.name}-id"
        if args.typ.startswith("aws:"):
            outputs.setdefault("arn", f"arn:aws:plan:::{args.typ.split(':')[-1].lower()}/{args.name}")
        if args.typ.startswith("gcp:"):
            outputs.setdefault("selfLink", f"https://plan.invalid/{args.name}")
        if args.typ == "gcp:cloudfunctionsv2/function:Function":
            outputs.setdefault("url", f"https://{args.inputs.get('location', 'region')}-plan-"
                                      f"project.cloudfunctions.net/{args.inputs.get('name', args.name)}")
        if args.typ == "gcp:serviceaccount/account:Account":
            outputs.setdefault("email", f"{args.inputs.get('accountId', args.name)}@plan.iam.gserviceaccount.com")
        if args.typ == "gcp:storage/hmacKey:HmacKey":
            # Deterministic key id (61 chars at most, like real GOOG1... ids); the secret comes
            # back marked secret, as the engine does for the SDK's additional_secret_outputs.
            outputs.setdefault("accessId", f"GOOG1PLAN{args.name.upper().replace('-', '')}"[:61])
            outputs.setdefault("secret", {_SIG: _SECRET_SIG, "value": f"plan-secret-{args.name}"})
        outputs.setdefault("name", outputs.get("name", args.name))
        return rid, outputs

    def call(self, args: _mocks.MockCallArgs):
        self.calls.append((args.token, dict(args.args)))
        fn = KNOWN_CALLS.get(args.token)
        if fn is None:
            raise RuntimeError(f"unexpected provider call {args.token} in the program: add a "
                               "deterministic answer to infra/planner/mocks.py KNOWN_CALLS")
        region = args.args.get("region") or "us-east-1"
        return fn(dict(args.args), region)


class _RecordingMonitor(_mocks.MockMonitor):
    def __init__(self, mocks: _Recorder):
        super().__init__(mocks)
        self.recorded: list[RecordedResource] = []

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
            depends_on=tuple(request.dependencies), outputs=_scrub(out)))
        return resp


@dataclass
class ProgramRun:
    resources: list[RecordedResource]
    result: Any
    outputs: dict
    calls: list
    #: what the program logged at warning level or above (`pulumi up` shows these as warnings).
    warnings: list = field(default_factory=list)

    def by_type(self, typ: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type == typ]

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


def run_program(program: Callable[[], Any], *, stack: str, config: Optional[dict] = None,
                project: str = "gpulease", preview: bool = True,
                strict_calls: bool = True) -> ProgramRun:
    """Run ``program`` under mocks; return every registered resource and the stack outputs.

    ``config`` maps full keys (``gpulease:clusters``) to values as the engine passes them
    (strings; objects JSON-encoded).
    """
    with _LOCK:
        mocks = _Recorder(strict_calls=strict_calls)
        monitor = _RecordingMonitor(mocks)
        logger, warnings = _capturing_logger()
        pulumi.runtime.set_all_config(dict(config or {}))
        pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=preview,
                                 monitor=monitor, logger=logger)
        outputs: dict = {}
        holder: dict = {}

        def _main():
            holder["result"] = program()

        try:
            stack_res = pulumi.runtime.settings.get_root_resource()
            _main()
            _sync_await(pulumi.runtime.stack.wait_for_rpcs())
            if stack_res is not None:
                raw_outputs = getattr(stack_res, "outputs", {}) or {}
                outputs = {k: _resolve(v) for k, v in raw_outputs.items()}
        finally:
            pulumi.runtime.settings.reset_options()  # type: ignore[attr-defined]
        return ProgramRun(resources=monitor.recorded, result=holder.get("result"),
                          outputs=outputs, calls=mocks.calls, warnings=warnings)


def _resolve(value: Any) -> Any:
    if isinstance(value, pulumi.Output):
        fut = value.future()
        try:
            return _sync_await(fut) if fut is not None else None
        except Exception:  # noqa: BLE001 - an unresolvable preview output is shown as unknown
            return UNKNOWN_MASK
    return value
