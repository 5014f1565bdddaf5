/*
 * srv_client.h — the test client of `spex serve` (srv_client.c): server processes and raw
 * HTTP/1.1 requests, for the server's test programs.
 */
#ifndef SPEX_TEST_SRV_CLIENT_H
#define SPEX_TEST_SRV_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct server {
    pid_t pid;
    int port;
    char err_path[256];
} server;

/* One server shared by a program's tests: started on first use, stopped by its last test. */
typedef struct shared_server {
    server s;
    bool started, failed;
} shared_server;

/* The port of ss, started with args on first use; -1 when it did not start (not retried). */
int shared_server_port(shared_server *ss, const char *const *args);
/* Stops ss (server_stop); later shared_server_port calls give -1. */
int shared_server_stop(shared_server *ss, bool *clean);

/* Declares `int port` from port_fn() (a shared_server_port wrapper); needs test.h. */
#define REQUIRE_SERVER_FROM(port, port_fn)                                       \
    int port = -1;                                                               \
    do {                                                                         \
        if (!test_spex_bin()) SKIP("no spex binary next to this test's folder"); \
        port = port_fn();                                                        \
        CHECK_MSG(port > 0, "the server did not start");                         \
    } while (0)

/* Starts `spex serve --port 0 ARGS` and waits for "ready"; false on failure. */
bool server_start(server *s, const char *const *args);
/* The same with every engine step slowed by step_delay_ms (> 0: the test harness
 * tests/harness/serve_slow.c, built beside the tests; 0: spex serve itself). */
bool server_start_slowed(server *s, int step_delay_ms, const char *const *args);
/* Sends sig (SIGTERM or SIGINT), waits; returns the exit status and whether stderr is
 * sanitizer-clean and ends with "server: stopped". */
int server_stop_sig(server *s, int sig, bool *clean);
int server_stop(server *s, bool *clean);

typedef struct resp {
    int status;
    char *head;    /* status line + headers */
    char *body;    /* de-chunked, NUL-terminated */
    size_t body_len;
} resp;

void resp_free(resp *r);
/* A connected loopback socket (60 s receive timeout), -1 on failure. */
int connect_to(int port);
bool send_all(int fd, const char *p, size_t n);
/* Sends a request (body may be NULL); extra: more header lines, each ending in \r\n. */
int open_request(int port, const char *method, const char *path, const char *extra, const char *body);
/* Reads until the server closes, then closes fd: the bytes, NUL-terminated (malloc'd). */
char *recv_all(int fd, size_t *len);
/* Reads the whole response (until the server closes) and closes fd. */
bool read_response(int fd, resp *r);
bool http(int port, const char *method, const char *path, const char *extra, const char *body, resp *r);
/* error.code and error.type of an error body match (type NULL: any). */
bool is_error(const resp *r, int code, const char *type);
/* JSON helpers (cJSON): a POST / GET whose parsed answer is returned only when the status is
 * want (GET: 200), else NULL with the answer printed; o printed on one line; the tokens of text
 * through POST /tokenize with add_special (the chat prompt's tokenization), -1 on failure. */
struct cJSON;
struct cJSON *post_json(int port, const char *path, const char *body, int want);
struct cJSON *get_json(int port, const char *path, const char *extra);
void jprint(const char *what, struct cJSON *o);
int tokenize_count(int port, const char *text);
/* The value of the /metrics sample `name` in text; false when it is absent. */
bool metric_value(const char *text, const char *name, double *v);

#endif
