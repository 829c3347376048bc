"""pyverbs plumbing for the rdma.* benchmarks: resources, connection, and the timed loops.

Imported only when an RDMA case runs (pyverbs is optional). Every loop has a deadline and
watches the cancel flag, every work completion's status is checked and reported by name, and
``Side.close`` releases QPs, CQs, MRs, the PD and the device context on every path.
Timing follows perftest: bandwidth from the first post to the last completion; latency per
iteration, half the round trip for write/send ping-pong and the full one for read.
"""

from __future__ import annotations

import ctypes
import os
import random
import resource
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyverbs.enums as e  # optional dependency: this module is imported only to run RDMA
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from netbench.api import SkipCase, host_memory_available

from .plane import Clock, Endpoint, VerbsError, wc_status_name

MTU_ENUM = {256: e.IBV_MTU_256, 512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024,
            2048: e.IBV_MTU_2048, 4096: e.IBV_MTU_4096}
MTU_BYTES = {v: k for k, v in MTU_ENUM.items()}
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1
DMABUF_ALIGN = 1 << 16     # host page size on every platform CUDA runs on divides this


class HostBuffer:
    """Page-locked host memory registered with the NIC; work requests address it by pointer."""

    def __init__(self, pd: Any, length: int, device_name: str) -> None:
        try:
            self.mr = MR(pd, length, ACCESS)
        except PyverbsError as exc:
            raise VerbsError(f"memory registration of {length // 2} bytes on {device_name} was "
                             f"refused ({exc}); {_memlock_hint()}") from None
        self.base = self.mr.buf

    def write(self, data: bytes) -> None:
        self.mr.write(data, len(data))

    def read(self, offset: int, length: int) -> bytes:
        return self.mr.read(length, offset)

    def close(self) -> None:
        self.mr.close()


