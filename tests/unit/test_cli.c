/* test_cli.c — unit checks for the pieces the CLI streams output with. */
#include "kt.h"
#include "tok/utf8.h"

#include <string.h>

void kt_suite_cli(void) {
    /* complete sequences pass through, unfinished tails are held back */
    KT_CHECK(kipp_utf8_complete_prefix("abc", 3) == 3);
    KT_CHECK(kipp_utf8_complete_prefix("", 0) == 0);
    KT_CHECK(kipp_utf8_complete_prefix("a\xC3", 2) == 1);           /* half of é */
    KT_CHECK(kipp_utf8_complete_prefix("a\xC3\xA9", 3) == 3);       /* é */
    KT_CHECK(kipp_utf8_complete_prefix("\xE2\x82", 2) == 0);        /* 2/3 of € */
    KT_CHECK(kipp_utf8_complete_prefix("\xE2\x82\xAC", 3) == 3);    /* € */
    KT_CHECK(kipp_utf8_complete_prefix("x\xF0\x9F\x98", 4) == 1);   /* 3/4 of an emoji */
    KT_CHECK(kipp_utf8_complete_prefix("\xF0\x9F\x98\x80", 4) == 4);
    /* invalid bytes are not held forever */
    KT_CHECK(kipp_utf8_complete_prefix("a\xFF", 2) == 2);
    KT_CHECK(kipp_utf8_complete_prefix("\x80\x80", 2) == 2);
    KT_CHECK(kipp_utf8_complete_prefix("\xE2" "a", 2) == 2);        /* broken sequence */
}
