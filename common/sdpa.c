/* sdpa.c -- cuDNN SDPA composite graphs, plan cache and execution. */
#include "sdpa.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "train.h"

typedef cudnnBackendDescriptor_t Desc;
typedef enum { G_FWD, G_BWD } GraphKind;

/* tensor uids of the variant pack */
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF, U_SKV, U_SQ, U_ONE, U_SEQ_Q, U_SEQ_KV,
       U_DO = 101, U_DQ, U_DK, U_DV, U_SOFTMAX_SUM = 201, U_DQ_ACCUM };

struct SdpaPlan {
    GraphKind kind;
    SdpaShape shape;
    Desc *descs;       /* everything created for this plan, destroyed together */
    int ndesc, cap;
    int64_t next_vuid; /* virtual tensor uids */
    Desc plan;
    int64_t ws;
    Desc ninf;         /* the -inf scalar, one tensor however many masks use it */
};

/* ---------------------------------------------------------------- descriptor helpers */
/* Graph building returns cudnnStatus_t so a failed candidate graph can be retried. */
#define TRY(call) do { cudnnStatus_t s_ = (call); if (s_ != CUDNN_STATUS_SUCCESS) return s_; } while (0)

static cudnnStatus_t mk(SdpaPlan *pl, cudnnBackendDescriptorType_t t, Desc *out) {
    if (pl->ndesc == pl->cap) {
        pl->cap = pl->cap ? 2 * pl->cap : 256;
        pl->descs = realloc(pl->descs, (size_t)pl->cap * sizeof(Desc));
        if (!pl->descs) DIE("out of host memory");
    }
    TRY(cudnnBackendCreateDescriptor(t, out));
    pl->descs[pl->ndesc++] = *out;
    return CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t set_desc(Desc d, cudnnBackendAttributeName_t n, Desc v) {
    return cudnnBackendSetAttribute(d, n, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}
static cudnnStatus_t tensor(SdpaPlan *pl, Desc *out, int64_t uid, cudnnDataType_t dt, const int64_t dims[4],
                            const int64_t strides[4], bool is_virtual, bool by_value) {
    const int64_t align = 16;
    TRY(mk(pl, CUDNN_BACKEND_TENSOR_DESCRIPTOR, out));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
    return cudnnBackendFinalize(*out);
}
/* by-value scalar: its variant-pack pointer is a HOST pointer */
static cudnnStatus_t scalar(SdpaPlan *pl, Desc *out, int64_t uid, cudnnDataType_t dt) {
    static const int64_t one[4] = {1, 1, 1, 1};
    return tensor(pl, out, uid, dt, one, one, false, true);
}
static cudnnStatus_t neg_inf(SdpaPlan *pl, Desc *out) {
    if (!pl->ninf) TRY(scalar(pl, &pl->ninf, U_NEGINF, CUDNN_DATA_FLOAT));
    *out = pl->ninf;
    return CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t virt(SdpaPlan *pl, Desc *out, cudnnDataType_t dt, const int64_t dims[4], const int64_t str[4]) {
    return tensor(pl, out, pl->next_vuid++, dt, dims, str, true, false);
}
static cudnnStatus_t pointwise(SdpaPlan *pl, Desc *op, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                               Desc x, Desc b, Desc t, Desc y) {
    Desc p;
    TRY(mk(pl, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &p));
    TRY(cudnnBackendSetAttribute(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    TRY(cudnnBackendSetAttribute(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    if (axis >= 0) TRY(cudnnBackendSetAttribute(p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis));
    TRY(cudnnBackendFinalize(p));
    TRY(mk(pl, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x));
    if (b) TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b));
    if (t) TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y));
    return cudnnBackendFinalize(*op);
}
static cudnnStatus_t reduction(SdpaPlan *pl, Desc *op, cudnnReduceTensorOp_t mode, Desc x, Desc y) {
    Desc r;
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    const bool det = false;
    TRY(mk(pl, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &r));
    TRY(cudnnBackendSetAttribute(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f));
    TRY(cudnnBackendSetAttribute(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode));
    TRY(cudnnBackendSetAttribute(r, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det));
    TRY(cudnnBackendFinalize(r));
    TRY(mk(pl, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, op));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r));
    return cudnnBackendFinalize(*op);
}
/* C = A B. A padded graph's matmuls take their row/column/inner extents from the run-time
 * lengths (the M, N, K overrides; NULL: the dimensions), so work past the lengths is skipped. */
static cudnnStatus_t matmul_ov(SdpaPlan *pl, Desc *op, Desc A, Desc B, Desc C, Desc Mo, Desc No, Desc Ko, int pad) {
    Desc m;
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    TRY(mk(pl, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &m));
    TRY(cudnnBackendSetAttribute(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f));
    if (pad) { /* the forward's scores past the lengths read as 0 before the mask */
        const double zero = 0;
        TRY(cudnnBackendSetAttribute(m, CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &zero));
    }
    TRY(cudnnBackendFinalize(m));
    TRY(mk(pl, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, op));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, A));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, B));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, C));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m));
    if (Mo) TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, Mo));
    if (No) TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, No));
    if (Ko) TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, Ko));
    return cudnnBackendFinalize(*op);
}
static cudnnStatus_t reshape(SdpaPlan *pl, Desc *op, Desc x, Desc y) {
    TRY(mk(pl, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, op));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y));
    return cudnnBackendFinalize(*op);
}

