// What the optimizer kernels dispatch on: SIMD level from cpuid and the OS's XSAVE
// state (Intel SDM vol. 1, 13.3 and 15.2), core and NUMA layout from sysfs and libnuma.
#include <ctype.h>
#include <dirent.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "internal.h"

const char *zinf_simd_name(zinf_simd s) {
    switch (s) {
    case ZINF_SIMD_SCALAR: return "scalar";
    case ZINF_SIMD_AVX2: return "avx2";
    case ZINF_SIMD_AVX512: return "avx512";
    }
    return "unknown";
}

// ---- SIMD ----
#if defined(__x86_64__) || defined(__i386__)

// XCR0 state components (SDM vol. 1, 13.1): the CPU having an instruction set is not
// enough, the OS must also save and restore its registers on context switch.
enum {
    XCR0_SSE = 1u << 1,
    XCR0_YMM = 1u << 2,
    XCR0_OPMASK = 1u << 5,
    XCR0_ZMM_HI256 = 1u << 6,
    XCR0_HI16_ZMM = 1u << 7,
    XCR0_TILECFG = 1u << 17,
    XCR0_TILEDATA = 1u << 18,
};

// xgetbv as a raw instruction: the _xgetbv intrinsic needs -mxsave on the whole file.
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void probe_simd(zinf_cpu_info *out) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return;
    bool fma = c & bit_FMA, f16c = c & bit_F16C, avx = c & bit_AVX;
    // Without OSXSAVE, xgetbv faults and no AVX register state is enabled.
    uint64_t xcr0 = (c & bit_OSXSAVE) ? xgetbv0() : 0;
    uint64_t ymm = XCR0_SSE | XCR0_YMM, zmm = ymm | XCR0_OPMASK | XCR0_ZMM_HI256 | XCR0_HI16_ZMM;
    bool os_ymm = (xcr0 & ymm) == ymm, os_zmm = (xcr0 & zmm) == zmm;
    bool os_tiles = (xcr0 & (XCR0_TILECFG | XCR0_TILEDATA)) == (XCR0_TILECFG | XCR0_TILEDATA);

    bool avx2 = false, avx512f = false, avx512bw = false, avx512vl = false, amx_bf16 = false;
    bool avx512_bf16 = false;
    // __get_cpuid_count returns 0 when the CPU has no leaf 7.
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        unsigned subleaves = a; // EAX of subleaf 0: the highest subleaf
        avx2 = b & bit_AVX2;
        avx512f = b & bit_AVX512F;
        avx512bw = b & bit_AVX512BW;
        avx512vl = b & bit_AVX512VL;
        amx_bf16 = d & (1u << 22);
        if (subleaves >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) avx512_bf16 = a & (1u << 5);
    }

    // F16C is VEX-encoded, so it needs the YMM state like AVX does (SDM vol. 1, 14.4.1).
    out->f16c = f16c && os_ymm;
    bool level_avx2 = os_ymm && avx && avx2 && fma && f16c;
    bool level_avx512 = level_avx2 && os_zmm && avx512f && avx512bw && avx512vl;
    out->simd = level_avx512 ? ZINF_SIMD_AVX512 : level_avx2 ? ZINF_SIMD_AVX2 : ZINF_SIMD_SCALAR;
    // The same dependency chain the kernel applies before it lists the flag in cpuinfo.
    out->avx512_bf16 = avx512_bf16 && os_zmm && avx512f && avx512vl;
    out->amx_bf16 = amx_bf16 && os_tiles;
}

// The brand string (leaves 0x80000002..4); Intel pads it with leading spaces.
static void probe_model(zinf_cpu_info *out) {
    unsigned regs[12];
    if (__get_cpuid_max(0x80000000, NULL) < 0x80000004) return;
    for (unsigned i = 0; i < 3; i++)
        __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    char brand[sizeof regs + 1];
    memcpy(brand, regs, sizeof regs);
    brand[sizeof regs] = '\0';
    char *s = brand;
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    s[n] = '\0';
    snprintf(out->model, sizeof out->model, "%s", s);
}

#else

