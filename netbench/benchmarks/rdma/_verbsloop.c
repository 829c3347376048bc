/* The RDMA data plane in C: the loops that post work requests, poll completions and take
 * timestamps, as perftest runs them, with no interpreter in the path.
 *
 * A Python loop around pyverbs costs about a microsecond per operation (one post_send call, a
 * Python object per completion): on a 400G NIC that doubles the latency it reports and caps
 * small-message bandwidth. Here every loop runs with the GIL released, timestamps go into
 * preallocated arrays, and Python only sets up, validates and summarises.
 *
 * Python (pyverbs) does the discovery (devices, ports, GID table and type, device limits);
 * this module owns the data-plane objects: PD, one MR (host memory, or GPU memory through a
 * dma-buf fd), one CQ and the RC QPs of one side, because the loops need their raw pointers.
 *
 * Every loop has a deadline (CLOCK_MONOTONIC ns), watches a cancel flag that Side.cancel()
 * sets from another thread, and optionally a file descriptor (the control connection): when
 * it becomes readable or the peer hangs up, the loop returns WATCH and lets Python look.
 * Work-completion errors are raised with the verbs status name. Bad arguments raise
 * ValueError; nothing here aborts the interpreter.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_BATCH 16            /* completions per ibv_poll_cq, as perftest's CTX_POLL_BATCH */
#define CHECK_EVERY 1024         /* spins between looks at the clock and the cancel flag */
#define WATCH_EVERY_NS 1000000   /* look at the watched fd at most once a millisecond */
#define MAX_STAMPS (1 << 20)     /* completion stamps kept; thinned by half beyond this */
#define QP_SHIFT 40              /* send wr_id = qp index << 40 | per-QP count */
#define MAX_POST_LIST 64
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* Callgrind's client requests, where valgrind's header is installed: each loop switches
 * instrumentation on, and collection on for its own thread, so
 * `valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no` counts the loops alone
 * (bench/instructions_per_op.py, docs/instructions.md): not the runner's other threads, whose
 * wake-ups would make a count grow with time, and not the interpreter around the loops, which
 * runs uninstrumented (fast enough inside the emulated VM). Under a plain callgrind run
 * (collection on from the start) the toggles turn the loops' collection off instead: count
 * them with the options above. Outside valgrind a request is a few no-op instructions, once
 * a loop. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define COUNT_START() do { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; } while (0)
#define COUNT_STOP() do { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_STOP_INSTRUMENTATION; } while (0)
#define COUNT_DUMP(label) CALLGRIND_DUMP_STATS_AT(label)
#define COUNTABLE 1
#endif
#endif
#ifndef COUNT_START
#define COUNT_START() ((void)0)
#define COUNT_STOP() ((void)0)
#define COUNT_DUMP(label) ((void)(label))
#define COUNTABLE 0
#endif

enum { DONE = 0, WATCH = 1, FAIL = 2, CANCELLED = 3, TIMEOUT = 4 };

static PyObject *Error, *CancelledError, *TimeoutError_;

static const char *WC_STATUS[] = {
    "SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
    "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
    "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",
    "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR",
    "RESP_TIMEOUT_ERR", "GENERAL_ERR",
};

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Timestamps in the loops come from the CPU's cycle counter, as perftest's get_cycles():
 * clock_gettime is ~20 ns through the vDSO with a TSC clocksource, but a system call of
 * 1-2 us where the kernel's clocksource is hpet or acpi_pm (measured in the soft-RoCE VM:
 * 1.1-1.9 us a call against 37-50 ns for rdtsc), which would sit inside every latency sample.
 * The counter is calibrated against CLOCK_MONOTONIC once, when the module loads (20 ms). */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t ticks(void) { return __rdtsc(); }
#define TIMER_NAME "tsc"
#elif defined(__aarch64__)
static inline uint64_t ticks(void) {
    uint64_t v;
    __asm__ volatile("isb; mrs %0, cntvct_el0" : "=r"(v));
    return v;
}
#define TIMER_NAME "cntvct"
#else
static inline uint64_t ticks(void) { return (uint64_t)now_ns(); }
#define TIMER_NAME "clock_gettime"
#endif

static double ns_per_tick = 1.0;
static uint64_t base_tick;
static int64_t base_ns;

static void calibrate(void) {
    int64_t t0 = now_ns();
    uint64_t c0 = ticks();
    int64_t t1;
    while ((t1 = now_ns()) - t0 < 20000000) {}
    uint64_t c1 = ticks();
    if (c1 > c0) ns_per_tick = (double)(t1 - t0) / (double)(c1 - c0);
    base_tick = c1;
    base_ns = t1;
}

static inline int64_t ticks_ns(uint64_t dt) { return (int64_t)((double)dt * ns_per_tick + 0.5); }
/* A tick as CLOCK_MONOTONIC ns (for stamps Python compares with its own clock). */
static inline int64_t tick_as_ns(uint64_t t) {
    return base_ns + (int64_t)(((double)t - (double)base_tick) * ns_per_tick);
}
static inline uint64_t ns_as_tick(int64_t ns) {
    return base_tick + (uint64_t)((double)(ns - base_ns) / ns_per_tick);
}

/* What a loop needs to stop on time, and the message it leaves when it fails. */
typedef struct {
    int64_t deadline;
    int watch_fd;
    int64_t next_watch;
    unsigned spins;
    volatile int *cancelled[2];
    char msg[320];
} Guard;

typedef struct Side {
    PyObject_HEAD
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_cq *cq;
    struct ibv_qp **qps;
    int nqps, depth, cqe;
    uint32_t inline_cap;
    char *buf;                 /* host memory; NULL for a dma-buf MR */
    size_t size, length;       /* message size; MR length (two halves: source, receive) */
    uint64_t base;             /* address work requests use: buf, or 0 (dma-buf iova) */
    char name[64];
    volatile int cancelled;
    int busy;
    /* sender state (bandwidth) */
    int s_armed, s_finished, s_post_list;
    unsigned s_cq_mod, s_depth;
    uint64_t *posted, *done, *limit;
    uint64_t stop_at, t_first, t_last;   /* ticks */
    int64_t *stamps;           /* pairs: time (ticks), total completed */
    size_t nstamps;
    uint64_t stamp_gran, last_stamp_n;
    struct ibv_send_wr *wrs;   /* nqps x post_list, chained per QP */
    struct ibv_sge *sges;
    /* receiver state (SEND traffic) */
    int r_armed;
    unsigned r_depth;
    uint64_t got;
    int64_t expected;          /* -1 until known */
    unsigned *r_posted;
    struct Side *source;       /* loopback: the sender whose count we expect */
    struct ibv_recv_wr rwr;
    struct ibv_sge rsge;
    /* ping-pong state */
    int p_armed, p_send;
    struct ibv_send_wr pwr;
    struct ibv_sge psge;
    uint64_t p_posted, p_acked, p_waited;
    unsigned p_sig_every;
} Side;

static PyTypeObject SideType;

/* ---------------------------------------------------------------- guard ----------------- */

static void guard_init(Guard *g, int64_t deadline, int watch_fd, Side *a, Side *b) {
    g->deadline = deadline;
    g->watch_fd = watch_fd;
    g->next_watch = 0;
    g->spins = 0;
    g->cancelled[0] = a ? &a->cancelled : NULL;
    g->cancelled[1] = b ? &b->cancelled : NULL;
    g->msg[0] = 0;
}

