/* stage5_tiling_yarn.c -- train a Qwen3 model on long sequences: rung 5 of longctx.c's ladder.
 *
 * Each rung is a complete trainer that adds one lever to the rung before (`make diffs` shows it):
 *   1. one GPU: a Qwen3 layer's forward and backward in bf16 (cuBLASLt GEMMs, cuDNN flash attention
 *      with its fp32 log-sum-exp), each layer's input kept and the rest recomputed, the loss a chunk
 *      of rows at a time, AdamW on fp32 master weights; the memory planned before anything is taken
 *   2. FSDP (ZeRO-3) over P GPUs: each rank keeps 1/P of the weights, gradients and AdamW state; a
 *      layer's weights are all-gathered just before use, its gradients reduce-scattered after
 *   3. context parallelism: the P ranks share one sequence in 2P zigzag chunks; attention is a ring
 *      of K/V blocks merged by log-sum-exp; a hybrid's linear layers pass their state as affine maps
 *   4. offload to pinned host memory: layer inputs and kept attention go down on a copy stream and
 *      come back a layer ahead of their use; the optimizer state lives there, AdamW on the CPUs
 *   5. the MLP in tiles of rows and attention in head groups, and YaRN past the trained context:
 *      Qwen3-32B at 1M tokens on 8 GPUs, every lever on by default
 *
 *   make stage5 && ./stage5 --seq 1M   # Qwen3-32B at 1M tokens on every GPU here (README.md, Stage 5)
 */

/* ============================================================ includes and usage */
#include "common/stage.h" /* every header of common/ and kernels/, with what each holds */

#define STAGE 5 /* this file's rung: its plan and its log lines say so */
static const char *SUMMARY = "Train a Qwen3 or Qwen3.5 model on one sequence over P GPUs with every lever, MLP tiles and YaRN." STAGE_USAGE;

/* ============================================================ options */
typedef struct {
    const char *model;       /* size name or HF directory */
    const char *data;        /* token file */
    int64_t seq;             /* tokens per step (sequence length) */
    int64_t steps;
    AdamOpts adam;           /* --lr, its schedule, AdamW's decay, moments, clip (common/train.h) */
    int64_t loss_chunk;      /* rows of logits at a time */
    const char *keep_attn;   /* stage 4: the layers whose O and LSE are kept, and where (choose_kept) */
    int64_t layers;          /* 0: all */
    int64_t seed;
    int dry_run;
    double gpu_gib;          /* GPU memory to plan against and cap the run at (0: the device's) */
    double yarn_factor;
    int64_t yarn_original;
    const char *moe_gemm;    /* MoE experts' GEMMs: loop (one call per expert) | grouped (one cuBLAS call) */
    const char *packing;     /* packed documents: NULL/none off; "" <|endoftext|> ends one; or that token id */
    RunOpts run;             /* saves, evaluation, logs and profiles (common/run.h) */
    RankOpts ranks;          /* stage 2: --gpus, --local-ranks, --nnodes, --rehearse, ... (common/ranks.h) */
    const char *merge;       /* stage 3: ring accumulators in fp32 or bf16 */
    const char *layout;      /* stage 3: --packing's documents over the ranks: balanced or zigzag (common/layout.h) */
    /* ---- stage 4: offload ---- */
    const char *offload;     /* what lives in pinned host memory: all | none | a list of ckpt, attn, states */
    double host_gib;         /* host memory per node to plan against (0: this machine's available) */
    /* ---- end stage 4 ---- */
    /* ---- stage 5: tiling ---- */
    int64_t mlp_tile;        /* MLP rows at a time (0: from the plan) */
    int64_t attn_groups;     /* attention head groups (0: one per K/V head) */
    /* ---- end stage 5 ---- */
} Opts;

static Opts parse_opts(int argc, char **argv) {
    Opts o = {.model = "32B", .data = TOKENS_SHIPPED, .seq = 1048576, /* stage 5: the headline */ .steps = 50, .adam = ADAM_DEFAULTS,
              .loss_chunk = 4096, .seed = 1234, .moe_gemm = "loop", .run = RUN_DEFAULTS,
              .ranks = RANK_DEFAULTS, .merge = "fp32", .offload = "all", .keep_attn = "auto" /* stage 5: every lever on */};
    const Opt table[] = {
        {"--model", OPT_STRING, &o.model, "Qwen3 size (0.6B 1.7B 4B 8B 14B 32B, the MoE 30B-A3B; any case, Qwen3-32B too), Qwen3.5 (Qwen3.5-0.8B 2B 4B 9B 27B, the MoE Qwen3.5-35B-A3B) or HF model directory"},
        {"--data", OPT_STRING, &o.data, "token file (data/prepare.py makes one)"},
        {"--seq", OPT_INT, &o.seq, "tokens per step (sequence length)", "[2,2G)"},
        {"--steps", OPT_INT, &o.steps, "optimizer steps (total, counting resumed ones; 0 + --save: save the init)", "[0,1G]"},
        ADAM_OPTIONS(o.adam), /* --lr, --warmup, --schedule, --wd, --beta1, --beta2, --eps, --clip */
        {"--loss-chunk", OPT_INT, &o.loss_chunk, "rows of [rows, vocab] fp32 logits held at a time", "[1,4G]"},
        {"--keep-attn", OPT_OPTSTR, &o.keep_attn, "keep attention O and LSE (no attention recompute): alone or all, every layer; none (or 0): none; N: N layers; auto: as many as fit; placed on the GPU first, then on the host (--offload attn); gpu:N,host:M: that split. A Qwen3.5 hybrid counts its full attention layers only (auto keeps none of them yet)"},
        {"--layers", OPT_INT, &o.layers, "use only the first N decoder layers (0: all)", "[0,1K]"},
        {"--seed", OPT_INT, &o.seed, "random init seed", "[0,inf)"},
        {"--dry-run", OPT_FLAG, &o.dry_run, "print the memory plan and exit (no GPU needed)"},
        {"--gpu-gib", OPT_DOUBLE, &o.gpu_gib, "GPU memory to plan for: a larger plan stops before allocating (0: the device's free memory; --dry-run without a GPU: 74.5, an 80 GB GPU)", "[0,1e6]"},
        {"--yarn-factor", OPT_DOUBLE, &o.yarn_factor, "YaRN RoPE scaling factor (0: the config's, else seq / original context when longer; 1: off)", "[0,1e6]"}, /* stage 5 */
        {"--yarn-original", OPT_INT, &o.yarn_original, "YaRN original_max_position_embeddings (0: config's, else its positions, 32768 for Qwen3's 40960)", "[0,4G]"},
        {"--moe-gemm", OPT_STRING, &o.moe_gemm, "MoE experts' GEMMs: loop (one cuBLASLt call per expert) | grouped (cuBLAS grouped GEMM)", "loop|grouped"},
        {"--packing", OPT_OPTSTR, &o.packing, "packed documents: each document (ended by <|endoftext|>, or by token ID: --packing ID) attends only to itself from position 0, and the label across a boundary counts no loss; none: off"},
        RUN_OPTIONS(o.run), /* --save, --resume, --eval-data, --log, --profile, ... (common/run.h) */
        /* ---- stage 2: FSDP ---- */
        RANK_OPTIONS(o.ranks), /* --gpus, --local-ranks, --nnodes, --rehearse, ... (common/ranks.h) */
        /* ---- end stage 2 ---- */
        {"--merge", OPT_STRING, &o.merge, "ring accumulators (O, dQ, travelling dK/dV): fp32 | bf16", "fp32|bf16"}, /* stage 3 */
        {"--layout", OPT_STRING, &o.layout, "--packing's documents over the ranks: balanced (long documents split over every rank, the rest placed to even the attention; a Qwen3.5 hybrid keeps the zigzag) | zigzag (chunks r and 2P-1-r, as unpacked); default balanced", "zigzag|balanced"}, /* stage 3 */
        /* ---- stage 4: offload ---- */
        {"--offload", OPT_STRING, &o.offload, "what lives in pinned host memory: all | none | ckpt,attn,states (any of them)"},
        {"--host-gib", OPT_DOUBLE, &o.host_gib, "host memory per node to plan for (0: this machine's available; --dry-run without a GPU: 2048, a 2 TiB node)", "[0,1e9]"},
        /* ---- end stage 4 ---- */
        /* ---- stage 5: tiling ---- */
        {"--mlp-tile", OPT_INT, &o.mlp_tile, "MLP rows at a time (0: as many as the attention backward's memory holds, at least 4096)", "[0,4G]"},
        {"--attn-groups", OPT_INT, &o.attn_groups, "attention in this many head groups, dividing the K/V heads (0: one per K/V head)", "[0,1K]"},
        /* ---- end stage 5 ---- */
    };
    const int n = (int)(sizeof table / sizeof table[0]);
    char err[256];
    const int rc = cli_parse(argc, argv, table, n, err, sizeof err);
    if (rc == 1) { cli_usage(stdout, argv[0], SUMMARY, table, n); exit(0); }
    if (rc) STOP("%s", err);
    run_opts_check(&o.run, &o.model, cli_given(argc, argv, "--model"), o.steps);
    if (o.yarn_factor > 0 && o.yarn_factor < 1) STOP("--yarn-factor %g: 0 (as the config says) or at least 1", o.yarn_factor);
    ranks_check_opts(&o.ranks, o.run.save || o.run.resume || o.run.dump_grads); /* stage 2 */
    return o;
}

/* ============================================================ model state */
typedef struct {
    ParamTable table;   /* names, shapes, offsets in the flat layout */
    /* ---- stage 2: FSDP ---- */
    ShardLayout shards; /* units (embedding, layers, tail) split over the ranks */
    /* ---- end stage 2 ---- */
    Piece *pieces;      /* the pieces of tensors this rank owns: AdamW and checkpoints go per piece */
    int64_t npieces;
    int64_t total;      /* elements of each shard buffer (every unit's shard, padded) */
    bf16_t *w;          /* [total] this rank's bf16 weights: the all-gather input */
    float *master;      /* [total] fp32 master weights */
    float *grad;        /* [total] fp32 gradients of this rank's shard, summed over the ranks by reduce-scatter
                         * (each label already carries 1 / the step's counted labels: the sum is the mean) */
    float *m, *v;       /* [total] fp32 AdamW moments */
    /* ---- stage 2: FSDP ---- */
    bf16_t *layer_w[2]; /* [max_layer] two gathered decoder layers: in use and prefetched */
    bf16_t *embed_w;    /* [P * embedding shard] the gathered embedding (and tied lm_head) */
    bf16_t *tail_w;     /* [P * tail shard] the gathered final norm (+ untied lm_head) */
    float *layer_g[2];  /* [max_layer] a layer's full fp32 gradients until they are reduce-scattered */
    float *embed_g;     /* [P * embedding shard] */
    float *tail_g;      /* [P * tail shard] */
    /* ---- end stage 2 ---- */
    /* ---- stage 4: offload ---- (with --offload states, w, master, grad, m and v are host memory) */
    bf16_t *w_stage;    /* [max shard] a unit's bf16 shard on its way up to the all-gather */
    float *g_stage;     /* [max shard] a unit's reduce-scattered gradients on their way down */
    /* ---- end stage 4 ---- */
} Params;

/* ---- stage 4: offload ---- */
typedef struct {        /* one tensor per layer in pinned host memory, used on the GPU through two slots */
    char *host;         /* [layers, bytes] */
    char *slot[2];      /* [bytes] each: layer l's in slot l % 2 */
    int64_t bytes;
    cudaEvent_t made[2], down[2], used[2], up[2];
} Offloaded;
/* ---- end stage 4 ---- */

typedef struct {        /* kept from forward to backward */
    bf16_t *x;          /* [L+1, S, D] layer inputs (checkpoints); x[L] feeds the final norm */
    bf16_t *o;          /* [kept_gpu, S, Hq*hd] attention outputs (--keep-attn only; stage 4: the layers kept on the GPU) */
    float *lse;         /* [kept_gpu, Hq, S] their log-sum-exp (--keep-attn only; stage 4: the layers kept on the GPU) */
    Offloaded hx, hol;  /* stage 4: the same on the host: x[0..L-1]; O then LSE of each layer kept there */
} Saved;

/* stage 5: G head groups of Hg = Hq/G query heads reading Kg = Hkv/G K/V heads; Qg = Hg*hd, KVg = Kg*hd;
 * T rows per MLP tile */
