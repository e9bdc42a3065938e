/* gates.h — model gates of build/kipp_test; each returns the number of failed checks. */
#ifndef KIPP_GATES_H
#define KIPP_GATES_H

#include "kipp.h"

int kt_gate_golden(const char *model_path, const char *vec_dir);
int kt_gate_phase2(const char *model_path, const char *vec_dir);

#endif