/* DONE to go on, else why to stop. Cheap: most calls only count. */
static int guard_check(Guard *g) {
    if (++g->spins % CHECK_EVERY) return DONE;
    for (int i = 0; i < 2; i++)
        if (g->cancelled[i] && *g->cancelled[i]) return CANCELLED;
    int64_t t = now_ns();
    if (t > g->deadline) return TIMEOUT;
    if (g->watch_fd >= 0 && t >= g->next_watch) {
        struct pollfd p = {.fd = g->watch_fd, .events = POLLIN | POLLRDHUP};
        g->next_watch = t + WATCH_EVERY_NS;
        if (poll(&p, 1, 0) > 0) return WATCH;
    }
    return DONE;
}

static int wc_failed(Guard *g, const struct ibv_wc *wc) {
    const char *name = wc->status < sizeof(WC_STATUS) / sizeof(*WC_STATUS)
                           ? WC_STATUS[wc->status] : "unknown status";
    snprintf(g->msg, sizeof g->msg,
             "work completion failed with %s (vendor_err 0x%x, qp %u)", name,
             wc->vendor_err, wc->qp_num);
    return FAIL;
}

static int errno_failed(Guard *g, const char *call, int err) {
    snprintf(g->msg, sizeof g->msg, "%s failed: %s", call, strerror(err));
    return FAIL;
}

/* Raise for a loop's outcome (called with the GIL held). */
static PyObject *outcome(int status, Guard *g) {
    switch (status) {
    case DONE: return PyLong_FromLong(DONE);
    case WATCH: return PyLong_FromLong(WATCH);
    case CANCELLED: PyErr_SetString(CancelledError, "cancelled"); return NULL;
    case TIMEOUT:
        PyErr_SetString(TimeoutError_, "no progress before the deadline (peer gone, or the "
                                       "link dropped?)");
        return NULL;
    default: PyErr_SetString(Error, g->msg[0] ? g->msg : "verbs call failed"); return NULL;
    }
}

/* ---------------------------------------------------------------- Side ------------------ */

static void side_free_state(Side *s) {
    free(s->posted); free(s->done); free(s->limit); free(s->stamps);
    free(s->wrs); free(s->sges); free(s->r_posted);
    s->posted = s->done = s->limit = NULL;
    s->stamps = NULL;
    s->wrs = NULL;
    s->sges = NULL;
    s->r_posted = NULL;
    s->s_armed = s->r_armed = s->p_armed = 0;
    Py_CLEAR(s->source);
}

static void side_release(Side *s) {
    side_free_state(s);
    if (s->qps) {
        for (int i = 0; i < s->nqps; i++)
            if (s->qps[i]) ibv_destroy_qp(s->qps[i]);
        free(s->qps);
        s->qps = NULL;
    }
    if (s->cq) { ibv_destroy_cq(s->cq); s->cq = NULL; }
    if (s->mr) { ibv_dereg_mr(s->mr); s->mr = NULL; }
    if (s->pd) { ibv_dealloc_pd(s->pd); s->pd = NULL; }
    if (s->ctx) { ibv_close_device(s->ctx); s->ctx = NULL; }
    free(s->buf);
    s->buf = NULL;
}

static void Side_dealloc(Side *s) {
    side_release(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int side_fail(const char *fmt, const char *a, int err) {
    PyErr_Format(Error, fmt, a, strerror(err));
    return -1;
}

/* Side(device, port, qps, depth, size, inline_size, dmabuf_fd=-1) */
static int Side_init(Side *s, PyObject *args, PyObject *kw) {
    static char *names[] = {"device", "port", "qps", "depth", "size", "inline_size",
                            "dmabuf_fd", NULL};
    const char *device;
    int port, nqps, depth, inline_size, dmabuf_fd = -1;
    Py_ssize_t size;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "siiini|i", names, &device, &port, &nqps,
                                     &depth, &size, &inline_size, &dmabuf_fd))
        return -1;
    if (s->ctx) { PyErr_SetString(Error, "Side is already open"); return -1; }
    if (nqps < 1 || nqps > 4096 || depth < 1 || depth > (1 << 20) || size < 1 ||
        size > ((Py_ssize_t)1 << 40) || inline_size < 0 || inline_size > (1 << 16) ||
        port < 1 || port > 255) {
        PyErr_SetString(PyExc_ValueError, "out of range: qps 1..4096, depth 1..2^20, size "
                                          "1..2^40, inline_size 0..65536, port 1..255");
        return -1;
    }
    snprintf(s->name, sizeof s->name, "%s", device);
    s->nqps = nqps;
    s->depth = depth;
    s->size = (size_t)size;
    s->length = 2 * (size_t)size;

    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list) return side_fail("ibv_get_device_list%s failed: %s", "", errno);
    for (int i = 0; i < num; i++)
        if (!strcmp(ibv_get_device_name(list[i]), device)) {
            s->ctx = ibv_open_device(list[i]);
            if (!s->ctx) {
                int err = errno;
                ibv_free_device_list(list);
                return side_fail("cannot open RDMA device %s: %s", device, err);
            }
            break;
        }
    ibv_free_device_list(list);
    if (!s->ctx) {
        PyErr_Format(Error, "unknown RDMA device '%s'", device);
        return -1;
    }
    struct ibv_device_attr dev;
    if (ibv_query_device(s->ctx, &dev))
        return side_fail("ibv_query_device(%s) failed: %s", device, errno);
    if (depth > dev.max_qp_wr) {
        PyErr_Format(Error, "tx_depth %d exceeds %s's max_qp_wr %d", depth, device,
                     dev.max_qp_wr);
        return -1;
    }
    if ((uint64_t)s->length > dev.max_mr_size) {
        PyErr_Format(Error, "2 x msg_size (%zu) exceeds %s's max_mr_size %llu", s->length,
                     device, (unsigned long long)dev.max_mr_size);
        return -1;
    }
    s->pd = ibv_alloc_pd(s->ctx);
    if (!s->pd) return side_fail("ibv_alloc_pd(%s) failed: %s", device, errno);
    if (dmabuf_fd >= 0) {
        s->mr = ibv_reg_dmabuf_mr(s->pd, 0, s->length, 0, dmabuf_fd, ACCESS);
        if (!s->mr) {
            PyErr_Format(Error, "dma-buf registration of %zu bytes on %s was refused: %s",
                         s->length, device, strerror(errno));
            return -1;
        }
        s->base = 0;
    } else {
        size_t span = (s->length + 4095) & ~(size_t)4095;
        if (posix_memalign((void **)&s->buf, 4096, span)) { PyErr_NoMemory(); return -1; }
        memset(s->buf, 0, span);
        s->mr = ibv_reg_mr(s->pd, s->buf, s->length, ACCESS);
        if (!s->mr) {
            PyErr_Format(Error, "memory registration of %zu bytes on %s was refused: %s",
                         s->length, device, strerror(errno));
            return -1;
        }
        s->base = (uint64_t)(uintptr_t)s->buf;
    }
    long want = 2L * depth * nqps + 16;
    s->cqe = want < dev.max_cqe ? (int)want : dev.max_cqe;
    s->cq = ibv_create_cq(s->ctx, s->cqe, NULL, NULL, 0);
    if (!s->cq) return side_fail("ibv_create_cq(%s) failed: %s", device, errno);
    s->qps = calloc((size_t)nqps, sizeof *s->qps);
    if (!s->qps) { PyErr_NoMemory(); return -1; }
    s->inline_cap = (uint32_t)inline_size;
    for (int i = 0; i < nqps; i++) {
        struct ibv_qp_init_attr init = {
            .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
            .cap = {.max_send_wr = (uint32_t)depth, .max_recv_wr = (uint32_t)depth,
                    .max_send_sge = 1, .max_recv_sge = 1,
                    .max_inline_data = (uint32_t)inline_size}};
        s->qps[i] = ibv_create_qp(s->pd, &init);
        if (!s->qps[i]) {
            PyErr_Format(Error, "cannot create an RC QP on %s with max_send_wr %d and "
                         "max_inline_data %d (device max_qp_wr %d; the inline limit is the "
                         "driver's): %s", device, depth, inline_size, dev.max_qp_wr,
                         strerror(errno));
            return -1;
        }
        if (i == 0) s->inline_cap = init.cap.max_inline_data;
        struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
                                   .port_num = (uint8_t)port, .qp_access_flags = ACCESS};
        if (ibv_modify_qp(s->qps[i], &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                IBV_QP_ACCESS_FLAGS))
            return side_fail("ibv_modify_qp(%s, INIT) failed: %s", device, errno);
    }
    return 0;
}

