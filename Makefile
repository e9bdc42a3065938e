# Kipp — GNU make build. `make help` lists the targets.
# The C build needs a C11 compiler, pthreads, libm, utf8proc (Unicode categories and NFC
# for the tokenizer) and jansson (JSON for the chat template's tools and the tests). `make deps` installs what is missing (Debian packages + the Python venv).

BUILD    ?= build
CC       ?= cc
KIPP_ARCH ?= $(shell uname -m)
PYTHON   ?= .venv/bin/python
CHECKPOINT ?= qwen3-4b-base
TINY     := tiny-tied tiny-untied tiny-qwen2 tiny-moe tiny-moe-k1 tiny-moe-k4 tiny-moe-64 tiny-moe-tie

WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter
CSTD     := -std=c11 -D_POSIX_C_SOURCE=200809L
OPT      ?= -O2 -g
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
ifeq ($(SAN),1)
OPT      := -O1 -g $(SAN_FLAGS)
endif
# ThreadSanitizer (make test-tsan, BUILD=build/tsan): data races in the thread pool, the
# scheduler and the server; cannot be combined with SAN=1 (ASan and TSan exclude each other)
ifeq ($(TSAN),1)
OPT      := -O1 -g -fsanitize=thread -fno-omit-frame-pointer
endif
CFLAGS   += $(CSTD) $(WARN) $(OPT) $(EXTRA_CFLAGS) -Iinclude -Isrc -pthread
LDLIBS   += -lutf8proc -ljansson -lm -pthread

