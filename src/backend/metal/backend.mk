# src/backend/metal/backend.mk — the Apple Metal backend "metal": its targets, not the backend
# (included by the Makefile; see docs/backends.md). backends.def already knows the name
# ("build with `make metal` on macOS"), and the guide's commands name these targets:
#   make metal, make server-metal, make test-metal, make build/kipp_test_metal
# No Metal backend is written yet: this folder holds no sources and adds nothing to
# BACKEND_SRC, so every binary still reports `metal` as "known, but not in this binary".
# Each target refuses by name, saying why, instead of make's "No rule to make target": on a
# host that is not macOS, that Metal needs macOS and Apple's toolchain (xcrun metal,
# Metal.framework) as well. The backend, when written, replaces these recipes with real rules
# the way src/backend/cuda/backend.mk builds its own binaries.
METAL_TARGETS := metal server-metal test-metal test-metal-build
METAL_FILES   := $(BUILD)/kipp-metal $(BUILD)/kipp-server-metal $(BUILD)/kipp_test_metal
METAL_HOST    := $(shell uname -s 2>/dev/null)
ifeq ($(METAL_HOST),Darwin)
METAL_WHY := the metal backend is not written yet (src/backend/metal/ holds only its make fragment; docs/backends.md)
else
METAL_WHY := Metal needs macOS and Apple's toolchain (xcrun metal, Metal.framework) and this host is \
$(or $(METAL_HOST),not macOS); besides, the metal backend is not written yet (src/backend/metal/ holds \
only its make fragment; docs/backends.md)
endif
METAL_ELSE := backends that build here: cpu and cpu-ref (make cpu, make server), cuda (make cuda-generic, \
make server-cuda, make cuda-spark; docs/cuda.md)

.PHONY: $(METAL_TARGETS)
$(METAL_TARGETS) $(METAL_FILES):
	@echo "make $@: cannot build: $(METAL_WHY). $(METAL_ELSE)" >&2; exit 1
