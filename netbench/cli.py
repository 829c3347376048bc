"""The command line: list, probe, run, serve.

User mistakes end as one line on stderr (``netbench: error: ...``) and a non-zero exit; only
bugs show a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from netbench import __version__, hooks, registry
from netbench.errors import NetbenchError, UsageError
from netbench.store.protocol import ReadableStore
from netbench.textfile import printable as shown  # stored text may hold ANSI escapes


def _store(directory: str) -> Any:
    """The results store; older files' cases get their traits from ``registry.stored_traits``."""
    from netbench.store import ResultStore

    return ResultStore(directory, registry.stored_traits)


def cmd_list(args: argparse.Namespace) -> int:
    from netbench.env.probe import probe
    from netbench.report import console

    env = probe(args.sysfs_root)
    benchmarks = registry.all_benchmarks()
    entries = []
    for name, bench in benchmarks.items():
        reason = bench.available(env)
        entries.append({
            "name": name, "transport": bench.transport, "description": bench.description,
            "available": reason is None, "reason": reason,
            "metrics": [{"name": m.name, "unit": m.unit, "better": m.better}
                        for m in bench.metrics],
            "params": [{"name": p.name, "kind": p.kind, "default": p.default,
                        "accepted": p.accepted(), "help": p.help} for p in bench.params],
        })
    loaded, broken_hooks, _ = hooks.load()
    catalog = {"benchmarks": entries, "broken_plugins": registry.broken_plugins(),
               "hooks": [name for name, _ in loaded], "broken_hooks": list(broken_hooks)}
    print(json.dumps(catalog, indent=2) if args.json else console.list_text(catalog))
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from netbench.env.linkpath import CAPTURED_PROC, capture
    from netbench.env.probe import CAPTURED_HOST, probe
    from netbench.fingerprint import host_facts
    from netbench.report import console

    if args.capture:
        dest = Path(args.capture)
        where = dest.resolve()
        if any(where == Path(p) or Path(p) in where.parents for p in ("/proc", "/sys", "/dev")):
            raise UsageError(f"--capture {dest}: {where} is under /proc, /sys or /dev; "
                             "capture into an ordinary directory")
        if dest.exists() and not dest.is_dir():
            raise UsageError(f"--capture {dest}: exists and is not a directory")
        root = Path(args.sysfs_root or "/sys")     # a capture of a capture keeps its _proc
        try:
            count = capture(root, dest,
                            root / CAPTURED_PROC if args.sysfs_root else Path("/proc"))
            # What sysfs cannot hold (hostname, kernel, versions, ethtool's driver version
            # and firmware): kept beside the tree, so the capture reads back as its host.
            facts = host_facts(probe(args.sysfs_root))
            (dest / CAPTURED_PROC).mkdir(parents=True, exist_ok=True)
            (dest / CAPTURED_PROC / CAPTURED_HOST).write_text(
                json.dumps(facts, indent=1, sort_keys=True, default=str) + "\n")
            count += 1
        except OSError as exc:
            raise NetbenchError(f"--capture {dest}: cannot write "
                                f"{exc.filename or dest}: {exc.strerror or exc}") from None
        print(f"captured {count} sysfs files into {args.capture}; read it back with "
              f"`netbench probe --sysfs-root {args.capture}`")
        return 0
    env = probe(args.sysfs_root)
    print(json.dumps(env, indent=2, sort_keys=True) if args.json else console.probe_text(env))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from netbench.analysis import expectations
    from netbench.env.launch import launch_info
    from netbench.env.probe import probe
    from netbench.report import console
    from netbench.run import estimate, session
    from netbench.run.wire import parse_hostport

    plan = session.plan_target(args.target, args.param or [], args.timeout, args.repeat)
    if args.dry_run:
        env = probe(args.sysfs_root)
        print(console.plan_text(plan, env, estimate.case_seconds(args.results, plan, env)))
        return 0
    launched = launch_info()
    quiet = launched is not None and not launched.is_writer   # rank 0 stores and reports
    store = session.choose_store(not quiet, args.jsonl, args.results, _store)
    if args.peer:
        parse_hostport(args.peer, 1)
    env = session.run_env(args.sysfs_root, launched, args.no_counters)
    resume = None
    if args.resume:
        resume, args.label = session.resume_run(store, args.resume, plan, env,
                                                args.label, parquet=not (quiet or args.jsonl))
        print(console.resuming(resume), file=sys.stderr)
    events = console.Reporter(open(os.devnull, "w")) if quiet else console.Reporter()
    if not quiet and not args.jsonl:
        events.estimates = estimate.case_seconds(args.results, plan, env)
    result = session.measure(plan, store, env, resume, label=args.label or "",
                             peer=args.peer, events=events, every=args.interval)
    out, err, code = console.run_ending(
        result, len(plan.cases), rank=launched.rank if quiet else None, as_json=args.json,
        resumed=resume is not None, jsonl=args.jsonl, resume_command=_again(args, result.run_id),
        published=[] if quiet else console.reached_lines(*expectations.reached_beside(
            result.rows, args.target, registry.metric_units())))
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