class GpuBuffer:
    """CUDA memory exported as a dma-buf and registered with the NIC (GPUDirect RDMA without
    nvidia-peermem), as perftest --use_cuda_dmabuf does. The MR's iova is 0, so work requests
    address it from 0; the host reads and writes it through torch only to fill and check it."""

    base = 0

    def __init__(self, pd: Any, length: int, device_name: str, register: bool = True) -> None:
        try:
            import torch
        except ImportError:
            raise SkipCase("mem=gpu needs torch with CUDA; torch is not installed") from None
        if not torch.cuda.is_available():
            raise SkipCase(f"mem=gpu needs a CUDA device; torch {torch.__version__} sees none")
        from pyverbs.mr import DmaBufMR

        self.torch = torch
        span = -(-length // DMABUF_ALIGN) * DMABUF_ALIGN
        try:
            self.tensor = torch.zeros(span + DMABUF_ALIGN, dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError:
            free, total = torch.cuda.mem_get_info()
            raise VerbsError(f"mem=gpu: cannot allocate {span} bytes on the GPU: {free} free "
                             f"of {total}") from None
        self.start = -self.tensor.data_ptr() % DMABUF_ALIGN
        self.fd = _cuda_dmabuf_fd(self.tensor.data_ptr() + self.start, span)
        self.mr = None
        if not register:            # the compiled data plane registers the fd itself
            return
        try:
            self.mr = DmaBufMR(pd, length, ACCESS, dmabuf=self.fd, offset=0)
        except PyverbsError as exc:
            os.close(self.fd)
            raise SkipCase(f"{device_name} cannot register GPU memory through dma-buf ({exc}); "
                           "needs a NIC and driver with dma-buf MRs (mlx5 on kernel >= 5.12; "
                           "rxe and siw have none)") from None

    def view(self, offset: int, length: int) -> Any:
        return self.tensor[self.start + offset:self.start + offset + length]

    def write(self, data: bytes) -> None:
        self.view(0, len(data)).copy_(self.torch.frombuffer(bytearray(data),
                                                            dtype=self.torch.uint8))

    def read(self, offset: int, length: int) -> bytes:
        return self.view(offset, length).cpu().numpy().tobytes()

    def close(self) -> None:
        if self.mr is not None:
            self.mr.close()
        os.close(self.fd)


def _cuda_dmabuf_fd(address: int, length: int) -> int:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise SkipCase(f"mem=gpu: the CUDA driver library is not loadable ({exc})") from None
    fd = ctypes.c_int(-1)
    rc = cuda.cuMemGetHandleForAddressRange(
        ctypes.byref(fd), ctypes.c_uint64(address), ctypes.c_size_t(length),
        ctypes.c_int(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD), ctypes.c_ulonglong(0))
    if rc != 0 or fd.value < 0:
        raise SkipCase(f"mem=gpu: CUDA cannot export GPU memory as a dma-buf (CUresult {rc}); "
                       "needs CUDA >= 11.7 and a driver with dma-buf support (the open kernel "
                       "modules, or nvidia >= 515 with a kernel that has it)")
    return fd.value


def _sysfs_gid_type(device: str, port: int, index: int) -> str | None:
    try:
        with open(f"/sys/class/infiniband/{device}/ports/{port}/gid_attrs/types/{index}") as f:
            return f.read().strip()
    except OSError:
        return None


def pick_device(requested: str) -> str:
    from pyverbs.device import get_device_list
    from pyverbs.pyverbs_error import PyverbsError

    try:
        names = [d.name.decode() for d in get_device_list()]
    except PyverbsError as exc:    # no /sys/class/infiniband at all: ibv_get_device_list fails
        raise SkipCase(f"no RDMA device is visible to libibverbs ({exc})") from None
    if not names:
        raise SkipCase("no RDMA device is visible to libibverbs (ibv_devices lists none)")
    name = requested or os.environ.get("NETBENCH_RDMA_DEV", "") or names[0]
    if name not in names:
        raise VerbsError(f"unknown RDMA device {name!r}; this host has {', '.join(names)}")
    return name


def _memlock_hint() -> str:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
    return (f"the locked-memory limit (ulimit -l) is {limit}; raise it (ulimit -l unlimited, or "
            "memlock in /etc/security/limits.conf, or LimitMEMLOCK= for a service)")


@dataclass
class Side:
    """One end: device context, PD, one MR, one CQ, RC QPs. ``close`` frees all of it.

    The MR holds two halves, as perftest keeps send and receive buffers apart: the source half
    (what we send, and what the peer reads) and the receive half (where the peer's writes and
    sends land, and where our reads put data). In a bidirectional run neither overwrites the
    other."""

    device: str
    port: int
    gid_index: int
    num_qps: int
    depth: int
    size: int
    inline: int
    mtu_request: int                      # 0 = the port's active MTU
    ctx: Any = None
    pd: Any = None
    mr: Any = None
    cq: Any = None
    qps: list[Any] = field(default_factory=list)
    psns: list[int] = field(default_factory=list)
    link_layer: str = ""
    emulated: bool = False
    mem: str = "host"                     # host, or gpu: a dma-buf MR over CUDA memory
    memory: HostBuffer | GpuBuffer | None = None

    def open(self) -> Side:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        dev = self._discover()
        self._create(dev)

    def _discover(self) -> Any:
        """What pyverbs tells of the device and port; checks the case against its limits."""
        try:
            self.ctx = Context(name=self.device)
        except PyverbsError as exc:
            raise VerbsError(f"cannot open RDMA device {self.device}: {exc}") from None
        dev = self.ctx.query_device()
        if not 1 <= self.port <= dev.phys_port_cnt:
            raise VerbsError(f"{self.device} has no port {self.port} (ports 1.."
                             f"{dev.phys_port_cnt})")
        port = self.ctx.query_port(self.port)
        if port.state != e.IBV_PORT_ACTIVE:
            raise VerbsError(f"{self.device} port {self.port} is "
                             f"{PORT_STATES.get(port.state, port.state)}, not ACTIVE: check the "
                             "cable/link (ibv_devinfo, rdma link)")
        self.link_layer = "Ethernet" if port.link_layer == e.IBV_LINK_LAYER_ETHERNET else \
            "InfiniBand"
        self.lid = port.lid
        self.emulated = dev.vendor_id == 0xFFFFFF or self.device.startswith(("rxe", "siw"))
        self.active_mtu = MTU_BYTES.get(port.active_mtu, 1024)
        self.gid = self._resolve_gid(port)
        if 2 * self.size > dev.max_mr_size:
            raise VerbsError(f"2 x msg_size ({2 * self.size}) exceeds {self.device}'s max_mr_size "
                             f"{dev.max_mr_size}")
        free = host_memory_available()
        if self.mem == "host" and free is not None and 2 * self.size > free:
            raise VerbsError(f"2 x msg_size ({2 * self.size} bytes) of registered host memory "
                             f"is more than this host has available ({free} bytes)")
        if self.depth > dev.max_qp_wr:
            raise VerbsError(f"tx_depth {self.depth} exceeds {self.device}'s max_qp_wr "
                             f"{dev.max_qp_wr}")
        self.max_rd_atomic = max(1, min(dev.max_qp_rd_atom, 16))
        return dev

    def _create(self, dev: Any) -> None:
        """The data-plane objects, through pyverbs (the fallback data plane)."""
        depth = self.depth
        self.pd = PD(self.ctx)
        buffer = GpuBuffer if self.mem == "gpu" else HostBuffer
        self.memory = buffer(self.pd, 2 * self.size, self.device)
        self.mr = self.memory.mr
        self.cq = CQ(self.ctx, min(dev.max_cqe, 2 * depth * self.num_qps + 16), None, None, 0)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1, max_recv_sge=1,
                    max_inline_data=self.inline)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap,
                          sq_sig_all=0)
        for _ in range(self.num_qps):
            try:
                self.qps.append(QP(self.pd, init, self._init_attr()))
            except PyverbsRDMAError as exc:
                raise VerbsError(f"cannot create an RC QP on {self.device} with max_send_wr "
                                 f"{depth} and max_inline_data {self.inline} (device "
                                 f"max_qp_wr {dev.max_qp_wr}): {exc}") from None
            self.psns.append(random.getrandbits(24))

    def _resolve_gid(self, port: Any) -> str:
        if self.gid_index < 0:       # auto: RoCE v2 where the port is Ethernet, else GID 0
            self.gid_index = 0
            if self.link_layer == "Ethernet":
                for index in range(min(port.gid_tbl_len, 16)):
                    if _sysfs_gid_type(self.device, self.port, index) == "RoCE v2" and \
                            "ffff" in str(self.ctx.query_gid(self.port, index)):
                        self.gid_index = index
                        break
        if self.gid_index >= port.gid_tbl_len:
            raise VerbsError(f"GID index {self.gid_index} is out of range: {self.device} port "
                             f"{self.port} has {port.gid_tbl_len} GID entries")
        gid = str(self.ctx.query_gid(self.port, self.gid_index))
        if self.link_layer == "Ethernet" and set(gid) <= {"0", ":"}:
            raise VerbsError(f"GID index {self.gid_index} on {self.device} port {self.port} is "
                             "empty; list valid ones with `show_gids` or ibv_devinfo -v")
        return gid

    def _init_attr(self) -> Any:
        attr = QPAttr(port_num=self.port)
        attr.qp_access_flags = ACCESS
        return attr

    def endpoint(self) -> Endpoint:
        return Endpoint(qpns=[qp.qp_num for qp in self.qps], psns=list(self.psns), gid=self.gid,
                        lid=self.lid, rkey=self.mr.rkey, addr=self.dst, read_addr=self.src,
                        size=self.size,
                        mtu=self.mtu_request or self.active_mtu, link_layer=self.link_layer)

    def _path_mtu(self, remote: Endpoint) -> int:
        """The path MTU towards ``remote``, once it is known to match this side."""
        if remote.link_layer != self.link_layer:
            raise VerbsError(f"link layers differ: local {self.link_layer}, peer "
                             f"{remote.link_layer}")
        if remote.size != self.size:
            raise VerbsError(f"message sizes differ: local {self.size}, peer {remote.size}")
        if len(remote.qpns) != len(self.qps):
            raise VerbsError(f"QP counts differ: local {len(self.qps)}, peer "
                             f"{len(remote.qpns)}")
        return min(self.mtu_request or self.active_mtu, remote.mtu, self.active_mtu)

    def connect(self, remote: Endpoint) -> int:
        """INIT -> RTR -> RTS towards the remote QPs; returns the path MTU used."""
        mtu = self._path_mtu(remote)
        for qp, rqpn, rpsn, psn in zip(self.qps, remote.qpns, remote.psns, self.psns):
            attr = self._init_attr()
            attr.path_mtu = MTU_ENUM[mtu]
            attr.max_dest_rd_atomic = self.max_rd_atomic
            attr.max_rd_atomic = self.max_rd_atomic
            attr.min_rnr_timer = 12
            attr.timeout = 14
            attr.retry_cnt = 7
            attr.rnr_retry = 7
            if self.link_layer == "Ethernet":
                gr = GlobalRoute(dgid=GID(val=remote.gid), sgid_index=self.gid_index)
                attr.ah_attr = AHAttr(port_num=self.port, is_global=1, gr=gr, dlid=remote.lid)
            else:
                attr.ah_attr = AHAttr(port_num=self.port, is_global=0, dlid=remote.lid)
            attr.dest_qp_num = rqpn
            attr.rq_psn = rpsn
            attr.sq_psn = psn
            try:
                qp.to_rts(attr)
            except PyverbsRDMAError as exc:
                raise VerbsError(f"cannot connect QP {qp.qp_num} to peer QP {rqpn}: {exc} "
                                 "(mismatched GID, MTU or port?)") from None
        return mtu

    @property
    def src(self) -> int:
        return self.memory.base

    @property
    def dst(self) -> int:
        return self.src + self.size

    def fill(self, data: bytes) -> None:
        """Fill the source half."""
        self.memory.write(data)

    def crc(self) -> int:
        """CRC-32 of the receive half."""
        return zlib.crc32(self.memory.read(self.size, self.size))

    def close(self) -> None:
        for obj in [*self.qps, self.cq, self.memory, self.pd, self.ctx]:
            if obj is not None:
                try:
                    obj.close()
                except Exception:
                    pass
        self.qps, self.cq, self.pd, self.ctx = [], None, None, None
        self.memory = self.mr = None