CORE_SRC := $(wildcard src/core/*.c)
LIB_SRC := $(wildcard src/core/*.c src/gguf/*.c src/model/*.c src/tok/*.c src/engine/*.c src/kv/*.c) \
           src/backend/registry.c src/backend/host_kv.c src/backend/moe.c src/backend/program.c \
           src/backend/cuda/probe.c
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
# Each backend's build rules live in its own fragment, src/backend/NAME/backend.mk, which
# adds its sources to BACKEND_SRC (and may add targets and per-file flags). Backend objects
# go on every binary's link line, not into libkipp.a: the registry finds them through weak
# references (src/backend/registry.c), which do not pull archive members in.
BACKEND_SRC :=
BACKEND_TEST_TARGETS :=
# The link lists, once: each binary's own objects (the backend fragments link the same
# lists into their binaries). Every binary also links $(BACKEND_OBJ) and libkipp.a.
CLI_COMMON_OBJ := $(addprefix $(BUILD)/obj/src/cli/,cli_args.o cli_rope.o cli_spec.o)
KIPP_CLI_OBJ   := $(BUILD)/obj/src/cli/kipp.o $(CLI_COMMON_OBJ) \
                  $(addprefix $(BUILD)/obj/src/cli/,cli_grammar.o generate.o)
SERVER_BIN_OBJ := $(BUILD)/obj/src/cli/kipp_server.o $(CLI_COMMON_OBJ)
CHAT_OBJ       := $(addprefix $(BUILD)/obj/src/cli/,kipp_chat.o chat_input.o chat_file.o) \
                  $(CLI_COMMON_OBJ) $(BUILD)/obj/src/cli/generate.o
PPL_OBJ        := $(BUILD)/obj/src/cli/kipp_perplexity.o $(BUILD)/obj/src/cli/cli_args.o $(BUILD)/obj/src/cli/cli_rope.o
include $(sort $(wildcard src/backend/*/backend.mk))
BACKEND_OBJ := $(BACKEND_SRC:%.c=$(BUILD)/obj/%.o) $(VK_EXTRA_OBJ)
TEST_SRC := tests/kipp_test.c $(wildcard tests/unit/*.c tests/model/*.c) $(VK_TEST_SRC)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)

.PHONY: FORCE embed-vectors rerank-vectors all cpu server chat test-server test-chat test-draft-spec neon-check random-model help deps venv test check test-sanitize test-cpu-model docs docs-check bench-plots demo vectors \
        test-build check-build test-full \
        fuzz clean tiny-models trained-models

all: cpu

help:
	@echo "make cpu            build build/kipp (CLI: cpu-ref and cpu backends), build/kipp-perplexity,"
	@echo "                    build/kipp-quantize and build/kipp_test"
	@echo "make trained-models unpack weights/ (kipp-tiny, kipp-tiny-draft; sha256-checked), quantize them"
	@echo "make server         build build/kipp-server (OpenAI-compatible HTTP server, CPU)"
	@echo "make chat           build build/kipp-chat (interactive multi-turn chat)"
	@echo "make cuda-generic   build build/kipp-cuda-generic (kipp with the cuda backend; sm_80..sm_90 + PTX)"
	@echo "make server-cuda    build build/kipp-server-cuda"
	@echo "make cuda-spark     build build/kipp-cuda-spark (DGX Spark, sm_121, weights mmapped)"
	@echo "make metal / server-metal / test-metal   Apple Metal (macOS only; not written yet:"
	@echo "                    on other hosts each says so and fails)"
	@echo "make test-cuda      the cuda backend's gates (needs an NVIDIA GPU; docs/cuda.md)"
	@echo "make test-vulkan    the vulkan backend's gates on the first Vulkan device (lavapipe here; docs/vulkan.md)"
	@echo "make test-cuda-model CHECKPOINT=name  the cuda gates for one checkpoint (GPU)"
	@echo "make test-server    server gate: curl + the openai package against a tiny checkpoint"
	@echo "make test-chat      chat CLI gate (piped stdin, line editing through a pty)"
	@echo "make test-draft-spec speculative decoding gates (greedy identity, sampling statistics)"
	@echo "make demo           build, unpack the shipped kipp-tiny model, answer a question with it"
	@echo "make check          check tier for the edit loop (minutes): unit suites, fuzz-corpus replay,"
	@echo "                    tiny bf16 model gates (cpu-ref and cpu), kipp-server smoke test"
	@echo "make test           the CI tier (under 25 min on 2 cores): every stage of tests/stages.txt"
	@echo "                    in the test tier, several at once (docs/testing.md)"
	@echo "make test-full      everything: the full tier, all CUDA architectures, test-sanitize, test-tsan"
	@echo "make stage-NAME     one stage (tests/run_tests.sh --list --tier full names them)"
	@echo "make test-sanitize  the test tier under ASan + UBSan"
	@echo "make test-tsan      ThreadSanitizer over the unit suites, scheduler gates and server tests"
	@echo "make test-cpu-model CHECKPOINT=name   CPU model gates for one checkpoint"
	@echo "make docs / docs-check   regenerate / verify docs/html (also fails on a broken local link)"
	@echo "make bench-plots    regenerate BENCHMARKS.md's summary and bench/plots/ from bench/results/"
	@echo "make vectors CHECKPOINT=name          regenerate golden vectors (needs torch)"
	@echo "make random-model SHAPE=4b TYPE=q4_k_m   random-weight GGUF of a real Qwen3 shape"
	@echo "make neon-check     cross-compile the arm64 NEON kernels (also in make test)"
	@echo "make arm64          build/arm64/kipp_test for aarch64 (qemu-aarch64 runs it; stage arm64)"
	@echo "make fuzz           run the GGUF fuzzer for FUZZ_SECONDS (default 60)"

cpu: $(BUILD)/kipp $(BUILD)/kipp-perplexity $(BUILD)/kipp-quantize $(BUILD)/kipp_test

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/tests/%.o: CFLAGS += -Itests/unit -Itests/model

$(BUILD)/libkipp.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kipp: $(KIPP_CLI_OBJ) $(BACKEND_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The server: HTTP (libmicrohttpd) and OpenAI mapping live outside the core library.
SERVER_SRC := $(wildcard src/server/*.c)
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/obj/%.o)
# HTTP (libmicrohttpd); KV-cache events (src/server/kv_events.c): ZeroMQ, msgpack-c, libcbor,
# OpenSSL's libcrypto (sha256)
SERVER_LDLIBS := -lmicrohttpd -lzmq -lmsgpackc -lcbor -lcrypto
# the chat page is pulled into webui.o by .incbin (src/server/webui.c): editing it rebuilds
$(BUILD)/obj/src/server/webui.o: src/server/webui/index.html
server: $(BUILD)/kipp-server
$(BUILD)/kipp-server: $(SERVER_BIN_OBJ) $(SERVER_OBJ) $(BACKEND_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(SERVER_LDLIBS)

# the C quantizer (tools/quantize.py is the reference it is tested against); quantize.c
# mirrors numpy float32 operation by operation, so no FMA contraction there
$(BUILD)/obj/src/core/quantize.o: CFLAGS += -O3 -ffp-contract=off -fno-trapping-math -fno-math-errno
QUANTIZE_OBJ := $(BUILD)/obj/src/cli/kipp_quantize.o $(CORE_SRC:%.c=$(BUILD)/obj/%.o) \
                $(BUILD)/obj/src/gguf/gguf.o
$(BUILD)/kipp-quantize: $(QUANTIZE_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# perplexity / KL-divergence over a text (bench/ppl_bench.py drives it)
$(BUILD)/kipp-perplexity: $(PPL_OBJ) $(BACKEND_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

chat: $(BUILD)/kipp-chat
# libedit (line editing, history) is linked into kipp-chat only
$(BUILD)/kipp-chat: $(CHAT_OBJ) $(BACKEND_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) -ledit

# the OpenAI text path (not HTTP) is linked in: the detokenizer property test drives it
$(BUILD)/kipp_test: $(TEST_OBJ) $(BUILD)/obj/src/server/openai_gen.o $(BACKEND_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/kipp-tokbench: $(BUILD)/obj/bench/tok_bench.o $(BACKEND_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/kipp-kvbench: $(BUILD)/obj/bench/kv_bench.o $(BACKEND_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/kipp-kernbench: $(BUILD)/obj/bench/kernel_bench.o $(BACKEND_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/kipp-grammarbench: $(BUILD)/obj/bench/grammar_bench.o $(BACKEND_OBJ) $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# bench/sampler_bench.py builds the same source against a baseline commit's library itself
$(BUILD)/kipp-samplerbench: $(BUILD)/obj/bench/sampler_bench.o $(BUILD)/libkipp.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# memory read bandwidth (tools/bench.py records it next to decode's effective GB/s); a
# probe built for and run on this machine, so it may use every vector unit it has
$(BUILD)/obj/bench/membw.o: CFLAGS += -march=native
$(BUILD)/kipp-membw: $(BUILD)/obj/bench/membw.o
	$(CC) $(CFLAGS) -o $@ $^ -pthread

# The KV fault-injection test binary: the same sources built with KIPP_FAULT_INJECT in a
# separate object tree. Production targets never define it (tests check the binaries).
ifeq ($(BUILD),build)
build/kipp_test_fault: FORCE
	$(MAKE) --no-print-directory BUILD=build/fault EXTRA_CFLAGS=-DKIPP_FAULT_INJECT \
	    VK_SPV_DIR=build/vulkan/spv build/fault/kipp_test
	cp build/fault/kipp_test $@.tmp && mv -f $@.tmp $@
endif
FORCE:

# libFuzzer targets (clang, ASan + UBSan), replayed and run briefly by make test. Each
# fuzzer's sources are listed once here; every one links all of src/core (the shared
# plumbing: buffers, errors, types), so a core helper never needs a list edited.
FUZZ_SRC_gguf    := src/gguf/gguf.c
FUZZ_SRC_chat    := src/tok/chat.c src/tok/pyjson.c src/tok/reasoning.c src/gguf/gguf.c
FUZZ_SRC_tok     := $(wildcard src/tok/*.c) src/gguf/gguf.c
FUZZ_SRC_oai     := src/server/openai_req.c src/server/openai_chat.c src/server/tool_grammar.c src/engine/json_schema.c \
                    src/engine/json_schema_regex.c src/engine/sampler.c
FUZZ_SRC_grammar := src/engine/grammar.c src/engine/grammar_cost.c src/engine/matcher.c src/engine/json_schema.c \
                    src/engine/json_schema_regex.c
FUZZ_SRC_embed   := src/server/embeddings_req.c src/model/model.c src/model/arch.c src/model/rope.c $(wildcard src/tok/*.c) src/gguf/gguf.c
# the protocol adapters (src/server/api.h), one target over the three: each with the OpenAI
# parser it feeds and what its replies are made with
FUZZ_SRC_api     := src/server/anthropic.c src/server/responses.c src/server/responses_req.c \
                    src/server/ollama.c $(FUZZ_SRC_oai) src/server/openai_gen.c $(FUZZ_SRC_embed)
FUZZ_SRC_rerank  := src/server/rerank.c src/model/model.c src/model/arch.c src/model/rope.c $(wildcard src/tok/*.c) src/gguf/gguf.c
FUZZ_NAMES := gguf chat tok oai grammar embed api rerank
FUZZERS := $(FUZZ_NAMES:%=$(BUILD)/fuzz_%)
FUZZ_FLAGS := $(CSTD) -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc
.SECONDEXPANSION:
$(FUZZERS): $(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $$(FUZZ_SRC_$$*) $(CORE_SRC)
	@mkdir -p $(BUILD)
	clang $(FUZZ_FLAGS) $(filter %.c,$^) -o $@ $(LDLIBS)

fuzz: $(BUILD)/fuzz_gguf
	@mkdir -p $(BUILD)/fuzz-corpus
	$(BUILD)/fuzz_gguf -max_total_time=$${FUZZ_SECONDS:-60} $(BUILD)/fuzz-corpus tests/fuzz/corpus/gguf

# Every object's dependency file, whatever binary it belongs to (compiled with -MMD -MP):
# one rule, so no object is left out of header tracking.
-include $(shell find $(BUILD)/obj $(BUILD)/cuda-generic $(BUILD)/cuda-spark -name '*.d' 2>/dev/null)

# ---- set-up ---------------------------------------------------------------------------

deps:
	@scripts/setup.sh

venv: deps

# ---- checkpoints, demo, vectors ---------------------------------------------------------

models/%/config.json: tools/make_tiny_checkpoint.py
	$(PYTHON) -m tools.make_tiny_checkpoint --name $*

define tiny_gguf_rule
models/$(1)/kipp-$(1)-$(2).gguf: models/$(1)/config.json tools/convert_to_gguf.py
	$$(PYTHON) -m tools.convert_to_gguf models/$(1) --outtype $(2)
endef
$(foreach t,$(TINY),$(foreach q,bf16 f32 f16 q8_0,$(eval $(call tiny_gguf_rule,$(t),$(q)))))
# Q4_0 from the bf16 file (K-quants would fall back to Q8_0: the tiny rows are 64 and 96 long,
# not multiples of 256; the random-tiny shape carries Q4_K and Q6_K)
define tiny_quant_rule
models/$(1)/kipp-$(1)-$(2).gguf: models/$(1)/kipp-$(1)-bf16.gguf tools/quantize.py tools/kipp_quants.py
	$$(PYTHON) -m tools.quantize $$< $$@ --type $(2) --no-progress
endef
$(foreach t,$(TINY),$(eval $(call tiny_quant_rule,$(t),q4_0)))
# every weight type the cpu backend runs, per tiny checkpoint (the model gates use them all)
TINY_TYPES := bf16 f32 f16 q8_0 q4_0
# the 32-element types beyond those, on tiny-tied only (one model per type keeps make test short)
TINY_TIED_TYPES := q4_1 q5_0 q5_1 iq4_nl
$(foreach q,$(TINY_TIED_TYPES),$(eval $(call tiny_quant_rule,tiny-tied,$(q))))

# Kipp's trained models (tools/train_tiny.py): the bf16 file ships xz-compressed in weights/
# and is unpacked and sha256-checked (weights/MANIFEST.json); the quantized files are made
# from it by tools/quantize.py. Every row length is a multiple of 256, so Q4_K and Q6_K apply.
TRAINED       := kipp-tiny kipp-tiny-draft
TRAINED_TYPES := bf16 q8_0 q6_k q4_k_m q4_0
define trained_rule
models/$(1)/$(1)-bf16.gguf: weights/$(1)-bf16.gguf.xz scripts/unpack_weights.sh
	scripts/unpack_weights.sh $(1)
$(foreach q,q8_0 q6_k q4_k_m q4_0,
models/$(1)/$(1)-$(q).gguf: models/$(1)/$(1)-bf16.gguf tools/quantize.py tools/kipp_quants.py
	$$(PYTHON) -m tools.quantize $$< $$@ --type $(q) --no-progress
)
endef
$(foreach t,$(TRAINED),$(eval $(call trained_rule,$(t))))
# kipp-tiny's golden logits are committed xz-compressed (the tokens outside its kept
# vocabulary share one logit, so a 1.2 MB row compresses to a few kB); unpacked here
XZ_VECTORS := $(patsubst %.xz,%,$(wildcard tests/test-vectors/*/*.f32.xz))
$(XZ_VECTORS): %: %.xz
	xz -dc $< >$@.tmp && mv -f $@.tmp $@
