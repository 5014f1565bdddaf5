/*
 * head.c — the request-head check of `spex serve`'s front door (door.c): where a request's
 * headers end, and whether its request line and framing headers are acceptable.
 *
 * What it is: a strict reading of RFC 9112 §3 (request line), §5 (field lines) and §6
 * (message body length) for the parts that decide how the body is framed — Content-Length,
 * Transfer-Encoding — plus the method and path, which say whether the request is a health or
 * metrics probe. It runs before libmicrohttpd sees the connection, so malformed framing gets
 * exactly one clean error response (libmicrohttpd 0.9.75 writes the status line and headers of
 * its own Content-Length errors twice). What it is not: an HTTP parser for the request itself —
 * libmicrohttpd parses the same bytes again once the head passed; nothing here allocates.
 *
 * Rules (status when broken): the request line is METHOD SP TARGET SP HTTP/D.D (400; versions
 * other than 1.x: 505); a field line is NAME ":" OWS VALUE OWS with a token name, no space
 * before the colon, no control bytes but HTAB, no obs-fold (400); Content-Length is one or
 * more digits (400), at most the body limit (413), repeated only with the same value (400),
 * never a comma list (400); Transfer-Encoding is "chunked" alone (501 otherwise), at most once,
 * never with Content-Length or in HTTP/1.0 (400); neither of the two takes trailing blanks
 * (libmicrohttpd would misread them). Leading empty lines (CRLF or LF) before the request line
 * are skipped (RFC 9112 §2.2). Lines may end in CRLF or a bare LF.
 */
#include "server/server.h"
#include "spec/api.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool is_tchar(unsigned char c) {   /* RFC 9110 §5.6.2 token characters */
    if (c >= '0' && c <= '9') return true;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* CRLF or bare LF only, as libmicrohttpd skips them (a lone CR is part of the request line). */
static size_t skip_empty_lines(const char *b, size_t n) {
    size_t s = 0;
    for (;;) {
        if (s < n && b[s] == '\n') s++;
        else if (s + 1 < n && b[s] == '\r' && b[s + 1] == '\n') s += 2;
        else return s;
    }
}

