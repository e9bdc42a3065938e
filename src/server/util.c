/* util.c — STUB being written (issue 33). */
#include "server/http_int.h"
enum MHD_Result srv_handle_util(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    return srv_send_error(sv, c, cs, 501, "not implemented yet", "server_error", NULL, NULL);
}
