"""The GCP scheduled reaper: a Cloud Function (2nd gen) called by Cloud Scheduler.

Called through ``gpulease.reaper.deploy.deploy_reaper`` (this module is ``GCP.reaper_deploy_module``)
when ``gpulease:reaper.schedule`` is set and the environment has GCP clusters. The function runs
``gpulease.reaper.gcp_function.handler`` from an archive of :data:`GCP_FUNCTION_FILES`
(standard library + google-cloud-compute + google-cloud-storage + requests: no pydantic, no
Pulumi). The EventBridge schedule expression is converted to unix-cron for Cloud Scheduler by
:func:`unix_cron`.
"""
from __future__ import annotations

import hashlib
import re
from typing import Callable, Optional

import pulumi
import pulumi_gcp as gcp

from gpulease import naming
from gpulease.clouds.gcp.cloud import mig_name
from gpulease.costing.context import shared
from gpulease.errors import ConfigError, Finding
from gpulease.model import EnvironmentDecision
from gpulease.purchase import NODE_MODELS
from gpulease.reaper.bundle import ROOT, SCHEDULE_PATH, SHARED_FILES, catalog_data_files


# ---- schedule conversion (pure) --------------------------------------------------------------
#: AWS cron fields (EventBridge "Schedule expressions for rules"): name, low, high.
_CRON_FIELDS = (("minutes", 0, 59), ("hours", 0, 23), ("day-of-month", 1, 31),
                ("month", 1, 12), ("day-of-week", 1, 7), ("year", 1970, 2199))
_MONTHS = {m: i for i, m in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG",
                                       "SEP", "OCT", "NOV", "DEC"), 1)}
