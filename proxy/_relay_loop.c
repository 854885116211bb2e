/*
 * proxy._relay_loop: the native relay. Connections that are authenticated and in plain
 * pass-through are relayed here, by one thread of its own running an epoll loop outside the GIL,
 * with no Python per message. A connection comes back to Python (`proxy.native_relay`) when it
 * must: a unit of the client's that the session has to see (a Query or Parse that may be a
 * directive, COPY, FunctionCall, Terminate, a length PostgreSQL refuses), an impossible length
 * from the server, either side closing or failing, or Python asking for it back.
 *
 * The rules are those of the Python path, which stays the reference and is tested against this:
 * - client to server, those of `splitter.FrontendSplitter`'s hot path (`py_scan_plain`): whole
 *   Queries and whole extended-protocol batches (Parse/Bind/Describe/Execute/Close up to their
 *   Sync or Flush) go on, in one write a read; a batch is held until its Sync or Flush, so that
 *   a batch that turns out to need the session is handed over whole;
 * - server to client, those of `framing.Relay`: chunks go on as they came, message headers are
 *   walked across chunks to keep the facts the session needs (ReadyForQuery count and status,
 *   last message type).
 * The connection's state is carried in and out as tuples (`Relay.export`, `FrontendSplitter`'s
 * `native_state`), so that either path can go on where the other stopped.
 *
 * Memory: a connection costs its struct; buffers exist only while bytes wait (a unit not yet
 * whole, or a peer that does not read). Reading from one side stops while the other side's
 * output waits (backpressure, as the asyncio path does).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/_scan.h"

#define READ_SIZE (256 * 1024)
#define UNIT_MAX (1024 * 1024)  /* a client unit held longer than this goes to Python */
#define SMALL_LIMIT 10000UL     /* PostgreSQL's PQ_SMALL_MESSAGE_LIMIT */
#define MAX_EVENTS 128

enum reason {
    R_NONE = 0,
    R_CLIENT_UNIT = 1,   /* the client sent something the session must see */
    R_SERVER_UNIT = 2,   /* the server sent an impossible length */
    R_CLIENT_CLOSED = 3, /* end of stream or an error on the client's socket */
    R_SERVER_CLOSED = 4, /* the same on the server's */
    R_ASKED = 5,         /* Python asked for the connection back */
    R_STOPPED = 6,       /* the loop is shutting down */
};

typedef struct {
    unsigned char *data;
    size_t len, cap;
} buf;

/* The server direction's walker: framing.Relay's state. */
typedef struct {
    long long skip;
    unsigned char head[5];
    int head_len;
    long long status_at;
    int last_type;
    int status;
    unsigned long long ready_count, messages, bytes;
    int terminated;
} server_state;

/* The client direction's counters: FrontendSplitter's. */
typedef struct {
    unsigned long long syncs;
    long long syncs_in_run;
    int last_other;
    int in_copy;
    unsigned long long messages, bytes;
} client_state;

typedef struct conn {
    long long id;
    uint32_t slot, gen;
    int active; /* registered with epoll, relayed here */
    int done;   /* handed back, waiting for Python to take it */
    int cfd, sfd;
    uint32_t cev, sev; /* epoll interest now */
    int reason;
    buf from_client; /* client bytes not yet passed on: a unit not yet whole (or Python's) */
    buf from_server; /* server bytes Python must walk (an impossible length in them) */
    buf to_client;   /* passed on, not yet accepted by the client's socket */
    buf to_server;
    server_state s;
    client_state c;
    unsigned long max_length;
    struct conn *next_done;
} conn;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_t thread;
    int thread_started;
    int epfd;
    int stop_fd;   /* written to stop the thread */
    int notify_fd; /* written when connections were handed back; Python reads it */
    int stopping;
    conn **slots;
    uint32_t nslots;
    conn *done_head, *done_tail;
    unsigned char *scratch;
    unsigned long long relayed_units; /* client units passed on natively (diagnostics) */
    unsigned long long handbacks;
} Loop;

/* ------------------------------------------------------------------ buffers */

