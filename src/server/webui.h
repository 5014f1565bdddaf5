/*
 * webui.h — CORS (cors.c) and the web page and static files (webui.c) of `spex serve`.
 *
 * What it is: the origin check behind --cors-origins, the headers it adds to every response,
 * and the GET handler of `/` (the built-in chat page) or of --path's files. What it is not:
 * routing or auth (http.c decides which requests reach these, after its API paths).
 */
#ifndef SPEX_SERVER_WEBUI_H
#define SPEX_SERVER_WEBUI_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

/* ------------------------------------------------------------------------ */
/* CORS (cors.c)                                                            */
/* ------------------------------------------------------------------------ */

/* Checks a --cors-origins value: `*` alone, or a comma-separated list whose entries are
 * `localhost` (any http(s) origin on localhost, 127.0.0.1 or [::1]) or origins
 * `http[s]://host[:port]` (no path, no trailing slash). False with msg on anything else. */
bool srv_cors_valid(const char *list, char *msg, size_t cap);

/* Whether origin (a request's Origin header) is allowed by list (a valid --cors-origins value;
 * NULL or "*": every origin). Pure: no state; scheme and host compare case-insensitively. */
bool srv_cors_allowed(const char *list, const char *origin);

/* Sets the --cors-origins value the response helpers below use (NULL: `*`). Called once at
 * start-up, before any request thread exists; read-only afterwards. */
void srv_cors_init(const char *list);

/* Adds Access-Control-Allow-Origin to r for c's request: `*` when every origin is allowed;
 * with a list, the request's Origin when listed (and Vary: Origin either way); nothing for an
 * origin that is not listed, so a browser withholds the response from that page. */
void srv_cors_add(struct MHD_Response *r, struct MHD_Connection *c);

/* ------------------------------------------------------------------------ */
/* The web page and --path (webui.c)                                        */
/* ------------------------------------------------------------------------ */

/* What srv_webui_serve did. */
enum { SRV_WEB_QUEUED = 0, SRV_WEB_NOT_FOUND = 404, SRV_WEB_METHOD = 405 };

/* Serves url when it names the built-in page and its assets (`/`, `/index.html`,
 * `/webui.js`, `/webui.css`) or, with static_dir (--path), a regular file under it (`/` is
 * its index.html). GET and HEAD only; off: nothing. SRV_WEB_QUEUED with *ret set, or
 * SRV_WEB_NOT_FOUND / SRV_WEB_METHOD for the caller's JSON error. */
int srv_webui_serve(struct MHD_Connection *c, bool off, const char *static_dir, const char *url, const char *method,
                    enum MHD_Result *ret);

/* The path part of url relative to --path's folder (`index.html` for `/` and names ending
 * in `/`) into out; false when url is not a safe relative name: every segment made of
 * [A-Za-z0-9._~-] and not starting with '.', so neither `..` nor hidden files nor empty
 * segments pass. Pure (the fuzz target and the tests call it). */
bool srv_webui_rel_path(const char *url, char *out, size_t cap);

/* The Content-Type for a file name, by its extension (application/octet-stream otherwise). */
const char *srv_webui_ctype(const char *name);

#endif
