/* webui.h — the web chat page kipp-server serves at / (src/server/webui/index.html, embedded
 * in the binary) and the Content-Security-Policy it is served with. */
#ifndef KIPP_SERVER_WEBUI_H
#define KIPP_SERVER_WEBUI_H

#include <stddef.h>

/* The page's bytes (static, valid for the life of the process; NUL-terminated too). */
const char *kipp_webui_page(size_t *n_bytes);

/* The Content-Security-Policy header value for the page (malloc'd; NULL when out of memory):
 * nothing from other origins; scripts and styles only the page's own inline elements,
 * named by their SHA-256; fetches only to this server. */
char *kipp_webui_csp(void);

#endif
