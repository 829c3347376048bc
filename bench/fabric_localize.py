#!/usr/bin/env python3
"""Adaptive fabric sweeps against the flow-level simulator: how many rounds it takes to name a
broken element, and how often the name is right, over random single and double faults.

    python bench/fabric_localize.py [--hosts 1024] [--trials 200] [--noise 0.05] [--jobs 2]
    python bench/fabric_localize.py --severity 0.25,0.5,0.85,0.9 --noise 0.05,0.1 --faults 1
    python bench/fabric_localize.py --faults 0 --noise 0.05,0.1      # fault-free fabrics

One line per topology:
``<topology> hosts N rounds <median> max <max> precision <P> recall <R> pinned <r> plan_s <s>
(median <s>)``: a round's planning time, the slowest and the median
beside the rounds all-pairs needs. A fault scales one element's capacity (a host's NIC both
ways or one way, its access link, an inter-switch link, a switch) to ``--severity`` (0.25:
a 4x link trained at 1x, EDR at DDR; 0.85: fail-slow, optics losing margin); measurement
noise is +-``--noise`` (``--noise-shape normal``: normal of the same standard deviation);
``--faults`` elements broken a trial (default: one and two in turn; 0: none, and the line
counts the trials that named anything: false positives). Lists of
severities and noises run every combination, one line each. The sweep's rounds
come from ``netbench.analysis.adaptive`` and its verdict from ``netbench.analysis.localize``, the
same code a real sweep runs. The ``fat-tree-2tier-opensm`` row routes by the forwarding tables
opensm (ftree) sets on a fabric ibsim simulates, read back as a user would (ibnetdiscover,
dump_fts); it is skipped, saying so, where those tools are missing. Scoring: a suspect is
right when what it names holds a broken element (a NIC and its own link are one end:
end-to-end pairs cannot tell them apart); ``pinned`` counts faults named alone, not within
an ECMP path set.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import random
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def shapes(hosts: int) -> list[tuple[str, object, bool]]:
    """Fabrics of about ``hosts`` hosts: 2-tier fat-trees (destination-routed, as InfiniBand's
    subnet manager routes them, and ECMP, untraced and with each flow's path traced), a
    3-tier fat-tree and a dragonfly; each with whether the sweep traces its flows."""
    from netbench.sweep import simulate as sim

    radix = max(4, int(round(math.sqrt(hosts))))       # hosts per leaf = leaves
    spines = max(2, radix // 2)
    pods = max(2, int(round(hosts ** (1 / 3))))
    per_pod = max(2, hosts // (pods * pods))
    groups = max(3, int(round(math.sqrt(hosts / 8))))
    return [
        ("fat-tree-2tier-dest", lambda: sim.fat_tree(radix, hosts // radix, spines, "dest"),
         False),
        ("fat-tree-2tier-ecmp", lambda: sim.fat_tree(radix, hosts // radix, spines, "ecmp"),
         False),
        ("fat-tree-2tier-ecmp-traced",
         lambda: sim.fat_tree(radix, hosts // radix, spines, "ecmp"), True),
        ("fat-tree-3tier-dest", lambda: sim.three_tier(pods, pods, per_pod, 4, 8, "dest"),
         False),
        ("dragonfly", lambda: sim.dragonfly(groups, 8, max(1, hosts // (groups * 8))), False),
        ("fat-tree-2tier-opensm", lambda: opensm_fat_tree(radix, hosts // radix, spines),
         False),
    ]


_CAPTURED: dict[tuple[int, int, int], str] = {}


def opensm_fat_tree(leaves: int, per_leaf: int, spines: int):
    """The 2-tier fat-tree as opensm's ftree engine routes it, read back from its forwarding
    tables (ibsim simulates the fabric; tests/fixtures/topology/capture-ibsim.sh), captured
    once a size; OSError where ibsim-utils, opensm or infiniband-diags is missing."""
    import shutil
    import subprocess
    import tempfile

    from netbench.env import topology

    key = (leaves, per_leaf, spines)
    if key not in _CAPTURED:
        if not all(shutil.which(t) for t in ("ibsim", "opensm", "ibnetdiscover", "dump_fts")):
            raise OSError("needs ibsim-utils, opensm and infiniband-diags")
        out = tempfile.mkdtemp(prefix="nb-ibsim-")
        script = Path(__file__).resolve().parents[1] / "tests/fixtures/topology/capture-ibsim.sh"
        try:
            subprocess.run([str(script), out, str(leaves), str(spines), str(per_leaf)],
                           check=True, timeout=1800, capture_output=True)
        finally:
            pid = Path(out, "ibsim.pid")
            if pid.exists():
                subprocess.run(["kill", pid.read_text().strip()], check=False)
        _CAPTURED[key] = str(Path(out, "fabric.ib"))
    return topology.load(_CAPTURED[key])


def physical(element: str, hosts) -> str:
    """What an element is in the fabric: a host's end (its NIC and its own cable, either way:
    end-to-end pairs cannot tell them apart), an inter-switch link (either way) or a
    switch."""
    kind, name = element.split(":", 1)
    if kind == "host":
        return "end:" + name.split(":", 1)[0]
    if kind == "link":
        a, _, b = name.partition("->") if "->" in name else name.partition("--")
        for end in (a, b):
            if end in hosts:
                return "end:" + end
        return "link:" + "--".join(sorted((a, b)))
    return element


def faults_for(topo, rng: random.Random, count: int, severity: float) -> dict[str, float]:
    hosts = sorted(topo.hosts)
    trunks = sorted(topo.trunks)
    switches = sorted(topo.switches)
    out: dict[str, float] = {}
    while len(out) < count:
        kind = rng.choice(["host", "host_send", "host_recv", "access", "trunk", "switch"])
        if kind == "trunk" and trunks:
            a, b = rng.choice(trunks)
            name = f"link:{a}--{b}"
        elif kind == "switch":
            name = f"switch:{rng.choice(switches)}"
        elif kind == "access":
            h = rng.choice(hosts)
            name = f"link:{'--'.join(sorted((h, topo.hosts[h])))}"
        else:
            h = rng.choice(hosts)
            name = f"host:{h}" + {"host": "", "host_send": ":send", "host_recv": ":recv"}[kind]
        out[name] = severity
    return out


def draw(topo, rng: random.Random, faults: int, severity: float) -> tuple:
    """What a trial takes from the run's random sequence: its faults and two seeds, drawn in
    trial order whatever runs the trials (so --jobs never moves a figure)."""
    return (faults_for(topo, rng, faults, severity), rng.randrange(1 << 30),
            rng.randrange(1 << 30))


def trial(make, drawn: tuple, noise: float, threshold: float, traced: bool = False,
          min_deficit: float | None = 0.05, noise_shape: str = "uniform"):
    import pandas  # noqa: F401  (imported before the clock: plan_s is planning, not imports)

    from netbench.analysis.adaptive import AdaptivePlanner
    from netbench.sweep.simulate import FabricSim
    topo = make()
    broken, sim_seed, plan_seed = drawn
    fabric = FabricSim(topo, faults=broken, noise=noise, seed=sim_seed,
                       noise_shape=noise_shape)
    names = sorted(topo.hosts)
    planner = AdaptivePlanner(names, topo, threshold=threshold, seed=plan_seed, traced=traced,
                              min_deficit=min_deficit)
    plan_s = []
    while True:
        t0 = time.perf_counter()
        chosen = planner.next_round()
        plan_s.append(time.perf_counter() - t0)
        if chosen is None:
            break
        named_pairs = [(names[c], names[s]) for c, s in chosen.pairs]
        values = fabric.measure(named_pairs, salt=len(planner.log), via=chosen.via)
        planner.record(chosen.pairs, values,
                       paths=fabric.paths(named_pairs, chosen.via) if traced else None)
    verdict = planner.verdict()
    truth = {physical(f, topo.hosts) for f in broken}
    named = [{physical(e, topo.hosts) for e in s.elements + s.or_else}
             for s in verdict.suspects]
    right = [bool(n & truth) for n in named]
    recalled = {t for t in truth if any(t in n for n in named)}
    pinned = {t for t in truth if any(n == {t} for n in named)}
    return (len(planner.log), sum(right), len(named), len(recalled), len(pinned), len(truth),
            plan_s, planner.log, broken, [s.elements for s in verdict.suspects])


_TOPOLOGIES: dict = {}


def built(hosts: int, index: int):
    """One topology per shape and process, built once: the planner and the simulator only
    read it (its path caches are pure), so every trial may share it, and ibsim and opensm
    run once per shape, not per trial."""
    if (hosts, index) not in _TOPOLOGIES:
        _TOPOLOGIES[(hosts, index)] = shapes(hosts)[index][1]()
    topo = _TOPOLOGIES[(hosts, index)]
    return lambda: topo


def _one_trial(work: tuple):
    hosts, index, drawn, noise, threshold, traced, min_deficit, shape = work
    return trial(built(hosts, index), drawn, noise, threshold, traced, min_deficit, shape)


def one(args, name: str, index: int, make, n: int, traced: bool, severity: float,
        noise: float, budget: int) -> None:
    """One topology at one severity and noise: its trials, then its line."""
    rng = random.Random(args.seed)
    rounds, right, named, recalled, pinned, truth, plan, alarms = [], 0, 0, 0, 0, 0, [], 0
    work = [(args.hosts, index,
             draw(make(), rng, 1 + t % 2 if args.faults is None else args.faults, severity),
             noise, args.threshold, traced, args.min_deficit or None, args.noise_shape)
            for t in range(args.trials)]
    with multiprocessing.get_context("fork").Pool(args.jobs) if args.jobs > 1 \
            else contextlib.nullcontext() as pool:
        results = pool.imap(_one_trial, work) if pool else map(_one_trial, work)
        results = list(results)
    for t, result in enumerate(results):
        r, ok, nm, rc, pn, tr, ps, log, broken, said = result
        rounds.append(r)
        right, named, recalled, pinned, truth = (right + ok, named + nm, recalled + rc,
                                                 pinned + pn, truth + tr)
        alarms += bool(said) and not broken
        plan += ps
        if args.verbose and (rc < tr or ok < nm):
            print(f"  miss in trial {t}: broken {broken}, named {said}; {rc}/{tr} "
                  f"recalled, {ok}/{nm} right; "
                  + "; ".join(f"r{i + 1}: {len(x.pairs)} {x.why}" for i, x in
                              enumerate(log)))
    faults = ("single and double faults" if args.faults is None else
              f"{args.faults} fault(s)" if args.faults else "fault-free")
    scores = (f"named something in {alarms} of {args.trials} trials "
              f"({alarms / args.trials:.3f})" if args.faults == 0 else
              f"precision {right / max(named, 1):.3f} recall {recalled / max(truth, 1):.3f} "
              f"pinned {pinned / max(truth, 1):.3f}")
    print(f"{name} hosts {n} severity {severity:g} noise {noise:g} {args.noise_shape} rounds "
          f"{statistics.median(rounds):g} max {max(rounds)} {scores} plan_s {max(plan):.3f} "
          f"(median {statistics.median(plan):.3f}) (budget {budget}; all-pairs {n - 1} "
          f"rounds a direction; {args.trials} trials, {faults})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--hosts", type=int, default=1024)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--noise", default="0.05", help="one or a comma list")
    ap.add_argument("--noise-shape", default="uniform", choices=("uniform", "normal"),
                    help="uniform within +-noise, or normal of the same standard deviation")
    ap.add_argument("--severity", default="0.25", help="one or a comma list")
    ap.add_argument("--faults", type=int, help="elements broken a trial (default: 1 and 2 in "
                    "turn; 0: fault-free)")
    ap.add_argument("--threshold", type=float, default=0.4)
    ap.add_argument("--min-deficit", type=float, default=0.05,
                    help="the smallest shortfall called slow (0: the fixed --threshold cut)")
    ap.add_argument("--only", default="", help="run only topologies whose name this regular "
                    "expression matches anywhere (fat-tree-2tier-ecmp$: that one alone)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--verbose", action="store_true", help="print each miss's rounds")
    ap.add_argument("--jobs", type=int, default=1,
                    help="trials run at once (processes); the figures do not depend on it")
    args = ap.parse_args()
    try:
        only = re.compile(args.only)
    except re.error as exc:
        ap.error(f"--only {args.only!r}: not a regular expression ({exc})")
    from netbench.analysis.adaptive import default_budget

    combos = [(float(sev), float(noise)) for sev in args.severity.split(",")
              for noise in args.noise.split(",")]
    for index, (name, make, traced) in enumerate(shapes(args.hosts)):
        if args.only and not only.search(name):
            continue
        try:
            make = built(args.hosts, index)
            n = len(make().hosts)
        except OSError as exc:
            print(f"{name} skipped: {exc}", flush=True)
            continue
        for severity, noise in combos:
            one(args, name, index, make, n, traced, severity, noise, default_budget(n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
