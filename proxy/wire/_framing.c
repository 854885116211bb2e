/*
 * proxy.wire._framing: the C build of framing.Relay, the hot path of the proxy, and of
 * splitter.py_scan_plain, the hot path of the client's direction.
 *
 * Same behaviour as the pure-Python `Relay` in framing.py, which is the reference and is tested
 * against this one (tests/unit/test_framing.py runs every case on both). A relay watches one
 * direction of a connection go by: it walks message headers across chunks without copying
 * bodies, keeps the few facts the session needs, and hands each chunk, unchanged, to `write`.
 * When a length is impossible it calls `on_violation(message)` instead and stops relaying.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_scan.h"

typedef struct {
    PyObject_HEAD
    PyObject *write;
    PyObject *on_violation;
    Py_ssize_t skip;          /* bytes of the current message's body still to come */
    unsigned char head[5];    /* a message header split across chunks */
    int head_len;
    Py_ssize_t status_at;     /* where in the next chunk a split ReadyForQuery's status is, or -1 */
    int last_type;            /* type byte of the last message whose header was seen, or 0 */
    int status;               /* status byte of the last ReadyForQuery */
    unsigned long long ready_count; /* ReadyForQuery headers seen */
    unsigned long long message_count; /* message headers seen (pgnl's metrics) */
    unsigned long long byte_count;    /* bytes fed (pgnl's metrics) */
    int terminated;           /* a Terminate ('X') went by */
    int broken;               /* a violation was reported: relay nothing more */
    unsigned long max_length;
} Relay;

static int
Relay_init(Relay *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"write", "on_violation", "max_length", NULL};
    PyObject *write, *on_violation;
    unsigned long max_length = 0x3FFFFFFEUL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|k", kwlist, &write, &on_violation,
                                     &max_length))
        return -1;
    Py_INCREF(write);
    Py_XSETREF(self->write, write);
    Py_INCREF(on_violation);
    Py_XSETREF(self->on_violation, on_violation);
    self->skip = 0;
    self->head_len = 0;
    self->status_at = -1;
    self->last_type = 0;
    self->status = 'I';
    self->ready_count = 0;
    self->message_count = 0;
    self->byte_count = 0;
    self->terminated = 0;
    self->broken = 0;
    self->max_length = max_length;
    return 0;
}

static int
Relay_traverse(Relay *self, visitproc visit, void *arg)
{
    Py_VISIT(self->write);
    Py_VISIT(self->on_violation);
    return 0;
}

static int
Relay_clear(Relay *self)
{
    Py_CLEAR(self->write);
    Py_CLEAR(self->on_violation);
    return 0;
}

