/*
 * pyrepr.c — Python's repr() of a float, which chat templates print: the built-in
 * templates' JSON arguments (chat.c) and the Jinja engine's str/repr/tojson (jinja_value.c).
 * Both must match what a Python Jinja2 render writes byte for byte, so there is one rule.
 */
#include "tok/tok.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t spex_tok_float_repr(double x, char out[40]) {
    if (!isfinite(x)) {
        strcpy(out, isnan(x) ? "nan" : x < 0 ? "-inf" : "inf");
        return strlen(out);
    }
    /* the shortest digits that read back to x (at most 17) */
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    char dig[24];   /* e: [-]D[.DDD]e[+-]XX */
    int nd = 0;
    const char *q = e;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.' && nd < 23) dig[nd++] = *q;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    int decpt = atoi(q + 1) + 1;   /* x = 0.DIGITS * 10^decpt */
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt > -4 && decpt <= 16) {   /* positional, with ".0" when integral */
        if (decpt <= 0) {
            *o++ = '0', *o++ = '.';
            for (int i = 0; i < -decpt; i++) *o++ = '0';
            for (int i = 0; i < nd; i++) *o++ = dig[i];
        } else {
            for (int i = 0; i < decpt; i++) *o++ = i < nd ? dig[i] : '0';
            *o++ = '.';
            if (decpt < nd)
                for (int i = decpt; i < nd; i++) *o++ = dig[i];
            else
                *o++ = '0';
        }
        *o = '\0';
    } else {   /* d.ddde+XX */
        *o++ = dig[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++) *o++ = dig[i];
        }
        snprintf(o, 16, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    }
    return strlen(out);
}
