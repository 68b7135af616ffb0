// The engine: creation, forward and backward of a micro-batch, the full-value view of
// a rank's partition (DeepSpeed's safe_get_full_* / safe_set_full_*), and the pieces
// every engine file shares (deferred frees, collectives on the communication stream).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "zinf_half.h"
#include "zinf_offload.h"
#include "zinf_swap.h"

// ---- failures on the communication stream's thread ----

void engine_fail_async(zinf_engine *e, zinf_status st) {
    async_error *a = &e->aerr;
    pthread_mutex_lock(&a->mu);
    if (a->st == ZINF_OK) {
        a->st = st;
        snprintf(a->msg, sizeof a->msg, "%s", zinf_last_error());
    }
    pthread_mutex_unlock(&a->mu);
}

static zinf_status async_get(async_error *a) {
    pthread_mutex_lock(&a->mu);
    zinf_status st = a->st;
    pthread_mutex_unlock(&a->mu);
    return st == ZINF_OK ? ZINF_OK : zinf_fail(st, "%s", a->msg);
}

bool engine_failed(zinf_engine *e) {
    pthread_mutex_lock(&e->aerr.mu);
    bool failed = e->aerr.st != ZINF_OK;
    pthread_mutex_unlock(&e->aerr.mu);
    return failed;
}

typedef struct comm_job {
    zinf_engine *e;
    comm_op op;
    void *in, *out;
    size_t n;
} comm_job;

static void comm_job_run(void *arg) {
    comm_job *j = arg;
    zinf_engine *e = j->e;
    // After a failure the ranks no longer agree on what comes next: run nothing more.
    if (!engine_failed(e)) {
        zinf_status st = ZINF_OK;
        switch (j->op) {
        case COMM_ALLREDUCE: st = zinf_comm_allreduce_f32(e->comm, j->in, j->n); break;
        case COMM_REDUCE_SCATTER: st = zinf_comm_reduce_scatter_f32(e->comm, j->in, j->out, j->n); break;
        case COMM_ALLGATHER: st = zinf_comm_allgather(e->comm, j->in, j->out, j->n); break;
        }
        if (st != ZINF_OK) engine_fail_async(e, st);
    }
    free(j);
}

zinf_status engine_comm(zinf_engine *e, comm_op op, void *in, void *out, size_t n) {
    comm_job *j = malloc(sizeof *j);
    if (!j) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    *j = (comm_job){e, op, in, out, n};
    zinf_status st = zinf_stream_host_fn(e->xs, comm_job_run, j);
    if (st != ZINF_OK) free(j);
    return st;
}

zinf_status engine_sync(zinf_engine *e) {
    tier_join(e);
    zinf_status a = zinf_stream_sync(e->xs), b = zinf_stream_sync(e->cs);
    zinf_status c = e->ps ? zinf_stream_sync(e->ps) : ZINF_OK;
    e->unsynced = false;
    ZINF_CHECK(async_get(&e->aerr));
    if (e->nccl) ZINF_CHECK(zinf_comm_status(e->comm)); // an abort lets the streams pass
    return a != ZINF_OK ? a : b != ZINF_OK ? b : c;
}

zinf_status engine_allgather(zinf_engine *e, const void *mine, bool mine_host, void *full, size_t bytes) {
    char *place = (char *)full + (size_t)e->rank * bytes;
    if (e->world == 1 && mine == full) return ZINF_OK;
    if (e->world == 1) return zinf_copy_async(e->xs, full, mine, bytes, mine_host ? ZINF_COPY_H2D : ZINF_COPY_D2D);
    if (e->nccl && mine_host) { // NCCL takes device buffers: this rank's part first
        ZINF_CHECK(zinf_copy_async(e->xs, place, mine, bytes, ZINF_COPY_H2D));
        mine = place;
    }
    if (e->nccl) return zinf_comm_device_allgather(e->comm, e->xs, mine, full, bytes);
    char *h = (char *)e->h_comm + (size_t)e->rank * bytes;
    ZINF_CHECK(zinf_copy_async(e->xs, h, mine, bytes, mine_host ? ZINF_COPY_H2H : ZINF_COPY_D2H));
    ZINF_CHECK(engine_comm(e, COMM_ALLGATHER, h, e->h_comm, bytes));
    return zinf_copy_async(e->xs, full, e->h_comm, (size_t)e->world * bytes, ZINF_COPY_H2D);
}