static void
Relay_dealloc(Relay *self)
{
    PyObject_GC_UnTrack(self);
    Relay_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Report an impossible length: stop relaying, tell the session. Returns the callback's result. */
static PyObject *
violation(Relay *self, int kind, unsigned long length)
{
    self->broken = 1;
    char repr[16];
    if (kind > 32 && kind < 127 && kind != '\'' && kind != '\\')
        snprintf(repr, sizeof repr, "'%c'", kind);
    else
        snprintf(repr, sizeof repr, "0x%02x", kind);
    PyObject *message = PyUnicode_FromFormat(
        "invalid message length %lu for message type %s", length, repr);
    if (message == NULL)
        return NULL;
    PyObject *result = PyObject_CallOneArg(self->on_violation, message);
    Py_DECREF(message);
    return result;
}

static void
note_type(Relay *self, const unsigned char *buf, Py_ssize_t n, int kind, Py_ssize_t body)
{
    self->last_type = kind;
    self->message_count++;
    if (kind == 'Z') {
        self->ready_count++;
        if (body < n)
            self->status = buf[body];
        else
            self->status_at = body - n;
    }
    else if (kind == 'X') {
        self->terminated = 1;
    }
}

static PyObject *
Relay_feed(Relay *self, PyObject *data)
{
    if (self->broken)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len;
    Py_ssize_t pos = self->skip;
    self->byte_count += (unsigned long long)n;

    if (pos >= n && self->head_len == 0 && self->status_at < 0) {
        self->skip = pos - n;  /* the chunk lies inside one long message */
        goto forward;
    }
    if (self->status_at >= 0) {
        if (self->status_at < n) {
            self->status = buf[self->status_at];
            self->status_at = -1;
        }
        else {
            self->status_at -= n;
        }
    }
    if (self->head_len > 0) {
        Py_ssize_t need = 5 - self->head_len;
        Py_ssize_t take = need < n ? need : n;
        memcpy(self->head + self->head_len, buf, (size_t)take);
        self->head_len += (int)take;
        if (self->head_len < 5) {
            self->skip = 0;
            goto forward;
        }
        self->head_len = 0;
        int kind = self->head[0];
        unsigned long length = be32(self->head + 1);
        if (length < 4 || length > self->max_length) {
            PyBuffer_Release(&view);
            return violation(self, kind, length);
        }
        note_type(self, buf, n, kind, need);
        pos = need + (Py_ssize_t)length - 4;
    }
    while (pos < n) {
        if (n - pos < 5) {
            memcpy(self->head, buf + pos, (size_t)(n - pos));
            self->head_len = (int)(n - pos);
            pos = n;
            break;
        }
        int kind = buf[pos];
        unsigned long length = be32(buf + pos + 1);
        if (length < 4 || length > self->max_length) {
            PyBuffer_Release(&view);
            return violation(self, kind, length);
        }
        note_type(self, buf, n, kind, pos + 5);
        pos += 1 + (Py_ssize_t)length;
    }
    self->skip = pos - n;

forward:
    PyBuffer_Release(&view);
    return PyObject_CallOneArg(self->write, data);
}

static PyObject *
Relay_get_at_boundary(Relay *self, void *closure)
{
    return PyBool_FromLong(self->skip == 0 && self->head_len == 0);
}

static PyObject *
Relay_get_write(Relay *self, void *closure)
{
    return Py_NewRef(self->write);
}

static int
Relay_set_write(Relay *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete write");
        return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(self->write, value);
    return 0;
}

static PyObject *
Relay_get_int(Relay *self, void *closure)
{
    return PyLong_FromLong(*(int *)((char *)self + (Py_ssize_t)closure));
}

static int
Relay_set_int(Relay *self, PyObject *value, void *closure)
{
    long v = value == NULL ? -1 : PyLong_AsLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *(int *)((char *)self + (Py_ssize_t)closure) = (int)v;
    return 0;
}

static PyObject *
Relay_get_ready_count(Relay *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->ready_count);
}

static PyObject *
Relay_get_u64(Relay *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(
        *(unsigned long long *)((char *)self + (Py_ssize_t)closure));
}

static PyObject *
Relay_get_bool(Relay *self, void *closure)
{
    return PyBool_FromLong(*(int *)((char *)self + (Py_ssize_t)closure));
}

static PyGetSetDef Relay_getset[] = {
    {"at_boundary", (getter)Relay_get_at_boundary, NULL,
     "True when every message begun so far has been seen whole.", NULL},
    {"write", (getter)Relay_get_write, (setter)Relay_set_write,
     "Where chunks go (the other side's transport.write).", NULL},
    {"last_type", (getter)Relay_get_int, (setter)Relay_set_int,
     "Type byte of the last message whose header was seen.",
     (void *)offsetof(Relay, last_type)},
    {"status", (getter)Relay_get_int, (setter)Relay_set_int,
     "Status byte of the last ReadyForQuery.", (void *)offsetof(Relay, status)},
    {"ready_count", (getter)Relay_get_ready_count, NULL,
     "ReadyForQuery messages whose header was seen.", NULL},
    {"message_count", (getter)Relay_get_u64, NULL, "Messages whose header was seen.",
     (void *)offsetof(Relay, message_count)},
    {"byte_count", (getter)Relay_get_u64, NULL, "Bytes fed (relayed or not).",
     (void *)offsetof(Relay, byte_count)},
    {"terminated", (getter)Relay_get_bool, NULL, "A Terminate message went by.",
     (void *)offsetof(Relay, terminated)},
    {"broken", (getter)Relay_get_bool, NULL, "A violation was reported; nothing is relayed.",
     (void *)offsetof(Relay, broken)},
    {NULL}
};

/* The state the native relay (proxy._relay_loop) carries on from, and hands back. */
static PyObject *
Relay_export(Relay *self, PyObject *unused)
{
    return Py_BuildValue("(Ly#LiiKKKi)", (long long)self->skip, (const char *)self->head,
                         (Py_ssize_t)self->head_len, (long long)self->status_at, self->last_type,
                         self->status, self->ready_count, self->message_count, self->byte_count,
                         self->terminated);
}