def _check(wc: Any, what: str) -> None:
    if wc.status != e.IBV_WC_SUCCESS:
        raise VerbsError(f"{what}: work completion failed with {wc_status_name(wc.status)} "
                         f"(vendor_err {wc.vendor_err:#x}, qp {wc.qp_num})")


# --- bandwidth ---------------------------------------------------------------------------------

class Sender:
    """Posts ``iterations`` WRs per QP with at most ``depth`` outstanding, signalling every
    ``cq_mod``th (perftest's selective signalling), and records completion times (stamps:
    rdma.py makes the figures and the per-window samples of them)."""

    def __init__(self, side: Side, remote: Endpoint | None, opcode: int, iterations: int,
                 depth: int, cq_mod: int, stop_at: float = 0.0, post_list: int = 1) -> None:
        # post_list: this plane posts one WR per call whatever it says (same WRs, same
        # signalling); only the compiled plane chains them per doorbell.
        self.side, self.opcode = side, opcode
        self.iterations, self.depth = iterations, depth
        self.cq_mod = max(1, min(cq_mod, depth))
        self.stop_at = stop_at               # duration mode: stop posting at this time
        size = side.size
        flags_base = e.IBV_SEND_INLINE if (side.inline and size <= side.inline and
                                           opcode != e.IBV_WR_RDMA_READ) else 0
        self.flags_base = flags_base
        self.wrs = []
        reading = opcode == e.IBV_WR_RDMA_READ
        local = side.dst if reading else side.src
        for _qp in side.qps:
            wr = SendWR(opcode=opcode, num_sge=1, sg=[SGE(local, size, side.mr.lkey)],
                        send_flags=flags_base)
            if remote is not None and opcode != e.IBV_WR_SEND:
                wr.set_wr_rdma(remote.rkey, remote.read_addr if reading else remote.addr)
            self.wrs.append(wr)
        n = len(side.qps)
        self.posted, self.done = [0] * n, [0] * n
        self.limit = [iterations] * n
        self.stamps: list[tuple[float, int]] = []
        self.t_first = self.t_last = 0.0
        self.finished = False

    def total_done(self) -> int:
        return sum(self.done)

    def step(self) -> None:
        side, now = self.side, time.perf_counter
        if not self.t_first:
            self.t_first = now()
        stopping = self.stop_at and now() >= self.stop_at
        for i, qp in enumerate(side.qps):
            if stopping and self.limit[i] > self.posted[i] + 1:
                self.limit[i] = self.posted[i] + 1      # duration mode: one last, signalled
            wr, limit = self.wrs[i], self.limit[i]
            while self.posted[i] < limit and self.posted[i] - self.done[i] < self.depth:
                self.posted[i] += 1
                signal = self.posted[i] == limit or self.posted[i] % self.cq_mod == 0
                wr.send_flags = self.flags_base | (e.IBV_SEND_SIGNALED if signal else 0)
                wr.wr_id = (i << 40) | self.posted[i]
                qp.post_send(wr)
        self.finished = all(d >= lim for d, lim in zip(self.done, self.limit))

    def on_completion(self, wc: Any) -> None:
        qp_index, count = wc.wr_id >> 40, wc.wr_id & ((1 << 40) - 1)
        self.done[qp_index] = max(self.done[qp_index], count)
        self.t_last = time.perf_counter()
        self.stamps.append((self.t_last, self.total_done()))
        self.finished = all(d >= lim for d, lim in zip(self.done, self.limit))


