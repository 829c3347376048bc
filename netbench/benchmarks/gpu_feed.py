"""GPU feed rates: copies between host and device memory, and a DataLoader feeding a GPU.

Copies are timed as nvbandwidth times them: the stream is held by a sleep kernel while the
copies are queued, then CUDA events around back-to-back copies measure the device's timeline,
so launch gaps and Python never count. Bandwidth counts each byte once (bytes / time) in
decimal GB/s. ``link_efficiency`` divides it by the theoretical per-direction bandwidth of
the narrowest hop on the GPU's PCIe path, as the probe found it.
"""

from __future__ import annotations

import glob
import importlib.util
import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from netbench.api import (
    Benchmark,
    Case,
    Context,
    Fingerprint,
    Measurement,
    Metric,
    NetbenchError,
    Param,
    SkipCase,
    Traits,
    host_memory_available,
    pcie_path,
)

ITEMSIZE = {"uint8": 1, "int32": 4, "float16": 2, "bfloat16": 2, "float32": 4}   # loader dtypes
TORCH_HINT = "torch is not installed: `pip install torch` with a CUDA build"
HOLD_CYCLES = 200_000_000      # ~0.1 s of GPU clock: longer than queuing any copy loop here

_SIZE = Param("msg_size", "size", 256 << 20, "bytes per copy", minimum=1, maximum=1 << 40,
              sweep=True, all_range=(4 << 10, 1 << 30))
_GPU = Param("gpu", "int", 0, "CUDA device index (a list runs each GPU)", minimum=0,
             maximum=1023, sweep=True)
_HOST = Param("host_mem", "choice", "pinned", "host buffer: pinned (page-locked) or pageable",
              choices=("pinned", "pageable"), sweep=True)
_ITERS = Param("iterations", "int", 20, "timed copies", minimum=1, maximum=1_000_000)
_WARMUP = Param("warmup", "int", 3, "untimed copies first", minimum=0, maximum=1_000_000)

_BW = Metric("bw", "GB/s", "higher", "bytes / time from the first copy's start to the last end")
_PEAK = Metric("bw_peak", "GB/s", "higher", "fastest single copy")
_EFFICIENCY = Metric("link_efficiency", "fraction", "higher",
                     "bw / theoretical per-direction bandwidth of the path's narrowest hop")


# --- shared helpers ----------------------------------------------------------------------------

def torch_build() -> tuple[str, bool] | None:
    """(torch's version, whether it is built for a GPU: CUDA or ROCm), read from the
    installed torch/version.py without importing torch (seconds, for `netbench list`);
    None where that file cannot be read (run() then asks torch itself)."""
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as f:
                text = f.read(1 << 16)
        except (OSError, UnicodeDecodeError):
            continue
        version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
        gpu = re.search(r"^(cuda|hip)\b[^=\n]*=\s*['\"]", text, re.M)
        return (version.group(1) if version else "?"), gpu is not None
    return None


def gpu_available(env: Mapping[str, Any]) -> str | None:
    """Cheap check for ``netbench list``, `run --dry-run` and before each case, without
    importing torch; run() asks CUDA itself and skips with its answer."""
    if not importlib.util.find_spec("torch"):
        return TORCH_HINT
    build = torch_build()
    if build is not None and not build[1]:
        return (f"torch {build[0]} is a CPU-only build: install a CUDA build of torch "
                "(gpu.* needs a CUDA device; mem.copy measures host memory)")
    if not Fingerprint(env).gpus and not glob.glob("/dev/nvidia[0-9]*"):
        return ("no GPU: the PCI bus shows no display or 3D controller and there is no "
                "/dev/nvidia*; gpu.* needs a CUDA device (mem.copy measures host memory)")
    return None


def _cuda(index: int) -> tuple[Any, Any]:
    """torch and the device ``cuda:index``, or SkipCase/NetbenchError saying why not."""
    import torch

    if not torch.cuda.is_available():
        build = (f"torch {torch.__version__} is a CPU-only build" if torch.version.cuda is None
                 else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA "
                      "device (driver not loaded, or CUDA_VISIBLE_DEVICES hides them)")
        raise SkipCase(f"no CUDA device: {build}")
    count = torch.cuda.device_count()
    if index >= count:
        raise NetbenchError(f"no cuda:{index}: this host has {count} CUDA device(s), "
                            f"cuda:0..cuda:{count - 1}")
    return torch, torch.device("cuda", index)


