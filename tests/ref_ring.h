/* ref_ring.h -- ring attention over the zigzag split, in plain C and fp64: what stage 3 computes
 * with cuDNN blocks and NCCL sends, written to be read next to tests/ref_model.c. P ranks are
 * simulated in one process, each holding only its own rows; buffers move between them only through
 * ref_ring's pass (send to r+1, receive from r-1), as stage 3's ring_pass does. test_cpu's
 * test_ring checks it against ref_attention, plain causal attention, to 1e-12.
 *
 * Layouts (row-major, fp64): queries and outputs [rows, Hq, D]; keys and values [rows, Hkv, D];
 * LSE [rows, Hq]. Query head h reads K/V head h / (Hq / Hkv) (GQA). */
#ifndef LONGCTX_REF_RING_H
#define LONGCTX_REF_RING_H

#include <stdint.h>

typedef struct {
    int64_t Hq, Hkv, D; /* query heads, K/V heads (dividing Hq), head dim */
} RefHeads;

/* One query row q [Hq, D], head h, against keys [k0, k0+nk) of k, v: o [D] and lse. causal: key j
 * only if j <= qi (qi and j in the same numbering). No key at all: o = 0, lse = -inf. */
void ref_attn_row(const RefHeads *a, const double *q, const double *k, const double *v, int64_t k0, int64_t nk, int h,
                  int causal, int64_t qi, double *o, double *lse);
/* Its backward given the row's FINAL lse and Dr = dO . O (final O): adds into dq [Hq, D] (head h)
 * and dk, dv (rows [k0, k0+nk)). */
void ref_attn_row_bwd(const RefHeads *a, const double *q, const double *k, const double *v, const double *dout,
                      double lse, double Dr, int64_t k0, int64_t nk, int h, int causal, int64_t qi, double *dq,
                      double *dk, double *dv);

/* Plain causal attention over S rows, the truth: O, L written; dQ, dK, dV written from dO. Packed
 * documents' truth is this once per document, on its rows alone. */
void ref_attention(const RefHeads *a, int64_t S, const double *q, const double *k, const double *v, const double *dO,
                   double *O, double *L, double *dQ, double *dK, double *dV);

/* The ring's P simulated ranks. Arrays of P pointers, one per rank. */
typedef struct {
    int P;
    int64_t S, n;       /* sequence length; rows per rank n = S/P: two chunks of c = S/(2P) */
    RefHeads a;
    int64_t *pos;       /* [P*n]: rank r's local row t is global position pos[r*n + t] (zigzag) */
    double **q, **dout; /* rank r's query rows and their output gradient, [n, Hq, D] */
    double **own;       /* rank r's own K rows then V rows, [2, n, Hkv, D] */
    double **o, **lse;  /* after ref_ring_forward: the merged output [n, Hq, D] and LSE [n, Hq] */
    double **dq;        /* after ref_ring_backward: dQ [n, Hq, D] */
    double **dkv;       /* after ref_ring_backward: dK then dV of rank r's own K/V, [2, n, Hkv, D] */
    const int64_t *doc_start; /* packed documents (common/docs.h): start[0..ndocs], global; NULL: one */
    int64_t ndocs;
    int64_t pairs;      /* (query, key) pairs the blocks computed, over all ranks and steps */
    int64_t bad_src;    /* blocks computed with a K/V or dK/dV buffer that was not the schedule's src's,
                         * and dK/dV totals not back home after the backward: 0 when the ring is right */
    /* the travelling buffers, double-buffered as stage 3's kv_ring and dkv_ring: cur is what a rank
     * holds, nxt what it receives into; a tag names the rank whose K/V (or dK/dV) a buffer holds */
    double **kv_cur, **kv_nxt, **dkv_cur, **dkv_nxt;
    int *kv_tag, *kv_tag_nxt, *dkv_tag, *dkv_tag_nxt;
} RefRing;

/* Split q, k, v, dO [S, ...] over P ranks by the zigzag (S % 2P == 0). */
/* P ranks, rank r holding the sequence's rows pos[r * n .. r * n + n) (P * n entries) */
void ref_ring_init_rows(RefRing *R, int P, int64_t S, int64_t n, const int64_t *pos, RefHeads a, const double *q,
                        const double *k, const double *v, const double *dO);
/* one ring step for all P ranks: rank r's cur goes to rank r+1's nxt (poisoned with NaN first), then swap */
void ref_ring_pass(int P, double **cur, int *tag, double **nxt, int *tag_nxt, int64_t len);
/* before a backward ring: every rank holds its own K/V and a zero dK/dV sum, both tagged as its own */
void ref_ring_bwd_start(RefRing *R);
void ref_ring_init(RefRing *R, int P, int64_t S, RefHeads a, const double *q, const double *k, const double *v,
                   const double *dO);
/* P ring steps: each rank's blocks against the K/V it holds, merged by LSE into o, lse. With
 * documents (doc_start set after init), each ring step's call is cut into docs_blocks' blocks. */
void ref_ring_forward(RefRing *R);
/* The same blocks backward with the final O and LSE: dq at home, dK/dV travelling with their K/V. */
void ref_ring_backward(RefRing *R);
void ref_ring_free(RefRing *R);

#endif
