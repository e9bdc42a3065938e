# src/backend/vulkan/backend.mk — the Vulkan backend "vulkan" (included by the Makefile; see
# docs/backends.md and docs/vulkan.md). It is in the ordinary binaries (build/kipp,
# kipp-server, kipp-chat, kipp_test, ...): the Vulkan loader (libvulkan.so.1) is opened at run
# time, so a machine without it runs every other backend and `--backend vulkan` there is a
# fatal error naming what is missing. Building it needs the Vulkan headers (libvulkan-dev) and
# glslc (Debian's glslc), which compiles the GLSL compute shaders of shaders/ to SPIR-V; the
# SPIR-V is embedded in the binaries (tools/embed_spirv.py), so nothing compiles a shader at
# run time. A shader whose source has the line `// kipp: per weight type` is compiled once per
# GGUF weight type (-DWTYPE=<type id>, named NAME_<type>), the others once.
#   make test-vulkan   the vulkan gates on the first Vulkan device (lavapipe here: Debian's
#                      mesa-vulkan-drivers, which make deps installs): tests/vulkan/run_vulkan_gates.sh
# Where glslc or the headers are missing the backend is left out with a loud notice
# (KIPP_NO_VULKAN=1 leaves it out on purpose); KIPP_REQUIRE_VULKAN=1 (.ci/run sets it) makes
# that an error, so CI never skips it silently. The set-up goals (deps, and test / check /
# test-full, which run make deps before a sub-make builds) are exempt: on a fresh machine
# glslc arrives with make deps. The stages find out from build/kipp itself whether it
# carries the backend (tests/vulkan/run_vulkan_gates.sh).
GLSLC ?= glslc
VK_SHADER_DIR := src/backend/vulkan/shaders
KIPP_VK_OFF := $(KIPP_NO_VULKAN)
ifneq ($(KIPP_VK_OFF),1)
ifeq ($(shell command -v $(GLSLC) 2>/dev/null),)
KIPP_VK_MISSING := glslc (Debian: glslc)
endif
# the headers through the compiler (C_INCLUDE_PATH counts: the offline bundle's)
ifneq ($(shell printf '\043include <vulkan/vulkan.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 && echo y),y)
KIPP_VK_MISSING += the Vulkan headers (Debian: libvulkan-dev)
endif
ifneq ($(strip $(KIPP_VK_MISSING)),)
ifeq ($(KIPP_REQUIRE_VULKAN),1)
ifeq ($(filter deps venv test check test-full,$(MAKECMDGOALS)),)
$(error vulkan: $(KIPP_VK_MISSING) not found and KIPP_REQUIRE_VULKAN=1: run make deps)
endif
endif
KIPP_VK_OFF := 1
endif
endif

ifeq ($(KIPP_VK_OFF),1)
BACKEND_TEST_TARGETS += vulkan-skipped
else
# the GGUF weight types a typed shader is compiled for: name:id (src/core/types.h)
VK_WTYPES := f32:0 f16:1 q4_0:2 q4_1:3 q5_0:6 q5_1:7 q8_0:8 q2_k:10 q3_k:11 q4_k:12 q5_k:13 \
             q6_k:14 iq4_nl:20 iq4_xs:23 bf16:30
VK_COMP := $(wildcard $(VK_SHADER_DIR)/*.comp)
VK_TYPED := $(shell grep -l '^// kipp: per weight type' $(VK_COMP) /dev/null 2>/dev/null)
VK_PLAIN := $(filter-out $(VK_TYPED),$(VK_COMP))
# (the fault build passes build/vulkan/spv: the SPIR-V does not depend on C flags)
VK_SPV_DIR ?= $(BUILD)/vulkan/spv
# NAME=FILE pairs for the embedder
VK_SPV_PLAIN := $(foreach f,$(VK_PLAIN),$(basename $(notdir $(f)))=$(VK_SPV_DIR)/$(basename $(notdir $(f))).spv)
VK_SPV_TYPED := $(foreach f,$(VK_TYPED),$(foreach t,$(VK_WTYPES),$(basename $(notdir $(f)))_$(word 1,$(subst :, ,$(t)))=$(VK_SPV_DIR)/$(basename $(notdir $(f)))_$(word 1,$(subst :, ,$(t))).spv))
VK_SPV_PAIRS := $(VK_SPV_PLAIN) $(VK_SPV_TYPED)
VK_SPV := $(foreach p,$(VK_SPV_PAIRS),$(word 2,$(subst =, ,$(p))))
GLSLC_FLAGS := --target-env=vulkan1.1 -O -Werror -I$(VK_SHADER_DIR)

$(VK_SPV_DIR)/%.spv: $(VK_SHADER_DIR)/%.comp
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSLC_FLAGS) -MD -MF $@.d -o $@ $<
define vk_typed_rule
$(VK_SPV_DIR)/$(1)_$(2).spv: $(VK_SHADER_DIR)/$(1).comp
	@mkdir -p $$(dir $$@)
	$$(GLSLC) $$(GLSLC_FLAGS) -DWTYPE=$(3) -MD -MF $$@.d -o $$@ $$<
endef
$(foreach f,$(VK_TYPED),$(foreach t,$(VK_WTYPES),$(eval $(call vk_typed_rule,$(basename $(notdir $(f))),$(word 1,$(subst :, ,$(t))),$(word 2,$(subst :, ,$(t)))))))
-include $(wildcard $(VK_SPV_DIR)/*.spv.d)

# the shader table: regenerated when a module or the list of modules changes
VK_LIST_STAMP := $(BUILD)/vulkan/shaders.list
$(shell mkdir -p $(BUILD)/vulkan && { [ -f $(VK_LIST_STAMP) ] && [ "$$(cat $(VK_LIST_STAMP))" = "$(strip $(VK_SPV_PAIRS))" ] || \
    echo "$(strip $(VK_SPV_PAIRS))" >$(VK_LIST_STAMP); })
$(BUILD)/vulkan/shaders.c: $(VK_SPV) $(VK_LIST_STAMP) tools/embed_spirv.py
	python3 tools/embed_spirv.py $@ $(VK_SPV_PAIRS)
$(BUILD)/obj/vulkan/shaders.o: $(BUILD)/vulkan/shaders.c src/backend/vulkan/vk.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

BACKEND_SRC += $(wildcard src/backend/vulkan/*.c)
VK_EXTRA_OBJ := $(BUILD)/obj/vulkan/shaders.o
VK_TEST_SRC := $(wildcard tests/vulkan/*.c)
LDLIBS += -ldl
endif

# The shader table object joins BACKEND_OBJ after the Makefile defines it (see its line
# `BACKEND_OBJ += $(VK_EXTRA_OBJ)`).
.PHONY: vulkan-skipped test-vulkan
vulkan-skipped:
	@echo "********************************************************************************" >&2
	@echo "* vulkan: NOT BUILT AND NOT TESTED: $(or $(strip $(KIPP_VK_MISSING)),KIPP_NO_VULKAN=1)." >&2
	@echo "* Run make deps (glslc, libvulkan-dev, mesa-vulkan-drivers) to build and test it;" >&2
	@echo "* KIPP_REQUIRE_VULKAN=1 turns this notice into an error (CI sets it)." >&2
	@echo "********************************************************************************" >&2
test-vulkan: deps cpu tiny-models
	@BUILD=$(BUILD) tests/vulkan/run_vulkan_gates.sh
