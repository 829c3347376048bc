"""Who am I in a cluster job: rank and world size from the launcher that started us.

netbench never manages a cluster itself. Under torchrun, Slurm srun or mpirun every rank runs
`netbench run ...`; this reads the launcher's environment: rank 0 stores the run (under a run
id of its own: a job id can repeat, e.g. torchrun's default rendezvous id "none" on a fixed
port) and every row records the job's identity, identical on every rank.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

# (launcher, rank var, world var, local rank var, ranks-on-this-host var)
_LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    # A Kubernetes Indexed Job (what a JobSet is made of) sets the index; the world is the
    # manifest's (deploy/kubernetes/fabric-sweep.yaml: equal to completions), one rank a pod.
    ("kubernetes", "JOB_COMPLETION_INDEX", "NETBENCH_WORLD_SIZE", "", ""),
)
# Variables that identify one job (the same on all its ranks), in order of preference.
_JOB_IDS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "OMPI_MCA_orte_ess_jobid",
            "PMIX_NAMESPACE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class LaunchInfo:
    launcher: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None = None     # ranks on this host, where the launcher says

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    def job_id(self) -> str:
        """The job's identity, alike on every rank (not unique across jobs: metadata only)."""
        parts = [f"{k}={os.environ[k]}" for k in _JOB_IDS if os.environ.get(k)]
        digest = hashlib.sha256("|".join([self.launcher, str(self.world_size), *parts])
                                .encode()).hexdigest()
        return digest[:12]


def launch_info() -> LaunchInfo | None:
    """The launcher's view of this process, or None when netbench was started directly."""
    for launcher, rank_var, world_var, local_var, here_var in _LAUNCHERS:
        rank, world = os.environ.get(rank_var), os.environ.get(world_var)
        if rank is None or world is None:
            continue
        try:
            rank_i, world_i = int(rank), int(world)
            local_i = int(os.environ.get(local_var, "0")) if local_var else 0
        except ValueError:
            continue
        here = os.environ.get(here_var, "") if here_var else ""
        here_i = int(here) if here.isdigit() else None
        # One task of srun/mpirun is just a process; one torchrun worker is asked for on
        # purpose (e.g. the NCCL path on a one-GPU machine).
        if world_i > 1 or (launcher == "torchrun" and os.environ.get("TORCHELASTIC_RUN_ID")):
            return LaunchInfo(launcher, rank_i, world_i, local_i, here_i)
    return None


def rendezvous_address(launched: LaunchInfo | None) -> tuple[str, int, str] | None:
    """Where rank 0 is, from the launcher's environment: (host, port, where that came from).

    MASTER_ADDR/MASTER_PORT first (torchrun, Kubernetes' PyTorchJob, ``mpirun -x``). Under
    Slurm, rank 0 runs on the first node of the step's node list (block distribution, the
    default), and the port is 15000 + the job id's last four digits unless MASTER_PORT says
    otherwise, as PyTorch Lightning's SLURMEnvironment does, so two jobs sharing a node differ.
    Open MPI says nothing of where rank 0 is (its HNP URI is mpirun's host): None there."""
    port_env = os.environ.get("MASTER_PORT", "").strip()
    if port_env and not (port_env.isdigit() and 0 < int(port_env) < 65536):
        raise ValueError(f"MASTER_PORT={port_env!r} is not a port (1-65535)")
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"], int(port_env) if port_env else 29500, "MASTER_ADDR"
    if launched is None or launched.launcher != "slurm":
        return None
    for var in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        if os.environ.get(var):
            host = first_host(os.environ[var])
            job = os.environ.get("SLURM_JOB_ID", "")
            port = int(port_env) if port_env else \
                15000 + int(job[-4:]) if job.isdigit() else 29500
            return host, port, var
    return None


def first_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist: ``gpu[007-012,020],login1`` -> ``gpu007``;
    every bracket of ``rack[2-3]-node[01-04]`` gives its first value (``rack2-node01``)."""
    out, i = [], 0
    while i < len(nodelist):
        ch = nodelist[i]
        if ch == ",":             # the next host; commas inside brackets are skipped below
            break
        if ch == "[":
            end = nodelist.find("]", i)
            if end < 0:
                raise ValueError(f"Slurm node list {nodelist!r}: '[' without ']'")
            first = nodelist[i + 1:end].split(",")[0].split("-")[0]
            out.append(first)
            i = end + 1
            continue
        out.append(ch)
        i += 1
    host = "".join(out).strip()
    if not host:
        raise ValueError(f"Slurm node list {nodelist!r}: no host in it")
    return host


def collective_env() -> dict[str, str]:
    """The environment that decides what collective numbers mean (NCCL_*, launcher, masters)."""
    keep = ("NCCL_", "TORCH_NCCL_", "GLOO_", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR",
            "MASTER_PORT", "UCX_", "FI_")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(keep)}
