// zinf_cpu_probe against the kernel's own view: the flags, processor lines and model
// name in /proc/cpuinfo, the physical/core ids there, the NUMA nodes in sysfs, and the
// last-level caches' total as util-linux's lscpu counts them.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "zinf.h"

static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

// Whole-word match in the space-separated flags line.
static bool has_flag(const char *flags, const char *name) {
    size_t n = strlen(name);
    for (const char *p = flags; (p = strstr(p, name)); p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
    return false;
}

// lscpu's total of its highest "Ln cache:" line ("L3 cache: 32 MiB (1 instance)"), in
// bytes; 0 when it prints none.
static double lscpu_last_level_cache(void) {
    FILE *p = popen("LC_ALL=C lscpu 2>/dev/null", "r");
    if (!p) return 0;
    char line[512], unit[8];
    int best = 0, level;
    double bytes = 0, v;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "L%d%*[di] cache: %lf %7s", &level, &v, unit) == 3 ||
            sscanf(line, "L%d cache: %lf %7s", &level, &v, unit) == 3) {
            if (level < best) continue;
            double scale = !strcmp(unit, "KiB")   ? 0x1p10
                           : !strcmp(unit, "MiB") ? 0x1p20
                           : !strcmp(unit, "GiB") ? 0x1p30
                                                  : 1;
            best = level, bytes = v * scale;
        }
    pclose(p);
    return bytes;
}

int main(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) {
        printf("cannot read /proc/cpuinfo\n");
        return 1;
    }
    static char line[16384], flags[16384], model[256];
    int processors = 0, pairs = 0;
    long phys = -1;
    static long seen[4096][2];
    bool have_core_ids = false;
    flags[0] = model[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = '\0';
        char *key = trim(line), *val = trim(colon + 1);
        if (strcmp(key, "processor") == 0)
            processors++;
        else if (strcmp(key, "flags") == 0 && !flags[0])
            snprintf(flags, sizeof flags, "%s", val);
        else if (strcmp(key, "model name") == 0 && !model[0])
            snprintf(model, sizeof model, "%s", val);
        else if (strcmp(key, "physical id") == 0)
            phys = atol(val);
        else if (strcmp(key, "core id") == 0 && phys >= 0) {
            have_core_ids = true;
            long core = atol(val);
            bool dup = false;
            for (int i = 0; i < pairs; i++)
                dup |= seen[i][0] == phys && seen[i][1] == core;
            if (!dup && pairs < 4096) {
                seen[pairs][0] = phys;
                seen[pairs][1] = core;
                pairs++;
            }
        }
    }
    fclose(f);

    zinf_cpu_info c;
    memset(&c, 0x5a, sizeof c); // poison: every field must be written
    zinf_cpu_probe(&c);
    printf("model \"%s\", simd %s, %d logical, %d cores, %d nodes, f16c %d, avx512_bf16 %d, amx_bf16 %d\n", c.model,
           zinf_simd_name(c.simd), c.logical_cpus, c.physical_cores, c.numa_nodes, c.f16c, c.avx512_bf16, c.amx_bf16);

    CHECK(flags[0], "no flags line in /proc/cpuinfo");
    bool avx2 = has_flag(flags, "avx2") && has_flag(flags, "fma") && has_flag(flags, "f16c");
    bool avx512 = avx2 && has_flag(flags, "avx512f") && has_flag(flags, "avx512bw") && has_flag(flags, "avx512vl");
    zinf_simd want = avx512 ? ZINF_SIMD_AVX512 : avx2 ? ZINF_SIMD_AVX2 : ZINF_SIMD_SCALAR;
    CHECK(c.simd == want, "simd %s, /proc/cpuinfo flags say %s", zinf_simd_name(c.simd), zinf_simd_name(want));
    CHECK(c.f16c == has_flag(flags, "f16c"), "f16c %d, cpuinfo %d", c.f16c, has_flag(flags, "f16c"));
    CHECK(c.avx512_bf16 == has_flag(flags, "avx512_bf16"), "avx512_bf16 %d, cpuinfo %d", c.avx512_bf16,
          has_flag(flags, "avx512_bf16"));
    CHECK(c.amx_bf16 == has_flag(flags, "amx_bf16"), "amx_bf16 %d, cpuinfo %d", c.amx_bf16,
          has_flag(flags, "amx_bf16"));
    CHECK(strcmp(zinf_simd_name(ZINF_SIMD_AVX512), "avx512") == 0 &&
              strcmp(zinf_simd_name(ZINF_SIMD_AVX2), "avx2") == 0 &&
              strcmp(zinf_simd_name(ZINF_SIMD_SCALAR), "scalar") == 0,
          "zinf_simd_name");

    CHECK(c.logical_cpus == processors, "logical_cpus %d, cpuinfo has %d processor lines", c.logical_cpus, processors);
    CHECK(c.physical_cores >= 1 && c.physical_cores <= c.logical_cpus, "physical_cores %d of %d logical",
          c.physical_cores, c.logical_cpus);
    if (have_core_ids)
        CHECK(c.physical_cores == pairs, "physical_cores %d, cpuinfo has %d distinct (physical id, core id)",
              c.physical_cores, pairs);

    CHECK(c.model[0] != '\0', "empty model");
    if (model[0]) CHECK(strcmp(c.model, model) == 0, "model \"%s\", cpuinfo \"%s\"", c.model, model);

    DIR *d = opendir("/sys/devices/system/node");
    if (d) {
        int nodes = 0;
        struct dirent *e;
        while ((e = readdir(d)))
            if (strncmp(e->d_name, "node", 4) == 0 && isdigit((unsigned char)e->d_name[4])) nodes++;
        closedir(d);
        CHECK(c.numa_nodes == nodes, "numa_nodes %d, sysfs has %d node dirs", c.numa_nodes, nodes);
    } else {
        CHECK(c.numa_nodes == 1, "numa_nodes %d without /sys/devices/system/node", c.numa_nodes);
    }

    double llc = lscpu_last_level_cache();
    printf("last-level caches %lld bytes, lscpu %.0f\n", (long long)c.last_level_cache_bytes, llc);
    CHECK(llc > 0, "lscpu printed no cache size: util-linux's lscpu is this test's reference");
    CHECK(fabs((double)c.last_level_cache_bytes - llc) <= 0.01 * llc, "last_level_cache_bytes %lld, lscpu %.0f",
          (long long)c.last_level_cache_bytes, llc);

    return check_exit("test_cpu_probe");
}