static void probe_simd(zinf_cpu_info *out) { (void)out; }
static void probe_model(zinf_cpu_info *out) { (void)out; }

#endif

// ---- topology ----
typedef struct {
    long package, core;
} core_id;

static int cmp_core(const void *pa, const void *pb) {
    const core_id *a = pa, *b = pb;
    if (a->package != b->package) return a->package < b->package ? -1 : 1;
    return (a->core > b->core) - (a->core < b->core);
}

static bool read_long(const char *path, long *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fscanf(f, "%ld", v) == 1;
    fclose(f);
    return ok;
}

bool cpu_core_of(long cpu, long *package, long *core) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id", cpu);
    if (!read_long(path, package)) return false;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/core_id", cpu);
    return read_long(path, core);
}

// Distinct (package, core) pairs of the online CPUs (offline ones have no topology
// directory). 0 when sysfs does not say, and the caller falls back.
static int count_physical_cores(void) {
    DIR *dir = opendir("/sys/devices/system/cpu");
    if (!dir) return 0;
    core_id *ids = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        // cpu0, cpu1, ... but not cpufreq, cpuidle
        if (strncmp(e->d_name, "cpu", 3) != 0 || !isdigit((unsigned char)e->d_name[3])) continue;
        char *end;
        long cpu = strtol(e->d_name + 3, &end, 10);
        if (*end) continue;
        core_id id;
        if (!cpu_core_of(cpu, &id.package, &id.core)) continue;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            core_id *grown = realloc(ids, ncap * sizeof *ids);
            if (!grown) {
                n = 0;
                break;
            }
            ids = grown;
            cap = ncap;
        }
        ids[n++] = id;
    }
    closedir(dir);
    int distinct = 0;
    if (n > 0) {
        qsort(ids, n, sizeof *ids, cmp_core);
        distinct = 1;
        for (size_t i = 1; i < n; i++)
            distinct += cmp_core(&ids[i - 1], &ids[i]) != 0;
    }
    free(ids);
    return distinct;
}

// The CPUs in a sysfs list ("0-7,16-23"); 0 when it does not parse.
static int count_cpu_list(const char *list) {
    int n = 0;
    for (const char *p = list; *p && *p != '\n';) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p) return 0;
        if (*end == '-') {
            p = end + 1;
            hi = strtol(p, &end, 10);
            if (end == p || hi < lo) return 0;
        }
        n += (int)(hi - lo + 1);
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

// cpu0's highest-level cache ("32768K") times the caches of that level (the online
// CPUs over those sharing cpu0's; one where sysfs does not list them, never more than
// there are); 0 when sysfs does not say.
static int64_t last_level_cache(int online) {
    int64_t bytes = 0;
    long best_level = 0;
    int sharing = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], text[4096];
        long level;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (!read_long(path, &level)) break;
        if (level < best_level) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        long size = 0;
        char unit = 0;
        int got = f ? fscanf(f, "%ld%c", &size, &unit) : 0;
        if (f) fclose(f);
        if (got < 1 || size <= 0) continue;
        int shift = unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/shared_cpu_list", i);
        f = fopen(path, "r");
        int n = f && fgets(text, sizeof text, f) ? count_cpu_list(text) : 0;
        if (f) fclose(f);
        best_level = level, bytes = (int64_t)size << shift, sharing = n > 0 ? n : online;
    }
    return sharing > 0 ? bytes * ((online + sharing - 1) / sharing) : 0;
}

void zinf_cpu_probe(zinf_cpu_info *out) {
    memset(out, 0, sizeof *out);
    probe_simd(out);
    probe_model(out);
    if (!out->model[0]) snprintf(out->model, sizeof out->model, "unknown");
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    out->logical_cpus = online > 0 ? (int)online : 1;
    int cores = count_physical_cores();
    out->physical_cores = cores > 0 ? cores : out->logical_cpus;
    out->numa_nodes = numa_available() < 0 ? 1 : numa_num_configured_nodes();
    if (out->numa_nodes < 1) out->numa_nodes = 1;
    out->last_level_cache_bytes = last_level_cache(out->logical_cpus);
}
