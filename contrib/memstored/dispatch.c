/* dispatch.c - what memstored does with one request, without a socket:
 * routing, the fault list, authentication, the anthropic-beta rule, the
 * size cap, then the route's handler (msd_handle).
 *
 * server.c calls it with the headers and query values of a libmicrohttpd
 * connection behind struct msd_io; the fuzz target tests/fuzz/fuzz_msd.c
 * calls it with requests made from fuzz input.  Either way a handler sees
 * only struct req.
 *
 *   /v1/...    count in stats -> first matching fault of those that act
 *              before serving (status: answer the fault's error and touch
 *              nothing; latency: sleep; pages, on a memories list only:
 *              answer a made-up list page) -> auth -> anthropic-beta rule
 *              -> size cap -> route -> the first matching drop_after_commit
 *              fault, taken only now, sets *drop -> the route's handler;
 *   /admin/... x-admin-key (404 when no admin key was configured) -> faults.c
 *
 * Keys are compared in constant time (key_eq): the time an answer takes
 * says nothing about how much of a guessed key was right.
 * Locking: none here.  Handlers serialise through the db mutex; faults.c
 * has its own leaf lock.  struct msd is read-only while serving. */
#include "msd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sha256.h"

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

bool key_eq(const char *given, const char *known)
{
    /* Digests of both: equal lengths whatever the key lengths, and a loop
     * that looks at every byte whatever it finds. */
    char a[SHA256_HEX_LEN + 1], b[SHA256_HEX_LEN + 1];
    sha256_hex(given, strlen(given), a);
    sha256_hex(known, strlen(known), b);
    volatile unsigned char diff = 0;
    for (size_t i = 0; i < SHA256_HEX_LEN; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

static const char *header(const struct msd_io *io, const char *name)
{
    const char *v = NULL;
    return io->header(io->ctx, name, &v, 1) ? v : NULL;
}

/* Whether key is one of the server's (every key is compared, found or
 * not); *key_out gets it. */
static bool known_key(struct msd *srv, const char *key, const char **key_out)
{
    bool ok = false;
    for (size_t i = 0; key && i < srv->n_api_keys; i++) {
        if (key_eq(key, srv->api_keys[i]) && !ok) {
            *key_out = srv->api_keys[i];
            ok = true;
        }
    }
    return ok;
}

/* Either header may carry the key (the contract: both forms are
 * accepted): a request with a stale x-api-key and a valid Bearer token,
 * as a proxy or ANTHROPIC_CUSTOM_HEADERS may make, is authorised. */
static bool authorized(struct msd *srv, const struct msd_io *io, const char **key_out)
{
    const char *bearer = NULL, *a = header(io, "authorization");
    if (a && strncasecmp(a, "Bearer ", 7) == 0) {
        bearer = a + 7;
        while (*bearer == ' ')
            bearer++;
    }
    bool by_key = known_key(srv, header(io, "x-api-key"), key_out);
    return known_key(srv, bearer, key_out) || by_key;
}

/* The anthropic-beta rule: exactly one of the two accepted values among
 * every value of every anthropic-beta header. */
static void beta_scan(const char *value, int *agent_memory, int *managed_agents)
{
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
            *agent_memory = 1;
        else if (n == 25 && memcmp(start, "managed-agents-2026-04-01", 25) == 0)
            *managed_agents = 1;
    }
}

static void dispatch_v1(struct msd *srv, struct req *rq, struct reply *rp, bool too_large,
                        bool *drop)
{
    char *copy = strdup(rq->path);
    if (!copy) {
        reply_errno(rp, -ENOMEM);
        return;
    }
    const struct route *rt = route_find(rq->method, copy, rq->ids);
    faults_count(srv->faults, rq->method, rt ? rt->tmpl : NULL);

    /* Faults that act before the request is served; a pages fault only
     * on a memories list (another request would use it up unanswered). */
    unsigned before = FAULT_KIND(FAULT_STATUS) | FAULT_KIND(FAULT_LATENCY) |
                      FAULT_KIND(FAULT_CUT) | FAULT_KIND(FAULT_REPLY);
    if (rt && rt->fn == memories_list)
        before |= FAULT_KIND(FAULT_PAGES);
    struct fault_hit hit;
    faults_match(srv->faults, rq, rq->method, rq->path, before, &hit);
    *drop = false;
    if (hit.action == FAULT_CUT) {
        *drop = true; /* a dropped connection: nothing served */
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
    if (hit.action == FAULT_LATENCY && hit.latency_ms > 0)
        faults_sleep(srv->faults, hit.latency_ms);
    const char *key = NULL;
    if (!authorized(srv, rq->io, &key)) {
        reply_error(rp, 401, "authentication_error",
                    "a valid x-api-key or Authorization: Bearer header is required");
        goto out;
    }
    char key_id[MSD_ID_MAX];
    api_key_id(key, key_id);
    rq->actor_key_id = key_id;
    int agent_memory = 0, managed_agents = 0;
    const char *betas[16];
    size_t nb = rq->io->header(rq->io->ctx, "anthropic-beta", betas, 16);
    for (size_t i = 0; i < nb; i++)
        beta_scan(betas[i], &agent_memory, &managed_agents);
    if (agent_memory + managed_agents != 1) {
        reply_invalid(rp, agent_memory ? "send only one of the anthropic-beta values "
                                         "agent-memory-2026-07-22 and managed-agents-2026-04-01"
                                       : "the anthropic-beta header must contain "
                                         "agent-memory-2026-07-22 or managed-agents-2026-04-01");
        goto out;
    }
    if (too_large) {
        reply_error(rp, 413, "request_too_large", "the request body is larger than %d bytes",
                    MSD_BODY_MAX);
        goto out;
    }
    if (!rt) {
        reply_error(rp, 404, "not_found_error", "no route %.16s %.200s", rq->method, rq->path);
        goto out;
    }
    if (hit.action == FAULT_PAGES) {
        faults_pages(rq, &hit, rp);
    } else {
        /* A drop_after_commit fault is taken only by a request that is
         * served (one refused above would use it up and drop nothing). */
        if (hit.action == FAULT_NONE || hit.action == FAULT_LATENCY) {
            fault_hit_release(&hit);
            faults_match(srv->faults, rq, rq->method, rq->path, FAULT_KIND(FAULT_DROP), &hit);
        }
        rt->fn(rq, rp);
        *drop = hit.action == FAULT_DROP;
    }
    rq->actor_key_id = NULL;
out:
    fault_hit_release(&hit);
    free(copy);
}

static void dispatch_admin(struct msd *srv, struct req *rq, struct reply *rp, bool too_large)
{
    const char *admin = srv->admin_key;
    if (!admin) {
        reply_error(rp, 404, "not_found_error", "the admin API is disabled");
        return;
    }
    const char *k = header(rq->io, "x-admin-key");
    if (!k || !key_eq(k, admin)) {
        reply_error(rp, 401, "authentication_error", "a valid x-admin-key header is required");
        return;
    }
    if (too_large) {
        reply_error(rp, 413, "request_too_large", "the request body is too large");
        return;
    }
    faults_admin(srv, rq, rp);
}

void msd_handle(struct msd *srv, const struct msd_io *io, const char *method, const char *url,
                const char *body, size_t body_len, bool too_large, struct reply *rp,
                bool *drop)
{
    struct req rq = {.srv = srv, .io = io, .method = method, .path = url,
                     .body = body ? body : "", .body_len = body ? body_len : 0};
    *drop = false;
    if (strcmp(url, "/v1") == 0 || strncmp(url, "/v1/", 4) == 0)
        dispatch_v1(srv, &rq, rp, too_large, drop);
    else if (strncmp(url, "/admin/", 7) == 0)
        dispatch_admin(srv, &rq, rp, too_large);
    else
        reply_error(rp, 404, "not_found_error", "no route %.16s %.200s", method, url);
    if (!rp->body)
        reply_errno(rp, -EIO);
}