/* ---------------------------------------------------------------- layouts */
/* token-major [S, H, D] memory as logical [1, H, S, D] */
static void bhsd(int64_t H, int64_t S, int64_t D, int64_t d[4], int64_t s[4]) {
    d[0] = 1; d[1] = H; d[2] = S; d[3] = D;
    s[0] = S * H * D; s[1] = D; s[2] = H * D; s[3] = 1;
}
/* the same memory viewed transposed, [1, H, D, S] (K^T, V^T) */
static void bhds(int64_t H, int64_t S, int64_t D, int64_t d[4], int64_t s[4]) {
    d[0] = 1; d[1] = H; d[2] = D; d[3] = S;
    s[0] = S * H * D; s[1] = D; s[2] = 1; s[3] = H * D;
}

/* causal mask on fp32 scores x [1,Hq,Sq,Skv]: keep (i, j) iff i (+ Skv - Sq) >= j, else -inf */
static cudnnStatus_t mask(SdpaPlan *pl, Desc x, Desc *ops, int *n, Desc *out) {
    const SdpaShape *p = &pl->shape;
    const int64_t sd[4] = {1, p->Hq, p->Sq, p->Skv}, ss[4] = {p->Hq * p->Sq * p->Skv, p->Sq * p->Skv, p->Skv, 1};
    Desc row, col, m, y, ninf;
    TRY(neg_inf(pl, &ninf));
    TRY(virt(pl, &row, CUDNN_DATA_INT32, sd, ss));
    TRY(virt(pl, &col, CUDNN_DATA_INT32, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, x, NULL, NULL, row));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, x, NULL, NULL, col));
    if (p->bottom_right) { /* row + Skv - Sq, in int32 with by-value int32 scalars */
        Desc skv, sq, r1, r2;
        TRY(scalar(pl, &skv, U_SKV, CUDNN_DATA_INT32));
        TRY(scalar(pl, &sq, U_SQ, CUDNN_DATA_INT32));
        TRY(virt(pl, &r1, CUDNN_DATA_INT32, sd, ss));
        TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, -1, row, skv, NULL, r1));
        TRY(virt(pl, &r2, CUDNN_DATA_INT32, sd, ss));
        TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, -1, r1, sq, NULL, r2));
        row = r2;
    }
    TRY(virt(pl, &m, CUDNN_DATA_BOOLEAN, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, m));
    TRY(virt(pl, &y, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, x, ninf, m, y));
    *out = y;
    return CUDNN_STATUS_SUCCESS;
}

/* padded graph: the run-time lengths, device int32 [1,1,1,1] each (sdpa.h: SdpaShape.padded) */
static cudnnStatus_t seq_lens(SdpaPlan *pl, Desc *sq, Desc *skv) {
    static const int64_t one[4] = {1, 1, 1, 1};
    if (!pl->shape.padded) { *sq = *skv = NULL; return CUDNN_STATUS_SUCCESS; }
    TRY(tensor(pl, sq, U_SEQ_Q, CUDNN_DATA_INT32, one, one, false, false));
    return tensor(pl, skv, U_SEQ_KV, CUDNN_DATA_INT32, one, one, false, false);
}
/* padding mask on fp32 scores x [1,Hq,Sq,Skv]: keep (i, j) iff i < seq_q and j < seq_kv, else -inf
 * (the pattern cuDNN's frontend emits, which its flash engines recognise in both directions) */
static cudnnStatus_t pad_mask(SdpaPlan *pl, Desc x, Desc sq, Desc skv, Desc *ops, int *n, Desc *out) {
    const SdpaShape *p = &pl->shape;
    const int64_t sd[4] = {1, p->Hq, p->Sq, p->Skv}, ss[4] = {p->Hq * p->Sq * p->Skv, p->Sq * p->Skv, p->Skv, 1};
    Desc row, col, rm, cm, m, y, ninf;
    TRY(neg_inf(pl, &ninf));
    TRY(virt(pl, &row, CUDNN_DATA_INT32, sd, ss));
    TRY(virt(pl, &col, CUDNN_DATA_INT32, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 2, x, NULL, NULL, row));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 3, x, NULL, NULL, col));
    TRY(virt(pl, &rm, CUDNN_DATA_BOOLEAN, sd, ss));
    TRY(virt(pl, &cm, CUDNN_DATA_BOOLEAN, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, -1, row, sq, NULL, rm));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, -1, col, skv, NULL, cm));
    TRY(virt(pl, &m, CUDNN_DATA_BOOLEAN, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, -1, rm, cm, NULL, m));
    TRY(virt(pl, &y, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, x, ninf, m, y));
    *out = y;
    return CUDNN_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- forward graph */
