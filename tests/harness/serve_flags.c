/*
 * serve_flags.c — a test harness: `spex serve`'s flag parser alone, so tests/test_flags.c can
 * try every llama-server flag of docs/server.md's table in milliseconds.
 *
 * What it is: tools/serve.c's serve_parse on the command line, the LLAMA_ARG_* variables
 * included, with its "note:" and "error:" lines on stderr; "parsed" on stdout and exit 0 when
 * the server would start with that command line, else the parser's status (0 after --help,
 * 2 after an error line). What it is not: the server — no model is loaded, no port is taken.
 * usage: serve_flags [spex serve flags...]
 */
#include "cli.h"
#include "server/server.h"

#include <stdio.h>

int main(int argc, char **argv) {
    argv[0] = "serve";
    srv_config c;
    int rc = serve_parse(argc, argv, &c);
    if (rc >= 0) return rc;
    printf("parsed\n");
    return 0;
}