static int side_usable(Side *s) {
    if (!s->ctx) { PyErr_SetString(Error, "Side is closed"); return 0; }
    if (s->busy) { PyErr_SetString(Error, "Side is in use by a running loop"); return 0; }
    return 1;
}

/* connect(peers, psns, dgid, dlid, mtu, sgid_index, max_rd_atomic, port)
 * peers: list of (qpn, psn) of the remote QPs; psns: our send PSNs; dgid: 16 bytes or None
 * (InfiniBand, routed by LID); mtu: enum ibv_mtu value. INIT -> RTR -> RTS. */
static PyObject *Side_connect(Side *s, PyObject *args) {
    PyObject *peers, *psns;
    Py_buffer gid = {0};
    int dlid, mtu, sgid_index, rd_atomic, port;
    if (!PyArg_ParseTuple(args, "OOz*iiiii", &peers, &psns, &gid, &dlid, &mtu, &sgid_index,
                          &rd_atomic, &port))
        return NULL;
    PyObject *result = NULL;
    if (!side_usable(s)) goto out;
    if (!PyList_Check(peers) || !PyList_Check(psns) || PyList_GET_SIZE(peers) != s->nqps ||
        PyList_GET_SIZE(psns) != s->nqps || (gid.buf && gid.len != 16) || mtu < 1 || mtu > 5 ||
        rd_atomic < 1 || rd_atomic > 255 || sgid_index < 0 || sgid_index > 255 ||
        port < 1 || port > 255) {
        PyErr_SetString(PyExc_ValueError, "connect: one (qpn, psn) per QP, a 16-byte GID or "
                                          "None, mtu 1..5, rd_atomic 1..255");
        goto out;
    }
    for (int i = 0; i < s->nqps; i++) {
        unsigned long rqpn, rpsn, psn;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(peers, i), "kk", &rqpn, &rpsn)) goto out;
        psn = PyLong_AsUnsignedLong(PyList_GET_ITEM(psns, i));
        if (PyErr_Occurred()) goto out;
        struct ibv_qp_attr attr = {
            .qp_state = IBV_QPS_RTR, .path_mtu = (enum ibv_mtu)mtu,
            .dest_qp_num = (uint32_t)rqpn, .rq_psn = (uint32_t)rpsn & 0xFFFFFF,
            .max_dest_rd_atomic = (uint8_t)rd_atomic, .min_rnr_timer = 12,
            .ah_attr = {.dlid = (uint16_t)dlid, .sl = 0, .src_path_bits = 0,
                        .port_num = (uint8_t)port}};
        if (gid.buf) {
            attr.ah_attr.is_global = 1;
            memcpy(attr.ah_attr.grh.dgid.raw, gid.buf, 16);
            attr.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
            attr.ah_attr.grh.hop_limit = 64;
        }
        if (ibv_modify_qp(s->qps[i], &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                                IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                                IBV_QP_MAX_DEST_RD_ATOMIC |
                                                IBV_QP_MIN_RNR_TIMER)) {
            PyErr_Format(Error, "cannot connect QP %u to peer QP %lu: RTR: %s (mismatched "
                         "GID, MTU or port?)", s->qps[i]->qp_num, rqpn, strerror(errno));
            goto out;
        }
        struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
                                  .rnr_retry = 7, .sq_psn = (uint32_t)psn & 0xFFFFFF,
                                  .max_rd_atomic = (uint8_t)rd_atomic};
        if (ibv_modify_qp(s->qps[i], &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                               IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                               IBV_QP_MAX_QP_RD_ATOMIC)) {
            PyErr_Format(Error, "cannot connect QP %u to peer QP %lu: RTS: %s",
                         s->qps[i]->qp_num, rqpn, strerror(errno));
            goto out;
        }
    }
    result = Py_NewRef(Py_None);
out:
    if (gid.buf) PyBuffer_Release(&gid);
    return result;
}

static PyObject *Side_write(Side *s, PyObject *args) {
    Py_ssize_t offset;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "ny*", &offset, &data)) return NULL;
    PyObject *result = NULL;
    if (!side_usable(s)) goto out;
    if (!s->buf) { PyErr_SetString(Error, "GPU memory is filled through torch"); goto out; }
    if (offset < 0 || (size_t)offset + (size_t)data.len > s->length) {
        PyErr_SetString(PyExc_ValueError, "write beyond the registered buffer");
        goto out;
    }
    memcpy(s->buf + offset, data.buf, (size_t)data.len);
    result = Py_NewRef(Py_None);
out:
    PyBuffer_Release(&data);
    return result;
}

static PyObject *Side_read(Side *s, PyObject *args) {
    Py_ssize_t offset, length;
    if (!PyArg_ParseTuple(args, "nn", &offset, &length)) return NULL;
    if (!side_usable(s)) return NULL;
    if (!s->buf) { PyErr_SetString(Error, "GPU memory is read through torch"); return NULL; }
    if (offset < 0 || length < 0 || (size_t)offset + (size_t)length > s->length) {
        PyErr_SetString(PyExc_ValueError, "read beyond the registered buffer");
        return NULL;
    }
    return PyBytes_FromStringAndSize(s->buf + offset, length);
}

static PyObject *Side_cancel(Side *s, PyObject *unused) {
    s->cancelled = 1;          /* read by a loop running without the GIL */
    Py_RETURN_NONE;
}

static PyObject *Side_close(Side *s, PyObject *unused) {
    if (s->busy) { PyErr_SetString(Error, "Side is in use by a running loop"); return NULL; }
    side_release(s);
    Py_RETURN_NONE;
}

static PyObject *Side_get_qp_nums(Side *s, void *closure) {
    if (!s->qps) return PyList_New(0);
    PyObject *list = PyList_New(s->nqps);
    if (!list) return NULL;
    for (int i = 0; i < s->nqps; i++)
        PyList_SET_ITEM(list, i, PyLong_FromUnsignedLong(s->qps[i]->qp_num));
    return list;
}

