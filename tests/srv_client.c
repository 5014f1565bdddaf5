/*
 * srv_client.c — the test client of `spex serve` shared by test_server.c and
 * test_server_http.c: starts the build's own spex binary on a free loopback port, stops it
 * with a signal (checking a sanitizer-clean stderr), and speaks raw HTTP/1.1 over sockets.
 * What it is not: a test — no TEST cases here.
 */
#include "srv_client.h"
#include "test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

extern char **environ;

bool server_start(server *s, const char *const *args) { return server_start_slowed(s, 0, args); }

bool server_start_slowed(server *s, int step_delay_ms, const char *const *args) {
    memset(s, 0, sizeof *s);
    const char *spex = test_spex_bin();
    if (!spex) return false;
    static char harness[4200];   /* build/tests/harness/serve_slow beside build/spex */
    snprintf(harness, sizeof harness, "%.*s/tests/harness/serve_slow", (int)(strrchr(spex, '/') - spex), spex);
    const char *bin = step_delay_ms > 0 ? harness : spex;
    char delay[16];
    snprintf(delay, sizeof delay, "%d", step_delay_ms);
    snprintf(s->err_path, sizeof s->err_path, "/tmp/spex_test_srv_err_XXXXXX");
    int fe = mkstemp(s->err_path);
    if (fe < 0) return false;
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = step_delay_ms > 0 ? delay : "serve";
    argv[n++] = "--port";
    argv[n++] = "0";
    for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fe, 2);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    fflush(stdout);
    int e = posix_spawn(&s->pid, bin, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fe);
    if (e != 0) return false;
    for (int i = 0; i < 600; i++) {   /* up to 60 s (the ASan build loads slowly) */
        size_t len = 0;
        char *err = test_slurp(s->err_path, &len);
        const char *p = err ? strstr(err, "listening on http://127.0.0.1:") : NULL;
        if (p) s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
        bool ready = err && strstr(err, "server: ready");
        bool dead = waitpid(s->pid, NULL, WNOHANG) == s->pid;
        if (dead) printf("  server exited: %s\n", err ? err : "");
        free(err);
        if (dead) {
            s->pid = 0;
            return false;
        }
        if (ready && s->port > 0) return true;
        usleep(100 * 1000);
    }
    return false;
}

/* Sends sig (SIGTERM or SIGINT), waits; returns the exit status and whether stderr is
 * sanitizer-clean and ends with "server: stopped". */
int server_stop_sig(server *s, int sig, bool *clean) {
    if (s->pid <= 0) return -1;
    kill(s->pid, sig);
    int st = 0, rc = -1;
    for (int i = 0; i < 300; i++) {
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        usleep(100 * 1000);
    }
    if (rc < 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &st, 0);
    }
    size_t len = 0;
    char *err = test_slurp(s->err_path, &len);
    *clean = err && !strstr(err, "Sanitizer") && !strstr(err, "runtime error") && strstr(err, "server: stopped");
    if (!*clean) printf("  server stderr:\n%s\n", err ? err : "(none)");
    free(err);
    unlink(s->err_path);
    s->pid = 0;
    return rc;
}

int server_stop(server *s, bool *clean) { return server_stop_sig(s, SIGTERM, clean); }

/* Shared servers still running when the test binary exits (a run of some tests only skips
 * the test that stops them): stopped at exit, so no server outlives its test run. */
static shared_server *g_live[8];
static int g_n_live;

static void stop_live(void) {
    for (int i = 0; i < g_n_live; i++)
        if (g_live[i]->started) {
            bool clean;
            (void)shared_server_stop(g_live[i], &clean);
        }
}

int shared_server_port(shared_server *ss, const char *const *args) {
    if (!ss->started && !ss->failed) {
        ss->started = server_start(&ss->s, args);
        ss->failed = !ss->started;
        if (ss->started && g_n_live < (int)(sizeof g_live / sizeof g_live[0])) {
            if (g_n_live == 0) atexit(stop_live);
            g_live[g_n_live++] = ss;
        }
    }
    return ss->started ? ss->s.port : -1;
}

int shared_server_stop(shared_server *ss, bool *clean) {
    int rc = server_stop(&ss->s, clean);
    ss->started = false, ss->failed = true;
    return rc;
}

/* ======================================================================== */
/* HTTP                                                                      */
/* ======================================================================== */


void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

