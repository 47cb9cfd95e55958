/* server.c - memstored's HTTP front: the libmicrohttpd glue around
 * msd_handle (dispatch.c, which routes and answers without a socket).
 *
 * Owns: the MHD daemon (thread per connection, so a latency fault or a slow
 * request never blocks other clients; HTTP/1.1 keep-alive is MHD's default)
 * and one struct conn_req per request (request id, body buffer, start
 * time), freed by the completion callback.
 *
 * A request's life: the first access-handler call allocates conn_req;
 * upload calls append to the body (capped at MSD_BODY_MAX: the rest is
 * discarded and the answer is 413); the final call hands the request to
 * msd_handle with the connection's headers and query values behind a
 * struct msd_io, and sends its reply; a drop_after_commit fault returns
 * MHD_NO, which closes the connection with no response.
 * Every answer carries request-id: req_... and content-type JSON.
 *
 * The listening address must be a loopback one unless --allow-remote was
 * given (memstored has no TLS); server_start refuses it otherwise.
 *
 * Locking: none here.  Handlers serialise through the db mutex; faults.c
 * has its own leaf lock.  struct msd is read-only while serving. */
#include "msd.h"

#include <errno.h>
#include <microhttpd.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"

struct server {
    struct MHD_Daemon *d;
    struct msd *srv;
};

struct conn_req {
    char request_id[MSD_ID_MAX];
    char *body;
    size_t len, cap;
    bool too_large;
    struct timespec start;
};

/* struct msd_io over a libmicrohttpd connection. */
static const char *mhd_query(void *ctx, const char *key)
{
    return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, key);
}

struct hdr_scan {
    const char *name;
    const char **vals;
    size_t n, max;
};

static enum MHD_Result hdr_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    struct hdr_scan *h = cls;
    if (key && value && strcasecmp(key, h->name) == 0 && h->n < h->max)
        h->vals[h->n++] = value;
    return MHD_YES;
}

static size_t mhd_header(void *ctx, const char *name, const char **vals, size_t max)
{
    struct hdr_scan h = {name, vals, 0, max};
    MHD_get_connection_values(ctx, MHD_HEADER_KIND, hdr_iter, &h);
    return h.n;
}

static enum MHD_Result send_reply(struct MHD_Connection *c, struct reply *rp)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(rp->body_len, rp->body, MHD_RESPMEM_MUST_FREE);
    if (!r)
        return MHD_NO;
    rp->body = NULL; /* owned by the response now */
    MHD_add_response_header(r, "content-type", "application/json");
    MHD_add_response_header(r, "request-id", rp->request_id);
    if (rp->retry_after[0])
        MHD_add_response_header(r, "retry-after", rp->retry_after);
    if (rp->retry_after_ms[0])
        MHD_add_response_header(r, "retry-after-ms", rp->retry_after_ms);
    if (rp->no_retry)
        MHD_add_response_header(r, "x-should-retry", "false");
    enum MHD_Result ret = MHD_queue_response(c, rp->status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct server *s = cls;
    struct conn_req *cr = *con_cls;
    if (!cr) {
        cr = calloc(1, sizeof(*cr));
        if (!cr)
            return MHD_NO;
        db_new_id("req_", cr->request_id);
        clock_gettime(CLOCK_MONOTONIC, &cr->start);
        *con_cls = cr;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (cr->too_large || cr->len + n > MSD_BODY_MAX) {
            cr->too_large = true;
            return MHD_YES;
        }
        if (cr->len + n + 1 > cr->cap) {
            size_t cap = cr->cap ? cr->cap : 4096;
            while (cap < cr->len + n + 1)
                cap *= 2;
            char *b = realloc(cr->body, cap);
            if (!b)
                return MHD_NO;
            cr->body = b, cr->cap = cap;
        }
        memcpy(cr->body + cr->len, upload_data, n);
        cr->len += n;
        cr->body[cr->len] = '\0';
        return MHD_YES;
    }

    struct msd_io io = {.ctx = c, .query = mhd_query, .header = mhd_header};
    struct reply rp = {.status = 500, .request_id = cr->request_id};
    bool drop = false;
    msd_handle(s->srv, &io, method, url, cr->body, cr->len, cr->too_large, &rp, &drop);

    if (log_enabled(LOG_LVL_DEBUG)) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        char status[16], ms[32];
        snprintf(status, sizeof(status), "%u", drop ? 0 : rp.status);
        snprintf(ms, sizeof(ms), "%.1f",
                 (double)(now.tv_sec - cr->start.tv_sec) * 1e3 +
                     (double)(now.tv_nsec - cr->start.tv_nsec) / 1e6);
        log_debug("request", "method", method, "path", url, "status", status, "ms", ms,
                  "request_id", cr->request_id, "fault", drop ? "drop" : NULL);
    }
    if (drop) {
        reply_release(&rp);
        return MHD_NO; /* closes the connection without an answer */
    }
    enum MHD_Result ret = send_reply(c, &rp);
    reply_release(&rp);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct conn_req *cr = *con_cls;
    if (!cr)
        return;
    free(cr->body);
    free(cr);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral" /* libmicrohttpd's own format */
    vsnprintf(buf, sizeof(buf), fmt, ap);
#pragma GCC diagnostic pop
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    log_debug("libmicrohttpd", "detail", buf);
}

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

int server_start(struct msd *srv, const char *host, int port, struct server **out,
                 int *bound_port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int g = getaddrinfo(host, portstr, &hints, &ai);
    if (g) {
        log_error("cannot resolve the listen address", "host", host, "error", gai_strerror(g));
        return -EINVAL;
    }
    if (!is_loopback(ai->ai_addr)) {
        if (!srv->allow_remote) {
            log_error("refusing to listen on an address other hosts can reach: memstored has no "
                      "TLS, so API keys and memories would cross the network in clear text; "
                      "listen on 127.0.0.1 or ::1, or pass --allow-remote", "host", host);
            freeaddrinfo(ai);
            return -EPERM;
        }
        log_warn("listening on an address other hosts can reach (--allow-remote): memstored "
                 "has no TLS; API keys and memories cross the network in clear text",
                 "host", host);
    }
    struct server *s = calloc(1, sizeof(*s));
    if (!s) {
        freeaddrinfo(ai);
        return -ENOMEM;
    }
    s->srv = srv;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)300,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        log_error("cannot listen", "host", host, "port", portstr);
        free(s);
        return -EADDRINUSE;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info && info->port ? info->port : port;
    *out = s;
    return 0;
}

void server_stop(struct server **sp)
{
    if (!sp || !*sp)
        return;
    MHD_stop_daemon((*sp)->d);
    free(*sp);
    *sp = NULL;
}
