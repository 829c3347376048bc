"""The Kubernetes manifests netbench ships, validated offline against the Kubernetes schemas
(kubernetes-validate, strict: an unknown field fails too), and the environment each launcher
sets read by `netbench fabric`: ranks started in their own UTS namespaces (each its own host
name, as a pod has) with exactly an Indexed Job's variables, then a PyTorchJob's. No cluster
here: docs/kubernetes.md says what a site runs to finish it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from test_fabric import STREAM, _finish, _free_port, _needs_root, _rank

from netbench import load as netbench_load

kubernetes_validate = pytest.importorskip("kubernetes_validate")
DEPLOY = ROOT / "deploy" / "kubernetes"
VERSION = "1.30"          # the oldest Kubernetes the manifests are checked against


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


@pytest.mark.parametrize("name", ["fabric-sweep.yaml", "healthcheck-daemonset.yaml"])
def test_every_manifest_validates_against_the_kubernetes_schemas(name):
    for doc in _docs(name):
        kubernetes_validate.validate(doc, VERSION, strict=True)


@pytest.mark.parametrize("path, value", [
    (("spec", "completions"), "four"),
    (("spec", "template", "spec", "containers", 0, "ports", 0, "containerPort"), "29500"),
    (("spec", "template", "spec", "restartPolicy"), 0),
    (("spec", "template", "spec", "containers", 0, "imagePullPolicy2"), "Always")])
def test_a_manifest_value_of_the_wrong_kind_or_an_unknown_field_is_refused(path, value):
    job = copy.deepcopy(next(d for d in _docs("fabric-sweep.yaml") if d["kind"] == "Job"))
    where = job
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, VERSION, strict=True)


def test_the_sweeps_world_rendezvous_and_host_names_agree():
    service, job = _docs("fabric-sweep.yaml")
    spec = job["spec"]
    pod = spec["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert spec["completionMode"] == "Indexed"
    assert int(env["NETBENCH_WORLD_SIZE"]) == spec["completions"] == spec["parallelism"]
    assert pod["subdomain"] == service["metadata"]["name"] and service["spec"]["clusterIP"] \
        == "None"
    # An Indexed Job's pod i is host <job>-<i>; under the subdomain, <job>-0.<service>.
    assert env["MASTER_ADDR"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert service["spec"]["ports"][0]["port"] == int(env["MASTER_PORT"])


def test_the_daemonsets_plugin_speaks_node_problem_detectors_protocol(tmp_path):
    """NPD runs the rule's command and reads exit 0 (OK), 1 (a problem) or 2 (unknown) and
    stdout's start (up to max_output_length) as the condition's message: the ConfigMap's own
    command, here with this checkout's netbench, answers so."""
    config_map = _docs("healthcheck-daemonset.yaml")[0]
    plugin = json.loads(config_map["data"]["netbench-healthcheck.json"])
    assert plugin["plugin"] == "custom" and plugin["rules"][0]["condition"] == \
        plugin["conditions"][0]["type"]
    spec = tmp_path / "healthcheck.toml"
    spec.write_text(config_map["data"]["healthcheck.toml"])
    args = [a.replace("/etc/netbench/healthcheck.toml", str(spec))
             .replace("/var/lib/netbench", str(tmp_path / "state"))
             .replace("/var/lib/node-exporter", str(tmp_path)) for a in plugin["rules"][0]["args"]]
    done = subprocess.run([sys.executable, "-m", "netbench", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("netbench healthcheck: ") and len(first) <= \
        plugin["pluginConfig"]["max_output_length"] or first.startswith(
            "netbench healthcheck: FAIL"), first
    assert (tmp_path / "netbench-health.prom").read_text().endswith("# EOF\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[healthcheck]\nrate = 1\n")
    unknown = subprocess.run([sys.executable, "-m", "netbench", "healthcheck", str(bad)],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert unknown.returncode == 2            # NPD: unknown, never "healthy"


INDEXED_JOB = {"JOB_COMPLETION_INDEX": "{rank}", "NETBENCH_WORLD_SIZE": "3",
               "MASTER_ADDR": "127.0.0.1"}
PYTORCH_JOB = {"RANK": "{rank}", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
               "PYTHONUNBUFFERED": "1"}


@pytest.mark.root
@pytest.mark.parametrize("launcher, name", [(INDEXED_JOB, "kubernetes"),
                                             (PYTORCH_JOB, "torchrun")],
                         ids=["indexed-job", "pytorchjob"])
def test_ranks_started_with_a_kubernetes_launchers_environment_sweep_every_pair(
        tmp_path, launcher, name):
    _needs_root()
    port, res = _free_port(), tmp_path / "res"
    env = {**launcher, "MASTER_PORT": str(port)}
    procs = [_rank(r, 3, port, [*STREAM, "--results", str(res), "--threshold", "0.9"],
                   f"netbench-fabric-{r}", launcher=env) for r in range(3)]
    outs = _finish(procs)
    assert [o[0] for o in outs] == [0, 0, 0], outs
    rows = netbench_load(res)
    good = rows[rows.metric == "goodput"]
    assert len(good) == 6 and rows.run_id.nunique() == 1
    launchers = {json.loads(e).get("launcher", {}).get("name") for e in rows.env_json}
    assert launchers == {name}, launchers


@pytest.mark.root
def test_an_index_beyond_the_world_is_refused_on_that_rank(tmp_path):
    _needs_root()
    port = _free_port()
    env = {**INDEXED_JOB, "JOB_COMPLETION_INDEX": "5", "MASTER_PORT": str(port)}
    [(code, out, err)] = _finish([_rank(5, 3, port, [*STREAM, "--results", str(tmp_path)],
                                        "netbench-fabric-5", launcher=env)], timeout=60)
    assert code == 2 and "rank 5 is outside the world of 3 (ranks 0..2)" in err, err
    assert "Traceback" not in err
    assert not list(Path(tmp_path).glob("2*.parquet"))


def test_a_rendezvous_name_not_yet_published_is_asked_again_until_the_join_timeout():
    """Pod 0's name under a headless Service resolves once the pod is up: a rank asks again
    for up to --join-timeout, then says what it waited for."""
    import time

    from netbench.errors import UsageError
    from netbench.sweep.fabric import local_address

    started = time.monotonic()
    with pytest.raises(UsageError, match=r"cannot resolve the rendezvous "
                                         r"netbench-fabric-0\.invalid \(waited 2 s\)"):
        local_address("netbench-fabric-0.invalid", 2.0)
    assert 1.9 <= time.monotonic() - started < 10
    assert local_address("127.0.0.1", 2.0) == "127.0.0.1"