// ---- memory ----

// What to change when host memory runs short, per budget.
static const char *const pinned_hint =
    "raise device.pinned_memory_limit (and `ulimit -l`), set offload_optimizer/offload_param.pin_memory to false, "
    "or lower zero_optimization.sub_group_size, offload_param.buffer_count, buffer_size or max_in_cpu";
static const char *const host_hint =
    "move a tier to nvme (zero_optimization.offload_optimizer/offload_param.device), lower "
    "offload_param.max_in_cpu or zero_optimization.sub_group_size, or run fewer ranks per host";

// A page-aligned mapping for a buffer to be pinned, recorded; pinned now once
// engine_host_pin has run.
static zinf_status map_block(zinf_engine *e, size_t bytes, const char *what, void **out) {
    char a[32];
    if (e->npblocks == e->cappblocks) {
        int cap = e->cappblocks ? 2 * e->cappblocks : 16;
        pinned_block *n = realloc(e->pblocks, (size_t)cap * sizeof *n);
        if (!n) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        e->pblocks = n, e->cappblocks = cap;
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return zinf_fail_errno(errno, "engine: mapping %s of host memory for %s", zinf_size_format(bytes, a, sizeof a),
                               what);
    pinned_block *b = &e->pblocks[e->npblocks++];
    *b = (pinned_block){p, bytes, false};
    *out = p;
    if (!e->pin_now) return ZINF_OK;
    zinf_status st = zinf_pinned_register(e->dev, p, bytes);
    if (st != ZINF_OK) {
        *out = NULL;
        munmap(p, bytes);
        e->npblocks--;
        return st;
    }
    b->pinned = true;
    return ZINF_OK;
}

zinf_status engine_host_alloc(zinf_engine *e, size_t bytes, bool pinned, const char *what, void **out) {
    char a[32], b[32], c[32];
    *out = NULL;
    e->host_refused = (pinned && e->pinned_used + (int64_t)bytes > e->pinned_budget) ||
                      e->host_used + (int64_t)bytes > e->host_budget;
    if (pinned && e->pinned_used + (int64_t)bytes > e->pinned_budget)
        return zinf_fail(ZINF_ERR_NOMEM, "engine: %s need %s of pinned host memory, but %s of the %s pinned budget "
                                         "is left; %s",
                         what, zinf_size_format(bytes, a, sizeof a),
                         zinf_size_format((uint64_t)(e->pinned_budget - e->pinned_used), b, sizeof b),
                         zinf_size_format((uint64_t)e->pinned_budget, c, sizeof c), pinned_hint);
    // Pageable memory past what the machine has would be the OOM killer's to settle.
    if (e->host_used + (int64_t)bytes > e->host_budget)
        return zinf_fail(ZINF_ERR_NOMEM, "engine: %s need %s of host memory, but this rank's share of the memory "
                                         "available is %s and %s is taken; %s",
                         what, zinf_size_format(bytes, a, sizeof a), zinf_size_format((uint64_t)e->host_budget, b, sizeof b),
                         zinf_size_format((uint64_t)e->host_used, c, sizeof c), host_hint);
    if (pinned) {
        ZINF_CHECK(map_block(e, bytes ? bytes : 4096, what, out));
        e->pinned_used += (int64_t)bytes;
    } else if (posix_memalign(out, 4096, bytes ? bytes : 4096) != 0) {
        *out = NULL;
        return zinf_fail(ZINF_ERR_NOMEM, "engine: out of host memory for %s (%s)", what,
                         zinf_size_format(bytes, a, sizeof a));
    }
    e->host_used += (int64_t)bytes;
    return ZINF_OK;
}

void engine_host_free(zinf_engine *e, void *p, bool pinned) {
    if (!p || !pinned) {
        free(p);
        return;
    }
    for (int i = 0; i < e->npblocks; i++) {
        pinned_block *b = &e->pblocks[i];
        if (b->p != p) continue;
        if (b->pinned) zinf_pinned_unregister(e->dev, p);
        munmap(p, b->bytes);
        *b = e->pblocks[--e->npblocks];
        return;
    }
    ZINF_LOG_ERROR("engine_host_free: %p is not a pinned buffer of this engine", p); // a broken invariant
}

zinf_status engine_host_pin(zinf_engine *e) {
    e->pin_now = true;
    for (int i = 0; i < e->npblocks; i++) {
        pinned_block *b = &e->pblocks[i];
        if (b->pinned) continue;
        ZINF_CHECK(zinf_pinned_register(e->dev, b->p, b->bytes));
        b->pinned = true;
    }
    return ZINF_OK;
}

// The budgets host allocations are held to: pinned memory from
// device.pinned_memory_limit, else half of the memory available (pinned pages cannot
// be swapped or reclaimed), within the locked-memory limit where it binds (the host
// backend pins with mlock; CUDA's driver pins past it); all host memory within what is
// available. Ranks on one host share both. On the host backend the device's memory is
// host memory too: what it holds by now (the model's activations) is not available.
static zinf_status host_budgets(zinf_engine *e) {
    zinf_host_mem hm;
    ZINF_CHECK(zinf_host_mem_probe(&hm));
    const zinf_device_caps *caps = zinf_device_get_caps(e->dev);
    bool host = caps->backend == ZINF_BACKEND_HOST;
    int64_t local = zinf_comm_local_size(e->comm), avail = (int64_t)(hm.available_bytes / (uint64_t)local);
    zinf_device_mem dm;
    zinf_device_get_mem(e->dev, &dm);
    if (host) avail -= (int64_t)dm.in_use;
    e->host_budget = avail > 0 ? avail : 0;
    int64_t pin = e->host_budget / 2;
    if (host && !hm.lock_unlimited && hm.memlock_limit != UINT64_MAX && (int64_t)(hm.memlock_limit / (uint64_t)local) < pin)
        pin = (int64_t)(hm.memlock_limit / (uint64_t)local);
    e->pinned_budget = e->cfg.device.pinned_memory_limit >= 0 ? e->cfg.device.pinned_memory_limit : pin;
    return ZINF_OK;
}

zinf_status engine_swap_open(zinf_engine *e, const zinf_path_list *pl, zinf_swap **out) {
    const zinf_aio_config *a = &e->cfg.aio;
    zinf_aio_params ap = {.block_size = (uint32_t)a->block_size, .queue_depth = (uint32_t)a->queue_depth,
                          .threads = (uint32_t)a->intra_op_parallelism};
    if (!e->aio && zinf_aio_create(&e->aio, &ap) != 0) return zinf_fail(ZINF_ERR_IO, "engine: aio: %s", zinf_last_error());
    // Every rank's files go under one run directory, named by rank 0's process id.
    if (!e->run_id) {
        e->run_id = (int64_t)getpid();
        ZINF_CHECK(zinf_comm_broadcast(e->comm, &e->run_id, sizeof e->run_id, 0));
    }
    char name[32];
    snprintf(name, sizeof name, "%lld", (long long)e->run_id);
    zinf_swap_config sc = {.paths = (const char *const *)pl->paths, .npaths = pl->count, .run = name,
                           .rank = e->rank, .aio = e->aio};
    return zinf_swap_open(out, &sc);
}

zinf_status engine_reap(zinf_engine *e, bool wait) {
    zinf_status st = ZINF_OK;
    int kept = 0;
    for (int i = 0; i < e->npend; i++) {
        pending_free *p = &e->pend[i];
        if (wait) {
            zinf_status s = zinf_event_sync(p->ev);
            if (st == ZINF_OK) st = s;
        }
        if (wait || zinf_event_done(p->ev)) {
            zinf_device_free(e->dev, p->p);
            zinf_event_destroy(p->ev);
        } else {
            e->pend[kept++] = *p;
        }
    }
    e->npend = kept;
    return st;
}

zinf_status engine_free_after(zinf_engine *e, void *p, zinf_stream *s) {
    if (!p) return ZINF_OK;
    if (e->npend == e->cappend) {
        int cap = e->cappend ? 2 * e->cappend : 16;
        pending_free *n = realloc(e->pend, (size_t)cap * sizeof *n);
        if (!n) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        e->pend = n, e->cappend = cap;
    }
    zinf_event *ev;
    ZINF_CHECK(zinf_event_create(e->dev, &ev));
    zinf_status st = zinf_event_record(ev, s);
    if (st != ZINF_OK) {
        zinf_event_destroy(ev);
        return st;
    }
    e->pend[e->npend++] = (pending_free){p, ev};
    return ZINF_OK;
}

zinf_status engine_alloc(zinf_engine *e, size_t bytes, const char *what, void **p) {
    ZINF_CHECK(engine_reap(e, false));
    if (zinf_device_alloc(e->dev, bytes, what, p) == ZINF_OK) return ZINF_OK;
    if (e->npend == 0) return zinf_fail(ZINF_ERR_NOMEM, "%s", zinf_last_error());
    ZINF_CHECK(engine_reap(e, true));
    return zinf_device_alloc(e->dev, bytes, what, p);
}

// ---- creation ----

static zinf_status check_config(const zinf_config *cfg, const zinf_comm *comm) {
    if (!cfg->model.present)
        return zinf_fail(ZINF_ERR_INVAL, "engine: the config has no \"model\" section; add one, e.g. "
                                         "{\"model\": {\"preset\": \"gpt2\"}}");
    if (zinf_comm_size(comm) != cfg->world_size)
        return zinf_fail(ZINF_ERR_INVAL,
                         "engine: the config's batch sizes were resolved for %d ranks but the communicator has %d",
                         cfg->world_size, zinf_comm_size(comm));
    return ZINF_OK;
}

static zinf_status alloc_states(zinf_engine *e) {
    ZINF_CHECK(host_budgets(e));
    ZINF_CHECK(ptier_create(e));
    ZINF_CHECK(tier_create(e));
    return zinf_device_alloc(e->dev, (size_t)e->nmod * e->world * 2 * sizeof(double), "gradient norms",
                             (void **)&e->d_stats);
}

// Each rank on a host takes its own GPU (local rank); with more ranks than GPUs they
// share, and collectives stay on host memory, since NCCL refuses a GPU twice.
static zinf_status open_device(zinf_engine *e, const zinf_config *cfg) {
    zinf_gpu_runtime_info ri;
    zinf_gpu_runtime_probe(&ri);
    int local = zinf_comm_local_rank(e->comm), nlocal = zinf_comm_local_size(e->comm);
    zinf_device_params dp = {.backend = cfg->device.backend, .memory_limit = cfg->device.memory_limit,
                             .index = ri.device_count > 0 ? local % ri.device_count : 0};
    ZINF_CHECK(zinf_device_create(&e->dev, &dp));
    if (e->world == 1 || zinf_device_get_caps(e->dev)->backend != ZINF_BACKEND_CUDA) return ZINF_OK;
    if (nlocal > ri.device_count) {
        ZINF_LOG_WARN("engine: %d ranks share %d GPUs on this host; collectives go through host memory", nlocal,
                      ri.device_count);
        return ZINF_OK;
    }
    zinf_status st = zinf_comm_attach_device(e->comm, e->dev);
    if (st == ZINF_ERR_UNSUPPORTED) { // a build without NCCL
        ZINF_LOG_WARN("engine: %s", zinf_last_error());
        return ZINF_OK;
    }
    ZINF_CHECK(st);
    e->nccl = true;
    return ZINF_OK;
}

static zinf_status create(zinf_engine *e, const zinf_config *cfg, zinf_comm *comm) {
    ZINF_CHECK(check_config(cfg, comm));
    e->cfg = *cfg;
    e->comm = comm;
    e->rank = zinf_comm_rank(comm);
    e->world = zinf_comm_size(comm);
    e->stage = (int)cfg->zero.stage;
    e->ptier = cfg->zero.offload_param.device; // the config allows it at stage 3 only
    e->dt = cfg->bf16 ? ZINF_DTYPE_BF16 : cfg->fp16.enabled ? ZINF_DTYPE_F16 : ZINF_DTYPE_F32;
    e->es = zinf_dtype_size(e->dt);
    zinf_loss_scaler_init(&e->scaler, &cfg->fp16);

    zinf_model_params mp = {.dtype = e->dt, .batch = (int)cfg->train_micro_batch_size_per_gpu, .training = true,
                            .checkpoint_activations = cfg->activation_checkpointing.enabled};
    ZINF_CHECK(zinf_gpt_shape_from_config(&cfg->model, &mp.shape));
    mp.seq_len = cfg->data.present && cfg->data.seq_len > 0 ? (int)cfg->data.seq_len : mp.shape.block_size;
    if (mp.seq_len > mp.shape.block_size)
        return zinf_fail(ZINF_ERR_INVAL, "data.seq_len: %d is longer than the model's block_size %d", mp.seq_len,
                         mp.shape.block_size);
    ZINF_CHECK(open_device(e, cfg));
    ZINF_CHECK(zinf_stream_create(e->dev, &e->cs));
    ZINF_CHECK(zinf_stream_create(e->dev, &e->xs));
    ZINF_CHECK(zinf_event_create(e->dev, &e->ev_cs));
    zinf_device_mem before, after;
    zinf_device_get_mem(e->dev, &before);
    ZINF_CHECK(zinf_model_create(&e->m, e->dev, &mp));
    zinf_device_get_mem(e->dev, &after);
    e->act_bytes = (int64_t)(after.in_use - before.in_use);
    e->nmod = zinf_model_module_count(e->m);
    e->params16 = calloc((size_t)e->nmod, sizeof *e->params16);
    e->grads16 = calloc((size_t)e->nmod, sizeof *e->grads16);
    e->pview = calloc((size_t)e->nmod, sizeof *e->pview);
    if (!e->params16 || !e->grads16 || !e->pview) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    ZINF_CHECK(layout_build(e));
    ZINF_CHECK(alloc_states(e));
    ZINF_CHECK(reduce_create(e));
    ZINF_CHECK(engine_host_pin(e));
    if (e->stage == 3) ZINF_CHECK(coord_create(e));
    else memcpy(e->pview, e->params16, (size_t)e->nmod * sizeof *e->pview);
    ZINF_CHECK(init_partition(e));
    if (e->aio) zinf_aio_get_stats(e->aio, &e->aio_seen); // steps count their own IO
    return ZINF_OK;
}

zinf_status zinf_engine_create(zinf_engine **out, const zinf_config *cfg, zinf_comm *comm) {
    if (!out || !cfg || !comm) return zinf_fail(ZINF_ERR_INVAL, "engine: out, cfg and comm are required");
    *out = NULL;
    zinf_engine *e = calloc(1, sizeof *e);
    if (!e) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    pthread_mutex_init(&e->aerr.mu, NULL);
    zinf_status st = create(e, cfg, comm);
    if (st != ZINF_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zinf_last_error());
        bool device = st == ZINF_ERR_NOMEM && !e->host_refused; // a host budget said what to change
        zinf_engine_destroy(e);
        // Say what to change, not just what ran out.
        return zinf_fail(st, "%s%s", msg,
                         device ? "; lower train_micro_batch_size_per_gpu or zero_optimization.reduce_bucket_size, "
                                  "turn on activation_checkpointing, raise zero_optimization.stage or device.memory_limit"
                                : "");
    }
    *out = e;
    return ZINF_OK;
}

