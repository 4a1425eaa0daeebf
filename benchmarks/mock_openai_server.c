/* A fast mock of an OpenAI-compatible streaming server, for benchmarking load clients (serving_client.py builds it
 * with `cc -O2` and starts it). One process, one epoll loop: it costs a few microseconds of CPU per streamed token,
 * so that on a small machine the client, not the mock, is what is measured.
 *
 * POST /v1/completions (and /v1/chat/completions) answers `max_tokens` (or `max_completion_tokens`) one-token SSE
 * chunks: the first TTFT ms after the request's body arrived, then one every ITL ms (each due time counted from the
 * first, so lateness does not add up; a 1 ms tick sends what is due), then a usage chunk and [DONE]. It records
 * what it actually did, per request: [its TTFT, its mean gap, tokens, arrival, end], ms, times on CLOCK_MONOTONIC
 * (Python's time.monotonic()). GET /stats returns them as JSON, POST /reset clears them, GET /health answers.
 *
 *   mock_openai_server PORT [TTFT_MS=20] [ITL_MS=10]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONN 8192
#define BUF 65536

typedef struct {
    int fd, active, n, sent, chat, prompt;
    size_t len;
    double arrived, first, last;
    char in[BUF];
} Conn;

static Conn *conns[MAX_CONN];
static Conn *active[MAX_CONN];
static int n_active;
static double ttft_ms = 20, itl_ms = 10;
static double *done;
static size_t n_done, cap_done;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void write_all(int fd, const char *p, size_t len) {   /* blocking for the rare long answer (stats) */
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) { usleep(100); continue; }
            return;
        }
        p += w; len -= (size_t)w;
    }
}

static void respond(int fd, const char *type, const char *body, size_t len) {
    char head[256];
    int h = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n", type, len);
    write_all(fd, head, (size_t)h);
    write_all(fd, body, len);
}

static void chunk(Conn *c, const char *data, int len) {
    char buf[1024];
    int h = snprintf(buf, sizeof buf, "%x\r\n%.*s\r\n", len, len, data);
    write_all(c->fd, buf, (size_t)h);
}

static long field(const char *body, const char *key, long fallback) {
    const char *p = strstr(body, key);
    if (!p) return fallback;
    p = strchr(p + strlen(key), ':');
    return p ? strtol(p + 1, NULL, 10) : fallback;
}

static int prompt_tokens(const char *body) {
    const char *p = strstr(body, "\"prompt\"");
    if (!p || !(p = strchr(p, ':'))) return 1;
    while (*++p == ' ') {}
    if (*p != '[') return 1;
    int n = 1;
    for (; *p && *p != ']'; p++) n += *p == ',';
    return n;
}

static void stats(int fd) {
    size_t cap = 64 + n_done * 5 * 24, len = 0;
    char *out = malloc(cap);
    len += (size_t)sprintf(out, "[");
    for (size_t i = 0; i < n_done; i++) {
        double *d = done + 5 * i;
        len += (size_t)sprintf(out + len, "%s[%.4f,%.4f,%.0f,%.4f,%.4f]", i ? "," : "", d[0], d[1], d[2], d[3], d[4]);
    }
    len += (size_t)sprintf(out + len, "]");
    respond(fd, "application/json", out, len);
    free(out);
}

static void finish(Conn *c) {
    char data[256];
    int len = snprintf(data, sizeof data, "data: {\"id\":\"cmpl-mock\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,"
                       "\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", c->prompt, c->n,
                       c->prompt + c->n);
    chunk(c, data, len);
    write_all(c->fd, "0\r\n\r\n", 5);
    if (n_done == cap_done) done = realloc(done, sizeof(double) * 5 * (cap_done = cap_done ? 2 * cap_done : 4096));
    double *d = done + 5 * n_done++;
    d[0] = c->first - c->arrived; d[1] = c->n > 1 ? (c->last - c->first) / (c->n - 1) : 0; d[2] = c->n;
    d[3] = c->arrived; d[4] = now_ms();
    c->active = 0;
}

