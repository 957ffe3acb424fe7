/* cli.c -- table-driven option parsing. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_int(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno) return -1;
    int64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ll << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1ll << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1ll << 30, end++;
    if (*end) return -1;
    *out = (int64_t)v * mul;
    return 0;
}

int cli_parse(int argc, char **argv, const Opt *opts, int n, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        const char *eq = strchr(a, '=');
        size_t klen = eq ? (size_t)(eq - a) : strlen(a);
        const Opt *o = NULL;
        for (int k = 0; k < n; k++)
            if (strlen(opts[k].name) == klen && !strncmp(opts[k].name, a, klen)) o = &opts[k];
        if (!o) {
            snprintf(err, errlen, "unknown option \"%s\" (see --help)", a);
            return -1;
        }
        if (o->type == OPT_FLAG) {
            if (eq) { snprintf(err, errlen, "%s takes no value", o->name); return -1; }
            *(int *)o->dst = 1;
            continue;
        }
        if (o->type == OPT_OPTINT) { /* the next word is its value only if it is an integer */
            int64_t x;
            const char *v = eq ? eq + 1 : i + 1 < argc && !cli_parse_int(argv[i + 1], &x) ? argv[++i] : NULL;
            if (!v) { *(int64_t *)o->dst = -1; continue; }
            if (cli_parse_int(v, (int64_t *)o->dst) || *(int64_t *)o->dst < 0) {
                snprintf(err, errlen, "%s: \"%s\" is not a count (a non-negative integer)", o->name, v);
                return -1;
            }
            continue;
        }
        if (o->type == OPT_OPTSTR) { /* the next word is its value unless it is the next option */
            *(const char **)o->dst = eq ? eq + 1 : i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : "";
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) { snprintf(err, errlen, "%s needs a value (see --help)", o->name); return -1; }
        if (o->type == OPT_STRING) { *(const char **)o->dst = v; continue; }
        if (o->type == OPT_INT) {
            if (cli_parse_int(v, (int64_t *)o->dst)) {
                snprintf(err, errlen, "%s: \"%s\" is not an integer (suffixes K, M, G allowed)", o->name, v);
                return -1;
            }
            continue;
        }
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || *end || errno) { snprintf(err, errlen, "%s: \"%s\" is not a number", o->name, v); return -1; }
        *(double *)o->dst = d;
    }
    return 0;
}

void cli_usage(FILE *f, const char *prog, const char *summary, const Opt *opts, int n) {
    fprintf(f, "usage: %s [options]\n%s\n\noptions:\n", prog, summary);
    for (int k = 0; k < n; k++) {
        const Opt *o = &opts[k];
        char def[96] = "";
        if (o->type == OPT_INT) snprintf(def, sizeof def, " (default %lld)", (long long)*(int64_t *)o->dst);
        else if (o->type == OPT_DOUBLE) snprintf(def, sizeof def, " (default %g)", *(double *)o->dst);
        else if ((o->type == OPT_STRING || o->type == OPT_OPTSTR) && *(const char **)o->dst)
            snprintf(def, sizeof def, " (default %s)", *(const char **)o->dst);
        const char *arg = o->type == OPT_INT      ? " N"
                          : o->type == OPT_OPTINT ? " [N]"
                          : o->type == OPT_OPTSTR ? " [S]"
                          : o->type == OPT_DOUBLE ? " X"
                          : o->type == OPT_STRING ? " S"
                                                  : "";
        char left[64];
        snprintf(left, sizeof left, "%s%s", o->name, arg);
        fprintf(f, "  %-22s %s%s\n", left, o->help, def);
    }
    fprintf(f, "  %-22s %s\n", "--help", "this text");
}

int cli_parse_set(const char *s, const char *const *names, int *const *flags, int n, char *err, size_t errlen) {
    char words[256], all[160] = "all, none";
    for (int k = 0; k < n; k++) snprintf(all + strlen(all), sizeof all - strlen(all), ", %s", names[k]);
    snprintf(words, sizeof words, "%s", s);
    for (int k = 0; k < n; k++) *flags[k] = 0;
    for (char *save, *t = strtok_r(words, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int known = !strcmp(t, "none");
        for (int k = 0; k < n; k++)
            if (!strcmp(t, "all") || !strcmp(t, names[k])) *flags[k] = 1, known = 1;
        if (!known) {
            snprintf(err, errlen, "\"%s\" is not one of %s", t, all);
            return -1;
        }
    }
    return 0;
}