def pci_address(torch: Any, device: Any) -> str | None:
    """The PCI function of a CUDA device ('0000:3b:00.0'), as the probe names it."""
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    return (f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:"
            f"{getattr(props, 'pci_device_id', 0):02x}.0")


def link_bound(env: Mapping[str, Any], address: str | None) -> tuple[float | None, str]:
    """(theoretical GB/s per direction of the narrowest hop, why unknown if it is)."""
    if address is None:
        return None, "link path unknown: torch does not report the GPU's PCI address"
    path = Fingerprint(env).pcie_path(address)
    if path is not None:
        if path.bottleneck_gbytes:
            vm = path.virtualized
            return path.bottleneck_gbytes, (
                f"link bound read inside a VM ({vm}): the guest's link fields may not be "
                "the physical link" if vm else "")
        return None, f"link path of {address}: link speed unknown"
    return None, f"link path unknown: {address} not found under the probed sysfs"


def _device_buffer(torch: Any, device: Any, size: int, what: str) -> Any:
    free, total = torch.cuda.mem_get_info(device)
    message = (f"cannot allocate {human(size)} for {what} on {device}: "
               f"{human(free)} free of {human(total)}")
    if size > free:
        raise NetbenchError(message + "; lower msg_size")
    try:
        return torch.empty(size, dtype=torch.uint8, device=device)
    except torch.cuda.OutOfMemoryError:
        raise NetbenchError(message + "; lower msg_size") from None


def human(n: int) -> str:
    """Readable binary size for messages: 3.2 GiB, 512.0 MiB, 4096 B."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _check_host_room(needed: int, what: str) -> None:
    available = host_memory_available()
    if available is not None and needed > available:
        raise NetbenchError(f"{what} needs {human(needed)} of host memory; "
                            f"{human(available)} is available")


def _host_buffer(torch: Any, size: int, pinned: bool) -> Any:
    _check_host_room(size, f"a {'pinned' if pinned else 'pageable'} host buffer")
    try:
        buf = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
    except (RuntimeError, MemoryError) as exc:
        kind = "pinned (page-locked)" if pinned else "pageable"
        hint = ("; try host_mem=pageable, a smaller msg_size, or a higher locked-memory limit "
                "(ulimit -l)" if pinned else "; lower msg_size")
        raise NetbenchError(f"{kind} host allocation of {human(size)} refused: "
                            f"{str(exc).splitlines()[0][:200]}{hint}") from None
    buf.fill_(0x5A)
    return buf


def _timed_copies(torch: Any, device: Any, dst: Any, src: Any, iterations: int,
                  warmup: int, while_running: Any = None) -> list[float]:
    """Milliseconds of each of ``iterations`` back-to-back copies, on the device's timeline.
    ``while_running(first_done, all_done)`` is called once they are queued (events to poll)."""
    stream = torch.cuda.current_stream(device)
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            dst.copy_(src, non_blocking=True)
        stream.synchronize()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(iterations + 1)]
        torch.cuda._sleep(HOLD_CYCLES)          # hold the stream while the copies queue up
        events[0].record(stream)
        for i in range(iterations):
            dst.copy_(src, non_blocking=True)
            events[i + 1].record(stream)
    if while_running is not None:
        while_running(events[1], events[-1])
    stream.synchronize()
    return [events[i].elapsed_time(events[i + 1]) for i in range(iterations)]


class LinkUnderLoad:
    """The GPU's PCIe path read again while its copies run: a GPU at rest idles its link down,
    so only this reading says whether the link trains to its bound when it matters."""

    def __init__(self, env: Mapping[str, Any] | None, address: str | None) -> None:
        self.env, self.address = env, address
        self.note = ""

    def __call__(self, first_done: Any, all_done: Any) -> None:
        root = Fingerprint(self.env).sysfs_root
        if not root or not self.address:
            return
        deadline = time.monotonic() + 2.0        # the hold kernel is ~0.1 s
        while not first_done.query() and time.monotonic() < deadline:
            time.sleep(0.001)
        if all_done.query():
            return                               # too short to catch the link busy
        path = pcie_path(root, self.address)
        if path is None or path.now_gbytes is None or path.bottleneck_gbytes is None:
            return
        if path.now_gbytes < path.bottleneck_gbytes * 0.99:
            self.note = (f"the link ran below its bound during the copies "
                         f"({path.now_gbytes:.2f} of {path.bottleneck_gbytes:.2f} GB/s per "
                         f"direction): DOWNGRADED: {'; '.join(path.downgraded)}")


def _copy_measurement(size: int, per_copy_ms: list[float], device: str, address: str | None,
                      env: Mapping[str, Any] | None, transport: str | None = None,
                      under_load: str = "") -> Measurement:
    """bw over all copies, the fastest one, and (given the fingerprint) the link's share."""
    rates = [size / (ms * 1e6) for ms in per_copy_ms]          # bytes/ns == GB/s
    values = {"bw": size * len(per_copy_ms) / (sum(per_copy_ms) * 1e6), "bw_peak": max(rates)}
    notes = []
    if env is not None:
        bound, why = link_bound(env, address)
        if bound:
            values["link_efficiency"] = values["bw"] / bound
        notes = [n for n in (why, under_load, numa_note(env, address)) if n]
    return Measurement(values, {"bw": rates}, device=device, transport=transport,
                       note="; ".join(notes), pci_address=address)