static PyObject *
Relay_load(Relay *self, PyObject *state)
{
    long long skip, status_at;
    const char *head;
    Py_ssize_t head_len;
    int last_type, status, terminated;
    unsigned long long ready_count, message_count, byte_count;
    if (!PyArg_ParseTuple(state, "Ly#LiiKKKp", &skip, &head, &head_len, &status_at, &last_type,
                          &status, &ready_count, &message_count, &byte_count, &terminated))
        return NULL;
    if (head_len > 4) {
        PyErr_SetString(PyExc_ValueError, "a split header is at most 4 bytes");
        return NULL;
    }
    self->skip = (Py_ssize_t)skip;
    memcpy(self->head, head, (size_t)head_len);
    self->head_len = (int)head_len;
    self->status_at = (Py_ssize_t)status_at;
    self->last_type = last_type;
    self->status = status;
    self->ready_count = ready_count;
    self->message_count = message_count;
    self->byte_count = byte_count;
    self->terminated = terminated;
    Py_RETURN_NONE;
}

static PyMethodDef Relay_methods[] = {
    {"feed", (PyCFunction)Relay_feed, METH_O,
     "Account for one chunk and pass it to write, or report a violation."},
    {"export", (PyCFunction)Relay_export, METH_NOARGS,
     "The walk's state, as a tuple the native relay and load() take."},
    {"load", (PyCFunction)Relay_load, METH_O, "Go on from a state export() gave."},
    {NULL}
};

static PyTypeObject RelayType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "proxy.wire._framing.Relay",
    .tp_doc = "One direction of a relayed connection (C build of proxy.wire.framing.Relay).",
    .tp_basicsize = sizeof(Relay),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Relay_init,
    .tp_dealloc = (destructor)Relay_dealloc,
    .tp_traverse = (traverseproc)Relay_traverse,
    .tp_clear = (inquiry)Relay_clear,
    .tp_methods = Relay_methods,
    .tp_getset = Relay_getset,
};

/* ---------------------------------------------------------------- splitter.scan_plain */

#define SMALL_LIMIT 10000UL

/* Same as splitter.py_scan_plain (the reference, tested against this). */
static PyObject *
scan_plain(PyObject *module, PyObject *args)
{
    Py_buffer view;
    long long in_run;
    int last_other;
    int names;
    if (!PyArg_ParseTuple(args, "y*Lip", &view, &in_run, &last_other, &names))
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len;
    Py_ssize_t pos = 0;
    long long syncs = 0;
    long long messages = 0;
    int open_batch = 0;
    int plain = 1;
    while (n - pos >= 5) {
        int kind = p[pos];
        unsigned long length = be32(p + pos + 1);
        if (length < 4 || length > SMALL_LIMIT || (Py_ssize_t)length > n - pos - 1) {
            plain = 0;
            break;
        }
        Py_ssize_t end = pos + 1 + (Py_ssize_t)length;
        if (kind == 'S') {
            syncs++;
            in_run++;
            open_batch = 0;
        }
        else if (kind == 'P' || kind == 'B' || kind == 'D' || kind == 'E' || kind == 'C') {
            if (names) {
                plain = 0;
                break;
            }
            if (kind == 'P') {
                const unsigned char *nul = memchr(p + pos + 5, 0, (size_t)(end - pos - 5));
                if (nul == NULL || might_be_directive(p, nul - p + 1, end - 3)) {
                    plain = 0;
                    break;
                }
            }
            open_batch = 1;
            in_run = 0;
            last_other = kind;
        }
        else if (kind == 'Q') {
            if (open_batch || names || might_be_directive(p, pos + 5, end - 1)) {
                plain = 0;
                break;
            }
            syncs++;
            in_run = 0;
            last_other = kind;
        }
        else {
            plain = 0;
            break;
        }
        messages++;
        pos = end;
    }
    PyBuffer_Release(&view);
    if (!plain || pos != n || open_batch)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLiL)", syncs, in_run, last_other, messages);
}

static PyMethodDef framing_functions[] = {
    {"scan_plain", (PyCFunction)scan_plain, METH_VARARGS,
     "scan_plain(data, in_run, last_other, names): see splitter.py_scan_plain."},
    {NULL}
};

static struct PyModuleDef framing_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "proxy.wire._framing",
    .m_doc = "C build of proxy.wire.framing.Relay and proxy.wire.splitter.py_scan_plain.",
    .m_size = -1,
    .m_methods = framing_functions,
};

PyMODINIT_FUNC
PyInit__framing(void)
{
    if (PyType_Ready(&RelayType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&framing_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "Relay", (PyObject *)&RelayType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