void zinf_engine_destroy(zinf_engine *e) {
    if (!e) return;
    tier_join(e);
    if (e->xs) zinf_stream_sync(e->xs);
    if (e->cs) zinf_stream_sync(e->cs);
    engine_reap(e, true);
    free(e->pend);
    if (e->stage == 3) coord_destroy(e);
    reduce_destroy(e);
    for (int i = 0; e->grads16 && i < e->nmod; i++)
        zinf_device_free(e->dev, e->grads16[i]);
    if (e->dev) zinf_device_free(e->dev, e->d_stats);
    ptier_destroy(e);
    tier_destroy(e);
    free(e->pblocks); // every block was given back above
    zinf_aio_destroy(e->aio);
    free(e->params16), free(e->grads16), free(e->pview), free(e->lay);
    zinf_model_destroy(e->m);
    zinf_event_destroy(e->ev_cs);
    if (e->nccl) zinf_comm_detach_device(e->comm);
    zinf_stream_destroy(e->xs);
    zinf_stream_destroy(e->cs);
    zinf_device_destroy(e->dev);
    pthread_mutex_destroy(&e->aerr.mu);
    free(e);
}

const zinf_model *zinf_engine_model(const zinf_engine *e) { return e ? e->m : NULL; }

// ---- forward and backward ----

