/*
 * door.c — the front door of `spex serve`: its own accept loop in front of libmicrohttpd.
 *
 * What it is: one thread that listens, accepts, and holds every new connection in a poll()
 * set (no descriptor-number limit, no thread per connection) until its request head is
 * complete. The head is read with MSG_PEEK, so the bytes stay in the socket for the HTTP
 * library; SO_RCVLOWAT is raised past the bytes already seen, so a half-sent head does not
 * wake the loop again until more arrives. The head is checked (head.c): bad framing gets one
 * clean error reply here; a good request is handed to libmicrohttpd (http.c) if a place in
 * service is free. What it is not: request handling — every request that passes is served,
 * and its connection closed, by the HTTP library.
 *
 * Limits (docs/server.md "Connections"):
 * - At most conn_max connections wait for their head; a new one takes the place of the
 *   oldest waiting one, and of its own address's oldest once that address has
 *   conn_max_per_ip waiting. So idle or slow connections can never lock clients out: the
 *   newest connection always gets its chance.
 * - A head must be complete header_timeout_s after accept (an absolute deadline, so a client
 *   dripping one byte at a time gains nothing); past it the connection gets 408 and is closed.
 * - At most conn_max requests are in service (conn_max_per_ip per address); past it a request
 *   gets 503, except GET/HEAD of /health and /metrics, which have SRV_CONN_RESERVE places more,
 *   so an orchestrator's probe still reaches a busy but healthy server.
 * - An error reply is followed by a lingering close: the door stops writing and reads what the
 *   client still sends for DOOR_LINGER_S, so closing with unread bytes (which sends a TCP reset)
 *   does not destroy the reply before the client reads it.
 */
#include "server/server.h"
#include "spec/api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DOOR_HEAD_MAX 16384      /* a longer request head gets 431                                */
#define DOOR_LINGER_S 2.0        /* reading after an error reply, before the close                */
#define DOOR_ACCEPT_BURST 64     /* accepts per wake-up, so waiting heads are not starved         */
#define DOOR_DRAIN_MAX (1 << 20) /* bytes read from one lingering connection per wake-up        */
#define DOOR_MUTE_S 0.02         /* POLLIN muted after a wake-up that brought no new head bytes   */

typedef enum { DOOR_HEAD, DOOR_LINGER } door_state;

typedef struct door_conn {
    int fd;
    struct sockaddr_in addr;
    double t0, deadline;
    double mute_until;        /* a wake-up without new bytes: no POLLIN until then      */
    int seen;                 /* head bytes seen at the last wake-up                    */
    door_state st;
} door_conn;

typedef struct door_ip {
    uint32_t ip;              /* network order */
    int n;                    /* requests in service */
} door_ip;

struct srv_door {
    srv_door_params p;
    int lfd, wake[2], port;
    pthread_t th;
    bool started;
    atomic_bool stop;
    /* the door thread's own */
    door_conn *conns;         /* [conn_max] connections waiting for their head or lingering */
    int n_conns;
    struct pollfd *pfd;       /* [conn_max + 2] */
    char *scratch;            /* [DOOR_HEAD_MAX] */
    /* shared with the HTTP library's threads (srv_door_closed), under mu */
    pthread_mutex_t mu;
    int in_service;
    door_ip *ips;             /* [conn_max + SRV_CONN_RESERVE] addresses with requests in service */
    int n_ips;
};

/* ======================================================================== */
/* Waiting connections                                                       */
/* ======================================================================== */

static void conn_drop(srv_door *d, int i) {
    close(d->conns[i].fd);
    d->conns[i] = d->conns[--d->n_conns];
}

/* Closes the oldest waiting connection of ip (any address when all is true). */
static bool evict_oldest(srv_door *d, uint32_t ip, bool all) {
    int best = -1;
    for (int i = 0; i < d->n_conns; i++)
        if ((all || d->conns[i].addr.sin_addr.s_addr == ip) && (best < 0 || d->conns[i].t0 < d->conns[best].t0)) best = i;
    if (best < 0) return false;
    conn_drop(d, best);
    return true;
}

static void set_lowat(int fd, int n) {
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &n, sizeof n);
}