typedef struct {        /* one layer's working set; regions A, B1, B2 and C share memory (see plan) */
    /* persistent through the step */
    bf16_t *dx;         /* [S, D] gradient of the residual stream */
    uint32_t *ids;      /* [S+1] tokens; labels are ids + 1 (stage 3 on: [S], the labels w.labels) */
    int32_t *pos;       /* [S] RoPE positions */
    float *inv_freq;    /* [hd/2] RoPE inverse frequencies (YaRN applied) */
    float *losses;      /* [S] per-token NLL (0 where the label is masked) */
    uint8_t *label_w;   /* [S] 1 where this position's label counts in the loss, 0 where masked */
    double *loss_sum;   /* [1] the step's summed NLL */
    double *gnorm_sq;   /* [1] squared global gradient norm */
    double *red;        /* [1024] reduction scratch */
    /* A: attention half of a layer */
    bf16_t *xn;         /* [S, D] input_layernorm(x) */
    float *rstd1;       /* [S] */
    bf16_t *q_raw;      /* [S, Qg] q_proj(xn) of one head group (stage 5) (Qwen3.5: [S, hg, 2 hd], query and gate) */
    bf16_t *k_raw;      /* [S, Hkv*hd] */
    bf16_t *v;          /* [S, Hkv*hd] */
    bf16_t *q, *k;      /* q/k after head norm + RoPE (q: [S, Qg], one head group) */
    float *rstd_q;      /* [S*Hg] */
    float *rstd_k;      /* [S*Hkv] */
    bf16_t *o;          /* [S, Hq*hd] attention output (or Saved.o + l) */
    float *lse;         /* [Hq, S] (or Saved.lse + l) */
    bf16_t *o_own;      /* stage 4: w.o of the layers whose O is not kept */
    float *lse_own;
    bf16_t *og;         /* [S, Hq*hd] Qwen3.5: o sigmoid(gate), o_proj's input */
    bf16_t *x_mid;      /* [S, D] x + o_proj(o) */
    /* B1: MLP half (forward, recompute and its backward); stage 5: one tile of T rows */
    bf16_t *xn2;        /* [T, D] post_attention_layernorm(x_mid) */
    float *rstd2;       /* [S] */
    bf16_t *g, *u, *h;  /* [T, I] gate, up, silu(g)*u; backward reuses them for dg, du, dh */
    bf16_t *dxn2;       /* [T, D] */
    /* B2: attention backward (overlays B1) */
    bf16_t *d_o;        /* [S, Hq*hd] */
    bf16_t *dq;         /* [S, Hq*hd] stage 5: d_o's memory, each group's columns once its backward is done */
    bf16_t *dq_raw;     /* [S, Hq, 2 hd] Qwen3.5: d(q_proj's output), query and gate */
    bf16_t *dq_raw_g;   /* [S, hg, 2 hd] Qwen3.5: one head group's (stage 5) */
    bf16_t *dk, *dv;    /* [S, Hkv*hd] each, side by side: [2, S, Hkv*hd] */
    bf16_t *dxn;        /* [S, D] */
    float *softmax_sum; /* [Hg, S] cuDNN scratch */
    float *dq_accum;    /* [Hg, S, hd] cuDNN scratch */
    /* C: the loss (overlays A and B) */
    bf16_t *hf;         /* [S, D] final norm output */
    float *rstdf;       /* [S] */
    float *logits;      /* [chunk, V] fp32 */
    bf16_t *dlogits;    /* [chunk, V] */
    bf16_t *dhf;        /* [S, D] */
    /* ---- stage 3: ring attention ---- */
    /* (S here is this rank's share of the sequence; a ring runs one attention call, of M->attn's Ha
     * query and Hka K/V heads: every head, until stage 5's head groups) */
    uint32_t *labels;   /* [S] the next token at each of this rank's positions */
    bf16_t *kv;         /* [2, S, Hkv*hd] this rank's K then V (k, v point into it) */
    bf16_t *kv_ring[2]; /* [2, S, Hka*hd] K/V blocks received from the previous rank */
    bf16_t *blk;        /* [S, Ha*hd] one block's O (forward) or dQ (backward) */
    float *lse_blk;     /* [Ha, S] one block's LSE (forward) or the final LSE of its rows (backward) */
    bf16_t *dkv_blk;    /* [2, S, Hka*hd] one block's dK, dV */
    void *o_acc;        /* [S, Ha*hd] running output in fp32 (--merge fp32; bf16 merges into o) */
    void *dq_acc;       /* [S, Ha*hd] dQ accumulator (merge precision) */
    void *dkv_ring[2];  /* [2, S, Hka*hd] travelling dK/dV (merge precision) */
    GdnShare share;     /* the linear layers' state: maps and conv tails, every chunk's (common/deltanet.h) */
    /* ---- end stage 3 ---- */
    /* ---- stage 5: head groups ---- */
    bf16_t *kv_g;       /* [2, S, KVg] one group's K then V: one ring message */
    bf16_t *o_g;        /* [S, Qg] one group's O (a copy of its columns of o) */
    bf16_t *d_o_g;      /* [S, Qg] one group's dO; then its dQ */
    /* ---- end stage 5 ---- */
    MoeTile moe;        /* MoE: B1 for an MoE model's MLP, and the step's statistics (common/moe.h) */
    GdnWork gdn;        /* Qwen3.5's linear layers: over A (forward) and B2 (backward) (common/deltanet.h) */
    /* library workspaces */
    void *sdpa_ws;
    int64_t sdpa_ws_bytes;
    void *gemm_ws;
} Work;

/* memory categories: one arena each, planned and allocated by carve() */
enum { A_WEIGHTS, A_GRADS, A_OPTIM, A_CKPT, A_KEPT, A_WORK, A_CUDNN, A_H_STATES, A_H_CKPT, A_H_KEPT, A_N };
static const ArenaSpec ARENAS[A_N] = {
    {"weights (bf16)", ON_GPU}, {"gradients (fp32)", ON_GPU}, {"optimizer (fp32 master, m, v)", ON_GPU},
    {"checkpoints (layer inputs)", ON_GPU}, {"kept attention (O, LSE)", ON_GPU}, {"working set", ON_GPU},
    {"cuDNN workspace", ON_GPU},
    /* stage 4: pinned host memory */
    {"weights, grads, optimizer", ON_HOST}, {"checkpoints (layer inputs)", ON_HOST}, {"kept attention (O, LSE)", ON_HOST}};

typedef struct {
    Qwen3Config c;
    Opts o;
    Job job;            /* this rank's place in the job: one GPU here (common/ranks.h) */
    int64_t S;          /* tokens this rank computes each step */
    SdpaShape attn;
    Params p;
    Saved sv;
    Work w;
    Gpu gpu;
    Gemm gemm;
    Sdpa sdpa;
    float attn_factor;  /* YaRN cos/sin scale */
    int64_t counted;    /* labels that count in this step, over every rank: the loss's denominator */
    int64_t kept;       /* the first kept full attention layers keep O and LSE (stage 4: as many as asked or fit) */
    double aux;         /* MoE: the step's load-balancing loss */
    int64_t eot;        /* --packing: the token that ends a document; -1: not packed */
    int64_t slack;      /* --packing: DOCS_SLACK_ROWS rows of zeros after each buffer blocks read; else 0 */
    DocPlan docs;       /* --packing: the window's attention blocks (common/sdpa.h); docs.call NULL: not packed */
    Arena arena[A_N];   /* one per memory category */
    Inputs in;          /* the run's files, opened and checked before the GPU (common/inputs.h) */
    MemPlan mp;         /* the plan the run was checked against */
    struct Data *eval;  /* --eval-data's windows (the data section) */
    /* ---- stage 2: FSDP ---- */
    cudaStream_t comm_st;           /* gathers and reduce-scatters run here, beside the compute */
    cudaEvent_t ready[4], freed[4]; /* per gathered buffer: slots 0-1 layers, 2 embedding, 3 tail */
    cudaEvent_t grads_done[4], reduced[4], comm_done;
    /* ---- end stage 2 ---- */
    /* ---- stage 3: context parallelism ---- */
    cudaEvent_t ring_ev[4];         /* the K/V pass (0: sent-from ready, 1: received), the dK/dV pass (2, 3) */
    BlockTimer blocks;              /* rehearsal: one layer's ring blocks timed */
    int balanced;                   /* --packing: each window's rows from the balanced layout (common/layout.h), else the zigzag's */
    /* ---- end stage 3 ---- */
    /* ---- stage 4: offload ---- */
    struct { int ckpt, attn, states; } off; /* --offload */
    int64_t kept_gpu;               /* of them, the first kept_gpu on the GPU, the rest on the host (kept(), on_host()) */
    int threads;                    /* host threads of this rank (AdamW, casts) */
    cudaStream_t copy_st;           /* checkpoints and kept attention go down and up here */
    /* ---- end stage 4 ---- */
    /* ---- stage 5: tiling ---- */
    int64_t groups, hg, kg;         /* head groups; query and K/V heads per group */
    int64_t tile;                   /* MLP rows at a time */
    int64_t b2_bytes;               /* the attention backward's share of the working set (the plan's) */
    /* ---- end stage 5 ---- */
} Model;

/* ============================================================ build */
#define P_UNITS(layout, i) ((int64_t)(layout)->P * (layout)->u[i].shard) /* a unit's gathered (padded) size */

/* ---- stage 4: offload ---- */
/* n layers of `bytes` on the host, two slots of it on the GPU */
static void offloaded(Offloaded *t, Arena *host, Arena *gpu, int64_t n, int64_t bytes) {
    t->host = arena_take(host, n * bytes, host->name);
    for (int i = 0; i < 2; i++) t->slot[i] = arena_take(gpu, bytes, "slots for host tensors");
    t->bytes = bytes;
}
static int64_t kept_bytes(const Model *M) { /* one layer's O (and --packing's slack rows) then LSE */
    return BF((M->S + M->slack) * M->c.heads * M->c.head_dim) + F32(M->c.heads * M->S);
}
/* ---- end stage 4 ---- */

/* Carve every tensor from the arenas. With NULL arena bases this only measures: the same code
 * is the memory plan (--dry-run) and the allocation. */
