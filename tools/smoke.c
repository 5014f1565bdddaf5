/* smoke.c — placeholder until the subcommand lands (this session). */
#include "cli.h"
#include <stdio.h>
int cmd_gen_smoke(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "error: not built yet\n"); return 1; }