/* S = scale Q K^T (masked); stats = max + log sum exp; O = softmax(S) V */
static cudnnStatus_t fwd_ops(SdpaPlan *pl, Desc *ops, int *n) {
    const SdpaShape *p = &pl->shape;
    int64_t d[4], s[4];
    Desc Q, KT, V, O, ST, SC;
    bhsd(p->Hq, p->Sq, p->D, d, s);   TRY(tensor(pl, &Q, U_Q, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhds(p->Hkv, p->Skv, p->D, d, s); TRY(tensor(pl, &KT, U_K, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhsd(p->Hkv, p->Skv, p->D, d, s); TRY(tensor(pl, &V, U_V, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhsd(p->Hq, p->Sq, p->D, d, s);   TRY(tensor(pl, &O, U_O, CUDNN_DATA_BFLOAT16, d, s, false, false));
    const int64_t rd[4] = {1, p->Hq, p->Sq, 1}, rs[4] = {p->Hq * p->Sq, p->Sq, 1, 1};
    TRY(tensor(pl, &ST, U_STATS, CUDNN_DATA_FLOAT, rd, rs, false, false));
    TRY(scalar(pl, &SC, U_SCALE, CUDNN_DATA_FLOAT));
    const int64_t sd[4] = {1, p->Hq, p->Sq, p->Skv}, ss[4] = {p->Hq * p->Sq * p->Skv, p->Sq * p->Skv, p->Skv, 1};
    Desc S0, S1, S2, MX, SUB, EX, SUM, LG, P, SQ, SKV;
    TRY(seq_lens(pl, &SQ, &SKV));
    TRY(virt(pl, &S0, CUDNN_DATA_FLOAT, sd, ss));
    TRY(matmul_ov(pl, &ops[(*n)++], Q, KT, S0, SQ, SKV, NULL, p->padded));
    TRY(virt(pl, &S1, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, S0, SC, NULL, S1));
    if (p->padded) TRY(pad_mask(pl, S1, SQ, SKV, ops, n, &S1));
    S2 = S1;
    if (p->causal) TRY(mask(pl, S1, ops, n, &S2));
    TRY(virt(pl, &MX, CUDNN_DATA_FLOAT, rd, rs));
    TRY(reduction(pl, &ops[(*n)++], CUDNN_REDUCE_TENSOR_MAX, S2, MX));
    TRY(virt(pl, &SUB, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, -1, S2, MX, NULL, SUB));
    TRY(virt(pl, &EX, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, -1, SUB, NULL, NULL, EX));
    TRY(virt(pl, &SUM, CUDNN_DATA_FLOAT, rd, rs));
    TRY(reduction(pl, &ops[(*n)++], CUDNN_REDUCE_TENSOR_ADD, EX, SUM));
    TRY(virt(pl, &LG, CUDNN_DATA_FLOAT, rd, rs));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, -1, SUM, NULL, NULL, LG));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, -1, MX, LG, NULL, ST));
    TRY(virt(pl, &P, CUDNN_DATA_BFLOAT16, sd, ss)); /* the second matmul's A operand carries the I/O type */
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, -1, EX, SUM, NULL, P));
    TRY(matmul_ov(pl, &ops[(*n)++], P, V, O, SQ, NULL, SKV, 0)); /* must be the last op */
    return CUDNN_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- backward graph */
/* GQA results (dK, dV) come out as full-head virtual tensors reduced over each kv head's q heads */
static cudnnStatus_t gqa_matmul(SdpaPlan *pl, Desc *ops, int *n, Desc A, Desc B, Desc out, Desc Mo, Desc Ko) {
    const SdpaShape *p = &pl->shape;
    if (p->Hq == p->Hkv) return matmul_ov(pl, &ops[(*n)++], A, B, out, Mo, NULL, Ko, 0);
    Desc full;
    const int64_t fd[4] = {1, p->Hq, p->Skv, p->D}, fs[4] = {p->Hq * p->Skv * p->D, p->Skv * p->D, p->D, 1};
    TRY(virt(pl, &full, CUDNN_DATA_BFLOAT16, fd, fs));
    TRY(matmul_ov(pl, &ops[(*n)++], A, B, full, Mo, NULL, Ko, 0));
    return reduction(pl, &ops[(*n)++], CUDNN_REDUCE_TENSOR_ADD, full, out);
}

static cudnnStatus_t bwd_ops(SdpaPlan *pl, Desc *ops, int *n, cudnnDataType_t kview_dt) {
    const SdpaShape *p = &pl->shape;
    const int64_t Hq = p->Hq, Hk = p->Hkv, Sq = p->Sq, Skv = p->Skv, D = p->D;
    int64_t d[4], s[4];
    Desc Q, KT, VT, O, dO, ST, SC, ONE, dQ, dK, dV;
    bhsd(Hq, Sq, D, d, s);   TRY(tensor(pl, &Q, U_Q, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhds(Hk, Skv, D, d, s);  TRY(tensor(pl, &KT, U_K, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhds(Hk, Skv, D, d, s);  TRY(tensor(pl, &VT, U_V, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhsd(Hq, Sq, D, d, s);   TRY(tensor(pl, &O, U_O, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhsd(Hq, Sq, D, d, s);   TRY(tensor(pl, &dO, U_DO, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhsd(Hq, Sq, D, d, s);   TRY(tensor(pl, &dQ, U_DQ, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhsd(Hk, Skv, D, d, s);  TRY(tensor(pl, &dK, U_DK, CUDNN_DATA_BFLOAT16, d, s, false, false));
    bhsd(Hk, Skv, D, d, s);  TRY(tensor(pl, &dV, U_DV, CUDNN_DATA_BFLOAT16, d, s, false, false));
    const int64_t rd[4] = {1, Hq, Sq, 1}, rs[4] = {Hq * Sq, Sq, 1, 1};
    TRY(tensor(pl, &ST, U_STATS, CUDNN_DATA_FLOAT, rd, rs, false, false));
    TRY(scalar(pl, &SC, U_SCALE, CUDNN_DATA_FLOAT));
    TRY(scalar(pl, &ONE, U_ONE, CUDNN_DATA_FLOAT));
    const int64_t sd[4] = {1, Hq, Sq, Skv}, ss[4] = {Hq * Sq * Skv, Sq * Skv, Skv, 1};
    const int64_t td[4] = {1, Hq, Skv, Sq}, ts[4] = {Hq * Sq * Skv, Sq * Skv, 1, Skv};

    /* softmax_sum = rowsum(dO * O) -> fp32 scratch [1,Hq,Sq,1] */
    Desc t0, t1, SSUM;
    const int64_t od[4] = {1, Hq, Sq, D}, os[4] = {Hq * Sq * D, Sq * D, Hq * D, 1};
    TRY(virt(pl, &t0, CUDNN_DATA_FLOAT, od, os));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, dO, O, NULL, t0));
    TRY(virt(pl, &t1, CUDNN_DATA_FLOAT, rd, rs));
    TRY(reduction(pl, &ops[(*n)++], CUDNN_REDUCE_TENSOR_ADD, t0, t1));
    TRY(tensor(pl, &SSUM, U_SOFTMAX_SUM, CUDNN_DATA_FLOAT, rd, rs, false, false));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, t1, ONE, NULL, SSUM));

    /* P = exp(mask(scale Q K^T - stats)) */
    Desc S0, S1, S2, S3, P, SQ, SKV;
    TRY(seq_lens(pl, &SQ, &SKV));
    TRY(virt(pl, &S0, CUDNN_DATA_FLOAT, sd, ss));
    TRY(matmul_ov(pl, &ops[(*n)++], Q, KT, S0, SQ, SKV, NULL, 0));
    TRY(virt(pl, &S1, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, S0, SC, NULL, S1));
    if (p->padded) TRY(pad_mask(pl, S1, SQ, SKV, ops, n, &S1));
    TRY(virt(pl, &S2, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, -1, S1, ST, NULL, S2));
    S3 = S2;
    if (p->causal) TRY(mask(pl, S2, ops, n, &S3));
    TRY(virt(pl, &P, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, -1, S3, NULL, NULL, P));

    /* dV = P^T dO */
    Desc PT;
    TRY(virt(pl, &PT, CUDNN_DATA_BFLOAT16, td, ts));
    TRY(reshape(pl, &ops[(*n)++], P, PT));
    TRY(gqa_matmul(pl, ops, n, PT, dO, dV, SKV, SQ));

    /* dS = scale * P * (dO V^T - softmax_sum) */
    Desc dP, u1, u2, dS;
    TRY(virt(pl, &dP, CUDNN_DATA_FLOAT, sd, ss));
    TRY(matmul_ov(pl, &ops[(*n)++], dO, VT, dP, SQ, SKV, NULL, 0));
    TRY(virt(pl, &u1, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, -1, dP, SSUM, NULL, u1));
    TRY(virt(pl, &u2, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, u1, P, NULL, u2));
    TRY(virt(pl, &dS, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, u2, SC, NULL, dS));

    /* dK = dS^T Q */
    Desc dST;
    TRY(virt(pl, &dST, CUDNN_DATA_BFLOAT16, td, ts));
    TRY(reshape(pl, &ops[(*n)++], dS, dST));
    TRY(gqa_matmul(pl, ops, n, dST, Q, dK, SKV, SQ));

    /* dQ = dS K through the fp32 accumulator, then to bf16 */
    Desc K, ACC;
    bhsd(Hk, Skv, D, d, s);
    TRY(virt(pl, &K, kview_dt, d, s));
    TRY(reshape(pl, &ops[(*n)++], KT, K));
    const int64_t ad[4] = {1, Hq, Sq, D}, as[4] = {Hq * Sq * D, Sq * D, D, 1};
    TRY(tensor(pl, &ACC, U_DQ_ACCUM, CUDNN_DATA_FLOAT, ad, as, false, false));
    TRY(matmul_ov(pl, &ops[(*n)++], dS, K, ACC, SQ, NULL, SKV, 0));
    return pointwise(pl, &ops[(*n)++], CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, -1, ACC, NULL, NULL, dQ);
}

/* ---------------------------------------------------------------- plans */
static void plan_free(SdpaPlan *pl) {
    if (!pl) return;
    if (pl->plan) cudnnBackendDestroyDescriptor(pl->plan);
    while (pl->ndesc > 0) cudnnBackendDestroyDescriptor(pl->descs[--pl->ndesc]);
    free(pl->descs);
    free(pl);
}

/* heuristics mode A, then fallback: the first engine config that finalizes (compiles) wins */
static cudnnStatus_t finalize_plan(Sdpa *s, SdpaPlan *pl, Desc *ops, int nops) {
    Desc g;
    TRY(mk(pl, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    TRY(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops));
    TRY(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle));
    TRY(cudnnBackendFinalize(g));
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int mi = 0; mi < 2; mi++) {
        Desc heur;
        TRY(mk(pl, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
        TRY(set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g));
        TRY(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi]));
        if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) continue;
        int64_t count = 0;
        TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL));
        if (count > 32) count = 32;
        Desc cfg[32];
        for (int64_t i = 0; i < count; i++) TRY(mk(pl, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
        int64_t got = 0;
        if (count) TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg));
        for (int64_t i = 0; i < got; i++) {
            Desc plan;
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)) continue;
            if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle) ||
                set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg[i]) || cudnnBackendFinalize(plan)) {
                cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            int64_t c = 0;
            TRY(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &c, &pl->ws));
            pl->plan = plan;
            return CUDNN_STATUS_SUCCESS;
        }
    }
    return CUDNN_STATUS_NOT_SUPPORTED;
}