class Receiver:
    """Keeps receive WRs posted for SEND traffic and counts what arrives.

    ``expected`` is how many messages will come; None until known (the sender in this process
    finishes, or the peer says how many it sent)."""

    def __init__(self, side: Side, depth: int, expected: int | None = None,
                 source: Sender | None = None) -> None:
        self.side, self.expected, self.source = side, expected, source
        self.got = 0
        self.posted = [0] * len(side.qps)
        self.wr = RecvWR(num_sge=1, sg=[SGE(side.dst, side.size, side.mr.lkey)])
        self.depth = depth
        self.byqpn = {qp.qp_num: i for i, qp in enumerate(side.qps)}
        for i in range(len(side.qps)):
            self._refill(i)

    def _refill(self, i: int) -> None:
        qp = self.side.qps[i]
        while self.posted[i] < self.depth:
            qp.post_recv(self.wr)
            self.posted[i] += 1

    def on_completion(self, wc: Any) -> None:
        i = self.byqpn.get(wc.qp_num, 0)
        self.got += 1
        self.posted[i] -= 1
        self._refill(i)

    @property
    def finished(self) -> bool:
        if self.expected is None and self.source is not None and self.source.finished:
            self.expected = self.source.total_done()
        return self.expected is not None and self.got >= self.expected