def _again(args: argparse.Namespace, run_id: str) -> str:
    from netbench.run import session

    return session.resume_command(run_id, args.target, args.param or [], results=args.results,
                                  repeat=args.repeat, timeout=args.timeout, peer=args.peer,
                                  sysfs_root=args.sysfs_root, no_counters=args.no_counters)


def cmd_healthcheck(args: argparse.Namespace) -> int:
    from netbench.analysis import health
    from netbench.env import counters, slurmnode
    from netbench.fingerprint import Fingerprint
    from netbench.report import console, export, formats
    from netbench.run import session
    from netbench.store import healthstate

    spec_path = args.spec or str(health.DEFAULT_SPEC)
    spec = health.load_spec(spec_path)
    env = session.run_env(args.sysfs_root, None)
    with healthstate.exclusive(args.results):       # one check of a node at a time
        previous, note = healthstate.read(args.results)
        now = counters.snapshot(args.sysfs_root or "/sys").values
        findings = health.judge_node(spec, env) + health.judge_counters(spec, previous, now)
        if health.keeps_counters(findings):
            healthstate.write(args.results, now)
        notes = [note] if note else []
        if health.failed(findings):     # the verdict is known: act now (HealthCheckProgram: 60 s)
            notes.append("not measured: the node fails what it must show already")
        elif spec.cases:
            findings += _health_measured(args, spec_path, spec, env, notes)
    acted = slurmnode.act(args.node, bool(health.failed(findings)),
                          health.reason(findings)) if args.drain else ""
    if args.prom:
        _write_prom(args.prom, export.health_metrics(findings, Fingerprint(env).host, time.time()))
    print(formats.health_json(findings, acted, notes) if args.json
          else console.health_text(findings, acted, notes))
    return 1 if health.failed(findings) else 0


def _health_measured(args: argparse.Namespace, spec_path: str, spec: Any, env: Any,
                     notes: list[str]) -> list[Any]:
    """A node check's measurement (each case once per NIC or GPU), judged by its checks."""
    import pandas as pd

    from netbench.analysis import accept, health
    from netbench.report import console
    from netbench.run import session

    plan = session.per_device(session.plan_target(spec_path, [], args.timeout), env)
    store = _store(args.results)
    result = session.measure(plan, store, env, None, label=args.label, peer=None,
                             events=console.Reporter(open(os.devnull, "w")))
    notes.append(f"stored run {result.run_id} in {result.path}")
    if not spec.checks:
        return []
    checks = accept.load_spec(spec_path, registry.catalog(), registry.metric_units())
    outcomes = accept.evaluate(checks, pd.DataFrame(result.rows), None,
                               accept.read_counters(store, [result.run_id]))
    return health.judge_checks(spec, outcomes, result.rows)


