# src/backend/cuda/backend.mk — the NVIDIA backend "cuda" (included by the Makefile; see
# docs/backends.md). Unlike cpu and cpu-ref it adds nothing to BACKEND_SRC: the default
# binaries (build/kipp, kipp-server, ...) need no CUDA runtime and run on any machine. Its
# own binaries link the ordinary objects plus this folder's:
#   make cuda-generic  build/kipp-cuda-generic  the kipp CLI with cuda beside cpu and cpu-ref;
#                      machine code for sm_80, sm_86, sm_89, sm_90 and compute_90 PTX (newer
#                      GPUs JIT it)
#   make server-cuda   build/kipp-server-cuda   kipp-server, same code
#   make cuda-spark    build/kipp-cuda-spark    DGX Spark (GB10, sm_121 machine code): the
#                      weights stay mmapped and are registered with the GPU (unified memory)
#   make test-cuda     build/kipp_test_cuda, then the cuda gates (tests/cuda/run_cuda_gates.sh:
#                      needs an NVIDIA GPU); `make test-cuda-build` only builds;
#                      `make test-cuda-model CHECKPOINT=name` the gates for one checkpoint
# CUDA_GENCODE overrides the generic arch list (e.g. CUDA_GENCODE=-arch=native on a GPU
# host). The CUDA runtime is linked statically: a binary needs only the driver's libcuda,
# and a machine without one gets the backend's "no NVIDIA driver found" error, not a loader
# failure. Everything here compiles with warnings as errors; `make test` builds all of it
# (tests/cuda/test_cuda_build.sh) without running a kernel.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_GENCODE_CI := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
ifneq ($(filter test test-build stage-%,$(MAKECMDGOALS)),)
CUDA_GENCODE ?= $(CUDA_GENCODE_CI)
endif
CUDA_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 \
                -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
CUDA_SPARK_GENCODE ?= -gencode arch=compute_121,code=sm_121
# make test (the CI tier) compiles one real architecture plus PTX (CUDA_GENCODE_CI, chosen
# above when test, test-build or a stage-NAME is a goal); make test-full and the release targets the whole list. The
# arch list in force is kept in a stamp file, so changing it rebuilds the cuda objects (a
# one-arch test build never stands in for the release binary).
CUDA_GENCODE_STAMP := $(BUILD)/cuda-generic/gencode.stamp
$(shell mkdir -p $(BUILD)/cuda-generic && { [ "$$(cat $(CUDA_GENCODE_STAMP) 2>/dev/null)" = \
    "$(strip $(CUDA_GENCODE))" ] || echo "$(strip $(CUDA_GENCODE))" >$(CUDA_GENCODE_STAMP); })
# -D flags of EXTRA_CFLAGS (KIPP_FAULT_INJECT) reach the device code too
NVCC_FLAGS := -std=c++17 -O3 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror \
              $(filter -D%,$(EXTRA_CFLAGS)) -Iinclude -Isrc
CUDA_CFLAGS := -I$(CUDA_HOME)/include -Werror
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++ -Wl,--fatal-warnings