#: EventBridge day-of-week 1-7 = SUN-SAT; unix-cron 0-6 = SUN-SAT.
_DAYS = {d: i for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"), 1)}
_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
#: EventBridge's L / W / # forms ("L", "LW", "15W", "5L", "L-2", "2#1"); not month names.
_SPECIAL = re.compile(r"#|^L(W|-\d+)?$|^\d+[LW]$")
_TOKEN = re.compile(r"^(?:(\*)|([0-9A-Z]+)(?:-([0-9A-Z]+))?)(?:/(\d+))?$")


def _schedule_error(expression: str, why: str, source: str) -> ConfigError:
    return ConfigError([Finding(SCHEDULE_PATH, f"{expression!r} cannot run on Cloud Scheduler: "
                                f"{why}; use e.g. \"rate(15 minutes)\", \"rate(1 hour)\" or "
                                "\"cron(0/15 * * * ? *)\"", source=source)])


def _rate_cron(n: int, unit: str, expression: str, source: str) -> str:
    if n < 1:
        raise _schedule_error(expression, "the rate must be at least 1", source)
    if unit.startswith("minute"):
        if n % 60 == 0:
            return _rate_cron(n // 60, "hours", expression, source)
        if 60 % n:
            # "*/7" restarts at every full hour (runs at :56 then :00), not every 7 minutes.
            raise _schedule_error(expression, f"unix-cron can only repeat every N minutes "
                                  f"when N divides 60 ({n} does not)", source)
        return "* * * * *" if n == 1 else f"*/{n} * * * *"
    if unit.startswith("hour"):
        if n % 24 == 0:
            return _rate_cron(n // 24, "days", expression, source)
        if 24 % n:
            raise _schedule_error(expression, f"unix-cron can only repeat every N hours when N "
                                  f"divides 24 ({n} does not)", source)
        return "0 * * * *" if n == 1 else f"0 */{n} * * *"
    if n == 1:
        return "0 0 * * *"
    if n == 7:
        return "0 0 * * 0"
    raise _schedule_error(expression, f"unix-cron cannot repeat every {n} days (day-of-month "
                          "steps restart every month); use rate(1 day) or rate(7 days)", source)


def _cron_field(value: str, index: int, expression: str, source: str) -> str:
    name, low, high = _CRON_FIELDS[index]
    names = _MONTHS if name == "month" else _DAYS if name == "day-of-week" else {}
    if value == "?":
        if name not in ("day-of-month", "day-of-week"):
            raise _schedule_error(expression, f"'?' is only allowed in day-of-month or "
                                  f"day-of-week, not in {name}", source)
        return "*"
    shift = -1 if name == "day-of-week" else 0
    out = []
    for token in value.upper().split(","):
        if _SPECIAL.search(token):
            raise _schedule_error(expression, f"{name} {token!r} uses L, W or # (last day, "
                                  "nearest weekday, nth weekday), which unix-cron has no form "
                                  "for", source)
        m = _TOKEN.match(token)
        if not m:
            raise _schedule_error(expression, f"{name} {token!r} is not a value, range, list "
                                  "or step", source)
        star, first, last, step = m.groups()

        def num(v: str) -> int:
            n = names.get(v) if v in names else int(v) if v.isdigit() else None
            if n is None or not low <= n <= high:
                names_hint = f" or {min(names, key=names.get)}-{max(names, key=names.get)}" \
                    if names else ""
                raise _schedule_error(expression, f"{name} {v!r} is not in {low}-{high}"
                                      f"{names_hint}", source)
            return n
        if step is not None and int(step) < 1:
            raise _schedule_error(expression, f"{name} step {step!r} must be at least 1", source)
        if star:
            out.append("*" if step is None else f"*/{step}")
            continue
        a = num(first)
        if last is None and step is None:
            out.append(str(a + shift))
            continue
        # AWS "5/15" = from 5 to the end every 15; unix-cron wants the range spelled out.
        b = num(last) if last is not None else high
        if b < a:
            raise _schedule_error(expression, f"{name} range {token!r} runs backwards", source)
        rng = f"{a + shift}-{b + shift}"
        out.append(rng if step is None else f"{rng}/{step}")
    return ",".join(out)


def unix_cron(expression: str, *, source: str = "") -> str:
    """EventBridge ``rate(...)`` / 6-field ``cron(...)`` -> 5-field unix-cron (Cloud Scheduler).

    EventBridge cron is in UTC: the job is created with ``time_zone="Etc/UTC"``. Raises
    ConfigError naming ``gpulease:reaper.schedule`` when unix-cron has no exact equivalent.
    """
    expr = expression.strip()
    m = _RATE.match(expr)
    if m:
        return _rate_cron(int(m.group(1)), m.group(2), expr, source)
    if not (expr.startswith("cron(") and expr.endswith(")")):
        raise _schedule_error(expr, "not a rate(...) or cron(...) expression", source)
    fields = expr[len("cron("):-1].split()
    if len(fields) != 6:
        raise _schedule_error(expr, f"EventBridge cron has 6 fields (minutes hours "
                              f"day-of-month month day-of-week year), found {len(fields)}", source)
    if fields[5] != "*":
        raise _schedule_error(expr, f"unix-cron has no year field (year is {fields[5]!r}, "
                              "use *)", source)
    return " ".join(_cron_field(v, i, expr, source) for i, v in enumerate(fields[:5]))


#: package files the function imports (relative to ROOT): the shared ones, the GCP adaptor
#: and the handler.
GCP_FUNCTION_FILES = SHARED_FILES + ("reaper/gcp.py", "reaper/gcp_function.py")
GCP_RUNTIME = "python312"
GCP_ENTRY_POINT = "handler"
#: the Python runtime loads the entry point from main.py at the source root (Cloud Run
#: functions, "Source directory structure").
GCP_MAIN = ('"""Cloud Functions entry: the gpulease reaper."""\n'
            "from gpulease.reaper.gcp_function import handler  # noqa: F401\n")
#: pinned to the versions installed with gpulease (the ones its reaper code runs and is tested
#: with here: constraints.txt's pins in a checkout, the resolved ones in a wheel install).
GCP_REQUIREMENTS = ("google-cloud-compute", "google-cloud-storage", "requests")

#: What gpulease/reaper/gcp.py calls, as IAM permissions (Compute/Monitoring REST references):
#: instances.aggregatedList -> compute.instances.list (project); instances.get (re-read after
#: a 412 on setLabels); instanceGroupManagers.aggregatedList -> compute.instanceGroupManagers
#: .list (MIG target sizes, re-read right before acting); reservations.get; monitoring
#: projects.timeSeries.list; instances.getGuestAttributes -> compute.instances.getGuestAttributes
#: (the nodes' busy witness, contract C10). The deadline step (issue 37): instanceTemplates.get
#: -> compute.instanceTemplates.get (a MIG's labels are its template's); listManagedInstances
#: needs compute.instanceGroupManagers.list ("The required permission to execute this command
#: is compute.instanceGroupManagers.list", gcloud compute instance-groups managed
#: list-instances, read 2026-12-04).
GCP_READ_PERMISSIONS = ("compute.instanceGroupManagers.list", "compute.instanceTemplates.get",
                        "compute.instances.get", "compute.instances.getGuestAttributes",
                        "compute.instances.list", "compute.reservations.get",
                        "monitoring.timeSeries.list")
#: instances.setLabels (idle marks, reaper claim); instanceGroupManagers.resize /
#: .deleteInstances (idle nodes above the floor) and their regional forms: "Authorization
#: requires the following IAM permission on the specified resource instanceGroupManager:
#: compute.instanceGroupManagers.update" and nothing on the instances (Compute Engine REST
#: reference, instanceGroupManagers.deleteInstances / regionInstanceGroupManagers
#: .deleteInstances, read 2026-12-03): the MIG deletes its VMs itself, as the Google APIs
#: service agent. (Before: compute.instances.delete too, which the method does not document.)
#: The operations they return are not polled, so no zoneOperations.get. The deadline step's
#: switch mark: instanceGroupManagers.patch / regionInstanceGroupManagers.patch of the spot
#: MIG's all-instances configuration, which "requires one or more of the following IAM
#: permissions on the specified resource instanceGroupManager: compute.instanceGroupManagers.get,
#: compute.instanceGroupManagers.update" (Compute Engine REST reference, read 2026-12-04): both,
#: under the same condition (the environment's MIGs only).
GCP_ACT_PERMISSIONS = ("compute.instanceGroupManagers.get",
                       "compute.instanceGroupManagers.update", "compute.instances.setLabels")
#: The deadline step reads each job's progress document (objects.get with alt=media):
#: storage.objects.get, granted under a condition naming exactly those objects
#: (:func:`progress_condition`); no storage.buckets.get (gcp.py stops google-cloud-storage's
#: background bucket lookup) and no listing.
GCP_PROGRESS_PERMISSIONS = ("storage.objects.get",)


def requirement_pins(names: tuple = GCP_REQUIREMENTS) -> list[str]:
    """``name==version`` lines for ``names``: the distributions installed beside gpulease."""
    from importlib import metadata

    return [f"{n}=={metadata.version(n)}" for n in names]


def gcp_source_files() -> dict[str, bytes]:
    """Archive path -> content of the Cloud Function's source zip."""
    files = {f"gpulease/{rel}": (ROOT / rel).read_bytes() for rel in GCP_FUNCTION_FILES}
    for data in catalog_data_files():
        files[f"gpulease/catalog/data/{data.name}"] = data.read_bytes()
    for pkg in ("gpulease", "gpulease/reaper"):
        files[f"{pkg}/__init__.py"] = b'"""gpulease reaper (Cloud Function bundle)."""\n'
    files["main.py"] = GCP_MAIN.encode()
    files["requirements.txt"] = ("\n".join(requirement_pins()) + "\n").encode()
    return files


def source_digest(files: dict[str, bytes]) -> str:
    """Content hash of the source: it names the zip object, so a change redeploys the function."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()[:16]


def gcp_source_archive(files: dict[str, bytes]) -> pulumi.AssetArchive:
    return pulumi.AssetArchive({n: pulumi.StringAsset(b.decode()) for n, b in files.items()})


def _gcp_id(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def account_id(kind: str, environment: str) -> str:
    """Service account id (6-30 chars, ``[a-z]([-a-z0-9]*[a-z0-9])``) unique per environment."""
    base = f"gpulease-{kind}-{_gcp_id(environment)}"
    if len(base) > 30:
        base = f"{base[:24].rstrip('-')}-{hashlib.sha1(base.encode()).hexdigest()[:5]}"
    return base


def custom_role_id(kind: str, environment: str) -> str:
    """Project custom role id ``[a-zA-Z0-9_.]{3,64}``; stable (deleted ids stay reserved)."""
    base = re.sub(r"[^a-zA-Z0-9_]", "_", f"gpulease_reaper_{kind}_{environment}")
    if len(base) > 64:
        base = f"{base[:57]}_{hashlib.sha1(base.encode()).hexdigest()[:6]}"
    return base


def act_condition(*, project: str, clusters: list[str]) -> dict:
    """IAM condition: setLabels/resize only on this environment's clusters' VMs and MIGs.

    Compute Engine supports resource.name in IAM Conditions (IAM "Attribute reference for IAM
    Conditions"); names are ``projects/P/zones/Z/instances/N`` and
    ``projects/P/{zones/Z|regions/R}/instanceGroupManagers/N``. A MIG's VMs are named
    ``<base_instance_name>-<4 chars>`` with the cluster name as base (gpulease/clouds/gcp/cluster.py),
    its MIGs ``mig_name(cluster, model)``. ``extract`` returns "" when the segment is absent,
    so each clause only ever matches its own resource kind.
    """
    migs = sorted({mig_name(c, m) for c in clusters for m in NODE_MODELS})
    vm = " || ".join(f'resource.name.extract("/instances/{{name}}").startsWith("{c}-")'
                     for c in sorted(clusters))
    mig_list = ", ".join(f'"{m}"' for m in migs)
    return {"title": "own-environment-clusters-only",
            "description": f"setLabels/resize only on the VMs and MIGs of {', '.join(sorted(clusters))}",
            "expression": (f'resource.name.startsWith("projects/{project}/") && ('
                           f'{vm} || resource.name.extract("/instanceGroupManagers/{{name}}") '
                           f"in [{mig_list}])")}


def progress_condition(objects: list[tuple[str, str]]) -> dict:
    """IAM condition: storage.objects.get on the progress documents of these (bucket, cluster)
    pairs and nothing else. Object reads are checked against the object's resource name,
    ``projects/_/buckets/BUCKET/objects/OBJECT`` ("IAM Conditions for Cloud Storage";
    resource.name, as in gpulease.clouds.gcp.cloud.prefix_condition), so each document is
    named exactly (gpulease.naming.progress_object)."""
    names = [f"projects/_/buckets/{b}/objects/{naming.progress_object(c)}"
             for b, c in sorted(set(objects))]
    return {"title": "progress-documents-only",
            "description": "read the gpulease-progress.json of this environment's clusters only",
            "expression": " || ".join(f'resource.name == "{n}"' for n in names)}


class ScheduledGcpReaper(pulumi.ComponentResource):
    """Cloud Function (2nd gen) running the reaper, called by Cloud Scheduler with OIDC."""

    def __init__(self, name: str, env: EnvironmentDecision, *, project: str, region: str,
                 cron: str, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpulease:reaper:ScheduledGcp", name, None, opts)
        self.cost_context = shared()
        spec = env.stack
        settings = spec.reaper
        environment = spec.environment
        clusters = sorted({c.name for c in env.clusters if c.cloud == "gcp"})
        progress = [(naming.checkpoint_bucket(spec, c), c.name) for c in env.clusters
                    if c.cloud == "gcp"]
        self.provider = gcp.Provider(f"{name}-provider", project=project, region=region,
                                     opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        fn_name = f"gpulease-reaper-{_gcp_id(environment)}"[:63].rstrip("-")

        # Source: a small private bucket; data-outlives-stack rules as for every bucket.
        self.bucket = gcp.storage.Bucket(
            f"{name}-source", project=project, location=region.upper(),
            uniform_bucket_level_access=True, public_access_prevention="enforced",
            force_destroy=False,
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider,
                                        retain_on_delete=True, protect=spec.is_prod))
        files = gcp_source_files()
        self.source_object = gcp.storage.BucketObject(
            f"{name}-source-zip", bucket=self.bucket.name,
            name=f"{fn_name}-{source_digest(files)}.zip", source=gcp_source_archive(files),
            opts=child)

        # Runtime identity: read everything the reaper judges, act only on own clusters.
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa", project=project, account_id=account_id("reaper", environment),
            display_name=f"gpulease reaper {environment}",
            description=f"runs the scheduled gpulease reaper for environment {environment}",
            opts=child)
        member = self.account.email.apply(lambda e: f"serviceAccount:{e}")
        self.read_role = gcp.projects.IAMCustomRole(
            f"{name}-read-role", project=project, role_id=custom_role_id("read", environment),
            title=f"gpulease reaper {environment} (read)",
            description="List/get instances, get reservations, read GPU utilization",
            permissions=list(GCP_READ_PERMISSIONS), stage="GA", opts=child)
        self.act_role = gcp.projects.IAMCustomRole(
            f"{name}-act-role", project=project, role_id=custom_role_id("act", environment),
            title=f"gpulease reaper {environment} (act)",
            description="Set the idle labels on VMs, resize MIGs, remove idle VMs from MIGs",
            permissions=list(GCP_ACT_PERMISSIONS), stage="GA", opts=child)
        # Listing is checked against the project, so the read grant cannot carry a
        # resource.name condition; the write grant does.
        self.read_binding = gcp.projects.IAMMember(
            f"{name}-read", project=project, role=self.read_role.name, member=member, opts=child)
        self.act_binding = gcp.projects.IAMMember(
            f"{name}-act", project=project, role=self.act_role.name, member=member,
            condition=act_condition(project=project, clusters=clusters), opts=child)
        # the deadline step's progress documents (issue 37): those objects, nothing else
        self.progress_role = gcp.projects.IAMCustomRole(
            f"{name}-progress-role", project=project,
            role_id=custom_role_id("progress", environment),
            title=f"gpulease reaper {environment} (progress)",
            description="Read the window jobs' progress documents (gpulease-progress.json)",
            permissions=list(GCP_PROGRESS_PERMISSIONS), stage="GA", opts=child)
        self.progress_binding = gcp.projects.IAMMember(
            f"{name}-progress", project=project, role=self.progress_role.name, member=member,
            condition=progress_condition(progress), opts=child)

        self.function = gcp.cloudfunctionsv2.Function(
            f"{name}-fn", project=project, name=fn_name, location=region,
            description=f"gpulease reaper for environment {environment}",
            build_config={"runtime": GCP_RUNTIME, "entry_point": GCP_ENTRY_POINT,
                          "source": {"storage_source": {"bucket": self.bucket.name,
                                                        "object": self.source_object.name}}},
            service_config={
                "service_account_email": self.account.email,
                "available_memory": "256M", "timeout_seconds": 300,
                # one run at a time: a manual call and a scheduled one must not race.
                "max_instance_count": 1, "min_instance_count": 0,
                "ingress_settings": "ALLOW_ALL", "all_traffic_on_latest_revision": True,
                "environment_variables": {
                    "GPULEASE_ENVIRONMENT": environment,
                    "GPULEASE_PROJECT": project,
                    "GPULEASE_THRESHOLD_PCT": str(settings.threshold_pct),
                    "GPULEASE_GRACE_MINUTES": str(settings.grace_minutes),
                    "GPULEASE_MAX_ACTIONS": str(settings.max_actions),
                    "GPULEASE_APPLY": "true" if settings.apply else "false"}},
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider,
                                        depends_on=[self.read_binding, self.act_binding,
                                                    self.progress_binding]))

        # Caller identity: may invoke this function's Cloud Run service and nothing else
        # (a 2nd gen function runs as a Cloud Run service of the same name).
        self.invoker_account = gcp.serviceaccount.Account(
            f"{name}-invoker-sa", project=project,
            account_id=account_id("reaper-inv", environment),
            display_name=f"gpulease reaper {environment} scheduler",
            description="Cloud Scheduler's OIDC identity for the gpulease reaper function",
            opts=child)
        self.invoker = gcp.cloudrunv2.ServiceIamMember(
            f"{name}-invoker", project=project, location=region, name=self.function.name,
            role="roles/run.invoker",
            member=self.invoker_account.email.apply(lambda e: f"serviceAccount:{e}"),
            opts=child)
        self.job = gcp.cloudscheduler.Job(
            f"{name}-schedule", project=project, region=region, name=fn_name,
            description=f"run the gpulease reaper for {environment} ({settings.schedule})",
            schedule=cron, time_zone="Etc/UTC", attempt_deadline="320s",
            retry_config={"retry_count": 0},
            http_target={"uri": self.function.url, "http_method": "POST",
                         "oidc_token": {"service_account_email": self.invoker_account.email,
                                        "audience": self.function.url}},
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider,
                                        depends_on=[self.invoker]))
        self.register_outputs({"function": self.function.name, "schedule": cron})

    @property
    def resources(self) -> list[pulumi.Resource]:
        return [self, self.provider, self.bucket, self.source_object, self.account,
                self.read_role, self.act_role, self.read_binding, self.act_binding,
                self.progress_role, self.progress_binding, self.function, self.invoker_account, self.invoker, self.job]


def _gcp_project(env: EnvironmentDecision) -> str:
    spec = env.stack.clouds.get("gcp")
    if spec is None or not spec.project:
        raise ConfigError([Finding("gpulease:clouds.gcp.project", "the scheduled reaper runs "
                                   "in the GCP project of the clusters but none is configured; "
                                   "add gpulease:clouds.gcp.project", source=env.stack.source)])
    return spec.project


def prepare(env: EnvironmentDecision) -> Callable[[], list[pulumi.Resource]]:
    """Check what the GCP reaper needs (a project, a schedule unix-cron can express) before
    anything is declared, and return what declares it."""
    settings = env.stack.reaper
    args = dict(project=_gcp_project(env),
                region=sorted({c.region for c in env.clusters if c.cloud == "gcp"})[0],
                cron=unix_cron(settings.schedule, source=env.stack.source))
    return lambda: ScheduledGcpReaper("reaper-gcp", env, **args).resources


__all__ = ["unix_cron", "GCP_FUNCTION_FILES", "GCP_RUNTIME", "GCP_ENTRY_POINT", "GCP_MAIN",
           "GCP_REQUIREMENTS", "GCP_READ_PERMISSIONS", "GCP_ACT_PERMISSIONS",
           "GCP_PROGRESS_PERMISSIONS", "progress_condition", "requirement_pins",
           "gcp_source_files", "source_digest", "gcp_source_archive", "account_id",
           "custom_role_id", "act_condition", "ScheduledGcpReaper", "prepare"]