static int
buf_append(buf *b, const unsigned char *p, size_t n)
{
    if (n == 0)
        return 0;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *grown = realloc(b->data, cap);
        if (grown == NULL)
            return -1;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static void
buf_consume(buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

static void
buf_free(buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------ the two directions */

/*
 * How much of the client's bytes p[0:n] may go on: the end of the last whole unit that needs
 * nothing of the session. `*python` is set when the unit after it needs the session (rather than
 * just more bytes). Counters are advanced for what goes on.
 */
static size_t
scan_client(conn *k, const unsigned char *p, size_t n, int *python)
{
    client_state t = k->c;
    size_t pos = 0, unit_end = 0;
    int open_batch = 0;
    client_state committed = t;
    *python = 0;
    while (n - pos >= 5) {
        int kind = p[pos];
        unsigned long length = be32(p + pos + 1);
        if (length < 4 || length > k->max_length) {
            *python = 1;
            break;
        }
        if (strchr("PBDECSHQ", kind) == NULL || kind == 0 || (kind == 'Q' && open_batch)) {
            *python = 1; /* COPY, FunctionCall, Terminate, a batch cut short by a Query, ... */
            break;
        }
        if (kind != 'P' && kind != 'B' && kind != 'Q' && length > SMALL_LIMIT) {
            *python = 1; /* PostgreSQL refuses it on reading the length; the session passes it on */
            break;
        }
        size_t end = pos + 1 + (size_t)length;
        if (end > n) {
            if (end - unit_end > UNIT_MAX)
                *python = 1;
            break;
        }
        if (kind == 'P' || kind == 'B' || kind == 'D' || kind == 'E' || kind == 'C') {
            if (kind == 'P') {
                const unsigned char *nul = memchr(p + pos + 5, 0, length - 4);
                if (nul == NULL || might_be_directive(p, nul - p + 1, (Py_ssize_t)end - 3)) {
                    *python = 1;
                    break;
                }
            }
            open_batch = 1;
            t.syncs_in_run = 0;
            t.last_other = kind;
            t.in_copy = 0;
            t.messages++;
            pos = end;
            continue;
        }
        if (kind == 'S' || kind == 'H') {
            if (kind == 'S') {
                t.syncs++;
                t.syncs_in_run++;
            }
            t.messages++;
            open_batch = 0;
            pos = unit_end = end;
            committed = t;
            continue;
        }
        if (might_be_directive(p, (Py_ssize_t)pos + 5, (Py_ssize_t)end - 1)) { /* a Query */
            *python = 1;
            break;
        }
        t.syncs++;
        t.syncs_in_run = 0;
        t.last_other = 'Q';
        t.in_copy = 0;
        t.messages++;
        pos = unit_end = end;
        committed = t;
    }
    if (!*python && pos == n && open_batch && n - unit_end > UNIT_MAX)
        *python = 1;
    committed.bytes += unit_end;
    k->c = committed;
    return unit_end;
}

/* framing.Relay.feed's walk, on a copy of the state: 0, or -1 on an impossible length (the
 * state is then left as it was, for Python's relay to find the same). */
static int
walk_server(conn *k, const unsigned char *buf, size_t n_)
{
    server_state s = k->s;
    long long n = (long long)n_;
    long long pos = s.skip;
    s.bytes += n_;
    if (pos >= n && s.head_len == 0 && s.status_at < 0) {
        s.skip = pos - n;
        k->s = s;
        return 0;
    }
    if (s.status_at >= 0) {
        if (s.status_at < n) {
            s.status = buf[s.status_at];
            s.status_at = -1;
        }
        else {
            s.status_at -= n;
        }
    }
#define NOTE(kind, body)                                                                    \
    do {                                                                                    \
        s.last_type = (kind);                                                               \
        s.messages++;                                                                       \
        if ((kind) == 'Z') {                                                                \
            s.ready_count++;                                                                \
            if ((body) < n)                                                                 \
                s.status = buf[(body)];                                                     \
            else                                                                            \
                s.status_at = (body) - n;                                                   \
        }                                                                                   \
        else if ((kind) == 'X') {                                                           \
            s.terminated = 1;                                                               \
        }                                                                                   \
    } while (0)
    if (s.head_len > 0) {
        long long need = 5 - s.head_len;
        long long take = need < n ? need : n;
        memcpy(s.head + s.head_len, buf, (size_t)take);
        s.head_len += (int)take;
        if (s.head_len < 5) {
            s.skip = 0;
            k->s = s;
            return 0;
        }
        s.head_len = 0;
        int kind = s.head[0];
        unsigned long length = be32(s.head + 1);
        if (length < 4 || length > k->max_length)
            return -1;
        NOTE(kind, need);
        pos = need + (long long)length - 4;
    }
    while (pos < n) {
        if (n - pos < 5) {
            memcpy(s.head, buf + pos, (size_t)(n - pos));
            s.head_len = (int)(n - pos);
            pos = n;
            break;
        }
        int kind = buf[pos];
        unsigned long length = be32(buf + pos + 1);
        if (length < 4 || length > k->max_length)
            return -1;
        NOTE(kind, pos + 5);
        pos += 1 + (long long)length;
    }
#undef NOTE
    s.skip = pos - n;
    k->s = s;
    return 0;
}

/* ------------------------------------------------------------------ the loop */

static uint64_t
tag(conn *k, int server)
{
    return ((uint64_t)k->gen << 33) | ((uint64_t)k->slot << 1) | (uint64_t)server;
}

static void
set_interest(Loop *loop, conn *k)
{
    uint32_t cev = (k->to_server.len == 0 ? EPOLLIN : 0) | (k->to_client.len ? EPOLLOUT : 0);
    uint32_t sev = (k->to_client.len == 0 ? EPOLLIN : 0) | (k->to_server.len ? EPOLLOUT : 0);
    if (cev != k->cev) {
        struct epoll_event ev = {.events = cev, .data.u64 = tag(k, 0)};
        epoll_ctl(loop->epfd, EPOLL_CTL_MOD, k->cfd, &ev);
        k->cev = cev;
    }
    if (sev != k->sev) {
        struct epoll_event ev = {.events = sev, .data.u64 = tag(k, 1)};
        epoll_ctl(loop->epfd, EPOLL_CTL_MOD, k->sfd, &ev);
        k->sev = sev;
    }
}

/* Stop relaying k here: it waits in the done list for Python, which is told through notify_fd
 * (unless `quiet`: Python is taking it back itself). */
static void
hand_back(Loop *loop, conn *k, int reason, int quiet)
{
    if (!k->active)
        return;
    k->active = 0;
    k->done = 1;
    k->reason = reason;
    epoll_ctl(loop->epfd, EPOLL_CTL_DEL, k->cfd, NULL);
    epoll_ctl(loop->epfd, EPOLL_CTL_DEL, k->sfd, NULL);
    close(k->cfd);
    close(k->sfd);
    k->cfd = k->sfd = -1;
    k->next_done = NULL;
    if (loop->done_tail)
        loop->done_tail->next_done = k;
    else
        loop->done_head = k;
    loop->done_tail = k;
    loop->handbacks++;
    if (!quiet) {
        uint64_t one = 1;
        ssize_t w = write(loop->notify_fd, &one, sizeof one);
        (void)w;
    }
}

/* Send p[0:n] to fd, keeping what the socket does not take in `pending`. -1: the socket failed
 * (or memory ran out). */
static int
send_all(int fd, buf *pending, const unsigned char *p, size_t n)
{
    if (pending->len)
        return buf_append(pending, p, n);
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return buf_append(pending, p, n);
}

static int
flush(int fd, buf *pending)
{
    while (pending->len) {
        ssize_t w = send(fd, pending->data, pending->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        buf_consume(pending, (size_t)w);
    }
    return 0;
}

/* Read from fd into the scratch buffer: bytes read, 0 for end of stream, -1 for an error, -2 for
 * nothing there (a spurious wake-up). */
static ssize_t
read_some(int fd, unsigned char *into, size_t size)
{
    for (;;) {
        ssize_t r = recv(fd, into, size, MSG_DONTWAIT);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -2;
        return -1;
    }
}

static void
client_readable(Loop *loop, conn *k)
{
    unsigned char *scratch = loop->scratch;
    ssize_t r = read_some(k->cfd, scratch, READ_SIZE);
    if (r == -2)
        return;
    if (r <= 0) {
        hand_back(loop, k, R_CLIENT_CLOSED, 0);
        return;
    }
    const unsigned char *p = scratch;
    size_t n = (size_t)r;
    if (k->from_client.len) { /* the start of a unit came earlier */
        if (buf_append(&k->from_client, scratch, n) < 0) {
            hand_back(loop, k, R_CLIENT_UNIT, 0);
            return;
        }
        p = k->from_client.data;
        n = k->from_client.len;
    }
    int python;
    size_t forward = scan_client(k, p, n, &python);
    if (forward) {
        loop->relayed_units++;
        if (send_all(k->sfd, &k->to_server, p, forward) < 0) {
            /* Keep what is not passed on: the server's end is Python's to report. */
            if (p == scratch)
                buf_append(&k->from_client, p + forward, n - forward);
            else
                buf_consume(&k->from_client, forward);
            hand_back(loop, k, R_SERVER_CLOSED, 0);
            return;
        }
    }
    if (p == scratch)
        buf_append(&k->from_client, p + forward, n - forward);
    else
        buf_consume(&k->from_client, forward);
    if (python) {
        hand_back(loop, k, R_CLIENT_UNIT, 0);
        return;
    }
    set_interest(loop, k);
}

static void
server_readable(Loop *loop, conn *k)
{
    unsigned char *scratch = loop->scratch;
    ssize_t r = read_some(k->sfd, scratch, READ_SIZE);
    if (r == -2)
        return;
    if (r <= 0) {
        hand_back(loop, k, R_SERVER_CLOSED, 0);
        return;
    }
    if (walk_server(k, scratch, (size_t)r) < 0) {
        buf_append(&k->from_server, scratch, (size_t)r);
        hand_back(loop, k, R_SERVER_UNIT, 0);
        return;
    }
    if (send_all(k->cfd, &k->to_client, scratch, (size_t)r) < 0) {
        hand_back(loop, k, R_CLIENT_CLOSED, 0);
        return;
    }
    set_interest(loop, k);
}

static void
handle(Loop *loop, conn *k, int server, uint32_t events)
{
    int fd = server ? k->sfd : k->cfd;
    buf *out = server ? &k->to_server : &k->to_client;
    if (events & EPOLLOUT) {
        if (flush(fd, out) < 0) {
            hand_back(loop, k, server ? R_SERVER_CLOSED : R_CLIENT_CLOSED, 0);
            return;
        }
        set_interest(loop, k);
    }
    if (!k->active)
        return;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (events & EPOLLIN || !(events & EPOLLOUT)) {
            if (server)
                server_readable(loop, k);
            else
                client_readable(loop, k);
        }
    }
}

static void *
run(void *arg)
{
    Loop *loop = (Loop *)arg;
    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(loop->epfd, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        pthread_mutex_lock(&loop->lock);
        if (loop->stopping) {
            pthread_mutex_unlock(&loop->lock);
            break;
        }
        for (int i = 0; i < n; i++) {
            uint64_t t = events[i].data.u64;
            if (t == UINT64_MAX)
                continue; /* stop_fd */
            uint32_t slot = (uint32_t)((t >> 1) & 0xFFFFFFFFu);
            uint32_t gen = (uint32_t)(t >> 33);
            if (slot >= loop->nslots)
                continue;
            conn *k = loop->slots[slot];
            if (k == NULL || !k->active || (k->gen & 0x7FFFFFFFu) != gen)
                continue; /* handed back since epoll_wait returned */
            handle(loop, k, (int)(t & 1), events[i].events);
        }
        pthread_mutex_unlock(&loop->lock);
    }
    return NULL;
}

/* ------------------------------------------------------------------ Python's side */

static PyObject *
server_state_tuple(const server_state *s)
{
    return Py_BuildValue("(Ly#LiiKKKi)", s->skip, (const char *)s->head, (Py_ssize_t)s->head_len,
                         s->status_at, s->last_type, s->status, s->ready_count, s->messages,
                         s->bytes, s->terminated);
}

static int
server_state_parse(PyObject *t, server_state *s)
{
    const char *head;
    Py_ssize_t head_len;
    memset(s, 0, sizeof *s);
    if (!PyArg_ParseTuple(t, "Ly#LiiKKKp", &s->skip, &head, &head_len, &s->status_at,
                          &s->last_type, &s->status, &s->ready_count, &s->messages, &s->bytes,
                          &s->terminated))
        return -1;
    if (head_len > 4) {
        PyErr_SetString(PyExc_ValueError, "a split header is at most 4 bytes");
        return -1;
    }
    memcpy(s->head, head, (size_t)head_len);
    s->head_len = (int)head_len;
    return 0;
}

static PyObject *
client_state_tuple(const client_state *c)
{
    return Py_BuildValue("(KLiiKK)", c->syncs, c->syncs_in_run, c->last_other, c->in_copy,
                         c->messages, c->bytes);
}

static int
client_state_parse(PyObject *t, client_state *c)
{
    memset(c, 0, sizeof *c);
    return PyArg_ParseTuple(t, "KLipKK", &c->syncs, &c->syncs_in_run, &c->last_other,
                            &c->in_copy, &c->messages, &c->bytes)
               ? 0
               : -1;
}

static void
conn_free(conn *k)
{
    buf_free(&k->from_client);
    buf_free(&k->from_server);
    buf_free(&k->to_client);
    buf_free(&k->to_server);
    free(k);
}

/* The record of a connection handed back: (id, reason, server state, client state, bytes the
 * client sent that Python must feed, bytes the server sent that Python must feed, bytes still to
 * write to the client, bytes still to write to the server). Frees the connection. */
static const char *
bytes_of(const buf *b)
{
    return b->data ? (const char *)b->data : ""; /* y# makes None of NULL */
}

static PyObject *
record(Loop *loop, conn *k)
{
    PyObject *r = Py_BuildValue(
        "(LiNNy#y#y#y#)", k->id, k->reason, server_state_tuple(&k->s), client_state_tuple(&k->c),
        bytes_of(&k->from_client), (Py_ssize_t)k->from_client.len, bytes_of(&k->from_server),
        (Py_ssize_t)k->from_server.len, bytes_of(&k->to_client), (Py_ssize_t)k->to_client.len,
        bytes_of(&k->to_server), (Py_ssize_t)k->to_server.len);
    loop->slots[k->slot] = NULL;
    conn_free(k);
    return r;
}

static void
unlink_done(Loop *loop, conn *k)
{
    conn **at = &loop->done_head;
    conn *prev = NULL;
    while (*at && *at != k) {
        prev = *at;
        at = &(*at)->next_done;
    }
    if (*at == NULL)
        return;
    *at = k->next_done;
    if (loop->done_tail == k)
        loop->done_tail = prev;
}

#define LOCK(loop)                                                                          \
    do {                                                                                    \
        Py_BEGIN_ALLOW_THREADS                                                              \
        pthread_mutex_lock(&(loop)->lock);                                                  \
        Py_END_ALLOW_THREADS                                                                \
    } while (0)
#define UNLOCK(loop) pthread_mutex_unlock(&(loop)->lock)

static int
Loop_init(Loop *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist))
        return -1;
    if (self->thread_started) {
        PyErr_SetString(PyExc_RuntimeError, "the relay loop is already running");
        return -1;
    }
    pthread_mutex_init(&self->lock, NULL);
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    self->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    self->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    self->scratch = malloc(READ_SIZE);
    if (self->epfd < 0 || self->stop_fd < 0 || self->notify_fd < 0 || self->scratch == NULL) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->stop_fd, &ev) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    int err = pthread_create(&self->thread, NULL, run, self);
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->thread_started = 1;
    return 0;
}

