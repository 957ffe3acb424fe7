/* numa.c -- a PCI device's CPUs from sysfs, and binding the calling thread (numa.h). */
#define _GNU_SOURCE /* cpu_set_t, pthread_setaffinity_np */
#include "numa.h"

#include <ctype.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cpulist_parse(const char *s, unsigned char *mask, int max) {
    memset(mask, 0, (size_t)max);
    int count = 0;
    const char *p = s;
    while (*p && *p != '\n') {
        char *end;
        const long a = strtol(p, &end, 10);
        if (end == p || a < 0) return -1;
        long b = a;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a) return -1;
            p = end;
        }
        if (b >= max) return -1;
        for (long c = a; c <= b; c++) count += !mask[c], mask[c] = 1;
        if (*p == ',') p++;
        else if (*p && *p != '\n') return -1;
    }
    return count;
}

static int read_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const int ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

int numa_device_cpus(const char *root, const char *bus_id, unsigned char *mask, int *node) {
    char id[64], path[512], line[8192];
    snprintf(id, sizeof id, "%s", bus_id);
    for (char *c = id; *c; c++) *c = (char)tolower((unsigned char)*c);
    snprintf(path, sizeof path, "%s/bus/pci/devices/%s/numa_node", root, id);
    *node = read_line(path, line, sizeof line) ? -1 : atoi(line);
    snprintf(path, sizeof path, "%s/bus/pci/devices/%s/local_cpulist", root, id);
    if (read_line(path, line, sizeof line)) return -1;
    return cpulist_parse(line, mask, NUMA_MAX_CPUS);
}

int numa_bind_thread(const unsigned char *mask, char *desc, size_t n) {
    cpu_set_t now, want;
    CPU_ZERO(&want);
    if (pthread_getaffinity_np(pthread_self(), sizeof now, &now)) return 0;
    int count = 0, first = -1, last = -1;
    for (int c = 0; c < NUMA_MAX_CPUS && c < CPU_SETSIZE; c++)
        if (mask[c] && CPU_ISSET(c, &now)) {
            CPU_SET(c, &want);
            count++;
            if (first < 0) first = c;
            last = c;
        }
    if (!count || count == CPU_COUNT(&now)) { /* nothing in common, or already exactly there */
        snprintf(desc, n, "%d CPUs, left as they were", CPU_COUNT(&now));
        return 0;
    }
    if (pthread_setaffinity_np(pthread_self(), sizeof want, &want)) return 0;
    snprintf(desc, n, "bound to %d CPUs (%d..%d)", count, first, last);
    return count;
}
