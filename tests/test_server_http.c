/*
 * test_server_http.c — `spex serve` at the connection level: its front door (src/server/door.c,
 * head.c) under floods of idle and half-sent connections, and its answers to malformed framing.
 *
 * What it checks, over raw sockets against the build's own spex binary and the tiny qwen3
 * target: 1,200 idle and half-head connections from other loopback addresses (more than the
 * old select() limit and than --conn-max) leave /health and a completion answering within a
 * few seconds, the server holding more than 1,024 of them at once, and every one of them closed
 * by the header timeout; a client dripping its head byte by byte is closed at the deadline with
 * 408; per-address limits close that address's oldest waiting connection; with every place in
 * service taken, /health and /metrics still answer from the reserve while other requests get
 * 503; bad Content-Length forms, two different Content-Length headers, Content-Length with
 * chunked, unknown Transfer-Encoding, oversized heads and other HTTP versions get exactly one
 * status line; HEAD answers like GET without a body; every 405 carries Allow.
 * What it is not: the API (test_server.c) — the requests here are the smallest that work.
 */
#include "srv_client.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TINY_QWEN3 "tests/data/models/tiny-qwen3.gguf"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A socket from source address 127.0.0.<host> connected to the server, -1 on failure. */
static int connect_from(int host, int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    src.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)host);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 || connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Whether the server has closed fd (EOF or reset; a 408 reply before the EOF counts too).
 * saw_408: set when the bytes read start with a 408 status line. */
static bool server_closed(int fd, bool *saw_408) {
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    char buf[256];
    ssize_t k = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    if (k > 0) {
        buf[k] = 0;
        if (saw_408 && !strncmp(buf, "HTTP/1.1 408", 12)) *saw_408 = true;
        return true;   /* the door writes only a final reply before it closes */
    }
    return k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

static int count_closed(const int *fds, int n, bool *closed, bool *saw_408) {
    int c = 0;
    for (int i = 0; i < n; i++) {
        if (!closed[i] && fds[i] >= 0 && server_closed(fds[i], saw_408)) closed[i] = true;
        c += closed[i] || fds[i] < 0;
    }
    return c;
}

/* Sends raw bytes, reads until the server closes; the whole response in *out (malloc'd). */
static bool raw_exchange(int port, const char *req, size_t len, char **out, size_t *out_len) {
    int fd = connect_to(port);
    if (fd < 0 || !send_all(fd, req, len)) {
        if (fd >= 0) close(fd);
        return false;
    }
    *out = recv_all(fd, out_len);
    return true;
}

/* Status of a raw response that must hold exactly one status line; -1 when it does not. */
static int one_status(const char *text, size_t len) {
    int lines = 0, status = -1;
    for (size_t i = 0; i + 9 <= len; i++)
        if ((i == 0 || text[i - 1] == '\n') && !strncmp(text + i, "HTTP/1.", 7)) {
            lines++;
            if (lines == 1) sscanf(text + i, "HTTP/1.%*d %d", &status);
        }
    if (lines != 1) printf("  %d status lines in: %.400s\n", lines, text);
    return lines == 1 ? status : -1;
}

static bool raise_nofile(rlim_t want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
    if (rl.rlim_cur >= want) return true;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) return false;
    rl.rlim_cur = want;
    return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

/* ======================================================================== */
/* The shared server: small body limit, short header timeout                 */
/* ======================================================================== */

static shared_server g_srv;

static int main_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-c", "256", "-t", "1", "--body-max", "65536",
                       "--header-timeout", "1.5", NULL};
    return shared_server_port(&g_srv, a);
}

#define REQUIRE_SERVER(port) REQUIRE_SERVER_FROM(port, main_port)

