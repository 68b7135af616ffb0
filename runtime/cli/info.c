// `zinf info`: every probe the engine plans from (CPU, memory, io_uring, paths, CUDA,
// BLAS, MPI, NCCL), as an aligned table or one line of JSON.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

typedef struct {
    const char *dir;
    zinf_aio_path_info info;
} path_probe;

typedef struct {
    zinf_gpu_device_info info;
    zinf_status st;
    char error[256]; // the probe's last error when st is not ZINF_OK
} device_probe;

typedef struct {
    zinf_cpu_info cpu;
    zinf_host_mem mem;
    zinf_status mem_st;
    char mem_error[256];
    zinf_aio_caps aio;
    path_probe *paths;
    int npaths;
    zinf_gpu_runtime_info gpu;
    int cudnn_version; // 0: not loaded, for cudnn_why
    char cudnn_why[256];
    device_probe *devices;
    zinf_comm_info comm;
} facts;

static zinf_status collect(facts *f) {
    zinf_cpu_probe(&f->cpu);
    f->mem_st = zinf_host_mem_probe(&f->mem);
    if (f->mem_st != ZINF_OK) snprintf(f->mem_error, sizeof f->mem_error, "%s", zinf_last_error());
    zinf_aio_probe(&f->aio);
    zinf_comm_probe(&f->comm);
    zinf_gpu_runtime_probe(&f->gpu);
    f->cudnn_version = zinf_gpu_cudnn_version(f->cudnn_why, sizeof f->cudnn_why);
    if (f->gpu.device_count == 0) return ZINF_OK;
    f->devices = calloc((size_t)f->gpu.device_count, sizeof *f->devices);
    if (!f->devices) return zinf_fail(ZINF_ERR_NOMEM, "out of memory for %d device entries", f->gpu.device_count);
    // A device that fails its probe is reported in its entry; the others still count.
    for (int i = 0; i < f->gpu.device_count; i++) {
        device_probe *d = &f->devices[i];
        d->st = zinf_gpu_device_probe(i, &d->info);
        if (d->st != ZINF_OK) snprintf(d->error, sizeof d->error, "%s", zinf_last_error());
    }
    return ZINF_OK;
}

// ---- JSON ----

static json_t *json_str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *json_cpu(const zinf_cpu_info *c) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(c->model));
    json_object_set_new(o, "logical_cpus", json_integer(c->logical_cpus));
    json_object_set_new(o, "physical_cores", json_integer(c->physical_cores));
    json_object_set_new(o, "numa_nodes", json_integer(c->numa_nodes));
    json_object_set_new(o, "last_level_cache_bytes", json_integer(c->last_level_cache_bytes));
    json_object_set_new(o, "simd", json_string(zinf_simd_name(c->simd)));
    json_object_set_new(o, "avx512_bf16", json_boolean(c->avx512_bf16));
    json_object_set_new(o, "amx_bf16", json_boolean(c->amx_bf16));
    json_object_set_new(o, "f16c", json_boolean(c->f16c));
    return o;
}

static json_t *json_memory(const facts *f) {
    json_t *o = json_object();
    if (f->mem_st != ZINF_OK) {
        json_object_set_new(o, "error", json_string(f->mem_error));
        return o;
    }
    const zinf_host_mem *m = &f->mem;
    json_object_set_new(o, "total_bytes", json_integer((json_int_t)m->total_bytes));
    json_object_set_new(o, "available_bytes", json_integer((json_int_t)m->available_bytes));
    json_object_set_new(o, "memlock_limit_bytes",
                        m->memlock_limit == UINT64_MAX ? json_null() : json_integer((json_int_t)m->memlock_limit));
    json_object_set_new(o, "transparent_hugepages", json_string(m->thp));
    return o;
}