enum { DRAIN_MORE = 1, DRAIN_EOF = 0, DRAIN_ERROR = -1 };

/* Reads and discards what the client has sent so far: DRAIN_MORE (it may send more),
 * DRAIN_EOF (it has stopped sending: a reply still reaches it) or DRAIN_ERROR. */
static int drain(srv_door *d, int fd) {
    for (size_t total = 0; total < DOOR_DRAIN_MAX;) {
        ssize_t k = recv(fd, d->scratch, DOOR_HEAD_MAX, MSG_DONTWAIT);
        if (k > 0) {
            total += (size_t)k;
            continue;
        }
        if (k == 0) return DRAIN_EOF;
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? DRAIN_MORE : DRAIN_ERROR;
    }
    return DRAIN_MORE;
}

static const char *reason(int code) {
    switch (code) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* Writes one error response (no body for HEAD); the socket's buffer takes it whole. */
static void send_reply(int fd, int code, const char *msg, bool no_body) {
    char *body = srv_error_json(code, msg);
    size_t bl = body ? strlen(body) : 0;
    char date[64] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %d %s\r\nDate: %s\r\nConnection: close\r\nContent-Type: application/json; "
                     "charset=utf-8\r\nAccess-Control-Allow-Origin: *\r\nContent-Length: %zu\r\n\r\n%s",
                     code, reason(code), date, bl, no_body || !body ? "" : body);
    free(body);
    if (n > 0) (void)send(fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* An error reply to waiting connection i, then the lingering close (a client that has stopped
 * sending gets the reply and the close at once). */
static void reply(srv_door *d, int i, int code, const char *msg, bool no_body) {
    door_conn *c = &d->conns[i];
    set_lowat(c->fd, 1);
    int dr = drain(d, c->fd);
    if (dr != DRAIN_ERROR) send_reply(c->fd, code, msg, no_body);
    if (dr != DRAIN_MORE) {
        conn_drop(d, i);
        return;
    }
    shutdown(c->fd, SHUT_WR);
    c->st = DOOR_LINGER;
    c->deadline = spex_now_s() + DOOR_LINGER_S;
    c->mute_until = 0;
}

/* ======================================================================== */
/* Places in service                                                         */
/* ======================================================================== */

static door_ip *ip_slot(srv_door *d, uint32_t ip, bool add) {
    for (int i = 0; i < d->n_ips; i++)
        if (d->ips[i].ip == ip) return &d->ips[i];
    if (!add || d->n_ips >= d->p.conn_max + SRV_CONN_RESERVE) return NULL;
    d->ips[d->n_ips] = (door_ip){.ip = ip};
    return &d->ips[d->n_ips++];
}

/* Takes a place in service for a request from ip; false when none is free for it. */
static bool take_place(srv_door *d, uint32_t ip, bool probe) {
    int extra = probe ? SRV_CONN_RESERVE : 0;
    pthread_mutex_lock(&d->mu);
    door_ip *s = ip_slot(d, ip, true);
    bool ok = s && d->in_service < d->p.conn_max + extra &&
              (d->p.conn_max_per_ip <= 0 || s->n < d->p.conn_max_per_ip + extra);
    if (ok) d->in_service++, s->n++;
    else if (s && s->n == 0) *s = d->ips[--d->n_ips];
    pthread_mutex_unlock(&d->mu);
    return ok;
}

void srv_door_closed(srv_door *d, uint32_t ip) {
    pthread_mutex_lock(&d->mu);
    door_ip *s = ip_slot(d, ip, false);
    if (s && s->n > 0) {
        d->in_service--;
        if (--s->n == 0) *s = d->ips[--d->n_ips];
    }
    pthread_mutex_unlock(&d->mu);
}

int srv_door_in_service(srv_door *d) {
    pthread_mutex_lock(&d->mu);
    int n = d->in_service;
    pthread_mutex_unlock(&d->mu);
    return n;
}

/* ======================================================================== */
/* The loop                                                                  */
/* ======================================================================== */

/* Connection i has a complete head of `end` bytes in d->scratch. */
static void on_head(srv_door *d, int i, size_t end) {
    srv_head h;
    char msg[160];
    int code = srv_head_check(d->scratch, end, d->p.body_max, &h, msg, sizeof msg);
    if (code) {
        reply(d, i, code, msg, h.is_head);
        return;
    }
    door_conn c = d->conns[i];
    if (!take_place(d, c.addr.sin_addr.s_addr, h.probe)) {
        snprintf(msg, sizeof msg, "the server is at its limit of %d requests in service%s", d->p.conn_max,
                 d->p.conn_max_per_ip > 0 ? " (or of --conn-max-per-ip for this address)" : "");
        reply(d, i, 503, msg, h.is_head);
        return;
    }
    d->conns[i] = d->conns[--d->n_conns];   /* the HTTP library owns the descriptor now */
    set_lowat(c.fd, 1);
    if (!d->p.handoff(d->p.user, c.fd, &c.addr)) srv_door_closed(d, c.addr.sin_addr.s_addr);
}

static void on_event(srv_door *d, int i, short rev) {
    door_conn *c = &d->conns[i];
    if (c->st == DOOR_LINGER) {
        if (drain(d, c->fd) != DRAIN_MORE) conn_drop(d, i);
        return;
    }
    ssize_t k = recv(c->fd, d->scratch, DOOR_HEAD_MAX, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        conn_drop(d, i);
        return;
    }
    if (k < 0) return;
    size_t end = srv_head_end(d->scratch, (size_t)k);
    if (end) {
        on_head(d, i, end);
    } else if (rev & (POLLRDHUP | POLLHUP | POLLERR)) {
        conn_drop(d, i);   /* the client stopped sending in the middle of its head */
    } else if (k >= DOOR_HEAD_MAX) {
        reply(d, i, 431, "the request head exceeds 16384 bytes", false);
    } else {
        /* Wake again only when more has arrived. Under memory pressure the kernel may report
         * POLLIN below the mark; a wake-up that brought nothing new then mutes the socket's
         * POLLIN for a moment instead of spinning. */
        if ((int)k == c->seen) c->mute_until = spex_now_s() + DOOR_MUTE_S;
        c->seen = (int)k;
        set_lowat(c->fd, (int)k + 1);
    }
}

static void on_deadline(srv_door *d, int i) {
    if (d->conns[i].st == DOOR_HEAD) reply(d, i, 408, "the request head was not complete in time", false);
    else conn_drop(d, i);
}

static void accept_some(srv_door *d) {
    for (int k = 0; k < DOOR_ACCEPT_BURST; k++) {
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        int fd = accept4(d->lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if ((errno == EMFILE || errno == ENFILE) && evict_oldest(d, 0, true)) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                usleep(50 * 1000);   /* out of descriptors or memory with nothing to give up: no busy loop */
            return;
        }
        if (al != sizeof a || a.sin_family != AF_INET) {
            close(fd);
            continue;
        }
        int waiting = 0;
        for (int i = 0; d->p.conn_max_per_ip > 0 && i < d->n_conns; i++) waiting += d->conns[i].addr.sin_addr.s_addr == a.sin_addr.s_addr;
        if (d->p.conn_max_per_ip > 0 && waiting >= d->p.conn_max_per_ip) evict_oldest(d, a.sin_addr.s_addr, false);
        if (d->n_conns >= d->p.conn_max) evict_oldest(d, 0, true);
        double now = spex_now_s();
        d->conns[d->n_conns++] = (door_conn){.fd = fd, .addr = a, .t0 = now, .deadline = now + d->p.header_timeout_s,
                                             .st = DOOR_HEAD};
    }
}

static void *door_main(void *arg) {
    srv_door *d = arg;
    while (!atomic_load(&d->stop)) {
        d->pfd[0] = (struct pollfd){.fd = d->lfd, .events = POLLIN};
        d->pfd[1] = (struct pollfd){.fd = d->wake[0], .events = POLLIN};
        double now = spex_now_s(), next = now + 1.0;
        for (int i = 0; i < d->n_conns; i++) {
            const door_conn *c = &d->conns[i];
            bool muted = c->mute_until > now;
            d->pfd[2 + i] = (struct pollfd){.fd = c->fd, .events = (short)(muted ? POLLRDHUP : POLLIN | POLLRDHUP)};
            if (c->deadline < next) next = c->deadline;
            if (muted && c->mute_until < next) next = c->mute_until;
        }
        int n = d->n_conns;
        int ms = next <= now ? 0 : (int)((next - now) * 1e3) + 1;
        if (poll(d->pfd, (nfds_t)(2 + n), ms) < 0 && errno != EINTR) {
            usleep(10 * 1000);
            continue;
        }
        if (d->pfd[1].revents) break;
        /* downwards: a removal moves the last entry (already visited) into i */
        for (int i = n - 1; i >= 0; i--)
            if (d->pfd[2 + i].revents) on_event(d, i, d->pfd[2 + i].revents);
        now = spex_now_s();
        for (int i = d->n_conns - 1; i >= 0; i--)
            if (d->conns[i].deadline <= now) on_deadline(d, i);
        if (d->pfd[0].revents & POLLIN) accept_some(d);
    }
    while (d->n_conns > 0) conn_drop(d, d->n_conns - 1);
    return NULL;
}

/* ======================================================================== */
/* Start and stop                                                            */
/* ======================================================================== */

spex_status srv_door_start(const srv_door_params *p, srv_door **out, spex_error *err) {
    *out = NULL;
    if (p->conn_max < 1 || p->conn_max_per_ip < 0 || !(p->header_timeout_s > 0) || !p->handoff)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "the connection limits must be positive");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    if (inet_pton(AF_INET, p->host, &a.sin_addr) != 1)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "--host '%s' is not an IPv4 address", p->host);
    srv_door *d = calloc(1, sizeof *d);
    if (!d) return spex_error_set(err, SPEX_ERR_NOMEM, "out of memory");
    d->p = *p;
    d->lfd = d->wake[0] = d->wake[1] = -1;
    atomic_init(&d->stop, false);
    pthread_mutex_init(&d->mu, NULL);
    d->conns = calloc((size_t)p->conn_max, sizeof *d->conns);
    d->pfd = calloc((size_t)p->conn_max + 2, sizeof *d->pfd);
    d->ips = calloc((size_t)p->conn_max + SRV_CONN_RESERVE, sizeof *d->ips);
    d->scratch = malloc(DOOR_HEAD_MAX);
    if (!d->conns || !d->pfd || !d->ips || !d->scratch) {
        srv_door_free(d);
        return spex_error_set(err, SPEX_ERR_NOMEM, "out of memory");
    }
    int one = 1;
    d->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (d->lfd < 0 || setsockopt(d->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(d->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(d->lfd, 4096) != 0 ||
        pipe2(d->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        spex_status st = spex_error_set(err, SPEX_ERR_IO, "cannot listen on %s:%d: %s", p->host, p->port, strerror(errno));
        srv_door_free(d);
        return st;
    }
    socklen_t al = sizeof a;
    d->port = getsockname(d->lfd, (struct sockaddr *)&a, &al) == 0 ? ntohs(a.sin_port) : p->port;
    *out = d;   /* before the thread: a handed connection may end (srv_door_closed) at once */
    if (pthread_create(&d->th, NULL, door_main, d) != 0) {
        *out = NULL;
        srv_door_free(d);
        return spex_error_set(err, SPEX_ERR_IO, "cannot start the accept thread");
    }
    d->started = true;
    return SPEX_OK;
}

int srv_door_port(const srv_door *d) { return d->port; }

void srv_door_stop(srv_door *d) {
    if (!d) return;
    if (d->started) {
        atomic_store(&d->stop, true);
        (void)!write(d->wake[1], "x", 1);
        pthread_join(d->th, NULL);
        d->started = false;
    }
    if (d->lfd >= 0) close(d->lfd);
    if (d->wake[0] >= 0) close(d->wake[0]), close(d->wake[1]);
    d->lfd = d->wake[0] = d->wake[1] = -1;
}

void srv_door_free(srv_door *d) {
    if (!d) return;
    srv_door_stop(d);
    pthread_mutex_destroy(&d->mu);
    free(d->conns);
    free(d->pfd);
    free(d->ips);
    free(d->scratch);
    free(d);
}
