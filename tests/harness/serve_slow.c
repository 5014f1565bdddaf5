/*
 * serve_slow.c — a test harness: `spex serve` with every engine step slowed by a fixed delay,
 * so the server's tests can act while a stream is still running (a client that leaves, a
 * shutdown with requests in flight, a full queue, every place in service taken).
 *
 * What it is: the CLI's own flag parser (tools/serve.c, serve_parse) and server (srv_main),
 * with srv_config.step_delay_ms set — a field no flag of the spex binary reaches, so production
 * builds carry no test switch. What it is not: a test; the tests start it (tests/srv_client.c).
 * usage: serve_slow STEP_DELAY_MS [spex serve flags...]
 */
#include "cli.h"
#include "server/server.h"
#include "spec/api.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    char *end = NULL;
    long ms = argc >= 2 ? strtol(argv[1], &end, 10) : -1;
    if (argc < 2 || *end || ms < 0 || ms > 10000) {
        fprintf(stderr, "usage: serve_slow STEP_DELAY_MS (0..10000) [spex serve flags...]\n");
        return 2;
    }
    argv[1] = "serve";
    srv_config c;
    int rc = serve_parse(argc - 1, argv + 1, &c);
    if (rc >= 0) return rc;
    c.step_delay_ms = (int32_t)ms;
    return srv_main(&c);
}
