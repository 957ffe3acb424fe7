/* memplan.c -- memory plan table. */
#include "memplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"

MemPlan memplan_of(const Arena *a, int n) {
    MemPlan m = {0};
    for (int i = 0; i < n; i++)
        if (a[i].high) memplan_add(&m, a[i].name, a[i].place, a[i].high);
    return m;
}
void memplan_add(MemPlan *m, const char *name, Place place, int64_t bytes) {
    for (int i = 0; i < m->n; i++)
        if (m->name[i] == name && m->place[i] == place) { m->bytes[i] += bytes; return; }
    if (m->n < MEMPLAN_ROWS) { m->name[m->n] = name; m->place[m->n] = place; m->bytes[m->n++] = bytes; }
}
static int64_t total_on(const MemPlan *m, Place p) {
    int64_t t = 0;
    for (int i = 0; i < m->n; i++)
        if (m->place[i] == p) t += m->bytes[i];
    return t;
}
int64_t memplan_peak(const MemPlan *m) { return total_on(m, ON_GPU) + MEMPLAN_RUNTIME_RESERVE; }
int64_t memplan_host(const MemPlan *m) { return total_on(m, ON_HOST); }
int memplan_inputs_refused;
/* a plan's verdict: "fits" only for a run that can go ahead */
static const char *verdict(int fits) {
    return !fits ? "DOES NOT FIT" : memplan_inputs_refused ? "fits, but the run is refused below (its inputs)" : "fits";
}

void memplan_print(const MemPlan *m, FILE *f, const char *title, int64_t capacity) {
    const double G = 1 << 30;
    fprintf(f, "memory plan per GPU (%s)\n", title);
    for (int i = 0; i < m->n; i++)
        if (m->place[i] == ON_GPU) fprintf(f, "  %-30s %9.3f GiB\n", m->name[i], m->bytes[i] / G);
    fprintf(f, "  %-30s %9.3f GiB\n", "CUDA/cuBLAS/cuDNN runtime", MEMPLAN_RUNTIME_RESERVE / G);
    const int64_t total = memplan_peak(m);
    fprintf(f, "  %-30s %9.3f GiB", "total (peak)", total / G);
    if (capacity > 0) fprintf(f, "  of %.1f GiB on the device: %s", capacity / G, verdict(total <= capacity));
    fprintf(f, "\n");
    if (!memplan_host(m)) return;
    fprintf(f, "pinned host memory per rank\n");
    for (int i = 0; i < m->n; i++)
        if (m->place[i] == ON_HOST) fprintf(f, "  %-30s %9.3f GiB\n", m->name[i], m->bytes[i] / G);
    fprintf(f, "  %-30s %9.3f GiB\n", "total", memplan_host(m) / G);
}
int64_t host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "MemAvailable:", 13)) { kb = atoll(line + 13); break; }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

int kept_parse(const char *s, int64_t L, int64_t *want, int *counted, int64_t *gpu, int64_t *host,
               int64_t *asked_host, char *err, size_t n) {
    *want = *gpu = *host = *asked_host = 0;
    *counted = 0;
    if (!s || !strcmp(s, "none")) return 1; /* nothing kept */
    if (strncmp(s, "gpu:", 4) && strncmp(s, "host:", 5)) { /* alone or all, auto, or N */
        *counted = strcmp(s, "auto") != 0;
        if (!*s || !strcmp(s, "all")) *want = L;
        else if (*counted && (cli_parse_int(s, want) || *want < 0)) {
            snprintf(err, n, "--keep-attn %s: not all, none, auto, a count, or gpu:N,host:M", s);
            return -1;
        }
        *want = !*counted || *want > L ? L : *want;
        return 0;
    }
    char w[128];
    snprintf(w, sizeof w, "%s", s);
    for (char *save, *t = strtok_r(w, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int64_t *c = !strncmp(t, "gpu:", 4) ? gpu : !strncmp(t, "host:", 5) ? host : NULL;
        if (!c || cli_parse_int(strchr(t, ':') + 1, c) || *c < 0) {
            snprintf(err, n, "--keep-attn %s: \"%s\" is not gpu:N or host:M", s, t);
            return -1;
        }
    }
    *asked_host = *host;
    *gpu = *gpu < L ? *gpu : L; /* a forced split, clamped to the layers there are */
    *host = *host < L - *gpu ? *host : L - *gpu;
    return 1;
}

static int64_t at_most(int64_t a, int64_t b) { return a < b ? a : b; }

void kept_split(int64_t want, int64_t g, int64_t room, int host_ok, int counted, int64_t *gpu, int64_t *host) {
    *host = 0;
    if (want <= g || !host_ok || (g < 2 && !counted)) { /* all on the GPU (no room for the host's slots) */
        *gpu = counted ? want : at_most(want, g);
        return;
    }
    const int64_t g2 = g > 2 ? g - 2 : 0, h = counted ? want - g2 : at_most(want - g2, room);
    if (g2 + h > g) *gpu = g2, *host = h;
    else *gpu = g;
}

int64_t layers_in(double room, double per, int64_t L) {
    return room <= 0 ? 0 : room / per >= (double)L ? L : (int64_t)(room / per);
}

void kept_report(int64_t gpu, int64_t host, int64_t layers, int64_t seq, int64_t q_width, int P) {
    const double tflop = 2.0 * (double)seq * (double)seq * (double)q_width / P / 1e12;
    say("attention kept: %lld layers on the GPU, %lld on the host, %lld recompute; keeping spares %lld attention "
        "forwards of %.1f TFLOP per rank, ~%.1f s a step at %.0f TFLOP/s\n", (long long)gpu, (long long)host,
        (long long)(layers - gpu - host), (long long)(gpu + host), tflop, (double)(gpu + host) * tflop / ATTN_FWD_TFLOPS,
        ATTN_FWD_TFLOPS);
}

void memplan_host_report(const MemPlan *mp, int ranks_per_node, double budget, const char *whence) {
    const double node = (double)memplan_host(mp) * ranks_per_node, G = 1 << 30;
    if (node > 0)
        say("pinned host memory per node (%d rank%s): %.1f GiB of %.1f GiB %s: %s\n", ranks_per_node,
            ranks_per_node == 1 ? "" : "s", node / G, budget / G, whence, verdict(node <= budget));
}

int memplan_machine_planned;

const char *host_budget_whence(int argc, char **argv, int dry_run) {
    return cli_given(argc, argv, "--host-gib")         ? "(--host-gib)"
           : dry_run || memplan_machine_planned ? "(as planned above)"
                                                : "available here";
}

int64_t kept_all_or_none(const char *s, int64_t L, char *err, size_t n) {
    if (!s || !strcmp(s, "none") || !strcmp(s, "0")) return 0;
    if (!*s || !strcmp(s, "all")) return L;
    snprintf(err, n, "--keep-attn %s: this stage keeps every layer's attention (alone or all) or none; a count, auto and "
             "the gpu:N,host:M split come in stage 4 (stage4_offload.c)", s);
    return -1;
}

void memplan_title_tail(char *t, size_t n, int kept, const char *moe_gemm, int rehearsed, int packed) {
    snprintf(t, n, "%s%s%s%s%s", kept ? ", --keep-attn" : "", moe_gemm ? ", MoE GEMMs " : "", moe_gemm ? moe_gemm : "",
             rehearsed ? ", rehearsed" : "", packed ? ", --packing" : "");
}