def _cpulist(text: str) -> set[int]:
    """'0-3,8' -> {0, 1, 2, 3, 8}"""
    cpus: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def numa_note(env: Mapping[str, Any], address: str | None,
              nodes: str = "/sys/devices/system/node") -> str:
    """Where this process may run CPUs off the GPU's NUMA node, host buffers can land there and
    cross the socket link: say so, and how to pin (nvbandwidth and real loaders pin too)."""
    gpu = Fingerprint(env).gpu(address)
    if not gpu or gpu.numa_node is None:
        return ""
    node = gpu.numa_node
    try:
        with open(f"{nodes}/node{node}/cpulist") as f:
            local = _cpulist(f.read())
        mine = os.sched_getaffinity(0)
    except (OSError, ValueError, AttributeError):
        return ""
    if not local or mine <= local:
        return ""
    return (f"this process may run on CPUs outside the GPU's NUMA node {node}; pin it for "
            f"local host memory: numactl --cpunodebind={node} --membind={node} netbench ...")


class _Gpu(Benchmark):
    """What every CUDA benchmark here shares: the cheap availability check."""

    def available(self, env: Mapping[str, Any]) -> str | None:
        return gpu_available(env)


class _Copy(_Gpu):
    """One direction between host and device memory; subclasses name the direction."""

    transport = "pcie"
    size_means = "bytes per copy"
    metrics = (_BW, _PEAK, _EFFICIENCY)
    params = (_SIZE, _HOST, _GPU, _ITERS, _WARMUP)
    to_device: bool

    def run(self, case: Case, ctx: Context) -> Measurement:
        p = case.params
        torch, device = _cuda(p["gpu"])
        size = p["msg_size"]
        dev = _device_buffer(torch, device, size, "the device buffer")   # fails fastest
        host = _host_buffer(torch, size, p["host_mem"] == "pinned")
        src, dst = (host, dev) if self.to_device else (dev, host)
        address = pci_address(torch, device)
        watch = LinkUnderLoad(ctx.env, address)
        per_copy = _timed_copies(torch, device, dst, src, p["iterations"], p["warmup"], watch)
        return _copy_measurement(size, per_copy, str(device), address, ctx.env,
                                 under_load=watch.note)


class GpuH2D(_Copy):
    name = "gpu.h2d"
    description = "host-to-device copy bandwidth (CUDA events, nvbandwidth convention)"
    to_device = True
    flow = "forward"


class GpuD2H(_Copy):
    name = "gpu.d2h"
    description = "device-to-host copy bandwidth (CUDA events, nvbandwidth convention)"
    to_device = False
    flow = "reverse"