static PyObject *Side_get_rkey(Side *s, void *c) {
    return PyLong_FromUnsignedLong(s->mr ? s->mr->rkey : 0);
}
static PyObject *Side_get_base(Side *s, void *c) {
    return PyLong_FromUnsignedLongLong(s->base);
}
static PyObject *Side_get_inline(Side *s, void *c) {
    return PyLong_FromUnsignedLong(s->inline_cap);
}

/* ------------------------------------------------------------- bandwidth ---------------- */

/* arm_sender(opcode, remote_addr, rkey, count, depth, cq_mod, post_list, inline, stop_at_ns)
 * count WRs per QP (stop_at_ns > 0: until then, then one last signalled WR per QP). */
static PyObject *Side_arm_sender(Side *s, PyObject *args) {
    int opcode, use_inline, post_list;
    unsigned long long raddr, count;
    unsigned long rkey;
    unsigned depth, cq_mod;
    long long stop_at;
    if (!PyArg_ParseTuple(args, "iKkKIIipL", &opcode, &raddr, &rkey, &count, &depth, &cq_mod,
                          &post_list, &use_inline, &stop_at))
        return NULL;
    if (!side_usable(s)) return NULL;
    if ((opcode != IBV_WR_RDMA_WRITE && opcode != IBV_WR_RDMA_READ && opcode != IBV_WR_SEND) ||
        count < 1 || depth < 1 || depth > (unsigned)s->depth ||
        cq_mod < 1 || post_list < 1 || post_list > MAX_POST_LIST) {
        PyErr_Format(PyExc_ValueError, "arm_sender: bad opcode, count >= 1, depth "
                     "1..%d, cq_mod >= 1 or post_list 1..%d", s->depth, MAX_POST_LIST);
        return NULL;
    }
    if (count >= (1ULL << QP_SHIFT)) count = (1ULL << QP_SHIFT) - 1;   /* "until stop_at" */
    free(s->posted); free(s->done); free(s->limit); free(s->stamps); free(s->wrs);
    free(s->sges);
    size_t n = (size_t)s->nqps;
    s->posted = calloc(n, sizeof(uint64_t));
    s->done = calloc(n, sizeof(uint64_t));
    s->limit = calloc(n, sizeof(uint64_t));
    s->stamps = malloc(2 * sizeof(int64_t) * MAX_STAMPS);
    s->wrs = calloc(n * (size_t)post_list, sizeof(struct ibv_send_wr));
    s->sges = calloc(n * (size_t)post_list, sizeof(struct ibv_sge));
    if (!s->posted || !s->done || !s->limit || !s->stamps || !s->wrs || !s->sges) {
        s->s_armed = 0;
        return PyErr_NoMemory();
    }
    int reading = opcode == IBV_WR_RDMA_READ;
    uint64_t local = reading ? s->base + s->size : s->base;
    unsigned flags = (use_inline && !reading && s->size <= s->inline_cap) ? IBV_SEND_INLINE : 0;
    for (size_t q = 0; q < n; q++) {
        s->limit[q] = count;
        for (int k = 0; k < post_list; k++) {
            size_t j = q * (size_t)post_list + (size_t)k;
            s->sges[j] = (struct ibv_sge){.addr = local, .length = (uint32_t)s->size,
                                          .lkey = s->mr->lkey};
            struct ibv_send_wr *wr = &s->wrs[j];
            wr->sg_list = &s->sges[j];
            wr->num_sge = 1;
            wr->opcode = (enum ibv_wr_opcode)opcode;
            wr->send_flags = flags;
            if (opcode != IBV_WR_SEND) {
                wr->wr.rdma.remote_addr = raddr;
                wr->wr.rdma.rkey = (uint32_t)rkey;
            }
        }
    }
    s->s_depth = depth;
    s->s_cq_mod = cq_mod < depth ? cq_mod : depth;
    s->s_post_list = post_list;
    s->stop_at = stop_at > 0 ? ns_as_tick(stop_at) : 0;
    s->t_first = s->t_last = 0;
    s->nstamps = 0;
    s->stamp_gran = (uint64_t)depth * n;
    s->last_stamp_n = 0;
    s->s_finished = 0;
    s->s_armed = 1;
    Py_RETURN_NONE;
}

static uint64_t total_done(const Side *s) {
    uint64_t t = 0;
    for (int i = 0; i < s->nqps; i++) t += s->done[i];
    return t;
}

static int sender_finished(const Side *s) {
    for (int i = 0; i < s->nqps; i++)
        if (s->done[i] < s->limit[i]) return 0;
    return 1;
}

static void stamp(Side *s, uint64_t t) {
    uint64_t n = total_done(s);
    if (n - s->last_stamp_n < s->stamp_gran && !sender_finished(s)) return;
    if (s->nstamps == MAX_STAMPS) {           /* thin by half: memory stays bounded */
        for (size_t i = 0; i < MAX_STAMPS / 2; i++) {
            s->stamps[2 * i] = s->stamps[4 * i + 2];
            s->stamps[2 * i + 1] = s->stamps[4 * i + 3];
        }
        s->nstamps = MAX_STAMPS / 2;
        s->stamp_gran *= 2;
    }
    s->stamps[2 * s->nstamps] = (int64_t)t;
    s->stamps[2 * s->nstamps + 1] = (int64_t)n;
    s->nstamps++;
    s->last_stamp_n = n;
}

/* Post what the send queues have room for: chains of up to post_list WRs per QP. */
static int sender_step(Side *s, Guard *g) {
    if (!s->t_first) s->t_first = ticks();
    if (s->stop_at) {
        if (ticks() >= s->stop_at)
            for (int i = 0; i < s->nqps; i++)
                if (s->limit[i] > s->posted[i] + 1) s->limit[i] = s->posted[i] + 1;
    }
    for (int i = 0; i < s->nqps; i++) {
        /* As perftest: fill the send queue (in chains of post_list), then poll. */
        for (;;) {
            uint64_t room = s->s_depth - (s->posted[i] - s->done[i]);
            uint64_t left = s->limit[i] - s->posted[i];
            uint64_t k = room < left ? room : left;
            if (k > (uint64_t)s->s_post_list) k = (uint64_t)s->s_post_list;
            if (!k || s->posted[i] - s->done[i] >= s->s_depth) break;
            struct ibv_send_wr *chain = &s->wrs[(size_t)i * (size_t)s->s_post_list];
            for (uint64_t j = 0; j < k; j++) {
                uint64_t count = s->posted[i] + j + 1;
                int signal = count == s->limit[i] || count % s->s_cq_mod == 0;
                chain[j].wr_id = ((uint64_t)i << QP_SHIFT) | count;
                chain[j].send_flags = (chain[j].send_flags & ~IBV_SEND_SIGNALED) |
                                      (signal ? IBV_SEND_SIGNALED : 0);
                chain[j].next = j + 1 < k ? &chain[j + 1] : NULL;
            }
            struct ibv_send_wr *bad = NULL;
            int rc = ibv_post_send(s->qps[i], chain, &bad);
            if (rc) return errno_failed(g, "ibv_post_send", rc);
            s->posted[i] += k;
        }
    }
    return DONE;
}

