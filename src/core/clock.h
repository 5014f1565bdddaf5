/*
 * core/clock.h — the monotonic clock every timed rule reads (the draft cut, the guard, the
 * hybrid drafter's costs, the server's timings): seconds as a double, from CLOCK_MONOTONIC so
 * that a wall-clock step (NTP) never makes a step look negative or an hour long.
 */
#ifndef SPEX_CORE_CLOCK_H
#define SPEX_CORE_CLOCK_H

#include <time.h>

static inline double spex_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