static void
stop_thread(Loop *self)
{
    if (!self->thread_started)
        return;
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    pthread_mutex_unlock(&self->lock);
    uint64_t one = 1;
    ssize_t w = write(self->stop_fd, &one, sizeof one);
    (void)w;
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->thread_started = 0;
}

static void
Loop_dealloc(Loop *self)
{
    stop_thread(self);
    for (uint32_t i = 0; i < self->nslots; i++) {
        conn *k = self->slots[i];
        if (k == NULL)
            continue;
        if (k->active) {
            close(k->cfd);
            close(k->sfd);
        }
        conn_free(k);
    }
    free(self->slots);
    free(self->scratch);
    if (self->epfd > 0)
        close(self->epfd);
    if (self->stop_fd > 0)
        close(self->stop_fd);
    if (self->notify_fd > 0)
        close(self->notify_fd);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Loop_attach(Loop *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"id", "client_fd", "server_fd", "server_state", "client_state",
                             "max_length", NULL};
    long long id;
    int cfd, sfd;
    PyObject *st, *ct;
    unsigned long max_length = 0x3FFFFFFEUL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LiiOO|k", kwlist, &id, &cfd, &sfd, &st, &ct,
                                     &max_length))
        return NULL;
    conn *k = calloc(1, sizeof *k);
    if (k == NULL)
        return PyErr_NoMemory();
    if (server_state_parse(st, &k->s) < 0 || client_state_parse(ct, &k->c) < 0) {
        free(k);
        return NULL;
    }
    k->id = id;
    k->cfd = cfd;
    k->sfd = sfd;
    k->max_length = max_length;
    k->cev = k->sev = EPOLLIN;
    LOCK(self);
    if (self->stopping) {
        UNLOCK(self);
        free(k);
        PyErr_SetString(PyExc_RuntimeError, "the relay loop is stopped");
        return NULL;
    }
    uint32_t slot = 0;
    while (slot < self->nslots && self->slots[slot] != NULL)
        slot++;
    if (slot == self->nslots) {
        uint32_t n = self->nslots ? self->nslots * 2 : 64;
        conn **grown = realloc(self->slots, n * sizeof *grown);
        if (grown == NULL) {
            UNLOCK(self);
            free(k);
            return PyErr_NoMemory();
        }
        memset(grown + self->nslots, 0, (n - self->nslots) * sizeof *grown);
        self->slots = grown;
        self->nslots = n;
    }
    static uint32_t generation = 0;
    k->slot = slot;
    k->gen = (++generation) & 0x7FFFFFFFu;
    struct epoll_event ce = {.events = EPOLLIN, .data.u64 = tag(k, 0)};
    struct epoll_event se = {.events = EPOLLIN, .data.u64 = tag(k, 1)};
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, cfd, &ce) < 0) {
        UNLOCK(self);
        free(k);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, sfd, &se) < 0) {
        epoll_ctl(self->epfd, EPOLL_CTL_DEL, cfd, NULL);
        UNLOCK(self);
        free(k);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    k->active = 1;
    self->slots[slot] = k;
    UNLOCK(self);
    Py_RETURN_NONE;
}

