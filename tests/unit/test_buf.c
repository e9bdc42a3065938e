/* test_buf.c — unit suite for src/core/buf.c: appends and the NUL after them, growth across
 * many doublings, printf (short, long, pointing into the buffer), take, the sticky failure,
 * and the overflow checks of kipp_buf_reserve and kipp_grow (a size past SIZE_MAX must fail
 * cleanly, leaving the buffer or array as it was). No test asks for a size that fits size_t
 * but not memory: the sanitizer build aborts on such a malloc instead of returning NULL. */
#include "core/buf.h"
#include "kt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_put(void) {
    kipp_buf b = {0};
    KT_CHECK(kipp_buf_str(&b)[0] == '\0' && b.data == NULL, "an untouched buffer reads as \"\"");
    KT_CHECK(kipp_buf_put(&b, "", 0) == KIPP_OK && b.data && b.data[0] == '\0' && b.len == 0,
             "put of nothing allocates \"\"");
    KT_CHECK(kipp_buf_puts(&b, "abc") == KIPP_OK && b.len == 3 && strcmp(b.data, "abc") == 0);
    KT_CHECK(kipp_buf_put(&b, "d\0e", 3) == KIPP_OK && b.len == 6 && memcmp(b.data, "abcd\0e", 7) == 0,
             "embedded NUL kept, NUL after");
    /* many appends: every byte kept across the doublings, cap always > len */
    size_t want = 6;
    int ok = 1;
    for (int i = 0; i < 20000; i++) {
        char c = (char)('a' + i % 26);
        if (kipp_buf_put(&b, &c, 1) != KIPP_OK || b.cap <= b.len) ok = 0;
        want++;
    }
    KT_CHECK(ok && b.len == want && b.data[b.len] == '\0', "len %zu want %zu", b.len, want);
    for (size_t i = 6; ok && i < want; i++) ok = b.data[i] == (char)('a' + (i - 6) % 26);
    KT_CHECK(ok, "bytes kept across growth");
    /* bytes that point into the buffer itself survive the realloc */
    size_t len0 = b.len;
    KT_CHECK(kipp_buf_put(&b, b.data, b.len) == KIPP_OK && b.len == 2 * len0 &&
             memcmp(b.data, b.data + len0, len0) == 0, "self append");
    kipp_buf_free(&b);
    KT_CHECK(b.data == NULL && b.len == 0 && b.cap == 0 && !b.oom);
    kipp_buf_free(NULL);
}