static void carve(Model *M) {
    const Qwen3Config *c = &M->c;
    const int64_t S = M->S, D = c->hidden, L = c->layers, Q = c->heads * c->head_dim, KV = c->kv_heads * c->head_dim,
                  I = c->intermediate, V = c->vocab, NP = M->p.total,
                  C = M->o.loss_chunk < S ? M->o.loss_chunk : S,
                  Qg = M->hg * c->head_dim, KVg = M->kg * c->head_dim, T = M->tile, /* stage 5 */
                  QR = config_q_rows(c), QRg = QR / M->groups;
    Arena *A = M->arena;
    Params *p = &M->p;
    Work *w = &M->w;
    Arena *H = M->off.states ? &A[A_H_STATES] : NULL; /* stage 4: the shards live on the host */
    p->w = arena_take(H ? H : &A[A_WEIGHTS], BF(NP), "weights");
    p->grad = arena_take(H ? H : &A[A_GRADS], F32(NP), "grads");
    p->master = arena_take(H ? H : &A[A_OPTIM], F32(NP), "master");
    p->m = arena_take(H ? H : &A[A_OPTIM], F32(NP), "adam m");
    p->v = arena_take(H ? H : &A[A_OPTIM], F32(NP), "adam v");
    /* ---- stage 2: FSDP ---- */
    const ShardLayout *sl = &p->shards;
    const int64_t E0 = P_UNITS(sl, 0), ET = P_UNITS(sl, sl->nunits - 1);
    for (int i = 0; i < 2; i++) p->layer_w[i] = arena_take(&A[A_WEIGHTS], BF(sl->max_layer), "gathered layer");
    p->embed_w = arena_take(&A[A_WEIGHTS], BF(E0), "gathered embedding");
    p->tail_w = arena_take(&A[A_WEIGHTS], BF(ET), "gathered tail");
    for (int i = 0; i < 2; i++) p->layer_g[i] = arena_take(&A[A_GRADS], F32(sl->max_layer), "layer grads");
    p->embed_g = arena_take(&A[A_GRADS], F32(E0), "embedding grads");
    p->tail_g = arena_take(&A[A_GRADS], F32(ET), "tail grads");
    /* ---- end stage 2 ---- */
    const int64_t R = M->slack; /* --packing: rows of zeros after each buffer blocks read */
    /* ---- stage 4: offload ---- */
    const int64_t NG = M->kept_gpu, NH = M->kept - M->kept_gpu; /* kept on the GPU, on the host */
    if (H) {
        p->w_stage = arena_take(&A[A_WEIGHTS], BF(sl->max_unit / sl->P), "bf16 shard staging");
        p->g_stage = arena_take(&A[A_GRADS], F32(sl->max_unit / sl->P), "gradient shard staging");
    }
    if (M->off.ckpt) offloaded(&M->sv.hx, &A[A_H_CKPT], &A[A_CKPT], L, BF(S * D));
    else M->sv.x = arena_take(&A[A_CKPT], BF((L + 1) * S * D), "checkpoints");
    if (NG) {
        M->sv.o = arena_take(&A[A_KEPT], BF(NG * (S + R) * Q), "kept O");
        M->sv.lse = arena_take(&A[A_KEPT], F32(NG * c->heads * S), "kept LSE");
    }
    if (NH) offloaded(&M->sv.hol, &A[A_H_KEPT], &A[A_KEPT], NH, kept_bytes(M));
    /* ---- end stage 4 ---- */
    w->sdpa_ws_bytes = sdpa_bwd_workspace_estimate(&M->attn);
    w->sdpa_ws = arena_take(&A[A_CUDNN], w->sdpa_ws_bytes, "cuDNN workspace");

    Arena *W = &A[A_WORK];
    w->gemm_ws = arena_take(W, GEMM_WORKSPACE_BYTES, "cuBLASLt workspace");
    w->dx = arena_take(W, BF(S * D), "dx");
    w->ids = arena_take(W, 4 * (S + 1), "ids");
    w->labels = arena_take(W, 4 * S, "labels"); /* stage 3 */
    w->pos = arena_take(W, 4 * S, "pos");
    w->inv_freq = arena_take(W, F32(c->head_dim / 2), "inv_freq");
    w->losses = arena_take(W, F32(S), "losses");
    w->label_w = arena_take(W, S, "label weights");
    w->loss_sum = arena_take(W, 8, "loss_sum");
    w->gnorm_sq = arena_take(W, 8, "gnorm");
    w->red = arena_take(W, 8 * 1024, "reduction scratch");
    if (c->experts) moe_carve_step(&w->moe, W, c); /* MoE: the step's router statistics */
    deltanet_carve_share(&w->share, W, c, M->job.P); /* stage 3: the linear layers' state passing */
    const int64_t persistent = arena_mark(W);
    /* The phases of a layer share memory: B2 (attention backward) overlays B1 (the MLP, forward and
     * backward), and C (the loss) overlays A and B. Safe because one stream computes everything and
     * a phase's tensors are dead before the next phase's first kernel, queued behind them on that
     * stream, writes there; nothing else writes into the working set. */
    /* A */
    w->xn = arena_take(W, BF(S * D), "xn");
    w->rstd1 = arena_take(W, F32(S), "rstd1");
    w->x_mid = arena_take(W, BF(S * D), "x_mid");
    const int64_t mixer_a = arena_mark(W);
    w->q_raw = arena_take(W, BF(S * QRg), "q_raw");
    w->k_raw = arena_take(W, BF(S * KV), "k_raw");
    w->q = arena_take(W, BF((S + R) * Qg), "q");
    /* ---- stage 3: ring attention ---- */
    const int64_t acc = !strcmp(M->o.merge, "fp32") ? 4 : 2, /* bytes per accumulator element */
                  QA = M->attn.Hq * M->attn.D, KVA = M->attn.Hkv * M->attn.D; /* one attention call's widths */
    w->kv = arena_take(W, BF((2 * S + R) * KV), "k and v");
    w->k = w->kv;
    w->v = w->kv ? w->kv + S * KV : NULL;
    /* the ring's receives (communication stream) land in kv_ring (A, live through the attention) and
     * dkv_ring (B2); ring_backward's last ring_wait orders the compute stream after the final one */
    for (int i = 0; i < 2; i++) w->kv_ring[i] = arena_take(W, BF((2 * S + R) * KVA), "ring K/V");
    w->blk = arena_take(W, BF(S * QA), "block O / dQ");
    w->lse_blk = arena_take(W, F32(M->attn.Hq * S), "block LSE");
    w->dkv_blk = arena_take(W, BF(2 * S * KVA), "block dK, dV");
    /* ---- end stage 3 ---- */
    /* ---- stage 5: head groups ---- */
    w->kv_g = arena_take(W, BF((2 * S + R) * KVg), "group K/V");
    w->o_g = arena_take(W, BF((S + R) * Qg), "group O");
    /* ---- end stage 5 ---- */
    w->rstd_q = arena_take(W, F32(S * M->hg), "rstd_q");
    w->rstd_k = arena_take(W, F32(S * c->kv_heads), "rstd_k");
    if (M->kept < config_full_layers(c)) { /* stage 4: layers beyond the kept ones compute O here */
        w->o = w->o_own = arena_take(W, BF((S + R) * Q), "o");
        w->lse = w->lse_own = arena_take(W, F32(c->heads * S), "lse");
    }
    if (c->attn_gate) w->og = arena_take(W, BF(S * Q), "gated o");
    deltanet_carve_over(&w->gdn, W, mixer_a, c, S, S / 2, 0); /* Qwen3.5: a linear layer's instead (stage 3: its 2 chunks) */
    const int64_t region_b = arena_mark(W);
    /* B1 (stage 5: one MLP tile) */
    w->xn2 = arena_take(W, BF(T * D), "xn2");
    w->rstd2 = arena_take(W, F32(S), "rstd2");
    if (c->experts) moe_carve_tile(&w->moe, W, c, T); /* MoE: the routed experts' rows */
    else {
        w->g = arena_take(W, BF(T * I), "g");
        w->u = arena_take(W, BF(T * I), "u");
        w->h = arena_take(W, BF(T * I), "h");
    }
    w->dxn2 = arena_take(W, BF(T * D), "dxn2");
    arena_release(W, region_b);
    /* B2 */
    w->dxn = arena_take(W, BF(S * D), "dxn");
    const int64_t mixer_b = arena_mark(W);
    w->d_o = arena_take(W, BF((S + R) * Q), "d_o");
    w->dq = w->d_o; /* stage 5: a group's dQ goes where its dO was */
    w->dk = arena_take(W, BF(2 * S * KV), "dk, dv");
    w->dv = w->dk ? w->dk + S * KV : NULL;
    w->softmax_sum = arena_take(W, F32(M->hg * S), "softmax_sum");
    w->dq_accum = arena_take(W, F32(M->hg * S * c->head_dim), "dq_accum");
    w->d_o_g = arena_take(W, BF((S + R) * Qg), "group dO"); /* stage 5 */
    /* ---- stage 3: ring attention ---- */
    /* B2 is free while a ring forward runs (only backward uses it otherwise) */
    w->o_acc = arena_take(W, acc * S * QA, "running O");
    w->dq_acc = arena_take(W, acc * S * QA, "dQ accumulator");
    for (int i = 0; i < 2; i++) w->dkv_ring[i] = arena_take(W, acc * 2 * S * KVA, "travelling dK/dV");
    /* ---- end stage 3 ---- */
    if (c->attn_gate) {
        w->dq_raw = arena_take(W, BF(S * QR), "dq_raw (query and gate)");
        w->dq_raw_g = arena_take(W, BF(S * QRg), "group dq_raw"); /* stage 5 */
    }
    deltanet_carve_over(&w->gdn, W, mixer_b, c, S, S / 2, 1); /* Qwen3.5: its backward instead (stage 3: 2 chunks) */
    M->b2_bytes = arena_mark(W) - region_b; /* stage 5: the MLP's tiles may use as much */
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
    arenas_plan(M->arena, ARENAS, A_N);
    carve(M);
    MemPlan mp = memplan_of(M->arena, A_N);
    /* ---- stage 2: FSDP ---- */
    if (M->job.P > 1) memplan_add(&mp, "NCCL buffers (estimate)", ON_GPU, ranks_nccl_estimate(&M->o.ranks, M->job.P));
    /* ---- end stage 2 ---- */
    return mp;
}

static void allocate(Model *M) {
    arenas_allocate(M->arena, A_N);
    carve(M);
}

static void load_config(Model *M) {
    char err[512];
    const Opts *o = &M->o;
    /* stage 5: YaRN past the original context, from the sequence */
    if (config_for_run(&M->c, o->model, o->run.resume, o->layers, 0, 0, err, sizeof err)) STOP("%s", err);
    config_yarn_for_seq(&M->c, o->seq, o->yarn_factor, o->yarn_original); /* stage 5 (common/config.c) */
    if (config_check_yarn(&M->c, err, sizeof err)) STOP("%s", err);         /* stage 5 */
    if ((M->eot = docs_eot_option(o->packing, M->c.vocab, !M->c.lin_v_heads, o->data, err, sizeof err)) == -2) STOP("%s", err);
    M->slack = M->eot >= 0 ? DOCS_SLACK_ROWS : 0;
    if (zigzag_check(M->o.seq, M->job.P, err, sizeof err) || deltanet_chunk_ok(&M->c, M->o.seq / (2 * M->job.P), err, sizeof err))
        STOP("%s", err); /* stage 3 */
    M->balanced = layout_option(o->layout, M->eot >= 0, M->c.lin_v_heads > 0); /* stage 3: a hybrid stays on the zigzag */
    M->S = M->o.seq / M->job.P;                                        /* this rank's tokens */
    /* ---- stage 5: head groups ---- */
    M->groups = o->attn_groups ? o->attn_groups : M->c.kv_heads;
    if (M->c.kv_heads % M->groups)
        STOP("--attn-groups %lld must divide the K/V heads (%lld)", (long long)M->groups, (long long)M->c.kv_heads);
    M->hg = M->c.heads / M->groups;
    M->kg = M->c.kv_heads / M->groups;
    M->tile = M->S; /* until choose_tile() */
    /* ---- end stage 5 ---- */
    M->attn = (SdpaShape){.Hq = M->hg, .Hkv = M->kg, .Sq = M->S, .Skv = M->S, .D = M->c.head_dim, .causal = 1}; /* stage 5: one head group */
    if (!sdpa_shape_ok(&M->attn, err, sizeof err)) { /* stage 5: an MoE tile's rows are choose_tile's */
        if (!M->o.dry_run) STOP("%s", err);
        fprintf(stderr, "warning: this run would stop before its first step: %s\n", err); /* the plan still helps */
    }
    params_build(&M->c, &M->p.table);
    /* ---- stage 2: FSDP ---- */
    shard_build(&M->p.table, M->job.P, &M->p.shards); /* each rank takes its pieces when it starts */
    M->p.total = M->p.shards.shard_total;
    /* ---- end stage 2 ---- */
}

/* the training state this rank holds, for loads and saves (common/state.h) */
static StateIO state_io(void *m) {
    Model *M = m;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN), here = M->job.here; /* the ranks of this process share them */
    return (StateIO){.c = &M->c, .t = &M->p.table, .pieces = M->p.pieces, .npieces = M->p.npieces, .total = M->p.total,
                     .master = M->p.master, .m = M->p.m, .v = M->p.v, .grad = M->p.grad, .rank = M->job.rank,
                     .threads = cores > here ? (int)(cores / here) : 1, .comm = M->job.comm, .st = M->gpu.stream};
}

/* fp32 master weights from the model (HF directory or random init) or --resume, then the bf16 copy;
 * returns the step training continues after (0 unless --resume) */
static int64_t init_weights(Model *M) {
    StateIO io = state_io(M);
    const int64_t step = state_load(&io, M->o.model, M->o.run.resume, M->c.init_std, (uint64_t)M->o.seed);
    if (M->off.states) cpu_cast_bf16(M->p.w, M->p.master, M->p.total, M->threads); /* stage 4: on the host */
    else cast_f32_to_bf16(M->p.w, M->p.master, M->p.total, M->gpu.stream);
    return step;
}

/* ---- stage 5: tiling ---- */
/* --mlp-tile 0: as many rows as the attention backward's memory holds, so the MLP's tiles add nothing
 * to the peak, within mlp_tile_limits' bounds (common/moe.h: 2^31 elements a tensor, 2^24 MoE pairs;
 * at least 4096 rows, an MoE tile more, so its experts' GEMMs stay large) */
static void choose_tile(Model *M) {
    const MlpTileLimits t = mlp_tile_limits(&M->c);
    if (M->o.mlp_tile) {
        if (M->o.mlp_tile > t.most)
            STOP("--mlp-tile %lld: [tile, %lld] would pass 2^31 elements or 2^24 MoE pairs (at most %lld rows)",
                 (long long)M->o.mlp_tile, (long long)t.width, (long long)t.most);
        M->tile = M->o.mlp_tile < M->S ? M->o.mlp_tile : M->S;
        return;
    }
    M->tile = 1;
    plan_memory(M); /* measures the attention backward's region */
    int64_t n = M->b2_bytes / t.row_bytes;
    n = n < t.least ? t.least : n / 256 * 256;
    n = n < t.most ? n : t.most;
    M->tile = n < M->S ? n : M->S;
}
/* ---- end stage 5 ---- */

/* ---- stage 4: offload ---- */
static void parse_offload(Model *M) {
    const char *names[] = {"ckpt", "attn", "states"};
    int *flags[] = {&M->off.ckpt, &M->off.attn, &M->off.states};
    char err[256];
    if (cli_parse_set(M->o.offload, names, flags, 3, err, sizeof err)) STOP("--offload %s: %s", M->o.offload, err);
}

static double host_budget(const Model *M) { /* bytes per node: --host-gib, or what this machine has free */
    return M->o.host_gib > 0 ? M->o.host_gib * (1 << 30) : (double)host_available_bytes();
}

/* Kept attention O and LSE spare the backward one attention forward per layer. Where they go:
 * --keep-attn auto keeps as many layers as fit, first on the GPU, where they cost no
 * copies, as many as its spare memory holds (--gpu-gib, or what is free, above the plan), then on
 * the host (--offload attn), as many as it holds leaving a tenth to the system; the rest
 * recompute. Alone or all keeps every layer, N keeps N, placed the same way whether or not the
 * plan fits; gpu:N,host:M forces the split. */