static conn *
find(Loop *self, long long id)
{
    for (uint32_t i = 0; i < self->nslots; i++) {
        conn *k = self->slots[i];
        if (k != NULL && k->id == id)
            return k;
    }
    return NULL;
}

static PyObject *
Loop_detach(Loop *self, PyObject *arg)
{
    long long id = PyLong_AsLongLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    LOCK(self);
    conn *k = find(self, id);
    if (k == NULL) {
        UNLOCK(self);
        Py_RETURN_NONE;
    }
    if (k->active)
        hand_back(self, k, R_ASKED, 1);
    unlink_done(self, k);
    PyObject *r = record(self, k);
    UNLOCK(self);
    return r;
}

static PyObject *
Loop_take(Loop *self, PyObject *unused)
{
    uint64_t count;
    ssize_t rd = read(self->notify_fd, &count, sizeof count);
    (void)rd;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    LOCK(self);
    while (self->done_head) {
        conn *k = self->done_head;
        self->done_head = k->next_done;
        if (self->done_head == NULL)
            self->done_tail = NULL;
        PyObject *r = record(self, k);
        if (r == NULL || PyList_Append(out, r) < 0) {
            Py_XDECREF(r);
            UNLOCK(self);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(r);
    }
    UNLOCK(self);
    return out;
}

static PyObject *
Loop_traffic(Loop *self, PyObject *arg)
{
    long long id = PyLong_AsLongLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    LOCK(self);
    conn *k = find(self, id);
    if (k == NULL) {
        UNLOCK(self);
        Py_RETURN_NONE;
    }
    client_state c = k->c;
    server_state s = k->s;
    UNLOCK(self);
    return Py_BuildValue("(KKKK)", c.messages, c.bytes, s.messages, s.bytes);
}

static PyObject *
Loop_close(Loop *self, PyObject *unused)
{
    stop_thread(self);
    Py_RETURN_NONE;
}

static PyObject *
Loop_get_notify_fd(Loop *self, void *closure)
{
    return PyLong_FromLong(self->notify_fd);
}

static PyObject *
Loop_get_handbacks(Loop *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->handbacks);
}

