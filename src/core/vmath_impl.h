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

/* sum of exp(x[i] - mx) over [0, n), NaN entries left out: blocks of 32 vectors summed in
 * float lanes, the blocks in double */
static double VN(sum_exp)(const float *x, size_t n, float mx) {
    vf vmx, zero, v;
    vsplat(&vmx, mx);
    vsplat(&zero, 0.0f);
    double total = 0.0;
    size_t i = 0;
    while (i < n) {
        vf acc = zero;
        const size_t end = n - i > 32 * VL ? i + 32 * VL : n;
        for (; i < end; i += VL) {
            if (i + VL <= end) vload(&v, x + i);
            else vtail(&v, x + i, end - i, -INFINITY);
            vf e = v - vmx;
            vexp_nonpos(&e);
            acc += VSEL(v == v, e, zero);
        }
        i = end;
        double s = 0.0;
        for (int j = 0; j < VL; j++) s += acc[j];
        total += s;
    }
    return total;
}

/* the indices of the k (1..64) largest non-NaN entries, largest first, ties by index */
static uint32_t VN(top_k)(const float *x, uint32_t n, uint32_t k, int32_t *ids) {
    uint32_t m = 0, i = 0;
    vf thr, a, b;
    /* a block of 2 vectors is skipped whole while the list is full and nothing in it beats
     * the list's last entry (ties lose to the lower index already there) */
    for (; i + 2 * VL <= n; i += 2 * VL) {
        if (m == k) {
            vsplat(&thr, x[ids[k - 1]]);
            vload(&a, x + i);
            vload(&b, x + i + VL);
            const vi gt = (a > thr) | (b > thr);
            int any = 0;
            for (int l = 0; l < VL; l++) any |= gt[l];
            if (!any) continue;
        }
        for (uint32_t j = i; j < i + 2 * VL; j++)
            if (x[j] == x[j]) top_insert(x, ids, &m, k, j);
    }
    for (; i < n; i++)
        if (x[i] == x[i]) top_insert(x, ids, &m, k, i);
    return m;
}
