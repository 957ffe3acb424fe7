# longctx.c -- build the trainers, the tests and the stage diffs.
#   make stage1            ./stage1 (likewise stage2..stage5 as they appear)
#   make test              CPU tests (what CI runs)
#   make test-gpu          GPU tests (on an H100/H200; with no usable GPU it stops at once, saying why)
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
HOST_SRC := common/tensor.c common/files.c common/json.c common/config.c common/safetensors.c common/tokens.c common/cli.c common/model.c common/shard.c common/zigzag.c common/docs.c common/layout.c \
            common/memplan.c common/sha256.c common/rendezvous.c common/cpu_adam.c common/ckpt.c common/numa.c common/inputs.c
GPU_SRC  := common/gpu.c common/gemm.c common/sdpa.c common/attn.c common/run.c common/comm.c common/state.c common/train.c common/ranks.c common/moe.c common/deltanet.c common/advice.c
KERN_SRC := $(wildcard kernels/*.cu)
HOST_OBJ := $(HOST_SRC:%.c=$(B)/%.o)
GPU_OBJ  := $(GPU_SRC:%.c=$(B)/%.o) $(KERN_SRC:%.cu=$(B)/%.o)
STAGES   := $(patsubst %.c,%,$(wildcard stage[1-5]_*.c))
STAGE_BINS := $(foreach s,$(STAGES),$(firstword $(subst _, ,$(s))))

$(info longctx.c: CUDA_HOME=$(CUDA_HOME) CUDNN_HOME=$(CUDNN_HOME) NCCL_HOME=$(NCCL_HOME) GPU_ARCH=$(GPU_ARCH))

.PHONY: all test test-gpu test-gdn-emu diffs clean $(STAGE_BINS)
all: $(STAGE_BINS) $(B)/zigzag_grid $(B)/layout_grid $(B)/test_cpu $(B)/test_rendezvous $(B)/test_ranks $(B)/test_advice $(B)/test_run $(B)/test_gpu $(B)/test_comm $(B)/alloc_order_gpu $(B)/check_stage $(B)/ring_blocks $(B)/docs_attn $(B)/offload $(B)/sdpa_rate $(B)/gdn_rate $(B)/gpu_probe $(B)/test_gdn_chunked $(B)/test_gdn_chunked_emu

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

$(B)/test_cpu: $(B)/tests/test_cpu.o $(B)/tests/golden.o $(B)/tests/ref_model.o $(B)/tests/ref_ring.o $(B)/tests/ref_layout.o $(B)/tests/ref_gdn.o $(B)/tests/sim_gdn.o $(B)/tests/ref_qwen35.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ -lm -lpthread
# the TCP rendezvous between processes on loopback, and a node's place from Slurm's variables
$(B)/test_rendezvous: $(B)/tests/test_rendezvous.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ -lm -lpthread
# host logic of the several-GPU path that needs the GPU objects to link, not a GPU to run
$(B)/test_ranks: $(B)/tests/test_ranks.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/test_advice: $(B)/tests/test_advice.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
# stopping on SIGTERM/SIGUSR1: exit statuses and messages, each case in a child process
$(B)/test_run: $(B)/tests/test_run.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/test_gpu: $(B)/tests/test_gpu.o $(B)/tests/ref_model.o $(B)/tests/ref_gdn.o $(B)/tests/ref_qwen35.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++

# CPU tests: the C suites, check_stage on planted bugs, data, CLI and refusals; tests/run_cpu.sh prints the combined count
test: all
	@bash tests/run_cpu.sh

# asks build/gpu_probe first, before building the rest: with no usable GPU every case would fail
NO_GPU_HINT := -- it runs on an H100/H200; `make test` is the CPU suite
test-gpu: $(B)/gpu_probe
	@why=$$($(B)/gpu_probe) || { echo "make test-gpu: no usable GPU: $${why:-$(B)/gpu_probe did not run}" '$(NO_GPU_HINT)' >&2; exit 1; }
	@$(MAKE) --no-print-directory all
	@bash tests/run_gpu.sh

# whether the CUDA runtime finds a GPU of GPU_ARCH or newer (one line, exit 0/1); needs only cudart
$(B)/gpu_probe: tests/gpu_probe.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -DGPU_ARCH='"$(GPU_ARCH)"' -o $@ $< \
	    -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart

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

# (not under build/venv, the Python environment .ci/run makes)
-include $(shell find $(B) -path $(B)/venv -prune -o -name '*.d' -print 2>/dev/null)

$(B)/test_comm: $(B)/tests/test_comm.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
# a kernel in flight in one thread while another allocates, with and without allocation phases (GPU)
$(B)/alloc_order_gpu: $(B)/tests/alloc_order_gpu.o $(B)/tests/alloc_order_spin.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/tests/%.o: tests/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(GPU_INC) -c -o $@ $<

$(B)/ring_blocks: $(B)/bench/ring_blocks.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/docs_attn: $(B)/bench/docs_attn.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/offload: $(B)/bench/offload.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/zigzag_grid: $(B)/bench/zigzag_grid.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ -lm -lpthread
$(B)/layout_grid: $(B)/bench/layout_grid.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ -lm -lpthread
$(B)/sdpa_rate: $(B)/bench/sdpa_rate.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -ldl -lstdc++
$(B)/gdn_rate: $(B)/bench/gdn_rate.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
$(B)/bench/%.o: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_INC) -c -o $@ $<

$(B)/check_stage: $(B)/tests/check_stage.o $(B)/tests/golden.o $(B)/tests/ref_model.o $(B)/tests/ref_gdn.o $(B)/tests/ref_qwen35.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ -lm -lpthread

# the chunked gated delta rule (kernels/gdn_chunked.cu) against the fp64 references: on a GPU
# (tests/gdn_chunked_gpu.sh; `GDN_CHUNKED=1 make test-gpu` adds it), and compiled for the CPU emulation
# of tests/gdn_emu.h (make test-gdn-emu, and in make test: no GPU, about a minute on 2 cores)
$(B)/test_gdn_chunked: $(B)/tests/test_gdn_chunked.o $(B)/tests/ref_gdn.o $(HOST_OBJ) $(GPU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(GPU_LIBS) -lstdc++
CXX ?= g++
EMU_FLAGS := -std=c++17 -O2 -g -DGDN_EMU -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -I$(CUDA_HOME)/include
$(B)/emu/gdn_chunked.o: kernels/gdn_chunked.cu tests/gdn_emu.h kernels/kernels.h
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -x c++ -c -o $@ $<
$(B)/emu/gdn_emu_rt.o: tests/gdn_emu_rt.cc
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -c -o $@ $<
$(B)/emu/test_gdn_chunked.o: tests/test_gdn_chunked.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DGDN_EMU -I$(CUDA_HOME)/include -c -o $@ $<
$(B)/test_gdn_chunked_emu: $(B)/emu/test_gdn_chunked.o $(B)/emu/gdn_chunked.o $(B)/emu/gdn_emu_rt.o $(B)/tests/ref_gdn.o $(HOST_OBJ)
	$(CXX) -o $@ $^ -lm -lpthread
test-gdn-emu: $(B)/test_gdn_chunked_emu
	./$(B)/test_gdn_chunked_emu

# ---------------------------------------------------------------- fuzzing (tests/fuzz/README.md)
# libFuzzer harnesses of the input readers, built with clang + ASan/UBSan from the host sources
# directly (their own objects under build/fuzz/, never the gcc-built ones):
#   make fuzz-build    build/fuzz/fuzz_NAME for each NAME of FUZZ_NAMES
#   make fuzz          each for FUZZ_SECONDS (60); new inputs go to build/fuzz/corpus/NAME, crashes to
#                      build/fuzz/crashes/; tests/fuzz/corpus/NAME is read, never written
#   make fuzz-replay   each once over its committed corpus; fails on any crash
#   make fuzz-merge    add to tests/fuzz/corpus/NAME the inputs of build/fuzz/corpus/NAME that reach
#                      new coverage (libFuzzer -merge=1): the committed corpus changes only here
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_NAMES   := json config safetensors tokens cli ckpt rendezvous
FUZZ_CFLAGS  := -std=c11 -D_DEFAULT_SOURCE -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=undefined -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -MMD -MP
FUZZ_HOST    := tensor files json config safetensors tokens cli ckpt model inputs sha256 rendezvous
FUZZ_LIB     := $(B)/fuzz/libhost.a
FUZZ_BINS    := $(FUZZ_NAMES:%=$(B)/fuzz/fuzz_%)
# stderr closed while fuzzing (rdv_tcp_serve logs every refusal); libFuzzer's and the sanitizers'
# reports still print (libFuzzer keeps its own copy of stderr for them)
FUZZ_RUN     := -timeout=5 -rss_limit_mb=2048 -close_fd_mask=2
.PHONY: fuzz fuzz-build fuzz-replay fuzz-merge

fuzz-build: $(FUZZ_BINS)
# the host sources with coverage instrumentation for libFuzzer (-fsanitize=fuzzer-no-link: no main)
$(B)/fuzz/obj/%.o: common/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(subst fuzzer,fuzzer-no-link,$(FUZZ_CFLAGS)) -c -o $@ $<
$(FUZZ_LIB): $(FUZZ_HOST:%=$(B)/fuzz/obj/%.o)
	rm -f $@ && ar rcs $@ $^
$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Icommon -o $@ $< $(FUZZ_LIB) -lm -lpthread

fuzz: fuzz-build
	@mkdir -p $(B)/fuzz/crashes; bad=; for n in $(FUZZ_NAMES); do \
	  mkdir -p $(B)/fuzz/corpus/$$n; echo "== fuzz_$$n for $(FUZZ_SECONDS) s"; \
	  $(B)/fuzz/fuzz_$$n -max_total_time=$(FUZZ_SECONDS) $(FUZZ_RUN) -print_final_stats=1 \
	    -artifact_prefix=$(B)/fuzz/crashes/$$n- $$(test -f tests/fuzz/$$n.dict && echo -dict=tests/fuzz/$$n.dict) \
	    $(B)/fuzz/corpus/$$n tests/fuzz/corpus/$$n > $(B)/fuzz/fuzz-$$n.log 2>&1 || bad="$$bad $$n"; \
	  grep -vE '^#[0-9]+.*(NEW|REDUCE|pulse) |^"|^######|^INFO' $(B)/fuzz/fuzz-$$n.log | tail -25; done; \
	if [ -n "$$bad" ]; then echo "fuzz: failed:$$bad (reproducers in $(B)/fuzz/crashes/, logs $(B)/fuzz/fuzz-NAME.log)"; exit 1; fi

fuzz-replay: fuzz-build
	@bad=; for n in $(FUZZ_NAMES); do \
	  if $(B)/fuzz/fuzz_$$n -runs=0 $(FUZZ_RUN) tests/fuzz/corpus/$$n > $(B)/fuzz/replay-$$n.log 2>&1; then \
	    echo "ok   fuzz_$$n replays its $$(ls tests/fuzz/corpus/$$n | wc -l) inputs"; \
	  else echo "FAIL fuzz_$$n on its corpus:"; tail -40 $(B)/fuzz/replay-$$n.log; bad="$$bad $$n"; fi; done; \
	[ -z "$$bad" ]

fuzz-merge: fuzz-build
	@for n in $(FUZZ_NAMES); do \
	  $(B)/fuzz/fuzz_$$n -merge=1 -max_len=65536 $(FUZZ_RUN) tests/fuzz/corpus/$$n $(B)/fuzz/corpus/$$n 2>&1 | tail -1; done