class GpuD2D(_Gpu):
    name = "gpu.d2d"
    transport = "device"
    size_means = "bytes per copy"
    flow = "forward"
    description = "device-to-device copy: within one GPU, or to a peer GPU (peer_gpu)"
    metrics = (_BW, _PEAK)
    params = (_SIZE, _GPU,
              Param("peer_gpu", "int", -1, "destination GPU; -1 = the same GPU", minimum=-1,
                    maximum=1023),
              _ITERS, _WARMUP)

    def run(self, case: Case, ctx: Context) -> Measurement:
        p = case.params
        torch, device = _cuda(p["gpu"])
        size = p["msg_size"]
        peer = device if p["peer_gpu"] < 0 else _cuda(p["peer_gpu"])[1]
        src = _device_buffer(torch, device, size, "the source buffer")
        dst = _device_buffer(torch, peer, size, "the destination buffer")
        transport = "device"
        if peer != device:
            transport = ("p2p" if torch.cuda.can_device_access_peer(peer, device)
                         else "p2p-staged")          # no peer access: the driver stages via host
        per_copy = _timed_copies(torch, device, dst, src, p["iterations"], p["warmup"])
        name = str(device) if peer == device else f"{device}->{peer}"
        return _copy_measurement(size, per_copy, name, pci_address(torch, device), None,
                                 transport)


