"""netbench fabric under a real Slurm: the ranks are tasks of `srun`, not processes given an
emulated SLURM_* environment.

The known answer of tests/test_fabric.py (four hosts, network namespaces on a bridge, host2's
egress shaped with tc tbf to 200 Mbit/s, the others to 500), launched as one job step
`srun -N1 -n4 tools/slurm/netns-task.sh python -m netbench fabric tcp.stream ...` on the
one-node cluster tools/slurm/start.sh starts (`make slurm`; CI does it before `make test`). The
wrapper puts task $SLURM_PROCID into its host's namespace, under its own hostname, and keeps
srun's environment. No --rendezvous and no MASTER_*: each rank meets the others at srun's
default, the first node of SLURM_STEP_NODELIST (this machine's `hostname -s`, resolved inside
every namespace to host0's bridge address through /etc/netns/NS/hosts, which `ip netns exec`
puts over /etc/hosts) at port 15000 + the job id's last four digits.

Without a cluster that runs a job the test skips and says why; NETBENCH_REQUIRE_SLURM=1
(.ci/run sets it) makes that a failure.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid

import pytest
from conftest import ROOT
from test_fabric import assert_only_host2_flagged, bridged_hosts  # noqa: F401  (a fixture)

from netbench import load as netbench_load

WRAPPER = ROOT / "tools" / "slurm" / "netns-task.sh"
STEP_MINUTES = 4          # srun's own --time: Slurm ends the step past it
STEP_TIMEOUT = 240        # the test's bound on srun, seconds


def _no_slurm(why: str) -> None:
    message = (f"needs a Slurm cluster that runs jobs here ({why}): tools/slurm/start.sh "
               "(make slurm) starts a one-node one")
    if os.environ.get("NETBENCH_REQUIRE_SLURM") == "1":
        pytest.fail(f"NETBENCH_REQUIRE_SLURM=1: {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture
def slurm_node() -> str:
    """The node srun runs on, once a one-task job runs there; else skip, saying why."""
    if os.geteuid() != 0:
        pytest.skip("separate hosts need namespaces: run the tests as root, as CI does")
    if not shutil.which("srun") or not shutil.which("scontrol"):
        _no_slurm("srun and scontrol, Debian's slurm-client, are not installed")
    try:
        probe = subprocess.run(["srun", "-N1", "-n1", "--time=1", "--immediate=10",
                                "--job-name=netbench-probe", "hostname", "-s"],
                               capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        _no_slurm("`srun -N1 -n1 hostname` did not finish in 30 s")
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        _no_slurm(f"`srun -N1 -n1 hostname` failed: {last}")
    node, here = probe.stdout.strip(), socket.gethostname().split(".")[0]
    if node != here:
        pytest.skip(f"srun runs jobs on {node}, not on this machine ({here}), where the "
                    "test's network namespaces are: needs a cluster with this node")
    return node


@pytest.fixture
def named_hosts(slurm_node, bridged_hosts):  # noqa: F811  (the fixture imported above)
    """bridged_hosts, with the Slurm node's name resolving to host0's address inside every
    host namespace (`ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts)."""
    hosts, addrs = bridged_hosts
    made = []
    try:
        for ns in hosts:
            folder = f"/etc/netns/{ns}"
            os.makedirs(folder, exist_ok=True)
            made.append(folder)
            with open(f"{folder}/hosts", "w") as f:
                f.write(f"127.0.0.1 localhost\n{addrs[0]} {slurm_node}\n")
        yield slurm_node, hosts, addrs
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def _job(name: str) -> dict[str, str]:
    """Slurm's own record of the job called ``name`` (scontrol keeps ended jobs MinJobAge)."""
    out = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True,
                         timeout=30).stdout
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("JobName") == name:
            return fields
    raise AssertionError(f"no job {name} in scontrol show job:\n{out}")


def _expected_job_digest(job_id: str) -> str:
    """The launcher facts' job identity netbench derives from srun's SLURM_JOB_ID and
    SLURM_STEP_ID (step 0: the step srun made with the job)."""
    from netbench.env.launch import _JOB_IDS, LaunchInfo

    with pytest.MonkeyPatch.context() as mp:
        for var in _JOB_IDS:
            mp.delenv(var, raising=False)
        mp.setenv("SLURM_JOB_ID", job_id)
        mp.setenv("SLURM_STEP_ID", "0")
        return LaunchInfo("slurm", 0, 4, 0).job_id()


@pytest.mark.root
@pytest.mark.timeout(STEP_TIMEOUT + 60)
def test_under_a_real_srun_the_one_shaped_host_is_flagged(named_hosts, tmp_path):
    node, hosts, addrs = named_hosts
    res, logs = tmp_path / "res", tmp_path / "logs"
    logs.mkdir()
    name = f"netbench-fabric-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MASTER_", "TORCHELASTIC_", "SLURM_")) and k not in (
               "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({"PYTHONPATH": str(ROOT), "NETNS_TASK_NAMESPACES": " ".join(hosts),
                "NETNS_TASK_HOSTS": " ".join(f"host{r}" for r in range(4))})
    srun = ["srun", "-N1", "-n4", f"--time={STEP_MINUTES}", "--immediate=30",
            f"--job-name={name}", "--output", str(logs / "rank%t.out"),
            "--error", str(logs / "rank%t.err"), str(WRAPPER),
            sys.executable, "-m", "netbench", "fabric", "tcp.stream", "-p", "duration=1.0",
            "-p", "warmup=0.3", "--timeout", "30", "--results", str(res), "--json"]
    try:
        run = subprocess.run(srun, cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=30)
        raise
    outs = [((logs / f"rank{r}.out").read_text(), (logs / f"rank{r}.err").read_text())
            for r in range(4)]
    told = f"srun: exit {run.returncode}\n{run.stderr}\n{outs}"
    assert run.returncode == 1, told              # rank 0 flagged something: exit 1
    job = _job(name)
    assert job["NumTasks"] == "4" and job["NodeList"] == node, job
    job_id = job["JobId"]
    # The rendezvous is srun's default: the step's first node, the job's port.
    port = 15000 + int(job_id[-4:])
    assert f"rendezvous at {node}:{port} (SLURM_STEP_NODELIST)" in outs[0][1], told

    (m,) = json.loads(outs[0][0])["matrices"]
    assert_only_host2_flagged(m, outs[0][1])

    rows = netbench_load(res)
    good = rows[rows.metric == "goodput"]
    assert sorted(zip(good.host, good.peer)) == sorted(
        (f"host{a}", f"host{b}") for a in range(4) for b in range(4) if a != b)
    # srun's environment was read: every rank's fingerprint names slurm, its own rank of 4,
    # and the identity of this very job.
    launchers = {json.loads(e)["launcher"]["rank"]: json.loads(e)["launcher"]
                 for e in rows.drop_duplicates("host").env_json}
    assert sorted(launchers) == [0, 1, 2, 3], launchers
    assert {(v["name"], v["world_size"], v["job"]) for v in launchers.values()} == {
        ("slurm", 4, _expected_job_digest(job_id))}, (job_id, launchers)
    # Each rank ran inside its own namespace: its fingerprint's host is the one it was given.
    assert {h: json.loads(e)["host"] for h, e in zip(rows.host, rows.env_json)} == {
        f"host{r}": f"host{r}" for r in range(4)}
