"""The smallest change the regression suite's default settings catch: tcp.stream between two
network namespaces over a veth shaped with `tc tbf`, one run of driver-regression.toml's
tcp.stream cases (its interleaved repeats, its thresholds) at each rate, each compared with the
first rate's run (--no-history: the other rates' runs are deliberate changes, not this
link's noise). Root only (namespaces); bounded: one suite run per rate and trial.

    sudo python bench/tbf_steps.py [--rates 1000,990,980,970,960,950] [--streams 4]
    sudo python bench/tbf_steps.py --rates 200,196,194,190,180 --trials 4 --hog

``--trials N`` repeats the whole ladder N times, each trial with its own baseline, and adds an
A/A: the first rate run twice, the second judged against the first (a false alarm is any
case metric called regressed or improved there). ``--hog`` runs a busy loop pinned to core 0
beside every run but each trial's baseline (a shared CI runner, busy on one side only).

Prints one line per rate and trial: `<rate> Mbit/s change <median change> verdicts <counts>
exit <rc>`, then per rate how many trials exited 1 with goodput regressed, and what else was
called regressed or improved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from netbench.run.peer import ServerProcess  # noqa: E402


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)


def suite_file(out: Path, streams: list[int] | None, sizes: list[str] | None) -> Path:
    data = tomllib.loads((ROOT / "suites" / "driver-regression.toml").read_text())
    lines = ["[suite]"] + [f"{k} = {json.dumps(v)}" for k, v in data["suite"].items()]
    for case in data["case"]:
        if case["benchmark"] == "tcp.stream":
            case = {**case, **({"streams": streams} if streams else {}),
                    **({"msg_size": sizes} if sizes else {})}
            lines += ["[[case]]"] + [f"{k} = {json.dumps(v)}" for k, v in case.items()]
    lines += ["[thresholds]"] + [f"{json.dumps(k)} = {json.dumps(v)}"
                                 for k, v in data["thresholds"].items()]
    out.write_text("\n".join(lines) + "\n")
    return out


HOG = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"


def _compare(results: Path, suite: Path, base: str, cand: str
             ) -> tuple[int, list[dict], list[str], int]:
    """compare's exit, its goodput verdicts, every other metric it called either way, and how
    many case-metric verdicts it made in all."""
    proc = subprocess.run([sys.executable, "-m", "netbench", "compare", base, cand,
                           "--results", str(results), "--thresholds", str(suite),
                           "--no-history", "--json"], capture_output=True, text=True, cwd=ROOT)
    verdicts = json.loads(proc.stdout)["verdicts"]
    goodput = [v for v in verdicts if v["metric"] == "goodput"]
    others = [f"{v['metric']} {v['change']:+.1%} {v['verdict']}" for v in verdicts
              if v["metric"] != "goodput" and v["verdict"] in ("regressed", "improved", "lost")]
    return proc.returncode, goodput, others, len(verdicts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,990,980,970,960,950")
    parser.add_argument("--streams", help="override the suite's streams, e.g. 4")
    parser.add_argument("--msg-size", help="override the suite's message sizes, e.g. 64K")
    parser.add_argument("--trials", type=int, default=1, help="the ladder this many times")
    parser.add_argument("--hog", action="store_true",
                        help="a CPU hog on core 0 beside every run but the baseline")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("tbf_steps: needs root (network namespaces)")
        return 2
    rates = [int(r) for r in args.rates.split(",")]
    work = Path(tempfile.mkdtemp(prefix="nb-tbf-"))
    suite = suite_file(work / "suite.toml",
                       [int(s) for s in args.streams.split(",")] if args.streams else None,
                       args.msg_size.split(",") if args.msg_size else None)
    tag = str(os.getpid() % 100000)
    a, b, va, vb = f"nbsA{tag}", f"nbsB{tag}", f"nbsa{tag}", f"nbsb{tag}"
    try:
        sh("ip", "netns", "add", a)
        sh("ip", "netns", "add", b)
        sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
        sh("ip", "link", "set", va, "netns", a)
        sh("ip", "link", "set", vb, "netns", b)
        for ns, dev, addr in ((a, va, "10.204.0.1/24"), (b, vb, "10.204.0.2/24")):
            sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
               f"{rates[0]}mbit", "burst", "256kb", "latency", "100ms")
        server = ServerProcess(bind="10.204.0.2", prefix=("ip", "netns", "exec", b))
        results = work / "results"
        # per label: (exit, goodput's verdict counts, cases, other metrics called, verdicts in all)
        tally: dict[str, list[tuple[int, dict[str, int], int, list[str], int]]] = {}
        try:
            for trial in range(args.trials):
                ladder = [("base", rates[0])] + ([("aa", rates[0])] if args.trials > 1
                                                  else []) + [(str(r), r) for r in rates[1:]]
                for name, rate in ladder:
                    for ns, dev in ((a, va), (b, vb)):
                        sh("tc", "-n", ns, "qdisc", "change", "dev", dev, "root", "tbf",
                           "rate", f"{rate}mbit", "burst", "256kb", "latency", "100ms")
                    hog = (subprocess.Popen([sys.executable, "-c", HOG])
                           if args.hog and name != "base" else None)
                    try:
                        run = subprocess.run(
                            ["ip", "netns", "exec", a, sys.executable, "-m", "netbench", "run",
                             str(suite), "--peer", server.address, "--label",
                             f"t{trial}-{name}", "--results", str(results)],
                            capture_output=True, text=True, timeout=900, cwd=ROOT)
                    finally:
                        if hog:
                            hog.kill()
                            hog.wait()
                    if run.returncode != 0:
                        print(f"{rate} Mbit/s: run failed: {run.stderr[-400:]}")
                        return 1
                for name, rate in ladder[1:]:
                    rc, goodput, others, n_verdicts = _compare(
                        results, suite, f"t{trial}-base", f"t{trial}-{name}")
                    counts: dict[str, int] = {}
                    for v in goodput:
                        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
                    changes = sorted(v["change"] for v in goodput)
                    label = "A/A" if name == "aa" else f"{rate / rates[0] - 1:+.1%}"
                    print(f"trial {trial}: {rate} Mbit/s ({label}) goodput change "
                          f"{changes[len(changes) // 2]:+.2%} verdicts "
                          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
                          + f" of {len(goodput)} cases; exit {rc}"
                          + (f"; also called: {', '.join(others)}" if others else ""),
                          flush=True)
                    tally.setdefault(label, []).append(
                        (rc, counts, len(goodput), others, n_verdicts))
        finally:
            server.stop()
        if args.trials > 1:
            hog = " (a hog beside every run but the baseline)" if args.hog else ""
            for label, seen in tally.items():
                if label == "A/A":
                    alarms = sum(len(o) + k.get("regressed", 0) + k.get("improved", 0)
                                 for _, k, _c, o, _n in seen)
                    called = sum(rc != 0 or bool(o) for rc, _r, _c, o, _n in seen)
                    total = sum(n for *_, n in seen)
                    print(f"A/A: something called in {called} of {len(seen)} trials; "
                          f"{alarms} of {total} case-metric verdicts called regressed or "
                          f"improved ({alarms / max(total, 1):.2%}){hog}")
                    continue
                caught = sum(rc == 1 and k.get("regressed", 0) > 0 for rc, k, *_ in seen)
                cases = sum(k.get("regressed", 0) for _, k, *_ in seen)
                of = sum(c for _, _, c, *_ in seen)
                print(f"{label}: caught (exit 1, goodput regressed) in {caught} of "
                      f"{len(seen)} trials; goodput regressed in {cases} of {of} case "
                      f"verdicts; other metrics called in "
                      f"{sum(bool(o) for *_, o, _n in seen)} trials{hog}")
    finally:
        subprocess.run(["ip", "netns", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", b], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