static SdpaPlan *build(Sdpa *s, GraphKind kind, const SdpaShape *p, cudnnDataType_t kview_dt, cudnnStatus_t *st) {
    SdpaPlan *pl = calloc(1, sizeof *pl);
    if (!pl) DIE("out of host memory");
    pl->kind = kind;
    pl->shape = *p;
    pl->next_vuid = 1000;
    Desc ops[64];
    int n = 0;
    *st = kind == G_FWD ? fwd_ops(pl, ops, &n) : bwd_ops(pl, ops, &n, kview_dt);
    if (*st == CUDNN_STATUS_SUCCESS) *st = finalize_plan(s, pl, ops, n);
    if (*st != CUDNN_STATUS_SUCCESS) { plan_free(pl); return NULL; }
    return pl;
}

static SdpaPlan *get_plan(Sdpa *s, GraphKind kind, const SdpaShape *p) {
    for (int i = 0; i < s->nplans; i++)
        if (s->plans[i]->kind == kind && !memcmp(&s->plans[i]->shape, p, sizeof *p)) return s->plans[i];
    char err[256];
    if (!sdpa_shape_ok(p, err, sizeof err)) DIE("%s", err);
    const double t0 = now_s();
    cudnnStatus_t st;
    SdpaPlan *pl = build(s, kind, p, CUDNN_DATA_FLOAT, &st);
    if (!pl && kind == G_BWD) pl = build(s, kind, p, CUDNN_DATA_BFLOAT16, &st); /* older cuDNN wants a bf16 K view */
    if (!pl) {
        char m[1024] = {0};
        cudnnGetLastErrorString(m, sizeof m);
        DIE("cuDNN has no plan for SDPA %s Hq=%lld Hkv=%lld Sq=%lld Skv=%lld D=%lld causal=%d padded=%d: %s | %s -- "
            "hint: CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr", kind == G_FWD ? "fwd" : "bwd", (long long)p->Hq,
            (long long)p->Hkv, (long long)p->Sq, (long long)p->Skv, (long long)p->D, p->causal, p->padded, cudnnGetErrorString(st), m);
    }
    if (s->verbose)
        printf("cuDNN SDPA %s plan Sq=%lld Skv=%lld Hq=%lld/%lld built in %.2f s, workspace %.1f MiB\n",
               kind == G_FWD ? "fwd" : "bwd", (long long)p->Sq, (long long)p->Skv, (long long)p->Hq, (long long)p->Hkv,
               now_s() - t0, (double)pl->ws / (1 << 20));
    if (s->nplans == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->plans = realloc(s->plans, (size_t)s->cap * sizeof *s->plans);
        if (!s->plans) DIE("out of host memory");
    }
    s->plans[s->nplans++] = pl;
    return pl;
}

