/* stage.h -- what a stage file calls: the C library, the CUDA runtime, and common/ and kernels/,
 * one header each, here with what each holds. A stage includes this one header, so a stage's diff
 * never carries include lines; the list below is the map of the shared code. */
#ifndef LONGCTX_STAGE_H
#define LONGCTX_STAGE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "advice.h"    /* a plan that does not fit: what is short and the nearest commands that would */
#include "attn.h"      /* a full attention layer's per-head steps: q/k norms and RoPE, Qwen3.5's output gate */
#include "check.h"     /* checked calls, the refusal (STOP) and the fatal path (DIE), say() */
#include "cli.h"       /* the option tables and --help */
#include "comm.h"      /* the communicator: NCCL, local ranks on one GPU, the rehearsal (stage 2 on) */
#include "config.h"    /* Qwen3 and Qwen3.5 configs: sizes by name or config.json, RoPE, YaRN, FLOPs */
#include "cpu_adam.h"  /* AdamW on the host CPUs (stage 4's offloaded optimizer) */
#include "deltanet.h"  /* Qwen3.5's linear attention layer, Gated DeltaNet */
#include "docs.h"      /* packed documents: where they start, their positions and attention blocks */
#include "gemm.h"      /* cuBLASLt GEMMs: the projections, forward and backward */
#include "gpu.h"       /* the device, its memory, uploads and downloads, the plan's fit */
#include "layout.h"    /* packed documents balanced over the ranks: each window's rows and ring blocks (stage 3 on) */
#include "memplan.h"   /* the memory plan: bytes by category, the table, kept attention's words */
#include "model.h"     /* the parameter table: every tensor's name, shape and place */
#include "moe.h"       /* the MoE block: router, experts, the load-balancing loss */
#include "ranks.h"     /* the job: ranks, their threads and GPUs, the several-GPU options */
#include "run.h"       /* a run's operations: saves, resume, evaluation, the step's report */
#include "sdpa.h"      /* cuDNN flash attention from C, and packed documents' blocks */
#include "shard.h"     /* FSDP's shards of every tensor over the ranks (stage 2 on) */
#include "tensor.h"    /* arenas: each memory category one allocation, carved by the plan */
#include "tokens.h"    /* token files and the window loader */
#include "zigzag.h"    /* the sequence's 2P zigzag chunks and the ring's schedule (stage 3 on) */
#include "../kernels/kernels.h" /* the CUDA kernels' launchers */

#endif
