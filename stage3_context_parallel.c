/* stage3_context_parallel.c -- train a Qwen3 model on one long sequence split over several GPUs.
 *
 * Stage 2 plus context parallelism: all P ranks train on ONE sequence, cut into 2P chunks; rank r
 * holds chunks r and 2P-1-r (the zigzag: every rank gets one early and one late chunk, so causal
 * work is balanced), with RoPE seeing the global positions. Attention is a ring: at each of P steps
 * a rank attends its queries to one rank's K/V block with cuDNN while that block travels on to
 * the next rank (ncclSend/ncclRecv on the communication stream), and the partial results are
 * merged by log-sum-exp (--merge fp32, or bf16 as the reference recipe does). Backward runs the
 * same blocks with the final O and LSE; dQ accumulates locally, dK/dV travel around the ring
 * with their K/V and come home complete. FSDP shards over the same P ranks.
 *
 * From stage 2: every rank keeps 1/P of the fp32 master weights, AdamW moments and
 * gradients. A decoder layer's bf16 weights are all-gathered just before use (the next layer's
 * gather runs ahead on a communication stream) and dropped after; its gradients are
 * reduce-scattered to their owners right after its backward. Ranks train on different windows
 * of the data (data parallel); the loss is the token-weighted mean over ranks. One process,
 * one thread per GPU, NCCL between them; --local-ranks P runs P ranks on one GPU (tests).
 *
 * From stage 1:
 *   - Qwen3 forward and backward: cuBLASLt GEMMs (bf16 in, fp32 accumulate), cuDNN flash
 *     attention (fwd + bwd, fp32 log-sum-exp), CUDA kernels for norms, RoPE, SwiGLU, loss, AdamW;
 *   - per-layer activation checkpointing: only each layer's input is kept; backward re-runs the
 *     layer's forward first. --keep-attn also keeps the attention output O and its LSE, so
 *     backward never runs attention forward again (costs S*heads*head_dim bf16 per layer);
 *   - chunked NLL: logits exist for one chunk of rows at a time, loss and d(logits) in one pass;
 *   - AdamW on fp32 master weights, with fp32 gradients and moments;
 *   - a memory plan made before anything is allocated (--dry-run prints it, no GPU needed).
 *
 *   make stage3 && ./stage3 --gpus 8 --seq 1M     # 0.6B on the books, 1M tokens over 8 GPUs
 *   ./stage3 --model 8B --seq 1M --gpus 8 --keep-attn --dry-run
 *   ./stage3 --local-ranks 4 --model 0.6B --layers 2 --seq 16K    # 4 ranks on one GPU
 *   ./stage3 --help
 */

/* ============================================================ includes and usage */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <cublasLt.h>
#include <cudnn.h>

#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/config.h"
#include "common/gemm.h"
#include "common/gpu.h"
#include "common/memplan.h"
#include "common/model.h"
#include "common/safetensors.h"
#include "common/sdpa.h"
#include "common/shard.h"
#include "common/tensor.h"
#include "common/tokens.h"
#include "common/zigzag.h"
#include "kernels/kernels.h"

/* ---- stage 2: FSDP ---- */
/* Every rank runs the same code; only global rank 0 prints (errors print from any rank). */
#define printf(...) (longctx_rank > 0 ? 0 : printf(__VA_ARGS__))
struct Shared;
/* ---- end stage 2 ---- */

static const char *SUMMARY =
    "Train a Qwen3 model on one sequence split over P GPUs (context parallelism: zigzag chunks, ring\n"
    "attention), with FSDP (ZeRO-3): each rank holds 1/P of the weights, grads and\n"
    "optimizer state, layers are all-gathered per use. bf16 compute, fp32 master weights, per-layer\n"
    "activation checkpointing, cuDNN flash attention, chunked NLL. --dry-run prints the memory plan\n"
    "(works without a GPU). Sizes take K/M suffixes: --seq 128K.";

#define PEAK_FLOPS 989e12 /* H100/H200 dense bf16 */

/* ============================================================ options */
typedef struct {
    const char *model;       /* size name or HF directory */
    const char *data;        /* token file */
    int64_t seq;             /* tokens per step */
    int64_t steps;
    double lr, min_lr_frac;
    int64_t warmup;
    const char *schedule;    /* cosine | constant */
    double wd, beta1, beta2, eps, clip;
    int64_t loss_chunk;      /* rows of logits at a time */
    int keep_attn;
    int64_t layers;          /* 0: all */
    int64_t seed;
    const char *save;        /* HF directory + trainer state */
    int64_t save_every;
    const char *resume;
    int dry_run;
    const char *log;         /* JSON lines */
    const char *dump_grads;  /* tests: loss + all gradients of the first step (safetensors) */
    int profile;             /* time kernel classes with CUDA events */
    double yarn_factor;
    int64_t yarn_original;
    double gpu_gib;          /* --dry-run: device memory to plan against */
    /* ---- stage 2: FSDP ---- */
    int64_t gpus;            /* ranks per node, one per GPU (0: every visible GPU) */
    int64_t local_ranks;     /* > 0: that many ranks as threads on GPU 0 (the local backend, for tests) */
    int64_t nnodes, node_rank;
    const char *rendezvous;  /* a file all nodes can read: node 0 writes the ncclUniqueId there */
    /* ---- end stage 2 ---- */
    const char *merge;       /* stage 3: ring accumulators in fp32 or bf16 */
} Opts;

static Opts parse_opts(int argc, char **argv) {
    Opts o = {.model = "0.6B", .data = "data/books.tok", .seq = 16384, .steps = 50, .lr = 3e-4,
              .min_lr_frac = 0.1, .warmup = 10, .schedule = "cosine", .wd = 0.1, .beta1 = 0.9, .beta2 = 0.95,
              .eps = 1e-8, .clip = 1.0, .loss_chunk = 4096, .seed = 1234, .gpu_gib = 139.8, .nnodes = 1, .merge = "fp32"};
    const Opt table[] = {
        {"--model", OPT_STRING, &o.model, "Qwen3 size (0.6B 1.7B 4B 8B 14B 32B) or HF model directory"},
        {"--data", OPT_STRING, &o.data, "token file (data/prepare.py makes one)"},
        {"--seq", OPT_INT, &o.seq, "tokens per step (sequence length)"},
        {"--steps", OPT_INT, &o.steps, "optimizer steps (total, counting resumed ones; 0 + --save: save the init)"},
        {"--lr", OPT_DOUBLE, &o.lr, "peak learning rate"},
        {"--warmup", OPT_INT, &o.warmup, "linear warmup steps"},
        {"--schedule", OPT_STRING, &o.schedule, "after warmup: cosine | constant"},
        {"--min-lr-frac", OPT_DOUBLE, &o.min_lr_frac, "cosine floor as a fraction of --lr"},
        {"--wd", OPT_DOUBLE, &o.wd, "AdamW decoupled weight decay (matrices only)"},
        {"--beta1", OPT_DOUBLE, &o.beta1, "AdamW beta1"},
        {"--beta2", OPT_DOUBLE, &o.beta2, "AdamW beta2"},
        {"--eps", OPT_DOUBLE, &o.eps, "AdamW epsilon"},
        {"--clip", OPT_DOUBLE, &o.clip, "global gradient-norm clip (0: off)"},
        {"--loss-chunk", OPT_INT, &o.loss_chunk, "rows of [rows, vocab] fp32 logits held at a time"},
        {"--keep-attn", OPT_FLAG, &o.keep_attn, "keep attention O and LSE per layer: no attention recompute"},
        {"--layers", OPT_INT, &o.layers, "use only the first N decoder layers (0: all)"},
        {"--seed", OPT_INT, &o.seed, "random init seed"},
        {"--save", OPT_STRING, &o.save, "write an HF model directory + trainer state here at the end"},
        {"--save-every", OPT_INT, &o.save_every, "also save every N steps (0: only at the end)"},
        {"--resume", OPT_STRING, &o.resume, "continue from a directory written by --save"},
        {"--dry-run", OPT_FLAG, &o.dry_run, "print the memory plan and exit (no GPU needed)"},
        {"--gpu-gib", OPT_DOUBLE, &o.gpu_gib, "--dry-run: GPU memory to plan against"},
        {"--log", OPT_STRING, &o.log, "append one JSON line per step to this file"},
        {"--dump-grads", OPT_STRING, &o.dump_grads, "write step 1's loss and fp32 gradients (safetensors)"},
        {"--profile", OPT_FLAG, &o.profile, "print each step's GPU time by kernel class (GEMM, attention, ...)"},
        {"--yarn-factor", OPT_DOUBLE, &o.yarn_factor, "YaRN RoPE scaling factor (0: as the config says)"},
        {"--yarn-original", OPT_INT, &o.yarn_original, "YaRN original_max_position_embeddings (0: config's)"},
        /* ---- stage 2: FSDP ---- */
        {"--gpus", OPT_INT, &o.gpus, "ranks on this node, one per GPU (0: all visible; --dry-run: 1)"},
        {"--local-ranks", OPT_INT, &o.local_ranks, "run this many ranks as threads on GPU 0 (tests)"},
        {"--nnodes", OPT_INT, &o.nnodes, "nodes (the same command on each)"},
        {"--node-rank", OPT_INT, &o.node_rank, "this node's index, 0..nnodes-1"},
        {"--rendezvous", OPT_STRING, &o.rendezvous, "shared file for the NCCL id when --nnodes > 1"},
        /* ---- end stage 2 ---- */
        {"--merge", OPT_STRING, &o.merge, "ring accumulators (O, dQ, travelling dK/dV): fp32 | bf16"}, /* stage 3 */
    };
    const int n = (int)(sizeof table / sizeof table[0]);
    char err[256];
    const int rc = cli_parse(argc, argv, table, n, err, sizeof err);
    if (rc == 1) { cli_usage(stdout, argv[0], SUMMARY, table, n); exit(0); }
    if (rc) { fprintf(stderr, "error: %s\n", err); exit(2); }
    if (o.seq < 2) DIE("--seq must be at least 2 (got %lld)", (long long)o.seq);
    if (o.steps < 0 || (o.steps == 0 && !o.save)) DIE("--steps must be at least 1 (0 only with --save: write the initial weights)");
    if (o.loss_chunk < 1) DIE("--loss-chunk must be positive");
    if (strcmp(o.schedule, "cosine") && strcmp(o.schedule, "constant")) DIE("--schedule is cosine or constant");
    if (strcmp(o.merge, "fp32") && strcmp(o.merge, "bf16")) DIE("--merge is fp32 or bf16"); /* stage 3 */
    /* ---- stage 2: FSDP ---- */
    if (o.local_ranks && (o.gpus || o.nnodes > 1)) DIE("--local-ranks runs on one GPU: no --gpus or --nnodes with it");
    if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) DIE("--node-rank must be in 0..--nnodes-1");
    if (o.nnodes > 1 && (o.save || o.dump_grads)) DIE("--save and --dump-grads need one node (each node holds only its shards)");
    /* ---- end stage 2 ---- */
    return o;
}

