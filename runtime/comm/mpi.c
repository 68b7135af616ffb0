// The MPI backend: nonblocking collectives (MPI_Ialltoall, MPI_Iallgather, MPI_Ibcast,
// MPI_Ibarrier) on a duplicate of MPI_COMM_WORLD, each polled with MPI_Test against a
// deadline, so a rank that died or stopped makes the others fail instead of hang. It
// moves bytes only; comm.c forms the sums. References: MPI 3.1 §5.12 (nonblocking
// collectives), §8.3 (error handlers), §12.4 (thread levels).
#include "config.h"
#include "internal.h"

#ifdef ZINF_HAVE_MPI
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---- process-wide MPI state ----
// MPI_THREAD_SERIALIZED allows calls from any thread but never two at once, even on
// different communicators: one lock guards every MPI call in the process. A
// communicator's own lock (comm.c) keeps its collectives whole and in order.
static struct {
    pthread_mutex_t lock;
    int live;         // open communicators
    bool initialized; // zinf called MPI_Init_thread, so zinf finalizes
    bool failed;      // a communicator failed: operations may be pending, finalize could hang
} G = {PTHREAD_MUTEX_INITIALIZER, 0, false, false};

typedef struct mpi_impl {
    MPI_Comm comm; // a duplicate of MPI_COMM_WORLD, errors returned
} mpi_impl;

// Called with G.lock held (MPI_Error_string is an MPI call too).
static zinf_status mpi_fail(const char *call, const char *op, int rc) {
    char text[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS || len < 0 || len > MPI_MAX_ERROR_STRING)
        len = snprintf(text, sizeof text, "MPI error %d", rc);
    text[len] = '\0';
    G.failed = true;
    return zinf_fail(ZINF_ERR_COMM, "comm mpi: %s for %s failed: %s", call, op, text);
}

// "allgather of 4 KiB", or "allreduce_f32 (alltoall of 12 KiB)" when the public call
// is made of several moves.
static void describe(char *out, size_t cap, const char *op, const char *move, size_t bytes) {
    char sz[32];
    zinf_size_format(bytes, sz, sizeof sz);
    if (strcmp(op, move) == 0)
        snprintf(out, cap, "%s of %s", op, sz);
    else
        snprintf(out, cap, "%s (%s of %s)", op, move, sz);
}

// Poll req until it completes or the deadline passes. Spin briefly (between live
// ranks a collective mostly completes within microseconds), then nap with a growing
// sleep up to 1 ms, so ranks oversubscribing a small machine leave each other the
// cores. G.lock is held for each MPI_Test only, never while napping.
static zinf_status wait_done(zinf_comm *c, MPI_Request *req, const char *op, const char *what) {
    const double deadline = zinf_clock_s() + c->timeout_s;
    long nap_ns = 0;
    for (int spins = 0;; spins++) {
        int done = 0;
        pthread_mutex_lock(&G.lock);
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        zinf_status st = rc == MPI_SUCCESS ? ZINF_OK : mpi_fail("MPI_Test", op, rc);
        if (st == ZINF_OK && !done && zinf_clock_s() >= deadline) {
            // The request stays pending: MPI cannot cancel a collective. Nothing may
            // finalize now, and the caller's buffers may still be written if the
            // missing rank wakes up; the communicator refuses every later call.
            G.failed = true;
            st = zinf_fail(ZINF_ERR_COMM,
                           "comm mpi: rank %d waited %g s for %s with %d ranks; a rank has died or stopped", c->rank,
                           c->timeout_s, what, c->size);
        }
        pthread_mutex_unlock(&G.lock);
        if (st != ZINF_OK || done) return st;
        if (spins < 100) continue;
        nap_ns = nap_ns ? (nap_ns >= 500000 ? 1000000 : nap_ns * 2) : 2000;
        struct timespec nap = {0, nap_ns};
        nanosleep(&nap, NULL);
    }
}

// len bytes with an extent of stride: the block for (or from) rank r starts at
// r * stride. Called with G.lock held.
static int strided(size_t len, size_t stride, MPI_Datatype *out) {
    MPI_Datatype t;
    int rc = MPI_Type_contiguous((int)len, MPI_BYTE, &t);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Type_create_resized(t, 0, (MPI_Aint)stride, out);
    MPI_Type_free(&t);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(out);
    return rc;
}

// ---- moves ----

