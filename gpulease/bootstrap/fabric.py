"""Inter-node fabric settings per RDMA kind: NCCL/libfabric environment, NICs and node checks."""
from __future__ import annotations

from dataclasses import dataclass, field

from gpulease.model import RDMA_KINDS


@dataclass(frozen=True)
class Fabric:
    """What a node of one RDMA kind needs for NCCL between nodes.

    ``env`` lands in ``/etc/gpulease/fabric.env`` (sourced by the training launcher);
    ``check`` names the node-side check ``gpulease-check-fabric`` runs at boot;
    ``nics`` are the extra GPU NICs the machine type brings (GCP A3), checked to be up.
    """

    kind: str
    env: dict = field(default_factory=dict)
    check: str = "none"          # efa | nics | ibverbs | none
    nics: tuple[str, ...] = ()
    #: libraries the NCCL net plugin lives in, prepended to LD_LIBRARY_PATH.
    library_path: str = ""
    #: GPUs whose nodes support EFA device RDMA (GPUDirect RDMA reads); see efa_env().
    device_rdma_gpus: tuple[str, ...] = ()


# AWS: EFA with the aws-ofi-nccl plugin (EC2 User Guide, "Get started with EFA and NCCL for ML
# workloads"): FI_PROVIDER=efa pins libfabric to EFA; FI_EFA_USE_DEVICE_RDMA=1 only where the
# instance supports RDMA read (p4d/p4de/p5/p5e/p5en = A100/H100/H200 nodes), otherwise it must be
# 0; FI_EFA_FORK_SAFE=1 because PyTorch data loaders fork.
_EFA = Fabric(
    kind="efa", check="efa", library_path="/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib",
    device_rdma_gpus=("A100", "A100-40GB", "A100-80GB", "H100", "H200", "B200"),
    env={"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1", "NCCL_PROTO": "simple",
         "NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "^lo,docker"})

# GCP A3 High: GPUDirect-TCPX, 4 GPU NICs eth1..eth4 beside the primary eth0 (Compute Engine,
# "Maximize GPU network bandwidth with GPUDirect-TCPX"): the NCCL plugin lives in
# /var/lib/tcpx/lib64 and talks to the RxDM receive daemon through /run/tcpx.
_TCPX = Fabric(
    kind="gpudirect-tcpx", check="nics", nics=("eth1", "eth2", "eth3", "eth4"),
    library_path="/var/lib/tcpx/lib64",
    env={"NCCL_NET": "GPUDirectTCPX_v7", "NCCL_SOCKET_IFNAME": "eth0",
         "NCCL_GPUDIRECTTCPX_CTRL_DEV": "eth0",
         "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth1,eth2,eth3,eth4",
         "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": "/run/tcpx",
         "NCCL_CROSS_NIC": "0", "NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple",
         "NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "1",
         "NCCL_DYNAMIC_CHUNK_SIZE": "524288", "NCCL_P2P_NET_CHUNKSIZE": "524288",
         "NCCL_P2P_PCI_CHUNKSIZE": "524288", "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
         "NCCL_BUFFSIZE": "4194304", "NCCL_MAX_NCHANNELS": "12", "NCCL_MIN_NCHANNELS": "12",
         "NCCL_DEBUG": "WARN"})

# GCP A3 Mega: GPUDirect-TCPXO ("FasTrak"), 8 GPU NICs eth1..eth8 (Compute Engine, "Maximize GPU
# network bandwidth with GPUDirect-TCPXO"): plugin in /var/lib/tcpxo/lib64.
_TCPXO = Fabric(
    kind="gpudirect-tcpxo", check="nics",
    nics=tuple(f"eth{i}" for i in range(1, 9)), library_path="/var/lib/tcpxo/lib64",
    env={"NCCL_FASTRAK_CTRL_DEV": "eth0", "NCCL_SOCKET_IFNAME": "eth0",
         "NCCL_FASTRAK_IFNAME": ",".join(f"eth{i}" for i in range(1, 9)),
         "NCCL_FASTRAK_NUM_FLOWS": "2", "NCCL_FASTRAK_USE_SNAP": "1",
         "NCCL_FASTRAK_USE_LLCM": "1", "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
         "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0", "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": "0",
         "NCCL_CROSS_NIC": "0", "NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": "Simple,LL128",
         "NCCL_MIN_NCHANNELS": "4", "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
         "NCCL_DYNAMIC_CHUNK_SIZE": "524288", "NCCL_P2P_NET_CHUNKSIZE": "524288",
         "NCCL_P2P_PCI_CHUNKSIZE": "524288", "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
         "NCCL_BUFFSIZE": "8388608", "NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "WARN"})

# GCP A3 Ultra / A4: GPUDirect RDMA over RoCE on an RDMA network profile, NCCL gIB plugin in
# /usr/local/gib (AI Hypercomputer, "gIB NCCL plugin"): checked with ibverbs devices.
_RDMA = Fabric(
    kind="rdma", check="ibverbs", library_path="/usr/local/gib/lib64",
    env={"NCCL_NET": "gIB", "NCCL_CROSS_NIC": "0", "NCCL_NET_GDR_LEVEL": "PIX",
         "NCCL_P2P_NET_CHUNKSIZE": "131072", "NCCL_NVLS_CHUNKSIZE": "524288",
         "NCCL_IB_ADAPTIVE_ROUTING": "1", "NCCL_IB_QPS_PER_CONNECTION": "4",
         "NCCL_IB_TC": "52", "NCCL_IB_FIFO_TC": "84", "NCCL_SOCKET_IFNAME": "eth0,eth1",
         "NCCL_DEBUG": "WARN"})

# Plain TCP over the VPC: NCCL's socket transport, no InfiniBand probing.
_NONE = Fabric(kind="none", check="none",
               env={"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "^lo,docker",
                    "NCCL_DEBUG": "WARN"})

FABRICS: dict[str, Fabric] = {f.kind: f for f in (_EFA, _TCPX, _TCPXO, _RDMA, _NONE)}
assert set(FABRICS) == set(RDMA_KINDS), "one fabric row per RDMA kind"


def fabric_for(kind: str) -> Fabric:
    """The fabric row of an RDMA kind (KeyError names the valid kinds)."""
    try:
        return FABRICS[kind]
    except KeyError:
        raise KeyError(f"unknown RDMA kind {kind!r}; valid: {', '.join(RDMA_KINDS)}") from None


def fabric_env(kind: str, *, gpu: str) -> dict[str, str]:
    """The environment a node of this fabric exports to NCCL (sorted, deterministic)."""
    f = fabric_for(kind)
    env = dict(f.env)
    if f.kind == "efa":
        env["FI_EFA_USE_DEVICE_RDMA"] = "1" if gpu in f.device_rdma_gpus else "0"
    if f.library_path:
        env["GPULEASE_NCCL_LIBRARY_PATH"] = f.library_path
    return dict(sorted(env.items()))