def drive(owners: list[tuple[Any, Sender | None, Receiver | None]], clock: Clock, what: str,
          wait_receivers: bool = True) -> None:
    """Poll every CQ, hand completions to their sender or receiver, until all finish.

    With ``wait_receivers=False`` it returns once the senders are done, still handing receive
    completions over (and re-posting receive WRs) on the way."""
    while True:
        busy = False
        for cq, sender, receiver in owners:
            if sender is not None and not sender.finished:
                sender.step()
                busy = True
            if wait_receivers and receiver is not None and not receiver.finished:
                busy = True
            n, wcs = cq.poll(16)
            for wc in wcs[:n]:
                _check(wc, what)
                if wc.opcode & e.IBV_WC_RECV:
                    if receiver is not None:
                        receiver.on_completion(wc)
                elif sender is not None:
                    sender.on_completion(wc)
        if not busy:
            return
        clock.check()


# --- latency -----------------------------------------------------------------------------------

class Completions:
    """A CQ that serves both directions: counts send-side and receive completions apart, so
    waiting for one kind never throws the other away."""

    def __init__(self, cq: Any, what: str) -> None:
        self.cq, self.what = cq, what
        self.sends = self.recvs = 0

    def _poll(self) -> int:
        n, wcs = self.cq.poll(16)
        for wc in wcs[:n]:
            _check(wc, self.what)
            if wc.opcode & e.IBV_WC_RECV:
                self.recvs += 1
            else:
                self.sends += 1
        return n

    def wait_send(self, clock: Clock) -> None:
        while not self.sends:
            if not self._poll():
                clock.check()
        self.sends -= 1

    def wait_recv(self, clock: Clock) -> None:
        while not self.recvs:
            if not self._poll():
                clock.check()
        self.recvs -= 1