size_t srv_head_end(const char *buf, size_t n) {
    for (size_t i = skip_empty_lines(buf, n); i < n; i++) {
        if (buf[i] != '\n') continue;
        if (i + 1 < n && buf[i + 1] == '\n') return i + 2;
        if (i + 2 < n && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
    }
    return 0;
}

/* The line [p, *next) without its CR LF / LF: returns its length; *next is past the LF. */
static size_t line_at(const char *p, const char *end, const char **next) {
    const char *lf = memchr(p, '\n', (size_t)(end - p));
    if (!lf) lf = end;
    *next = lf < end ? lf + 1 : end;
    size_t len = (size_t)(lf - p);
    if (len && p[len - 1] == '\r') len--;
    return len;
}

static int fail(char *msg, size_t cap, int code, const char *what) {
    snprintf(msg, cap, "%s", what);
    return code;
}

static bool name_is(const char *p, size_t n, const char *name) {
    return strlen(name) == n && !strncasecmp(p, name, n);
}

/* The request line; fills method and path. 0 or an HTTP status. */
static int check_request_line(const char *p, size_t len, srv_head *h, char *msg, size_t cap) {
    size_t i = 0;
    while (i < len && is_tchar((unsigned char)p[i])) i++;
    if (i == 0 || i >= len || p[i] != ' ') return fail(msg, cap, 400, "malformed request line");
    size_t ml = i < sizeof h->method ? i : sizeof h->method - 1;
    memcpy(h->method, p, ml);
    h->method[ml] = 0;
    size_t t0 = ++i;
    while (i < len && (unsigned char)p[i] > ' ' && (unsigned char)p[i] < 0x7f) i++;
    if (i == t0 || i >= len || p[i] != ' ') return fail(msg, cap, 400, "malformed request line");
    size_t t1 = i++;
    size_t pl = 0;
    while (t0 + pl < t1 && p[t0 + pl] != '?' && pl + 1 < sizeof h->path) pl++;
    memcpy(h->path, p + t0, pl);
    h->path[pl] = 0;
    const char *v = p + i;
    size_t vl = len - i;
    if (vl != 8 || memcmp(v, "HTTP/", 5) || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' || v[7] > '9')
        return fail(msg, cap, 400, "malformed request line");
    h->is_head = !strcmp(h->method, "HEAD");   /* known before any later error: its reply has no body */
    if (v[5] != '1') return fail(msg, cap, 505, "only HTTP/1.x is supported");
    h->http10 = v[7] == '0';
    return 0;
}

int srv_head_check(const char *buf, size_t n, size_t body_max, srv_head *h, char *msg, size_t cap) {
    memset(h, 0, sizeof *h);
    h->content_length = -1;
    const char *p = buf + skip_empty_lines(buf, n), *end = buf + n, *next;
    size_t len = line_at(p, end, &next);
    int rc = check_request_line(p, len, h, msg, cap);
    if (rc) return rc;
    int n_te = 0;
    for (p = next; p < end; p = next) {
        len = line_at(p, end, &next);
        if (len == 0) break;   /* the blank line that ends the head */
        if (p[0] == ' ' || p[0] == '\t') return fail(msg, cap, 400, "obsolete line folding in a header");
        size_t c = 0;
        while (c < len && is_tchar((unsigned char)p[c])) c++;
        if (c == 0 || c >= len || p[c] != ':') return fail(msg, cap, 400, "malformed header line");
        for (size_t k = c + 1; k < len; k++)
            if (((unsigned char)p[k] < ' ' && p[k] != '\t') || p[k] == 0x7f)
                return fail(msg, cap, 400, "control character in a header value");
        const char *v = p + c + 1, *ve = p + len;
        while (v < ve && (*v == ' ' || *v == '\t')) v++;
        /* The framing headers keep their trailing blanks: libmicrohttpd 0.9.75 strips only the
         * leading ones, so "chunked " or "5 " would pass here and be misread there. */
        bool framing = name_is(p, c, "Content-Length") || name_is(p, c, "Transfer-Encoding");
        while (!framing && ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        size_t vl = (size_t)(ve - v);
        if (name_is(p, c, "Content-Length")) {
            if (vl == 0) return fail(msg, cap, 400, "empty Content-Length");
            int64_t cl = 0;   /* saturates at INT64_MAX: a number too large is 413, not 400 */
            for (size_t k = 0; k < vl; k++) {
                if (v[k] < '0' || v[k] > '9') return fail(msg, cap, 400, "malformed Content-Length");
                int d = v[k] - '0';
                cl = cl > (INT64_MAX - d) / 10 ? INT64_MAX : cl * 10 + d;
            }
            if (h->content_length >= 0 && h->content_length != cl)
                return fail(msg, cap, 400, "two different Content-Length headers");
            h->content_length = cl;
        } else if (name_is(p, c, "Transfer-Encoding")) {
            if (++n_te > 1) return fail(msg, cap, 400, "more than one Transfer-Encoding header");
            if (vl != 7 || strncasecmp(v, "chunked", 7)) return fail(msg, cap, 501, "unsupported Transfer-Encoding");
            h->chunked = true;
        }
    }
    if (h->chunked && h->content_length >= 0)
        return fail(msg, cap, 400, "both Content-Length and Transfer-Encoding");
    if (h->chunked && h->http10) return fail(msg, cap, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (h->content_length >= 0 && (uint64_t)h->content_length > body_max) {
        snprintf(msg, cap, "the request body exceeds the limit of %zu bytes", body_max);
        return 413;
    }
    h->probe = (h->is_head || !strcmp(h->method, "GET")) &&
               (!strcmp(h->path, "/health") || !strcmp(h->path, "/v1/health") || !strcmp(h->path, "/metrics"));
    return 0;
}