def cmd_soak(args: argparse.Namespace) -> int:
    from netbench.analysis import soak
    from netbench.env.launch import launch_info
    from netbench.report import console, formats
    from netbench.run import session
    from netbench.run.wire import parse_hostport
    from netbench.units import parse_duration

    duration, window = (parse_duration(getattr(args, k), f"--{k}") for k in ("duration", "window"))
    plan = session.soaked(session.plan_target(args.target, args.param or [], args.timeout),
                          duration, window)
    # Under a launcher every rank runs the windows and rank 0 alone stores and judges them,
    # as `netbench run` does (N ranks storing would be N burn-ins of one in the store).
    launched = launch_info()
    quiet = launched is not None and not launched.is_writer
    store = session.choose_store(not quiet, None, args.results, _store)
    parse_hostport(args.peer, 1) if args.peer else None
    env = session.run_env(args.sysfs_root, launched)
    resume = None
    if args.resume:
        resume, args.label = session.resume_run(store, args.resume, plan, env,
                                                args.label, parquet=not quiet)
        print(console.resuming(resume), file=sys.stderr if not quiet else open(os.devnull, "w"))
    events = console.SoakProgress(len(plan.cases), window, open(os.devnull, "w") if quiet
                                  else None)
    result = session.measure(plan, store, env, resume, label=args.label or "",
                             peer=args.peer, events=events)
    if quiet:                      # rank 0 reports; this rank's own failure is its exit
        return console.soak_ending(result, "", True)[1]
    again = session.resume_command(result.run_id, args.target, args.param or [],
                                   results=args.results, repeat=None, timeout=args.timeout,
                                   peer=args.peer, sysfs_root=args.sysfs_root,
                                   soak=(args.duration, args.window))
    judged = soak.judge(store.read([result.run_id])) if result.path else []
    print(formats.soak_json(judged, result.run_id) if args.json
          else console.soak_text(judged, result.run_id))
    notes, code = console.soak_ending(result, again, resume is not None,
                                      sum(c.windows for c in judged))
    sys.stderr.write(notes)
    return code


def cmd_compare(args: argparse.Namespace) -> int:
    from netbench.analysis import compare as cmp
    from netbench.analysis.selection import resolve
    from netbench.report import console, export, formats

    store = _store(args.results)
    base_sel = resolve(store, args.baseline)
    cand_sel = resolve(store, args.candidate, keep_unmeasured=True)
    thresholds, source = _thresholds(args, store, [*base_sel.run_ids, *cand_sel.run_ids])
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha}: a significance level between 0 and 1")
    try:
        done = cmp.comparison(store, base_sel, cand_sel, thresholds, source, args.alpha,
                              args.pool_hosts, not args.no_history)
    except NetbenchError as exc:
        print(f"netbench: error: {shown(exc)}", file=sys.stderr)
        return 2
    print(formats.compare_json(done) if args.json else console.compare_text(done, args.all))
    if args.prom:
        _write_prom(args.prom, export.compare_metrics(done, args.allow_lost))
    if done.fails_gate(args.allow_lost):
        return 1
    if args.fail_on_noisy and cmp.undecided(done.verdicts):
        return 3
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from netbench.analysis import history as hist
    from netbench.report import console, formats

    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha}: a significance level between 0 and 1")
    store = _store(args.results)
    thresholds, source = _thresholds(args, store, None, args.label)
    h = hist.build(store, args.label or (), args.benchmark or (),
                   args.metric or (), args.last, args.window, thresholds, args.alpha,
                   args.host or ())
    print(formats.history_json(h) if args.json else
          console.thresholds_text(thresholds, source) + "\n" + console.history_text(h, args.window))
    failing = console.history_gate(h, args.allow_lost)
    if failing and not args.json:
        print(f"netbench: the newest run {failing}", file=sys.stderr)
    return 1 if failing else 0


def cmd_fabric(args: argparse.Namespace) -> int:
    from netbench.analysis import fabric as verdicts
    from netbench.env import topology
    from netbench.env.launch import launch_info
    from netbench.report import console
    from netbench.run import session
    from netbench.sweep import fabric
    from netbench.units import parse_duration

    plan = session.plan_target(args.target, args.param or [], args.timeout)
    if args.k is not None and args.k < 1:
        raise UsageError(f"--k {args.k}: at least 1 pair at a time")
    if not (0 < args.threshold < 1 and 0 < args.min_deficit < 1):
        raise UsageError(f"--threshold {args.threshold:g}, --min-deficit {args.min_deficit:g}: "
                         "each a fraction between 0 and 1 (0.05 = 5%)")
    shape = topology.load(args.topology) if args.topology else None    # bad file: before all
    soak = parse_duration(args.soak, "--soak") if args.soak is not None else None
    if soak and args.jsonl:       # JSON lines rewrite their file whole each round
        raise UsageError("--soak stores its passes in Parquet (--results DIR), not --jsonl")
    launched = launch_info()
    writer = launched is not None and launched.is_writer
    store = session.choose_store(writer, args.jsonl, args.results, _store)
    env = session.run_env(args.sysfs_root, launched, args.no_counters)
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if writer else \
        (lambda text: None)
    options = fabric.Options(args.pattern, args.direction, args.k, args.center, args.pairs,
                             args.rails, args.label or "", args.join_timeout,
                             args.rendezvous_store, _planner(args, shape, plan), shape,
                             args.trace, soak)
    result = fabric.sweep(plan, env, launched, store, options, rendezvous=args.rendezvous,
                          bind=args.bind, port=args.port, device=args.device or "", say=say)
    if not writer:
        return 0
    judged = verdicts.judge_sweep(result.rows, result.facts.get("soak"), args.threshold,
                                  args.min_line_rate, shape, args.min_deficit)
    ending = console.fabric_soak_ending if soak else console.fabric_ending
    out, err, code = ending(result, judged, args.json, args.jsonl or args.results)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