def _wait_byte(side: Side, marker: int, clock: Clock) -> None:
    offset = 2 * side.size - 1          # last byte of the receive half
    read = side.mr.read
    while read(1, offset)[0] != marker:
        clock.check()


class PingPong:
    """One side of a write or send ping-pong (perftest *_lat): post, then wait for the reply."""

    def __init__(self, side: Side, remote: Endpoint | None, op: str,
                 two_processes: bool = True) -> None:
        self.side, self.op = side, op
        size = side.size
        opcode = e.IBV_WR_RDMA_WRITE if op == "write" else e.IBV_WR_SEND
        flags = e.IBV_SEND_SIGNALED | (e.IBV_SEND_INLINE if side.inline and
                                       size <= side.inline else 0)
        self.wr = SendWR(opcode=opcode, num_sge=1, sg=[SGE(side.src, size, side.mr.lkey)],
                         send_flags=flags)
        if remote is not None and op == "write":
            self.wr.set_wr_rdma(remote.rkey, remote.addr)
        self.recv_wr = RecvWR(num_sge=1, sg=[SGE(side.dst, size, side.mr.lkey)])
        self.completions = Completions(side.cq, f"{op} ping-pong")
        self.marker_buf = bytearray(1)
        if op == "send":
            for _ in range(4):
                side.qps[0].post_recv(self.recv_wr)
        self.unreaped = 0

    def post(self, marker: int, clock: Clock) -> None:
        side = self.side
        self.marker_buf[0] = marker
        side.mr.write(bytes(self.marker_buf), 1, side.size - 1)
        side.qps[0].post_send(self.wr)
        self.unreaped += 1
        if self.op == "send" or self.unreaped >= 16:
            # reap our own send completions so the send queue never fills
            while self.unreaped:
                self.completions.wait_send(clock)
                self.unreaped -= 1

    def wait(self, marker: int, clock: Clock) -> None:
        if self.op == "write":
            _wait_byte(self.side, marker, clock)
        else:
            self.completions.wait_recv(clock)
            self.side.qps[0].post_recv(self.recv_wr)


def marker_of(i: int) -> int:
    return i % 255 + 1          # never 0, the buffer's initial content


