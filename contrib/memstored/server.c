/* server.c - memstored's HTTP front: libmicrohttpd glue and dispatch.
 *
 * Owns: the MHD daemon (thread per connection, so a latency fault or a slow
 * request never blocks other clients; HTTP/1.1 keep-alive is MHD's default)
 * and one struct conn_req per request (request id, body buffer, start
 * time), freed by the completion callback.
 *
 * A request's life: the first access-handler call allocates conn_req;
 * upload calls append to the body (capped at MSD_BODY_MAX: the rest is
 * discarded and the answer is 413); the final call dispatches:
 *   /v1/...    count in stats -> first matching fault (status: answer the
 *              fault's error and touch nothing; latency: sleep) -> auth ->
 *              anthropic-beta rule -> size cap -> route handler; a
 *              drop_after_commit fault returns MHD_NO after the handler has
 *              committed, which closes the connection with no response; a
 *              drop fault does the same without serving; a reply fault
 *              answers its canned status and body without serving;
 *   /admin/... x-admin-key (404 when no admin key was configured) -> faults.c
 * Every answer carries request-id: req_... and content-type JSON.
 *
 * Locking: none here.  Handlers serialise through the db mutex; faults.c
 * has its own leaf lock.  struct msd is read-only while serving. */
#include "msd.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
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

struct route {
    const char *method;
    const char *tmpl; /* path template; "{id}" matches one segment */
    handler_fn fn;
};

static const struct route routes[] = {
    {"POST", "/v1/memory_stores", stores_create},
    {"GET", "/v1/memory_stores", stores_list},
    {"GET", "/v1/memory_stores/{id}", stores_get},
    {"POST", "/v1/memory_stores/{id}", stores_update},
    {"POST", "/v1/memory_stores/{id}/archive", stores_archive},
    {"DELETE", "/v1/memory_stores/{id}", stores_delete},
    {"POST", "/v1/memory_stores/{id}/memories", memories_create},
    {"GET", "/v1/memory_stores/{id}/memories", memories_list},
    {"GET", "/v1/memory_stores/{id}/memories/{id}", memories_get},
    {"POST", "/v1/memory_stores/{id}/memories/{id}", memories_update},
    {"DELETE", "/v1/memory_stores/{id}/memories/{id}", memories_delete},
    {"GET", "/v1/memory_stores/{id}/memory_versions", versions_list},
    {"GET", "/v1/memory_stores/{id}/memory_versions/{id}", versions_get},
    {"POST", "/v1/memory_stores/{id}/memory_versions/{id}/redact", versions_redact},
};

/* Matches path (split in place into segs) against tmpl; fills ids. */
static bool tmpl_match(const char *tmpl, char *const *segs, int nseg, const char **ids)
{
    int i = 0, k = 0;
    const char *t = tmpl + 1;
    while (*t) {
        const char *end = strchr(t, '/');
        size_t n = end ? (size_t)(end - t) : strlen(t);
        if (i >= nseg)
            return false;
        if (n == 4 && memcmp(t, "{id}", 4) == 0) {
            if (!segs[i][0] || k >= 2)
                return false;
            ids[k++] = segs[i];
        } else if (strlen(segs[i]) != n || memcmp(segs[i], t, n) != 0) {
            return false;
        }
        i++;
        t += n + (end ? 1 : 0);
    }
    return i == nseg;
}

static const struct route *route_find(const char *method, char *path, const char **ids)
{
    char *segs[8];
    int nseg = 0;
    char *p = path + 1;
    for (;;) {
        if (nseg == 8)
            return NULL;
        segs[nseg++] = p;
        char *slash = strchr(p, '/');
        if (!slash)
            break;
        *slash = '\0';
        p = slash + 1;
    }
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (strcmp(routes[i].method, method) == 0 && tmpl_match(routes[i].tmpl, segs, nseg, ids))
            return &routes[i];
    return NULL;
}

static bool authorized(struct msd *srv, struct MHD_Connection *c, const char **key_out)
{
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (!key) {
        const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "authorization");
        if (a && strncasecmp(a, "Bearer ", 7) == 0) {
            key = a + 7;
            while (*key == ' ')
                key++;
        }
    }
    if (!key)
        return false;
    for (size_t i = 0; i < srv->n_api_keys; i++) {
        if (strcmp(srv->api_keys[i], key) == 0) {
            *key_out = srv->api_keys[i];
            return true;
        }
    }
    return false;
}

struct beta_scan {
    int agent_memory, managed_agents;
};