bool send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        p += k, n -= (size_t)k;
    }
    return true;
}

/* Sends a request (body may be NULL); extra: more header lines, each ending in \r\n. */
int open_request(int port, const char *method, const char *path, const char *extra, const char *body) {
    int fd = connect_to(port);
    if (fd < 0) return -1;
    char head[1024];
    size_t bl = body ? strlen(body) : 0;
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s", method, path,
                     extra ? extra : "", body ? "Content-Type: application/json\r\n" : "", "");
    if (body) n += snprintf(head + n, sizeof head - (size_t)n, "Content-Length: %zu\r\n", bl);
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    if (!send_all(fd, head, (size_t)n) || (bl && !send_all(fd, body, bl))) {
        close(fd);
        return -1;
    }
    return fd;
}

char *recv_all(int fd, size_t *len) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = 0;
    *len = n;
    return buf;
}

bool read_response(int fd, resp *r) {
    memset(r, 0, sizeof *r);
    size_t n = 0;
    char *buf = recv_all(fd, &n);
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        return false;
    }
    size_t hl = (size_t)(sep - buf);
    r->head = malloc(hl + 1);
    memcpy(r->head, buf, hl);
    r->head[hl] = 0;
    const char *b = sep + 4;
    size_t bl = n - hl - 4;
    r->body = malloc(bl + 1);
    if (strcasestr(r->head, "transfer-encoding: chunked")) {
        size_t o = 0;
        const char *p = b, *end = b + bl;
        while (p < end) {
            char *e;
            unsigned long sz = strtoul(p, &e, 16);
            const char *nl = strstr(p, "\r\n");
            if (!nl || sz == 0) break;
            p = nl + 2;
            if (p + sz > end) sz = (unsigned long)(end - p);
            memcpy(r->body + o, p, sz);
            o += sz;
            p += sz + 2;
        }
        r->body_len = o;
    } else {
        memcpy(r->body, b, bl);
        r->body_len = bl;
    }
    r->body[r->body_len] = 0;
    free(buf);
    return true;
}

bool http(int port, const char *method, const char *path, const char *extra, const char *body, resp *r) {
    memset(r, 0, sizeof *r);
    int fd = open_request(port, method, path, extra, body);
    return fd >= 0 && read_response(fd, r);
}

/* error.code and error.type of an error body match. */
bool is_error(const resp *r, int code, const char *type) {
    cJSON *o = cJSON_Parse(r->body);
    cJSON *e = cJSON_GetObjectItem(o, "error");
    bool ok = r->status == code && cJSON_IsNumber(cJSON_GetObjectItem(e, "code")) &&
              cJSON_GetObjectItem(e, "code")->valueint == code &&
              cJSON_IsString(cJSON_GetObjectItem(e, "message")) &&
              (!type || !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "type")), type));
    if (!ok) printf("  expected %d %s, got %d: %s\n", code, type ? type : "", r->status, r->body);
    cJSON_Delete(o);
    return ok;
}

bool metric_value(const char *text, const char *name, double *v) {
    char key[200];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(text, key);
    if (!p) return false;
    *v = strtod(p + strlen(key), NULL);
    return true;
}

cJSON *post_json(int port, const char *path, const char *body, int want) {
    resp r;
    if (!http(port, "POST", path, NULL, body, &r)) return NULL;
    cJSON *o = r.status == want ? cJSON_Parse(r.body) : NULL;
    if (!o) printf("  POST %s: %d %s\n", path, r.status, r.body);
    resp_free(&r);
    return o;
}

cJSON *get_json(int port, const char *path, const char *extra) {
    resp r;
    if (!http(port, "GET", path, extra, NULL, &r)) return NULL;
    cJSON *o = r.status == 200 ? cJSON_Parse(r.body) : NULL;
    if (!o) printf("  GET %s: %d %s\n", path, r.status, r.body);
    resp_free(&r);
    return o;
}

void jprint(const char *what, cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    printf("  %s: %s\n", what, t ? t : "(null)");
    free(t);
}

int tokenize_count(int port, const char *text) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "content", text);
    cJSON_AddBoolToObject(b, "add_special", true);
    char *body = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    cJSON *o = post_json(port, "/tokenize", body, 200);
    free(body);
    int n = o ? cJSON_GetArraySize(cJSON_GetObjectItem(o, "tokens")) : -1;
    cJSON_Delete(o);
    return n;
}