trained-models: deps $(XZ_VECTORS) $(foreach t,$(TRAINED),$(foreach q,$(TRAINED_TYPES),models/$(t)/$(t)-$(q).gguf))

# ---- random-weight models of the real Qwen3 shapes (benchmarks, test-cpu-model) ----------
define random_float_rule
models/random/qwen3-%-$(1).gguf: tools/make_random_model.py tools/kipp_quants.py
	@mkdir -p models/random
	$$(PYTHON) -m tools.make_random_model --shape $$* --type $(1) --output $$@
endef
$(foreach q,bf16 f16 f32,$(eval $(call random_float_rule,$(q))))
define random_quant_rule
models/random/qwen3-%-$(1).gguf: models/random/qwen3-%-bf16.gguf tools/quantize.py tools/kipp_quants.py
	$$(PYTHON) -m tools.quantize $$< $$@ --type $(1)
endef
$(foreach q,q8_0 q4_0 q4_k_m q6_k q5_k_m q5_k_s q4_k_s q5_0 q5_1 q4_1 q3_k_l q3_k_m q3_k_s q2_k iq4_nl iq4_xs,\
    $(eval $(call random_quant_rule,$(q))))
random-model: deps models/random/qwen3-$(SHAPE)-$(or $(TYPE),bf16).gguf