/* ---------------------------------------------------------------- public */
void sdpa_init(Sdpa *s, cudaStream_t st) {
    memset(s, 0, sizeof *s);
    CUDNN_CHECK(cudnnCreate(&s->handle));
    CUDNN_CHECK(cudnnSetStream(s->handle, st));
    s->st = st;
    const size_t v = cudnnGetVersion();
    if (v < 90500) fprintf(stderr, "warning: cuDNN %zu is older than 9.5; its SDPA graphs are untested here\n", v);
}

void sdpa_destroy(Sdpa *s) {
    for (int i = 0; i < s->nplans; i++) plan_free(s->plans[i]);
    free(s->plans);
    cudnnDestroy(s->handle);
    memset(s, 0, sizeof *s);
}

int sdpa_shape_ok(const SdpaShape *p, char *err, size_t errlen) {
    if (p->Hq % p->Hkv || p->D % 8 || p->D > 256 || p->Hq > 65535) {
        snprintf(err, errlen, "SDPA shape unsupported: Hq %lld must be a multiple of Hkv %lld, D %lld a multiple of 8 <= 256",
                 (long long)p->Hq, (long long)p->Hkv, (long long)p->D);
        return 0;
    }
    if (p->Sq * p->Hq * p->D > (1ll << 31)) {
        snprintf(err, errlen, "SDPA call with Sq*Hq*D = %lld > 2^31: cuDNN 9.19's backward computes dQ wrong at that "
                 "size (measured); use fewer tokens per GPU (context parallelism)", (long long)(p->Sq * p->Hq * p->D));
        return 0;
    }
    return 1;
}

/* measured on an H200 (cudnn_sdpa.md): fwd 256 B; bwd 4*Hq*Sq*D + 256 B */
int64_t sdpa_fwd_workspace_estimate(const SdpaShape *p) { (void)p; return 1 << 20; }
int64_t sdpa_bwd_workspace_estimate(const SdpaShape *p) { return 4 * p->Hq * p->Sq * p->D + (1 << 20); }
int64_t sdpa_bwd_scratch_bytes(const SdpaShape *p) { return 4 * p->Hq * p->Sq + 4 * p->Hq * p->Sq * p->D + 1024; }
int64_t sdpa_fwd_workspace(Sdpa *s, const SdpaShape *p) { return get_plan(s, G_FWD, p)->ws; }
int64_t sdpa_bwd_workspace(Sdpa *s, const SdpaShape *p) { return get_plan(s, G_BWD, p)->ws; }

