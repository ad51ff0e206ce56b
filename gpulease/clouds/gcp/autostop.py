"""Least-privilege grant for GCP node-side autostop: a node may delete itself through its MIG.

The bootstrap's autostop script (``templates/bootstrap/autostop.sh.j2``) runs
``gcloud compute instance-groups managed delete-instances <mig> --zone Z --instances <self>``,
which calls ``instanceGroupManagers.deleteInstances``: "Authorization requires the following IAM
permission on the specified resource instanceGroupManager: compute.instanceGroupManagers.update"
and nothing on the instance (Compute Engine REST reference, instanceGroupManagers.deleteInstances,
read 2026-12-03: the MIG deletes the VM itself, as the reaper's grant in
gpulease/reaper/gcp_deploy.py also relies on; this grant carried ``compute.instances.delete`` before); gcloud reads the MIG
(``.get``) and polls the zonal operation (``compute.zoneOperations.get``, already in the node's
``roles/compute.viewer``). Without this grant the call is denied and the
script falls back to powering off, which the MIG then repairs by restarting the VM.
"""
from __future__ import annotations

import hashlib
import re
from typing import Optional, Sequence

import pulumi
import pulumi_gcp as gcp


AUTOSTOP_PERMISSIONS = ("compute.instanceGroupManagers.get",
                        "compute.instanceGroupManagers.update")


def custom_role_id(environment: str, cluster: str) -> str:
    """Project custom role id: ``[a-zA-Z0-9_.]{3,64}`` (no hyphens), unique per env+cluster.

    A deleted custom role's id stays reserved for a while (IAM "Creating and managing custom
    roles": deleted roles can be undeleted for 7 days, ids are reusable only after 37), hence
    a stable id rather than a fresh one per run.
    """
    base = re.sub(r"[^a-zA-Z0-9_]", "_", f"gpulease_autostop_{environment}_{cluster}")
    if len(base) > 64:
        base = f"{base[:57]}_{hashlib.sha1(base.encode()).hexdigest()[:6]}"
    return base


def autostop_condition(*, project: str, zone: str, mig_names: Sequence[str],
                       cluster: str) -> dict:
    """IAM condition: only this cluster's MIGs (the grant holds no permission on instances).

    Compute Engine resource names in IAM Conditions are
    ``projects/P/zones/Z/instanceGroupManagers/NAME`` (IAM "Resource attributes for IAM
    Conditions", resource.name); exact names, so another cluster's MIG never matches.
    """
    zone_path = f"projects/{project}/zones/{zone}"
    clauses = [f'resource.name == "{zone_path}/instanceGroupManagers/{m}"' for m in mig_names]
    return {"title": "own-cluster-migs-only",
            "description": f"only the MIGs of {cluster} in {zone}",
            "expression": " || ".join(clauses)}


def declare_autostop_grant(name: str, *, environment: str, autostop_minutes: int,
                           project: str, zone: pulumi.Input[str], mig_names: Sequence[str],
                           member: pulumi.Input[str],
                           parent: pulumi.Resource) -> Optional[gcp.projects.IAMCustomRole]:
    """Custom role + conditional binding for the node service account; None when autostop is
    off for the cluster (``autostop_minutes`` 0: nothing to grant) or it has no MIG."""
    if not mig_names or autostop_minutes <= 0:
        return None
    child = pulumi.ResourceOptions(parent=parent)
    role = gcp.projects.IAMCustomRole(
        f"{name}-autostop-role", project=project, role_id=custom_role_id(environment, name),
        title=f"gpulease {environment} {name} node autostop",
        description="Delete own VM through its MIG (instanceGroupManagers.deleteInstances)",
        permissions=list(AUTOSTOP_PERMISSIONS), stage="GA", opts=child)
    condition = pulumi.Output.from_input(zone).apply(lambda z: autostop_condition(
        project=project, zone=z, mig_names=mig_names, cluster=name))
    gcp.projects.IAMMember(
        f"{name}-autostop", project=project, role=role.name, member=member,
        condition=condition, opts=child)
    return role
