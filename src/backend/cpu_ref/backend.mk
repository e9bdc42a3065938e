# src/backend/cpu_ref/backend.mk — the scalar reference backend "cpu-ref": plain C11, no
# flags of its own (included by the Makefile; see docs/backends.md).
BACKEND_SRC += $(wildcard src/backend/cpu_ref/*.c)