def _planner(args: argparse.Namespace, shape: Any, plan: Any) -> Any:
    """``--pattern adaptive``'s planner, made by rank 0 once it knows the endpoints."""
    from netbench.sweep.fabric import check_adaptive

    if not check_adaptive(args.pattern, args.direction, args.k, args.rails, args.rounds,
                          args.trace, shape, plan):
        return None
    from netbench.analysis.adaptive import AdaptivePlanner

    return lambda names: AdaptivePlanner(names, shape, args.threshold, args.min_deficit,
                                         budget=args.rounds, traced=args.trace)


def cmd_runs(args: argparse.Namespace) -> int:
    from netbench.report import console, formats

    index = _store(args.results).runs()
    if args.label:
        index = index[index["label"] == args.label]
    if index.empty:
        raise NetbenchError(f"no stored runs in {args.results}"
                            + (f" with label {args.label!r}" if args.label else ""))
    print(formats.runs_json(index) if args.json else console.runs_table(index))
    return 0


def cmd_accept(args: argparse.Namespace) -> int:
    from netbench.analysis import accept
    from netbench.report import console, formats

    spec = accept.load_spec(args.spec, registry.catalog(), registry.metric_units(),
                            args.expectations or [])
    store = _store(args.results)
    chosen = accept.choose_run(store, spec, args.run, args.label)
    ids, kept = chosen.run_ids, accept.kept_passes(store, spec, chosen.run_ids)
    outcomes = accept.evaluate(spec, chosen.rows, accept.kept_topology(store, spec, ids),
                               accept.read_counters(store, ids), kept)
    print(console.accept_text(spec, chosen, outcomes))
    if args.junit:
        formats.accept_junit(spec, outcomes, args.junit)
    return 1 if any(o.verdict.fails_gate() for o in outcomes) else 0


def cmd_report(args: argparse.Namespace) -> int:
    from netbench.analysis import compare as cmp
    from netbench.analysis.selection import resolve
    from netbench.analysis.views import dashboard_views
    from netbench.report import console, dashboard

    store = _store(args.results)
    verdicts, base, cand = [], None, None
    if args.baseline or args.candidate:
        if not (args.baseline and args.candidate):
            raise UsageError("--baseline and --candidate go together")
        base = resolve(store, args.baseline)
        cand = resolve(store, args.candidate, keep_unmeasured=True)
        thresholds, source = _thresholds(args, store, [*base.run_ids, *cand.run_ids])
        verdicts = cmp.judge_selections(store, base, cand, thresholds)
        print(console.sides_text(base, cand, thresholds, source))
    views = dashboard_views(store, args.run, args.label, base, cand, verdicts)
    info = dashboard.render(views, args.output or str(Path(args.results) / "_dashboard.html"))
    print(console.report_text(info))                      # the page is beside its store
    return 0


def _thresholds(args: argparse.Namespace, store: ReadableStore, run_ids: list[str] | None,
                labels: list[str] | None = None) -> tuple[dict[str, float], str]:
    from netbench.analysis.compare import thresholds_of_runs as of_runs
    return of_runs(args.threshold or [], args.thresholds, registry.catalog(), store, run_ids,
                   labels)


def _threshold_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threshold", action="append", metavar="METRIC=VALUE",
                   help="relative change that counts, e.g. bw_avg=3%% or tcp.rr:lat_p99=0.1 "
                   "(over the suite's own [thresholds], stored with its runs; else 5%%); "
                   "repeatable")
    p.add_argument("--thresholds", metavar="FILE", help="TOML file with a [thresholds] table "
                   "(instead of the suite's stored with the runs)")


