# src/backend/cpu/backend.mk — the optimized CPU backend "cpu" (included by the Makefile;
# see docs/backends.md): its sources, the ISA flags of its kernel files, and neon-check.
BACKEND_SRC += $(filter-out %/kernels_neon.c,$(wildcard src/backend/cpu/*.c))
ifeq ($(shell uname -m),aarch64)
BACKEND_SRC += src/backend/cpu/kernels_neon.c
endif
# The ISA kernel files, and only they, get ISA flags (cpu.c checks cpuid first).
$(BUILD)/obj/src/backend/cpu/kernels_avx2.o: CFLAGS += -mavx2 -mfma -mf16c
$(BUILD)/obj/src/backend/cpu/kernels_avx512.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mfma -mf16c
$(BUILD)/obj/src/backend/cpu/kernels_avx512vnni.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mfma -mf16c \
                                                       -mavx512vnni
$(BUILD)/obj/src/backend/cpu/kernels_neon.o: CFLAGS += -march=armv8.2-a+dotprod+fp16

# The NEON kernel file must compile for arm64 even on x86 hosts: cross-compile it alone
# (Debian's gcc-aarch64-linux-gnu; `make deps` installs it).
NEON_CC ?= aarch64-linux-gnu-gcc
neon-check:
	@mkdir -p $(BUILD)
	$(NEON_CC) $(CSTD) $(WARN) -Werror -O2 -Iinclude -Isrc -march=armv8.2-a+dotprod+fp16 \
	  -c src/backend/cpu/kernels_neon.c -o $(BUILD)/kernels_neon.aarch64.o
	@echo "neon-check: src/backend/cpu/kernels_neon.c compiles for aarch64"