// Make op's modules available (stage 3 gathers them) and run it.
static zinf_status run_op(zinf_engine *e, const zinf_model_op *op) {
    if (e->stage == 3) ZINF_CHECK(coord_fetch(e, op->module, e->pview));
    ZINF_CHECK(zinf_model_run(e->m, e->cs, op, e->pview, e->grads16));
    return e->stage == 3 ? coord_done(e, op->module) : ZINF_OK;
}

zinf_status zinf_engine_forward(zinf_engine *e, const int32_t *tokens, const int32_t *targets, int n, double *loss) {
    if (!e || !tokens || !targets || !loss) return zinf_fail(ZINF_ERR_INVAL, "engine forward: a required argument is NULL");
    ZINF_CHECK(async_get(&e->aerr));
    // The objective is the mean over every micro-batch of every rank; fp16 scales it.
    double scale = e->scaler.scale;
    float dloss = (float)(scale / ((double)e->cfg.gradient_accumulation_steps * e->world));
    ZINF_CHECK(zinf_model_set_batch(e->m, e->cs, tokens, targets, n, dloss));
    int nf;
    const zinf_model_op *ops = zinf_model_schedule(e->m, false, &nf);
    for (int i = 0; i < nf; i++)
        ZINF_CHECK(run_op(e, &ops[i]));
    double sum;
    int64_t count;
    ZINF_CHECK(zinf_model_loss(e->m, e->cs, &sum, &count));
    *loss = e->last_loss = sum / (double)count;
    e->have_forward = true;
    return ZINF_OK;
}

