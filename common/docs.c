/* docs.c -- packed documents: their starts, positions and attention blocks (docs.h). */
#include "docs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tokens.h"

int64_t docs_eot_option(const char *v, int64_t vocab, int qwen3_tokens, const char *data, char *err, size_t errlen) {
    if (!v || !strcmp(v, "none")) return -1;
    const int64_t tagged = v[0] ? -1 : tokens_file_eot(data); /* the flag alone: the file's own end of text */
    if (tagged >= 0 && tagged < vocab) return tagged;
    if (tagged >= vocab) {
        snprintf(err, errlen, "--packing: %s names its end of text %lld, past this model's vocabulary of %lld", data,
                 (long long)tagged, (long long)vocab);
        return -2;
    }
    if (!v[0] && !qwen3_tokens) {
        snprintf(err, errlen, "--packing alone means Qwen3's <|endoftext|> (%d), and this model reads another "
                 "tokenizer's ids (a Qwen3.5 hybrid): name its end-of-text id (--packing ID), or make %s with "
                 "data/prepare.py --tokenizer qwen3.5, which records it", TOKEN_ENDOFTEXT,
                 data ? data : "the token file");
        return -2;
    }
    if (!v[0]) {
        if (TOKEN_ENDOFTEXT < vocab) return TOKEN_ENDOFTEXT;
        snprintf(err, errlen, "--packing: <|endoftext|> (%d) is past this model's vocabulary of %lld: name its "
                 "end-of-text id (--packing ID)", TOKEN_ENDOFTEXT, (long long)vocab);
        return -2;
    }
    char *end;
    const long long id = strtoll(v, &end, 10);
    if (*end || end == v || v[0] == '-' || v[0] == '+' || v[0] == ' ' || id >= vocab) {
        snprintf(err, errlen, "--packing %s: the end-of-text token id, in [0, %lld) (alone: the one the token file's tag "
                 "names, else Qwen3's <|endoftext|>, %d; none: not packed)", v, (long long)vocab, TOKEN_ENDOFTEXT);
        return -2;
    }
    return id;
}

void docs_plan_note(FILE *f, int64_t eot) {
    fprintf(f, "packed documents (--packing): a document ends at token %lld and attends only to itself, from position 0 "
            "(a linear attention layer's state and conv start again there too); attention runs in its blocks, a window's work sum len (len + 1) / 2 pairs, not seq^2 / 2 (each step line "
            "says how much); the plan above holds %d rows of zeros after each attention input\n", (long long)eot,
            DOCS_SLACK_ROWS);
}

int64_t docs_split(const uint32_t *tok, int64_t S, uint32_t eot, int64_t *start) {
    int64_t n = 0;
    start[n++] = 0;
    for (int64_t t = 0; t + 1 < S; t++)
        if (tok[t] == eot) start[n++] = t + 1;
    start[n] = S;
    return n;
}

void docs_positions(const int64_t *start, int64_t n, int32_t *pos) {
    for (int64_t d = 0; d < n; d++)
        for (int64_t t = start[d]; t < start[d + 1]; t++) pos[t] = (int32_t)(t - start[d]);
}