static json_t *json_io_uring(const zinf_aio_caps *a) {
    json_t *o = json_object();
    json_object_set_new(o, "available", json_boolean(a->io_uring));
    json_object_set_new(o, "error", json_str_or_null(a->io_uring ? NULL : strerror(a->setup_errno)));
    json_t *features = json_array();
    char names[512], *save = NULL;
    zinf_aio_feature_names(a->features, names, sizeof names);
    for (char *t = strtok_r(names, " ", &save); t; t = strtok_r(NULL, " ", &save))
        json_array_append_new(features, json_string(t));
    json_object_set_new(o, "features", features);
    json_object_set_new(o, "single_issuer", json_boolean(a->single_issuer));
    json_object_set_new(o, "defer_taskrun", json_boolean(a->defer_taskrun));
    json_object_set_new(o, "coop_taskrun", json_boolean(a->coop_taskrun));
    json_object_set_new(o, "sqpoll", json_boolean(a->sqpoll));
    json_object_set_new(o, "read", json_boolean(a->op_read));
    json_object_set_new(o, "write", json_boolean(a->op_write));
    json_object_set_new(o, "read_fixed", json_boolean(a->op_read_fixed));
    json_object_set_new(o, "fallocate", json_boolean(a->op_fallocate));
    return o;
}

static json_t *json_path(const path_probe *p) {
    const zinf_aio_path_info *i = &p->info;
    json_t *o = json_object();
    json_object_set_new(o, "path", json_string(p->dir));
    json_object_set_new(o, "fs_type", json_string(i->fs_type));
    json_object_set_new(o, "free_bytes", json_integer((json_int_t)i->free_bytes));
    json_object_set_new(o, "total_bytes", json_integer((json_int_t)i->total_bytes));
    json_object_set_new(o, "logical_block_size", i->logical_block ? json_integer(i->logical_block) : json_null());
    json_object_set_new(o, "dio_align", json_integer(i->dio_align));
    json_object_set_new(o, "o_direct", json_boolean(i->direct));
    json_object_set_new(o, "o_direct_error", json_str_or_null(i->direct ? NULL : strerror(i->direct_errno)));
    return o;
}

static json_t *json_device(const device_probe *d) {
    const zinf_gpu_device_info *i = &d->info;
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", i->cc_major, i->cc_minor);
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(i->index));
    json_object_set_new(o, "name", json_string(i->name));
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t)i->memory_bytes));
    json_object_set_new(o, "compute_capability", json_string(cc));
    json_object_set_new(o, "multiprocessors", json_integer(i->multiprocessors));
    json_object_set_new(o, "pci_bus_id", json_string(i->pci_bus_id));
    json_object_set_new(o, "pcie_gen", i->pcie_gen ? json_integer(i->pcie_gen) : json_null());
    json_object_set_new(o, "pcie_width", i->pcie_width ? json_integer(i->pcie_width) : json_null());
    json_object_set_new(o, "kernels_run", json_boolean(i->kernels_run));
    json_object_set_new(o, "error", json_str_or_null(d->st == ZINF_OK ? NULL : d->error));
    return o;
}

static json_t *json_facts(const facts *f) {
    json_t *root = json_object();
    json_object_set_new(root, "version", json_string(ZINF_VERSION));
    json_object_set_new(root, "cpu", json_cpu(&f->cpu));
    json_object_set_new(root, "memory", json_memory(f));
    json_object_set_new(root, "io_uring", json_io_uring(&f->aio));

    json_t *paths = json_array();
    for (int i = 0; i < f->npaths; i++)
        json_array_append_new(paths, json_path(&f->paths[i]));
    json_object_set_new(root, "paths", paths);

    const zinf_gpu_runtime_info *g = &f->gpu;
    json_t *cuda = json_object();
    json_object_set_new(cuda, "built", json_boolean(g->built));
    json_object_set_new(cuda, "runtime_version", json_integer(g->runtime_version));
    json_object_set_new(cuda, "driver_version", json_integer(g->driver_version));
    json_object_set_new(cuda, "device_count", json_integer(g->device_count));
    json_object_set_new(cuda, "status", json_string(g->status));
    json_object_set_new(cuda, "cudnn_version", json_integer(f->cudnn_version));
    json_object_set_new(cuda, "cudnn_status", json_string(f->cudnn_version ? "ok" : f->cudnn_why));
    json_t *devices = json_array();
    for (int i = 0; i < g->device_count; i++)
        json_array_append_new(devices, json_device(&f->devices[i]));
    json_object_set_new(cuda, "devices", devices);
    json_object_set_new(root, "cuda", cuda);

    json_t *blas = json_object();
    json_object_set_new(blas, "config", json_string(zinf_gpu_host_blas_config()));
    json_object_set_new(blas, "threads", json_integer(zinf_gpu_host_blas_threads()));
    json_object_set_new(root, "blas", blas);

    json_t *mpi = json_object();
    json_object_set_new(mpi, "built", json_boolean(f->comm.mpi));
    json_object_set_new(mpi, "version", json_str_or_null(f->comm.mpi ? f->comm.mpi_version : NULL));
    json_object_set_new(root, "mpi", mpi);
    json_t *nccl = json_object();
    json_object_set_new(nccl, "built", json_boolean(f->comm.nccl));
    json_object_set_new(nccl, "version", f->comm.nccl ? json_integer(f->comm.nccl_version) : json_null());
    json_object_set_new(root, "nccl", nccl);
    return root;
}