// Module mod's 16-bit gradient buffer, zeroed, for the backward about to add to it.
static zinf_status need_grad(zinf_engine *e, int mod) {
    if (mod < 0 || e->grads16[mod] || !e->lay[mod].padded) return ZINF_OK;
    size_t bytes = e->lay[mod].padded * e->es;
    ZINF_CHECK(engine_alloc(e, bytes, "gradients", &e->grads16[mod]));
    return zinf_memset_async(e->cs, e->grads16[mod], 0, bytes);
}

zinf_status zinf_engine_backward(zinf_engine *e) {
    if (!e) return zinf_fail(ZINF_ERR_INVAL, "engine backward: e is NULL");
    if (!e->have_forward) return zinf_fail(ZINF_ERR_INVAL, "engine backward: no forward to take the backward of");
    // The gradients are the background update's until it ends.
    tier_join(e);
    ZINF_CHECK(async_get(&e->aerr));
    ZINF_CHECK(tier_preread(e));
    int nf, nall;
    zinf_model_schedule(e->m, false, &nf);
    const zinf_model_op *ops = zinf_model_schedule(e->m, true, &nall);
    for (int k = nf; k < nall; k++) {
        const zinf_model_op *op = &ops[k];
        if (op->pass == ZINF_PASS_BACKWARD) {
            ZINF_CHECK(need_grad(e, op->module));
            ZINF_CHECK(need_grad(e, zinf_model_module(e->m, op->module)->external));
        }
        ZINF_CHECK(run_op(e, op));
        for (int i = 0; i < e->nmod; i++)
            if (e->last_bwd[i] == k) ZINF_CHECK(reduce_module_ready(e, i));
    }
    e->have_forward = false;
    e->micro++;
    e->loss_sum += e->last_loss;
    return ZINF_OK;
}