static zinf_status mpi_alltoall(zinf_comm *c, const char *op, const void *in, size_t in_stride, void *out, size_t len) {
    mpi_impl *m = c->impl;
    MPI_Request req;
    MPI_Datatype send = MPI_BYTE;
    int rc = MPI_SUCCESS;
    pthread_mutex_lock(&G.lock);
    if (in_stride != len) rc = strided(len, in_stride, &send);
    if (rc == MPI_SUCCESS)
        rc = MPI_Ialltoall(in, send == MPI_BYTE ? (int)len : 1, send, out, (int)len, MPI_BYTE, m->comm, &req);
    // A datatype in use by a pending operation may be freed: MPI keeps it until done.
    if (send != MPI_BYTE) MPI_Type_free(&send);
    zinf_status st = rc == MPI_SUCCESS ? ZINF_OK : mpi_fail("MPI_Ialltoall", op, rc);
    pthread_mutex_unlock(&G.lock);
    ZINF_CHECK(st);
    char what[96];
    describe(what, sizeof what, op, "alltoall", len * (size_t)c->size);
    return wait_done(c, &req, op, what);
}

static zinf_status mpi_allgather(zinf_comm *c, const char *op, const void *in, void *out, size_t out_stride,
                                 size_t len) {
    mpi_impl *m = c->impl;
    MPI_Request req;
    MPI_Datatype recv = MPI_BYTE;
    int rc = MPI_SUCCESS;
    pthread_mutex_lock(&G.lock);
    if (out_stride != len) rc = strided(len, out_stride, &recv);
    if (rc == MPI_SUCCESS)
        rc = MPI_Iallgather(in ? in : MPI_IN_PLACE, (int)len, MPI_BYTE, out, recv == MPI_BYTE ? (int)len : 1, recv,
                            m->comm, &req);
    if (recv != MPI_BYTE) MPI_Type_free(&recv);
    zinf_status st = rc == MPI_SUCCESS ? ZINF_OK : mpi_fail("MPI_Iallgather", op, rc);
    pthread_mutex_unlock(&G.lock);
    ZINF_CHECK(st);
    char what[96];
    describe(what, sizeof what, op, "allgather", len);
    return wait_done(c, &req, op, what);
}

static zinf_status mpi_bcast(zinf_comm *c, const char *op, void *buf, size_t len, int root) {
    mpi_impl *m = c->impl;
    MPI_Request req;
    pthread_mutex_lock(&G.lock);
    int rc = MPI_Ibcast(buf, (int)len, MPI_BYTE, root, m->comm, &req);
    zinf_status st = rc == MPI_SUCCESS ? ZINF_OK : mpi_fail("MPI_Ibcast", op, rc);
    pthread_mutex_unlock(&G.lock);
    ZINF_CHECK(st);
    char what[96];
    describe(what, sizeof what, op, "broadcast", len);
    return wait_done(c, &req, op, what);
}

static zinf_status mpi_barrier(zinf_comm *c, const char *op) {
    mpi_impl *m = c->impl;
    MPI_Request req;
    pthread_mutex_lock(&G.lock);
    int rc = MPI_Ibarrier(m->comm, &req);
    zinf_status st = rc == MPI_SUCCESS ? ZINF_OK : mpi_fail("MPI_Ibarrier", op, rc);
    pthread_mutex_unlock(&G.lock);
    ZINF_CHECK(st);
    return wait_done(c, &req, op, op);
}

// ---- open / close ----

static const char *thread_level(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    }
    return "unknown";
}

// Initialize MPI unless the program did; with G.lock held.
static zinf_status init_locked(void) {
    int init = 0, fin = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin)
        return zinf_fail(ZINF_ERR_COMM, "comm mpi: MPI was already finalized in this process and cannot start again "
                                        "(keep one communicator for the whole run)");
    if (init) {
        MPI_Query_thread(&provided);
    } else {
        // Collectives may come from different threads one at a time: SERIALIZED is
        // enough, MULTIPLE is asked for so the program may use MPI beside zinf.
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail("MPI_Init_thread", "create", rc);
        G.initialized = true;
    }
    if (provided >= MPI_THREAD_SERIALIZED) return ZINF_OK;
    zinf_status st = zinf_fail(ZINF_ERR_UNSUPPORTED,
                               "comm mpi: MPI gives thread level %s; zinf needs MPI_THREAD_SERIALIZED or higher",
                               thread_level(provided));
    if (G.initialized && G.live == 0) {
        MPI_Finalize();
        G.initialized = false;
    }
    return st;
}