def cmd_export(args: argparse.Namespace) -> int:
    from netbench.analysis.selection import resolve
    from netbench.analysis.views import soaks_of
    from netbench.report.export import openmetrics

    store = _store(args.results)
    chosen = resolve(store, args.run or args.label)
    text = openmetrics(chosen.rows.astype(object).where(chosen.rows.notna(), None)
                       .to_dict("records"), soaks_of(store.runs(), chosen.rows))
    if not args.output or args.output == "-":
        sys.stdout.write(text)
    else:
        _write_prom(args.output, text)
        print(f"wrote {args.output}: {chosen.describe()}", file=sys.stderr)
    return 0


def _write_prom(path: str, text: str) -> None:
    from netbench.textfile import write_atomic

    out = Path(path)
    if out.is_dir():
        raise UsageError(f"{out}: a directory; name the file (node_exporter's textfile "
                         "collector reads DIR/*.prom)")
    write_atomic(out, lambda tmp: tmp.write_text(text))    # the collector never sees half


def cmd_import(args: argparse.Namespace) -> int:
    from netbench.store import import_jsonl

    store = _store(args.results)
    for source in args.files:
        for path in import_jsonl(source, store):
            print(f"imported {source} -> {path}")
    return 0


def cmd_rxe(args: argparse.Namespace) -> int:
    from netbench.env import softroce

    if args.action == "add":
        netdev = softroce.add(args.netdev, args.name)
        print(f"created soft-RoCE device {args.name} on {netdev} (emulated: functional "
              "figures only); remove it with `netbench rxe del`")
    elif args.action == "del":
        name = args.netdev if args.netdev != "auto" else args.name
        softroce.remove(name)
        print(f"removed {name}")
    else:
        devices = softroce.soft_devices()
        for name, parent in devices.items():
            print(f"{name} on {parent}")
        if not devices:
            print("no soft RDMA devices")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from netbench.run.peer import Server

    # Our own handler: libraries imported later (pyverbs) may configure the root logger.
    log = logging.getLogger("netbench.serve")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("netbench serve: %(message)s"))
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.WARNING if args.quiet else logging.INFO)
    server = Server(registry.get, bind=args.bind, port=args.port)
    host, port = server.listen()
    print(f"netbench serve listening on {host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage mistakes end as one `netbench: error:` line (exit 2), as every other bad input."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(2, f"netbench: error: {self.prog}: {message}\n")


def _port(text: str) -> int:
    """A TCP port, 0..65535 (0: the kernel picks one); anything else is a usage error."""
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return int(text)


NO_COUNTERS = ("do not read the NIC's and the kernel's counters around each case (read by "
               "default, at both ends: netbench.env.counters)")


def build_parser() -> argparse.ArgumentParser:
    from netbench.run.peer import DEFAULT_PORT

    parser = _Parser(
        prog="netbench", description="Interconnect benchmarks: RDMA, collectives, host-to-GPU "
        "feed and TCP baselines, stored in Parquet.")
    parser.add_argument("--version", action="version", version=f"netbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="benchmarks, their params, and whether they can run here")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--sysfs-root", help="read a captured sysfs tree instead of /sys")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("probe", help="the environment fingerprint stored with every run")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--sysfs-root", help="read a captured sysfs tree instead of /sys")
    p.add_argument("--capture", metavar="DIR", help="copy the sysfs files the probe reads "
                   "into DIR (for bug reports and tests), then exit")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("run", help="run one benchmark or a suite file and store the rows")
    p.add_argument("target", help="a benchmark name (tcp.stream) or a suite file (suites/ci.toml)")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="benchmark param; repeatable; lists sweep: -p msg_size=1K,64K")
    p.add_argument("--peer", help="HOST[:PORT] running `netbench serve` "
                   f"(default port {DEFAULT_PORT}); without it, a loopback server is used")
    p.add_argument("--results", default="results", help="results directory (default results/)")
    p.add_argument("--label", help="a label for this run, e.g. before-driver-update")
    p.add_argument("--timeout", type=float, help="seconds allowed per case (default 300)")
    p.add_argument("--json", action="store_true", help="print the stored rows as JSON on stdout")
    p.add_argument("--sysfs-root", help="read a captured sysfs tree instead of /sys")
    p.add_argument("--jsonl", metavar="FILE", help="write rows as JSON lines instead of Parquet "
                   "(lean: no pyarrow); store them later with `netbench import`")
    p.add_argument("--interval", type=float, default=0.0, metavar="SECONDS", help="a line "
                   "each SECONDS while a case runs, as iperf3 prints (default none)")
    p.add_argument("--dry-run", action="store_true", help="validate and print the cases, and "
                   "what would be skipped here; measure nothing")
    p.add_argument("--repeat", type=int, metavar="N", help="run every case N times, "
                   "interleaved (A B A B), so compare has repeats to judge noise by; "
                   "replaces the suite's repeat (never multiplies it)")
    p.add_argument("--resume", metavar="RUN", help="continue an interrupted run (same suite, "
                   "same host): its finished cases are kept, the rest run under its run id")
    p.add_argument("--no-counters", action="store_true", help=NO_COUNTERS)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("soak", help="a burn-in: one benchmark or suite measured window after "
                       "window for hours; each window stored as it ends, the dips named")
    p.add_argument("target", help="tcp.stream, tcp.rr, an rdma.* benchmark, or a suite of them")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE", help="benchmark param")
    p.add_argument("--duration", required=True, help="how long in all: 4h, 90m, 600 (seconds)")
    p.add_argument("--window", default="10s", help="seconds a window (default 10s)")
    for flag in ("--peer", "--label", "--sysfs-root", "--resume"):
        p.add_argument(flag, help=f"as for `netbench run` ({flag})")
    p.add_argument("--results", default="results", help="results directory (default results/)")
    p.add_argument("--timeout", type=float, help="seconds allowed a window (default: 3 windows)")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=cmd_soak)

    p = sub.add_parser("fabric", help="every pair of hosts: one process per host under srun, "
                       "mpirun or torchrun; an N x N matrix that names the bad host or link "
                       "(exit 1 when something is flagged)")
    p.add_argument("target", help="a benchmark with a far end (tcp.stream, rdma.write_bw) or a "
                   "suite file of them")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="benchmark param; repeatable")
    p.add_argument("--pattern", default="all",
                   choices=("all", "one-to-all", "pairs", "adaptive"),
                   help="all pairs in rounds of disjoint pairs (default), one endpoint "
                   "against the rest (--center), the pairs of --pairs FILE, or adaptive: "
                   "cover every host and link, then re-probe only the suspects (give "
                   "--topology)")
    p.add_argument("--soak", metavar="DURATION", help="a burn-in: the pattern's rounds again "
                   "and again for DURATION (4h, 90m, 600), each pass judged as a sweep of its "
                   "own; the element that dipped named with the passes it dipped in")
    p.add_argument("--rounds", type=int, metavar="N", help="with --pattern adaptive: at "
                   "most N rounds (default 2 log2(endpoints) + 4)")
    p.add_argument("--trace", action="store_true", help="with --pattern adaptive: trace "
                   "each pair's data connection from its own 5-tuple (under ECMP: the path "
                   "it takes), so a verdict names a link, not its path set; needs a "
                   "--topology with the routers' addresses (LLDP)")
    p.add_argument("--direction", default="each", choices=("each", "forward", "bidirectional"),
                   help="each direction of a pair on its own (default), one, or both at once")
    p.add_argument("--k", type=int, help="at most K pairs at once (k-batch)")
    p.add_argument("--center", help="with --pattern one-to-all: the endpoint to test")
    p.add_argument("--pairs", metavar="FILE", help="with --pattern pairs: lines of "
                   "'CLIENT SERVER'")
    p.add_argument("--rendezvous", metavar="HOST:PORT", help="rank 0's TCPStore (default "
                   "MASTER_ADDR:MASTER_PORT, as torchrun sets; under srun the step's first "
                   "node, port 15000 + the job id's last 4 digits)")
    p.add_argument("--rendezvous-store", default="auto", choices=("auto", "torch", "builtin"),
                   help="torch.distributed's TCPStore (auto: where torch is installed) or "
                   "netbench's own (builtin: no torch needed)")
    p.add_argument("--bind", metavar="ADDR", help="this rank's fabric address to serve on "
                   "(default: the one that routes to the rendezvous)")
    p.add_argument("--port", type=_port, default=0, help="this rank's serve port (default: any)")
    p.add_argument("--device", help="this rank's NIC, when a host runs one rank per NIC")
    p.add_argument("--rails", action="store_true", help="pair NIC i only with NIC i (rail to "
                   "rail; every rank gives --device)")
    p.add_argument("--no-counters", action="store_true", help=NO_COUNTERS)
    p.add_argument("--join-timeout", type=float, default=120.0,
                   help="seconds for every rank to join (default 120)")
    p.add_argument("--threshold", type=float, default=0.10, help="a pair this far below the "
                   "fabric's healthy rate (the fast pairs' median) is slow, whatever the noise")
    p.add_argument("--min-deficit", type=float, default=0.05, help="one below it by 3 x the "
                   "noise and at least this is slow too (default 0.05; docs/fabric.md)")
    p.add_argument("--min-line-rate", type=float, metavar="FRACTION", help="a pair below this "
                   "share of its client's probed link rate is slow too (e.g. 0.9)")
    p.add_argument("--topology", metavar="FILE", help="the fabric's shape, so a verdict names "
                   "the link or switch at fault: Slurm's topology.conf, ibnetdiscover's "
                   "output, a directory of lldpcli JSON (one file a node) or a netbench TOML "
                   "(default: inferred from the pairs that ran fast)")
    p.add_argument("--results", default="results", help="results directory (rank 0 writes)")
    p.add_argument("--jsonl", metavar="FILE", help="rank 0 writes rows as JSON lines instead "
                   "(store them later with `netbench import`)")
    p.add_argument("--label", help="a label for this run")
    p.add_argument("--timeout", type=float, help="seconds allowed per case (default 300)")
    p.add_argument("--sysfs-root", help="read a captured sysfs tree instead of /sys")
    p.add_argument("--json", action="store_true", help="the verdicts as JSON on stdout")
    p.set_defaults(func=cmd_fabric)

    p = sub.add_parser("runs", help="the stored runs: id, label, time, host, suite, cases")
    p.add_argument("--results", default="results", help="results directory (default results/)")
    p.add_argument("--label", help="only runs with this label")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("compare", help="regression verdicts: baseline vs candidate (exit 1 "
                       "when anything regressed)")
    p.add_argument("baseline", help="a label, a run id, or a results directory")
    p.add_argument("candidate", help="a label, a run id, or a results directory")
    p.add_argument("--results", default="results", help="store holding labels and run ids")
    _threshold_args(p)
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level of the t test on the invocations (repeats, runs)")
    p.add_argument("--fail-on-noisy", action="store_true", help="exit 3 when nothing "
                   "regressed but some change was noisy, unverified or disturbed")
    p.add_argument("--pool-hosts", action="store_true", help="let a side pool runs from "
                   "different hosts (refused by default: one host's noise is not another's)")
    p.add_argument("--allow-lost", action="store_true", help="do not fail on lost cases "
                   "(measured before, skipped/failed/absent now); still listed")
    p.add_argument("--no-history", action="store_true", help="do not use the store's earlier "
                   "runs of each case on the baseline's host as its noise model")
    p.add_argument("--all", action="store_true", help="every metric of every case, not the "
                   "headline first with the rest folded")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--prom", metavar="FILE", help="also write the verdicts as OpenMetrics")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("history", help="metrics across stored runs, each run judged against "
                       "the ones before it (exit 1 when the newest regressed)")
    p.add_argument("--results", default="results", help="results directory (default results/)")
    p.add_argument("--label", action="append", help="only runs with this label; repeatable")
    p.add_argument("--host", action="append", help="only runs on this host; repeatable")
    p.add_argument("--benchmark", action="append", help="only this benchmark; repeatable")
    p.add_argument("--metric", action="append", help="only this metric; repeatable")
    p.add_argument("--last", type=int, default=50, metavar="N",
                   help="the newest N runs (default 50)")
    p.add_argument("--window", type=int, default=5, metavar="N",
                   help="judge each run against up to N runs before it (default 5)")
    _threshold_args(p)
    p.add_argument("--alpha", type=float, default=0.05, help="significance level, as compare")
    p.add_argument("--allow-lost", action="store_true", help="do not fail on cases the newest "
                   "run lost (measured before, not now); still listed")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("accept", help="acceptance checks of a stored run against a spec "
                       "(exit 1 on failure)")
    p.add_argument("spec", help="TOML with [[check]] entries (a suite file may carry them)")
    p.add_argument("--results", default="results", help="results directory (default results/)")
    p.add_argument("--run", help="the run id to judge (default: the latest that measured the "
                   "spec's benchmarks)")
    p.add_argument("--label", help="judge the runs with this label (each row must pass)")
    p.add_argument("--junit", metavar="FILE", help="also write JUnit XML for CI systems")
    p.add_argument("--expectations", action="append", metavar="FILE", help="a site's table of "
                   "published figures (as netbench/expectations.toml) beside the shipped one")
    p.set_defaults(func=cmd_accept)

    p = sub.add_parser("healthcheck", help="a node's quick check between jobs (links, counters "
                       "since the last check, a short RDMA write per NIC, host-to-GPU per GPU); "
                       "exit 1 on failure, as NHC")
    p.add_argument("spec", nargs="?", help="healthcheck suite (default suites/healthcheck.toml)")
    p.add_argument("--results", default="results", help="results directory (default results/)")
    p.add_argument("--label", default="healthcheck", help="label of the stored run")
    p.add_argument("--drain", action="store_true", help="Slurm: drain this node when a check "
                   "fails (reason 'netbench: ...'); resume it when all pass and netbench "
                   "drained it")
    p.add_argument("--node", help="the Slurm node name (default $SLURMD_NODENAME, else the "
                   "short host name)")
    p.add_argument("--timeout", type=float, help="seconds a case may take")
    p.add_argument("--sysfs-root", help="read a captured sysfs tree instead of /sys")
    p.add_argument("--json", action="store_true", help="the checks as JSON")
    p.add_argument("--prom", metavar="FILE", help="also write the verdict as OpenMetrics (for "
                   "node_exporter's textfile collector: DIR/netbench-health.prom)")
    p.set_defaults(func=cmd_healthcheck)

    p = sub.add_parser("report", help="one self-contained HTML dashboard (plotly, offline)")
    p.add_argument("--results", default="results", help="results directory (default results/)")
    p.add_argument("-o", "--output", help="output file (default _dashboard.html in the "
                   "results directory: the leading _ keeps pandas.read_parquet('results/') "
                   "from tripping over it)")
    p.add_argument("--run", help="the run to show first (default: the label of the latest "
                   "run that measured something)")
    p.add_argument("--label", help="the label to show first")
    p.add_argument("--baseline", help="with --candidate: add the comparison view")
    p.add_argument("--candidate", help="label, run id or directory of the candidate")
    _threshold_args(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="a run's metrics as OpenMetrics text (node_exporter's "
                       "textfile collector, Prometheus)")
    p.add_argument("--results", default="results", help="results directory (default results/)")
    p.add_argument("--run", help="the run to export (default: the latest that measured "
                   "something)")
    p.add_argument("--label", help="the runs with this label")
    p.add_argument("-o", "--output", help="file to write atomically, e.g. "
                   "/var/lib/node_exporter/netbench.prom (default: stdout)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", help="store rows from `run --jsonl` files as Parquet runs")
    p.add_argument("files", nargs="+", help="JSON-lines files written by `netbench run --jsonl`")
    p.add_argument("--results", default="results", help="results directory (default results/)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("rxe", help="soft-RoCE: add, delete or list emulated RDMA devices")
    p.add_argument("action", choices=("add", "del", "list"))
    p.add_argument("netdev", nargs="?", default="auto",
                   help="add: the network interface (default: first one up, else lo); "
                   "del: the device name")
    p.add_argument("--name", default="rxe0", help="device name (default rxe0)")
    p.set_defaults(func=cmd_rxe)

    p = sub.add_parser("serve", help="answer benchmarks from a peer (like iperf3 -s)")
    p.add_argument("--bind", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--quiet", action="store_true", help="log only problems")
    p.set_defaults(func=cmd_serve)
    return parser


def _warning_line(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """A warning (a skipped store file, a sysfs file read as unknown) as one line, as errors
    are: no source line, no warning class, nothing a terminal would interpret."""
    print(f"netbench: warning: {shown(message)}", file=file or sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    # numpy's OpenBLAS starts a worker a core, spinning for a while after start-up: nothing
    # here does linear algebra big enough to need them, and they would take the cores a
    # benchmark measures (and make its counted instructions depend on time). A user's own
    # setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    warnings.showwarning = _warning_line
    args = build_parser().parse_args(argv)
    if getattr(args, "timeout", None) is not None and not 0 < args.timeout < math.inf:
        print("netbench: error: --timeout must be a positive, finite number of seconds",
              file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except NetbenchError as exc:
        print(f"netbench: error: {shown(exc)}", file=sys.stderr)   # one line, inert
        return exc.exit_code
    except KeyboardInterrupt as exc:      # Ctrl-C, or SIGTERM/SIGHUP outside a case loop
        name = getattr(exc, "name", "SIGINT")
        print("netbench: interrupted" if name == "SIGINT" else f"netbench: stopped by {name}",
              file=sys.stderr)
        return 128 + int(getattr(signal, name))
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