static void choose_kept(Model *M) {
    const Opts *o = &M->o;
    const int64_t L = config_full_layers(&M->c); /* Qwen3.5: its full attention layers only */
    int64_t want, gpu, host, asked;
    int counted;
    char err[256];
    M->kept = M->kept_gpu = 0;
    const int split = kept_parse(o->keep_attn, L, &want, &counted, &gpu, &host, &asked, err, sizeof err); /* memplan.c */
    if (split < 0) STOP("%s", err);
    /* Qwen3.5: kept when asked (all, N, gpu:N,host:M); auto waits for its GPU parity check (keep_gpu.sh) */
    if (M->c.lin_v_heads && o->keep_attn && !strcmp(o->keep_attn, "auto")) want = 0;
    if (asked && !M->off.attn) STOP("--keep-attn %s: layers on the host need --offload attn (or all)", o->keep_attn);
    if (!split && want) { /* as many as fit, or N (counted: whether or not the plan fits) */
        const MemPlan mp = plan_memory(M); /* with nothing kept */
        const double per = (double)kept_bytes(M), share = M->job.share, /* ranks on one GPU */
                     gpu_room = (double)gpu_plan_bytes(o->gpu_gib, o->dry_run, ranks_here(&o->ranks)) / share -
                                (double)memplan_peak(&mp),
                     host_room = 0.9 * host_budget(M) / ranks_per_node(&o->ranks) - (double)memplan_host(&mp);
        kept_split(want, layers_in(gpu_room, per, L), layers_in(host_room, per, L), M->off.attn, counted, &gpu, &host);
    }
    M->kept_gpu = gpu, M->kept = gpu + host;
}
/* Every rank must keep the same layers: backward re-runs the ring's forward (its send/recvs) for
 * the others, so two nodes that chose from their own free memory would pair different messages
 * and hang. The fewest any rank chose, on the GPU and on the host, holds everywhere; its plan only
 * shrinks. */
static void agree_kept(Model *M) {
    const int64_t g = comm_min_i64(M->job.comm, M->kept_gpu, M->gpu.stream),
                  h = comm_min_i64(M->job.comm, M->kept - M->kept_gpu, M->gpu.stream);
    if (g == M->kept_gpu && g + h == M->kept) return;
    say("keeping %lld layers' attention on the GPU and %lld on the host (not %lld and %lld): another node holds fewer\n",
        (long long)g, (long long)h, (long long)M->kept_gpu, (long long)(M->kept - M->kept_gpu));
    M->kept_gpu = g, M->kept = g + h;
    plan_memory(M); /* the arenas of the fewer kept layers */
}
/* ---- end stage 4 ---- */

/* RoPE: its frequencies (YaRN's where the config asks) and each row's position */
static void setup_rope(Model *M) {
    M->attn_factor = attn_rope_upload(&M->c, M->w.inv_freq, M->gpu.stream);
    int32_t *pos = xmalloc((size_t)(4 * M->S));
    zigzag_rope_positions(M->o.seq, M->job.P, M->job.rank, pos); /* stage 3: this rank's tokens' places */
    gpu_upload(M->w.pos, pos, 4 * M->S, M->gpu.stream);
    free(pos);
}

/* ============================================================ tensors: where they live, how they move */
/* ---- stage 2: FSDP ---- */
/* The unit holding a tensor (0 embedding, 1 + l layer l, last the tail) and its buffers: gathered
 * bf16 weights and full fp32 gradients. Layers alternate between two buffers (slots 0, 1). */
static int64_t unit_of(const Model *M, ParamKind k, int64_t l) {
    if (params_in_layer(k)) return 1 + l; /* an MoE layer's router and experts too */
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
    const bf16_t *shard = M->p.w + su->shard_offset;
    if (M->off.states) { /* stage 4: up from the host first, on the same stream (the staging is reused in order) */
        CUDA_CHECK(cudaMemcpyAsync(M->p.w_stage, shard, (size_t)BF(su->shard), cudaMemcpyHostToDevice, M->comm_st));
        shard = M->p.w_stage;
    }
    comm_all_gather_bf16(M->job.comm, unit_w(M, u), shard, su->shard, M->comm_st);
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
/* unit u's gradients are complete: reduce-scatter them, summed over ranks (each rank's loss is already
 * divided by the whole step's label count), into this rank's shard */
static void reduce_grads(Model *M, int64_t u) {
    const ShardUnit *su = &M->p.shards.u[u];
    const int s = slot_of(M, u);
    CUDA_CHECK(cudaEventRecord(M->grads_done[s], M->gpu.stream));
    CUDA_CHECK(cudaStreamWaitEvent(M->comm_st, M->grads_done[s], 0));
    float *shard = M->off.states ? M->p.g_stage : M->p.grad + su->shard_offset; /* stage 4: or staged */
    comm_reduce_scatter_f32(M->job.comm, shard, unit_g(M, u), su->shard, 1.f, M->comm_st);
    if (M->off.states) /* stage 4: down to the host as soon as it is reduced */
        CUDA_CHECK(cudaMemcpyAsync(M->p.grad + su->shard_offset, shard, (size_t)F32(su->shard), cudaMemcpyDeviceToHost,
                                   M->comm_st));
    CUDA_CHECK(cudaEventRecord(M->reduced[s], M->comm_st));
}
/* ---- end stage 2 ---- */

/* ---- stage 3: ring attention ---- */
/* send `bytes` at `send` to the next rank while receiving as many into `recv` from the previous one,
 * on the communication stream, once the compute stream has produced `send` (and is done with
 * `recv`). Event pair ev, ev+1. */
static void ring_pass(Model *M, const void *send, void *recv, int64_t bytes, int ev) {
    const int P = M->job.P, r = M->job.rank;
    CUDA_CHECK(cudaEventRecord(M->ring_ev[ev], M->gpu.stream));
    CUDA_CHECK(cudaStreamWaitEvent(M->comm_st, M->ring_ev[ev], 0));
    comm_sendrecv(M->job.comm, send, (r + 1) % P, recv, (r + P - 1) % P, bytes, M->comm_st);
    CUDA_CHECK(cudaEventRecord(M->ring_ev[ev + 1], M->comm_st));
}
static void ring_wait(Model *M, int ev) { CUDA_CHECK(cudaStreamWaitEvent(M->gpu.stream, M->ring_ev[ev + 1], 0)); }
/* ---- end stage 3 ---- */

/* ---- stage 5: head groups ---- */
/* `cols` bf16 columns from rows of length src_ld to rows of length dst_ld (pointers at the first column) */
static void copy_cols(bf16_t *dst, int64_t dst_ld, const bf16_t *src, int64_t src_ld, int64_t cols, int64_t rows,
                      cudaStream_t st) {
    CUDA_CHECK(cudaMemcpy2DAsync(dst, (size_t)BF(dst_ld), src, (size_t)BF(src_ld), (size_t)BF(cols), (size_t)rows,
                                 cudaMemcpyDeviceToDevice, st));
}
/* head group g's K/V heads side by side: the message its ring passes */
static void group_kv(Model *M, int64_t g) {
    Work *w = &M->w;
    const int64_t S = M->S, KV = M->c.kv_heads * M->c.head_dim, KVg = M->kg * M->c.head_dim;
    copy_cols(w->kv_g, KVg, w->k + g * KVg, KV, KVg, 2 * S, M->gpu.stream); /* K then V: [2S, KV] rows */
}
/* head group g's queries: its rows of q_proj, then head norm + RoPE (w.q_raw, w.q, w.rstd_q) */
static void group_q(Model *M, int64_t l, int64_t g) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t S = M->S, D = c->hidden, QRg = config_q_rows(c) / M->groups; /* its rows of q_proj */
    cudaStream_t st = M->gpu.stream;
    linear_fwd(&M->gemm, w->q_raw, 0, w->xn, W(M, P_Q, l) + g * QRg * D, S, D, QRg, 0.f, st);
    attn_q_norm_rope(c, w->q, w->rstd_q, w->q_raw, W(M, P_Q_NORM, l), M->hg, w->pos, w->inv_freq, M->attn_factor, S, st);
}
/* ---- end stage 5 ---- */

/* ---- stage 4: offload ---- */
/* An Offloaded tensor of layer l is used on the GPU in slot l % 2. Copies run on the copy stream and
 * events order them against the compute stream: a slot is rewritten only once its copy down has
 * read it (down), refilled only once the compute stream is done with what it held (used), and read
 * only once its copy up has landed (up). */
static void *slot(Offloaded *t, int64_t l) { return t->slot[l % 2]; }
static void will_write(Model *M, Offloaded *t, int64_t l) {
    CUDA_CHECK(cudaStreamWaitEvent(M->gpu.stream, t->down[l % 2], 0));
}
static void copy_down(Model *M, Offloaded *t, int64_t l) { /* the compute stream has written layer l's */
    CUDA_CHECK(cudaEventRecord(t->made[l % 2], M->gpu.stream));
    CUDA_CHECK(cudaStreamWaitEvent(M->copy_st, t->made[l % 2], 0));
    gpu_host_copy(t->host + l * t->bytes, slot(t, l), t->bytes, 1, M->copy_st);
    CUDA_CHECK(cudaEventRecord(t->down[l % 2], M->copy_st));
}
static void done_with(Model *M, Offloaded *t, int64_t l) { CUDA_CHECK(cudaEventRecord(t->used[l % 2], M->gpu.stream)); }
static void copy_up(Model *M, Offloaded *t, int64_t l) {
    CUDA_CHECK(cudaStreamWaitEvent(M->copy_st, t->used[l % 2], 0));
    gpu_host_copy(slot(t, l), t->host + l * t->bytes, t->bytes, 0, M->copy_st);
    CUDA_CHECK(cudaEventRecord(t->up[l % 2], M->copy_st));
}
static void await_up(Model *M, Offloaded *t, int64_t l) { CUDA_CHECK(cudaStreamWaitEvent(M->gpu.stream, t->up[l % 2], 0)); }
static void offloaded_events(Offloaded *t) {
    cudaEvent_t *e[] = {t->made, t->down, t->used, t->up};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++) CUDA_CHECK(cudaEventCreateWithFlags(&e[k][i], cudaEventDisableTiming));
}
/* the first M->kept full attention layers keep O and LSE, the first kept_gpu of them on the GPU */
static int kept(const Model *M, int64_t l) { return !config_is_linear(&M->c, l) && config_full_ix(&M->c, l) < M->kept; }
static int on_host(const Model *M, int64_t l) { return kept(M, l) && config_full_ix(&M->c, l) >= M->kept_gpu; }
static int64_t host_ix(const Model *M, int64_t l) { /* among those on the host; -1: a linear layer */
    return config_is_linear(&M->c, l) ? -1 : config_full_ix(&M->c, l) - M->kept_gpu;
}
/* ---- end stage 4 ---- */

/* layer l's input x_l, kept from forward to backward (x_L feeds the final norm) */
static bf16_t *ckpt(const Model *M, int64_t l) {
    if (M->off.ckpt) return (bf16_t *)M->sv.hx.slot[l % 2]; /* stage 4: in its slot */
    return M->sv.x + l * M->S * M->c.hidden;
}

/* an MoE layer's router and experts, a Qwen3.5 linear layer's weights, as common/ takes them */
#define MOE_W(M, l) moe_weights(&(MoeWeights){0}, &(M)->p.table, l, W(M, P_ROUTER, l))
#define MOE_G(M, l) moe_grads(&(MoeGrads){0}, &(M)->p.table, l, G(M, P_ROUTER, l))
#define GDN_W(M, l) deltanet_weights(&(GdnWeights16){0}, &(M)->p.table, l, W(M, P_LIN_QKV, l))
#define GDN_G(M, l) deltanet_grads(&(GdnGrads32){0}, &(M)->p.table, l, G(M, P_LIN_QKV, l))

/* ============================================================ forward */
/* ---- stage 3: ring attention ---- */
/* --packing: a document block reads its inputs in place and a tile past its last row (docs.h): the
 * rows after this rank's queries, after each K/V buffer (own and both ring buffers: K's are followed
 * by V's) and, for the backward, after O and dO are zeros. Nothing sends into those rows. */
static void ring_zero_slack(Model *M, const bf16_t *kv) {
    const int64_t n = M->S, Q = M->attn.Hq * M->attn.D, KV = M->attn.Hkv * M->attn.D;
    cudaStream_t st = M->gpu.stream;
    sdpa_zero_slack(M->w.q, n, Q, st);
    sdpa_zero_slack((bf16_t *)kv, 2 * n, KV, st);
    for (int i = 0; i < 2; i++) sdpa_zero_slack(M->w.kv_ring[i], 2 * n, KV, st);
}

/* a ring step's blocks: --packing's for step i (data_load cut them), else the step's one block whole */
static const SdpaBlocks *step_blocks(const Model *M, int i, const RingBlock *b, SdpaBlocks *one, DocBlock *whole) {
    if (M->eot >= 0) return docplan_call(&M->docs, i);
    *whole = (DocBlock){b->q0, b->nq, b->k0, b->nk, b->causal};
    *one = (SdpaBlocks){whole, 1, NULL};
    return one;
}
static void dkv_arrived(void *M) { ring_wait((Model *)M, 2); } /* the running dK/dV of this step's K/V */

