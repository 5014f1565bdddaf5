/*
 * error.c — status names and the per-call error context (spex_error).
 *
 * The library reports every failure by returning a spex_status and, when the caller
 * passed a spex_error, a one-line message (control bytes replaced by '?'). There is no
 * global error string.
 */
#include "spex.h"

#include <stdarg.h>
#include <stdio.h>

const char *spex_status_str(spex_status s) {
    switch (s) {
    case SPEX_OK: return "ok";
    case SPEX_ERR_INVALID_ARG: return "invalid argument";
    case SPEX_ERR_IO: return "i/o error";
    case SPEX_ERR_FORMAT: return "malformed input";
    case SPEX_ERR_NOMEM: return "out of memory";
    case SPEX_ERR_NOT_FOUND: return "not found";
    case SPEX_ERR_TYPE: return "wrong type";
    case SPEX_ERR_UNSUPPORTED: return "unsupported";
    case SPEX_ERR_RANGE: return "out of range";
    case SPEX_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

spex_status spex_error_set(spex_error *err, spex_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        /* One line whatever the input: messages quote file contents (architecture names, keys,
         * tokens) that may hold control bytes; they become '?'. */
        for (char *p = err->msg; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    }
    return status;
}