# probe.c (the start-up decision, no CUDA headers) is in libkipp.a: the unit suite tests it
CUDA_C_SRC  := $(filter-out %/probe.c,$(wildcard src/backend/cuda/*.c))
CUDA_CU_SRC := $(wildcard src/backend/cuda/*.cu)
CUDA_TEST_SRC := $(wildcard tests/cuda/*.c)
# generic: the C files in the ordinary object tree, the .cu files in their own
CUDA_GENERIC_OBJ := $(CUDA_C_SRC:%.c=$(BUILD)/obj/%.o) $(CUDA_CU_SRC:%.cu=$(BUILD)/cuda-generic/%.o)
# spark: both trees of its own (-DKIPP_CUDA_SPARK changes the host side's weight placement)
CUDA_SPARK_OBJ := $(CUDA_C_SRC:%.c=$(BUILD)/cuda-spark/%.o) $(CUDA_CU_SRC:%.cu=$(BUILD)/cuda-spark/%.o)
CUDA_TEST_OBJ := $(CUDA_TEST_SRC:%.c=$(BUILD)/obj/%.o)

$(BUILD)/obj/src/backend/cuda/%.o: CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/obj/tests/cuda/%.o: CFLAGS += $(CUDA_CFLAGS) -Itests/unit
$(BUILD)/cuda-generic/%.o: %.cu $(CUDA_GENCODE_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) -MMD -MP -MF $(@:.o=.d) -c $(filter %.cu,$^) -o $@
$(BUILD)/cuda-spark/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -DKIPP_CUDA_SPARK $(CUDA_SPARK_GENCODE) -MMD -MP -MF $(@:.o=.d) -c $< -o $@
$(BUILD)/cuda-spark/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CUDA_CFLAGS) -DKIPP_CUDA_SPARK -MMD -MP -c $< -o $@

# the link rules name objects the Makefile defines after including this fragment
# (BACKEND_OBJ, TEST_OBJ, SERVER_OBJ): their prerequisites are expanded a second time, when
# make needs them, by which point every variable is set
.SECONDEXPANSION:

.PHONY: cuda-generic server-cuda cuda-spark test-cuda test-cuda-build test-cuda-model cuda-toolkit
# `make test` builds every cuda binary (BACKEND_TEST_TARGETS, read by the Makefile's test
# target) and runs tests/cuda/test_cuda_fatal.sh on them. Where nvcc is missing the cuda
# builds and stages are skipped with a loud notice (KIPP_NO_CUDA=1 skips them on purpose);
# KIPP_REQUIRE_CUDA=1 (.ci/run sets it) makes a missing toolkit an error instead, so CI can
# never skip them silently.
ifeq ($(wildcard $(NVCC)),)
ifeq ($(KIPP_REQUIRE_CUDA),1)
$(error nvcc not found at $(NVCC) and KIPP_REQUIRE_CUDA=1: install the CUDA toolkit (or set CUDA_HOME))
endif
ifneq ($(KIPP_NO_CUDA),1)
KIPP_NO_CUDA := 1
KIPP_CUDA_SKIP_NOTICE := nvcc not found at $(NVCC)
endif
endif
export KIPP_NO_CUDA
ifeq ($(KIPP_NO_CUDA),1)
BACKEND_TEST_TARGETS += cuda-skipped
else
BACKEND_TEST_TARGETS += cuda-toolkit $(BUILD)/kipp-cuda-generic $(BUILD)/kipp-server-cuda \
                        $(BUILD)/kipp-cuda-spark $(BUILD)/kipp_test_cuda $(BUILD)/kipp_test_cuda_shim \
                        $(if $(wildcard bench/cuda_membw.cu),$(BUILD)/kipp-cuda-membw)
endif
.PHONY: cuda-skipped
cuda-skipped:
	@echo "********************************************************************************" >&2
	@echo "* cuda: NOT BUILT AND NOT TESTED: $(or $(KIPP_CUDA_SKIP_NOTICE),KIPP_NO_CUDA=1)." >&2
	@echo "* Install the CUDA toolkit (or set CUDA_HOME) to build and test the cuda backend;" >&2
	@echo "* KIPP_REQUIRE_CUDA=1 turns this notice into an error (CI sets it)." >&2
	@echo "********************************************************************************" >&2
cuda-toolkit:
	@test -x $(NVCC) || { echo "make: nvcc not found at $(NVCC): install the CUDA toolkit (or set \
	CUDA_HOME), or run with KIPP_NO_CUDA=1 to skip building the cuda backend" >&2; exit 1; }
cuda-generic: $(BUILD)/kipp-cuda-generic
server-cuda: $(BUILD)/kipp-server-cuda
cuda-spark: $(BUILD)/kipp-cuda-spark
test-cuda-build: $(BUILD)/kipp_test_cuda $(BUILD)/kipp-cuda-generic $(BUILD)/kipp-server-cuda
test-cuda: deps cpu test-cuda-build tiny-models
	@BUILD=$(BUILD) tests/cuda/run_cuda_gates.sh
# test-cpu-model's GPU counterpart: the cuda gates for one CHECKPOINT (with golden vectors)
test-cuda-model: deps cpu test-cuda-build tiny-models
	@BUILD=$(BUILD) tests/cuda/run_cuda_gates.sh $(CHECKPOINT)

$(BUILD)/kipp-cuda-generic: $(KIPP_CLI_OBJ) $$(BACKEND_OBJ) $(CUDA_GENERIC_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LDLIBS)
$(BUILD)/kipp-server-cuda: $(SERVER_BIN_OBJ) $$(SERVER_OBJ) $$(BACKEND_OBJ) $(CUDA_GENERIC_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(SERVER_LDLIBS) $(CUDA_LDLIBS)
$(BUILD)/kipp-cuda-spark: $(KIPP_CLI_OBJ) $$(BACKEND_OBJ) $(CUDA_SPARK_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LDLIBS)
# the test binary: kipp_test's sources + the cuda backend + the GPU operator tests
# (--cuda-operators, tests/cuda/)
$(BUILD)/kipp_test_cuda: $$(TEST_OBJ) $(CUDA_TEST_OBJ) $(BUILD)/obj/src/server/openai_gen.o $$(BACKEND_OBJ) \
                         $(CUDA_GENERIC_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LDLIBS)
# the cuda backend's host side (cuda.c, forward.c) over a host-memory stand-in for the CUDA
# runtime and the kernels (tests/cuda/shim/): its model gates run on any machine, in make test
$(BUILD)/obj/tests/cuda/shim/%.o: CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/kipp_test_cuda_shim: $$(TEST_OBJ) $(BUILD)/obj/tests/cuda/shim/host_shim.o \
                              $(BUILD)/obj/src/server/openai_gen.o $$(BACKEND_OBJ) \
                              $(CUDA_C_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# the copy-bandwidth probe (tools/bench.py --backend cuda)
$(BUILD)/kipp-cuda-membw: bench/cuda_membw.cu $(CUDA_GENCODE_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) $< -o $@ -cudart static

# (their .d files are included by the Makefile's one dependency-include rule)

# the KV fault-injection build of kipp_test_cuda (the fault matrix's cuda column), in its own
# object tree as build/kipp_test_fault is
ifeq ($(BUILD),build)
build/kipp_test_cuda_fault: FORCE
	$(MAKE) --no-print-directory BUILD=build/fault EXTRA_CFLAGS=-DKIPP_FAULT_INJECT build/fault/kipp_test_cuda
	cp build/fault/kipp_test_cuda $@.tmp && mv -f $@.tmp $@
endif