static int receiver_refill(Side *s, int i, Guard *g) {
    while (s->r_posted[i] < s->r_depth) {
        struct ibv_recv_wr *bad = NULL;
        s->rwr.wr_id = (uint64_t)i;
        int rc = ibv_post_recv(s->qps[i], &s->rwr, &bad);
        if (rc) return errno_failed(g, "ibv_post_recv", rc);
        s->r_posted[i]++;
    }
    return DONE;
}

/* arm_receiver(depth, expected=-1, source=None): keep `depth` receive WRs posted per QP into
 * the receive half and count SEND messages as they land. */
static PyObject *Side_arm_receiver(Side *s, PyObject *args) {
    unsigned depth;
    long long expected = -1;
    PyObject *source = Py_None;
    if (!PyArg_ParseTuple(args, "I|LO", &depth, &expected, &source)) return NULL;
    if (!side_usable(s)) return NULL;
    if (depth < 1 || depth > (unsigned)s->depth ||
        (source != Py_None && !PyObject_TypeCheck(source, &SideType))) {
        PyErr_Format(PyExc_ValueError, "arm_receiver: depth 1..%d, source a Side", s->depth);
        return NULL;
    }
    if (!s->r_posted) {         /* re-armed (warm-up, then the timed run): WRs stay posted */
        s->r_posted = calloc((size_t)s->nqps, sizeof(unsigned));
        if (!s->r_posted) return PyErr_NoMemory();
    }
    s->rsge = (struct ibv_sge){.addr = s->base + s->size, .length = (uint32_t)s->size,
                               .lkey = s->mr->lkey};
    s->rwr = (struct ibv_recv_wr){.sg_list = &s->rsge, .num_sge = 1};
    s->r_depth = depth > s->r_depth ? depth : s->r_depth;
    s->got = 0;
    s->expected = expected;
    Py_XSETREF(s->source, source == Py_None ? NULL : (Side *)Py_NewRef(source));
    Guard g;
    guard_init(&g, 0, -1, NULL, NULL);
    for (int i = 0; i < s->nqps; i++)
        if (receiver_refill(s, i, &g) != DONE) return outcome(FAIL, &g);
    s->r_armed = 1;
    Py_RETURN_NONE;
}

static PyObject *Side_set_expected(Side *s, PyObject *arg) {
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    s->expected = n;
    Py_RETURN_NONE;
}

static int receiver_finished(Side *s) {
    if (s->expected < 0 && s->source && s->source->s_armed && s->source->s_finished)
        s->expected = (int64_t)total_done(s->source);
    return s->expected >= 0 && s->got >= (uint64_t)s->expected;
}

static int side_poll(Side *s, Guard *g) {
    struct ibv_wc wc[POLL_BATCH];
    int n = ibv_poll_cq(s->cq, POLL_BATCH, wc);
    if (n < 0) return errno_failed(g, "ibv_poll_cq", -n);
    if (!n) return DONE;
    uint64_t t = ticks();
    for (int j = 0; j < n; j++) {
        if (wc[j].status != IBV_WC_SUCCESS) return wc_failed(g, &wc[j]);
        if (wc[j].opcode & IBV_WC_RECV) {
            int i = (int)wc[j].wr_id;
            if (!s->r_armed || i < 0 || i >= s->nqps) continue;
            s->got++;
            s->r_posted[i]--;
            if (receiver_refill(s, i, g) != DONE) return FAIL;
        } else if (s->s_armed) {
            int i = (int)(wc[j].wr_id >> QP_SHIFT);
            uint64_t count = wc[j].wr_id & ((1ULL << QP_SHIFT) - 1);
            if (i < 0 || i >= s->nqps) continue;
            if (count > s->done[i]) s->done[i] = count;
            s->t_last = t;
            stamp(s, t);
        }
    }
    if (s->s_armed) s->s_finished = sender_finished(s);
    return DONE;
}

static int parse_sides(PyObject *seq, Side **sides, int *n) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) < 1 || PyTuple_GET_SIZE(seq) > 2) {
        PyErr_SetString(PyExc_ValueError, "sides: a tuple of one or two Side objects");
        return 0;
    }
    *n = (int)PyTuple_GET_SIZE(seq);
    for (int i = 0; i < *n; i++) {
        PyObject *o = PyTuple_GET_ITEM(seq, i);
        if (!PyObject_TypeCheck(o, &SideType)) {
            PyErr_SetString(PyExc_TypeError, "sides: Side objects only");
            return 0;
        }
        sides[i] = (Side *)o;
        if (!side_usable(sides[i])) return 0;
    }
    if (*n == 2 && sides[0] == sides[1]) {
        PyErr_SetString(PyExc_ValueError, "sides: two different Side objects");
        return 0;
    }
    return 1;
}

static void set_busy(Side **sides, int n, int busy) {
    for (int i = 0; i < n; i++) sides[i]->busy = busy;
}

/* drive(sides, deadline_ns, watch_fd=-1, wait_receivers=True) -> DONE | WATCH
 * Post and poll for every armed sender and receiver of one or two sides until the senders
 * are done (and, with wait_receivers, every receiver has what it expects). */
static PyObject *drive(PyObject *self, PyObject *args) {
    PyObject *seq;
    long long deadline;
    int watch_fd = -1, wait_receivers = 1;
    if (!PyArg_ParseTuple(args, "OL|ip", &seq, &deadline, &watch_fd, &wait_receivers))
        return NULL;
    Side *sides[2] = {NULL, NULL};
    int n = 0;
    if (!parse_sides(seq, sides, &n)) return NULL;
    for (int i = 0; i < n; i++)
        if ((sides[i]->s_armed && sides[i]->stamps == NULL) ||
            (sides[i]->r_armed && sides[i]->r_posted == NULL)) {
            PyErr_SetString(Error, "drive: a side's state is incomplete");
            return NULL;
        }
    Guard g;
    guard_init(&g, deadline, watch_fd, sides[0], n > 1 ? sides[1] : NULL);
    int status = DONE;
    set_busy(sides, n, 1);
    Py_BEGIN_ALLOW_THREADS
    COUNT_START();
    for (;;) {
        int busy = 0;
        for (int i = 0; i < n && status == DONE; i++) {
            Side *s = sides[i];
            if (s->s_armed && !s->s_finished) {
                status = sender_step(s, &g);
                busy = 1;
            }
            if (wait_receivers && s->r_armed && !receiver_finished(s)) busy = 1;
            if (status == DONE) status = side_poll(s, &g);
        }
        if (status != DONE || !busy) break;
        status = guard_check(&g);
        if (status != DONE) break;
    }
    COUNT_STOP();
    Py_END_ALLOW_THREADS
    set_busy(sides, n, 0);
    return outcome(status, &g);
}