# the random-tiny shape in every weight type the cpu backend runs (Q4_K and Q6_K included);
# the K-quant mixes q5_k_m (Q5_K), q2_k (Q2_K, Q3_K) and iq4_xs for their cpu-vs-ref gates
RANDOM_TINY_TYPES := bf16 f16 f32 q8_0 q4_0 q4_k_m q6_k q5_k_m q2_k iq4_xs
# the embedding checkpoint (a bare Qwen3Model with last-token pooling): bf16 only, the
# weights its golden embeddings (tools/make_embed_vectors.py) were computed from
$(eval $(call tiny_gguf_rule,tiny-embed,bf16))
# the reranker checkpoint (a Qwen3ForCausalLM whose README names a Qwen3-Reranker: the
# converter writes qwen3.classifier.output_labels): bf16 only, the weights its golden scores
# (tools/make_rerank_vectors.py) were computed from
$(eval $(call tiny_gguf_rule,tiny-rerank,bf16))
# tiny-tied's weights with YaRN on (rope_scaling yarn, factor 4 over 16 tokens): bf16 only,
# the file its golden vectors (tests/test-vectors/tiny-yarn) were made for
$(eval $(call tiny_gguf_rule,tiny-yarn,bf16))
tiny-models: deps trained-models $(foreach t,$(TINY),$(foreach q,$(TINY_TYPES),models/$(t)/kipp-$(t)-$(q).gguf)) \
             $(foreach q,$(TINY_TIED_TYPES),models/tiny-tied/kipp-tiny-tied-$(q).gguf) \
             $(foreach q,$(RANDOM_TINY_TYPES),models/random/qwen3-tiny-$(q).gguf) \
             models/tiny-embed/kipp-tiny-embed-bf16.gguf models/tiny-rerank/kipp-tiny-rerank-bf16.gguf \
             models/tiny-yarn/kipp-tiny-yarn-bf16.gguf

