/* cli.c -- table-driven option parsing. */
#include "cli.h"

#include <errno.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int cli_parse_int(const char *s, int64_t *out) {
    if (!(*s == '-' || (*s >= '0' && *s <= '9'))) return -1; /* strtoll would take " 5" and "+5" */
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno) return -1; /* not a number, or past int64 (ERANGE) */
    int64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ll << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1ll << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1ll << 30, end++;
    if (*end) return -1;
    int64_t r;
    if (__builtin_mul_overflow((int64_t)v, mul, &r)) return -1; /* 17179869185G must not wrap */
    *out = r;
    return 0;
}

int cli_given(int argc, char **argv, const char *name) {
    const size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], name, n) && (argv[i][n] == 0 || argv[i][n] == '=')) return 1;
    return 0;
}

/* ---------------------------------------------------------------- ranges */
typedef struct {
    double lo, hi;      /* the bounds (+-inf: none) */
    int lo_in, hi_in;   /* the bound itself is allowed */
    int64_t ilo, ihi;   /* an integer option's finite bounds, exactly (a double rounds 2^53 + 1) */
} Range;

/* one end of a range: an integer (K/M/G suffixes) for an integer option, a plain number for a
 * double one (the value parser takes no suffixes there, so the help must not show one), or [-]inf */
static int range_end(const char *s, size_t len, int is_int, double *out, int64_t *iout) {
    char w[32];
    if (len == 0 || len >= sizeof w) return -1;
    memcpy(w, s, len);
    w[len] = 0;
    if (!strcmp(w, "inf") || !strcmp(w, "-inf")) { *out = w[0] == '-' ? -INFINITY : INFINITY; return 0; }
    if (is_int) {
        if (cli_parse_int(w, iout)) return -1;
        *out = (double)*iout;
        return 0;
    }
    char *end;
    *out = strtod(w, &end);
    return *end || !isfinite(*out) ? -1 : 0;
}

/* "[2,4G]" -> Range; a malformed range is the table's mistake, not the user's */
static Range parse_range(const Opt *o) {
    const char *r = o->range;
    const size_t len = r ? strlen(r) : 0;
    const char *comma = r ? strchr(r, ',') : NULL;
    Range g = {0, 0, r && r[0] == '[', len && r[len - 1] == ']', INT64_MIN, INT64_MAX};
    const int is_int = o->type == OPT_INT;
    if (!r || len < 5 || !comma || (r[0] != '[' && r[0] != '(') || (r[len - 1] != ']' && r[len - 1] != ')') ||
        range_end(r + 1, (size_t)(comma - r - 1), is_int, &g.lo, &g.ilo) ||
        range_end(comma + 1, (size_t)(r + len - 1 - comma - 1), is_int, &g.hi, &g.ihi) || !(g.lo <= g.hi))
        DIE("option %s: range \"%s\" is not of the form [lo,hi] or (lo,hi)", o->name, r ? r : "(none)");
    return g;
}

static int in_range(double x, Range g) {
    return (g.lo_in ? x >= g.lo : x > g.lo) && (g.hi_in ? x <= g.hi : x < g.hi);
}

/* an integer compared exactly: 2^53 + 1 must not pass a bound of 2^53 by rounding */
static int int_in_range(int64_t x, Range g) {
    if (isfinite(g.hi) && (g.hi_in ? x > g.ihi : x >= g.ihi)) return 0;
    if (isfinite(g.lo) && (g.lo_in ? x < g.ilo : x <= g.ilo)) return 0;
    return 1;
}

/* ---------------------------------------------------------------- parsing */
static const Opt *find(const Opt *opts, int n, const char *a, size_t klen) {
    for (int k = 0; k < n; k++)
        if (strlen(opts[k].name) == klen && !strncmp(opts[k].name, a, klen)) return &opts[k];
    return NULL;
}

/* a number's value: parsed, finite, within the option's range */
static int set_number(const Opt *o, const char *v, char *err, size_t errlen) {
    const Range g = parse_range(o);
    if (o->type == OPT_INT) {
        int64_t x;
        if (cli_parse_int(v, &x)) {
            snprintf(err, errlen, "%s: \"%s\" is not an integer (suffixes K, M, G allowed; at most 2^63-1)", o->name, v);
            return -1;
        }
        if (!int_in_range(x, g)) {
            snprintf(err, errlen, "%s: %s is outside %s", o->name, v, o->range);
            return -1;
        }
        *(int64_t *)o->dst = x;
        return 0;
    }
    char *end;
    errno = 0;
    const double d = strtod(v, &end);
    if (end == v || *end || !isfinite(d)) {
        snprintf(err, errlen, "%s: \"%s\" is not a finite number", o->name, v);
        return -1;
    }
    if (!in_range(d, g)) {
        snprintf(err, errlen, "%s: %s is outside %s", o->name, v, o->range);
        return -1;
    }
    *(double *)o->dst = d;
    return 0;
}