/* sender_result() -> (t_first_ns, t_last_ns, total_done, stamps bytes of int64 pairs) */
static PyObject *Side_sender_result(Side *s, PyObject *unused) {
    if (!s->s_armed) { PyErr_SetString(Error, "no sender armed"); return NULL; }
    int64_t *ns = malloc(s->nstamps * 2 * sizeof(int64_t) + 1);
    if (!ns) return PyErr_NoMemory();
    for (size_t i = 0; i < s->nstamps; i++) {
        ns[2 * i] = tick_as_ns((uint64_t)s->stamps[2 * i]);
        ns[2 * i + 1] = s->stamps[2 * i + 1];
    }
    PyObject *out = Py_BuildValue(
        "LLKy#", (long long)(s->t_first ? tick_as_ns(s->t_first) : 0),
        (long long)(s->t_last ? tick_as_ns(s->t_last) : 0), (unsigned long long)total_done(s),
        (const char *)ns, (Py_ssize_t)(s->nstamps * 2 * sizeof(int64_t)));
    free(ns);
    return out;
}

static PyObject *Side_get_got(Side *s, void *c) {
    return PyLong_FromUnsignedLongLong(s->got);
}
static PyObject *Side_get_sent(Side *s, void *c) {
    return PyLong_FromUnsignedLongLong(s->s_armed ? total_done(s) : 0);
}

/* ------------------------------------------------------------- latency ------------------ */

/* arm_pingpong(op_send, remote_addr, rkey, inline, sig_every=0): one side of a write or send
 * ping-pong. The message's last byte carries the round's marker; the far side spins on it
 * (write) or on a receive completion (send). sig_every 1 signals every post and waits for its
 * completion right after posting, as perftest's write ping-pong does; N > 1 signals every Nth
 * and reaps lazily (perftest's send ping-pong, cq_mod); 0 picks min(depth / 2, 8). */
static PyObject *Side_arm_pingpong(Side *s, PyObject *args) {
    int op_send, use_inline;
    unsigned long long raddr;
    unsigned long rkey;
    unsigned sig_every = 0;
    if (!PyArg_ParseTuple(args, "pKkp|I", &op_send, &raddr, &rkey, &use_inline, &sig_every))
        return NULL;
    if (!side_usable(s)) return NULL;
    if (!s->buf) { PyErr_SetString(Error, "ping-pong needs host memory"); return NULL; }
    if (s->depth < 2) { PyErr_SetString(PyExc_ValueError, "ping-pong needs depth >= 2"); return NULL; }
    s->psge = (struct ibv_sge){.addr = s->base, .length = (uint32_t)s->size,
                               .lkey = s->mr->lkey};
    s->pwr = (struct ibv_send_wr){.sg_list = &s->psge, .num_sge = 1,
                                  .opcode = op_send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE};
    s->pwr.send_flags = (use_inline && s->size <= s->inline_cap) ? IBV_SEND_INLINE : 0;
    if (!op_send) {
        s->pwr.wr.rdma.remote_addr = raddr;
        s->pwr.wr.rdma.rkey = (uint32_t)rkey;
    }
    s->p_send = op_send;
    s->p_posted = s->p_acked = s->p_waited = 0;
    unsigned lazy = (unsigned)(s->depth / 2 < 8 ? s->depth / 2 : 8);
    s->p_sig_every = sig_every == 0 ? lazy : (sig_every < lazy ? sig_every : lazy);
    s->buf[2 * s->size - 1] = 0;   /* the receive half's marker byte starts clear */
    if (op_send) {
        free(s->r_posted);
        s->r_posted = calloc((size_t)s->nqps, sizeof(unsigned));
        if (!s->r_posted) return PyErr_NoMemory();
        s->rsge = (struct ibv_sge){.addr = s->base + s->size, .length = (uint32_t)s->size,
                                   .lkey = s->mr->lkey};
        s->rwr = (struct ibv_recv_wr){.sg_list = &s->rsge, .num_sge = 1};
        s->r_depth = (unsigned)s->depth;
        s->got = 0;
        s->expected = -1;
        s->r_armed = 1;
        Guard g;
        guard_init(&g, 0, -1, NULL, NULL);
        if (receiver_refill(s, 0, &g) != DONE) return outcome(FAIL, &g);
    }
    s->p_armed = 1;
    Py_RETURN_NONE;
}

/* Reap send completions; with block, until the send queue has room again. */
static int pp_reap(Side *s, Guard *g, int block) {
    struct ibv_wc wc[POLL_BATCH];
    for (;;) {
        int n = ibv_poll_cq(s->cq, POLL_BATCH, wc);
        if (n < 0) return errno_failed(g, "ibv_poll_cq", -n);
        for (int j = 0; j < n; j++) {
            if (wc[j].status != IBV_WC_SUCCESS) return wc_failed(g, &wc[j]);
            if (wc[j].opcode & IBV_WC_RECV) {
                /* may be the next round's message already: counted, waited for later */
                s->got++;
                s->r_posted[0]--;
                if (receiver_refill(s, 0, g) != DONE) return FAIL;
            } else if (wc[j].wr_id > s->p_acked) {
                s->p_acked = wc[j].wr_id;
            }
        }
        if (!block || s->p_posted - s->p_acked < (uint64_t)s->depth - 1) return DONE;
        int st = guard_check(g);
        if (st != DONE) return st;
    }
}

static inline uint8_t marker_of(uint64_t i) { return (uint8_t)(i % 255 + 1); }

static int pp_post(Side *s, uint64_t round, Guard *g) {
    int st = pp_reap(s, g, 1);     /* room in the send queue (rarely waits) */
    if (st != DONE) return st;
    ((volatile char *)s->buf)[s->size - 1] = (char)marker_of(round);
    s->p_posted++;
    s->pwr.wr_id = s->p_posted;
    unsigned flags = s->pwr.send_flags & ~IBV_SEND_SIGNALED;
    if (s->p_posted % s->p_sig_every == 0) flags |= IBV_SEND_SIGNALED;
    s->pwr.send_flags = flags;
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(s->qps[0], &s->pwr, &bad);
    if (rc) return errno_failed(g, "ibv_post_send", rc);
    if (s->p_sig_every == 1)            /* perftest write_lat: this post's completion first */
        while (s->p_acked < s->p_posted) {
            if ((st = pp_reap(s, g, 0)) != DONE) return st;
            if (s->p_acked < s->p_posted && (st = guard_check(g)) != DONE) return st;
        }
    return DONE;
}

/* Wait for the far side's message of this round. */
static int pp_wait(Side *s, uint64_t round, Guard *g) {
    if (!s->p_send) {
        volatile char *mark = (volatile char *)s->buf + 2 * s->size - 1;
        char want = (char)marker_of(round);
        while (*mark != want) {
            int st = guard_check(g);
            if (st != DONE) return st;
        }
        return DONE;
    }
    while (s->got <= s->p_waited) {
        int st = pp_reap(s, g, 0);
        if (st != DONE) return st;
        if (s->got <= s->p_waited && (st = guard_check(g)) != DONE) return st;
    }
    s->p_waited++;
    return DONE;
}

static PyObject *samples_out(int status, Guard *g, int64_t *rtts, size_t n) {
    PyObject *res = outcome(status, g);
    if (!res) { free(rtts); return NULL; }
    Py_DECREF(res);
    PyObject *out = PyBytes_FromStringAndSize((const char *)rtts,
                                              (Py_ssize_t)(n * sizeof(int64_t)));
    free(rtts);
    return out;
}

static int grow(int64_t **rtts, size_t *cap, size_t n) {
    if (n < *cap) return 1;
    size_t next = *cap * 2;
    int64_t *p = realloc(*rtts, next * sizeof(int64_t));
    if (!p) return 0;
    *rtts = p;
    *cap = next;
    return 1;
}