static enum MHD_Result beta_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    struct beta_scan *b = cls;
    if (!key || strcasecmp(key, "anthropic-beta") != 0 || !value)
        return MHD_YES;
    const char *p = value;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *start = p;
        while (*p && *p != ',')
            p++;
        const char *end = p;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        size_t n = (size_t)(end - start);
        if (n == 23 && memcmp(start, "agent-memory-2026-07-22", 23) == 0)
            b->agent_memory = 1;
        else if (n == 25 && memcmp(start, "managed-agents-2026-04-01", 25) == 0)
            b->managed_agents = 1;
    }
    return MHD_YES;
}

static void dispatch_v1(struct server *s, struct MHD_Connection *c, struct conn_req *cr,
                        struct req *rq, struct reply *rp, bool *drop)
{
    struct msd *srv = s->srv;
    char *copy = strdup(rq->path);
    if (!copy) {
        reply_errno(rp, -ENOMEM);
        return;
    }
    const struct route *rt = route_find(rq->method, copy, rq->ids);
    faults_count(srv->faults, rq->method, rt ? rt->tmpl : NULL);

    struct fault_hit hit;
    faults_match(srv->faults, rq->method, rq->path, &hit);
    *drop = false;
    if (hit.action == FAULT_CUT) {
        *drop = true;
        goto out;
    }
    if (hit.action == FAULT_REPLY) {
        rp->status = hit.status;
        rp->body = hit.body; /* the reply owns it now */
        rp->body_len = strlen(hit.body);
        hit.body = NULL;
        goto out;
    }
    if (hit.action == FAULT_STATUS) {
        reply_error(rp, hit.status, reply_error_type(hit.status), "injected fault: status %u",
                    hit.status);
        memcpy(rp->retry_after, hit.retry_after, sizeof(rp->retry_after));
        memcpy(rp->retry_after_ms, hit.retry_after_ms, sizeof(rp->retry_after_ms));
        goto out;
    }
    if (hit.action == FAULT_LATENCY && hit.latency_ms > 0) {
        struct timespec ts = {hit.latency_ms / 1000, (hit.latency_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) && errno == EINTR)
            ;
    }
    const char *key = NULL;
    if (!authorized(srv, c, &key)) {
        reply_error(rp, 401, "authentication_error",
                    "a valid x-api-key or Authorization: Bearer header is required");
        goto out;
    }
    char key_id[MSD_ID_MAX];
    api_key_id(key, key_id);
    rq->actor_key_id = key_id;
    struct beta_scan b = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, beta_iter, &b);
    if (b.agent_memory + b.managed_agents != 1) {
        reply_invalid(rp, b.agent_memory ? "send only one of the anthropic-beta values "
                                           "agent-memory-2026-07-22 and managed-agents-2026-04-01"
                                         : "the anthropic-beta header must contain "
                                           "agent-memory-2026-07-22 or managed-agents-2026-04-01");
        goto out;
    }
    if (cr->too_large) {
        reply_error(rp, 413, "request_too_large", "the request body is larger than %d bytes",
                    MSD_BODY_MAX);
        goto out;
    }
    if (!rt) {
        reply_error(rp, 404, "not_found_error", "no route %.16s %.200s", rq->method, rq->path);
        goto out;
    }
    rt->fn(rq, rp);
    rq->actor_key_id = NULL;
    *drop = hit.action == FAULT_DROP;
out:
    fault_hit_release(&hit);
    free(copy);
}

static void dispatch_admin(struct server *s, struct MHD_Connection *c, struct conn_req *cr,
                           struct req *rq, struct reply *rp)
{
    const char *admin = s->srv->admin_key;
    if (!admin) {
        reply_error(rp, 404, "not_found_error", "the admin API is disabled");
        return;
    }
    const char *k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-admin-key");
    if (!k || strcmp(k, admin) != 0) {
        reply_error(rp, 401, "authentication_error", "a valid x-admin-key header is required");
        return;
    }
    if (cr->too_large) {
        reply_error(rp, 413, "request_too_large", "the request body is too large");
        return;
    }
    faults_admin(s->srv, rq, rp);
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

    struct req rq = {.srv = s->srv, .conn = c, .method = method, .path = url,
                     .body = cr->body ? cr->body : "", .body_len = cr->len};
    struct reply rp = {.status = 500, .request_id = cr->request_id};
    bool drop = false;
    if (strcmp(url, "/v1") == 0 || strncmp(url, "/v1/", 4) == 0)
        dispatch_v1(s, c, cr, &rq, &rp, &drop);
    else if (strncmp(url, "/admin/", 7) == 0)
        dispatch_admin(s, c, cr, &rq, &rp);
    else
        reply_error(&rp, 404, "not_found_error", "no route %.16s %.200s", method, url);
    if (!rp.body)
        reply_errno(&rp, -EIO);

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
    vsnprintf(buf, sizeof(buf), fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    log_debug("libmicrohttpd", "detail", buf);
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