static void execute(Sdpa *s, SdpaPlan *pl, int n, const int64_t *uids, void **ptrs, void *ws, int64_t ws_bytes) {
    if (pl->ws > ws_bytes)
        DIE("cuDNN SDPA needs %lld bytes of workspace, %lld planned", (long long)pl->ws, (long long)ws_bytes);
    Desc vp;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CUDNN_CHECK(cudnnBackendFinalize(vp));
    CUDNN_CHECK(cudnnBackendExecute(s->handle, pl->plan, vp));
    cudnnBackendDestroyDescriptor(vp);
}

typedef struct { float scale, neginf, one; int32_t skv, sq; } Scalars;
static Scalars scalars(const SdpaShape *p) {
    Scalars c = {(float)(1.0 / sqrt((double)p->D)), -INFINITY, 1.f, (int32_t)p->Skv, (int32_t)p->Sq};
    return c;
}

/* the variant pack's common part, then a padded call's two lengths (device, 16-byte aligned) */
static int pack(const SdpaShape *p, const int32_t *lens, int n, int64_t *uids, void **ptrs) {
    if (!p->padded) return n;
    if (!lens) DIE("a padded SDPA plan needs its lengths");
    uids[n] = U_SEQ_Q;  ptrs[n++] = (void *)lens;
    uids[n] = U_SEQ_KV; ptrs[n++] = (void *)(lens + 4);
    return n;
}

void sdpa_fwd_padded(Sdpa *s, const SdpaShape *p, const int32_t *lens, bf16_t *o, float *lse, const bf16_t *q,
                     const bf16_t *k, const bf16_t *v, void *ws, int64_t ws_bytes) {
    const ProfSpan span = prof_span_begin(s->st, K_ATTN);
    trace("sdpa fwd Hq=%lld Hkv=%lld Sq=%lld Skv=%lld D=%lld causal=%d bottom_right=%d padded=%d", (long long)p->Hq,
          (long long)p->Hkv, (long long)p->Sq, (long long)p->Skv, (long long)p->D, p->causal, p->bottom_right, p->padded);
    SdpaPlan *pl = get_plan(s, G_FWD, p);
    Scalars c = scalars(p);
    int64_t uids[11] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF, U_SKV, U_SQ};
    void *ptrs[11] = {(void *)q, (void *)k, (void *)v, o, lse, &c.scale, &c.neginf, &c.skv, &c.sq};
    const int n = p->causal ? (p->bottom_right ? 9 : 7) : p->padded ? 7 : 6;
    execute(s, pl, pack(p, lens, n, uids, ptrs), uids, ptrs, ws, ws_bytes);
    prof_span_end(s->st, span);
}
void sdpa_fwd(Sdpa *s, const SdpaShape *p, bf16_t *o, float *lse, const bf16_t *q, const bf16_t *k, const bf16_t *v,
              void *ws, int64_t ws_bytes) {
    sdpa_fwd_padded(s, p, NULL, o, lse, q, k, v, ws, ws_bytes);
}

void sdpa_bwd_padded(Sdpa *s, const SdpaShape *p, const int32_t *lens, bf16_t *dq, bf16_t *dk, bf16_t *dv,
                     const bf16_t *q, const bf16_t *k, const bf16_t *v, const bf16_t *o, const bf16_t *dout,
                     const float *lse, float *softmax_sum, float *dq_accum, void *ws, int64_t ws_bytes) {
    const ProfSpan span = prof_span_begin(s->st, K_ATTN);
    trace("sdpa bwd Hq=%lld Hkv=%lld Sq=%lld Skv=%lld D=%lld causal=%d bottom_right=%d padded=%d", (long long)p->Hq,
          (long long)p->Hkv, (long long)p->Sq, (long long)p->Skv, (long long)p->D, p->causal, p->bottom_right, p->padded);
    SdpaPlan *pl = get_plan(s, G_BWD, p);
    Scalars c = scalars(p);
    int64_t uids[18] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_DO, U_DQ, U_DK, U_DV, U_ONE, U_SOFTMAX_SUM,
                        U_DQ_ACCUM, U_NEGINF, U_SKV, U_SQ};
    void *ptrs[18] = {(void *)q, (void *)k, (void *)v, (void *)o, (void *)lse, &c.scale, (void *)dout, dq, dk, dv,
                      &c.one, softmax_sum, dq_accum, &c.neginf, &c.skv, &c.sq};
    const int n = p->causal ? (p->bottom_right ? 16 : 14) : p->padded ? 14 : 13;
    execute(s, pl, pack(p, lens, n, uids, ptrs), uids, ptrs, ws, ws_bytes);
    prof_span_end(s->st, span);
}
void sdpa_bwd(Sdpa *s, const SdpaShape *p, bf16_t *dq, bf16_t *dk, bf16_t *dv, const bf16_t *q, const bf16_t *k,
              const bf16_t *v, const bf16_t *o, const bf16_t *dout, const float *lse, float *softmax_sum,
              float *dq_accum, void *ws, int64_t ws_bytes) {
    sdpa_bwd_padded(s, p, NULL, dq, dk, dv, q, k, v, o, dout, lse, softmax_sum, dq_accum, ws, ws_bytes);
}