/* Before a latency round: 1 if it is timed, 0 if warm-up, -1 when the samples cannot grow.
 * The first timed round of a duration run sets when it ends. */
static int round_start(uint64_t round, uint64_t warmup, long long duration, uint64_t *end,
                       int64_t **rtts, size_t *cap, size_t count, Guard *g) {
    if (round == warmup && duration > 0)
        *end = ticks() + (uint64_t)((double)duration / ns_per_tick);
    if (round < warmup) return 0;
    if (!grow(rtts, cap, count)) {
        snprintf(g->msg, sizeof g->msg, "out of memory for samples");
        return -1;
    }
    return 1;
}

/* pingpong(me, peer, warmup, iterations, duration_ns, deadline_ns, watch_fd=-1) -> bytes
 * Round-trip times in ns (int64). With peer (a Side, loopback) this thread plays the far
 * end too; with None the far end is another process. Each sample: post to reply seen. */
static PyObject *pingpong(PyObject *self, PyObject *args) {
    PyObject *me_o, *peer_o;
    unsigned long long warmup, iterations;
    long long duration, deadline;
    int watch_fd = -1;
    if (!PyArg_ParseTuple(args, "O!OKKLL|i", &SideType, &me_o, &peer_o, &warmup, &iterations,
                          &duration, &deadline, &watch_fd))
        return NULL;
    Side *sides[2] = {(Side *)me_o, peer_o == Py_None ? NULL : (Side *)peer_o};
    int n = sides[1] ? 2 : 1;
    if (sides[1] && !PyObject_TypeCheck(peer_o, &SideType)) {
        PyErr_SetString(PyExc_TypeError, "peer: a Side or None");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!side_usable(sides[i])) return NULL;
        if (!sides[i]->p_armed) { PyErr_SetString(Error, "ping-pong not armed"); return NULL; }
    }
    if (sides[0] == sides[1] || (iterations < 1 && duration <= 0) || iterations > (1ULL << 40) ||
        warmup > (1ULL << 40)) {
        PyErr_SetString(PyExc_ValueError, "pingpong: iterations 1..2^40 (or a duration), "
                                          "warmup 0..2^40, two different sides");
        return NULL;
    }
    size_t cap = duration > 0 ? 65536 : (size_t)iterations;
    int64_t *rtts = malloc(cap * sizeof(int64_t));
    if (!rtts) return PyErr_NoMemory();
    Side *me = sides[0], *peer = sides[1];
    Guard g;
    guard_init(&g, deadline, watch_fd, me, peer);
    int status = DONE;
    size_t count = 0;
    set_busy(sides, n, 1);
    Py_BEGIN_ALLOW_THREADS
    COUNT_START();
    uint64_t end = 0;
    for (uint64_t round = 0;; round++) {
        int timed = round_start(round, warmup, duration, &end, &rtts, &cap, count, &g);
        if (timed < 0) { status = FAIL; break; }
        uint64_t t0 = ticks();
        status = pp_post(me, round, &g);
        if (status == DONE && peer) status = pp_wait(peer, round, &g);
        if (status == DONE && peer) status = pp_post(peer, round, &g);
        if (status == DONE) status = pp_wait(me, round, &g);
        uint64_t t1 = ticks();
        if (status != DONE) break;
        if (timed) {
            rtts[count++] = ticks_ns(t1 - t0);
            if (duration > 0 ? t1 >= end : count >= iterations) break;
        }
        if ((status = pp_reap(me, &g, 0)) != DONE) break;        /* outside the timing */
        if (peer && (status = pp_reap(peer, &g, 0)) != DONE) break;
    }
    COUNT_STOP();
    Py_END_ALLOW_THREADS
    set_busy(sides, n, 0);
    if (status == WATCH) {      /* the client never expects its control channel to speak */
        status = FAIL;
        snprintf(g.msg, sizeof g.msg, "the peer spoke or hung up on the control connection "
                                      "mid-run");
    }
    return samples_out(status, &g, rtts, count);
}

/* pingpong_serve(me, first_round, deadline_ns, watch_fd) -> the next round to serve
 * The far end of a ping-pong: wait for round i, answer it; returns when watch_fd becomes
 * readable (the client says it is done) or raises on the deadline or an error. Call again
 * with the round it returned to go on. */
static PyObject *pingpong_serve(PyObject *self, PyObject *args) {
    Side *me;
    unsigned long long first;
    long long deadline;
    int watch_fd;
    if (!PyArg_ParseTuple(args, "O!KLi", &SideType, &me, &first, &deadline, &watch_fd))
        return NULL;
    if (!side_usable(me)) return NULL;
    if (!me->p_armed) { PyErr_SetString(Error, "ping-pong not armed"); return NULL; }
    Guard g;
    guard_init(&g, deadline, watch_fd, me, NULL);
    int status = DONE;
    uint64_t round = first;
    me->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    COUNT_START();
    for (;; round++) {
        status = pp_wait(me, round, &g);
        if (status == DONE) status = pp_post(me, round, &g);
        if (status == DONE) status = pp_reap(me, &g, 0);
        if (status != DONE) break;
    }
    COUNT_STOP();
    Py_END_ALLOW_THREADS
    me->busy = 0;
    PyObject *res = outcome(status, &g);
    if (!res) return NULL;
    Py_DECREF(res);
    return PyLong_FromUnsignedLongLong(round);
}

/* read_latency(side, remote_addr, rkey, warmup, iterations, duration_ns, deadline_ns,
 *              watch_fd=-1) -> bytes of int64 ns: one RDMA READ posted and completed at a
 * time, the full round trip (ib_read_lat). */