/* this rank's queries (w.q, [S, Hq*hd]) against every rank's K/V (kv: this rank's, [2, S, Hkv*hd], K
 * then V): P cuDNN blocks on the ring schedule (zigzag.h), the next block's K/V arriving while this
 * one computes; results merged by LSE into o [S, Hq*hd] and lse [Hq, S]. The heads are M->attn's;
 * `at` names the call for the rehearsal's block timer (the layer; stage 5 adds group x layers). */
static void ring_forward(Model *M, int64_t at, const bf16_t *kv, bf16_t *o, float *lse) {
    Work *w = &M->w;
    const int64_t n = M->S, H = M->attn.Hq, Hk = M->attn.Hkv, D = M->attn.D, Q = H * D, KV = Hk * D;
    const int f32 = !strcmp(M->o.merge, "fp32");
    void *acc = f32 ? w->o_acc : (void *)o;
    cudaStream_t st = M->gpu.stream;
    fill_f32(lse, -INFINITY, H * n, st);
    if (M->eot >= 0) ring_zero_slack(M, kv);
    blocks_watch(&M->blocks, at, 0); /* rehearsal: if this is the layer timed, its blocks are */
    const bf16_t *cur = kv;
    for (int i = 0; i < M->job.P; i++) {
        if (i + 1 < M->job.P) ring_pass(M, cur, w->kv_ring[i % 2], BF(2 * n * KV), 0);
        const RingBlock b = layout_ring_block(M->o.seq, M->job.P, M->job.rank, i, M->balanced);
        const SdpaShape sh = {.Hq = H, .Hkv = Hk, .Sq = b.nq, .Skv = b.nk, .D = D, .causal = b.causal};
        SdpaBlocks one;
        DocBlock whole;
        sdpa_blocks_fwd(&M->sdpa, &sh, step_blocks(M, i, &b, &one, &whole), w->q, cur, cur + n * KV, w->blk,
                        w->lse_blk, acc, f32, lse, n, w->sdpa_ws, w->sdpa_ws_bytes, st);
        if (i + 1 < M->job.P) {
            ring_wait(M, 0);
            cur = w->kv_ring[i % 2];
        }
    }
    if (f32) cast_f32_to_bf16(o, w->o_acc, n * Q, st);
}
/* ---- end stage 3 ---- */

/* ---- stage 3: the linear layers' state ---- */
/* Linear attention (Qwen3.5) crosses ranks as state, not K/V (docs/context_parallel_state.md derives
 * it). A chunk maps its initial state to its final one affinely, S_end = S_start M + B, M and B its
 * own; the ranks exchange their chunks' maps (6 MiB a chunk for 27B, whatever the sequence length), and a
 * rank composes them in sequence order up to its own chunks, whose true initial states it then runs
 * them from. No rank waits on a chain of the others. The backward mirrors it: dS_start = dS_end M^T
 * + C. The conv (width K) reads K-1 tokens before a chunk: its halo, the previous chunk's last
 * inputs, crosses too. */
/* every rank's `bytes` of in into out [P, bytes] (rank-major), on the communication stream */
static void cp_gather(Model *M, void *out, const void *in, int64_t bytes) {
    CUDA_CHECK(cudaEventRecord(M->ring_ev[0], M->gpu.stream));
    CUDA_CHECK(cudaStreamWaitEvent(M->comm_st, M->ring_ev[0], 0));
    comm_all_gather_bf16(M->job.comm, out, in, bytes / 2, M->comm_st);
    CUDA_CHECK(cudaEventRecord(M->ring_ev[1], M->comm_st));
    ring_wait(M, 0);
}
/* zigzag: chunk ch of 2P is rank ch's head (k 0) or rank 2P-1-ch's tail (k 1), in slot rank * 2 + k */
static int64_t chunk_slot(const Model *M, int64_t ch) { return zigzag_slot(M->job.P, ch); }
static int64_t our_chunk(const Model *M, int k) { return zigzag_chunk(M->job.P, M->job.rank, k); }

/* every chunk's last K-1 conv inputs (mix rows) into w.tails_all */
static void linear_halos(Model *M) {
    Work *w = &M->w;
    const int64_t C = config_conv_channels(&M->c), h = M->c.conv_width - 1, n = w->gdn.seg;
    for (int k = 0; k < 2; k++)
        CUDA_CHECK(cudaMemcpyAsync(w->share.tails + k * h * C, w->gdn.mix + ((k + 1) * n - h) * C, (size_t)BF(h * C),
                                   cudaMemcpyDeviceToDevice, M->gpu.stream));
    cp_gather(M, w->share.tails_all, w->share.tails, BF(2 * h * C));
}
/* our chunk k's halo: the previous chunk's tail (none before the sequence) */
static const bf16_t *halo_of(const Model *M, int k) {
    const int64_t ch = our_chunk(M, k), hl = (M->c.conv_width - 1) * config_conv_channels(&M->c);
    return ch ? M->w.share.tails_all + chunk_slot(M, ch - 1) * hl : NULL;
}

/* if chunk ch is one of ours, its state (w.s_start's slot) is cur: zero when NULL */
static void if_ours(Model *M, int64_t ch, const float *cur) {
    const int64_t ms = deltanet_state_size(&M->c);
    for (int k = 0; k < 2; k++) {
        if (our_chunk(M, k) != ch) continue;
        float *s = M->w.share.s_start + k * ms;
        if (cur) CUDA_CHECK(cudaMemcpyAsync(s, cur, (size_t)F32(ms), cudaMemcpyDeviceToDevice, M->gpu.stream));
        else CUDA_CHECK(cudaMemsetAsync(s, 0, (size_t)F32(ms), M->gpu.stream));
    }
}

/* our chunks' maps, exchanged; composed in sequence order into our chunks' initial states, w.s_start */
static void linear_states(Model *M) {
    Work *w = &M->w;
    const Qwen3Config *c = &M->c;
    const int64_t Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim, ms = Hv * dv * dk, mm = ms + Hv * dk * dk;
    cudaStream_t st = M->gpu.stream;
    for (int k = 0; k < 2; k++) deltanet_maps(&w->gdn, c, w->pos, k, w->share.maps + k * mm, st);
    cp_gather(M, w->share.maps_all, w->share.maps, F32(2 * mm));
    const float *cur = NULL; /* the state before chunk ch; NULL: zero */
    for (int64_t ch = 0; ch <= our_chunk(M, 1); ch++) {
        if_ours(M, ch, cur); /* chunk ch starts from cur */
        if (ch == our_chunk(M, 1)) break; /* the state after our last chunk: nobody's */
        float *next = w->share.compose + (ch % 2) * ms;
        gdn_compose(next, cur, w->share.maps_all + chunk_slot(M, ch) * mm, Hv, dk, dv, st);
        cur = next;
    }
}

/* Qwen3.5's linear attention layer over this rank's two chunks: xn -> x_mid, its conv fed the
 * halos and its rule run from the chunks' true initial states (common/deltanet.h's steps) */
static void linear_forward(Model *M, int64_t l, const bf16_t *x) {
    Work *w = &M->w;
    GdnWork *g = &w->gdn;
    const GdnWeights16 *Wl = GDN_W(M, l);
    cudaStream_t st = M->gpu.stream;
    deltanet_project(&M->gemm, g, &M->c, Wl, w->xn, M->S, st);
    linear_halos(M);
    for (int k = 0; k < 2; k++) deltanet_conv(g, &M->c, Wl, w->pos, k, halo_of(M, k), st);
    deltanet_gates(g, &M->c, Wl, M->S, st);
    linear_states(M);
    for (int k = 0; k < 2; k++) deltanet_rule(g, &M->c, w->pos, k, w->share.s_start + k * deltanet_state_size(&M->c), st);
    deltanet_output(&M->gemm, g, &M->c, Wl, x, w->x_mid, M->S, st);
}
/* ---- end stage 3 ---- */
/* x -> x_mid = x + o_proj(attention(head norms and RoPE of q and k, v)), xn = input_layernorm(x).
 * run_attn = 0 reuses kept O/LSE. A Qwen3.5 hybrid's linear layers take Gated DeltaNet instead. */
static void attention_forward(Model *M, int64_t l, const bf16_t *x, int run_attn) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t S = M->S, D = c->hidden, Q = c->heads * c->head_dim, KV = c->kv_heads * c->head_dim;
    cudaStream_t st = M->gpu.stream;
    /* ---- stage 4: offload ---- */
    const int64_t h = host_ix(M, l);
    char *held = on_host(M, l) ? slot(&M->sv.hol, h) : NULL; /* O then LSE, in the layer's slot */
    const int64_t f = config_full_ix(c, l); /* its place among the full attention layers */
    w->o = held ? (bf16_t *)held : kept(M, l) ? M->sv.o + f * (S + M->slack) * Q : w->o_own;
    w->lse = held ? (float *)(held + BF((S + M->slack) * Q)) : kept(M, l) ? M->sv.lse + f * c->heads * S : w->lse_own;
    const int down = run_attn && held; /* forward: the kept O and LSE go to the host */
    if (down) will_write(M, &M->sv.hol, h);
    /* ---- end stage 4 ---- */
    rmsnorm_fwd(w->xn, w->rstd1, x, W(M, P_IN_NORM, l), S, D, (float)c->eps, st);
    if (config_is_linear(c, l)) { /* Qwen3.5: common/deltanet.h */
        linear_forward(M, l, x); /* stage 3: its state passed between the chunks */
        return;
    }
    linear_fwd(&M->gemm, w->k_raw, 0, w->xn, W(M, P_K, l), S, D, KV, 0.f, st);
    linear_fwd(&M->gemm, w->v, 0, w->xn, W(M, P_V, l), S, D, KV, 0.f, st);
    attn_k_norm_rope(c, w->k, w->rstd_k, w->k_raw, W(M, P_K_NORM, l), w->pos, w->inv_freq, M->attn_factor, S, st);
    /* ---- stage 5: head groups: a group's queries, its ring, its columns of O ---- */
    const int64_t Qg = M->hg * c->head_dim;
    for (int64_t g = 0; (run_attn || c->attn_gate) && g < M->groups; g++) { /* kept O: only the gate again */
        group_q(M, l, g);
        if (run_attn) {
            group_kv(M, g);
            ring_forward(M, l + g * c->layers, w->kv_g, w->o_g, w->lse + g * M->hg * S); /* stage 3: group g's */
            copy_cols(w->o + g * Qg, Q, w->o_g, Qg, Qg, S, st);
        } else
            copy_cols(w->o_g, Qg, w->o + g * Qg, Q, Qg, S, st); /* the kept O's columns */
        if (c->attn_gate) /* Qwen3.5: its columns of o sigmoid(gate) */
            copy_cols(w->og + g * Qg, Q, attn_out_gate(c, w->o_g, w->o_g, w->q_raw, M->hg, S, st), Qg, Qg, S, st);
    }
    /* ---- end stage 5 ---- */
    if (down) copy_down(M, &M->sv.hol, h); /* stage 4 */
    linear_fwd_add(&M->gemm, w->x_mid, x, c->attn_gate ? w->og : w->o, W(M, P_O, l), S, Q, D, st);
}

/* rows [t0, t0+n) of x_mid -> xn2, g, u and h (and rstd2 at those rows), or an MoE model's routed
 * experts (fwd: the forward pass, which counts the router's choices; the recompute does not). The
 * MLP is row-wise: a range of rows computes alone (stage 5 runs it a tile at a time). */
static void mlp_rows_forward(Model *M, int64_t l, int64_t t0, int64_t n, int fwd) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t D = c->hidden, I = c->intermediate;
    cudaStream_t st = M->gpu.stream;
    rmsnorm_fwd(w->xn2, w->rstd2 + t0, w->x_mid + t0 * D, W(M, P_POST_NORM, l), n, D, (float)c->eps, st);
    if (c->experts) {
        moe_forward(&M->gemm, &w->moe, c, MOE_W(M, l), w->xn2, n, fwd, st);
        return;
    }
    linear_fwd(&M->gemm, w->g, 0, w->xn2, W(M, P_GATE, l), n, D, I, 0.f, st);
    linear_fwd(&M->gemm, w->u, 0, w->xn2, W(M, P_UP, l), n, D, I, 0.f, st);
    swiglu_fwd(w->h, w->g, w->u, n * I, st);
}
/* ---- stage 5: MLP tiles ---- */
static int64_t tile_rows(const Model *M, int64_t t0) { return M->S - t0 < M->tile ? M->S - t0 : M->tile; }
/* ---- end stage 5 ---- */

/* x_mid -> x_out = x_mid + down(silu(gate(n)) * up(n)), n = post_attention_layernorm(x_mid), or the
 * experts' outputs, weighted; stage 5: a tile of rows at a time, nothing of a tile kept */
static void mlp_forward(Model *M, int64_t l, bf16_t *x_out) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t D = c->hidden, I = c->intermediate;
    cudaStream_t st = M->gpu.stream;
    for (int64_t t0 = 0; t0 < M->S; t0 += M->tile) { /* stage 5 */
        const int64_t n = tile_rows(M, t0);
        mlp_rows_forward(M, l, t0, n, 1);
        if (c->experts) moe_output(&w->moe, c, x_out + t0 * D, w->x_mid + t0 * D, n, st); /* they join the residual */
        else linear_fwd_add(&M->gemm, x_out + t0 * D, w->x_mid + t0 * D, w->h, W(M, P_DOWN, l), n, I, D, st);
    }
}

