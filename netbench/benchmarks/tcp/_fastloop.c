/* Timed socket loops in C, so the instrument adds no interpreter overhead to what it measures.
 *
 * A Python request/response loop costs ~1-2 us per round trip on top of the kernel path, which
 * is 15-30% of a loopback TCP round trip: enough to make netbench disagree with sockperf. These
 * loops run with the GIL released; cancellation works as for Python code (another thread shuts
 * the socket down, the loop sees EOF or an error and returns).
 *
 * rr_client(fd, size, iterations, warmup, duration_ns) -> (bytes of int64 RTTs in ns, elapsed_ns)
 *     warmup untimed round trips, then `iterations` timed ones, or as many as fit in
 *     duration_ns when it is > 0. Raises OSError, or ConnectionError on EOF.
 * rr_echo(fd, size) -> int
 *     echo size-byte messages until the peer shuts down its side; returns the count.
 * stream_send(fd, payload, stop_at_ns) -> int
 *     send payload again and again until CLOCK_MONOTONIC (Python's time.monotonic) reaches
 *     stop_at_ns; returns the bytes sent. Raises OSError.
 * stream_recv(fd, buffer, counter) -> int
 *     receive into buffer until EOF, storing the running total in counter[0] (an int64
 *     buffer a sampler thread reads while this runs); returns the total. Raises OSError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define END_OF_STREAM (-1)

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* 0 on success, else an errno value. */
static int send_all(int fd, const char *buf, size_t n) {
    size_t off = 0;
    while (off < n) {
        ssize_t r = send(fd, buf + off, n - off, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        off += (size_t)r;
    }
    return 0;
}

/* 0 on success, END_OF_STREAM on EOF, else an errno value. */
static int recv_all(int fd, char *buf, size_t n) {
    size_t off = 0;
    while (off < n) {
        ssize_t r = recv(fd, buf + off, n - off, 0);
        if (r == 0) return END_OF_STREAM;
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        off += (size_t)r;
    }
    return 0;
}

static PyObject *raise_status(int status) {
    if (status == END_OF_STREAM) {
        PyErr_SetString(PyExc_ConnectionError, "peer closed the connection");
    } else if (status == ENOMEM) {
        PyErr_NoMemory();
    } else {
        errno = status;
        PyErr_SetFromErrno(PyExc_OSError);
    }
    return NULL;
}

static PyObject *rr_client(PyObject *self, PyObject *args) {
    int fd;
    Py_ssize_t size, iterations, warmup;
    long long duration_ns;
    if (!PyArg_ParseTuple(args, "innnL", &fd, &size, &iterations, &warmup, &duration_ns))
        return NULL;
    if (size <= 0 || iterations < 0 || warmup < 0) {
        PyErr_SetString(PyExc_ValueError, "size must be > 0, counts >= 0");
        return NULL;
    }
    char *msg = malloc((size_t)size);
    size_t capacity = duration_ns > 0 ? 1u << 16 : (size_t)(iterations ? iterations : 1);
    int64_t *rtts = malloc(capacity * sizeof(int64_t));
    if (!msg || !rtts) {
        free(msg);
        free(rtts);
        return PyErr_NoMemory();
    }
    memset(msg, 0x5a, (size_t)size);
    size_t count = 0;
    int status = 0;
    int64_t start = 0, end = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < warmup && !status; i++) {
        status = send_all(fd, msg, (size_t)size);
        if (!status) status = recv_all(fd, msg, (size_t)size);
    }
    start = now_ns();
    int64_t stop_at = duration_ns > 0 ? start + duration_ns : 0;
    while (!status) {
        int64_t t0 = now_ns();
        status = send_all(fd, msg, (size_t)size);
        if (!status) status = recv_all(fd, msg, (size_t)size);
        if (status) break;
        int64_t t1 = now_ns();
        if (count == capacity) {
            int64_t *grown = realloc(rtts, 2 * capacity * sizeof(int64_t));
            if (!grown) { status = ENOMEM; break; }
            rtts = grown;
            capacity *= 2;
        }
        rtts[count++] = t1 - t0;
        if (stop_at ? t1 >= stop_at : count >= (size_t)iterations) break;
    }
    end = now_ns();
    Py_END_ALLOW_THREADS
    free(msg);
    if (status) {
        free(rtts);
        return raise_status(status);
    }
    PyObject *data = PyBytes_FromStringAndSize((const char *)rtts,
                                               (Py_ssize_t)(count * sizeof(int64_t)));
    free(rtts);
    if (!data) return NULL;
    return Py_BuildValue("(NL)", data, (long long)(end - start));
}