static void test_printf(void) {
    kipp_buf b = {0};
    KT_CHECK(kipp_buf_printf(&b, "%d-%s", 42, "x") == KIPP_OK && strcmp(kipp_buf_str(&b), "42-x") == 0,
             "got %s", kipp_buf_str(&b));
    /* longer than any scratch space */
    char big[3000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    KT_CHECK(kipp_buf_printf(&b, "[%s]", big) == KIPP_OK && b.len == 4 + 2 + sizeof big - 1 &&
             b.data[4] == '[' && b.data[b.len - 1] == ']' && b.data[b.len] == '\0', "len %zu", b.len);
    /* an argument pointing into the buffer */
    kipp_buf c = {0};
    kipp_buf_puts(&c, "ab");
    for (int i = 0; i < 12; i++) kipp_buf_printf(&c, "%s", c.data);
    KT_CHECK(!c.oom && c.len == 2u << 12, "len %zu", c.len);
    kipp_buf_free(&b);
    kipp_buf_free(&c);
}

static void test_take(void) {
    kipp_buf b = {0};
    size_t n = 99;
    char *s = kipp_buf_take(&b, &n);
    KT_CHECK(s && n == 0 && s[0] == '\0', "an empty buffer gives \"\"");
    free(s);
    kipp_buf_puts(&b, "hello");
    s = kipp_buf_take(&b, &n);
    KT_CHECK(s && n == 5 && strcmp(s, "hello") == 0 && b.data == NULL && b.len == 0 && b.cap == 0);
    free(s);
    KT_CHECK(kipp_buf_puts(&b, "again") == KIPP_OK && strcmp(b.data, "again") == 0, "reusable after take");
    kipp_buf_free(&b);
}

static void test_overflow(void) {
    kipp_buf b = {0};
    kipp_buf_puts(&b, "keep");
    char *data0 = b.data;
    size_t cap0 = b.cap;
    /* len + n + 1 past SIZE_MAX: refused before any allocation */
    KT_CHECK(kipp_buf_reserve(&b, SIZE_MAX) == KIPP_ERR_NOMEM, "reserve SIZE_MAX");
    KT_CHECK(b.oom && b.data == data0 && b.len == 4 && b.cap == cap0 && strcmp(b.data, "keep") == 0,
             "a failed reserve leaves the bytes");
    /* sticky: later appends do nothing and fail, and take reports the failure */
    KT_CHECK(kipp_buf_puts(&b, "more") == KIPP_ERR_NOMEM && b.len == 4, "sticky after a failure");
    KT_CHECK(kipp_buf_printf(&b, "%d", 1) == KIPP_ERR_NOMEM && b.len == 4, "printf sticky too");
    size_t n = 7;
    KT_CHECK(kipp_buf_take(&b, &n) == NULL && n == 0 && b.data == NULL && !b.oom, "take after a failure");

    /* the exact edge: len + n + 1 == SIZE_MAX + 1 */
    kipp_buf_puts(&b, "x");
    KT_CHECK(kipp_buf_reserve(&b, SIZE_MAX - 1) == KIPP_ERR_NOMEM && b.oom, "len 1 + SIZE_MAX-1 + 1");
    kipp_buf_free(&b);
    /* and n == SIZE_MAX on put, whatever bytes points at */
    KT_CHECK(kipp_buf_put(&b, "", SIZE_MAX) == KIPP_ERR_NOMEM && b.len == 0);
    kipp_buf_free(&b);
}

static void test_grow(void) {
    uint32_t *a = NULL;
    size_t cap = 0;
    KT_CHECK(kipp_grow((void **)&a, &cap, 0, sizeof *a) == KIPP_OK && a == NULL && cap == 0,
             "need 0: nothing");
    KT_CHECK(kipp_grow((void **)&a, &cap, 1, sizeof *a) == KIPP_OK && a && cap >= 1);
    int ok = 1;
    for (uint32_t i = 0; i < 100000; i++) {
        if (kipp_grow((void **)&a, &cap, (size_t)i + 1, sizeof *a) != KIPP_OK) ok = 0;
        else a[i] = i * 2654435761u;
    }
    for (uint32_t i = 0; ok && i < 100000; i++) ok = a[i] == i * 2654435761u;
    KT_CHECK(ok && cap >= 100000, "entries kept, cap %zu", cap);
    size_t cap1 = cap;
    KT_CHECK(kipp_grow((void **)&a, &cap, 50, sizeof *a) == KIPP_OK && cap == cap1, "no shrink");
    /* need * elem past SIZE_MAX: refused, array untouched */
    uint32_t *a0 = a;
    KT_CHECK(kipp_grow((void **)&a, &cap, SIZE_MAX / 4 + 1, sizeof *a) == KIPP_ERR_NOMEM &&
             a == a0 && cap == cap1 && a[99999] == 99999u * 2654435761u, "need*elem overflow");
    KT_CHECK(kipp_grow((void **)&a, &cap, SIZE_MAX, 2) == KIPP_ERR_NOMEM && a == a0 && cap == cap1,
             "need SIZE_MAX");
    /* doubling that would pass SIZE_MAX / elem stops at need instead */
    size_t big = SIZE_MAX / 8 + 1, cap2 = big;
    KT_CHECK(kipp_grow((void **)&a, &cap2, big + 1, 8) == KIPP_ERR_NOMEM && cap2 == big,
             "doubling past the limit");
    free(a);
}

void kt_suite_buf(void) {
    test_put();
    test_printf();
    test_take();
    test_overflow();
    test_grow();
}