static void forward(Model *M) {
    const int64_t S = M->S, D = M->c.hidden;
    /* ---- stage 2: FSDP ---- */
    fetch(M, 0);                        /* embedding */
    fetch(M, M->p.shards.nunits - 1);   /* tail, for the loss */
    fetch(M, 1);                        /* layer 0 */
    await_unit(M, 0);
    /* ---- end stage 2 ---- */
    mark(M->gpu.stream, K_ELEM); /* --profile: the layers' region (common/train.h) */
    if (M->off.ckpt) will_write(M, &M->sv.hx, 0); /* stage 4 */
    embedding_fwd(ckpt(M, 0), W(M, P_EMBED, 0), M->w.ids, S, D, M->gpu.stream);
    if (M->off.ckpt) copy_down(M, &M->sv.hx, 0); /* stage 4 */
    for (int64_t l = 0; l < M->c.layers; l++) {
        progress_at(M->gpu.stream, 0, l);
        /* ---- stage 2: FSDP ---- */
        if (l + 1 < M->c.layers) fetch(M, 2 + l); /* the next layer's gather overlaps this layer */
        await_unit(M, 1 + l);
        /* ---- end stage 2 ---- */
        attention_forward(M, l, ckpt(M, l), 1);
        const int down = M->off.ckpt && l + 1 < M->c.layers; /* stage 4: x_L stays for the loss */
        if (M->off.ckpt) will_write(M, &M->sv.hx, l + 1); /* x_L too: its slot held x_{L-2}, maybe still going down */
        mlp_forward(M, l, ckpt(M, l + 1));
        if (down) copy_down(M, &M->sv.hx, l + 1);
        release(M, 1 + l); /* stage 2 */
    }
}

/* ============================================================ backward */
/* final norm, then chunked NLL fused with its gradient: d(loss)/d(x_L) lands in w.dx. The loss is
 * the mean over the labels that count in the whole step (every rank's), so each label's gradient is
 * scaled by 1 / M->counted and the ranks' gradients add. grads 0: the loss alone (an evaluation). */
static void loss_and_head_backward(Model *M, int grads) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t S = M->S, D = c->hidden, V = c->vocab, C = M->o.loss_chunk;
    const bf16_t *xL = ckpt(M, c->layers), *lm = W(M, P_LM_HEAD, 0);
    float *dlm = G(M, P_LM_HEAD, 0);
    cudaStream_t st = M->gpu.stream;
    await_unit(M, M->p.shards.nunits - 1); /* stage 2 */
    mark(st, K_LOSS);
    rmsnorm_fwd(w->hf, w->rstdf, xL, W(M, P_FINAL_NORM, 0), S, D, (float)c->eps, st);
    for (int64_t c0 = 0; c0 < S; c0 += C) {
        const int64_t n = S - c0 < C ? S - c0 : C;
        linear_fwd(&M->gemm, w->logits, 1, w->hf + c0 * D, lm, n, D, V, 0.f, st);
        cross_entropy(w->dlogits, w->losses + c0, w->logits, w->labels + c0, w->label_w + c0, n, V, /* stage 3 */
                      1.f / (float)M->counted, st);
        if (!grads) continue;
        linear_dw(&M->gemm, dlm, w->dlogits, w->hf + c0 * D, n, D, V, st);
        linear_dx(&M->gemm, w->dhf + c0 * D, w->dlogits, lm, n, D, V, 0.f, st);
    }
    CUDA_CHECK(cudaMemsetAsync(w->loss_sum, 0, 8, st));
    sum_f32(w->loss_sum, w->losses, S, w->red, st);
    if (!grads) return;
    CUDA_CHECK(cudaMemsetAsync(w->dx, 0, (size_t)BF(S * D), st));
    rmsnorm_bwd(w->dx, G(M, P_FINAL_NORM, 0), w->dhf, xL, w->rstdf, W(M, P_FINAL_NORM, 0), S, D, st);
}

/* the loss the step reports: transformers adds router_aux_loss_coef x aux when output_router_logits */
static double aux_term(const Model *M) { return M->c.experts && M->c.aux_loss ? M->c.aux_coef * M->aux : 0; }

/* ---- stage 3: ring attention ---- */
/* the same blocks backward with the final O and LSE: dQ adds up here; each block's dK/dV joins the
 * running sum that travels with it, and after P passes every rank holds its own K/V's total: dq
 * [S, Hq*hd], dkv_out [2, S, Hkv*hd] (dK then dV).
 * Why the final O and LSE, not each block's: a row's softmax spans every block, so a block's
 * probabilities are exp(scores - LSE_final) and its dScores = P (dP - rowsum(dO * O_final)). Given
 * the final ones, each block's backward is exactly its slice of the whole attention's backward. */
static void ring_backward(Model *M, int64_t at, const bf16_t *kv, const bf16_t *o, const bf16_t *d_o, const float *lse,
                          bf16_t *dq, bf16_t *dkv_out) {
    Work *w = &M->w;
    const int64_t n = M->S, H = M->attn.Hq, Hk = M->attn.Hkv, D = M->attn.D, Q = H * D, KV = Hk * D;
    const int f32 = !strcmp(M->o.merge, "fp32");
    const int64_t acc = f32 ? 4 : 2;
    cudaStream_t st = M->gpu.stream;
    CUDA_CHECK(cudaMemsetAsync(w->dq_acc, 0, (size_t)(acc * n * Q), st));
    CUDA_CHECK(cudaMemsetAsync(w->dkv_ring[0], 0, (size_t)(acc * 2 * n * KV), st));
    if (M->eot >= 0) {
        ring_zero_slack(M, kv);
        sdpa_zero_slack((bf16_t *)o, n, Q, st); /* kept O too: each layer's has its own rows of slack */
        sdpa_zero_slack((bf16_t *)d_o, n, Q, st);
    }
    blocks_watch(&M->blocks, at, 1); /* rehearsal: if this is the layer timed, its blocks are */
    char *dkv = w->dkv_ring[0];
    const bf16_t *cur = kv;
    for (int i = 0; i < M->job.P; i++) {
        if (i + 1 < M->job.P) ring_pass(M, cur, w->kv_ring[i % 2], BF(2 * n * KV), 0);
        const RingBlock b = layout_ring_block(M->o.seq, M->job.P, M->job.rank, i, M->balanced);
        const SdpaShape sh = {.Hq = H, .Hkv = Hk, .Sq = b.nq, .Skv = b.nk, .D = D, .causal = b.causal};
        SdpaBlocks one;
        DocBlock whole;
        /* each block's dQ adds up here; its dK/dV join the running sum once it has arrived */
        sdpa_blocks_bwd(&M->sdpa, &sh, step_blocks(M, i, &b, &one, &whole), w->q, cur, cur + n * KV, o, d_o, lse, n,
                        w->dq_acc, dkv, dkv + acc * n * KV, f32, w->blk, w->dkv_blk, w->lse_blk, w->softmax_sum,
                        w->dq_accum, w->sdpa_ws, w->sdpa_ws_bytes, i > 0 ? dkv_arrived : NULL, M, st);
        if (M->job.P > 1) { /* pass it on; what arrives belongs to the next block (after the last: our own) */
            char *next = w->dkv_ring[(i + 1) % 2];
            ring_pass(M, dkv, next, acc * 2 * n * KV, 2);
            dkv = next;
        }
        if (i + 1 < M->job.P) {
            ring_wait(M, 0);
            cur = w->kv_ring[i % 2];
        }
    }
    if (M->job.P > 1) ring_wait(M, 2);
    if (f32) {
        cast_f32_to_bf16(dq, w->dq_acc, n * Q, st);
        cast_f32_to_bf16(dkv_out, (float *)dkv, 2 * n * KV, st);
    } else {
        CUDA_CHECK(cudaMemcpyAsync(dq, w->dq_acc, (size_t)BF(n * Q), cudaMemcpyDeviceToDevice, st));
        CUDA_CHECK(cudaMemcpyAsync(dkv_out, dkv, (size_t)BF(2 * n * KV), cudaMemcpyDeviceToDevice, st));
    }
}
/* ---- end stage 3 ---- */

/* ---- stage 3: the linear layers' state ---- */
/* the backward's: our chunks' C, exchanged; composed from the last chunk back into the gradients of our
 * chunks' final states (w.s_start, reused) */
static void linear_state_grads(Model *M) {
    Work *w = &M->w;
    const Qwen3Config *c = &M->c;
    const int64_t Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim, ms = Hv * dv * dk, mm = ms + Hv * dk * dk;
    cudaStream_t st = M->gpu.stream;
    CUDA_CHECK(cudaMemsetAsync(w->share.cmaps, 0, (size_t)F32(2 * ms), st));
    for (int k = 0; k < 2; k++) deltanet_rule_bwd(&w->gdn, c, w->pos, k, w->share.cmaps + k * ms, 1, st);
    cp_gather(M, w->share.cmaps_all, w->share.cmaps, F32(2 * ms));
    const float *cur = NULL; /* the gradient of chunk ch's final state; NULL: zero (the sequence's last) */
    for (int64_t ch = 2 * M->job.P - 1; ch >= our_chunk(M, 0); ch--) {
        if_ours(M, ch, cur); /* chunk ch's final state has the gradient cur */
        if (ch == our_chunk(M, 0)) break; /* the gradient before our first chunk: nobody's */
        float *next = w->share.compose + (ch % 2) * ms;
        gdn_compose_bwd(next, cur, w->share.maps_all + chunk_slot(M, ch) * mm, w->share.cmaps_all + chunk_slot(M, ch) * ms, Hv, dk, dv,
                        st);
        cur = next;
    }
}

/* what each chunk's first tokens sent back to its halo, exchanged, added to the previous chunk's dmix */
static void linear_dhalos(Model *M) {
    Work *w = &M->w;
    const int64_t C = config_conv_channels(&M->c), h = M->c.conv_width - 1, n = w->gdn.seg;
    cp_gather(M, w->share.dhalo_all, w->share.dhalo, BF(2 * h * C));
    for (int k = 0; k < 2; k++) {
        const int64_t next = our_chunk(M, k) + 1;
        if (next < 2 * M->job.P)
            add_bf16_into(w->gdn.dmix + ((k + 1) * n - h) * C, 0, w->share.dhalo_all + chunk_slot(M, next) * h * C, h * C,
                          M->gpu.stream);
    }
}

/* the linear layer's backward over our two chunks: w.dx holds d(loss)/d(x_mid); d(loss)/d(xn) lands in
 * w.dxn; its forward has just run again */
static void linear_backward(Model *M, int64_t l) {
    Work *w = &M->w;
    GdnWork *g = &w->gdn;
    const GdnWeights16 *Wl = GDN_W(M, l);
    const GdnGrads32 *Gl = GDN_G(M, l);
    cudaStream_t st = M->gpu.stream;
    deltanet_output_bwd(&M->gemm, g, &M->c, Wl, Gl, w->dx, M->S, st);
    linear_state_grads(M);
    for (int k = 0; k < 2; k++) deltanet_rule_bwd(g, &M->c, w->pos, k, w->share.s_start + k * deltanet_state_size(&M->c), 0, st);
    deltanet_gates_bwd(g, &M->c, Wl, Gl, M->S, st);
    for (int k = 0; k < 2; k++)
        deltanet_conv_bwd(g, &M->c, Wl, Gl, w->pos, k, halo_of(M, k),
                          w->share.dhalo + k * (M->c.conv_width - 1) * config_conv_channels(&M->c), st);
    linear_dhalos(M);
    deltanet_project_bwd(&M->gemm, g, &M->c, Wl, Gl, w->xn, w->dxn, M->S, st);
}
/* ---- end stage 3 ---- */

/* rows [t0, t0+n) of the MLP backward, once mlp_rows_forward has re-run them: w.dx at those rows
 * holds d(loss)/d(x_out); the MLP's part of d(loss)/d(x_mid) joins it in place, and dW adds up */
static void mlp_rows_backward(Model *M, int64_t l, int64_t t0, int64_t n) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    Gemm *gm = &M->gemm;
    const int64_t D = c->hidden, I = c->intermediate;
    cudaStream_t st = M->gpu.stream;
    bf16_t *dx = w->dx + t0 * D;
    if (c->experts) moe_backward(gm, &w->moe, c, MOE_W(M, l), MOE_G(M, l), w->xn2, dx, w->dxn2, n, st);
    else { /* dense: dh = dx Wd, dWd += dx^T h, then SwiGLU and the two input projections */
        linear_dw(gm, G(M, P_DOWN, l), dx, w->h, n, I, D, st);
        linear_dx(gm, w->h, dx, W(M, P_DOWN, l), n, I, D, 0.f, st); /* h <- dh */
        swiglu_bwd(w->g, w->u, w->h, n * I, st);                     /* g <- dg, u <- du */
        linear_dw(gm, G(M, P_GATE, l), w->g, w->xn2, n, D, I, st);
        linear_dw(gm, G(M, P_UP, l), w->u, w->xn2, n, D, I, st);
        linear_dx(gm, w->dxn2, w->g, W(M, P_GATE, l), n, D, I, 0.f, st);
        linear_dx(gm, w->dxn2, w->u, W(M, P_UP, l), n, D, I, 1.f, st);
    }
    rmsnorm_bwd(dx, G(M, P_POST_NORM, l), w->dxn2, w->x_mid + t0 * D, w->rstd2 + t0, W(M, P_POST_NORM, l), n, D, st);
}

