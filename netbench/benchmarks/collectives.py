"""Collectives through torch.distributed, measured as nccl-tests measures them.

Each collective is one small class naming its operation; the harness in this module does the
rest: spawn ``world_size`` ranks on this host (or run as one rank under torchrun / srun /
mpirun), time, reduce per-rank times (avg and max), derive algbw and busbw with nccl-tests'
factors, and fail the row when any element of the checked result is wrong. torch is imported
only when a case runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from netbench.api import (
    Benchmark,
    Case,
    Context,
    Measurement,
    Metric,
    NetbenchError,
    Param,
    SkipCase,
    Traits,
    UsageError,
    format_size,
    host_memory_available,
    launch_info,
)

RANK_MEMORY = 400 << 20       # resident memory of one CPU rank (torch + gloo), measured ~330 MiB
TORCH_HINT = ("torch is not installed: `pip install torch==2.13.0` (CPU, gloo) or a CUDA build "
              "(nccl)")


def _params(default_size: int) -> tuple[Param, ...]:
    return (
        Param("msg_size", "size", default_size, "bytes per operation (nccl-tests -b/-e; lists "
              "and ranges sweep)", minimum=1, maximum=64 << 30, sweep=True),
        Param("world_size", "int", 2, "ranks to spawn on this host (ignored under a launcher)",
              minimum=2, maximum=1024),
        Param("backend", "choice", "auto", "auto: nccl with enough GPUs, else gloo",
              choices=("auto", "nccl", "gloo")),
        Param("dtype", "choice", "float32", "element type (nccl-tests -d)",
              choices=("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8",
                       "uint8"), sweep=True),
        Param("iterations", "int", 20, "timed operations (nccl-tests -n; ignored when "
              "duration > 0)", minimum=1, maximum=1_000_000),
        Param("duration", "float", 0.0, "seconds of timed operations, as many as fit; 0 = "
              "use iterations", minimum=0, maximum=3600),
        Param("warmup", "int", 5, "untimed operations first (nccl-tests -w)", minimum=1,
              maximum=100_000),
        Param("master_port", "int", 0, "rendezvous port for spawned ranks; 0 = a free one",
              minimum=0, maximum=65535),
        Param("pg_timeout", "float", 60.0, "seconds a rank waits for the others before failing",
              minimum=1, maximum=3600),
        Param("cpu_bind", "choice", "none", "spawned ranks: rank = rank i on CPU i (mod the "
              "CPUs this process may use), as mpirun --bind-to core; under a launcher its own "
              "binding holds", choices=("none", "rank")),
        Param("path", "choice", "auto", "nccl: auto = NCCL's choice (NVLink, shared memory "
              "within a host); nic = every byte through the ranks' NICs (NCCL_P2P_DISABLE=1, "
              "NCCL_SHM_DISABLE=1: one host's NICs in loopback, as Azure's IB loopback "
              "all_reduce check)", choices=("auto", "nic")),
    )


# What path=nic sets in every rank's environment before NCCL starts: NCCL reads each once a
# process, so a launcher's ranks must have them from the launcher.
NIC_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}


ITEMSIZE = {"uint8": 1, "int8": 1, "float16": 2, "bfloat16": 2, "float32": 4, "int32": 4,
            "float64": 8, "int64": 8}      # bytes per element of the dtypes above


_REDUCE = Param("reduce_op", "choice", "sum", "reduction (nccl-tests -o)",
                choices=("sum", "prod", "max", "min", "avg"))
_ROOT = Param("root", "int", 0, "root rank (nccl-tests -r)", minimum=0, maximum=1023)
_IN_PLACE = Param("in_place", "bool", False, "output aliases the input (nccl-tests checks both)")

METRICS = (
    Metric("time_us", "us", "lower", "time per operation, averaged over ranks (samples: per "
           "timing window)", statistic="avg"),
    Metric("time_max_us", "us", "lower", "time per operation on the slowest rank"),
    Metric("algbw", "GB/s", "higher", "bytes / time (nccl-tests algbw)"),
    Metric("busbw", "GB/s", "higher", "algbw x the collective's bus factor (nccl-tests busbw)"),
)


class _Group:
    """The spawned ranks of one run, kept for every case with the same shape."""

    def __init__(self) -> None:
        self.groups: dict[tuple[Any, ...], Any] = {}
        self.measured: set[str] = set()       # the cases the live ranks have run

    def get(self, world: int, backend: str, port: int, timeout: float, bind: str,
            case: str = "", env: Mapping[str, str] | None = None) -> Any:
        """The ranks for a case; ``case`` (its identity) run by these ranks already is a
        repeat, and a repeat is an invocation of its own: new ranks, new connections. Kept,
        the ranks' whole-run state made a case's repeats agree more than two runs do (gloo
        all_gather 256K here: one run 1,200-1,500 us three times, the next 680-780 us), and
        an A/A comparison called that a regression."""
        from . import _ranks

        key = (world, backend, port, timeout, bind, tuple(sorted((env or {}).items())))
        if case and case in self.measured:
            self.close()
        if key not in self.groups:
            for old in self.groups.values():       # one set of ranks at a time on this host
                old.close()
            self.groups, self.measured = {}, set()
            try:
                self.groups[key] = _ranks.RankGroup(world, backend, port, timeout, bind,
                                                    env=env)
            except _ranks.RankError as exc:
                raise NetbenchError(f"could not start {world} {backend} ranks: {exc}") from None
        self.measured.add(case)
        return self.groups[key]

    def close(self) -> None:
        for group in self.groups.values():
            group.close()
        self.groups = {}
        self.measured = set()


def _ranks_label(world: int) -> str:
    return f"{world} rank" + ("s" if world > 1 else "")


class _LaunchedGroup:
    """This process's rank under a launcher, torn down together at the end of the run.

    Exiting with gloo's threads alive, or while rank 0 (which hosts the store) is already gone,
    aborts the process ("terminate called without an active exception"); a barrier then
    destroy_process_group lets every rank leave cleanly.
    """

    def __init__(self, dist: Any) -> None:
        self.dist = dist

    def close(self) -> None:
        if self.dist.is_initialized():
            try:
                self.dist.barrier()
            finally:
                self.dist.destroy_process_group()


class _Collective(Benchmark):
    """Shared harness; a subclass names its op and params, nothing else."""

    transport = "gloo"          # the row's transport is the backend actually used
    op: ClassVar[str]
    metrics = METRICS
    headline = "busbw"

    def available(self, env: Mapping[str, Any]) -> str | None:
        return None if importlib.util.find_spec("torch") else TORCH_HINT

    def expand(self, raw: Mapping[str, Any]) -> list[Case]:
        """Under a launcher the world is the launcher's: store that, not the spawn default."""
        cases = super().expand(raw)
        launched = launch_info()
        if not launched:
            return cases
        return [Case(c.benchmark, {**c.params, "world_size": launched.world_size})
                for c in cases]

    size_means = "bytes per operation (nccl-tests' size)"

    def traits(self, case: Case, measured: Measurement | None = None) -> Traits:
        """No two ends: every rank sends and receives. nccl-tests prints count, type, redop
        and root before its figures and #wrong after them."""
        from . import _ranks

        params = case.params
        lead: list[tuple[str, str]] = []
        if case.msg_size is not None and "dtype" in params:
            lead += [("count", f"{case.msg_size // ITEMSIZE[params['dtype']]:,}"),
                     ("type", str(params["dtype"]))]
            lead += [(name, str(params[key])) for name, key in (("redop", "reduce_op"),
                                                                ("root", "root"))
                     if key in params]
        return replace(super().traits(case, measured), flow=None, lead=tuple(lead),
                       trail=(("#wrong", "0" if measured else "-"),),
                       bus_factor=_ranks.bus_factor(self.op, int(params["world_size"])))

    def window_params(self, seconds: float) -> dict[str, Any] | None:
        # Ops timed for ``seconds``; warm-up its least, the one op that tells whether the
        # backend can run the case (the ranks are warm from the window before). Under 0.1 s
        # (as tcp.rr and rdma.*), a large message is a handful of ops.
        if seconds < 0.1:
            raise UsageError(f"{self.name}: a window of {seconds:g} s is shorter than it can "
                             "measure; at least 0.1 s")
        return {"duration": seconds, "warmup": 1}

    def _spec(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return _timed({"op": self.op, "bytes": params["msg_size"], "dtype": params["dtype"],
                       "iters": params["iterations"], "warmup": params["warmup"],
                       "reduce_op": params.get("reduce_op", "sum"),
                       "root": params.get("root", 0),
                       "in_place": params.get("in_place", False)}, params)

    def run(self, case: Case, ctx: Context) -> Measurement:
        params = case.params
        launched = launch_info()
        world = launched.world_size if launched else params["world_size"]
        backend = _backend(params["backend"], world, launched)
        env = _path_env(params.get("path", "auto"), backend, launched)
        spec = self._spec(params)
        if launched:
            results = _run_in_process(spec, backend, launched, params["pg_timeout"])
            import torch.distributed as dist
            ctx.shared.setdefault("coll.launched", _LaunchedGroup(dist))
        else:
            _check_host_can_run(world, backend)
            # A soak's windows run one after another on the same ranks, as the runner keeps
            # a soak's far end (new ones would idle the fabric for the seconds a rank start
            # takes, between every two windows).
            identity = "" if getattr(ctx, "soak", False) else json.dumps(
                {**spec, "world": world, "backend": backend}, sort_keys=True)
            group = ctx.shared.setdefault("coll.ranks", _Group()).get(
                world, backend, params["master_port"], params["pg_timeout"],
                params.get("cpu_bind", "none"), identity, env)
            from . import _ranks
            try:
                results = group.run(spec, max(ctx.remaining() - 5, 10))
            except _ranks.RankError as exc:
                ctx.shared.pop("coll.ranks").close()
                raise NetbenchError(f"{backend} ranks failed: {exc}") from None
        return self._measure(results, world, backend, params)

    def _measure(self, results: list[dict[str, Any]], world: int, backend: str,
                 params: Mapping[str, Any]) -> Measurement:
        from . import _ranks

        unsupported = [r for r in results if r["kind"] == "unsupported"]
        if unsupported:
            raise SkipCase(unsupported[0]["reason"])
        wrong = sum(int(r["wrong"]) for r in results)
        nbytes = int(results[0]["bytes"])
        if wrong:
            raise NetbenchError(f"{wrong} wrong element(s) in the {self.op} result "
                                f"({format_size(nbytes)} {params['dtype']}, {world} ranks, "
                                f"{backend}): the transport corrupted data")
        times = [float(r["time_us"]) for r in results]
        avg = sum(times) / len(times)
        factor = _ranks.bus_factor(self.op, world)
        algbw = nbytes / (avg * 1e-6) / 1e9
        values = {"time_us": avg, "time_max_us": max(times), "algbw": algbw,
                  "busbw": algbw * factor}
        window = _window_times(results)
        rates = [nbytes / (w * 1e-6) / 1e9 for w in window if w > 0]
        note = ""
        if nbytes != params["msg_size"]:
            note = (f"size rounded from {params['msg_size']} to {nbytes} bytes (a multiple of "
                    f"the element size{' x world_size' if self.op in _SPLIT else ''}, as "
                    "nccl-tests does)")
        note = "; ".join(filter(None, [note, _ops_note(results, params)]))
        samples = {"time_us": window, "algbw": rates, "busbw": [r * factor for r in rates]}
        return Measurement(values, samples, device=_ranks_label(world), transport=backend,
                           note=note, op_bytes=nbytes)


def _timed(spec: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` timed for ``duration`` seconds where the params give one (a spec without
    one is the counted run's, unchanged)."""
    return {**spec, "duration": params["duration"]} if params.get("duration") else spec


def _ops_note(results: list[dict[str, Any]], params: Mapping[str, Any],
              what: str = "operations") -> str:
    """How many ops a timed case ran (every rank the same: rank 0 decided), else ""."""
    if "ops" not in results[0]:
        return ""
    return f"{int(results[0]['ops']):,} {what} timed in {params['duration']:g} s (duration)"


_SPLIT = ("all_gather", "reduce_scatter", "all_to_all")


def _window_times(results: list[dict[str, Any]]) -> list[float]:
    """Time per op in each timing window, averaged over the ranks: every rank cuts the same
    ops into the same windows, and a collective ties the ranks' windows together."""
    per_rank = [r["window_us"] for r in results]
    return [sum(float(w[i]) for w in per_rank) / len(per_rank)
            for i in range(min(len(w) for w in per_rank))]


def _backend(requested: str, world: int, launched: Any) -> str:
    """nccl needs a GPU of its own for every rank on this host (two ranks on one GPU fail in
    NCCL's init); every rank decides from the same facts, so they agree."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # Ranks on this host: all of them when spawned here; under a launcher what it says
    # (unknown, e.g. srun without --ntasks-per-node: assume one rank per GPU, the usual job).
    here = launched.local_world_size if launched else world
    if requested == "nccl":
        if not gpus:
            raise SkipCase("backend nccl needs CUDA GPUs; torch sees none (use backend=gloo)")
        if here is not None and gpus < here:
            raise UsageError(f"{here} ranks on this host with nccl need {here} GPUs (one per "
                             f"rank); it has {gpus} (use backend=gloo, or fewer ranks)")
        return "nccl"
    if requested == "gloo":
        return "gloo"
    return "nccl" if gpus and (here is None or gpus >= here) else "gloo"


def _path_env(path: str, backend: str, launched: Any) -> dict[str, str]:
    """The environment spawned ranks need for ``path``: NIC_ENV for path=nic, else none. A
    path NCCL cannot be forced onto is a skipped case saying why."""
    if path != "nic":
        return {}
    if backend != "nccl":
        raise SkipCase(f"path=nic forces NCCL off NVLink and shared memory onto the NICs; "
                       f"the backend here is {backend} (TCP sockets, on one host the loopback): "
                       "nothing to force (backend=nccl, on GPUs)")
    if launched:
        unset = [f"{k}={v}" for k, v in NIC_ENV.items() if os.environ.get(k) != v]
        if unset:
            raise SkipCase(f"path=nic under a launcher: export {' '.join(unset)} in the "
                           "launcher's environment (NCCL reads them once a process)")
    return dict(NIC_ENV)


def _check_host_can_run(world: int, backend: str) -> None:
    if backend != "gloo":
        return
    available = host_memory_available()
    if available is not None and world * RANK_MEMORY > available:
        raise UsageError(f"world_size {world} needs about {world * RANK_MEMORY >> 20} MiB for "
                         f"its ranks; this host has {available >> 20} MiB free (lower "
                         "world_size, or run under a launcher across hosts)")


def _run_in_process(spec: Mapping[str, Any], backend: str, launched: Any,
                    timeout: float) -> list[dict[str, Any]]:
    """Under torchrun/srun/mpirun: this process is one rank; reduce timings collectively."""
    from . import _ranks

    try:
        torch, dist, device = _ranks.init(backend, launched.rank, launched.world_size,
                                          launched.local_rank, timeout)
    except Exception as exc:
        raise NetbenchError(f"init_process_group failed on rank {launched.rank}: "
                            f"{str(exc).splitlines()[0][:300]}") from None
    mine = _ranks.execute(torch, dist, spec, launched.rank, launched.world_size, device)
    flag = torch.tensor([1.0 if mine["kind"] == "unsupported" else 0.0], device=device)
    dist.all_reduce(flag)
    if flag.item():
        return [mine if mine["kind"] == "unsupported" else
                {"kind": "unsupported", "reason": "another rank cannot run this case"}]
    gathered = [None] * launched.world_size
    dist.all_gather_object(gathered, mine)
    return gathered


class CollAllReduce(_Collective):
    name = "coll.all_reduce"
    op = "all_reduce"
    description = "all_reduce, nccl-tests all_reduce_perf (busbw = algbw x 2(n-1)/n)"
    params = (*_params(1 << 20), _REDUCE)


class CollAllGather(_Collective):
    name = "coll.all_gather"
    op = "all_gather"
    description = "all_gather into one tensor, all_gather_perf (busbw = algbw x (n-1)/n)"
    params = (*_params(1 << 20), _IN_PLACE)


class CollReduceScatter(_Collective):
    name = "coll.reduce_scatter"
    op = "reduce_scatter"
    description = "reduce_scatter of one tensor, reduce_scatter_perf (busbw = algbw x (n-1)/n)"
    params = (*_params(1 << 20), _REDUCE, _IN_PLACE)


class CollBroadcast(_Collective):
    name = "coll.broadcast"
    op = "broadcast"
    description = "broadcast from a root, broadcast_perf (busbw = algbw)"
    params = (*_params(1 << 20), _ROOT)


class CollReduce(_Collective):
    name = "coll.reduce"
    op = "reduce"
    description = "reduce to a root, reduce_perf (busbw = algbw)"
    params = (*_params(1 << 20), _REDUCE, _ROOT)


class CollAllToAll(_Collective):
    name = "coll.all_to_all"
    op = "all_to_all"
    description = "all_to_all of one tensor, alltoall_perf (busbw = algbw x (n-1)/n)"
    params = _params(1 << 20)


class CollSendRecv(_Collective):
    name = "coll.send_recv"
    op = "send_recv"
    description = "ring send/recv to the next rank, sendrecv_perf (busbw = algbw)"
    params = _params(1 << 20)


class CollDdpSync(_Collective):
    """What the fabric gives a training job: DDP's gradient all_reduce for one step."""

    name = "coll.ddp_sync"
    op = "ddp_sync"
    description = ("a DDP step's gradient all_reduce (model size, dtype, 25 MB buckets) and "
                   "the share of the step it costs")
    headline = "comm_ms"
    metrics = (
        Metric("comm_ms", "ms", "lower", "gradient all_reduce time per step (all buckets)"),
        Metric("busbw", "GB/s", "higher", "gradient bytes x 2(n-1)/n / comm time"),
        Metric("comm_fraction", "ratio", "lower", "comm / (compute + exposed comm)"),
        Metric("scaling_efficiency", "ratio", "higher",
               "compute / (compute + exposed comm): throughput vs perfect scaling"),
    )
    params = (
        Param("model_params", "int", 340_000_000, "parameters in the model (gradients)",
              minimum=1, maximum=10**13, sweep=True),
        Param("dtype", "choice", "bfloat16", "gradient dtype",
              choices=("float32", "float16", "bfloat16"), sweep=True),
        Param("bucket_mb", "float", 25.0, "DDP bucket_cap_mb (MiB per bucket)", minimum=0.01,
              maximum=65536),
        Param("compute_ms", "float", 100.0, "forward+backward compute time per step",
              minimum=0, maximum=1e7),
        Param("overlap", "float", 0.0, "share of comm hidden behind backward (0 = none, the "
              "conservative bound; DDP overlaps part of it)", minimum=0, maximum=1),
        *(p for p in _params(0) if p.name not in ("msg_size", "dtype")),
    )

    def _spec(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return _timed({"op": "ddp_sync", "model_params": params["model_params"],
                       "dtype": params["dtype"],
                       "bucket_bytes": int(params["bucket_mb"] * (1 << 20)),
                       "iters": params["iterations"], "warmup": params["warmup"]}, params)

    def _measure(self, results: list[dict[str, Any]], world: int, backend: str,
                 params: Mapping[str, Any]) -> Measurement:
        from . import _ranks

        wrong = sum(int(r["wrong"]) for r in results)
        if wrong:
            raise NetbenchError(f"{wrong} wrong gradient element(s) after all_reduce "
                                f"({world} ranks, {backend})")
        times = [float(r["time_us"]) for r in results]
        comm_ms = sum(times) / len(times) / 1e3
        nbytes = int(results[0]["bytes"])
        busbw = nbytes / (comm_ms * 1e-3) / 1e9 * _ranks.bus_factor("all_reduce", world)
        compute = params["compute_ms"]
        exposed = max(comm_ms - params["overlap"] * compute, 0.0)
        step = compute + exposed
        values = {"comm_ms": comm_ms, "busbw": busbw,
                  "comm_fraction": exposed / step if step else 1.0,
                  "scaling_efficiency": compute / step if step else 0.0}
        note = (f"{results[0]['buckets']} buckets of {params['bucket_mb']:g} MiB; "
                f"{params['overlap']:.0%} of comm assumed hidden behind {compute:g} ms compute")
        note = "; ".join(filter(None, [note, _ops_note(results, params, "steps")]))
        window_ms = [w / 1e3 for w in _window_times(results)]
        factor = _ranks.bus_factor("all_reduce", world)
        return Measurement(values, {"comm_ms": window_ms,
                                    "busbw": [nbytes / (w * 1e-3) / 1e9 * factor
                                              for w in window_ms if w > 0]},
                           device=_ranks_label(world), transport=backend, note=note,
                           op_bytes=nbytes)