static PyObject *
Loop_get_relayed_units(Loop *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->relayed_units);
}

static PyGetSetDef Loop_getset[] = {
    {"notify_fd", (getter)Loop_get_notify_fd, NULL,
     "Readable when connections were handed back: call take().", NULL},
    {"handbacks", (getter)Loop_get_handbacks, NULL, "Connections handed back so far.", NULL},
    {"relayed_reads", (getter)Loop_get_relayed_units, NULL,
     "Client reads passed on natively (each one write of whole units).", NULL},
    {NULL}
};

static PyMethodDef Loop_methods[] = {
    {"attach", (PyCFunction)(void (*)(void))Loop_attach, METH_VARARGS | METH_KEYWORDS,
     "attach(id, client_fd, server_fd, server_state, client_state, max_length=...): relay this "
     "pair here from now on; the file descriptors become the loop's (it closes them)."},
    {"detach", (PyCFunction)Loop_detach, METH_O,
     "detach(id): take a connection back now; its record, or None when it is not here."},
    {"take", (PyCFunction)Loop_take, METH_NOARGS,
     "The records of the connections the loop handed back on its own since the last call."},
    {"traffic", (PyCFunction)Loop_traffic, METH_O,
     "traffic(id): (client messages, client bytes, server messages, server bytes), or None."},
    {"close", (PyCFunction)Loop_close, METH_NOARGS,
     "Stop the loop's thread (connections still attached are then only closed)."},
    {NULL}
};

static PyTypeObject LoopType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "proxy._relay_loop.Loop",
    .tp_doc = "The native relay: an epoll loop on a thread of its own (see the module doc).",
    .tp_basicsize = sizeof(Loop),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Loop_init,
    .tp_dealloc = (destructor)Loop_dealloc,
    .tp_methods = Loop_methods,
    .tp_getset = Loop_getset,
};

static struct PyModuleDef relay_loop_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "proxy._relay_loop",
    .m_doc = "The native relay for connections in plain pass-through (see proxy.native_relay).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__relay_loop(void)
{
    if (PyType_Ready(&LoopType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&relay_loop_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "Loop", (PyObject *)&LoopType) < 0 ||
        PyModule_AddIntConstant(module, "CLIENT_UNIT", R_CLIENT_UNIT) < 0 ||
        PyModule_AddIntConstant(module, "SERVER_UNIT", R_SERVER_UNIT) < 0 ||
        PyModule_AddIntConstant(module, "CLIENT_CLOSED", R_CLIENT_CLOSED) < 0 ||
        PyModule_AddIntConstant(module, "SERVER_CLOSED", R_SERVER_CLOSED) < 0 ||
        PyModule_AddIntConstant(module, "ASKED", R_ASKED) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