static zinf_status mpi_open(zinf_comm *c) {
    mpi_impl *m = calloc(1, sizeof *m);
    if (!m) return zinf_fail(ZINF_ERR_NOMEM, "comm mpi: out of memory");
    MPI_Request req;
    pthread_mutex_lock(&G.lock);
    zinf_status st = init_locked();
    if (st == ZINF_OK) {
        MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c->size);
        // MPI_Comm_idup rather than MPI_Comm_dup: joining is bounded like every call.
        int rc = MPI_Comm_idup(MPI_COMM_WORLD, &m->comm, &req);
        if (rc != MPI_SUCCESS) st = mpi_fail("MPI_Comm_idup", "create", rc);
    }
    pthread_mutex_unlock(&G.lock);
    if (st == ZINF_OK) {
        st = wait_done(c, &req, "create", "create (MPI_Comm_idup)");
        // On a timeout the pending idup still holds &m->comm: m stays allocated.
        if (st != ZINF_OK) return st;
    }
    if (st != ZINF_OK) {
        free(m);
        return st;
    }
    pthread_mutex_lock(&G.lock);
    int rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        st = mpi_fail("MPI_Comm_set_errhandler", "create", rc);
    } else {
        G.live++;
        c->impl = m;
    }
    pthread_mutex_unlock(&G.lock);
    if (st != ZINF_OK) free(m);
    return st;
}

// MPI_Comm_split has no nonblocking form in MPI 3.1; the front end's bounded exchange
// has just shown every rank here, so the split only waits for ranks that are running.
static zinf_status mpi_split(zinf_comm *c, zinf_comm *sub, int color) {
    mpi_impl *m = c->impl, *s = calloc(1, sizeof *s);
    if (!s) return zinf_fail(ZINF_ERR_NOMEM, "comm mpi: out of memory");
    pthread_mutex_lock(&G.lock);
    int rc = MPI_Comm_split(m->comm, color, c->rank, &s->comm);
    zinf_status st = rc == MPI_SUCCESS ? ZINF_OK : mpi_fail("MPI_Comm_split", "split", rc);
    if (st == ZINF_OK) {
        rc = MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
        if (rc == MPI_SUCCESS) {
            MPI_Comm_rank(s->comm, &sub->rank);
            MPI_Comm_size(s->comm, &sub->size);
            G.live++;
            sub->impl = s;
        } else {
            st = mpi_fail("MPI_Comm_set_errhandler", "split", rc);
            MPI_Comm_free(&s->comm);
        }
    }
    pthread_mutex_unlock(&G.lock);
    if (st != ZINF_OK) free(s);
    return st;
}

static void mpi_close(zinf_comm *c) {
    mpi_impl *m = c->impl;
    pthread_mutex_lock(&G.lock);
    // After a failure, operations on m->comm are pending: leave it, and MPI, alone.
    if (c->failed)
        G.failed = true;
    else
        MPI_Comm_free(&m->comm);
    G.live--;
    if (G.live == 0 && G.initialized && !G.failed) {
        MPI_Finalize();
        G.initialized = false;
    }
    pthread_mutex_unlock(&G.lock);
    free(m);
}

const comm_ops zinf_comm_mpi_ops = {
    .name = "mpi",
    .open = mpi_open,
    .close = mpi_close,
    .alltoall = mpi_alltoall,
    .allgather = mpi_allgather,
    .bcast = mpi_bcast,
    .barrier = mpi_barrier,
    .split = mpi_split,
};

#else // ---- no MPI in this build: create says so ----

static zinf_status no_mpi(void) { return zinf_fail(ZINF_ERR_UNSUPPORTED, "comm mpi: this build has no MPI"); }

static zinf_status stub_open(zinf_comm *c) {
    (void)c;
    return no_mpi();
}

static void stub_close(zinf_comm *c) { (void)c; }

static zinf_status stub_alltoall(zinf_comm *c, const char *op, const void *in, size_t in_stride, void *out,
                                 size_t len) {
    (void)c, (void)op, (void)in, (void)in_stride, (void)out, (void)len;
    return no_mpi();
}

static zinf_status stub_allgather(zinf_comm *c, const char *op, const void *in, void *out, size_t out_stride,
                                  size_t len) {
    (void)c, (void)op, (void)in, (void)out, (void)out_stride, (void)len;
    return no_mpi();
}

static zinf_status stub_bcast(zinf_comm *c, const char *op, void *buf, size_t len, int root) {
    (void)c, (void)op, (void)buf, (void)len, (void)root;
    return no_mpi();
}

static zinf_status stub_barrier(zinf_comm *c, const char *op) {
    (void)c, (void)op;
    return no_mpi();
}

static zinf_status stub_split(zinf_comm *c, zinf_comm *sub, int color) {
    (void)c, (void)sub, (void)color;
    return no_mpi();
}

const comm_ops zinf_comm_mpi_ops = {
    .name = "mpi",
    .open = stub_open,
    .close = stub_close,
    .alltoall = stub_alltoall,
    .allgather = stub_allgather,
    .bcast = stub_bcast,
    .barrier = stub_barrier,
    .split = stub_split,
};

#endif
