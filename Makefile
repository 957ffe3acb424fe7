# longctx.c -- build the trainers, the tests and the stage diffs.
#   make stage1            ./stage1 (likewise stage2..stage5 as they appear)
#   make test              CPU tests (what CI runs)
#   make test-gpu          GPU tests (on an H100/H200)
#   make diffs             diffs/stageN-1-stageN.diff from the stage files
# Overridable: CUDA_HOME CUDNN_HOME NCCL_HOME GPU_ARCH (sm_90) CC NVCC

CUDA_HOME ?= /usr/local/cuda
GPU_ARCH  ?= sm_90
# cuDNN 9.19 / NCCL 2.28.9: prefer the PyTorch venv's wheels (the GPU image's system copies are older)
VENV_NV   := /opt/torch/.venv/lib/python3.12/site-packages/nvidia
CUDNN_HOME ?= $(if $(wildcard $(VENV_NV)/cudnn/include/cudnn.h),$(VENV_NV)/cudnn,$(CUDA_HOME))
NCCL_HOME  ?= $(if $(wildcard $(VENV_NV)/nccl/include/nccl.h),$(VENV_NV)/nccl,$(CUDA_HOME))

CC    ?= gcc
NVCC  ?= $(CUDA_HOME)/bin/nvcc
libdir = $(firstword $(wildcard $(1)/lib64/libcudart.so $(1)/lib/$(2)) $(1)/lib)
CUDNN_LIBDIR := $(if $(wildcard $(CUDNN_HOME)/lib/libcudnn.so*),$(CUDNN_HOME)/lib,$(CUDNN_HOME)/lib64)
NCCL_LIBDIR  := $(if $(wildcard $(NCCL_HOME)/lib/libnccl.so*),$(NCCL_HOME)/lib,$(NCCL_HOME)/lib64)
# pip wheels ship only the versioned .so
LCUDNN := $(if $(wildcard $(CUDNN_LIBDIR)/libcudnn.so),-lcudnn,-l:libcudnn.so.9)
LNCCL  := $(if $(wildcard $(NCCL_LIBDIR)/libnccl.so),-lnccl,-l:libnccl.so.2)

CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -MMD -MP
GPU_INC := -I$(CUDA_HOME)/include -I$(CUDNN_HOME)/include -I$(NCCL_HOME)/include
NVFLAGS ?= -O3 -lineinfo
NVFLAGS += -arch=$(GPU_ARCH) -std=c++17 -MMD -MP -Xcompiler -Wall
GPU_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
            -L$(CUDNN_LIBDIR) -Wl,-rpath,$(CUDNN_LIBDIR) -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) \
            -lcublasLt -lcublas $(LCUDNN) $(LNCCL) -lcudart -lpthread -lm

B := build
HOST_SRC := common/tensor.c common/files.c common/json.c common/config.c common/safetensors.c common/tokens.c common/cli.c common/model.c common/shard.c common/zigzag.c \
            common/memplan.c common/rendezvous.c common/cpu_adam.c common/ckpt.c common/numa.c common/inputs.c
GPU_SRC  := common/gpu.c common/gemm.c common/sdpa.c common/comm.c common/state.c common/train.c common/ranks.c common/moe.c common/advice.c
KERN_SRC := $(wildcard kernels/*.cu)
HOST_OBJ := $(HOST_SRC:%.c=$(B)/%.o)
GPU_OBJ  := $(GPU_SRC:%.c=$(B)/%.o) $(KERN_SRC:%.cu=$(B)/%.o)
STAGES   := $(patsubst %.c,%,$(wildcard stage[1-5]_*.c))
STAGE_BINS := $(foreach s,$(STAGES),$(firstword $(subst _, ,$(s))))

$(info longctx.c: CUDA_HOME=$(CUDA_HOME) CUDNN_HOME=$(CUDNN_HOME) NCCL_HOME=$(NCCL_HOME) GPU_ARCH=$(GPU_ARCH))

.PHONY: all test test-gpu diffs clean $(STAGE_BINS)
all: $(STAGE_BINS) $(B)/test_cpu $(B)/test_rendezvous $(B)/test_ranks $(B)/test_advice $(B)/test_gpu $(B)/test_comm $(B)/check_stage $(B)/ring_blocks $(B)/offload $(B)/sdpa_rate

# ./stageN from stageN_*.c
define stage_rule
$(1): $(B)/$(1)
	cp $(B)/$(1) ./$(1)
$(B)/$(1): $(2).c $(HOST_OBJ) $(GPU_OBJ)
	$$(CC) $$(CFLAGS) $(GPU_INC) -o $$@ $$< $(HOST_OBJ) $(GPU_OBJ) $$(GPU_LIBS) -lstdc++
endef
$(foreach s,$(STAGES),$(eval $(call stage_rule,$(firstword $(subst _, ,$(s))),$(s))))

# the host optimizer's loops: vectorised (sqrtf without errno); IEEE results unchanged
$(B)/common/cpu_adam.o: CFLAGS += -O3 -fno-math-errno
$(B)/common/%.o: common/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_INC) -c -o $@ $<
$(B)/kernels/%.o: kernels/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(GPU_INC) -c -o $@ $<
$(B)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_INC) -c -o $@ $<

$(B)/test_cpu: $(B)/tests/test_cpu.o $(B)/tests/golden.o $(B)/tests/ref_model.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ -lm -lpthread
# the TCP rendezvous between processes on loopback, and a node's place from Slurm's variables
$(B)/test_rendezvous: $(B)/tests/test_rendezvous.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ -lm -lpthread
# host logic of the several-GPU path that needs the GPU objects to link, not a GPU to run
$(B)/test_ranks: $(B)/tests/test_ranks.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/test_advice: $(B)/tests/test_advice.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/test_gpu: $(B)/tests/test_gpu.o $(B)/tests/ref_model.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++

# CPU tests: the C suites, check_stage on planted bugs, data, CLI and refusals; tests/run_cpu.sh prints the combined count
test: all
	@bash tests/run_cpu.sh

test-gpu: all
	@bash tests/run_gpu.sh

# diffs/stageA-stageB.diff for each consecutive pair of stage files (never edited by hand)
diffs:
	@mkdir -p diffs
	@set -e; prev=; for s in $(sort $(wildcard stage[1-5]_*.c)); do \
	  n=$$(echo $$s | cut -c6); \
	  if [ -n "$$prev" ]; then p=$$(echo $$prev | cut -c6); \
	    diff -u --label $$prev --label $$s $$prev $$s > diffs/stage$$p-stage$$n.diff || true; echo "diffs/stage$$p-stage$$n.diff"; fi; \
	  prev=$$s; done

clean:
	rm -rf $(B) $(STAGE_BINS)

-include $(shell find $(B) -name '*.d' 2>/dev/null)

$(B)/test_comm: $(B)/tests/test_comm.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++

$(B)/ring_blocks: $(B)/bench/ring_blocks.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/offload: $(B)/bench/offload.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/sdpa_rate: $(B)/bench/sdpa_rate.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -ldl -lstdc++
$(B)/bench/%.o: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_INC) -c -o $@ $<

$(B)/check_stage: $(B)/tests/check_stage.o $(B)/tests/golden.o $(B)/tests/ref_model.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ -lm -lpthread