static void tick(void) {   /* send every chunk that is due */
    double t = now_ms();
    for (int i = 0; i < n_active; i++) {
        Conn *c = active[i];
        while (c->active && c->arrived + ttft_ms + c->sent * itl_ms <= t) {
            char data[512];
            int len = c->chat
                ? snprintf(data, sizeof data, "data: {\"id\":\"cmpl-mock\",\"object\":\"chat.completion.chunk\","
                           "\"model\":\"mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" t\"},"
                           "\"finish_reason\":%s}]}\n\n", c->sent == c->n - 1 ? "\"length\"" : "null")
                : snprintf(data, sizeof data, "data: {\"id\":\"cmpl-mock\",\"object\":\"text_completion\","
                           "\"model\":\"mock\",\"choices\":[{\"index\":0,\"text\":\" t\",\"token_ids\":[%d],"
                           "\"finish_reason\":%s}]}\n\n", 100 + c->sent % 1000, c->sent == c->n - 1 ? "\"length\"" : "null");
            chunk(c, data, len);
            c->last = now_ms();
            if (c->sent++ == 0) c->first = c->last;
            if (c->sent == c->n) finish(c);
        }
        if (!c->active) active[i--] = active[--n_active];
    }
}

static void handle(Conn *c) {   /* every complete request in the buffer */
    for (;;) {
        char *end = memmem(c->in, c->len, "\r\n\r\n", 4);
        if (!end || c->active) return;
        *end = 0;
        long body_len = 0;
        char *cl = strcasestr(c->in, "content-length:");
        if (cl) body_len = strtol(cl + 15, NULL, 10);
        size_t total = (size_t)(end + 4 - c->in) + (size_t)body_len;
        if (total > c->len) { *end = '\r'; return; }
        char *body = end + 4, saved = c->in[total < BUF ? total : BUF - 1];
        c->in[total < BUF ? total : BUF - 1] = 0;
        if (!strncmp(c->in, "GET /stats", 10)) stats(c->fd);
        else if (!strncmp(c->in, "POST /reset", 11)) { n_done = 0; respond(c->fd, "application/json", "[]", 2); }
        else if (!strncmp(c->in, "GET ", 4)) {
            const char *models = "{\"object\":\"list\",\"data\":[{\"id\":\"mock\",\"object\":\"model\"}]}";
            respond(c->fd, "application/json", models, strlen(models));
        } else {
            c->n = (int)field(body, "\"max_tokens\"", field(body, "\"max_completion_tokens\"", 16));
            c->n = c->n < 1 ? 1 : c->n;
            c->chat = strstr(body, "\"messages\"") != NULL;
            c->prompt = prompt_tokens(body);
            c->arrived = now_ms(); c->sent = 0; c->active = 1;
            active[n_active++] = c;
            const char *head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n";
            write_all(c->fd, head, strlen(head));
        }
        c->in[total < BUF ? total : BUF - 1] = saved;
        memmove(c->in, c->in + total, c->len - total);
        c->len -= total;
    }
}

static void drop(int ep, Conn *c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    for (int i = 0; i < n_active; i++) if (active[i] == c) active[i--] = active[--n_active];
    conns[c->fd] = NULL;
    free(c);
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 8000;
    if (argc > 2) ttft_ms = atof(argv[2]);
    if (argc > 3) itl_ms = atof(argv[3]);
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
                            .sin_addr.s_addr = htonl(0x7f000001)};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4096)) { perror("bind"); return 1; }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}, evs[512];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, 512, n_active ? 1 : 100);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int cfd;
                while ((cfd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (cfd >= MAX_CONN) { close(cfd); continue; }
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conns[cfd] = calloc(1, sizeof(Conn));
                    conns[cfd]->fd = cfd;
                    struct epoll_event ce = {.events = EPOLLIN, .data.fd = cfd};
                    epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ce);
                }
                continue;
            }
            Conn *c = conns[fd];
            if (!c) continue;
            ssize_t r = read(fd, c->in + c->len, BUF - 1 - c->len);
            if (r <= 0) { if (r == 0 || (errno != EAGAIN && errno != EINTR)) drop(ep, c); continue; }
            c->len += (size_t)r;
            handle(c);
        }
        tick();
    }
}
