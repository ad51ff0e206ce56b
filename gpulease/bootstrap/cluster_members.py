"""The GCP node's one way to see its cluster (issue 35 item 6): the members of its cluster's MIGs.

:data:`SOURCE` is a Python program the node scripts embed (rendezvous.sh.j2, autostop.sh.j2,
as ``CLUSTER_MEMBERS``; cloud-init is itself Python, so python3 is on every node). Run as
``python3 -c "$CLUSTER_MEMBERS" GCLOUD PROJECT ZONE MIG...``, it makes only the calls the node's
read role allows under its condition (gpulease/clouds/gcp/node_iam.py), each scoped by
``--zone`` and ``--project`` (without ``--zone`` gcloud would list the project's zones, a
project-wide read, to ask or guess):

- ``gcloud compute instance-groups managed list-instances MIG`` per MIG of the cluster
  (instanceGroupManagers.listManagedInstances: compute.instanceGroupManagers.get on the MIG);
- ``gcloud compute instances describe NAME`` per member the MIG reports live
  (instances.get: compute.instances.get on the VM).

It prints the described VMs as one JSON list - the shape ``gcloud compute instances list
--format=json`` printed before, so the autostop's GROUP_RULE reads it unchanged - and exits 0;
when any read fails or answers something else it prints why (one line) and exits 3, and the
caller keeps running (the autostop: "unknown", never stop on an unanswered question).

The program holds no single quote: the scripts carry it in a single-quoted shell string.
"""
from __future__ import annotations

#: exit status of SOURCE when a read failed (its one line on stdout says which).
FAILED = 3
#: seconds one gcloud call may take before the read counts as failed.
CALL_TIMEOUT_S = 120

SOURCE = f'''
import json, re, subprocess, sys
gcloud, project, zone = sys.argv[1], sys.argv[2], sys.argv[3].rstrip("/").rsplit("/", 1)[-1]
migs = sys.argv[4:]
LIVE = ("PROVISIONING", "STAGING", "RUNNING")
NAME = re.compile(r"[a-z]([-a-z0-9]{{0,61}}[a-z0-9])?")
def fail(why):
    print(why)
    sys.exit({FAILED})
def tail(url):
    return str(url or "").rstrip("/").rsplit("/", 1)[-1]
def read(what, args):
    argv = [gcloud, "compute", *args, "--zone", zone, "--project", project, "--format=json"]
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout={CALL_TIMEOUT_S})
    except (OSError, subprocess.SubprocessError) as exc:
        fail("gcloud compute %s failed (%s)" % (what, exc))
    if done.returncode != 0:
        fail("gcloud compute %s failed" % what)
    try:
        return json.loads(done.stdout)
    except ValueError:
        fail("gcloud compute %s did not answer JSON" % what)
if not NAME.fullmatch(zone):
    fail("instance metadata did not give this node a zone")
if not migs:
    fail("the cluster has no managed instance group")
members = []
for mig in migs:
    what = "instance-groups managed list-instances " + mig
    listed = read(what, ["instance-groups", "managed", "list-instances", mig])
    if not isinstance(listed, list) or not all(isinstance(m, dict) for m in listed):
        fail("gcloud compute %s did not answer a list of managed instances" % what)
    for m in listed:
        if m.get("instanceStatus") not in LIVE:
            continue
        name = tail(m.get("instance"))
        if not NAME.fullmatch(name):
            fail("MIG %s lists a member without a valid instance name (%r)" % (mig, name))
        vm = read("instances describe " + name, ["instances", "describe", name])
        if not isinstance(vm, dict) or vm.get("name") != name:
            fail("gcloud compute instances describe %s did not describe it" % name)
        members.append(vm)
print(json.dumps(members))
'''.strip("\n")

assert "'" not in SOURCE, "cluster_members.SOURCE is embedded in a single-quoted shell string"