/* w.dx holds d(loss)/d(x_out of layer l); the MLP's part of d(loss)/d(x_mid) joins it in place. Its
 * forward runs again first: nothing of it was kept. Stage 5: a tile at a time, each tile's forward
 * then at once its backward (dW adds up over the tiles) */
static void mlp_backward(Model *M, int64_t l) {
    for (int64_t t0 = 0; t0 < M->S; t0 += M->tile) {
        mlp_rows_forward(M, l, t0, tile_rows(M, t0), 0);
        mlp_rows_backward(M, l, t0, tile_rows(M, t0));
    }
}

/* w.dx holds d(loss)/d(x_mid of layer l) (the MLP's part joined); its attention's part of
 * d(loss)/d(xn) lands in w.dxn. The forward has just run again: q, k, v, O (or the kept O) are there. */
static void attention_backward(Model *M, int64_t l) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    Gemm *gm = &M->gemm;
    const int64_t S = M->S, D = c->hidden, Q = c->heads * c->head_dim, KV = c->kv_heads * c->head_dim,
                  QR = config_q_rows(c), Qg = M->hg * c->head_dim, KVg = M->kg * c->head_dim, /* stage 5 */
                  QRg = QR / M->groups;
    bf16_t *dqr = config_plain_heads(c) ? w->dq : w->dq_raw; /* d(q_proj's output) */
    cudaStream_t st = M->gpu.stream;
    /* d(o) = dx Wo, then (Qwen3.5) the gate's backward, attention's backward, head norms + RoPE, projections */
    linear_dw(gm, G(M, P_O, l), w->dx, c->attn_gate ? w->og : w->o, S, Q, D, st);
    linear_dx(gm, w->d_o, w->dx, W(M, P_O, l), S, Q, D, 0.f, st);
    /* ---- stage 5: head groups: a group's queries again, its ring backward, its q norm + RoPE backward;
     * its dQ, dK, dV go to their columns (dQ's are the ones of dO it has just read) ---- */
    for (int64_t g = 0; g < M->groups; g++) {
        group_q(M, l, g);
        group_kv(M, g);
        copy_cols(w->o_g, Qg, w->o + g * Qg, Q, Qg, S, st);
        copy_cols(w->d_o_g, Qg, w->d_o + g * Qg, Q, Qg, S, st);
        attn_out_gate_bwd(c, w->d_o_g, w->dq_raw_g, w->o_g, w->q_raw, M->hg, S, st); /* Qwen3.5 */
        ring_backward(M, l + g * c->layers, w->kv_g, w->o_g, w->d_o_g, w->lse + g * M->hg * S, w->d_o_g, /* stage 3 */
                      w->dkv_blk); /* its dQ where its dO was, its dK and dV in dkv_blk */
        attn_q_norm_rope_bwd(c, w->dq_raw_g, w->d_o_g, G(M, P_Q_NORM, l), w->q_raw, w->rstd_q, W(M, P_Q_NORM, l), M->hg,
                             w->pos, w->inv_freq, M->attn_factor, S, st);
        if (config_plain_heads(c)) copy_cols(w->dq + g * Qg, Q, w->d_o_g, Qg, Qg, S, st);
        else copy_cols(w->dq_raw + g * QRg, QR, w->dq_raw_g, QRg, QRg, S, st); /* Qwen3.5: query and gate */
        copy_cols(w->dk + g * KVg, KV, w->dkv_blk, KVg, KVg, 2 * S, st); /* dK then dV: [2S, KV] rows */
    }
    /* ---- end stage 5 ---- */
    attn_k_norm_rope_bwd(c, w->dk, G(M, P_K_NORM, l), w->k_raw, w->rstd_k, W(M, P_K_NORM, l), w->pos, w->inv_freq,
                         M->attn_factor, S, st);
    linear_dw(gm, G(M, P_Q, l), dqr, w->xn, S, D, QR, st);
    linear_dw(gm, G(M, P_K, l), w->dk, w->xn, S, D, KV, st);
    linear_dw(gm, G(M, P_V, l), w->dv, w->xn, S, D, KV, st);
    linear_dx(gm, w->dxn, dqr, W(M, P_Q, l), S, D, QR, 0.f, st);
    linear_dx(gm, w->dxn, w->dk, W(M, P_K, l), S, D, KV, 1.f, st);
    linear_dx(gm, w->dxn, w->dv, W(M, P_V, l), S, D, KV, 1.f, st);
}

/* w.dx holds d(loss)/d(x_out of layer l); on return d(loss)/d(x_in of layer l). */
static void layer_backward(Model *M, int64_t l) {
    const Qwen3Config *c = &M->c;
    Work *w = &M->w;
    const int64_t S = M->S, D = c->hidden;
    const bf16_t *x = ckpt(M, l);
    cudaStream_t st = M->gpu.stream;
    /* recompute this layer's attention half (attention itself unless O and LSE were kept), then the MLP backward */
    attention_forward(M, l, x, !kept(M, l)); /* stage 4: only some layers may be kept */
    mlp_backward(M, l);
    if (config_is_linear(c, l)) linear_backward(M, l); /* Qwen3.5; stage 3: its state passed between the chunks */
    else attention_backward(M, l);
    rmsnorm_bwd(w->dx, G(M, P_IN_NORM, l), w->dxn, x, w->rstd1, W(M, P_IN_NORM, l), S, D, st);
}

