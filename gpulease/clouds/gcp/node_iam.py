"""Least privilege for GCP nodes (issue 35 item 6): what a node's service account may do.

Every node of a cluster shares one service account, so IAM cannot tell one node from another:
a condition on ``resource.name`` could fence a grant to the cluster's VMs or MIGs, never to
"the caller's own VM". The node therefore holds NO compute write at all:

- its busy witness and its leave request are guest attributes it writes through its own
  metadata server (``tags.BUSY_AT_GUEST_ATTRIBUTE``, ``tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE``;
  no IAM permission: the metadata server answers the VM it runs on only), and the reaper,
  which holds ``compute.instanceGroupManagers.update``, deletes the node through its MIG
  (docs/reaper.md, "Leave requests"). Before this, the node's role carried
  ``compute.instanceGroupManagers.update`` on its cluster's MIGs, which also resizes a MIG up
  and changes its template - for the whole group;
- it reads one thing: the instance list (``compute.instances.list``: the cluster's peers for
  torchrun rendezvous, and the opt-out / baseline / prepaid labels its autostop checks before
  it asks), in a custom role instead of ``roles/compute.viewer`` (every disk, image, snapshot,
  network, firewall and instance template of the project). A list permission is checked on
  the project, so it cannot be narrowed to the cluster's VMs by an IAM Condition: the list
  still shows every VM of the project (docs/deploy.md, "Node identities").
"""
from __future__ import annotations

import hashlib
import re

import pulumi
import pulumi_gcp as gcp

#: the node's one compute permission: ``gcloud compute instances list`` (aggregatedList).
NODE_READ_PERMISSIONS = ("compute.instances.list",)


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


def declare_node_reader(name: str, *, environment: str, project: str,
                        member: pulumi.Input[str],
                        parent: pulumi.Resource) -> gcp.projects.IAMCustomRole:
    """The node's read role (NODE_READ_PERMISSIONS) and its project binding."""
    child = pulumi.ResourceOptions(parent=parent)
    role = gcp.projects.IAMCustomRole(
        f"{name}-node-read", project=project, role_id=custom_role_id(environment, name),
        title=f"gpulease {environment} {name} node read",
        description="List instances: rendezvous peers and the autostop's labels "
                    "(instead of roles/compute.viewer)",
        permissions=list(NODE_READ_PERMISSIONS), stage="GA", opts=child)
    gcp.projects.IAMMember(f"{name}-node-read", project=project, role=role.name,
                           member=member, opts=child)
    return role