/* ============================================================ model state */
typedef struct {
    ParamTable table;   /* names, shapes, offsets in the flat layout */
    /* ---- stage 2: FSDP ---- */
    ShardLayout shards; /* units (embedding, layers, tail) split over the ranks */
    ShardPiece *pieces; /* the tensor pieces this rank owns: AdamW runs per piece */
    int64_t npieces;
    bf16_t *w;          /* [shard_total] this rank's bf16 weights: the all-gather input */
    float *master;      /* [shard_total] fp32 master weights */
    float *grad;        /* [shard_total] fp32 gradients, averaged over the ranks by reduce-scatter */
    float *m, *v;       /* [shard_total] fp32 AdamW moments */
    bf16_t *layer_w[2]; /* [max_layer] two gathered decoder layers: in use and prefetched */
    bf16_t *embed_w;    /* [P * embedding shard] the gathered embedding (and tied lm_head) */
    bf16_t *tail_w;     /* [P * tail shard] the gathered final norm (+ untied lm_head) */
    float *layer_g[2];  /* [max_layer] a layer's full fp32 gradients until they are reduce-scattered */
    float *embed_g;     /* [P * embedding shard] */
    float *tail_g;      /* [P * tail shard] */
    /* ---- end stage 2 ---- */
} Params;

typedef struct {        /* kept from forward to backward */
    bf16_t *x;          /* [L+1, S, D] layer inputs (checkpoints); x[L] feeds the final norm */
    bf16_t *o;          /* [L, S, Hq*hd] attention outputs (--keep-attn only) */
    float *lse;         /* [L, Hq, S] their log-sum-exp (--keep-attn only) */
} Saved;

typedef struct {        /* one layer's working set; regions A, B1, B2 and C share memory (see plan) */
    /* persistent through the step */
    bf16_t *dx;         /* [S, D] gradient of the residual stream */
    uint32_t *ids;      /* [S+1] tokens; labels are ids + 1 */
    int32_t *pos;       /* [S] RoPE positions */
    float *inv_freq;    /* [hd/2] RoPE inverse frequencies (YaRN applied) */
    float *losses;      /* [S] per-token NLL */
    double *loss_sum;   /* [1] */
    double *gnorm_sq;   /* [1] squared global gradient norm */
    double *red;        /* [1024] reduction scratch */
    /* A: attention half of a layer */
    bf16_t *xn;         /* [S, D] input_layernorm(x) */
    float *rstd1;       /* [S] */
    bf16_t *q_raw;      /* [S, Hq*hd] q_proj(xn) */
    bf16_t *k_raw;      /* [S, Hkv*hd] */
    bf16_t *v;          /* [S, Hkv*hd] */
    bf16_t *q, *k;      /* q/k after head norm + RoPE */
    float *rstd_q;      /* [S*Hq] */
    float *rstd_k;      /* [S*Hkv] */
    bf16_t *o;          /* [S, Hq*hd] attention output (or Saved.o + l) */
    float *lse;         /* [Hq, S] (or Saved.lse + l) */
    bf16_t *x_mid;      /* [S, D] x + o_proj(o) */
    /* B1: MLP half (forward, recompute and its backward) */
    bf16_t *xn2;        /* [S, D] post_attention_layernorm(x_mid) */
    float *rstd2;       /* [S] */
    bf16_t *g, *u, *h;  /* [S, I] gate, up, silu(g)*u; backward reuses them for dg, du, dh */
    bf16_t *dxn2;       /* [S, D] */
    /* B2: attention backward (overlays B1) */
    bf16_t *d_o;        /* [S, Hq*hd] */
    bf16_t *dq;         /* [S, Hq*hd] */
    bf16_t *dk, *dv;    /* [S, Hkv*hd] */
    bf16_t *dxn;        /* [S, D] */
    float *softmax_sum; /* [Hq, S] cuDNN scratch */
    float *dq_accum;    /* [Hq, S, hd] cuDNN scratch */
    /* C: the loss (overlays A and B) */
    bf16_t *hf;         /* [S, D] final norm output */
    float *rstdf;       /* [S] */
    float *logits;      /* [chunk, V] fp32 */
    bf16_t *dlogits;    /* [chunk, V] */
    bf16_t *dhf;        /* [S, D] */
    /* ---- stage 3: ring attention ---- */
    /* (S here is this rank's share of the sequence) */
    uint32_t *labels;   /* [S] the next token at each of this rank's positions */
    bf16_t *kv;         /* [2, S, Hkv*hd] this rank's K then V (k, v point into it): one ring message */
    bf16_t *kv_ring[2]; /* [2, S, Hkv*hd] K/V blocks received from the previous rank */
    bf16_t *blk;        /* [S, Hq*hd] one block's O (forward) or dQ (backward) */
    float *lse_blk;     /* [Hq, S] one block's LSE (forward) or the final LSE of its rows (backward) */
    bf16_t *dkv_blk;    /* [2, S, Hkv*hd] one block's dK, dV */
    void *o_acc;        /* [S, Hq*hd] running output in fp32 (--merge fp32; bf16 merges into o) */
    void *dq_acc;       /* [S, Hq*hd] dQ accumulator (merge precision) */
    void *dkv_ring[2];  /* [2, S, Hkv*hd] travelling dK/dV (merge precision) */
    /* ---- end stage 3 ---- */
    /* library workspaces */
    void *sdpa_ws;
    int64_t sdpa_ws_bytes;
    void *gemm_ws;
} Work;

typedef struct {
    Qwen3Config c;
    Opts o;
    int64_t S;
    SdpaShape attn;
    Params p;
    Saved sv;
    Work w;
    Gpu gpu;
    Gemm gemm;
    Sdpa sdpa;
    float attn_factor;  /* YaRN cos/sin scale */
    Arena arena[7];     /* one per memory category, ARENA_NAMES order */
    /* ---- stage 2: FSDP ---- */
    int rank, local, P; /* global rank, rank within this process, number of ranks */
    int device;
    Comm *comm;
    cudaStream_t comm_st;           /* gathers and reduce-scatters run here, beside the compute */
    cudaEvent_t ready[4], freed[4]; /* per gathered buffer: slots 0-1 layers, 2 embedding, 3 tail */
    cudaEvent_t grads_done[4], reduced[4], comm_done;
    cudaEvent_t ring_ev[4];         /* stage 3: K/V pass (0 sent-from ready, 1 received), dK/dV pass (2, 3) */
    struct Shared *sh;  /* host memory all ranks of the process share (checkpoints, init) */
    /* ---- end stage 2 ---- */
} Model;

static const char *ARENA_NAMES[7] = {"weights (bf16)", "gradients (fp32)", "optimizer (fp32 master, m, v)",
                                     "checkpoints (layer inputs)", "kept attention (O, LSE)", "working set",
                                     "cuDNN workspace"};

/* ============================================================ build */
#define BF(n) ((int64_t)(n) * 2)
#define F32(n) ((int64_t)(n) * 4)
#define P_UNITS(layout, i) ((int64_t)(layout)->P * (layout)->u[i].shard) /* a unit's gathered (padded) size */

/* Carve every tensor from the arenas. With NULL arena bases this only measures: the same code
 * is the memory plan (--dry-run) and the allocation. */