static void backward(Model *M) {
    mark(M->gpu.stream, K_ELEM); /* --profile: the layers' region */
    /* ---- stage 2: FSDP ---- */
    const int64_t last = M->p.shards.nunits - 1;
    fetch(M, M->c.layers); /* the last layer */
    const int64_t L = M->c.layers, NH = M->kept - M->kept_gpu; /* stage 4: layers kept on the host */
    if (M->off.ckpt) done_with(M, &M->sv.hx, L); /* stage 4: x_L has fed the loss */
    for (int64_t l = M->c.layers - 1; l >= 0; l--) {
        progress_at(M->gpu.stream, 1, l);
        if (l > 0) fetch(M, l); /* layer l-1, gathered while layer l runs */
        /* ---- stage 4: offload ---- */
        /* layer l-1's input (and the previous host-kept O) come up while layer l runs; the forward's last
         * two of each are still in their slots (x_{L-1}; O of the last two on the host, h = NH-2, NH-1) */
        if (M->off.ckpt && l > 0) copy_up(M, &M->sv.hx, l - 1);
        if (M->off.ckpt && l < L - 1) await_up(M, &M->sv.hx, l);
        const int64_t h = host_ix(M, l);
        if (h > 0 && h - 1 <= NH - 3) copy_up(M, &M->sv.hol, h - 1);
        if (h >= 0 && h <= NH - 3) await_up(M, &M->sv.hol, h);
        /* ---- end stage 4 ---- */
        await_unit(M, 1 + l);
        zero_grads(M, 1 + l);
        layer_backward(M, l);
        /* ---- stage 4: offload ---- */
        if (M->off.ckpt) done_with(M, &M->sv.hx, l);
        if (on_host(M, l)) done_with(M, &M->sv.hol, h);
        /* ---- end stage 4 ---- */
        release(M, 1 + l);
        reduce_grads(M, 1 + l);
    }
    /* ---- end stage 2 ---- */
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
static void update(Model *M, int64_t step, double lr) {
    const AdamOpts *o = &M->o.adam;
    Params *p = &M->p;
    cudaStream_t st = M->gpu.stream;
    mark(st, K_OPTIM);
    /* ---- stage 4: offload ---- */
    if (M->off.states) { /* on the host CPUs, once the last gradient shard is down */
        CUDA_CHECK(cudaStreamSynchronize(M->comm_st));
        double sumsq = cpu_sumsq(p->grad, p->total, M->threads);
        gpu_upload(M->w.gnorm_sq, &sumsq, 8, st);
        comm_all_reduce_f64(M->job.comm, M->w.gnorm_sq, 1, st); /* stage 2: the global norm */
        gpu_download(&sumsq, M->w.gnorm_sq, 8, st);
        const AdamHP hp = {lr, o->beta1, o->beta2, o->eps, o->wd, o->clip, step};
        cpu_adamw(p->pieces, p->npieces, p->master, p->w, p->m, p->v, p->grad, sumsq, &hp, M->threads);
        return;
    }
    /* ---- end stage 4 ---- */
    sumsq_f32(M->w.gnorm_sq, p->grad, p->total, M->w.red, st);
    comm_all_reduce_f64(M->job.comm, M->w.gnorm_sq, 1, st); /* stage 2: the global norm */
    const float bc1 = (float)(1.0 - pow(o->beta1, (double)step)), bc2 = (float)(1.0 - pow(o->beta2, (double)step));
    for (int64_t i = 0; i < p->npieces; i++) { /* decay differs per tensor; stage 2: the pieces this rank owns */
        const Piece *t = &p->pieces[i];
        const int64_t at = t->at;
        adamw(p->master + at, p->w + at, p->m + at, p->v + at, p->grad + at, t->numel, M->w.gnorm_sq,
              (float)o->clip, (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
              params_decays(t->param) ? (float)o->wd : 0.f, bc1, bc2, st);
    }
}

/* ============================================================ data */
typedef struct Data {
    const TokenFile *tf; /* the run's (Model.in): one copy for every rank of the process */
    Loader ld;
    uint32_t *host;     /* [seq+1] the window's tokens (stage 3 on: then [2, S], this rank's ids and labels) */
    uint8_t *wt;        /* [seq+1] the window's loss weights (stage 3 on: then [S], its labels') */
    DocsWindow docs;    /* --packing: the window's documents (common/docs.h) */
    int64_t skipped;    /* steps so far with no label that counts (no update: AdamW counts the others) */
} Data;

static void data_open(Data *d, const Model *M, const TokenFile *tf) {
    char err[512];
    d->tf = tf;
    if (loader_init(&d->ld, tf, M->o.seq, M->job.dp, job_dp_rank(&M->job), err, sizeof err)) DIE("%s", err);
    d->host = xmalloc((size_t)(4 * (M->o.seq + 1 + 2 * M->S)));
    d->wt = xmalloc((size_t)(M->o.seq + 1 + M->S));
    if (M->eot >= 0) { /* --packing: a label after an end-of-text counts no loss */
        loader_pack(&d->ld, (uint32_t)M->eot);
        docs_window_open(&d->docs, M->o.seq, M->S, M->job.P);
    }
    /* every rank counts every rank's labels in its own copy of the file (and its ends of text): the copies,
     * and each node's config.json, must agree (one rank here: nothing to compare) */
    job_same_inputs(&M->job, loader_digest(&d->ld) ^ config_digest(&M->c), tf->path, d->tf->count, d->tf->counted,
                    M->c.layers, M->gpu.stream);
    loader_report(&d->ld);
}

/* --packing: the window's documents, their RoPE positions and attention blocks */
static void pack_window(Data *d, Model *M) {
    DocsWindow *dw = &d->docs;
    const int64_t S = M->S;
    /* ---- stage 3: ring attention ---- */
    /* (data_load cut the window and laid it out) this rank's rows' positions, and a call per ring step */
    const int64_t *mine = dw->rows + M->job.rank * S;
    int32_t *pos = dw->pos + M->o.seq;
    for (int64_t t = 0; t < S; t++) pos[t] = dw->pos[mine[t]];
    docplan_reset(&M->docs);
    for (int i = 0; i < M->job.P; i++) {
        const RingBlock b = layout_ring_block(M->o.seq, M->job.P, M->job.rank, i, M->balanced);
        docplan_add(&M->docs, dw->start, dw->n, mine, b.q0, b.nq, dw->rows + b.src * S, b.k0, b.nk);
    }
    /* ---- end stage 3 ---- */
    CUDA_CHECK(cudaMemcpyAsync(M->w.pos, pos, (size_t)(4 * S), cudaMemcpyHostToDevice, M->gpu.stream));
    docplan_upload(&M->docs, M->gpu.stream);
    docplan_trace(&M->docs, dw->n, dw->pos, M->o.seq, pos, S);
}

/* step is 0-based here: the window follows from the step alone, so resume reads the same data */
static void data_load(Data *d, Model *M, int64_t step) {
    loader_next(&d->ld, step, d->host);
    M->counted = loader_counted_job(&d->ld, step); /* the whole step's: every rank divides by the same count */
    loader_weights(&d->ld, step, d->wt);
    /* ---- stage 3: ring attention ---- */
    /* the sequence is split, not the data: every rank reads the same window and keeps the tokens of
     * its rows (and the labels that follow them): two zigzag chunks, or --packing's layout's pieces */
    uint32_t *ids = d->host + M->o.seq + 1, *labels = ids + M->S;
    uint8_t *lw = d->wt + M->o.seq + 1;
    int64_t *pos = xmalloc((size_t)(8 * M->S));
    layout_window(&d->docs, d->host, M->o.seq, M->eot, M->job.P, M->job.rank, M->balanced, pos);
    for (int64_t t = 0; t < M->S; t++) {
        ids[t] = d->host[pos[t]];
        labels[t] = d->host[pos[t] + 1]; /* shifted before the split: a chunk's last label is the next chunk's first token */
        lw[t] = d->wt[pos[t] + 1];       /* a label's weight travels with it */
    }
    free(pos);
    CUDA_CHECK(cudaMemcpyAsync(M->w.ids, ids, (size_t)(4 * M->S), cudaMemcpyHostToDevice, M->gpu.stream));
    CUDA_CHECK(cudaMemcpyAsync(M->w.labels, labels, (size_t)(4 * M->S), cudaMemcpyHostToDevice, M->gpu.stream));
    CUDA_CHECK(cudaMemcpyAsync(M->w.label_w, lw, (size_t)M->S, cudaMemcpyHostToDevice, M->gpu.stream));
    if (M->eot >= 0) pack_window(d, M);
    CUDA_CHECK(cudaStreamSynchronize(M->gpu.stream)); /* the host staging buffer is reused next step */
    /* ---- end stage 3 ---- */
}

/* ============================================================ evaluation */
/* --eval-data (common/run.h): held-out window k's summed NLL -- the training forward and loss, in the
 * training's own buffers, without their backward -- and its labels (every rank's: the denominator) */
static double eval_window(void *m, int64_t k, int64_t *labels) {
    Model *M = m;
    data_load(M->eval, M, k);
    if (!(*labels = M->counted)) return 0; /* windows of prompt only */
    if (M->c.experts) moe_step_begin(&M->w.moe, &M->c, M->gpu.stream); /* MoE: its statistics, unused */
    forward(M);
    loss_and_head_backward(M, 0);
    /* ---- stage 2: FSDP ---- */
    comm_all_reduce_f64(M->job.comm, M->w.loss_sum, 1, M->gpu.stream); /* every rank's labels */
    release(M, 0); /* as the backward would: the next fetch may overwrite them */
    release(M, M->p.shards.nunits - 1);
    /* ---- end stage 2 ---- */
    double sum;
    gpu_download(&sum, M->w.loss_sum, 8, M->gpu.stream);
    return sum;
}

/* ============================================================ main */
/* one rank's training run: allocate as planned, initialise, loop */
static void train(Model *M) {
    run_join(&M->o.run, &M->job, M->gpu.stream); /* the ranks' options agree, --save reaches every node */
    allocate(M);
    gemm_init(&M->gemm, M->w.gemm_ws, GEMM_WORKSPACE_BYTES);
    M->w.moe.grouped = !strcmp(M->o.moe_gemm, "grouped"); /* MoE: --moe-gemm */
    sdpa_init(&M->sdpa, M->gpu.stream);
    M->sdpa.verbose = 1;
    setup_rope(M);
    int64_t step = init_weights(M); /* 0, or the step of the save resumed from */
    sdpa_check_workspace(&M->sdpa, &M->attn, M->w.sdpa_ws_bytes); /* the real cuDNN plans fit the planned one */

    Data data, eval;
    data_open(&data, M, &M->in.data);
    data.skipped = loader_skipped_before(&data.ld, step); /* a resumed run's: AdamW counts updates */
    if (M->o.run.eval_data) { data_open(&eval, M, &M->in.eval); run_check_eval(&M->o.run, &M->job, &eval.ld); }
    M->eval = &eval;
    Run run = {.o = &M->o.run, .h = {M, state_io, eval_window}, .job = M->job, .stage = STAGE, .c = &M->c,
               .data = M->o.data, .seq = M->o.seq, .S = M->S, .steps = M->o.steps, .mp = &M->mp, .st = M->gpu.stream};
    run_begin(&run, step); /* the held-out loss before the first step; SIGTERM and SIGUSR1 armed */
    cudaStream_t st = M->gpu.stream;
    for (step = step + 1; step <= M->o.steps; step++) {
        if (run_stopping(&run, step - 1)) break; /* a signal: step - 1 saved, stop */
        const double lr = adam_lr(&M->o.adam, M->o.steps, step);
        data_load(&data, M, step - 1);
        if (!M->counted) { /* every label of the step is masked: nothing to divide by, nothing to learn */
            data.skipped++;
            run_skipped(&run, step);
            continue;
        }
        run_clock_start(&run);
        mark(st, K_OPTIM);
        zero_grads(M, 0); /* stage 2: layer gradients are zeroed per layer, shards overwritten */
        zero_grads(M, M->p.shards.nunits - 1);
        if (M->c.experts) moe_step_begin(&M->w.moe, &M->c, st); /* MoE's load-balancing statistics */
        forward(M);
        if (M->c.experts) /* each rank's router gets the job's tokens' share (stage 2 on: the ranks' add up) */
            M->aux = moe_step_aux(&M->w.moe, &M->c, (double)(M->c.layers * M->o.seq * M->job.dp), M->job.comm, st);
        loss_and_head_backward(M, 1);
        backward(M);
        comm_all_reduce_f64(M->job.comm, M->w.loss_sum, 1, st); /* stage 2: every rank's tokens */
        run_dump(&run, step, M->w.loss_sum, M->counted, aux_term(M)); /* --dump-grads: before the update */
        update(M, step - data.skipped, lr); /* AdamW's bias correction counts its updates */
        run_clock_stop(&run);
        double loss_sum, gsq;
        gpu_download(&loss_sum, M->w.loss_sum, 8, st);
        gpu_download(&gsq, M->w.gnorm_sq, 8, st);
        const double loss = loss_sum / (double)M->counted + aux_term(M); /* + MoE's aux loss */
        if (!isfinite(loss)) DIE("step %lld: loss is %f -- stopping (no checkpoint written)", (long long)step, loss);
        run_step(&run, &(StepLog){.step = step, .epoch = data.ld.epoch, .loss = loss, .lr = lr, .grad_norm = sqrt(gsq),
                                  .labels = M->counted, .keep_attn = (int)M->kept},
                 M->eot >= 0 ? (double)M->docs.pairs : -1); /* --packing: the attention its blocks computed */
    }
    run_end(&run, step);
}

/* one rank: its GPU and its own copy of the model state (stage 2 runs one per GPU) */
static void rank_main(const Rank *r, void *tmpl) {
    Model *M = xcalloc(1, sizeof *M);
    *M = *(const Model *)tmpl;
    job_join(&M->job, r);
    gpu_init(&M->gpu, r->device);
    /* ---- stage 2: FSDP ---- */
    CUDA_CHECK(cudaStreamCreateWithFlags(&M->comm_st, cudaStreamNonBlocking));
    cudaEvent_t *evs[] = {M->ready, M->freed, M->reduced, M->grads_done};
    for (int k = 0; k < 4; k++)
        for (int s = 0; s < 4; s++) CUDA_CHECK(cudaEventCreateWithFlags(&evs[k][s], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&M->comm_done, cudaEventDisableTiming));
    M->p.npieces = shard_pieces(&M->p.shards, &M->p.table, M->job.rank, &M->p.pieces);
    /* ---- end stage 2 ---- */
    /* ---- stage 3: context parallelism ---- */
    for (int s = 0; s < 4; s++) CUDA_CHECK(cudaEventCreateWithFlags(&M->ring_ev[s], cudaEventDisableTiming));
    const int64_t kv = BF(2 * M->S * M->attn.Hkv * M->attn.D), acc = strcmp(M->o.merge, "fp32") ? 2 : 4; /* a ring's K/V */
    blocks_init(&M->blocks, M->job.P, M->o.ranks.rehearse >= 0 ? config_attn_layer(&M->c, M->c.layers / 2) : -1,
                1e3 * comm_ring_hop_s(M->job.comm, kv), 1e3 * comm_ring_hop_s(M->job.comm, kv * acc / 2));
    /* ---- end stage 3 ---- */
    /* ---- stage 4: offload ---- */
    CUDA_CHECK(cudaStreamCreateWithFlags(&M->copy_st, cudaStreamNonBlocking));
    offloaded_events(&M->sv.hx);
    offloaded_events(&M->sv.hol);
    M->threads = cpu_threads_each(r->here); /* this machine's cores, shared by the ranks it runs */
    agree_kept(M);
    /* ---- end stage 4 ---- */
    train(M);
    comm_barrier(M->job.comm, M->gpu.stream); /* stage 2: every rank is done before any exits */
}

/* ---- stage 5: tiling ---- */
/* what each tiling saves: the job (m, a copy) planned with the MLP in one tile, then attention in one group */
static void tiling_report(Model m, int64_t peak) {
    const double gib = 1 << 30;
    const int64_t tile = m.tile, groups = m.groups;
    m.tile = m.S;
    MemPlan mp = plan_memory(&m);
    const int64_t untiled_mlp = memplan_peak(&mp);
    m.groups = 1, m.hg = m.attn.Hq = m.c.heads, m.kg = m.attn.Hkv = m.c.kv_heads;
    mp = plan_memory(&m);
    say("tiling saves per GPU: MLP tiles of %lld rows %.1f GiB, %lld head groups %.1f GiB (untiled peak %.1f GiB)\n",
        (long long)tile, (untiled_mlp - peak) / gib, (long long)groups, (memplan_peak(&mp) - untiled_mlp) / gib,
        memplan_peak(&mp) / gib);
}
/* ---- end stage 5 ---- */

int main(int argc, char **argv) {
    static Model M; /* large; zero-initialised; every rank starts from a copy */
    M.o = parse_opts(argc, argv);
    plan_machine(M.o.dry_run, &M.o.ranks, &M.o.gpu_gib, &M.o.host_gib); /* --dry-run: this machine's GPUs, else the headline's */
    const int visible = advice_gpus(&M.o.ranks, M.o.dry_run); /* stage 5: none here: plan the headline's 8 */
    M.job = job_plan(&M.o.ranks, 0); /* stage 3: P ranks sharing each window, one sequence */
    load_config(&M);
    config_print(&M.c);
    parse_offload(&M); /* stage 4 */
    choose_tile(&M);   /* stage 5 */
    choose_kept(&M);
    /* every file the run reads, before its plan and the GPU; a dry-run refuses what the run would */
    run_open_inputs(&M.in, &M.o.run, M.o.data, M.o.model, M.o.seq, M.o.steps, M.eot, M.o.dry_run, &M.job, &M.c,
                    &M.p.table);
    M.mp = plan_memory(&M);
    char title[512];
    int n = snprintf(title, sizeof title, "stage %d, %s, seq %lld over %d ranks (%lld each), merge %s, offload %s, "
                     "attention kept for %lld layers (%lld on the GPU)", STAGE, M.c.name, (long long)M.o.seq, M.job.P,
                     (long long)M.S, M.o.merge, M.o.offload, (long long)M.kept, (long long)M.kept_gpu);
    n += snprintf(title + n, sizeof title - n, ", %lld head groups, MLP tiles of %lld", (long long)M.groups, (long long)M.tile);
    memplan_title_tail(title + n, sizeof title - n, 0 /* said above */, M.c.experts ? M.o.moe_gemm : NULL, M.o.ranks.rehearse >= 0, M.eot >= 0);
    memplan_print(&M.mp, stdout, title, M.o.dry_run ? (int64_t)(M.o.gpu_gib * (1 << 30)) : 0);
    if (M.eot >= 0) docs_plan_note(stdout, M.eot);
    memplan_host_report(&M.mp, ranks_here(&M.o.ranks), host_budget(&M),
                        host_budget_whence(argc, argv, M.o.dry_run)); /* stage 4: this node's ranks (a rehearsal: its one) */
    kept_report(M.kept_gpu, M.kept - M.kept_gpu, config_full_layers(&M.c), M.o.seq, M.c.heads * M.c.head_dim, M.job.P); /* stage 4 */
    tiling_report(M, memplan_peak(&M.mp)); /* stage 5 */
    if (M.eot >= 0) layout_plan(stdout, &M.in.data, M.o.seq, M.job.P, M.eot, M.balanced, M.c.lin_v_heads > 0); /* stage 3 */
    advise_unless_fits(&(FitAsk){.prog = "./stage5", .model = M.o.model, .data = M.o.data, .seq = M.o.seq, /* stage 5 */
                                 .layers = M.o.layers, .P = M.job.P, .ranks = &M.o.ranks, .gpu_gib = M.o.gpu_gib,
                                 .host_budget = host_budget(&M), .dry_run = M.o.dry_run, .argc = argc, .argv = argv},
                       &M.mp, visible); /* a dry-run prints what the run would */
    if (M.o.dry_run) return 0;
    run_instruments(&M.o.run); /* --profile, --trace, --timeline */
    ranks_run(&M.o.ranks, &M.mp, M.o.gpu_gib, rank_main, &M); /* stage 2: a rank per GPU, each from a copy of M */
    return 0;
}