zinf_status zinf_engine_step(zinf_engine *e, zinf_step_info *info) {
    if (!e || !info) return zinf_fail(ZINF_ERR_INVAL, "engine step: e and info are required");
    if (e->micro == 0) return zinf_fail(ZINF_ERR_INVAL, "engine step: no backward since the last step");
    return step_run(e, info);
}

double zinf_engine_loss_scale(const zinf_engine *e) { return e ? e->scaler.scale : 1.0; }

// ---- full values ----

// The parameter called name, or NULL after failing with a message naming it.
static const zinf_param_info *find_param(const zinf_engine *e, const char *name, int *mod) {
    const zinf_param_info *p = zinf_model_find_param(e->m, name, mod);
    if (!p)
        zinf_fail(ZINF_ERR_INVAL, "engine: \"%s\" is not a parameter of this model (e.g. \"h.0.attn.c_attn.weight\")",
                  name ? name : "(null)");
    return p;
}

// The optimizer tier's index of a state, or -1 for an unknown kind.
static int state_index(zinf_state_kind kind) {
    switch (kind) {
    case ZINF_STATE_PARAM: return ST_MASTER;
    case ZINF_STATE_EXP_AVG: return ST_EXP_AVG;
    case ZINF_STATE_EXP_AVG_SQ: return ST_EXP_AVG_SQ;
    case ZINF_STATE_GRAD: return ST_GRAD;
    }
    return -1;
}

