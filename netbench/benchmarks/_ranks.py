"""torch.distributed ranks for the coll.* benchmarks: the timed program each rank runs, the
worker process netbench spawns on one host, and the parent's handle on those workers.

One host: ``RankGroup`` starts ``world_size`` workers (``python -m netbench.benchmarks._ranks``),
sends each case to all of them over stdin and reads one JSON result per rank from a dedicated
pipe; per-rank timings are reduced (avg, max) by the parent. Under torchrun / srun / mpirun the
same ``run_case`` runs in-process on every rank and the reduction is a collective.
Timing follows nccl-tests: warm-up, barrier, ``iters`` back-to-back operations, synchronise,
time per operation; then one more operation on fresh inputs whose result is checked. The timed
operations are also cut into windows (``windows``) so that compare has samples to test: on the
CPU a clock read at each window's edge, on a GPU a CUDA event recorded between windows, which
adds no synchronisation to the stream. With a ``duration`` (a soak's window) the timed
operations run until that much time has passed instead, in windows whose size rank 0 decides
and broadcasts (``timed_for``), so that every rank stops after the same operation.
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")
OPS = ("sum", "prod", "max", "min", "avg")


# How torch and its backends word "this dtype/op is not available" (as opposed to a failure).
_SUPPORT_ERROR = re.compile(r"not supported|unsupported|does not support|not implemented|"
                            r"can't be cast|cannot be cast|invalid scalar type|no kernel",
                            re.IGNORECASE)


class Unsupported(Exception):
    """The backend cannot do this dtype/op: a skipped row, not a crash."""


# --- sizes as nccl-tests computes them ---------------------------------------------------------

def layout(op: str, nbytes: int, elem: int, world: int) -> tuple[int, int]:
    """(elements per rank buffer, bytes reported) with nccl-tests' rounding.

    all_gather / reduce_scatter / all_to_all split the reported size across the ranks, so it is
    rounded down to a multiple of world_size x element size; the others to the element size.
    """
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        per_rank = nbytes // (elem * world)
        return per_rank, per_rank * world * elem
    count = nbytes // elem
    return count, count * elem


def bus_factor(op: str, world: int) -> float:
    if op in ("all_reduce", "ddp_sync"):
        return 2 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (world - 1) / world
    return 1.0


# --- the program each rank runs ----------------------------------------------------------------

def _expected_reduce(op: str, world: int) -> float:
    values = [r + 1 for r in range(world)]
    return {"sum": sum(values), "prod": math.prod(values), "max": world, "min": 1,
            "avg": sum(values) / world}[op]


def _reduce_op(dist: Any, op: str) -> Any:
    return {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
            "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}[op]


class _Case:
    """Buffers and the operation for one (op, size, dtype) on one rank."""

    def __init__(self, torch: Any, dist: Any, spec: Mapping[str, Any], rank: int, world: int,
                 device: Any) -> None:
        self.torch, self.dist, self.spec = torch, dist, spec
        self.rank, self.world, self.device = rank, world, device
        self.op = spec["op"]
        self.dtype = getattr(torch, spec["dtype"])
        elem = torch.tensor([], dtype=self.dtype).element_size()
        self.count, self.nbytes = layout(self.op, spec["bytes"], elem, world)
        if self.count <= 0:
            raise Unsupported(f"{spec['bytes']} bytes is below one element per rank "
                              f"({elem} B x {world} ranks)")
        self.root = spec.get("root", 0) % world
        self.reduce = _reduce_op(dist, spec.get("reduce_op", "sum"))
        self.in_place = spec.get("in_place", True)
        self._alloc()

    def _alloc(self) -> None:
        t, n, c = self.torch, self.world, self.count
        empty = lambda k: t.empty(k, dtype=self.dtype, device=self.device)  # noqa: E731
        if self.op == "all_gather":
            self.out = empty(c * n)
            self.inp = self.out[self.rank * c:(self.rank + 1) * c] if self.in_place else empty(c)
        elif self.op == "reduce_scatter":
            self.inp = empty(c * n)
            self.out = self.inp[self.rank * c:(self.rank + 1) * c] if self.in_place else empty(c)
        elif self.op == "all_to_all":
            self.inp, self.out = empty(c * n), empty(c * n)
        elif self.op == "send_recv":
            self.inp, self.out = empty(c), empty(c)
        else:
            self.inp = empty(c)
            self.out = self.inp

    def fill(self) -> None:
        t, n, c = self.torch, self.world, self.count
        if self.op == "all_to_all":
            self.inp.fill_(self.rank + 1)
        elif self.op == "broadcast":
            self.inp.fill_(self.rank + 1 if self.rank == self.root else 0)
        else:
            self.inp.fill_(self.rank + 1)
        if self.op in ("all_gather", "send_recv", "all_to_all") and self.out is not self.inp:
            if not (self.op == "all_gather" and self.in_place):
                self.out.fill_(0)
        del t, n, c

    def run(self) -> None:
        d, op = self.dist, self.op
        if op == "all_reduce":
            d.all_reduce(self.inp, op=self.reduce)
        elif op == "broadcast":
            d.broadcast(self.inp, src=self.root)
        elif op == "reduce":
            d.reduce(self.inp, dst=self.root, op=self.reduce)
        elif op == "all_gather":
            d.all_gather_into_tensor(self.out, self.inp)
        elif op == "reduce_scatter":
            d.reduce_scatter_tensor(self.out, self.inp, op=self.reduce)
        elif op == "all_to_all":
            d.all_to_all_single(self.out, self.inp)
        elif op == "send_recv":
            nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
            reqs = d.batch_isend_irecv([d.P2POp(d.isend, self.inp, nxt),
                                        d.P2POp(d.irecv, self.out, prv)])
            for req in reqs:
                req.wait()

    def wrong(self) -> int:
        """Elements that differ from what the collective must produce (nccl-tests #wrong)."""
        t, n, c, r = self.torch, self.world, self.count, self.rank
        reduce_name = self.spec.get("reduce_op", "sum")
        if self.op in ("all_reduce", "reduce_scatter"):
            expected = t.full_like(self.out, _expected_reduce(reduce_name, n))
        elif self.op == "reduce":
            if r != self.root:
                return 0
            expected = t.full_like(self.out, _expected_reduce(reduce_name, n))
        elif self.op == "broadcast":
            expected = t.full_like(self.out, self.root + 1)
        elif self.op in ("all_gather", "all_to_all"):
            expected = t.arange(1, n + 1, device=self.device).repeat_interleave(c).to(self.dtype)
        elif self.op == "send_recv":
            expected = t.full_like(self.out, (r - 1) % n + 1)
        else:
            return 0
        got = self.out.double()
        want = expected.double()
        tol = 1e-2 * want.abs() if self.dtype in (t.float16, t.bfloat16) else 1e-6 * want.abs()
        return int(((got - want).abs() > tol).sum().item())


CPU_WINDOWS = 64      # a clock read per window: ~0.1 us against a collective of >= 10 us
GPU_WINDOWS = 32
GPU_WINDOW_OPS = 8    # an event record (~1 us of launch work) per 8 ops at least


def windows(iters: int, on_gpu: bool) -> list[int]:
    """Window edges over ``iters`` timed operations, windows as equal as whole ops allow."""
    count = min(iters // GPU_WINDOW_OPS, GPU_WINDOWS) if on_gpu else min(iters, CPU_WINDOWS)
    count = max(count, 1)
    return [round(i * iters / count) for i in range(count + 1)]


def timed(torch: Any, op: Any, iters: int, device: Any) -> tuple[float, list[float]]:
    """(seconds per op over all ``iters``, seconds per op in each window). The total is the
    wall clock from first launch to synchronised end, as nccl-tests times it."""
    edges = windows(iters, device.type == "cuda")
    if device.type == "cuda":
        events = [torch.cuda.Event(enable_timing=True) for _ in edges]
        start = time.perf_counter()
        events[0].record()
        for k in range(1, len(edges)):
            for _ in range(edges[k] - edges[k - 1]):
                op()
            events[k].record()
        torch.cuda.synchronize()
        total = time.perf_counter() - start
        per = [events[k - 1].elapsed_time(events[k]) / 1e3 / (edges[k] - edges[k - 1])
               for k in range(1, len(edges))]
        return total / iters, per
    stamps = [time.perf_counter()]
    for k in range(1, len(edges)):
        for _ in range(edges[k] - edges[k - 1]):
            op()
        stamps.append(time.perf_counter())
    per = [(stamps[k] - stamps[k - 1]) / (edges[k] - edges[k - 1]) for k in range(1, len(edges))]
    return (stamps[-1] - stamps[0]) / iters, per


GROWTH = 8            # a timed-for window holds at most 8x the ops of the one before


def next_window(ops: int, took: float, elapsed: float, seconds: float, on_gpu: bool) -> int:
    """Rank 0's choice of the next window's ops in ``timed_for`` (0: stop), from the last
    window (``ops`` ops in ``took`` s) and the ``elapsed`` of ``seconds``. Windows grow from one
    op to ~1/CPU_WINDOWS (1/GPU_WINDOWS) of the duration, so the samples are as many as a
    counted run's; a remainder under 1.5 windows is one window (no sliver of a sample at the
    end); the loop stops within half an operation of ``seconds``."""
    per_op = max(took / ops, 1e-9)
    left = seconds - elapsed
    if left < per_op / 2:
        return 0
    target = seconds / (GPU_WINDOWS if on_gpu else CPU_WINDOWS)
    want = min(max(round(target / per_op), 1), GROWTH * ops)
    rest = max(round(left / per_op), 1)
    return rest if rest <= 1.5 * want else want


def timed_for(torch: Any, dist: Any, op: Any, seconds: float, rank: int,
              device: Any) -> tuple[float, list[float], int]:
    """(seconds per op, seconds per op in each window, ops): ``op`` back to back until
    ``seconds`` have passed on rank 0's clock. The ranks are in lock-step (each op is a
    collective), so they must stop after the same op: after each window rank 0 broadcasts the
    next window's op count, 0 to stop. Each window is timed apart (its ops only, as
    ``timed`` times them); the time per op is the windows' times summed, over all the ops."""
    on_gpu = device.type == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    control = torch.zeros(1, dtype=torch.int64, device=device)
    marks: list[tuple[Any, Any, int]] = []       # GPU: (start event, end event, ops)
    spans: list[tuple[float, int]] = []          # CPU: (seconds, ops)
    ops, done = 1, 0
    start = last = time.perf_counter()
    while ops:
        if on_gpu:
            begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            begin.record()
            for _ in range(ops):
                op()
            end.record()
            marks.append((begin, end, ops))
        else:
            t0 = time.perf_counter()
            for _ in range(ops):
                op()
            spans.append((time.perf_counter() - t0, ops))
        done += ops
        if rank == 0:
            sync()                              # the clock counts ops done, not launched
            now = time.perf_counter()
            control.fill_(next_window(ops, now - last, now - start, seconds, on_gpu))
            last = now
        # Cheap: one 8-byte broadcast a window (~1/64 of the duration), outside its timing.
        dist.broadcast(control, src=0)
        ops = int(control.item())
    if on_gpu:
        sync()
        spans = [(b.elapsed_time(e) / 1e3, k) for b, e, k in marks]
    total = sum(t for t, _ in spans)
    return total / done, [t / k for t, k in spans], done


def _timed_ops(torch: Any, dist: Any, op: Any, spec: Mapping[str, Any], rank: int,
               device: Any) -> dict[str, Any]:
    """The timed part of a result: ``iters`` ops (``timed``), or ops for ``duration`` s."""
    seconds = float(spec.get("duration", 0))
    if seconds > 0:
        per_op, per_window, ops = timed_for(torch, dist, op, seconds, rank, device)
        return {"time_us": per_op * 1e6, "window_us": [w * 1e6 for w in per_window],
                "ops": ops}
    per_op, per_window = timed(torch, op, spec["iters"], device)
    return {"time_us": per_op * 1e6, "window_us": [w * 1e6 for w in per_window]}


def run_case(torch: Any, dist: Any, spec: Mapping[str, Any], rank: int, world: int,
             device: Any) -> dict[str, Any]:
    """Time ``iters`` operations of one case on this rank (or as many as ``duration`` seconds
    hold), then check one fresh result."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    try:
        case = _Case(torch, dist, spec, rank, world, device)
        case.fill()
        case.run()                      # the first op tells us whether the backend can do it
    except (RuntimeError, ValueError, TypeError) as exc:
        if isinstance(exc, Unsupported) or not _SUPPORT_ERROR.search(str(exc)):
            raise                       # a real failure (a lost peer, ...), not a capability
        raise Unsupported(f"{dist.get_backend()} cannot run {spec['op']} on {spec['dtype']}"
                          f" with {spec.get('reduce_op', 'sum')}: "
                          f"{str(exc).splitlines()[0][:200]}") from None
    for _ in range(max(spec["warmup"] - 1, 0)):
        case.run()
    sync()
    dist.barrier()
    timing = _timed_ops(torch, dist, case.run, spec, rank, device)
    case.fill()
    case.run()
    sync()
    return {"kind": "result", "rank": rank, **timing, "wrong": case.wrong(),
            "bytes": case.nbytes, "count": case.count}


def run_ddp_sync(torch: Any, dist: Any, spec: Mapping[str, Any], rank: int, world: int,
                 device: Any) -> dict[str, Any]:
    """One training step's gradient all_reduce, bucketed as DDP does, timed per step."""
    dtype = getattr(torch, spec["dtype"])
    elem = torch.tensor([], dtype=dtype).element_size()
    total = spec["model_params"]
    per_bucket = max(spec["bucket_bytes"] // elem, 1)
    sizes = [min(per_bucket, total - off) for off in range(0, total, per_bucket)]
    buckets = [torch.full((k,), rank + 1, dtype=dtype, device=device) for k in sizes]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step() -> None:
        works = [dist.all_reduce(b, async_op=True) for b in buckets]   # DDP issues them async
        for work in works:
            work.wait()

    for _ in range(spec["warmup"]):
        step()
    sync()
    dist.barrier()
    timing = _timed_ops(torch, dist, step, spec, rank, device)
    for b in buckets:
        b.fill_(rank + 1)
    step()
    sync()
    want = float(sum(r + 1 for r in range(world)))
    tol = 1e-2 * want if dtype in (torch.float16, torch.bfloat16) else 1e-6 * want
    wrong = sum(int(((b.double() - want).abs() > tol).sum().item()) for b in buckets)
    return {"kind": "result", "rank": rank, **timing, "wrong": wrong,
            "bytes": total * elem, "buckets": len(buckets)}


def execute(torch: Any, dist: Any, spec: Mapping[str, Any], rank: int, world: int,
            device: Any) -> dict[str, Any]:
    fn = run_ddp_sync if spec["op"] == "ddp_sync" else run_case
    try:
        return fn(torch, dist, spec, rank, world, device)
    except Unsupported as exc:
        return {"kind": "unsupported", "rank": rank, "reason": str(exc)}


def init(backend: str, rank: int, world: int, local_rank: int, timeout_s: float) -> Any:
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
    return torch, dist, device


# --- the worker process (one rank, spawned by RankGroup) -----------------------------------------

def worker_main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = os.fdopen(int(os.environ["NETBENCH_RESULT_FD"]), "w")
    if os.environ.get("NETBENCH_CPU"):     # before torch starts a thread: they all inherit it
        os.sched_setaffinity(0, {int(os.environ["NETBENCH_CPU"])})

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        torch, dist, device = init(os.environ["NETBENCH_BACKEND"], rank, world,
                                   int(os.environ.get("LOCAL_RANK", "0")),
                                   float(os.environ.get("NETBENCH_PG_TIMEOUT", "60")))
    except Exception as exc:
        send({"kind": "error", "rank": rank, "reason": f"init_process_group failed: "
                                                       f"{str(exc).splitlines()[0][:300]}"})
        return 1
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    send({"kind": "ready", "rank": rank, "torch": torch.__version__, "nccl": nccl})
    for line in sys.stdin:
        spec = json.loads(line)
        if spec.get("op") == "stop":
            break
        try:
            send(execute(torch, dist, spec, rank, world, device))
        except Exception as exc:
            send({"kind": "error", "rank": rank,
                  "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
            return 1
    dist.destroy_process_group()
    return 0


# --- the parent's handle on spawned ranks ---------------------------------------------------------

class RankError(Exception):
    """A rank failed or died; the message says which and why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankGroup:
    """``world_size`` worker processes on this host, one per rank, reused across cases."""

    def __init__(self, world: int, backend: str, master_port: int, timeout_s: float,
                 bind: str = "none", env: Mapping[str, str] | None = None) -> None:
        self.world, self.backend, self.timeout_s = world, backend, timeout_s
        cpus = sorted(os.sched_getaffinity(0))
        port = master_port or free_port()
        self.procs: list[subprocess.Popen[str]] = []
        self.pipes: list[Any] = []
        self.logs: list[Any] = []
        base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                    WORLD_SIZE=str(world), NETBENCH_BACKEND=backend,
                    NETBENCH_PG_TIMEOUT=str(timeout_s), PYTHONUNBUFFERED="1", **(env or {}))
        for rank in range(world):
            read_fd, write_fd = os.pipe()
            env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank),
                       NETBENCH_RESULT_FD=str(write_fd))
            if bind == "rank":
                env["NETBENCH_CPU"] = str(cpus[rank % len(cpus)])
            log = tempfile.TemporaryFile("w+")       # a file, so a chatty rank never blocks
            proc = subprocess.Popen([sys.executable, "-m", "netbench.benchmarks._ranks"],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=log, env=env, text=True, pass_fds=(write_fd,))
            os.close(write_fd)
            self.logs.append(log)
            self.procs.append(proc)
            self.pipes.append(os.fdopen(read_fd))
        try:
            ready = self._gather(timeout_s + 60)
        except RankError:
            self.close()
            raise
        self.versions = {"torch": ready[0].get("torch"), "nccl": ready[0].get("nccl")}

    def run(self, spec: Mapping[str, Any], timeout: float) -> list[dict[str, Any]]:
        line = json.dumps(dict(spec)) + "\n"
        for rank, proc in enumerate(self.procs):
            try:
                assert proc.stdin is not None
                proc.stdin.write(line)
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise RankError(self._death(rank)) from None
        return self._gather(timeout)

    def _gather(self, timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        got: dict[int, dict[str, Any]] = {}
        fds = {pipe.fileno(): rank for rank, pipe in enumerate(self.pipes)}
        while len(got) < self.world:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self.world)) - set(got))
                raise RankError(f"rank(s) {missing} gave no result within {timeout:g} s")
            waiting = [fd for fd, rank in fds.items() if rank not in got]
            ready, _, _ = select.select(waiting, [], [], min(left, 0.5))
            for fd in ready:
                rank = fds[fd]
                line = self.pipes[rank].readline()
                if not line:
                    raise RankError(self._death(rank))
                message = json.loads(line)
                if message.get("kind") == "error":
                    raise RankError(f"rank {rank}: {message['reason']}")
                got[rank] = message
            for rank, proc in enumerate(self.procs):
                if rank not in got and proc.poll() is not None:
                    raise RankError(self._death(rank))
        return [got[r] for r in range(self.world)]

    def _death(self, rank: int) -> str:
        proc = self.procs[rank]
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            return f"rank {rank} stopped answering"
        log = self.logs[rank]
        log.seek(0)
        err = log.read().strip().splitlines()
        detail = next((ln for ln in reversed(err) if ln.strip()), "")
        return f"rank {rank} exited with code {proc.returncode} mid-run" + (
            f": {detail[:300]}" if detail else "")

    def close(self) -> None:
        for proc in self.procs:
            try:
                if proc.poll() is None and proc.stdin is not None:
                    proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                    proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for handle in [*self.pipes, *self.logs]:
            handle.close()


if __name__ == "__main__":
    sys.exit(worker_main())