TEST(framing_errors_answered_once) {
    REQUIRE_SERVER(port);
    static const struct {
        const char *what, *req;
        int status;
    } cases[] = {
        {"huge Content-Length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
        {"negative Content-Length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400},
        {"Content-Length not a number", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400},
        {"empty Content-Length", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", 400},
        {"Content-Length list", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 2\r\n\r\n{}", 400},
        {"two different Content-Length", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 17\r\n\r\n{}", 400},
        {"Content-Length over --body-max", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n{", 413},
        {"Content-Length and chunked", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", 400},
        {"unknown Transfer-Encoding", "POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        /* libmicrohttpd keeps trailing blanks of a value: these would be misread there */
        {"chunked with a trailing blank", "POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked \r\n\r\n", 501},
        {"Content-Length with a trailing blank", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 2 \r\n\r\n{}", 400},
        {"space before colon", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length : 2\r\n\r\n{}", 400},
        {"obsolete line folding", "GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", 400},
        {"HTTP/2.0 request line", "GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505},
        {"not HTTP", "hello there\r\n\r\n", 400},
        {"a lone CR before the request line", "\rGET /health HTTP/1.1\r\nHost: x\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out = NULL;
        size_t n = 0;
        CHECK_MSG(raw_exchange(port, cases[i].req, strlen(cases[i].req), &out, &n), "%s: no answer", cases[i].what);
        int st = one_status(out, n);
        char *body = strstr(out, "\r\n\r\n");
        resp r = {.status = st, .body = body ? body + 4 : out};
        bool ok = st == cases[i].status && is_error(&r, cases[i].status, NULL);
        if (!ok) printf("  %s: want %d, got: %.300s\n", cases[i].what, cases[i].status, out);
        free(out);
        CHECK(ok);
    }
    /* the same value twice is one length (RFC 9112 §6.3): served */
    const char *twice = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\nContent-Length: 16\r\n\r\n"
                        "{\"content\":\"ab\"}";
    char *out = NULL;
    size_t n = 0;
    CHECK(raw_exchange(port, twice, strlen(twice), &out, &n));
    CHECK_MSG(one_status(out, n) == 200 && strstr(out, "\"tokens\""), "%.300s", out);
    free(out);
    /* a head over 16 KiB: 431; one just under it passes to the HTTP library and is served */
    for (int big = 0; big < 2; big++) {
        size_t pad = big ? 17000 : 15000;
        char *req = malloc(pad + 128);
        int k = snprintf(req, 128, "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ");
        memset(req + k, 'a', pad);
        memcpy(req + k + pad, "\r\n\r\n", 5);
        CHECK(raw_exchange(port, req, strlen(req), &out, &n));
        int st = one_status(out, n);
        CHECK_MSG(st == (big ? 431 : 200), "a %zu-byte head: %.200s", pad, out);
        free(out);
        free(req);
    }
    /* a client that stops sending after its request (shutdown) still gets the door's answer */
    int fd = connect_to(port);
    const char *half = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n";
    CHECK(fd >= 0 && send_all(fd, half, strlen(half)) && shutdown(fd, SHUT_WR) == 0);
    out = recv_all(fd, &n);
    CHECK_MSG(one_status(out, n) == 400, "after a half-close: '%s'", out);
    free(out);
    resp r;
    CHECK(http(port, "GET", "/health", NULL, NULL, &r) && r.status == 200);
    resp_free(&r);
}

/* A body that stops arriving ends the request after --header-timeout of silence (here 1.5 s:
 * 2 s), not after --timeout: a dripping body cannot hold a place in service. */
TEST(stalled_body_closed) {
    REQUIRE_SERVER(port);
    int fd = connect_to(port);
    const char *part = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"content\":";
    CHECK(fd >= 0 && send_all(fd, part, strlen(part)));
    double t0 = now_s();
    size_t n = 0;
    char *out = recv_all(fd, &n);   /* until the server closes */
    double waited = now_s() - t0;
    free(out);
    printf("  closed after %.2f s\n", waited);
    CHECK_MSG(waited >= 1.0 && waited < 6.0, "a stalled body was closed after %.2f s", waited);
}

TEST(head_requests_and_allow) {
    REQUIRE_SERVER(port);
    resp r, g;
    CHECK(http(port, "HEAD", "/health", NULL, NULL, &r));
    CHECK(http(port, "GET", "/health", NULL, NULL, &g));
    CHECK_EQ_INT(r.status, 200);
    CHECK_MSG(r.body_len == 0, "HEAD /health sent a body: '%s'", r.body);
    char cl[64];
    snprintf(cl, sizeof cl, "Content-Length: %zu", g.body_len);
    CHECK_MSG(strcasestr(r.head, cl) != NULL, "HEAD /health lacks '%s': %s", cl, r.head);
    resp_free(&r);
    resp_free(&g);
    CHECK(http(port, "HEAD", "/v1/models", NULL, NULL, &r));
    CHECK(r.status == 200 && r.body_len == 0);
    resp_free(&r);
    /* an error of the door to a HEAD request has no body either */
    char *out = NULL;
    size_t n = 0;
    const char *bad = "HEAD /health HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n";
    CHECK(raw_exchange(port, bad, strlen(bad), &out, &n));
    CHECK(one_status(out, n) == 400);
    char *sep = strstr(out, "\r\n\r\n");
    CHECK_MSG(sep && sep[4] == 0, "body after a HEAD's 400: %s", out);
    free(out);
    static const struct {
        const char *method, *path, *allow;
    } cases[] = {{"DELETE", "/health", "GET, HEAD, OPTIONS"},
                 {"POST", "/v1/models", "GET, HEAD, OPTIONS"},
                 {"GET", "/v1/chat/completions", "POST, OPTIONS"},
                 {"PUT", "/props", "GET, HEAD, POST, OPTIONS"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(http(port, cases[i].method, cases[i].path, NULL, NULL, &r));
        char want[96];
        snprintf(want, sizeof want, "\r\nAllow: %s", cases[i].allow);
        bool ok = r.status == 405 && strstr(r.head, want) && is_error(&r, 405, NULL);
        if (!ok) printf("  %s %s: %d %s\n", cases[i].method, cases[i].path, r.status, r.head);
        resp_free(&r);
        CHECK(ok);
    }
}

/* A head sent one byte every 200 ms is closed at the 1.5 s deadline with 408 (not kept alive
 * by its trickle, as an idle timeout would be). */
TEST(dripping_head_closed_at_deadline) {
    REQUIRE_SERVER(port);
    int fd = connect_to(port);
    CHECK(fd >= 0);
    const char *head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    double t0 = now_s(), t_closed = -1;
    bool saw_408 = false;
    for (size_t i = 0; i < strlen(head) && now_s() - t0 < 6.0; i++) {
        if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1 || server_closed(fd, &saw_408)) {
            t_closed = now_s() - t0;
            break;
        }
        usleep(200 * 1000);
    }
    close(fd);
    printf("  closed after %.2f s (deadline 1.5 s)\n", t_closed);
    CHECK_MSG(t_closed >= 1.3 && t_closed <= 3.0, "closed after %.2f s", t_closed);
    CHECK(saw_408 || t_closed > 0);
}

TEST(shutdown_clean) {
    REQUIRE_SERVER(port);
    (void)port;
    bool clean;
    int rc = shared_server_stop(&g_srv, &clean);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* ======================================================================== */
/* Floods and limits (a server each)                                         */
/* ======================================================================== */

#define FLOOD_N 1200
#define FLOOD_ADDRS 12   /* 127.0.0.2 .. 127.0.0.13, 100 each (under the per-address default) */

/* 1,200 connections that send nothing or half a head, from 12 addresses, against --conn-max
 * 1100: the newest keep their place (the oldest 100 are closed), so the server holds more than
 * 1,024 descriptors at once; a new client gets /health and a completion at once; the header
 * timeout then closes every one of them. */
TEST(idle_flood_keeps_server_reachable) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    if (!raise_nofile(4096)) SKIP("the descriptor limit cannot be raised to 4096 (ulimit -Hn)");
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-c", "256", "-t", "1", "--conn-max", "1100",
                       "--header-timeout", "3", NULL};
    server s;
    CHECK_MSG(server_start(&s, a), "the server did not start");
    static int fds[FLOOD_N];
    static bool closed[FLOOD_N];
    int opened = 0;
    const char *half = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    double t0 = now_s();
    for (int i = 0; i < FLOOD_N; i++) {
        closed[i] = false;
        fds[i] = connect_from(2 + i / (FLOOD_N / FLOOD_ADDRS), s.port);
        if (fds[i] >= 0) opened++;
        if (fds[i] >= 0 && i % 2) (void)send(fds[i], half, strlen(half), MSG_NOSIGNAL);
    }
    usleep(300 * 1000);   /* the door accepts the backlog */
    double t_health = now_s();
    resp r;
    bool health = http(s.port, "GET", "/health", NULL, NULL, &r) && r.status == 200;
    t_health = now_s() - t_health;
    resp_free(&r);
    double t_gen = now_s();
    bool gen = http(s.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"Hello\",\"max_tokens\":8,\"temperature\":0}", &r) &&
               r.status == 200 && strstr(r.body, "\"text_completion\"");
    t_gen = now_s() - t_gen;
    resp_free(&r);
    int closed_early = count_closed(fds, FLOOD_N, closed, NULL);
    printf("  %d connections opened in %.2f s; /health in %.3f s, a completion in %.3f s; %d closed by then\n", opened,
           now_s() - t0, t_health, t_gen, closed_early);
    /* the header timeout (3 s from each accept) closes the rest */
    bool saw_408 = false;
    int closed_late = 0;
    for (double t1 = now_s(); now_s() - t1 < 8.0; usleep(100 * 1000))
        if ((closed_late = count_closed(fds, FLOOD_N, closed, &saw_408)) == FLOOD_N) break;
    double t_all = now_s() - t0;
    printf("  all %d closed %.1f s after the flood began (408 seen: %d)\n", closed_late, t_all, saw_408);
    for (int i = 0; i < FLOOD_N; i++)
        if (fds[i] >= 0) close(fds[i]);
    bool health_after = http(s.port, "GET", "/health", NULL, NULL, &r) && r.status == 200;
    resp_free(&r);
    bool clean = false;
    int rc = server_stop(&s, &clean);
    CHECK_EQ_INT(opened, FLOOD_N);
    CHECK_MSG(health && t_health < 2.0, "/health: ok %d in %.2f s", health, t_health);
    CHECK_MSG(gen && t_gen < 5.0, "completion: ok %d in %.2f s", gen, t_gen);
    /* 100 over the limit, plus the 2 new clients' places; none of the newest 1,050 */
    CHECK_MSG(closed_early >= FLOOD_N - 1100 && closed_early <= FLOOD_N - 1050, "%d closed early", closed_early);
    CHECK_EQ_INT(closed_late, FLOOD_N);
    CHECK(saw_408);
    CHECK(health_after);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* --conn-max-per-ip 16: 50 idle connections from one address keep only its newest 16; another
 * connection from that address is served (it takes its own address's oldest place), and so is
 * one from another address. */
TEST(per_address_limit_closes_own_oldest) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-c", "256", "-t", "1", "--conn-max-per-ip", "16", NULL};
    server s;
    CHECK_MSG(server_start(&s, a), "the server did not start");
    int fds[50];
    bool closed[50] = {false};
    for (int i = 0; i < 50; i++) {
        fds[i] = connect_from(2, s.port);
        usleep(2000);   /* accepted in this order */
    }
    usleep(300 * 1000);
    int n_closed = count_closed(fds, 50, closed, NULL);
    bool oldest = true;
    for (int i = 0; i < 50; i++) oldest = oldest && closed[i] == (i < 34);
    int fd = connect_from(2, s.port);
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    resp r = {0}, o;
    bool same_ok = fd >= 0 && send_all(fd, req, strlen(req)) && read_response(fd, &r) && r.status == 200;
    resp_free(&r);
    bool other_ok = http(s.port, "GET", "/health", NULL, NULL, &o) && o.status == 200;
    resp_free(&o);
    usleep(100 * 1000);
    int n_closed2 = count_closed(fds, 50, closed, NULL);
    for (int i = 0; i < 50; i++)
        if (fds[i] >= 0) close(fds[i]);
    bool clean = false;
    int rc = server_stop(&s, &clean);
    CHECK_MSG(n_closed == 34 && oldest, "%d closed (want the oldest 34)", n_closed);
    CHECK(same_ok);
    CHECK(other_ok);
    CHECK_EQ_INT(n_closed2, 35);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* --conn-max 3 with three long streams in service: other requests get 503 from the door,
 * /health and /metrics answer from the reserve; once the streams end, requests are served. */
TEST(reserve_for_probes_when_full) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-c", "512", "-t", "1", "--conn-max", "3", "--metrics", NULL};
    server s;
    CHECK_MSG(server_start_slowed(&s, 20, a), "the server did not start");
    const char *longreq = "{\"prompt\":\"Hello\",\"max_tokens\":300,\"temperature\":0,\"stream\":true}";
    int streams[3];
    for (int i = 0; i < 3; i++) streams[i] = open_request(s.port, "POST", "/v1/completions", NULL, longreq);
    usleep(500 * 1000);
    resp r;
    bool busy = http(s.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\",\"max_tokens\":2}", &r) &&
                is_error(&r, 503, NULL) && strstr(r.body, "limit");
    resp_free(&r);
    bool models_busy = http(s.port, "GET", "/v1/models", NULL, NULL, &r) && r.status == 503;
    resp_free(&r);
    bool health = http(s.port, "GET", "/health", NULL, NULL, &r) && r.status == 200;
    resp_free(&r);
    bool head = http(s.port, "HEAD", "/health", NULL, NULL, &r) && r.status == 200;
    resp_free(&r);
    bool metrics = http(s.port, "GET", "/metrics", NULL, NULL, &r) && r.status == 200 &&
                   strstr(r.body, "llamacpp:requests_processing");
    resp_free(&r);
    for (int i = 0; i < 3; i++)
        if (streams[i] >= 0) close(streams[i]);
    bool after = false;
    for (int i = 0; i < 50 && !after; i++) {
        usleep(100 * 1000);
        after = http(s.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\",\"max_tokens\":2}", &r) && r.status == 200;
        resp_free(&r);
    }
    bool clean = false;
    int rc = server_stop(&s, &clean);
    CHECK(streams[0] >= 0 && streams[1] >= 0 && streams[2] >= 0);
    CHECK_MSG(busy, "a 4th generation request was not refused with 503");
    CHECK(models_busy);
    CHECK(health);
    CHECK(head);
    CHECK(metrics);
    CHECK_MSG(after, "no request served after the streams ended");
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

TEST_MAIN()