demo: deps cpu models/kipp-tiny/kipp-tiny-bf16.gguf
	$(BUILD)/kipp --model models/kipp-tiny/kipp-tiny-bf16.gguf --chat --no-think --greedy -n 96 \
	    --prompt "What does the function \`json.dumps\` do?"

vectors: deps
	$(PYTHON) -c "import torch, transformers" 2>/dev/null || \
	    .venv/bin/pip install -r tools/requirements-vectors.txt
	$(PYTHON) -m tools.make_vectors --checkpoint $(CHECKPOINT)

embed-vectors: deps models/tiny-embed/config.json
	$(PYTHON) -c "import torch, transformers" 2>/dev/null || \
	    .venv/bin/pip install -r tools/requirements-vectors.txt
	$(PYTHON) -m tools.make_embed_vectors --checkpoint tiny-embed

rerank-vectors: deps models/tiny-rerank/config.json
	$(PYTHON) -c "import torch, transformers" 2>/dev/null || \
	    .venv/bin/pip install -r tools/requirements-vectors.txt
	$(PYTHON) -m tools.make_rerank_vectors --checkpoint tiny-rerank

# ---- tests ------------------------------------------------------------------------------

# The tiers (docs/testing.md): the stages are the lines of tests/stages.txt, run by
# tests/run_tests.sh; each target first runs set-up, then builds what its stages need in
# parallel (-j$(NPROC)), then runs the stages, several at once where the cores allow.
#   make check       the edit loop (a few minutes on a built tree)
#   make test        the CI tier (.ci/run): under 25 minutes on 2 cores from a fresh clone
#   make test-full   everything: the full tier (every type x ISA level x backend, mutation,
#                    the fault matrix, all CUDA architectures), then test-sanitize, test-tsan
#   make stage-NAME  one stage (tests/run_tests.sh --list --tier full names them)
# TEST_ARGS passes runner flags, e.g. TEST_ARGS="--skip server" or
# TEST_ARGS="--record bench/results/test-times-NAME.json". Set-up and build seconds reach
# the runner's record through KIPP_SETUP_SECONDS / KIPP_BUILD_SECONDS.
NPROC ?= $(shell nproc 2>/dev/null || echo 2)
TEST_BUILD := cpu server chat $(FUZZERS) $(BUILD)/kipp-grammarbench $(BUILD)/kipp-kernbench $(BUILD)/kipp-samplerbench \
              $(BUILD)/kipp-quantize tiny-models \
              $(BACKEND_TEST_TARGETS) $(if $(filter build,$(BUILD)),build/kipp_test_fault)