/* ---------------------------------------------------------------- packed documents */
/* the padded plan's extent for a block of n rows in a call of at most max: the next power of two
 * from 1024, so a few plans serve every document, and whatever a padded call spends on its plan's
 * extent rather than its lengths stays within 2x (measured: with the call's whole extent, 3.6K-token
 * documents in a 32K call saved 30% of the attention time for 82% of the pairs; bucketed, 73%) */
static int64_t bucket(int64_t n, int64_t max) {
    int64_t b = 1024;
    while (b < n) b *= 2;
    return b < max ? b : max;
}

/* a block's plan: causal as the block is; padded to bucket()s when the blocks are documents'
 * (lengths on the device), else the block is the whole call, p */
SdpaShape sdpa_block_shape(const SdpaShape *p, const DocBlock *b, int padded) {
    SdpaShape sh = *p;
    sh.causal = b->causal, sh.padded = padded;
    if (sh.padded) sh.bottom_right = 0, sh.Sq = bucket(b->nq, p->Sq), sh.Skv = bucket(b->nk, p->Skv);
    return sh;
}

void sdpa_blocks_fwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *bl, const bf16_t *q, const bf16_t *k,
                     const bf16_t *v, bf16_t *blk, float *lse_blk, void *o, int o_f32, float *lse, int64_t n,
                     void *ws, int64_t ws_bytes, cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_ATTN);
    blocks_tick(st, 0); /* the rehearsal's ring check: a watched ring's block starts */
    const int64_t Q = p->Hq * p->D, KV = p->Hkv * p->D;
    for (int64_t i = 0; i < bl->n; i++) {
        const DocBlock *b = &bl->b[i];
        const SdpaShape sh = sdpa_block_shape(p, b, bl->lens != NULL);
        sdpa_fwd_padded(s, &sh, bl->lens ? bl->lens + 8 * i : NULL, blk, lse_blk, q + b->q0 * Q, k + b->k0 * KV,
                        v + b->k0 * KV, ws, ws_bytes);
        lse_merge_ld(o, o_f32, lse, blk, lse_blk, sh.Sq, n, b->q0, b->nq, p->Hq, p->D, st);
    }
    blocks_tick(st, 1);
    prof_span_end(st, span);
}

void sdpa_blocks_bwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *bl, const bf16_t *q, const bf16_t *k,
                     const bf16_t *v, const bf16_t *o, const bf16_t *dout, const float *lse, int64_t n, void *dq,
                     void *dk, void *dv, int acc_f32, bf16_t *blk, bf16_t *dkv_blk, float *lse_blk,
                     float *softmax_sum, float *dq_accum, void *ws, int64_t ws_bytes, void (*kv_ready)(void *),
                     void *ctx, cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_ATTN);
    blocks_tick(st, 0); /* the rehearsal's ring check: a watched ring's block starts */
    const int64_t Q = p->Hq * p->D, KV = p->Hkv * p->D, e = acc_f32 ? 4 : 2;
    for (int64_t i = 0; i < bl->n; i++) {
        const DocBlock *b = &bl->b[i];
        const SdpaShape sh = sdpa_block_shape(p, b, bl->lens != NULL);
        /* the final LSE of the block's rows, [Hq, Sq] as the plan reads them; a padded plan's rows
         * past the block's are zeros, not the last block's values (never NaN in a tile it loads) */
        if (sh.padded) CUDA_CHECK(cudaMemsetAsync(lse_blk, 0, (size_t)(4 * p->Hq * sh.Sq), st));
        CUDA_CHECK(cudaMemcpy2DAsync(lse_blk, (size_t)sh.Sq * 4, lse + b->q0, (size_t)n * 4, (size_t)b->nq * 4,
                                     (size_t)p->Hq, cudaMemcpyDeviceToDevice, st));
        sdpa_bwd_padded(s, &sh, bl->lens ? bl->lens + 8 * i : NULL, blk, dkv_blk, dkv_blk + sh.Skv * KV, q + b->q0 * Q,
                        k + b->k0 * KV, v + b->k0 * KV, o + b->q0 * Q, dout + b->q0 * Q, lse_blk, softmax_sum, dq_accum,
                        ws, ws_bytes);
        add_bf16_into((char *)dq + e * b->q0 * Q, acc_f32, blk, b->nq * Q, st);
        if (i == 0 && kv_ready) kv_ready(ctx); /* the ring: the running dK/dV sum has arrived */
        add_bf16_into((char *)dk + e * b->k0 * KV, acc_f32, dkv_blk, b->nk * KV, st);
        add_bf16_into((char *)dv + e * b->k0 * KV, acc_f32, dkv_blk + sh.Skv * KV, b->nk * KV, st);
    }
    if (bl->n == 0 && kv_ready) kv_ready(ctx); /* a packed step with no block: the sum still arrives */
    blocks_tick(st, 1);
    prof_span_end(st, span);
}

void sdpa_packed_fwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *bl, bf16_t *q, bf16_t *k, bf16_t *v, bf16_t *blk,
                     float *lse_blk, bf16_t *o, float *lse, void *ws, int64_t ws_bytes, cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_ATTN);
    sdpa_zero_slack(q, p->Sq, p->Hq * p->D, st);
    sdpa_zero_slack(k, p->Skv, p->Hkv * p->D, st);
    sdpa_zero_slack(v, p->Skv, p->Hkv * p->D, st);
    fill_f32(lse, -INFINITY, p->Hq * p->Sq, st);
    sdpa_blocks_fwd(s, p, bl, q, k, v, blk, lse_blk, o, 0, lse, p->Sq, ws, ws_bytes, st);
    prof_span_end(st, span);
}

