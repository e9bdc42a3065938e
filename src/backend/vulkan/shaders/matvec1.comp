// matvec1.comp — matvec.comp with one thread per output row (tpr = 1, what a CPU device such
// as lavapipe runs): the same code without the reduction tree, so the shader holds no barrier
// and no shared memory. lavapipe runs any shader that contains a barrier as one coroutine per
// invocation, which made the tpr = 1 path some 20 times slower with the (unexecuted) tree
// compiled in. Results are those of matvec.comp at tpr = 1, bit for bit.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// kipp: per weight type
#define MV_ONE_THREAD 1
#include "matvec_body.glsl"