// The part of parameter p (elements [a, b) of its module) this rank holds: [*lo, *hi).
static bool owned(const zinf_engine *e, int mod, const zinf_param_info *p, size_t *lo, size_t *hi) {
    const mod_layout *l = &e->lay[mod];
    *lo = p->offset > l->part_lo ? p->offset : l->part_lo;
    *hi = p->offset + p->numel < l->part_lo + l->part_n ? p->offset + p->numel : l->part_lo + l->part_n;
    return *lo < *hi;
}

zinf_status zinf_engine_get_full(zinf_engine *e, const char *name, zinf_state_kind kind, float *out) {
    int mod;
    const zinf_param_info *p = e && out ? find_param(e, name, &mod) : NULL;
    if (!p) return e && out ? ZINF_ERR_INVAL : zinf_fail(ZINF_ERR_INVAL, "engine get_full: e and out are required");
    int s = state_index(kind);
    if (s < 0) return zinf_fail(ZINF_ERR_INVAL, "engine get_full: unknown state kind %d", (int)kind);
    ZINF_CHECK(engine_sync(e));
    const mod_layout *l = &e->lay[mod];
    size_t lo, hi;
    memset(out, 0, p->numel * sizeof *out);
    if (owned(e, mod, p, &lo, &hi))
        ZINF_CHECK(tier_read(e, s, l->part_off + (lo - l->part_lo), hi - lo, out + (lo - p->offset)));
    // Each element is held by one rank; the others add zeros, which changes no bits.
    if (e->stage > 0 && e->world > 1) ZINF_CHECK(zinf_comm_allreduce_f32(e->comm, out, p->numel));
    if (kind == ZINF_STATE_GRAD && e->scaler.scale != 1.0)
        for (size_t i = 0; i < p->numel; i++)
            out[i] = (float)(out[i] / e->scaler.scale);
    return ZINF_OK;
}

zinf_status zinf_engine_set_full(zinf_engine *e, const char *name, zinf_state_kind kind, const float *in) {
    int mod;
    const zinf_param_info *p = e && in ? find_param(e, name, &mod) : NULL;
    if (!p) return e && in ? ZINF_ERR_INVAL : zinf_fail(ZINF_ERR_INVAL, "engine set_full: e and in are required");
    int s = state_index(kind);
    if (s < 0) return zinf_fail(ZINF_ERR_INVAL, "engine set_full: unknown state kind %d", (int)kind);
    if (kind == ZINF_STATE_GRAD && e->scaler.scale != 1.0)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "engine set_full: setting gradients under fp16 loss scaling");
    ZINF_CHECK(engine_sync(e));
    const mod_layout *l = &e->lay[mod];
    size_t lo, hi;
    if (owned(e, mod, p, &lo, &hi))
        ZINF_CHECK(tier_write(e, s, l->part_off + (lo - l->part_lo), hi - lo, in + (lo - p->offset)));
    if (kind == ZINF_STATE_PARAM) {
        // The 16-bit copy: the whole parameter at stages 0-2, this rank's slice at 3.
        size_t a = p->offset, b = p->offset + p->numel;
        if (e->stage == 3) {
            a = a > l->part_lo ? a : l->part_lo;
            b = b < l->part_lo + l->slice ? b : l->part_lo + l->slice;
        }
        void *tmp = a < b ? malloc((b - a) * e->es) : NULL;
        if (a < b && !tmp) return zinf_fail(ZINF_ERR_NOMEM, "engine set_full: out of memory");
        for (size_t i = a; i < b; i++)
            dt_store(tmp, e->dt, i - a, in[i - p->offset]);
        zinf_status st = a < b ? ptier_write(e, mod, a, b - a, tmp) : ZINF_OK;
        free(tmp);
        ZINF_CHECK(st);
    }
    return zinf_stream_sync(e->cs);
}