static void carve(Model *M) {
    const Qwen3Config *c = &M->c;
    const int64_t S = M->S, D = c->hidden, L = c->layers, Q = c->heads * c->head_dim, KV = c->kv_heads * c->head_dim,
                  I = c->intermediate, V = c->vocab, T = M->p.shards.shard_total,
                  C = M->o.loss_chunk < S ? M->o.loss_chunk : S;
    Arena *A = M->arena;
    Params *p = &M->p;
    Work *w = &M->w;
    p->w = arena_take(&A[0], BF(T), "weights");
    p->grad = arena_take(&A[1], F32(T), "grads");
    p->master = arena_take(&A[2], F32(T), "master");
    p->m = arena_take(&A[2], F32(T), "adam m");
    p->v = arena_take(&A[2], F32(T), "adam v");
    /* ---- stage 2: FSDP ---- */
    const ShardLayout *sl = &p->shards;
    const int64_t E0 = P_UNITS(sl, 0), ET = P_UNITS(sl, sl->nunits - 1);
    for (int i = 0; i < 2; i++) p->layer_w[i] = arena_take(&A[0], BF(sl->max_layer), "gathered layer");
    p->embed_w = arena_take(&A[0], BF(E0), "gathered embedding");
    p->tail_w = arena_take(&A[0], BF(ET), "gathered tail");
    for (int i = 0; i < 2; i++) p->layer_g[i] = arena_take(&A[1], F32(sl->max_layer), "layer grads");
    p->embed_g = arena_take(&A[1], F32(E0), "embedding grads");
    p->tail_g = arena_take(&A[1], F32(ET), "tail grads");
    /* ---- end stage 2 ---- */
    M->sv.x = arena_take(&A[3], BF((L + 1) * S * D), "checkpoints");
    if (M->o.keep_attn) {
        M->sv.o = arena_take(&A[4], BF(L * S * Q), "kept O");
        M->sv.lse = arena_take(&A[4], F32(L * c->heads * S), "kept LSE");
    }
    w->sdpa_ws_bytes = sdpa_bwd_workspace_estimate(&M->attn);
    w->sdpa_ws = arena_take(&A[6], w->sdpa_ws_bytes, "cuDNN workspace");

    Arena *W = &A[5];
    w->gemm_ws = arena_take(W, GEMM_WORKSPACE_BYTES, "cuBLASLt workspace");
    w->dx = arena_take(W, BF(S * D), "dx");
    w->ids = arena_take(W, 4 * (S + 1), "ids");
    w->labels = arena_take(W, 4 * S, "labels"); /* stage 3 */
    w->pos = arena_take(W, 4 * S, "pos");
    w->inv_freq = arena_take(W, F32(c->head_dim / 2), "inv_freq");
    w->losses = arena_take(W, F32(S), "losses");
    w->loss_sum = arena_take(W, 8, "loss_sum");
    w->gnorm_sq = arena_take(W, 8, "gnorm");
    w->red = arena_take(W, 8 * 1024, "reduction scratch");
    const int64_t persistent = arena_mark(W);
    /* A */
    w->xn = arena_take(W, BF(S * D), "xn");
    w->rstd1 = arena_take(W, F32(S), "rstd1");
    w->q_raw = arena_take(W, BF(S * Q), "q_raw");
    w->k_raw = arena_take(W, BF(S * KV), "k_raw");
    w->q = arena_take(W, BF(S * Q), "q");
    /* ---- stage 3: ring attention ---- */
    const int64_t acc = !strcmp(M->o.merge, "fp32") ? 4 : 2; /* bytes per accumulator element */
    w->kv = arena_take(W, BF(2 * S * KV), "k and v");
    w->k = w->kv;
    w->v = w->kv ? w->kv + S * KV : NULL;
    for (int i = 0; i < 2; i++) w->kv_ring[i] = arena_take(W, BF(2 * S * KV), "ring K/V");
    w->blk = arena_take(W, BF(S * Q), "block O / dQ");
    w->lse_blk = arena_take(W, F32(c->heads * S), "block LSE");
    w->dkv_blk = arena_take(W, BF(2 * S * KV), "block dK, dV");
    /* ---- end stage 3 ---- */
    w->rstd_q = arena_take(W, F32(S * c->heads), "rstd_q");
    w->rstd_k = arena_take(W, F32(S * c->kv_heads), "rstd_k");
    if (!M->o.keep_attn) {
        w->o = arena_take(W, BF(S * Q), "o");
        w->lse = arena_take(W, F32(c->heads * S), "lse");
    }
    w->x_mid = arena_take(W, BF(S * D), "x_mid");
    const int64_t region_b = arena_mark(W);
    /* B1 */
    w->xn2 = arena_take(W, BF(S * D), "xn2");
    w->rstd2 = arena_take(W, F32(S), "rstd2");
    w->g = arena_take(W, BF(S * I), "g");
    w->u = arena_take(W, BF(S * I), "u");
    w->h = arena_take(W, BF(S * I), "h");
    w->dxn2 = arena_take(W, BF(S * D), "dxn2");
    arena_release(W, region_b);
    /* B2 */
    w->d_o = arena_take(W, BF(S * Q), "d_o");
    w->dq = arena_take(W, BF(S * Q), "dq");
    w->dk = arena_take(W, BF(S * KV), "dk");
    w->dv = arena_take(W, BF(S * KV), "dv");
    w->dxn = arena_take(W, BF(S * D), "dxn");
    w->softmax_sum = arena_take(W, F32(c->heads * S), "softmax_sum");
    w->dq_accum = arena_take(W, F32(c->heads * S * c->head_dim), "dq_accum");
    /* ---- stage 3: ring attention ---- */
    /* B2 is free while a ring forward runs (only backward uses it otherwise) */
    w->o_acc = arena_take(W, acc * S * Q, "running O");
    w->dq_acc = arena_take(W, acc * S * Q, "dQ accumulator");
    for (int i = 0; i < 2; i++) w->dkv_ring[i] = arena_take(W, acc * 2 * S * KV, "travelling dK/dV");
    /* ---- end stage 3 ---- */
    arena_release(W, persistent);
    /* C */
    w->hf = arena_take(W, BF(S * D), "hf");
    w->rstdf = arena_take(W, F32(S), "rstdf");
    w->logits = arena_take(W, F32(C * V), "logits");
    w->dlogits = arena_take(W, BF(C * V), "dlogits");
    w->dhf = arena_take(W, BF(S * D), "dhf");
    arena_release(W, persistent);
}

static MemPlan plan_memory(Model *M) {
    for (int i = 0; i < 7; i++) arena_init(&M->arena[i], ARENA_NAMES[i], NULL, 0);
    carve(M);
    MemPlan mp = {0};
    for (int i = 0; i < 7; i++)
        if (M->arena[i].high) memplan_add(&mp, ARENA_NAMES[i], M->arena[i].high);
    return mp;
}

static void allocate(Model *M) {
    int64_t high[7];
    for (int i = 0; i < 7; i++) high[i] = M->arena[i].high;
    for (int i = 0; i < 7; i++) arena_init(&M->arena[i], ARENA_NAMES[i], high[i] ? gpu_malloc(high[i], ARENA_NAMES[i]) : NULL, high[i]);
    carve(M);
}

static void load_config(Model *M) {
    char err[512];
    const char *src = M->o.resume ? M->o.resume : M->o.model;
    if (config_load(src, &M->c, err, sizeof err)) DIE("%s", err);
    if (M->o.layers > 0) {
        if (M->o.layers > M->c.layers) DIE("--layers %lld: the model has %lld", (long long)M->o.layers, (long long)M->c.layers);
        M->c.layers = M->o.layers;
    }
    if (M->o.yarn_factor > 0) config_set_yarn(&M->c, M->o.yarn_factor, M->o.yarn_original);
    if (M->c.head_dim % 64) DIE("head_dim %lld: the RoPE kernel needs a multiple of 64", (long long)M->c.head_dim);
    if (M->c.hidden % 8) DIE("hidden_size %lld must be a multiple of 8", (long long)M->c.hidden);
    if (zigzag_check(M->o.seq, M->P, err, sizeof err)) DIE("%s", err); /* stage 3 */
    M->S = M->o.seq / M->P;                                             /* this rank's tokens */
    M->attn = (SdpaShape){M->c.heads, M->c.kv_heads, M->S, M->S, M->c.head_dim, 1, 0};
    if (!sdpa_shape_ok(&M->attn, err, sizeof err)) {
        if (!M->o.dry_run) DIE("%s", err);
        fprintf(stderr, "warning: this run would stop before its first step: %s\n", err); /* the plan still helps */
    }
    params_build(&M->c, &M->p.table);
    /* ---- stage 2: FSDP ---- */
    shard_build(&M->p.table, M->P, &M->p.shards);
    /* ---- end stage 2 ---- */
}

/* Host <-> device copies of the training state: fp32 master weights and AdamW moments (m, v NULL:
 * zero). Uploading also makes the bf16 weights. Full-size host arrays in the flat layout. */
