/* vmath_impl.h — the row loops of vmath.c, included once per instruction set with
 * VMATH_SUF naming the variant (no include guard: that is the point). Uses vmath.c's vector
 * types and helpers. */

/* the largest non-NaN entry (-inf when none) */
static float VN(vec_max)(const float *x, size_t n) {
    vf m, v;
    vsplat(&m, -INFINITY);
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vload(&v, x + i);
        m = VSEL(v > m, v, m); /* NaN compares false: never taken */
    }
    if (i < n) {
        vtail(&v, x + i, n - i, -INFINITY);
        m = VSEL(v > m, v, m);
    }
    float best = -INFINITY;
    for (int j = 0; j < VL; j++) best = m[j] > best ? m[j] : best;
    return best;
}

/* the indices of the k (1..64) largest non-NaN entries, largest first, ties by index. The
 * list is filled from the first entries; after that a block of 8 vectors is skipped whole
 * unless one of its entries beats the list's last entry (ties lose to the lower index
 * already there), so a row costs about one vector compare per 8 floats. */
static uint32_t VN(top_k)(const float *x, uint32_t n, uint32_t k, int32_t *ids) {
    uint32_t m = 0, i = 0;
    for (; i < n && m < k; i++)
        if (x[i] == x[i]) top_insert(x, ids, &m, k, i);
    vf thr, v;
    for (; i + 8 * VL <= n; i += 8 * VL) {
        vsplat(&thr, x[ids[k - 1]]);
        vi hit = {0};
        for (int b = 0; b < 8; b++) {
            vload(&v, x + i + b * VL);
            hit |= v > thr; /* NaN compares false */
        }
        if (!vany(hit)) continue;
        for (uint32_t j = i; j < i + 8 * VL; j++)
            if (x[j] > x[ids[k - 1]]) top_insert(x, ids, &m, k, j);
    }
    for (; i < n; i++)
        if (x[i] == x[i]) top_insert(x, ids, &m, k, i);
    return m;
}

/* x[i] = (x[i] - shift) / t in place, NaN entries -> -inf; returns the largest result */
static float VN(scale)(float *x, size_t n, float shift, float t) {
    vf vs, vt, ninf, m, v;
    vsplat(&vs, shift);
    vsplat(&vt, t);
    vsplat(&ninf, -INFINITY);
    m = ninf;
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vload(&v, x + i);
        v = VSEL(v == v, (v - vs) / vt, ninf);
        memcpy(x + i, &v, sizeof v);
        m = VSEL(v > m, v, m);
    }
    float best = -INFINITY;
    for (int j = 0; j < VL; j++) best = m[j] > best ? m[j] : best;
    for (; i < n; i++) {
        x[i] = x[i] == x[i] ? (x[i] - shift) / t : -INFINITY;
        best = x[i] > best ? x[i] : best;
    }
    return best;
}

/* sum of exp(x[i] - mx) over [0, n) (x[i] <= mx), NaN entries left out (0), each also
 * stored to e[i] unless e is NULL: blocks of 32 vectors summed in float lanes, the blocks
 * in double. The log-sum-exp (e NULL) and the sampler's softmax share it. */
static double VN(exp_sum)(const float *x, float *e, size_t n, float mx) {
    vf vmx, zero, v;
    vsplat(&vmx, mx);
    vsplat(&zero, 0.0f);
    double total = 0.0;
    size_t i = 0;
    while (i < n) {
        vf acc = zero;
        const size_t end = n - i > 32 * VL ? i + 32 * VL : n;
        for (; i < end; i += VL) {
            const size_t len = end - i < VL ? end - i : VL;
            if (len == VL) vload(&v, x + i);
            else vtail(&v, x + i, len, -INFINITY); /* padded lanes: exp(-inf) = 0 */
            vf t = v - vmx;
            vexp_nonpos(&t);
            t = VSEL(v == v, t, zero);
            acc += t;
            if (!e) continue;
            if (len == VL) memcpy(e + i, &t, sizeof t);
            else for (size_t j = 0; j < len; j++) e[i + j] = t[j];
        }
        i = end;
        double s = 0.0;
        for (int j = 0; j < VL; j++) s += acc[j];
        total += s;
    }
    return total;
}

/* x[i] = (float)(x[i] * s), the product in double */
static void VN(mul_d)(float *x, size_t n, double s) {
    vd vs = {0};
    vs += s;
    vf v;
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vload(&v, x + i);
        v = __builtin_convertvector(__builtin_convertvector(v, vd) * vs, vf);
        memcpy(x + i, &v, sizeof v);
    }
    for (; i < n; i++) x[i] = (float)(x[i] * s);
}