zinf_status zinf_engine_weights_digest(zinf_engine *e, char out[17]) {
    if (!e || !out) return zinf_fail(ZINF_ERR_INVAL, "engine digest: e and out are required");
    size_t most = 0;
    for (int i = 0; i < e->nmod; i++) {
        const zinf_module_info *mi = zinf_model_module(e->m, i);
        for (int j = 0; j < mi->nparams; j++)
            if (mi->params[j].numel > most) most = mi->params[j].numel;
    }
    float *buf = malloc(most * sizeof *buf);
    if (!buf) return zinf_fail(ZINF_ERR_NOMEM, "engine digest: out of memory");
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a over the bytes, in model order
    zinf_status st = ZINF_OK;
    for (int i = 0; st == ZINF_OK && i < e->nmod; i++) {
        const zinf_module_info *mi = zinf_model_module(e->m, i);
        for (int j = 0; st == ZINF_OK && j < mi->nparams; j++) {
            st = zinf_engine_get_full(e, mi->params[j].name, ZINF_STATE_PARAM, buf);
            const unsigned char *b = (const unsigned char *)buf;
            for (size_t k = 0; st == ZINF_OK && k < mi->params[j].numel * sizeof *buf; k++)
                h = (h ^ b[k]) * 0x100000001b3ull;
        }
    }
    free(buf);
    if (st == ZINF_OK) snprintf(out, 17, "%016llx", (unsigned long long)h);
    return st;
}

void zinf_engine_memory_get(const zinf_engine *e, zinf_engine_memory *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    size_t p16 = 0;
    for (int i = 0; i < e->nmod; i++)
        p16 += e->stage == 3 ? e->lay[i].slice : e->lay[i].padded;
    out->params16 = (int64_t)(p16 * e->es);
    out->gathered_max = e->co.live_peak_bytes;
    out->master = (int64_t)(e->npart * sizeof(float));
    out->optim_states = 2 * out->master;
    out->grads32 = out->master;
    out->activations = e->act_bytes;
    out->reduce_bufs = (int64_t)(2 * e->bucket_cap * sizeof(float));
    out->optimizer_tier = e->otier;
    out->staging = (int64_t)e->h_comm_bytes;
    out->host = e->host_bytes;
    out->params_tier = e->ptier;
    size_t host_n = e->ptier == ZINF_OFFLOAD_NVME ? e->resident_n : e->ptier == ZINF_OFFLOAD_CPU ? e->npart : 0;
    out->params_host = (int64_t)(host_n * e->es);
    out->params_resident = e->nresident;
    out->param_buffers = e->npbuf;
    out->param_buffer_bytes = (int64_t)(e->pbuf_elems * e->es);
    out->pinned = e->pinned_used;
    out->pinned_budget = e->pinned_budget;
    out->host_total = e->host_used;
    out->nvme = (int64_t)((e->swap ? zinf_swap_bytes(e->swap) : 0) + (e->pswap ? zinf_swap_bytes(e->pswap) : 0));
    out->subgroups = e->nsg;
    out->subgroup_max = (int64_t)e->sg_max;
    zinf_device_mem mem;
    zinf_device_get_mem(e->dev, &mem);
    out->device_in_use = (int64_t)mem.in_use;
    out->device_peak = (int64_t)mem.peak;
    out->device_capacity = (int64_t)mem.capacity;
    out->partition_numel = (int64_t)e->npart;
    out->model_numel = e->model_numel;
}