.PHONY: test-build full-build check-build test-full
test-build: $(TEST_BUILD)
full-build: $(TEST_BUILD)
check-build: cpu server $(FUZZERS) tiny-models
# deps (set-up), then BUILD_GOAL in parallel, then the runner on TIER
define run_tier
	@t0=$$(date +%s); $(MAKE) --no-print-directory deps || exit 1; t1=$$(date +%s); \
	$(MAKE) --no-print-directory -j$(NPROC) $(1) || exit 1; t2=$$(date +%s); \
	KIPP_SETUP_SECONDS=$$((t1 - t0)) KIPP_BUILD_SECONDS=$$((t2 - t1)) BUILD=$(BUILD) \
	    tests/run_tests.sh --tier $(2) $(TEST_ARGS)
endef
test:
	$(call run_tier,test-build,test)

check:
	$(call run_tier,check-build,check)

stage-%:
	$(call run_tier,test-build,test --only '^$*$$')

# the full tier with every CUDA architecture, then the sanitizer and TSan runs; the last line
# adds up the three
test-full:
	@tests/run_full.sh

test-server: deps server $(BUILD)/kipp-perplexity tiny-models
	@BUILD=$(BUILD) tests/server/run_server_tests.sh

test-draft-spec: deps cpu server chat tiny-models
	@BUILD=$(BUILD) tests/model/test_draft_spec.sh

test-chat: deps cpu chat tiny-models
	@BUILD=$(BUILD) tests/chat/test_chat.sh

# the test tier's binaries (test-build: every fuzzer, kipp-grammarbench, the cuda binaries the
# cuda-fatal and cuda-shim stages run) built under ASan + UBSan into build/san, then its stages
# (KIPP_SANITIZE=1: the rebuilding ones left out, sanitizer-speed client timeouts)
test-sanitize: deps tiny-models
	$(MAKE) --no-print-directory -j$(NPROC) BUILD=build/san SAN=1 test-build
	@BUILD=build/san KIPP_SANITIZE=1 KIPP_TEST_TIMEOUT_SCALE=6 tests/run_tests.sh $(TEST_ARGS)

# ThreadSanitizer (tests/tsan/run_tsan.sh): the unit suites, the scheduler gates, the thread
# pool in a forward pass and the server tests on binaries built with TSAN=1 into build/tsan
.PHONY: test-tsan
test-tsan: deps tiny-models
	$(MAKE) --no-print-directory -j$(NPROC) BUILD=build/tsan TSAN=1 cpu server chat
	@BUILD=build/tsan tests/tsan/run_tsan.sh

test-cpu-model: deps cpu
	@BUILD=$(BUILD) tests/model/run_cpu_model.sh $(CHECKPOINT)

# ---- docs -------------------------------------------------------------------------------

DOCS_MD := $(wildcard docs/*.md)
docs: deps
	@scripts/docs.sh build

docs-check: deps
	@scripts/docs.sh check

# BENCHMARKS.md's summary block and bench/plots/*.svg, from bench/results/*.json
bench-plots: deps
	@$(PYTHON) bench/plots.py build

clean:
	rm -rf build