/* v is one of "a|b|c" */
static int one_of(const char *words, const char *v) {
    const size_t n = strlen(v);
    for (const char *w = words; w; w = strchr(w, '|') ? strchr(w, '|') + 1 : NULL)
        if (!strncmp(w, v, n) && (w[n] == '|' || !w[n])) return 1;
    return 0;
}
/* "a|b|c" -> "a, b or c" */
static const char *as_words(const char *words, char *out, size_t n) {
    size_t o = 0;
    for (const char *w = words; *w && o + 8 < n; w++) {
        if (*w != '|') { out[o++] = *w; continue; }
        const int last = !strchr(w + 1, '|');
        o += (size_t)snprintf(out + o, n - o, last ? " or " : ", ");
    }
    out[o < n ? o : n - 1] = 0;
    return out;
}

static int64_t options_digest;
static int64_t digest(const Opt *opts, int n);

int cli_parse(int argc, char **argv, const Opt *opts, int n, char *err, size_t errlen) {
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        longctx_prog = slash ? slash + 1 : argv[0];
    }
    for (int k = 0; k < n; k++) /* every number is bounded: a table entry without a range is a bug */
        if (opts[k].type == OPT_INT || opts[k].type == OPT_DOUBLE) parse_range(&opts[k]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        const char *eq = strchr(a, '=');
        const Opt *o = find(opts, n, a, eq ? (size_t)(eq - a) : strlen(a));
        if (!o) {
            snprintf(err, errlen, "unknown option \"%s\" (see --help)", a);
            return -1;
        }
        if (o->type == OPT_FLAG) {
            if (eq) { snprintf(err, errlen, "%s takes no value", o->name); return -1; }
            *(int *)o->dst = 1;
            continue;
        }
        if (o->type == OPT_OPTSTR) { /* the next word is its value unless it is the next option (a negative
                                        * number is a value: --packing -1 is refused by its own name) */
            const char *nx = i + 1 < argc ? argv[i + 1] : NULL;
            *(const char **)o->dst = eq ? eq + 1 : nx && (nx[0] != '-' || (nx[1] >= '0' && nx[1] <= '9')) ? argv[++i] : "";
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) { snprintf(err, errlen, "%s needs a value (see --help)", o->name); return -1; }
        if (o->type == OPT_STRING) {
            if (!v[0]) { snprintf(err, errlen, "%s: an empty value", o->name); return -1; }
            if (o->range && !one_of(o->range, v)) { /* its words, "a|b|c" */
                char words[256];
                snprintf(err, errlen, "%s is %s", o->name, as_words(o->range, words, sizeof words));
                return -1;
            }
            *(const char **)o->dst = v;
            continue;
        }
        if (set_number(o, v, err, errlen)) return -1;
    }
    options_digest = digest(opts, n);
    return 0;
}

/* ---------------------------------------------------------------- the options' digest */
/* the options a node may give differently: its place, and what only the printing rank writes */
static const char *const NODE_LOCAL[] = {"--node-rank", "--log", "--trace", "--timeline", "--profile"};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}
static int64_t digest(const Opt *opts, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < n; k++) {
        const Opt *o = &opts[k];
        int local = 0;
        for (size_t j = 0; j < sizeof NODE_LOCAL / sizeof NODE_LOCAL[0]; j++) local |= !strcmp(o->name, NODE_LOCAL[j]);
        if (local) continue;
        h = fnv(h, o->name, strlen(o->name) + 1);
        if (o->type == OPT_INT) h = fnv(h, o->dst, 8);
        else if (o->type == OPT_DOUBLE) h = fnv(h, o->dst, 8); /* its bits: 1e-4 and 0.0001 are one value */
        else if (o->type == OPT_FLAG) h = fnv(h, o->dst, sizeof(int));
        else { /* a word, or none (NULL) */
            const char *v = *(const char *const *)o->dst;
            h = fnv(h, v ? "w" : "-", 1);
            if (v) h = fnv(h, v, strlen(v) + 1);
        }
    }
    return (int64_t)(h >> 12); /* 52 bits: exact through comm_min_i64's doubles */
}

int64_t cli_options_digest(void) { return options_digest; }

void cli_usage(FILE *f, const char *prog, const char *summary, const Opt *opts, int n) {
    fprintf(f, "usage: %s [options]\n%s\n\noptions:\n", prog, summary);
    for (int k = 0; k < n; k++) {
        const Opt *o = &opts[k];
        char def[160] = "";
        if (o->type == OPT_INT) snprintf(def, sizeof def, " (default %lld, in %s)", (long long)*(int64_t *)o->dst, o->range);
        else if (o->type == OPT_DOUBLE) snprintf(def, sizeof def, " (default %g, in %s)", *(double *)o->dst, o->range);
        else if ((o->type == OPT_STRING || o->type == OPT_OPTSTR) && *(const char **)o->dst)
            snprintf(def, sizeof def, " (default %s)", *(const char **)o->dst);
        const char *arg = o->type == OPT_INT      ? " N"
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
    if (strlen(s) >= sizeof words) { snprintf(err, errlen, "too long a list (%s)", all); return -1; }
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
