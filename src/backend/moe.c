/* moe.c — a mixture-of-experts router's choice (moe.h), shared by every backend's host side so
 * that all of them route alike. */
#include "backend/moe.h"

#include <math.h>

void kipp_moe_route(float *logits, uint32_t n, uint32_t k, int norm, uint32_t *chosen, float *w) {
    float mx = -INFINITY, sum = 0.0f;
    for (uint32_t e = 0; e < n; e++)
        if (logits[e] > mx) mx = logits[e];
    for (uint32_t e = 0; e < n; e++) {
        logits[e] = expf(logits[e] - mx);
        sum += logits[e];
    }
    for (uint32_t e = 0; e < n; e++) logits[e] /= sum;
    float wsum = 0.0f;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t best = n;
        for (uint32_t e = 0; e < n; e++) {
            int taken = 0;
            for (uint32_t j = 0; j < i; j++) taken |= chosen[j] == e;
            if (!taken && (best == n || logits[e] > logits[best])) best = e; /* strict: ties to the lower index */
        }
        chosen[i] = best;
        w[i] = logits[best];
        wsum += w[i];
    }
    if (norm)
        for (uint32_t i = 0; i < k; i++) w[i] /= wsum;
}
