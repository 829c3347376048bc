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
            local_i = int(os.environ.get(local_var, "0"))
        except ValueError:
            continue
        here = os.environ.get(here_var, "")
        here_i = int(here) if here.isdigit() else None
        # One task of srun/mpirun is just a process; one torchrun worker is asked for on
        # purpose (e.g. the NCCL path on a one-GPU machine).
        if world_i > 1 or (launcher == "torchrun" and os.environ.get("TORCHELASTIC_RUN_ID")):
            return LaunchInfo(launcher, rank_i, world_i, local_i, here_i)
    return None


def collective_env() -> dict[str, str]:
    """The environment that decides what collective numbers mean (NCCL_*, launcher, masters)."""
    keep = ("NCCL_", "TORCH_NCCL_", "GLOO_", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR",
            "MASTER_PORT", "UCX_", "FI_")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(keep)}