static PyObject *read_latency(PyObject *self, PyObject *args) {
    Side *s;
    unsigned long long raddr, warmup, iterations;
    unsigned long rkey;
    long long duration, deadline;
    int watch_fd = -1;
    if (!PyArg_ParseTuple(args, "O!KkKKLL|i", &SideType, &s, &raddr, &rkey, &warmup,
                          &iterations, &duration, &deadline, &watch_fd))
        return NULL;
    if (!side_usable(s)) return NULL;
    if ((iterations < 1 && duration <= 0) || iterations > (1ULL << 40) || warmup > (1ULL << 40)) {
        PyErr_SetString(PyExc_ValueError, "read_latency: iterations 1..2^40, warmup 0..2^40");
        return NULL;
    }
    size_t cap = duration > 0 ? 65536 : (size_t)iterations;
    int64_t *rtts = malloc(cap * sizeof(int64_t));
    if (!rtts) return PyErr_NoMemory();
    struct ibv_sge sge = {.addr = s->base + s->size, .length = (uint32_t)s->size,
                          .lkey = s->mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
                             .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = (uint32_t)rkey;
    Guard g;
    guard_init(&g, deadline, watch_fd, s, NULL);
    int status = DONE;
    size_t count = 0;
    s->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    COUNT_START();
    uint64_t end = 0;
    struct ibv_wc wc;
    for (uint64_t round = 0;; round++) {
        int timed = round_start(round, warmup, duration, &end, &rtts, &cap, count, &g);
        if (timed < 0) { status = FAIL; break; }
        struct ibv_send_wr *bad = NULL;
        uint64_t t0 = ticks();
        int rc = ibv_post_send(s->qps[0], &wr, &bad);
        if (rc) { status = errno_failed(&g, "ibv_post_send", rc); break; }
        int got;
        while ((got = ibv_poll_cq(s->cq, 1, &wc)) == 0)
            if ((status = guard_check(&g)) != DONE) break;
        uint64_t t1 = ticks();
        if (status != DONE) break;
        if (got < 0) { status = errno_failed(&g, "ibv_poll_cq", -got); break; }
        if (wc.status != IBV_WC_SUCCESS) { status = wc_failed(&g, &wc); break; }
        if (timed) {
            rtts[count++] = ticks_ns(t1 - t0);
            if (duration > 0 ? t1 >= end : count >= iterations) break;
        }
    }
    COUNT_STOP();
    Py_END_ALLOW_THREADS
    s->busy = 0;
    if (status == WATCH) {
        status = FAIL;
        snprintf(g.msg, sizeof g.msg, "the peer spoke or hung up on the control connection "
                                      "mid-run");
    }
    return samples_out(status, &g, rtts, count);
}

/* ------------------------------------------------------------- module ------------------- */

static PyMethodDef Side_methods[] = {
    {"connect", (PyCFunction)Side_connect, METH_VARARGS, "INIT -> RTR -> RTS"},
    {"write", (PyCFunction)Side_write, METH_VARARGS, "write(offset, data) into host memory"},
    {"read", (PyCFunction)Side_read, METH_VARARGS, "read(offset, length) -> bytes"},
    {"cancel", (PyCFunction)Side_cancel, METH_NOARGS, "stop a running loop (any thread)"},
    {"close", (PyCFunction)Side_close, METH_NOARGS, "release QPs, CQ, MR, PD, context"},
    {"arm_sender", (PyCFunction)Side_arm_sender, METH_VARARGS, "set up a bandwidth sender"},
    {"arm_receiver", (PyCFunction)Side_arm_receiver, METH_VARARGS, "post receives, count"},
    {"set_expected", (PyCFunction)Side_set_expected, METH_O, "messages the receiver awaits"},
    {"sender_result", (PyCFunction)Side_sender_result, METH_NOARGS, "timing of the sender"},
    {"arm_pingpong", (PyCFunction)Side_arm_pingpong, METH_VARARGS, "set up a ping-pong"},
    {NULL}};

static PyGetSetDef Side_getset[] = {
    {"qp_nums", (getter)Side_get_qp_nums, NULL, "QP numbers", NULL},
    {"rkey", (getter)Side_get_rkey, NULL, "the MR's rkey", NULL},
    {"base", (getter)Side_get_base, NULL, "address of the source half in WRs", NULL},
    {"inline_cap", (getter)Side_get_inline, NULL, "max_inline_data the QPs got", NULL},
    {"got", (getter)Side_get_got, NULL, "SEND messages received", NULL},
    {"sent", (getter)Side_get_sent, NULL, "WRs the sender completed", NULL},
    {NULL}};

static PyTypeObject SideType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "netbench.benchmarks.rdma._verbsloop.Side",
    .tp_basicsize = sizeof(Side),
    .tp_dealloc = (destructor)Side_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One end: PD, MR, CQ and RC QPs on an RDMA device, for the compiled loops",
    .tp_methods = Side_methods,
    .tp_getset = Side_getset,
    .tp_init = (initproc)Side_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *py_now_ns(PyObject *self, PyObject *unused) {
    return PyLong_FromLongLong(now_ns());
}

/* count_dump(label): callgrind writes what it counted since the last dump (here: the loops
 * alone) to a file of its own, labelled, and starts again from zero; a counting script calls it
 * between runs, so one process under valgrind counts several runs (bench/instructions_per_op.py).
 * A no-op outside valgrind, or in a build without valgrind's header (COUNTABLE 0). */
static PyObject *count_dump(PyObject *self, PyObject *args) {
    const char *label;
    if (!PyArg_ParseTuple(args, "s", &label)) return NULL;
    COUNT_DUMP(label);
    Py_RETURN_NONE;
}

/* count_instrument(on): callgrind instruments from here on (or stops), every thread: what a
 * counting script uses around a whole run of the pyverbs plane, whose per-operation work is
 * Python (run with collection on from the start, and no compiled loop in that process). */
static PyObject *count_instrument(PyObject *self, PyObject *args) {
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
#if COUNTABLE
    if (on) CALLGRIND_START_INSTRUMENTATION;
    else CALLGRIND_STOP_INSTRUMENTATION;
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"drive", drive, METH_VARARGS, "bandwidth loop over one or two sides"},
    {"pingpong", pingpong, METH_VARARGS, "write/send ping-pong, RTTs in ns"},
    {"pingpong_serve", pingpong_serve, METH_VARARGS, "the far end of a ping-pong"},
    {"read_latency", read_latency, METH_VARARGS, "RDMA READ latency, RTTs in ns"},
    {"now_ns", py_now_ns, METH_NOARGS, "CLOCK_MONOTONIC in ns (the loops' clock)"},
    {"count_dump", count_dump, METH_VARARGS, "callgrind: dump the loops' count, labelled"},
    {"count_instrument", count_instrument, METH_VARARGS, "callgrind: instrument on or off"},
    {NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_verbsloop", "the RDMA data plane in C (libibverbs)", -1, methods,
};

PyMODINIT_FUNC PyInit__verbsloop(void) {
    if (PyType_Ready(&SideType) < 0) return NULL;
    calibrate();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *tick = PyFloat_FromDouble(ns_per_tick);
    Error = PyErr_NewException("netbench.benchmarks.rdma._verbsloop.Error", PyExc_RuntimeError, NULL);
    CancelledError = PyErr_NewException("netbench.benchmarks.rdma._verbsloop.Cancelled", Error, NULL);
    TimeoutError_ = PyErr_NewException("netbench.benchmarks.rdma._verbsloop.Timeout", Error, NULL);
    if (!Error || !CancelledError || !TimeoutError_ ||
        PyModule_AddObjectRef(m, "Error", Error) < 0 ||
        PyModule_AddObjectRef(m, "Cancelled", CancelledError) < 0 ||
        PyModule_AddObjectRef(m, "Timeout", TimeoutError_) < 0 ||
        PyModule_AddObjectRef(m, "Side", (PyObject *)&SideType) < 0 ||
        PyModule_AddIntConstant(m, "DONE", DONE) < 0 ||
        PyModule_AddIntConstant(m, "WATCH", WATCH) < 0 ||
        PyModule_AddIntConstant(m, "COUNTABLE", COUNTABLE) < 0 ||
        PyModule_AddIntConstant(m, "WR_RDMA_WRITE", IBV_WR_RDMA_WRITE) < 0 ||
        PyModule_AddIntConstant(m, "WR_RDMA_READ", IBV_WR_RDMA_READ) < 0 ||
        PyModule_AddIntConstant(m, "WR_SEND", IBV_WR_SEND) < 0 ||
        PyModule_AddStringConstant(m, "TIMER", TIMER_NAME) < 0 ||
        !tick || PyModule_AddObjectRef(m, "NS_PER_TICK", tick) < 0) {
        Py_XDECREF(tick);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(tick);
    return m;
}
