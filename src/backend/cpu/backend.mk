# src/backend/cpu/backend.mk — the optimized CPU backend "cpu" (included by the Makefile;
# see docs/backends.md): its sources, the ISA flags of its kernel files, and neon-check.
# KIPP_ARCH: the machine the binaries are for (the Makefile's; aarch64 when cross-building
# with `make arm64`): x86 builds the x86 kernel files, arm64 the NEON one.
ifeq ($(KIPP_ARCH),aarch64)
BACKEND_SRC += $(filter-out %/kernels_avx2.c %/kernels_avx512.c %/kernels_avx512vnni.c %/kernels_amx.c %/kernels_avx512bf16.c,$(wildcard src/backend/cpu/*.c))
else
BACKEND_SRC += $(filter-out %/kernels_neon.c,$(wildcard src/backend/cpu/*.c))
endif
# The ISA kernel files, and only they, get ISA flags (cpu.c checks cpuid first).
$(BUILD)/obj/src/backend/cpu/kernels_avx2.o: CFLAGS += -mavx2 -mfma -mf16c
$(BUILD)/obj/src/backend/cpu/kernels_avx512.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mfma -mf16c
$(BUILD)/obj/src/backend/cpu/kernels_avx512vnni.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mfma -mf16c \
                                                       -mavx512vnni
$(BUILD)/obj/src/backend/cpu/kernels_avx512bf16.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mfma -mf16c \
                                                       -mavx512bf16
$(BUILD)/obj/src/backend/cpu/kernels_amx.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mfma -mf16c \
                                                -mamx-tile -mamx-bf16
$(BUILD)/obj/src/backend/cpu/kernels_neon.o: CFLAGS += -march=armv8.2-a+dotprod+fp16

# arm64 (make test's stage arm64, tests/arm64/run_arm64.sh): kipp_test for aarch64 from
# Debian's cross compiler, linked statically with the arm64 utf8proc and jansson (`make deps`
# adds the arm64 architecture for them), run by qemu-aarch64 (Debian's qemu-user).
ARM64_CC ?= aarch64-linux-gnu-gcc
.PHONY: arm64
arm64:
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/arm64 CC=$(ARM64_CC) KIPP_ARCH=aarch64 KIPP_NO_VULKAN=1 \
	  LDLIBS="-static -lutf8proc -ljansson -lm -pthread" $(BUILD)/arm64/kipp_test
	@echo "arm64: $(BUILD)/arm64/kipp_test (run it with qemu-aarch64)"

# The NEON kernel file must compile for arm64 even on x86 hosts: cross-compile it alone
# (Debian's gcc-aarch64-linux-gnu; `make deps` installs it).
NEON_CC ?= aarch64-linux-gnu-gcc
neon-check:
	@mkdir -p $(BUILD)
	$(NEON_CC) $(CSTD) $(WARN) -Werror -O2 -Iinclude -Isrc -march=armv8.2-a+dotprod+fp16 \
	  -c src/backend/cpu/kernels_neon.c -o $(BUILD)/kernels_neon.aarch64.o
	@echo "neon-check: src/backend/cpu/kernels_neon.c compiles for aarch64"