class GpuBidir(_Gpu):
    name = "gpu.bidir"
    transport = "pcie"
    size_means = "bytes per copy, each way"
    flow = "both"
    description = "host-to-device and device-to-host copies at once, on two streams"
    metrics = (
        Metric("bw", "GB/s", "higher", "both directions' bytes / the span of both"),
        Metric("bw_h2d", "GB/s", "higher", "host-to-device share while both run"),
        Metric("bw_d2h", "GB/s", "higher", "device-to-host share while both run"),
        Metric("link_efficiency", "fraction", "higher",
               "bw / twice the narrowest hop's per-direction bandwidth (both directions)"),
    )
    params = (_SIZE, _HOST, _GPU, _ITERS, _WARMUP)

    def run(self, case: Case, ctx: Context) -> Measurement:
        p = case.params
        torch, device = _cuda(p["gpu"])
        size, iterations = p["msg_size"], p["iterations"]
        pinned = p["host_mem"] == "pinned"
        h_src, h_dst = _host_buffer(torch, size, pinned), _host_buffer(torch, size, pinned)
        d_src = _device_buffer(torch, device, size, "the D2H source")
        d_dst = _device_buffer(torch, device, size, "the H2D destination")
        up, down = torch.cuda.Stream(device), torch.cuda.Stream(device)
        for _ in range(p["warmup"]):
            with torch.cuda.stream(up):
                d_dst.copy_(h_src, non_blocking=True)
            with torch.cuda.stream(down):
                h_dst.copy_(d_src, non_blocking=True)
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        ends = {s: [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
                for s in ("up", "down")}
        with torch.cuda.stream(up):
            torch.cuda._sleep(HOLD_CYCLES)      # both streams start from one event
            start.record(up)
        down.wait_event(start)
        for i in range(iterations):
            with torch.cuda.stream(up):
                d_dst.copy_(h_src, non_blocking=True)
                ends["up"][i].record(up)
            with torch.cuda.stream(down):
                h_dst.copy_(d_src, non_blocking=True)
                ends["down"][i].record(down)
        address = pci_address(torch, device)
        watch = LinkUnderLoad(ctx.env, address)
        watch(ends["up"][0], ends["up"][-1])
        torch.cuda.synchronize(device)
        up_ms = start.elapsed_time(ends["up"][-1])
        down_ms = start.elapsed_time(ends["down"][-1])
        moved = size * iterations
        values = {"bw": 2 * moved / (max(up_ms, down_ms) * 1e6),
                  "bw_h2d": moved / (up_ms * 1e6), "bw_d2h": moved / (down_ms * 1e6)}
        bound, why = link_bound(ctx.env, address)
        if bound:                        # PCIe is full duplex: each direction has the bound
            values["link_efficiency"] = values["bw"] / (2 * bound)
        return Measurement(values, device=str(device),
                           note="; ".join(n for n in (why, watch.note) if n), pci_address=address)


# --- the DataLoader feed --------------------------------------------------------------------------

class SyntheticSamples:
    """A map-style dataset of ready-decoded samples: each item is a fresh copy of one of a few
    random tensors, so workers do the memory traffic a real decoded sample costs, no more."""

    POOL = 16

    def __init__(self, length: int, shape: tuple[int, ...], dtype: str) -> None:
        self.length, self.shape, self.dtype = length, shape, dtype
        self.pool: list[Any] | None = None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        if self.pool is None:                   # built in each worker, never pickled
            import torch

            dtype = getattr(torch, self.dtype)
            gen = torch.Generator().manual_seed(index)
            if dtype.is_floating_point:
                self.pool = [torch.rand(self.shape, generator=gen).to(dtype)
                             for _ in range(self.POOL)]
            else:
                self.pool = [torch.randint(0, 255, self.shape, generator=gen, dtype=dtype)
                             for _ in range(self.POOL)]
        return self.pool[index % self.POOL].clone()


def parse_shape(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.lower().split("x"))


class GpuLoaderFeed(Benchmark):
    name = "gpu.loader_feed"
    transport = "pcie"
    flow = "forward"
    description = "a torch DataLoader feeding batches into GPU memory: samples/s, GB/s, link share"
    metrics = (
        Metric("samples_per_s", "samples/s", "higher", "samples delivered per second"),
        Metric("bw", "GB/s", "higher", "bytes delivered into device memory per second"),
        Metric("link_fraction", "fraction", "higher",
               "bw / theoretical per-direction bandwidth of the GPU's narrowest PCIe hop"),
        Metric("feed_efficiency", "fraction", "higher",
               "bw / the same loader's rate with no pinning and no copy (1 = the path to the "
               "GPU costs the loader nothing; baseline=true)"),
    )
    params = (
        Param("batch_size", "int", 256, "samples per batch", minimum=1, maximum=1 << 20),
        Param("sample_shape", "str", "3x224x224", "shape of one sample",
              pattern=r"[1-9]\d*(x[1-9]\d*)*", pattern_help="dimensions joined by x (3x224x224)"),
        Param("dtype", "choice", "uint8", "sample dtype",
              choices=("uint8", "int32", "float16", "bfloat16", "float32")),
        Param("workers", "int", 4, "DataLoader worker processes", minimum=0, maximum=256,
              sweep=True),
        Param("pin_memory", "bool", True, "pin batches (DataLoader pin_memory)"),
        Param("non_blocking", "bool", True, "asynchronous .to(device, non_blocking=True)"),
        Param("prefetch_factor", "int", 2, "batches each worker keeps ready", minimum=1,
              maximum=64),
        Param("batches", "int", 200, "timed batches (many times workers x prefetch_factor: "
              "workers deliver in bursts)", minimum=1, maximum=1_000_000),
        Param("warmup", "int", 20, "untimed batches first (workers start, the first burst)",
              minimum=0, maximum=1_000_000),
        Param("baseline", "bool", True, "first time the loader alone (no pin, no copy) to "
              "report feed_efficiency"),
        Param("device", "choice", "cuda", "cuda: feed the GPU; cpu: the loader alone, no copy "
              "(to see whether the loader or the link is the limit)", choices=("cuda", "cpu"),
              sweep=True),
        _GPU,
    )

    def available(self, env: Mapping[str, Any]) -> str | None:
        """Its default (device=cuda) needs a GPU; device=cpu, the loader alone, runs here."""
        reason = gpu_available(env)
        if reason is None or reason == TORCH_HINT:
            return reason
        return f"{reason}; device=cpu runs the loader alone"

    def traits(self, case: Case, measured: Measurement | None = None) -> Traits:
        """One operation is one batch delivered."""
        p = case.params
        dims = [int(d) for d in str(p["sample_shape"]).lower().split("x")]
        return replace(super().traits(case, measured), size_means="bytes per batch",
                       op_bytes=p["batch_size"] * math.prod(dims) * ITEMSIZE[p["dtype"]])

    def available_for(self, case: Case, env: Mapping[str, Any]) -> str | None:
        if case.params.get("device") == "cpu":
            return None if importlib.util.find_spec("torch") else TORCH_HINT
        return gpu_available(env)

    def run(self, case: Case, ctx: Context) -> Measurement:
        p = case.params
        if p["device"] == "cuda":
            torch, device = _cuda(p["gpu"])
        else:
            import torch
            device = torch.device("cpu")
        shape = parse_shape(p["sample_shape"])
        batch = p["batch_size"]
        itemsize = torch.empty(0, dtype=getattr(torch, p["dtype"])).element_size()
        sample_bytes = math.prod(shape) * itemsize
        in_flight = max(p["workers"], 1) * p["prefetch_factor"] + 2     # queued + pinned + used
        _check_host_room(in_flight * batch * sample_bytes,
                         f"{in_flight} batches of {batch} x {p['sample_shape']} {p['dtype']} "
                         "in flight")
        on_gpu = device.type == "cuda"
        alone = None
        if on_gpu and p["baseline"]:
            # The same loader producing batches with no pinning and no copy: what the feed
            # would be if the path to the GPU cost nothing.
            alone = self._pass(torch, torch.device("cpu"), p, shape, ctx, (0.0, 0.5))[0]
        wall, intervals = self._pass(torch, device, p, shape, ctx,
                                     (0.0, 1.0) if alone is None else (0.5, 0.5))
        batch_bytes = batch * sample_bytes
        values = {"samples_per_s": p["batches"] * batch / wall,
                  "bw": p["batches"] * batch_bytes / wall / 1e9}
        note, address = "", None
        if on_gpu:
            address = pci_address(torch, device)
            bound, note = link_bound(ctx.env, address)
            if bound:
                values["link_fraction"] = values["bw"] / bound
            if alone is not None:
                values["feed_efficiency"] = alone / wall
        else:
            note = "device=cpu: the loader alone, nothing copied to a GPU"
        bursts = p["workers"] * p["prefetch_factor"]
        if p["batches"] < 4 * bursts:
            # Workers start together and hand over prefetched batches in bursts: a timed
            # window of a few bursts measures where it falls, not the steady rate.
            note = "; ".join(n for n in (note, (
                f"only {p['batches']} timed batches for {p['workers']} workers x prefetch "
                f"{p['prefetch_factor']}: raise batches to >= {4 * bursts} for a steady "
                "rate")) if n)
        return Measurement(values, {"bw": [batch_bytes / s / 1e9 for s in intervals if s > 0]},
                           device=str(device), transport=None if on_gpu else "memory",
                           note=note, pci_address=address)

    def _pass(self, torch: Any, device: Any, p: Mapping[str, Any], shape: tuple[int, ...],
              ctx: Context, progress: tuple[float, float]) -> tuple[float, list[float]]:
        """One loader run: (wall seconds of the timed batches, seconds of each batch);
        ``progress`` is (where this pass starts, its share) of the case's progress."""
        batch, warmup, timed = p["batch_size"], p["warmup"], p["batches"]
        on_gpu = device.type == "cuda"
        dataset = SyntheticSamples((warmup + timed) * batch, shape, p["dtype"])
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch, num_workers=p["workers"],
            pin_memory=p["pin_memory"] and on_gpu,
            prefetch_factor=p["prefetch_factor"] if p["workers"] else None,
            # a wedged worker must end the case, not hang it
            timeout=max(ctx.remaining() - 5, 1) if p["workers"] else 0)
        batches = iter(loader)
        try:
            for _ in range(warmup):
                self._deliver(next(batches), device, p["non_blocking"])
            if on_gpu:
                torch.cuda.synchronize(device)
            marks: list[Any] = [self._mark(torch, device)]
            t0 = time.perf_counter()
            for i in range(timed):
                if ctx.cancelled.is_set():
                    raise NetbenchError("cancelled")
                self._deliver(next(batches), device, p["non_blocking"])
                marks.append(self._mark(torch, device))
                ctx.progress(progress[0] + progress[1] * (i + 1) / timed)
            if on_gpu:
                torch.cuda.synchronize(device)
            wall = time.perf_counter() - t0
        except RuntimeError as exc:
            if "out of memory" in str(exc).lower():
                raise NetbenchError(f"gpu.loader_feed: batch of {batch} x {p['sample_shape']} "
                                    f"{p['dtype']} does not fit: {str(exc)[:200]}") from None
            raise
        finally:
            del batches                             # stops the workers
        if on_gpu:
            return wall, [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]
        return wall, [b - a for a, b in zip(marks, marks[1:])]

    @staticmethod
    def _deliver(batch: Any, device: Any, non_blocking: bool) -> Any:
        return batch if device.type == "cpu" else batch.to(device, non_blocking=non_blocking)

    @staticmethod
    def _mark(torch: Any, device: Any) -> Any:
        if device.type == "cpu":
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event