/* ---- stage 2: FSDP ---- */
/* A rank owns one contiguous range of each unit: flat [*flat, *flat + n); returns n (may be 0). */
static int64_t owned(const Model *M, int64_t u, int64_t *flat) {
    const ShardUnit *su = &M->p.shards.u[u];
    *flat = su->begin + (int64_t)M->rank * su->shard;
    const int64_t n = su->end - *flat;
    return n < 0 ? 0 : n > su->shard ? su->shard : n;
}
/* full host array <-> this rank's shard buffer (padding zero) */
static void shard_copy(Model *M, float *shard, float *host, int up) {
    const ShardLayout *sl = &M->p.shards;
    if (up) CUDA_CHECK(cudaMemsetAsync(shard, 0, (size_t)F32(sl->shard_total), M->gpu.stream));
    for (int64_t u = 0; u < sl->nunits; u++) {
        int64_t flat;
        const int64_t n = owned(M, u, &flat);
        if (!n) continue;
        if (up) gpu_upload(shard + sl->u[u].shard_offset, host + flat, F32(n), M->gpu.stream);
        else gpu_download(host + flat, shard + sl->u[u].shard_offset, F32(n), M->gpu.stream);
    }
}
static void state_upload(Model *M, const float *master, const float *m, const float *v) {
    float *dst[3] = {M->p.master, M->p.m, M->p.v};
    const float *src[3] = {master, m, v};
    for (int k = 0; k < 3; k++) {
        if (src[k]) shard_copy(M, dst[k], (float *)src[k], 1);
        else CUDA_CHECK(cudaMemsetAsync(dst[k], 0, (size_t)F32(M->p.shards.shard_total), M->gpu.stream));
    }
    cast_f32_to_bf16(M->p.w, M->p.master, M->p.shards.shard_total, M->gpu.stream);
}
static void state_download(Model *M, float *master, float *m, float *v) {
    shard_copy(M, M->p.master, master, 0);
    shard_copy(M, M->p.m, m, 0);
    shard_copy(M, M->p.v, v, 0);
}
static void grads_download(Model *M, float *g) { shard_copy(M, M->p.grad, g, 0); }

/* host memory the ranks of this process share: full-size arrays for init, checkpoints, gradients */
struct Shared {
    pthread_barrier_t bar;
    float *a, *b, *c;
    int64_t step;
};
static void host_barrier(Model *M) { pthread_barrier_wait(&M->sh->bar); }
/* the process's first rank allocates (n floats each, c optional); everyone waits for it */
static void shared_alloc(Model *M, int three) {
    host_barrier(M);
    if (M->local == 0) {
        const size_t n = (size_t)F32(M->p.table.total);
        M->sh->a = xcalloc(1, n);
        M->sh->b = three ? xcalloc(1, n) : NULL;
        M->sh->c = three ? xcalloc(1, n) : NULL;
    }
    host_barrier(M);
}
static void shared_free(Model *M) {
    host_barrier(M);
    if (M->local == 0) {
        free(M->sh->a); free(M->sh->b); free(M->sh->c);
        M->sh->a = M->sh->b = M->sh->c = NULL;
    }
    host_barrier(M);
}
/* ---- end stage 2 ---- */

static int64_t read_checkpoint(const Model *M, const char *dir, float *master, float *m, float *v);

/* returns the step training continues after (0 unless --resume) */
/* ---- stage 2: FSDP ---- */
/* The process's first rank reads or makes the full model in shared host memory; every rank then
 * uploads its own shard of it. */
static int64_t init_weights(Model *M) {
    char err[512];
    struct stat sb;
    struct Shared *sh = M->sh;
    shared_alloc(M, M->o.resume != NULL);
    if (M->local == 0) {
        sh->step = 0;
        if (M->o.resume) sh->step = read_checkpoint(M, M->o.resume, sh->a, sh->b, sh->c);
        else if (!stat(M->o.model, &sb) && S_ISDIR(sb.st_mode)) {
            printf("loading weights from %s\n", M->o.model);
            if (params_load(&M->p.table, M->o.model, sh->a, err, sizeof err)) DIE("%s", err);
        } else {
            printf("random init (normal 0, %g; norms 1), seed %lld\n", M->c.init_std, (long long)M->o.seed);
            params_init(&M->p.table, M->c.init_std, (uint64_t)M->o.seed, sh->a);
        }
    }
    host_barrier(M);
    state_upload(M, sh->a, sh->b, sh->c);
    CUDA_CHECK(cudaStreamSynchronize(M->gpu.stream));
    const int64_t step = sh->step;
    shared_free(M);
    return step;
}
/* ---- end stage 2 ---- */

static void setup_rope(Model *M) {
    double inv[512], af;
    float invf[512];
    rope_inv_freq(&M->c, inv, &af);
    for (int64_t i = 0; i < M->c.head_dim / 2; i++) invf[i] = (float)inv[i];
    M->attn_factor = (float)af;
    gpu_upload(M->w.inv_freq, invf, F32(M->c.head_dim / 2), M->gpu.stream);
    int32_t *pos = xmalloc((size_t)(4 * M->S));
    int64_t *zz = xmalloc((size_t)(8 * M->S)); /* stage 3: the global positions of this rank's tokens */
    zigzag_positions(M->o.seq, M->P, M->rank, zz);
    for (int64_t t = 0; t < M->S; t++) pos[t] = (int32_t)zz[t];
    free(zz);
    gpu_upload(M->w.pos, pos, 4 * M->S, M->gpu.stream);
    free(pos);
}

/* ============================================================ profile */
/* --profile: an event at every change of kernel class; the time between two events is charged
 * to the class of the first. Off, mark() is one branch. */
enum { K_GEMM, K_ATTN, K_ELEM, K_LOSS, K_OPTIM, K_END, K_N };
static const char *K_NAMES[K_N] = {"GEMM", "attention", "norms/RoPE/SwiGLU/embedding", "loss (lm_head + CE)",
                                   "optimizer", "-"};
#define MAX_MARKS 8192
static struct {
    int on, n, cls[MAX_MARKS];
    cudaEvent_t ev[MAX_MARKS];
    double ms[K_N];
} prof;

static void mark(cudaStream_t st, int cls) {
    if (!prof.on || prof.n == MAX_MARKS || longctx_rank > 0) return; /* stage 2: rank 0 profiles */
    if (!prof.ev[prof.n]) CUDA_CHECK(cudaEventCreate(&prof.ev[prof.n]));
    CUDA_CHECK(cudaEventRecord(prof.ev[prof.n], st));
    prof.cls[prof.n++] = cls;
}

static void prof_report(cudaStream_t st) {
    if (!prof.on || longctx_rank > 0) return;
    CUDA_CHECK(cudaStreamSynchronize(st));
    double total = 0;
    for (int i = 0; i < K_N; i++) prof.ms[i] = 0;
    for (int i = 0; i + 1 < prof.n; i++) {
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, prof.ev[i], prof.ev[i + 1]));
        prof.ms[prof.cls[i]] += ms;
        total += ms;
    }
    printf("  profile:");
    for (int i = 0; i < K_END; i++) printf(" %s %.1f ms (%.1f%%)%s", K_NAMES[i], prof.ms[i], 100 * prof.ms[i] / total, i + 1 < K_END ? " |" : "\n");
    prof.n = 0;
}

/* ============================================================ forward */
/* ---- stage 2: FSDP ---- */
/* The unit holding a tensor (0 embedding, 1 + l layer l, last the tail) and its buffers: gathered
 * bf16 weights and full fp32 gradients. Layers alternate between two buffers (slots 0, 1). */
static int64_t unit_of(const Model *M, ParamKind k, int64_t l) {
    if (k >= P_IN_NORM && k <= P_DOWN) return 1 + l;
    if (k == P_EMBED || (k == P_LM_HEAD && M->c.tied)) return 0;
    return M->p.shards.nunits - 1;
}
static int slot_of(const Model *M, int64_t u) { return u == 0 ? 2 : u == M->p.shards.nunits - 1 ? 3 : (int)((u - 1) % 2); }
static bf16_t *unit_w(const Model *M, int64_t u) {
    const int s = slot_of(M, u);
    return s == 2 ? M->p.embed_w : s == 3 ? M->p.tail_w : M->p.layer_w[s];
}
static float *unit_g(const Model *M, int64_t u) {
    const int s = slot_of(M, u);
    return s == 2 ? M->p.embed_g : s == 3 ? M->p.tail_g : M->p.layer_g[s];
}
static const bf16_t *W(const Model *M, ParamKind k, int64_t l) {
    const int64_t u = unit_of(M, k, l);
    return unit_w(M, u) + (params_get(&M->p.table, k, l)->offset - M->p.shards.u[u].begin);
}
static float *G(const Model *M, ParamKind k, int64_t l) {
    const int64_t u = unit_of(M, k, l);
    return unit_g(M, u) + (params_get(&M->p.table, k, l)->offset - M->p.shards.u[u].begin);
}

/* all-gather unit u's bf16 weights on the communication stream, once compute is done with its buffer */
static void fetch(Model *M, int64_t u) {
    const ShardUnit *su = &M->p.shards.u[u];
    const int s = slot_of(M, u);
    CUDA_CHECK(cudaStreamWaitEvent(M->comm_st, M->freed[s], 0));
    comm_all_gather_bf16(M->comm, unit_w(M, u), M->p.w + su->shard_offset, su->shard, M->comm_st);
    CUDA_CHECK(cudaEventRecord(M->ready[s], M->comm_st));
}
static void await_unit(Model *M, int64_t u) { CUDA_CHECK(cudaStreamWaitEvent(M->gpu.stream, M->ready[slot_of(M, u)], 0)); }
static void release(Model *M, int64_t u) { CUDA_CHECK(cudaEventRecord(M->freed[slot_of(M, u)], M->gpu.stream)); }