void sdpa_packed_bwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *bl, bf16_t *dq, bf16_t *dk, bf16_t *dv,
                     bf16_t *q, bf16_t *k, bf16_t *v, bf16_t *o, bf16_t *dout, const float *lse, bf16_t *blk,
                     bf16_t *dkv_blk, float *lse_blk, float *softmax_sum, float *dq_accum, void *ws, int64_t ws_bytes,
                     cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_ATTN);
    const int64_t Q = p->Hq * p->D, KV = p->Hkv * p->D;
    sdpa_zero_slack(q, p->Sq, Q, st); /* the forward zeroed these, but a kept layer's skipped it */
    sdpa_zero_slack(k, p->Skv, KV, st);
    sdpa_zero_slack(v, p->Skv, KV, st);
    sdpa_zero_slack(o, p->Sq, Q, st);
    sdpa_zero_slack(dout, p->Sq, Q, st);
    CUDA_CHECK(cudaMemsetAsync(dq, 0, (size_t)(2 * p->Sq * Q), st));
    CUDA_CHECK(cudaMemsetAsync(dk, 0, (size_t)(2 * p->Skv * KV), st));
    CUDA_CHECK(cudaMemsetAsync(dv, 0, (size_t)(2 * p->Skv * KV), st));
    sdpa_blocks_bwd(s, p, bl, q, k, v, o, dout, lse, p->Sq, dq, dk, dv, 0, blk, dkv_blk, lse_blk, softmax_sum,
                    dq_accum, ws, ws_bytes, NULL, NULL, st);
    prof_span_end(st, span);
}

void sdpa_zero_slack(bf16_t *x, int64_t rows, int64_t width, cudaStream_t st) {
    CUDA_CHECK(cudaMemsetAsync(x + rows * width, 0, (size_t)(2 * DOCS_SLACK_ROWS * width), st));
}

void docplan_reset(DocPlan *dp) {
    if (!dp->first) dp->first = xcalloc(1, sizeof *dp->first);
    dp->n = 0, dp->ncalls = 0, dp->pairs = 0, dp->first[0] = 0;
}

void docplan_add(DocPlan *dp, const int64_t *start, int64_t ndocs, const int64_t *qpos, int64_t q0, int64_t nq,
                 const int64_t *kpos, int64_t k0, int64_t nk) {
    if (dp->ncalls == dp->calls_cap) { /* one call per ring step: P of them */
        dp->calls_cap = 2 * dp->calls_cap + 8;
        dp->first = realloc(dp->first, (size_t)(dp->calls_cap + 1) * sizeof *dp->first);
        dp->call = realloc(dp->call, (size_t)dp->calls_cap * sizeof *dp->call);
        if (!dp->first || !dp->call) DIE("out of host memory");
    }
    int64_t m;
    while ((m = docs_blocks(start, ndocs, qpos, q0, nq, kpos, k0, nk, dp->b + dp->n, dp->cap - dp->n)) > dp->cap - dp->n) {
        dp->cap = 2 * (dp->n + m);
        dp->b = realloc(dp->b, (size_t)dp->cap * sizeof *dp->b);
        dp->lens_h = realloc(dp->lens_h, (size_t)(8 * dp->cap) * 4);
        if (!dp->b || !dp->lens_h) DIE("out of host memory");
    }
    for (int64_t i = dp->n; i < dp->n + m; i++) {
        memset(dp->lens_h + 8 * i, 0, 32);
        dp->lens_h[8 * i] = (int32_t)dp->b[i].nq;
        dp->lens_h[8 * i + 4] = (int32_t)dp->b[i].nk;
    }
    dp->pairs += docs_pairs(dp->b + dp->n, m);
    dp->n += m;
    dp->first[++dp->ncalls] = dp->n;
}

void docplan_upload(DocPlan *dp, cudaStream_t st) {
    if (dp->n > dp->dev_cap) { /* 32 bytes a block, outside the plan: grown, on the stream, whenever a
                                  * window has more blocks than any before (a few KiB: a block a document) */
        if (dp->lens) CUDA_CHECK(cudaFreeAsync(dp->lens, st));
        dp->dev_cap = dp->cap;
        CUDA_CHECK(cudaMallocAsync((void **)&dp->lens, (size_t)(32 * dp->dev_cap), st));
    }
    if (dp->n) CUDA_CHECK(cudaMemcpyAsync(dp->lens, dp->lens_h, (size_t)(32 * dp->n), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    for (int i = 0; i < dp->ncalls; i++)
        dp->call[i] = (SdpaBlocks){dp->b + dp->first[i], dp->first[i + 1] - dp->first[i], dp->lens + 8 * dp->first[i]};
}

const SdpaBlocks *docplan_call(const DocPlan *dp, int i) { return &dp->call[i]; }

void docplan_trace(const DocPlan *dp, int64_t ndocs, const int32_t *win, int64_t seq, const int32_t *mine, int64_t S) {
    int64_t sum = 0, mine_sum = 0;
    for (int64_t t = 0; t < seq; t++) sum += win[t];
    for (int64_t t = 0; t < S; t++) mine_sum += mine[t];
    trace("packed window: %lld documents, %lld blocks, positions sum %lld, this rank's %lld", (long long)ndocs,
          (long long)dp->n, (long long)sum, (long long)mine_sum);
}