// ---- table ----

#define ROW(label, ...)                                                                                                \
    do {                                                                                                               \
        printf("%-14s", label);                                                                                        \
        printf(__VA_ARGS__);                                                                                           \
        putchar('\n');                                                                                                 \
    } while (0)

static const char *yn(bool b) { return b ? "yes" : "no"; }

// CUDA and NCCL versions are major*1000 + minor*10 and major*10000 + minor*100 + patch.
static void print_table(const facts *f) {
    char a[32], b[32];
    const zinf_cpu_info *c = &f->cpu;
    ROW("zinf", "%s", ZINF_VERSION);
    ROW("cpu", "%s", c->model);
    ROW("", "%d logical CPUs, %d cores, %d NUMA node%s, last-level caches %s", c->logical_cpus, c->physical_cores,
        c->numa_nodes, c->numa_nodes == 1 ? "" : "s",
        c->last_level_cache_bytes ? zinf_size_format((uint64_t)c->last_level_cache_bytes, a, sizeof a) : "unknown");
    ROW("simd", "%s (f16c %s, avx512_bf16 %s, amx_bf16 %s)", zinf_simd_name(c->simd), yn(c->f16c), yn(c->avx512_bf16),
        yn(c->amx_bf16));

    if (f->mem_st != ZINF_OK) {
        ROW("memory", "unknown: %s", f->mem_error);
    } else {
        const zinf_host_mem *m = &f->mem;
        ROW("memory", "%s total, %s available", zinf_size_format(m->total_bytes, a, sizeof a),
            zinf_size_format(m->available_bytes, b, sizeof b));
        ROW("memlock", "%s",
            m->memlock_limit == UINT64_MAX ? "unlimited" : zinf_size_format(m->memlock_limit, a, sizeof a));
        ROW("hugepages", "transparent: %s", m->thp);
    }

    const zinf_aio_caps *io = &f->aio;
    if (!io->io_uring) {
        ROW("io_uring", "unavailable: %s", strerror(io->setup_errno));
    } else {
        char names[512];
        ROW("io_uring", "single_issuer %s, defer_taskrun %s, coop_taskrun %s, sqpoll %s", yn(io->single_issuer),
            yn(io->defer_taskrun), yn(io->coop_taskrun), yn(io->sqpoll));
        ROW("", "ops: read %s, write %s, read_fixed %s, fallocate %s", yn(io->op_read), yn(io->op_write),
            yn(io->op_read_fixed), yn(io->op_fallocate));
        ROW("", "features: %s", zinf_aio_feature_names(io->features, names, sizeof names));
    }

    for (int i = 0; i < f->npaths; i++) {
        const zinf_aio_path_info *p = &f->paths[i].info;
        char block[32] = "unknown";
        if (p->logical_block) zinf_size_format(p->logical_block, block, sizeof block);
        ROW("path", "%s", f->paths[i].dir);
        ROW("", "%s, %s free of %s, block %s", p->fs_type, zinf_size_format(p->free_bytes, a, sizeof a),
            zinf_size_format(p->total_bytes, b, sizeof b), block);
        if (p->direct)
            ROW("", "O_DIRECT yes, aligned to %s", zinf_size_format(p->dio_align, a, sizeof a));
        else
            ROW("", "O_DIRECT no: %s", strerror(p->direct_errno));
    }

    const zinf_gpu_runtime_info *g = &f->gpu;
    if (!g->built) {
        ROW("cuda", "%s", g->status);
    } else {
        snprintf(a, sizeof a, "%d.%d", g->driver_version / 1000, g->driver_version % 1000 / 10);
        ROW("cuda", "runtime %d.%d, driver %s: %s", g->runtime_version / 1000, g->runtime_version % 1000 / 10,
            g->driver_version ? a : "none", g->status);
    }
    if (g->built && f->cudnn_version)
        ROW("cudnn", "%d.%d.%d, loaded: on a CUDA device device.attention can run its fused attention",
            f->cudnn_version / 10000, f->cudnn_version / 100 % 100, f->cudnn_version % 100);
    else if (g->built)
        ROW("cudnn", "not loaded (%s): device.attention \"auto\" runs zinf's kernels", f->cudnn_why);
    for (int i = 0; i < g->device_count; i++) {
        const device_probe *d = &f->devices[i];
        const zinf_gpu_device_info *di = &d->info;
        char label[24];
        snprintf(label, sizeof label, "  gpu %d", i);
        ROW(label, "%s, %s, cc %d.%d, %d SMs", di->name, zinf_size_format(di->memory_bytes, a, sizeof a), di->cc_major,
            di->cc_minor, di->multiprocessors);
        if (di->pcie_gen)
            ROW("", "PCIe gen%d x%d at %s", di->pcie_gen, di->pcie_width, di->pci_bus_id);
        else
            ROW("", "PCIe link unknown at %s", di->pci_bus_id);
        if (d->st == ZINF_OK)
            ROW("", "test kernel ran");
        else
            ROW("", "error: %s", d->error);
    }

    ROW("blas", "%s, %d threads", zinf_gpu_host_blas_config(), zinf_gpu_host_blas_threads());
    ROW("mpi", "%s", f->comm.mpi ? f->comm.mpi_version : "not built");
    if (f->comm.nccl) {
        int v = f->comm.nccl_version;
        ROW("nccl", "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    } else {
        ROW("nccl", "not built");
    }
}

// ---- command ----

int cli_info(int argc, char **argv) {
    static const struct option opts[] = {
        {"path", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    facts f;
    memset(&f, 0, sizeof f);
    // Every argument could be a --path; one slot each is enough.
    f.paths = calloc((size_t)argc, sizeof *f.paths);
    if (!f.paths) {
        zinf_fail(ZINF_ERR_NOMEM, "out of memory for %d paths", argc);
        return cli_fail("info", CLI_FAIL);
    }
    bool json = false;
    int rc = CLI_OK, opt;
    opterr = 0; // our own messages, through cli_usage
    while ((opt = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (opt == 'p') {
            f.paths[f.npaths++].dir = optarg;
        } else if (opt == 'j') {
            json = true;
        } else if (opt == ':') {
            rc = cli_usage("info", "option %s needs a value", argv[optind - 1]);
            goto done;
        } else if (strncmp(argv[optind - 1], "--", 2) == 0) {
            rc = cli_usage("info", "unknown option %s", argv[optind - 1]);
            goto done;
        } else {
            // a short option may sit inside a cluster ("-jx"); optopt names it
            rc = cli_usage("info", "unknown option -%c", optopt);
            goto done;
        }
    }
    if (optind < argc) {
        rc = cli_usage("info", "unexpected argument %s", argv[optind]);
        goto done;
    }

    // Paths first: a bad --path is a usage error, reported before the slower probes.
    for (int i = 0; i < f.npaths; i++) {
        int ret = zinf_aio_path_probe(f.paths[i].dir, &f.paths[i].info);
        if (ret < 0) {
            // A directory that exists but refused the probe file: say so, since the
            // errno alone ("No such file or directory" from /proc) misleads.
            struct stat st;
            bool dir = stat(f.paths[i].dir, &st) == 0 && S_ISDIR(st.st_mode);
            fprintf(stderr, "zinf info: error: --path %s: %s%s\n", f.paths[i].dir,
                    dir ? "cannot create a file there: " : "", strerror(-ret));
            rc = CLI_USAGE;
            goto done;
        }
    }

    if (collect(&f) != ZINF_OK) {
        rc = cli_fail("info", CLI_FAIL);
        goto done;
    }
    if (json)
        cli_print_json_line(json_facts(&f));
    else
        print_table(&f);

done:
    free(f.devices);
    free(f.paths);
    return rc;
}