/* the first document that ends after global position g (binary search: start[] is increasing) */
static int64_t doc_of(const int64_t *start, int64_t n, int64_t g) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (start[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* the length of the run of consecutive global positions starting at local row t (< end) */
static int64_t run(const int64_t *pos, int64_t t, int64_t end) {
    int64_t e = t + 1;
    while (e < end && pos[e] == pos[e - 1] + 1) e++;
    return e - t;
}

typedef struct { DocBlock *out; int64_t cap, n; } Sink;
static void put(Sink *s, int64_t q0, int64_t nq, int64_t k0, int64_t nk, int causal) {
    if (nq <= 0 || nk <= 0) return;
    if (s->n < s->cap) s->out[s->n] = (DocBlock){q0, nq, k0, nk, causal};
    s->n++;
}

/* One query piece (local row lq, global [gq, gq+lq_n)) against one key piece (local lk, global
 * [gk, gk+lk_n)), document by document. In document d, with q = [qs, qe) and k = [ks, ke) its
 * parts of the two pieces, a pair (i, j) counts iff j <= i. Either j < qs: then j <= i for every
 * query, and the pair is in rectangle 1 (q x [ks, min(ke, qs))). Or j >= qs: then j <= i < qe, so
 * j is in [a, b) = [max(ks, qs), min(ke, qe)); if i < b both are in [a, b) (the causal square),
 * else i >= b > j (rectangle 2: [b, qe) x [a, b)). Queries in [qs, a) see no key j >= qs, since
 * those are >= a > i. So blocks 1, the square and 2 hold every counted pair once, and nothing else. */
static void piece_blocks(const int64_t *start, int64_t n, int64_t lq, int64_t gq, int64_t nq, int64_t lk, int64_t gk,
                         int64_t nk, Sink *s) {
    if (gk > gq + nq - 1) return; /* every key after every query */
    for (int64_t d = doc_of(start, n, gk); d < n && start[d] < gk + nk; d++) {
        const int64_t qs = start[d] > gq ? start[d] : gq, qe = start[d + 1] < gq + nq ? start[d + 1] : gq + nq;
        const int64_t ks = start[d] > gk ? start[d] : gk, ke = start[d + 1] < gk + nk ? start[d + 1] : gk + nk;
        if (qs >= qe || ks >= ke) continue;
        const int64_t k1 = ke < qs ? ke : qs; /* rectangle 1: keys [ks, k1) */
        put(s, lq + (qs - gq), qe - qs, lk + (ks - gk), k1 - ks, 0);
        const int64_t a = ks > qs ? ks : qs, b = ke < qe ? ke : qe;
        if (a < b) {
            put(s, lq + (a - gq), b - a, lk + (a - gk), b - a, 1);
            put(s, lq + (b - gq), qe - b, lk + (a - gk), b - a, 0);
        }
    }
}

int64_t docs_blocks(const int64_t *start, int64_t n, const int64_t *qpos, int64_t q0, int64_t nq, const int64_t *kpos,
                    int64_t k0, int64_t nk, DocBlock *out, int64_t cap) {
    Sink s = {out, cap, 0};
    /* the keys' runs, found once (a call's rows may hold many pieces: common/layout.h) */
    int64_t nr = 0, *kr = xmalloc((size_t)(nk > 0 ? 2 * nk : 2) * 8);
    for (int64_t j = k0; j < k0 + nk; j += kr[2 * nr + 1], nr++) kr[2 * nr] = j, kr[2 * nr + 1] = run(kpos, j, k0 + nk);
    for (int64_t i = q0; i < q0 + nq;) {
        const int64_t li = run(qpos, i, q0 + nq);
        for (int64_t r = 0; r < nr; r++) {
            const int64_t j = kr[2 * r];
            piece_blocks(start, n, i, qpos[i], li, j, kpos[j], kr[2 * r + 1], &s);
        }
        i += li;
    }
    free(kr);
    return s.n;
}

int64_t docs_pairs(const DocBlock *b, int64_t nb) {
    int64_t p = 0;
    for (int64_t i = 0; i < nb; i++) p += b[i].causal ? b[i].nq * (b[i].nq + 1) / 2 : b[i].nq * b[i].nk;
    return p;
}

void docs_window_open(DocsWindow *d, int64_t seq, int64_t S, int P) {
    d->start = xmalloc((size_t)(8 * (seq + 1)));
    d->pos = xmalloc((size_t)(4 * (seq + S)));
    d->rows = xmalloc((size_t)(8 * S * P));
    for (int64_t t = 0; t < S; t++) d->rows[t] = t;
    d->n = 0;
}

void docs_window_cut(DocsWindow *d, const uint32_t *tok, int64_t seq, uint32_t eot) {
    d->n = docs_split(tok, seq, eot, d->start);
    docs_positions(d->start, d->n, d->pos);
}