static PyObject *rr_echo(PyObject *self, PyObject *args) {
    int fd;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "in", &fd, &size)) return NULL;
    if (size <= 0) {
        PyErr_SetString(PyExc_ValueError, "size must be > 0");
        return NULL;
    }
    char *msg = malloc((size_t)size);
    if (!msg) return PyErr_NoMemory();
    long long count = 0;
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        status = recv_all(fd, msg, (size_t)size);
        if (status) break;
        status = send_all(fd, msg, (size_t)size);
        if (status) break;
        count++;
    }
    Py_END_ALLOW_THREADS
    free(msg);
    if (status != END_OF_STREAM) return raise_status(status);
    return PyLong_FromLongLong(count);
}

/* A stream loop's failure is always an OSError (ENOMEM from the socket included), which the
 * caller turns into the peer's or the link's error. */
static PyObject *raise_os(int status) {
    errno = status;
    return PyErr_SetFromErrno(PyExc_OSError);
}

static PyObject *stream_send(PyObject *self, PyObject *args) {
    int fd;
    Py_buffer payload;
    long long stop_at;
    if (!PyArg_ParseTuple(args, "iy*L", &fd, &payload, &stop_at)) return NULL;
    if (payload.len <= 0) {
        PyBuffer_Release(&payload);
        PyErr_SetString(PyExc_ValueError, "payload must not be empty");
        return NULL;
    }
    long long sent = 0;
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
    while (now_ns() < stop_at) {
        status = send_all(fd, payload.buf, (size_t)payload.len);
        if (status) break;
        sent += payload.len;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&payload);
    if (status) return raise_os(status);
    return PyLong_FromLongLong(sent);
}

static PyObject *stream_recv(PyObject *self, PyObject *args) {
    int fd;
    Py_buffer buf, counter;
    if (!PyArg_ParseTuple(args, "iw*w*", &fd, &buf, &counter)) return NULL;
    if (buf.len <= 0 || counter.len < (Py_ssize_t)sizeof(int64_t) ||
            ((uintptr_t)counter.buf % sizeof(int64_t))) {
        PyBuffer_Release(&buf);
        PyBuffer_Release(&counter);
        PyErr_SetString(PyExc_ValueError, "need a non-empty buffer and an aligned int64 counter");
        return NULL;
    }
    int64_t *count = (int64_t *)counter.buf;
    int64_t total = 0;
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        ssize_t r = recv(fd, buf.buf, (size_t)buf.len, 0);
        if (r == 0) break;
        if (r < 0) {
            if (errno == EINTR) continue;
            status = errno;
            break;
        }
        total += r;
        __atomic_store_n(count, total, __ATOMIC_RELAXED);    /* whole, for the sampler */
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&counter);
    if (status) return raise_os(status);
    return PyLong_FromLongLong((long long)total);
}

static PyMethodDef methods[] = {
    {"rr_client", rr_client, METH_VARARGS, "timed request/response loop (client side)"},
    {"rr_echo", rr_echo, METH_VARARGS, "echo fixed-size messages until EOF"},
    {"stream_send", stream_send, METH_VARARGS, "send a payload until a monotonic deadline"},
    {"stream_recv", stream_recv, METH_VARARGS, "receive until EOF, counting into counter[0]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastloop", "timed socket loops in C", -1, methods,
};

PyMODINIT_FUNC PyInit__fastloop(void) { return PyModule_Create(&module); }