/* zero unit u's gradient buffer, once the previous reduce-scatter out of it is done */
static void zero_grads(Model *M, int64_t u) {
    const int s = slot_of(M, u);
    CUDA_CHECK(cudaStreamWaitEvent(M->gpu.stream, M->reduced[s], 0));
    CUDA_CHECK(cudaMemsetAsync(unit_g(M, u), 0, (size_t)F32(P_UNITS(&M->p.shards, u)), M->gpu.stream));
}
/* unit u's gradients are complete: reduce-scatter them, averaged over ranks, into this rank's shard */
static void reduce_grads(Model *M, int64_t u) {
    const ShardUnit *su = &M->p.shards.u[u];
    const int s = slot_of(M, u);
    CUDA_CHECK(cudaEventRecord(M->grads_done[s], M->gpu.stream));
    CUDA_CHECK(cudaStreamWaitEvent(M->comm_st, M->grads_done[s], 0));
    comm_reduce_scatter_f32(M->comm, M->p.grad + su->shard_offset, unit_g(M, u), su->shard, 1.f / (float)M->P,
                            M->comm_st);
    CUDA_CHECK(cudaEventRecord(M->reduced[s], M->comm_st));
}
/* ---- end stage 2 ---- */

/* ---- stage 3: ring attention ---- */
/* send `bytes` at `send` to the next rank while receiving as many into `recv` from the previous one,
 * on the communication stream, once the compute stream has produced `send` (and is done with
 * `recv`). Event pair ev, ev+1. */
static void ring_pass(Model *M, const void *send, void *recv, int64_t bytes, int ev) {
    CUDA_CHECK(cudaEventRecord(M->ring_ev[ev], M->gpu.stream));
    CUDA_CHECK(cudaStreamWaitEvent(M->comm_st, M->ring_ev[ev], 0));
    comm_sendrecv(M->comm, send, (M->rank + 1) % M->P, recv, (M->rank + M->P - 1) % M->P, bytes, M->comm_st);
    CUDA_CHECK(cudaEventRecord(M->ring_ev[ev + 1], M->comm_st));
}
static void ring_wait(Model *M, int ev) { CUDA_CHECK(cudaStreamWaitEvent(M->gpu.stream, M->ring_ev[ev + 1], 0)); }

/* this rank's queries against every rank's K/V: P cuDNN blocks on the ring schedule (zigzag.h),
 * the next block's K/V arriving while this one computes; results merged by LSE into o, lse */
static void ring_forward(Model *M) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t n = M->S, H = c->heads, D = c->head_dim, Q = H * D, KV = c->kv_heads * D;
    const int f32 = !strcmp(M->o.merge, "fp32");
    void *o = f32 ? w->o_acc : (void *)w->o;
    cudaStream_t st = M->gpu.stream;
    fill_f32(w->lse, -INFINITY, H * n, st);
    const bf16_t *cur = w->kv;
    for (int i = 0; i < M->P; i++) {
        if (i + 1 < M->P) ring_pass(M, cur, w->kv_ring[i % 2], BF(2 * n * KV), 0);
        const RingBlock b = ring_block(M->o.seq, M->P, M->rank, i);
        const SdpaShape sh = {H, c->kv_heads, b.nq, b.nk, D, b.causal, 0};
        sdpa_fwd(&M->sdpa, &sh, w->blk, w->lse_blk, w->q + b.q0 * Q, cur + b.k0 * KV, cur + (n + b.k0) * KV,
                 w->sdpa_ws, w->sdpa_ws_bytes);
        lse_merge(o, f32, w->lse, w->blk, w->lse_blk, n, b.q0, b.nq, H, D, st);
        if (i + 1 < M->P) {
            ring_wait(M, 0);
            cur = w->kv_ring[i % 2];
        }
    }
    if (f32) cast_f32_to_bf16(w->o, w->o_acc, n * Q, st);
}

/* the same blocks backward with the final O and LSE: dQ adds up here; each block's dK/dV joins the
 * running sum that travels with it, and after P passes every rank holds its own K/V's total */
static void ring_backward(Model *M) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t n = M->S, H = c->heads, D = c->head_dim, Q = H * D, KV = c->kv_heads * D;
    const int f32 = !strcmp(M->o.merge, "fp32");
    const int64_t acc = f32 ? 4 : 2;
    cudaStream_t st = M->gpu.stream;
    CUDA_CHECK(cudaMemsetAsync(w->dq_acc, 0, (size_t)(acc * n * Q), st));
    CUDA_CHECK(cudaMemsetAsync(w->dkv_ring[0], 0, (size_t)(acc * 2 * n * KV), st));
    char *dkv = w->dkv_ring[0];
    const bf16_t *cur = w->kv;
    for (int i = 0; i < M->P; i++) {
        if (i + 1 < M->P) ring_pass(M, cur, w->kv_ring[i % 2], BF(2 * n * KV), 0);
        const RingBlock b = ring_block(M->o.seq, M->P, M->rank, i);
        const SdpaShape sh = {H, c->kv_heads, b.nq, b.nk, D, b.causal, 0};
        /* the final LSE of the block's rows, [H, nq] contiguous as cuDNN reads it */
        CUDA_CHECK(cudaMemcpy2DAsync(w->lse_blk, (size_t)b.nq * 4, w->lse + b.q0, (size_t)n * 4, (size_t)b.nq * 4,
                                     (size_t)H, cudaMemcpyDeviceToDevice, st));
        sdpa_bwd(&M->sdpa, &sh, w->blk, w->dkv_blk, w->dkv_blk + b.nk * KV, w->q + b.q0 * Q, cur + b.k0 * KV,
                 cur + (n + b.k0) * KV, w->o + b.q0 * Q, w->d_o + b.q0 * Q, w->lse_blk, w->softmax_sum, w->dq_accum,
                 w->sdpa_ws, w->sdpa_ws_bytes);
        add_bf16_into((char *)w->dq_acc + acc * b.q0 * Q, f32, w->blk, b.nq * Q, st);
        if (i > 0) ring_wait(M, 2); /* the running dK/dV of this block has arrived */
        add_bf16_into(dkv + acc * b.k0 * KV, f32, w->dkv_blk, b.nk * KV, st);
        add_bf16_into(dkv + acc * (n + b.k0) * KV, f32, w->dkv_blk + b.nk * KV, b.nk * KV, st);
        if (M->P > 1) { /* pass it on; what arrives belongs to the next block (after the last: our own) */
            char *next = w->dkv_ring[(i + 1) % 2];
            ring_pass(M, dkv, next, acc * 2 * n * KV, 2);
            dkv = next;
        }
        if (i + 1 < M->P) {
            ring_wait(M, 0);
            cur = w->kv_ring[i % 2];
        }
    }
    if (M->P > 1) ring_wait(M, 2);
    if (f32) {
        cast_f32_to_bf16(w->dq, w->dq_acc, n * Q, st);
        cast_f32_to_bf16(w->dk, (float *)dkv, n * KV, st);
        cast_f32_to_bf16(w->dv, (float *)dkv + n * KV, n * KV, st);
    } else {
        CUDA_CHECK(cudaMemcpyAsync(w->dq, w->dq_acc, (size_t)BF(n * Q), cudaMemcpyDeviceToDevice, st));
        CUDA_CHECK(cudaMemcpyAsync(w->dk, dkv, (size_t)BF(n * KV), cudaMemcpyDeviceToDevice, st));
        CUDA_CHECK(cudaMemcpyAsync(w->dv, dkv + BF(n * KV), (size_t)BF(n * KV), cudaMemcpyDeviceToDevice, st));
    }
}
/* ---- end stage 3 ---- */

/* x -> x_mid = x + o_proj(attention(norms, RoPE, projections)). run_attn = 0 reuses kept O/LSE. */
static void attention_forward(Model *M, int64_t l, const bf16_t *x, int run_attn) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t S = M->S, D = c->hidden, Q = c->heads * c->head_dim, KV = c->kv_heads * c->head_dim;
    cudaStream_t st = M->gpu.stream;
    if (M->o.keep_attn) {
        w->o = M->sv.o + l * S * Q;
        w->lse = M->sv.lse + l * c->heads * S;
    }
    mark(st, K_ELEM);
    rmsnorm_fwd(w->xn, w->rstd1, x, W(M, P_IN_NORM, l), S, D, (float)c->eps, st);
    mark(st, K_GEMM);
    linear_fwd(&M->gemm, w->q_raw, 0, w->xn, W(M, P_Q, l), S, D, Q, 0.f, st);
    linear_fwd(&M->gemm, w->k_raw, 0, w->xn, W(M, P_K, l), S, D, KV, 0.f, st);
    linear_fwd(&M->gemm, w->v, 0, w->xn, W(M, P_V, l), S, D, KV, 0.f, st);
    mark(st, K_ELEM);
    qk_norm_rope_fwd(w->q, w->rstd_q, w->q_raw, W(M, P_Q_NORM, l), w->pos, w->inv_freq, M->attn_factor, S, c->heads,
                     c->head_dim, (float)c->eps, st);
    qk_norm_rope_fwd(w->k, w->rstd_k, w->k_raw, W(M, P_K_NORM, l), w->pos, w->inv_freq, M->attn_factor, S,
                     c->kv_heads, c->head_dim, (float)c->eps, st);
    mark(st, K_ATTN);
    if (run_attn) ring_forward(M); /* stage 3 */
    mark(st, K_GEMM);
    linear_fwd_add(&M->gemm, w->x_mid, x, w->o, W(M, P_O, l), S, Q, D, st);
}

/* x_mid -> x_out = x_mid + down(silu(gate(n)) * up(n)), n = post_attention_layernorm(x_mid).
 * x_out NULL (recompute for backward): stop after h. */