def timed_rounds(one_round: Callable[[], None], warmup: int, iterations: int,
                 duration: float = 0.0) -> list[int]:
    """Nanoseconds per call of ``one_round``: ``warmup`` untimed calls, then ``iterations``
    timed ones, or as many as fit in ``duration`` seconds when it is set."""
    for _ in range(warmup):
        one_round()
    clock_ns = time.perf_counter_ns
    end = clock_ns() + int(duration * 1e9) if duration else 0
    rtts: list[int] = []
    while True:
        t0 = clock_ns()
        one_round()
        t1 = clock_ns()
        rtts.append(t1 - t0)
        if (t1 >= end) if duration else len(rtts) >= iterations:
            return rtts


def pingpong_client(me: PingPong, peer: PingPong | None, warmup: int, iterations: int,
                    clock: Clock, duration: float = 0.0) -> list[int]:
    """RTTs in ns. With ``peer`` (loopback), this thread also plays the far end."""
    count = iter(range(1 << 62))

    def one_round() -> None:
        marker = marker_of(next(count))
        me.post(marker, clock)
        if peer is not None:
            peer.wait(marker, clock)
            peer.post(marker, clock)
        me.wait(marker, clock)

    return timed_rounds(one_round, warmup, iterations, duration)


def pingpong_server(me: PingPong, count: int, clock: Clock) -> None:
    for i in range(count):
        marker = marker_of(i)
        me.wait(marker, clock)
        me.post(marker, clock)


def read_latency(side: Side, remote: Endpoint, warmup: int, iterations: int, clock: Clock,
                 duration: float = 0.0) -> list[int]:
    """Full round trip of one RDMA READ, posted and completed one at a time (ib_read_lat)."""
    wr = SendWR(opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                sg=[SGE(side.dst, side.size, side.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(remote.rkey, remote.read_addr)
    qp = side.qps[0]
    completions = Completions(side.cq, "read latency")

    def one_round() -> None:
        qp.post_send(wr)
        completions.wait_send(clock)

    return timed_rounds(one_round, warmup, iterations, duration)


@contextmanager
def loopback_pair(params: Mapping[str, Any], depth: int,
                  cls: type[Side] | None = None) -> Iterator[tuple[Side, Side]]:
    """Two sides on one device, their QPs connected to each other; closed on every path."""
    a = side_from(params, depth, cls=cls)
    b = None
    try:
        b = side_from(params, depth, cls=cls)
        a_ep, b_ep = a.endpoint(), b.endpoint()
        a.connect(b_ep)
        b.connect(a_ep)
        yield a, b
    finally:
        if b is not None:
            b.close()
        a.close()


def side_from(params: Mapping[str, Any], depth: int, role_device: str = "",
              cls: type[Side] | None = None) -> Side:
    mtu = params["mtu"]
    return (cls or Side)(device=pick_device(role_device or params["device"]), port=params["port"],
                gid_index=params["gid_index"], num_qps=params["qps"], depth=depth,
                size=params["msg_size"], inline=params["inline_size"],
                mtu_request=0 if mtu == "auto" else int(mtu), mem=params.get("mem", "host")).open()


class PyverbsPlane:
    """The fallback ``DataPlane``: Python loops around pyverbs (about 1 us of the interpreter's
    own in every operation), for hosts where the C plane was not built."""

    name = "pyverbs"
    timer = "perf_counter"
    failures = (PyverbsError,)
    sender = Sender
    receiver = Receiver
    pingpong = PingPong
    drive = staticmethod(drive)
    pingpong_client = staticmethod(pingpong_client)
    pingpong_server = staticmethod(pingpong_server)
    read_latency = staticmethod(read_latency)

    @staticmethod
    def side(params: Mapping[str, Any], depth: int, role_device: str = "") -> Side:
        return side_from(params, depth, role_device)

    @staticmethod
    def loopback_pair(params: Mapping[str, Any],
                      depth: int) -> AbstractContextManager[tuple[Side, Side]]:
        return loopback_pair(params, depth)


PLANE = PyverbsPlane()
