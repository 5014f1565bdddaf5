/*
 * cors.c — which browser origins may read `spex serve`'s responses (--cors-origins).
 *
 * What it is: llama-server's --cors-origins (its default `*`: every origin; `localhost`: pages
 * served from this machine; else a comma-separated list of origins), checked against a
 * request's Origin header (RFC 6454 §7) and turned into Access-Control-Allow-Origin (Fetch
 * standard, "CORS protocol"). A page on an origin that is not allowed gets no such header, so
 * its browser keeps the response from it — preflights included, so it cannot send JSON or an
 * Authorization header at all. What it is not: access control. The request itself is still
 * served (as llama-server does); clients that are not browsers ignore CORS. --api-key is what
 * keeps strangers out. No credentials mode (cookies are not used by the server).
 */
#include "server/webui.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Set once by srv_cors_init before the daemon starts; only read afterwards. */
static const char *g_cors_list;

/* [p, e) without the blanks around it. */
static void trim(const char **p, const char **e) {
    while (*p < *e && (**p == ' ' || **p == '\t')) (*p)++;
    while (*e > *p && ((*e)[-1] == ' ' || (*e)[-1] == '\t')) (*e)--;
}

/* The host of an origin [p, e) ("http://h:1" -> "h"; "[::1]" keeps its brackets) into
 * [*hp, *he); false when it is not scheme "://" host [":" digits] with scheme http or https. */
static bool split_origin(const char *p, const char *e, const char **hp, const char **he) {
    size_t n = (size_t)(e - p);
    const char *h;
    if (n > 7 && !strncasecmp(p, "http://", 7)) h = p + 7;
    else if (n > 8 && !strncasecmp(p, "https://", 8)) h = p + 8;
    else return false;
    const char *end = h;
    if (*h == '[') {   /* an IPv6 literal */
        while (end < e && *end != ']') end++;
        if (end == e) return false;
        end++;
    } else {
        while (end < e && *end != ':') end++;
    }
    if (end == h) return false;
    for (const char *q = h; q < end; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || strchr("-.[]:", *q)))
            return false;
    if (end < e) {   /* ":" port: 1 to 65535 (after "]" the ':' is not implied) */
        if (*end != ':') return false;
        const char *d = end + 1;
        long port = 0;
        if (d == e || e - d > 5) return false;
        for (; d < e; d++) {
            if (*d < '0' || *d > '9') return false;
            port = port * 10 + (*d - '0');
        }
        if (port < 1 || port > 65535) return false;
    }
    *hp = h, *he = end;
    return true;
}

static bool is_loopback_host(const char *h, const char *e) {
    size_t n = (size_t)(e - h);
    return (n == 9 && !strncasecmp(h, "localhost", 9)) || (n == 9 && !memcmp(h, "127.0.0.1", 9)) ||
           (n == 5 && !memcmp(h, "[::1]", 5));
}

bool srv_cors_valid(const char *list, char *msg, size_t cap) {
    if (!list || !*list) return snprintf(msg, cap, "--cors-origins: empty (use * for every origin)"), false;
    for (const char *p = list;;) {
        const char *comma = strchr(p, ','), *e = comma ? comma : p + strlen(p), *s = p, *hp, *he;
        trim(&s, &e);
        if (s == e) return snprintf(msg, cap, "--cors-origins '%.200s': an empty entry", list), false;
        if (e - s == 1 && *s == '*') {
            if (s != list || comma) return snprintf(msg, cap, "--cors-origins '%.200s': * must stand alone", list), false;
        } else if (!(e - s == 9 && !strncasecmp(s, "localhost", 9)) && !split_origin(s, e, &hp, &he)) {
            return snprintf(msg, cap,
                            "--cors-origins: '%.*s' is not an origin (http://host[:port] or https://host[:port], "
                            "no path), localhost or *",
                            (int)(e - s > 200 ? 200 : e - s), s),
                   false;
        }
        if (!comma) return true;
        p = comma + 1;
    }
}

bool srv_cors_allowed(const char *list, const char *origin) {
    if (!list || !strcmp(list, "*")) return true;
    if (!origin) return false;
    const char *oe = origin + strlen(origin), *ohp = NULL, *ohe = NULL;
    bool parsed = split_origin(origin, oe, &ohp, &ohe);
    for (const char *p = list;;) {
        const char *comma = strchr(p, ','), *e = comma ? comma : p + strlen(p), *s = p;
        trim(&s, &e);
        if (e - s == 9 && !strncasecmp(s, "localhost", 9)) {
            if (parsed && is_loopback_host(ohp, ohe)) return true;
        } else if ((size_t)(e - s) == (size_t)(oe - origin) && !strncasecmp(s, origin, (size_t)(e - s))) {
            return true;
        }
        if (!comma) return false;
        p = comma + 1;
    }
}

void srv_cors_init(const char *list) { g_cors_list = list && strcmp(list, "*") ? list : NULL; }

void srv_cors_add(struct MHD_Response *r, struct MHD_Connection *c) {
    if (!g_cors_list) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        return;
    }
    /* the answer depends on Origin: a shared cache must not hand one origin's to another */
    MHD_add_response_header(r, "Vary", "Origin");
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && srv_cors_allowed(g_cors_list, origin))
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
}