static void mlp_forward(Model *M, int64_t l, bf16_t *x_out) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t S = M->S, D = c->hidden, I = c->intermediate;
    cudaStream_t st = M->gpu.stream;
    mark(st, K_ELEM);
    rmsnorm_fwd(w->xn2, w->rstd2, w->x_mid, W(M, P_POST_NORM, l), S, D, (float)c->eps, st);
    mark(st, K_GEMM);
    linear_fwd(&M->gemm, w->g, 0, w->xn2, W(M, P_GATE, l), S, D, I, 0.f, st);
    linear_fwd(&M->gemm, w->u, 0, w->xn2, W(M, P_UP, l), S, D, I, 0.f, st);
    mark(st, K_ELEM);
    swiglu_fwd(w->h, w->g, w->u, S * I, st);
    mark(st, K_GEMM);
    if (x_out) linear_fwd_add(&M->gemm, x_out, w->x_mid, w->h, W(M, P_DOWN, l), S, I, D, st);
}

static void forward(Model *M) {
    const int64_t S = M->S, D = M->c.hidden;
    /* ---- stage 2: FSDP ---- */
    fetch(M, 0);                        /* embedding */
    fetch(M, M->p.shards.nunits - 1);   /* tail, for the loss */
    fetch(M, 1);                        /* layer 0 */
    await_unit(M, 0);
    /* ---- end stage 2 ---- */
    mark(M->gpu.stream, K_ELEM);
    embedding_fwd(M->sv.x, W(M, P_EMBED, 0), M->w.ids, S, D, M->gpu.stream);
    for (int64_t l = 0; l < M->c.layers; l++) {
        /* ---- stage 2: FSDP ---- */
        if (l + 1 < M->c.layers) fetch(M, 2 + l); /* the next layer's gather overlaps this layer */
        await_unit(M, 1 + l);
        /* ---- end stage 2 ---- */
        attention_forward(M, l, M->sv.x + l * S * D, 1);
        mlp_forward(M, l, M->sv.x + (l + 1) * S * D);
        release(M, 1 + l); /* stage 2 */
    }
}

/* final norm, then chunked NLL fused with its gradient: d(loss)/d(x_L) lands in w.dx */
static void loss_and_head_backward(Model *M) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t S = M->S, D = c->hidden, V = c->vocab, C = M->o.loss_chunk;
    const bf16_t *xL = M->sv.x + c->layers * S * D, *lm = W(M, P_LM_HEAD, 0);
    float *dlm = G(M, P_LM_HEAD, 0);
    cudaStream_t st = M->gpu.stream;
    await_unit(M, M->p.shards.nunits - 1); /* stage 2 */
    mark(st, K_LOSS);
    rmsnorm_fwd(w->hf, w->rstdf, xL, W(M, P_FINAL_NORM, 0), S, D, (float)c->eps, st);
    for (int64_t c0 = 0; c0 < S; c0 += C) {
        const int64_t n = S - c0 < C ? S - c0 : C;
        linear_fwd(&M->gemm, w->logits, 1, w->hf + c0 * D, lm, n, D, V, 0.f, st);
        cross_entropy(w->dlogits, w->losses + c0, w->logits, w->labels + c0, n, V, 1.f / (float)S, st);
        linear_dw(&M->gemm, dlm, w->dlogits, w->hf + c0 * D, n, D, V, st);
        linear_dx(&M->gemm, w->dhf + c0 * D, w->dlogits, lm, n, D, V, 0.f, st);
    }
    CUDA_CHECK(cudaMemsetAsync(w->loss_sum, 0, 8, st));
    sum_f32(w->loss_sum, w->losses, S, w->red, st);
    CUDA_CHECK(cudaMemsetAsync(w->dx, 0, (size_t)BF(S * D), st));
    rmsnorm_bwd(w->dx, G(M, P_FINAL_NORM, 0), w->dhf, xL, w->rstdf, W(M, P_FINAL_NORM, 0), S, D, st);
}

/* ============================================================ backward */
/* w.dx holds d(loss)/d(x_out of layer l); on return d(loss)/d(x_in of layer l). */
static void layer_backward(Model *M, int64_t l) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    Gemm *gm = &M->gemm;
    const int64_t S = M->S, D = c->hidden, I = c->intermediate, Q = c->heads * c->head_dim,
                  KV = c->kv_heads * c->head_dim;
    const bf16_t *x = M->sv.x + l * S * D;
    cudaStream_t st = M->gpu.stream;
    /* recompute this layer's forward (attention too, unless it was kept) */
    attention_forward(M, l, x, !M->o.keep_attn);
    mlp_forward(M, l, NULL);

    /* MLP: dh = dx Wd, dWd += dx^T h, then SwiGLU and the two input projections */
    mark(st, K_GEMM);
    linear_dw(gm, G(M, P_DOWN, l), w->dx, w->h, S, I, D, st);
    linear_dx(gm, w->h, w->dx, W(M, P_DOWN, l), S, I, D, 0.f, st); /* h <- dh */
    mark(st, K_ELEM);
    swiglu_bwd(w->g, w->u, w->h, S * I, st);                         /* g <- dg, u <- du */
    mark(st, K_GEMM);
    linear_dw(gm, G(M, P_GATE, l), w->g, w->xn2, S, D, I, st);
    linear_dw(gm, G(M, P_UP, l), w->u, w->xn2, S, D, I, st);
    linear_dx(gm, w->dxn2, w->g, W(M, P_GATE, l), S, D, I, 0.f, st);
    linear_dx(gm, w->dxn2, w->u, W(M, P_UP, l), S, D, I, 1.f, st);
    mark(st, K_ELEM);
    rmsnorm_bwd(w->dx, G(M, P_POST_NORM, l), w->dxn2, w->x_mid, w->rstd2, W(M, P_POST_NORM, l), S, D, st);

    /* attention: d(o) = dx Wo, then flash attention backward, head norms + RoPE, projections */
    mark(st, K_GEMM);
    linear_dw(gm, G(M, P_O, l), w->dx, w->o, S, Q, D, st);
    linear_dx(gm, w->d_o, w->dx, W(M, P_O, l), S, Q, D, 0.f, st);
    mark(st, K_ATTN);
    ring_backward(M); /* stage 3 */
    mark(st, K_ELEM);
    qk_norm_rope_bwd(w->dq, G(M, P_Q_NORM, l), w->q_raw, w->rstd_q, W(M, P_Q_NORM, l), w->pos, w->inv_freq,
                     M->attn_factor, S, c->heads, c->head_dim, st);
    qk_norm_rope_bwd(w->dk, G(M, P_K_NORM, l), w->k_raw, w->rstd_k, W(M, P_K_NORM, l), w->pos, w->inv_freq,
                     M->attn_factor, S, c->kv_heads, c->head_dim, st);
    mark(st, K_GEMM);
    linear_dw(gm, G(M, P_Q, l), w->dq, w->xn, S, D, Q, st);
    linear_dw(gm, G(M, P_K, l), w->dk, w->xn, S, D, KV, st);
    linear_dw(gm, G(M, P_V, l), w->dv, w->xn, S, D, KV, st);
    linear_dx(gm, w->dxn, w->dq, W(M, P_Q, l), S, D, Q, 0.f, st);
    linear_dx(gm, w->dxn, w->dk, W(M, P_K, l), S, D, KV, 1.f, st);
    linear_dx(gm, w->dxn, w->dv, W(M, P_V, l), S, D, KV, 1.f, st);
    mark(st, K_ELEM);
    rmsnorm_bwd(w->dx, G(M, P_IN_NORM, l), w->dxn, x, w->rstd1, W(M, P_IN_NORM, l), S, D, st);
}

static void backward(Model *M) {
    /* ---- stage 2: FSDP ---- */
    const int64_t last = M->p.shards.nunits - 1;
    fetch(M, M->c.layers); /* the last layer */
    for (int64_t l = M->c.layers - 1; l >= 0; l--) {
        if (l > 0) fetch(M, l); /* layer l-1, gathered while layer l runs */
        await_unit(M, 1 + l);
        zero_grads(M, 1 + l);
        layer_backward(M, l);
        release(M, 1 + l);
        reduce_grads(M, 1 + l);
    }
    /* ---- end stage 2 ---- */
    mark(M->gpu.stream, K_ELEM);
    embedding_bwd(G(M, P_EMBED, 0), M->w.dx, M->w.ids, M->S, M->c.hidden, M->gpu.stream);
    /* ---- stage 2: FSDP ---- */
    reduce_grads(M, 0);
    reduce_grads(M, last);
    release(M, 0);
    release(M, last);
    CUDA_CHECK(cudaEventRecord(M->comm_done, M->comm_st)); /* the optimizer needs every shard's grads */
    CUDA_CHECK(cudaStreamWaitEvent(M->gpu.stream, M->comm_done, 0));
    /* ---- end stage 2 ---- */
}

/* ============================================================ update */
static double lr_at(const Opts *o, int64_t step) { /* step is 1-based */
    if (step <= o->warmup) return o->lr * (double)step / (double)(o->warmup > 0 ? o->warmup : 1);
    if (!strcmp(o->schedule, "constant")) return o->lr;
    const double t = (double)(step - o->warmup) / (double)(o->steps - o->warmup > 0 ? o->steps - o->warmup : 1);
    const double floor = o->lr * o->min_lr_frac;
    return floor + (o->lr - floor) * 0.5 * (1.0 + cos(M_PI * (t > 1 ? 1 : t)));
}

