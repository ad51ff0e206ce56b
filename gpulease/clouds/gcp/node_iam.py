"""Least privilege for GCP nodes (issue 35 item 6): what a node's service account may do.

Every node of a cluster shares one service account, so IAM cannot tell one node from another:
a condition on ``resource.name`` can fence a grant to the cluster's VMs and MIGs, never to
"the caller's own VM". The node therefore holds NO compute write at all:

- its busy witness and its leave request are guest attributes it writes through its own
  metadata server (``tags.BUSY_AT_GUEST_ATTRIBUTE``, ``tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE``;
  no IAM permission: the metadata server answers the VM it runs on only), and the reaper,
  which holds ``compute.instanceGroupManagers.update``, deletes the node through its MIG
  (docs/reaper.md, "Leave requests");
- it reads its own cluster only, and nothing project-wide. Its two scripts need the cluster's
  live members: the rendezvous their internal IPs, the autostop their labels (the opt-out on
  any of them, the MIG's baseline and prepaid labels) and which MIG each is in. The node lists
  the members of each of its cluster's MIGs (``instanceGroupManagers.listManagedInstances``:
  "Authorization requires the following IAM permission on the specified resource
  instanceGroupManager: compute.instanceGroupManagers.get", Compute Engine REST reference) and
  reads each member (``instances.get``: ``compute.instances.get`` on the instance). Both are
  checked on the resource itself, so the binding carries a condition on ``resource.name``
  (:func:`read_condition`): the cluster's MIGs by exact name, its VMs by the MIGs' base
  instance name. Before this the role held ``compute.instances.list``, which is checked on the
  project: no condition can narrow it, and it showed every VM's labels and metadata in the
  project (and before that ``roles/compute.viewer``: every disk, image, network, firewall and
  template too).

What the fence leaves readable (docs/deploy.md, "Node identities"): any MIG of the project with
exactly one of the cluster's MIG names in its zone (none but the cluster's own: a MIG name is
unique in its zone), and any VM of that zone whose name starts with ``<cluster>-`` - the
cluster's own (a MIG names its VMs ``<base_instance_name>-<4 characters>``, and the base is the
cluster name), and those of another cluster whose name itself starts with ``<cluster>-``.
"""
from __future__ import annotations

import hashlib
import re
from typing import Iterable

import pulumi
import pulumi_gcp as gcp

#: the node's compute permissions, both checked on the resource (so fenced by read_condition):
#: ``gcloud compute instance-groups managed list-instances MIG --zone Z`` makes exactly one
#: instanceGroupManagers.listManagedInstances call (the Cloud SDK's
#: surface/compute/instance_groups/managed/list_instances.py; its help text names
#: compute.instanceGroupManagers.list, the REST reference .get on the MIG), and
#: ``gcloud compute instances describe NAME --zone Z`` one instances.get.
NODE_READ_PERMISSIONS = ("compute.instanceGroupManagers.get", "compute.instances.get")
#: the condition's title (IAM: at most 100 characters).
READ_CONDITION_TITLE = "own-cluster-migs-and-vms-only"


def custom_role_id(environment: str, cluster: str, *, prefix: str = "gpulease_node") -> str:
    """Project custom role id: ``[a-zA-Z0-9_.]{3,64}`` (no hyphens), unique per env+cluster.

    A deleted custom role's id stays reserved for a while (IAM "Creating and managing custom
    roles": deleted roles can be undeleted for 7 days, ids are reusable only after 37), hence
    a stable id rather than a fresh one per run.
    """
    base = re.sub(r"[^a-zA-Z0-9_]", "_", f"{prefix}_{environment}_{cluster}")
    if len(base) > 64:
        base = f"{base[:57]}_{hashlib.sha1(base.encode()).hexdigest()[:6]}"
    return base


def read_condition(*, project: str, zone: str, base_instance_name: str,
                   migs: Iterable[str]) -> dict:
    """IAM condition of the node's read grant: its cluster's MIGs and VMs only.

    Compute Engine recognizes ``resource.name`` in IAM Conditions (IAM "Attribute reference
    for IAM Conditions"), zonal resources named ``projects/P/zones/Z/instances/N`` and
    ``projects/P/zones/Z/instanceGroupManagers/N`` (the names gpulease/reaper/gcp_deploy.py's
    act condition uses too). Only ``==``, ``||`` and ``startsWith`` - the operators IAM's
    documentation shows for ``resource.name`` - and one ``||`` per MIG (at most three).
    """
    zonal = f"projects/{project}/zones/{zone}"
    clauses = [f'resource.name == "{zonal}/instanceGroupManagers/{m}"' for m in sorted(migs)]
    clauses.append(f'resource.name.startsWith("{zonal}/instances/{base_instance_name}-")')
    return {"title": READ_CONDITION_TITLE,
            "description": (f"list the members of MIGs {', '.join(sorted(migs))} and read VMs "
                            f"{base_instance_name}-* in {zone}"),
            "expression": " || ".join(clauses)}


def declare_node_reader(name: str, *, environment: str, project: str, zone: str,
                        migs: Iterable[str], member: pulumi.Input[str],
                        parent: pulumi.Resource) -> gcp.projects.IAMCustomRole:
    """The node's read role (NODE_READ_PERMISSIONS) and its project binding, fenced to the
    cluster by :func:`read_condition` (the MIGs name their VMs after ``name``)."""
    child = pulumi.ResourceOptions(parent=parent)
    role = gcp.projects.IAMCustomRole(
        f"{name}-node-read", project=project, role_id=custom_role_id(environment, name),
        title=f"gpulease {environment} {name} node read",
        description="Get its cluster's MIGs (member list) and VMs: rendezvous peers and the "
                    "autostop's labels (fenced by the binding's condition)",
        permissions=list(NODE_READ_PERMISSIONS), stage="GA", opts=child)
    gcp.projects.IAMMember(f"{name}-node-read", project=project, role=role.name,
                           member=member,
                           condition=read_condition(project=project, zone=zone,
                                                    base_instance_name=name, migs=migs),
                           opts=child)
    return role