static void update(Model *M, int64_t step, double lr) {
    const Opts *o = &M->o;
    Params *p = &M->p;
    cudaStream_t st = M->gpu.stream;
    mark(st, K_OPTIM);
    sumsq_f32(M->w.gnorm_sq, p->grad, p->shards.shard_total, M->w.red, st);
    comm_all_reduce_f64(M->comm, M->w.gnorm_sq, 1, st); /* stage 2: the global norm */
    const float bc1 = (float)(1.0 - pow(o->beta1, (double)step)), bc2 = (float)(1.0 - pow(o->beta2, (double)step));
    for (int64_t i = 0; i < p->npieces; i++) { /* stage 2: the pieces of tensors this rank owns */
        const ShardPiece *t = &p->pieces[i];
        const int64_t at = t->shard_offset;
        adamw(p->master + at, p->w + at, p->m + at, p->v + at, p->grad + at, t->numel, M->w.gnorm_sq,
              (float)o->clip, (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
              params_decays(t->param) ? (float)o->wd : 0.f, bc1, bc2, st);
    }
}

/* ============================================================ data */
typedef struct {
    TokenFile tf;
    Loader ld;
    uint32_t *host;     /* [S+1] */
    int64_t epoch;
} Data;

static void data_open(Data *d, const Model *M) {
    char err[512];
    if (tokens_open(M->o.data, M->c.vocab, &d->tf, err, sizeof err))
        DIE("%s%s", err, strcmp(M->o.data, "data/books.tok") ? "" : " (run from the repository root, or pass --data)");
    if (loader_init(&d->ld, &d->tf, M->o.seq, 1, 0, err, sizeof err)) DIE("%s", err); /* stage 3: one sequence */
    d->host = xmalloc((size_t)(4 * (M->o.seq + 1 + 2 * M->S)));
    d->epoch = -1;
    printf("data %s: %lld tokens, %lld windows of %lld+1 per epoch\n", M->o.data, (long long)d->tf.count,
           (long long)d->ld.windows, (long long)M->o.seq);
}

/* step is 0-based here: the window follows from the step alone, so resume reads the same data */
static void data_load(Data *d, Model *M, int64_t step) {
    const int64_t e = loader_window(&d->ld, step, d->host);
    if (e != d->epoch) {
        if (d->epoch >= 0) printf("data: epoch %lld begins at step %lld\n", (long long)e, (long long)step + 1);
        d->epoch = e;
    }
    /* ---- stage 3: ring attention ---- */
    uint32_t *ids = d->host + M->o.seq + 1, *labels = ids + M->S;
    int64_t *pos = xmalloc((size_t)(8 * M->S));
    zigzag_positions(M->o.seq, M->P, M->rank, pos);
    for (int64_t t = 0; t < M->S; t++) {
        ids[t] = d->host[pos[t]];
        labels[t] = d->host[pos[t] + 1]; /* shifted before the split: a chunk's last label is the next chunk's first token */
    }
    free(pos);
    CUDA_CHECK(cudaMemcpyAsync(M->w.ids, ids, (size_t)(4 * M->S), cudaMemcpyHostToDevice, M->gpu.stream));
    CUDA_CHECK(cudaMemcpyAsync(M->w.labels, labels, (size_t)(4 * M->S), cudaMemcpyHostToDevice, M->gpu.stream));
    CUDA_CHECK(cudaStreamSynchronize(M->gpu.stream)); /* the host staging buffer is reused next step */
    /* ---- end stage 3 ---- */
}

/* ============================================================ main: checkpoints */
static void ensure_dir(const char *dir) {
    if (mkdir(dir, 0755) && errno != EEXIST) DIE("cannot create %s: %s", dir, strerror(errno));
}

/* HF directory (config.json + bf16 model.safetensors) + trainer_state.safetensors (fp32 master, m, v),
 * from full-size host arrays */
static void write_checkpoint(const Model *M, const char *dir, int64_t step, const float *master, const float *m,
                             const float *v) {
    const ParamTable *t = &M->p.table;
    const int64_t T = t->total;
    char path[4096], err[512], meta[512];
    ensure_dir(dir);
    uint16_t *bf = xmalloc((size_t)BF(T));
    for (int64_t i = 0; i < T; i++) bf[i] = f32_to_bf16(master[i]);
    StWrite *sw = xcalloc((size_t)(3 * t->n), sizeof(StWrite));
    char (*names)[112] = xcalloc((size_t)(3 * t->n), 112);
    for (int64_t i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        sw[i] = (StWrite){p->name, ST_BF16, p->ndim, {p->shape[0], p->shape[1]}, bf + p->offset};
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (config_write_json(&M->c, path, "bfloat16")) DIE("cannot write %s", path);
    if (st_write_dir(dir, sw, t->n, 4ll << 30, err, sizeof err)) DIE("%s", err);
    const float *src[3] = {master, m, v};
    const char *pre[3] = {"master", "adam_m", "adam_v"};
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < t->n; i++) {
            const ParamInfo *p = &t->p[i];
            snprintf(names[k * t->n + i], 112, "%s.%s", pre[k], p->name);
            sw[k * t->n + i] = (StWrite){names[k * t->n + i], ST_F32, p->ndim, {p->shape[0], p->shape[1]}, src[k] + p->offset};
        }
    snprintf(meta, sizeof meta, "{\"step\":\"%lld\",\"seq\":\"%lld\",\"data\":\"%s\"}", (long long)step,
             (long long)M->S, M->o.data);
    snprintf(path, sizeof path, "%s/trainer_state.safetensors", dir);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.partial", path);
    if (st_write(tmp, sw, 3 * t->n, meta, err, sizeof err)) DIE("%s", err);
    if (rename(tmp, path)) DIE("cannot rename %s: %s", tmp, strerror(errno));
    printf("saved step %lld to %s (HF model + trainer state)\n", (long long)step, dir);
    free(bf); free(sw); free(names);
}

static void save_checkpoint(Model *M, const char *dir, int64_t step) {
    /* ---- stage 2: FSDP ---- */
    shared_alloc(M, 1);
    state_download(M, M->sh->a, M->sh->b, M->sh->c); /* each rank fills its own ranges */
    host_barrier(M);
    if (M->rank == 0) write_checkpoint(M, dir, step, M->sh->a, M->sh->b, M->sh->c);
    shared_free(M);
    /* ---- end stage 2 ---- */
}

/* fills full-size host arrays; returns the step the state was saved after */
static int64_t read_checkpoint(const Model *M, const char *dir, float *master, float *m, float *v) {
    const ParamTable *t = &M->p.table;
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/trainer_state.safetensors", dir);
    SafeTensors st;
    if (st_open(path, &st, err, sizeof err)) DIE("--resume: %s", err);
    float *buf[3] = {master, m, v};
    const char *pre[3] = {"master", "adam_m", "adam_v"};
    for (int k = 0; k < 3; k++) {
        memset(buf[k], 0, (size_t)F32(t->total));
        for (int64_t i = 0; i < t->n; i++) {
            char name[128];
            snprintf(name, sizeof name, "%s.%s", pre[k], t->p[i].name);
            if (st_read_f32(&st, name, t->p[i].ndim, t->p[i].shape, buf[k] + t->p[i].offset, err, sizeof err))
                DIE("--resume %s: %s", path, err);
        }
    }
    st_close(&st);
    /* the step lives in the header metadata: read it from the raw header */
    FILE *f = fopen(path, "rb");
    char head[4096] = {0};
    size_t got = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    const char *s = got > 8 ? strstr(head + 8, "\"step\":\"") : NULL;
    if (!s) DIE("--resume %s: no step in the metadata", path);
    const int64_t step = strtoll(s + 8, NULL, 10);
    printf("resumed from %s after step %lld\n", dir, (long long)step);
    return step;
}

static void dump_grads(Model *M, double loss) {
    const ParamTable *t = &M->p.table;
    /* ---- stage 2: FSDP ---- */
    shared_alloc(M, 0);
    float *g = M->sh->a;
    grads_download(M, g);
    host_barrier(M);
    if (M->rank != 0) { shared_free(M); return; }
    /* ---- end stage 2 ---- */
    StWrite *sw = xcalloc((size_t)(t->n + 1), sizeof(StWrite));
    char (*names)[112] = xcalloc((size_t)t->n, 112);
    float l = (float)loss;
    sw[0] = (StWrite){"loss", ST_F32, 1, {1, 0}, &l};
    for (int64_t i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        snprintf(names[i], 112, "grad.%s", p->name);
        sw[i + 1] = (StWrite){names[i], ST_F32, p->ndim, {p->shape[0], p->shape[1]}, g + p->offset};
    }
    char err[512];
    if (st_write(M->o.dump_grads, sw, t->n + 1, NULL, err, sizeof err)) DIE("%s", err);
    printf("wrote loss and gradients of this step to %s\n", M->o.dump_grads);
    free(sw); free(names);
    shared_free(M); /* stage 2 */
}

/* ============================================================ main */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* one GPU's training run: allocate as planned, initialise, loop */
static void train(Model *M, const MemPlan *mp) {
    allocate(M);
    gemm_init(&M->gemm, M->w.gemm_ws, GEMM_WORKSPACE_BYTES);
    sdpa_init(&M->sdpa, M->gpu.stream);
    M->sdpa.verbose = 1;
    setup_rope(M);
    int64_t step = init_weights(M);
    /* the real cuDNN workspace must fit the planned one */
    const int64_t need = sdpa_bwd_workspace(&M->sdpa, &M->attn);
    if (need > M->w.sdpa_ws_bytes || sdpa_fwd_workspace(&M->sdpa, &M->attn) > M->w.sdpa_ws_bytes)
        DIE("cuDNN wants %lld bytes of workspace, the plan has %lld", (long long)need, (long long)M->w.sdpa_ws_bytes);

    Data data;
    data_open(&data, M);
    FILE *log = M->o.log && M->rank == 0 ? fopen(M->o.log, "a") : NULL; /* stage 2: rank 0 logs */
    if (M->o.log && M->rank == 0 && !log) DIE("cannot open --log %s", M->o.log);
    const double flops = config_step_flops(&M->c, M->o.seq) / M->P; /* stage 3: one rank's share of the sequence */
    const int share = M->o.local_ranks ? M->P : 1; /* stage 2: ranks on this GPU; speed and memory are per GPU */
    cudaEvent_t ev0, ev1;
    CUDA_CHECK(cudaEventCreate(&ev0));
    CUDA_CHECK(cudaEventCreate(&ev1));
    printf("training %lld steps of %d x %lld tokens (%.3g model TFLOP per rank and step)\n", (long long)M->o.steps,
           M->P, (long long)M->S, flops / 1e12);
    const double t_start = now_s();
    for (step = step + 1; step <= M->o.steps; step++) {
        cudaStream_t st = M->gpu.stream;
        const double lr = lr_at(&M->o, step);
        data_load(&data, M, step - 1);
        CUDA_CHECK(cudaEventRecord(ev0, st));
        mark(st, K_OPTIM);
        zero_grads(M, 0); /* stage 2: layer gradients are zeroed per layer, shards overwritten */
        zero_grads(M, M->p.shards.nunits - 1);
        forward(M);
        loss_and_head_backward(M);
        backward(M);
        comm_all_reduce_f64(M->comm, M->w.loss_sum, 1, st); /* stage 2: every rank's tokens */
        const int64_t tokens = M->S * M->P;
        if (M->o.dump_grads && step == 1) {
            double ls;
            gpu_download(&ls, M->w.loss_sum, 8, st);
            dump_grads(M, ls / (double)tokens);
        }
        update(M, step, lr);
        mark(st, K_END);
        CUDA_CHECK(cudaEventRecord(ev1, st));
        double loss_sum, gsq;
        gpu_download(&loss_sum, M->w.loss_sum, 8, st);
        gpu_download(&gsq, M->w.gnorm_sq, 8, st);
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
        const double loss = loss_sum / (double)tokens, sec = ms / 1e3, tflops = flops * share / sec / 1e12;
        const double used = (double)gpu_used_bytes() / (1 << 30);
        const double planned = (double)memplan_peak(mp) * share / (1 << 30);
        if (!isfinite(loss)) DIE("step %lld: loss is %f -- stopping (no checkpoint written)", (long long)step, loss);
        printf("step %5lld | loss %.6f | lr %.3e | grad norm %.4f | %.3f s | %.0f tok/s | %.1f TFLOP/s | MFU %.1f%% | "
               "mem %.2f GiB (plan %.2f)\n",
               (long long)step, loss, lr, sqrt(gsq), sec, tokens / sec, tflops, 100 * tflops * 1e12 / PEAK_FLOPS, used,
               planned);
        prof_report(st);
        fflush(stdout);
        if (log) {
            fprintf(log,
                    "{\"stage\":3,\"ranks\":%d,\"model\":\"%s\",\"seq\":%lld,\"keep_attn\":%d,\"step\":%lld,\"loss\":%.9g,"
                    "\"loss_hex\":\"%a\",\"lr\":%.6g,\"grad_norm\":%.6g,\"step_s\":%.6f,\"tokens_per_s\":%.1f,"
                    "\"model_tflops\":%.2f,\"mfu\":%.4f,\"mem_used_gib\":%.3f,\"mem_plan_gib\":%.3f,\"epoch\":%lld}\n",
                    M->P, M->c.name, (long long)M->S, M->o.keep_attn, (long long)step, loss, loss, lr, sqrt(gsq), sec, tokens / sec,
                    tflops, tflops * 1e12 / PEAK_FLOPS, used, planned, (long long)data.epoch);
            fflush(log);
        }
        if (M->o.save && M->o.save_every > 0 && step % M->o.save_every == 0 && step < M->o.steps)
            save_checkpoint(M, M->o.save, step);
    }
    printf("done: %.1f s\n", now_s() - t_start);
    if (M->o.save) save_checkpoint(M, M->o.save, M->o.steps);
    if (log) fclose(log);
}

/* ---- stage 2: FSDP ---- */
/* device memory check for one rank's plan on its GPU (share: ranks on that GPU) */
static void check_fits(const MemPlan *mp, int share, const char *gpu) {
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const int64_t need = memplan_peak(mp) * share;
    if (need > (int64_t)free_b)
        DIE("%d rank(s) on %s need %.2f GiB, %.2f GiB are free: shorten --seq, drop --keep-attn, use more GPUs or a "
            "later stage", share, gpu, (double)need / (1 << 30), (double)free_b / (1 << 30));
}

typedef struct {
    const Model *tmpl;
    const MemPlan *mp;
    CommWorld *world;
    struct Shared *sh;
    int local;
} RankArgs;

/* one rank: its own copy of the model state, GPU, streams and communicator handle */
static void *rank_main(void *arg) {
    const RankArgs *a = arg;
    Model *M = xcalloc(1, sizeof *M);
    *M = *a->tmpl; /* options, config, tables (read-only, shared) */
    M->local = a->local;
    M->sh = a->sh;
    M->device = M->o.local_ranks ? 0 : a->local;
    gpu_init(&M->gpu, M->device);
    M->comm = comm_rank(a->world, a->local);
    M->rank = comm_rank_id(M->comm);
    CUDA_CHECK(cudaStreamCreateWithFlags(&M->comm_st, cudaStreamNonBlocking));
    cudaEvent_t *evs[] = {M->ready, M->freed, M->reduced, M->grads_done};
    for (int k = 0; k < 4; k++)
        for (int s = 0; s < 4; s++) CUDA_CHECK(cudaEventCreateWithFlags(&evs[k][s], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&M->comm_done, cudaEventDisableTiming));
    for (int s = 0; s < 4; s++) CUDA_CHECK(cudaEventCreateWithFlags(&M->ring_ev[s], cudaEventDisableTiming)); /* stage 3 */
    M->p.npieces = shard_pieces(&M->p.shards, &M->p.table, M->rank, &M->p.pieces);
    if (!M->o.local_ranks) check_fits(a->mp, 1, M->gpu.name);
    host_barrier(M); /* every rank checked before any allocates */
    train(M, a->mp);
    comm_barrier(M->comm, M->gpu.stream);
    comm_rank_free(M->comm);
    return NULL;
}

static int count_ranks(const Opts *o) {
    if (o->local_ranks > 0) return (int)o->local_ranks;
    int gpus = (int)o->gpus;
    if (gpus <= 0 && o->dry_run) gpus = 1;
    if (gpus <= 0) CUDA_CHECK(cudaGetDeviceCount(&gpus));
    return gpus * (int)o->nnodes;
}

static int run_ranks(Model *M, const MemPlan *mp) {
    const int here = M->o.local_ranks ? M->P : M->P / (int)M->o.nnodes; /* rank threads in this process */
    CommWorld *world;
    if (M->o.local_ranks) {
        CUDA_CHECK(cudaSetDevice(0));
        check_fits(mp, here, "GPU 0");
        world = comm_world_local(here);
    } else
        world = comm_world_nccl(here, (int)M->o.nnodes, (int)M->o.node_rank, M->o.rendezvous);
    struct Shared sh;
    memset(&sh, 0, sizeof sh);
    pthread_barrier_init(&sh.bar, NULL, (unsigned)here);
    pthread_t *th = xcalloc((size_t)here, sizeof *th);
    RankArgs *args = xcalloc((size_t)here, sizeof *args);
    for (int r = 0; r < here; r++) {
        args[r] = (RankArgs){M, mp, world, &sh, r};
        if (pthread_create(&th[r], NULL, rank_main, &args[r])) DIE("cannot start rank thread %d", r);
    }
    for (int r = 0; r < here; r++) pthread_join(th[r], NULL);
    comm_world_free(world);
    pthread_barrier_destroy(&sh.bar);
    free(th);
    free(args);
    return 0;
}
/* ---- end stage 2 ---- */

int main(int argc, char **argv) {
    static Model M; /* large; zero-initialised; every rank starts from a copy */
    M.o = parse_opts(argc, argv);
    prof.on = M.o.profile;
    M.P = count_ranks(&M.o); /* stage 2 */
    load_config(&M);
    config_print(&M.c);
    MemPlan mp = plan_memory(&M);
    char title[256];
    snprintf(title, sizeof title, "stage 3, %s, seq %lld over %d ranks (%lld each), merge %s%s", M.c.name,
             (long long)M.o.seq, M.P, (long long)M.S, M.o.merge, M.o.keep_attn ? ", --keep-attn" : "");
    if (M.o.dry_run) {
        memplan_print(&mp, stdout, title, (int64_t)(M.o.gpu_gib * (1 << 30)));
        return 0;
    }
    memplan_print(&mp, stdout, title, 0);
    return run_ranks(&M, &mp); /* stage 2: the GPU, the fit check and train() are per rank */
}
