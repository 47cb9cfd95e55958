/* faults.c - the admin API: request statistics and injected faults.
 *
 * Owns: struct faults, i.e. the counters behind GET /admin/stats and the
 * ordered fault list behind POST/DELETE /admin/faults (team CONTRACTS.md).
 *
 * Locking: faults.lock guards every field.  It is a leaf lock: nothing
 * else is taken while it is held, and it is never held across a sleep or
 * a database call (faults_match copies the fault out before returning).
 *
 * Fault life cycle: added at the end of the list with count N (0 = until
 * cleared); the first fault whose method and fnmatch path glob match a /v1
 * request applies and its count goes down by one; at zero it is removed.
 * DELETE /admin/faults empties the list. */
#include "msd.h"

#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sha256.h"

struct fault {
    int id;
    struct fault_hit hit; /* hit.body owned by the fault */
    long count;     /* left; meaningless when forever */
    bool forever;   /* count 0 at creation */
    char method[16]; /* "" = any */
    char *glob;     /* NULL = any path; malloc'd */
    char *query;    /* NULL = any query; else "KEY=VALUE" that must be in it */
};

struct route_count {
    char *key; /* "METHOD template", malloc'd */
    long n;
};

struct faults {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* latency sleeps: the server is stopping */
    bool stopping;       /* guarded by lock */
    struct fault *v; /* guarded by lock */
    size_t n, cap;
    int next_id;
    long total, writes;
    struct route_count *routes;
    size_t nroutes, routes_cap;
};

int faults_new(struct faults **out)
{
    struct faults *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    pthread_mutex_init(&f->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->wake, &ca);
    pthread_condattr_destroy(&ca);
    f->next_id = 1;
    *out = f;
    return 0;
}

static void clear_faults(struct faults *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->v[i].glob);
        free(f->v[i].query);
        free(f->v[i].hit.body);
    }
    f->n = 0;
}

void fault_hit_release(struct fault_hit *hit)
{
    free(hit->body);
    hit->body = NULL;
}

static void clear_stats(struct faults *f)
{
    for (size_t i = 0; i < f->nroutes; i++)
        free(f->routes[i].key);
    f->nroutes = 0;
    f->total = f->writes = 0;
}

void faults_free(struct faults **fp)
{
    if (!fp || !*fp)
        return;
    struct faults *f = *fp;
    clear_faults(f);
    clear_stats(f);
    free(f->v);
    free(f->routes);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->wake);
    free(f);
    *fp = NULL;
}

void faults_count(struct faults *f, const char *method, const char *route)
{
    char key[128];
    /* A request no route takes is "other" whatever its method: a client
     * inventing methods must not grow the table without end. */
    if (route)
        snprintf(key, sizeof(key), "%s %s", method, route);
    else
        snprintf(key, sizeof(key), "other");
    pthread_mutex_lock(&f->lock);
    f->total++;
    if (strcmp(method, "POST") == 0 || strcmp(method, "DELETE") == 0)
        f->writes++;
    size_t i;
    for (i = 0; i < f->nroutes; i++)
        if (strcmp(f->routes[i].key, key) == 0)
            break;
    if (i == f->nroutes) {
        if (f->nroutes == f->routes_cap) {
            size_t cap = f->routes_cap ? f->routes_cap * 2 : 16;
            struct route_count *r = realloc(f->routes, cap * sizeof(*r));
            if (!r)
                goto out; /* the total still counts; the route is lost (ENOMEM) */
            f->routes = r, f->routes_cap = cap;
        }
        f->routes[i].key = strdup(key);
        if (!f->routes[i].key)
            goto out;
        f->routes[i].n = 0;
        f->nroutes++;
    }
    f->routes[i].n++;
out:
    pthread_mutex_unlock(&f->lock);
}

/* Whether the request's query has KEY=VALUE (kv). */
static bool query_has(const struct req *rq, const char *kv)
{
    const char *eq = strchr(kv, '=');
    char key[128];
    size_t kl = eq ? (size_t)(eq - kv) : strlen(kv);
    if (!rq || kl >= sizeof(key))
        return false;
    memcpy(key, kv, kl);
    key[kl] = '\0';
    const char *v = req_query(rq, key);
    return v && (!eq || strcmp(v, eq + 1) == 0);
}

void faults_sleep(struct faults *f, long ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&f->lock);
    while (!f->stopping && pthread_cond_timedwait(&f->wake, &f->lock, &until) != ETIMEDOUT)
        ;
    pthread_mutex_unlock(&f->lock);
}

void faults_stop(struct faults *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    f->stopping = true;
    pthread_cond_broadcast(&f->wake);
    pthread_mutex_unlock(&f->lock);
}

void faults_match(struct faults *f, const struct req *rq, const char *method, const char *path,
                  unsigned kinds, struct fault_hit *hit)
{
    memset(hit, 0, sizeof(*hit));
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n; i++) {
        struct fault *ft = &f->v[i];
        if (!(kinds & FAULT_KIND(ft->hit.action)))
            continue;
        if (ft->method[0] && strcasecmp(ft->method, method) != 0)
            continue;
        if (ft->glob && fnmatch(ft->glob, path, 0) != 0)
            continue;
        if (ft->query && !query_has(rq, ft->query))
            continue;
        *hit = ft->hit;
        hit->body = ft->hit.body ? strdup(ft->hit.body) : NULL;
        if (ft->hit.body && !hit->body) /* ENOMEM: answer 500 rather than a wrong body */
            *hit = (struct fault_hit){.action = FAULT_STATUS, .status = 500};
        if (!ft->forever && --ft->count <= 0) {
            free(ft->glob);
            free(ft->query);
            free(ft->hit.body);
            memmove(&f->v[i], &f->v[i + 1], (f->n - i - 1) * sizeof(*ft));
            f->n--;
        }
        break;
    }
    pthread_mutex_unlock(&f->lock);
}

/* A non-negative number or numeric string as header text. */
static int header_number(struct reply *rp, const cJSON *body, const char *key, char out[32])
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
    out[0] = '\0';
    if (!v || cJSON_IsNull(v))
        return 0;
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && isfinite(v->valuedouble)) {
        if (v->valuedouble == floor(v->valuedouble) && v->valuedouble < 1e15)
            snprintf(out, 32, "%.0f", v->valuedouble);
        else
            snprintf(out, 32, "%g", v->valuedouble);
        return 0;
    }
    if (cJSON_IsString(v) && v->valuestring && *v->valuestring &&
        strlen(v->valuestring) < 32 && !has_control_chars(v->valuestring)) {
        snprintf(out, 32, "%s", v->valuestring);
        return 0;
    }
    reply_invalid(rp, "%s must be a non-negative number", key);
    return -EINVAL;
}

/* An integer field in [lo, hi]; *out keeps dflt when absent. */
static int int_field(struct reply *rp, const cJSON *body, const char *key, long lo, long hi,
                     long *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi) {
        reply_invalid(rp, "%s must be an integer from %ld to %ld", key, lo, hi);
        return -EINVAL;
    }
    *out = (long)v->valuedouble;
    return 0;
}

/* A hex string's bytes, NUL-terminated (malloc'd); NULL when it is not
 * pairs of hex digits, or holds a 00 byte. */
static char *hex_bytes(const cJSON *v)
{
    const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
    size_t n = s ? strlen(s) : 1;
    char *out = n % 2 ? NULL : malloc(n / 2 + 1);
    for (size_t i = 0; out && i < n / 2; i++) {
        unsigned x;
        if (sscanf(s + 2 * i, "%2x", &x) != 1 || !x || !strchr("0123456789abcdefABCDEF", s[2 * i]) ||
            !strchr("0123456789abcdefABCDEF", s[2 * i + 1])) {
            free(out);
            return NULL;
        }
        out[i] = (char)x;
    }
    if (out)
        out[n / 2] = '\0';
    return out;
}

static void add_fault(struct faults *f, struct req *rq, struct reply *rp)
{
    cJSON *body = NULL;
    const char *action, *method, *glob, *query;
    struct fault ft = {0};
    long status = 0, latency = 0, count = 1, cycle = 0, items = 0;
    if (body_object(rq, rp, false, &body) || jfield_str(rp, body, "action", &action) ||
        jfield_str(rp, body, "method", &method) || jfield_str(rp, body, "path", &glob) ||
        jfield_str(rp, body, "query", &query) ||
        int_field(rp, body, "status", 100, 599, &status) ||
        int_field(rp, body, "latency_ms", 0, 600000, &latency) ||
        int_field(rp, body, "count", 0, 1000000000, &count) ||
        int_field(rp, body, "cycle", 0, 1000000, &cycle) ||
        int_field(rp, body, "items", 0, 100, &items) ||
        header_number(rp, body, "retry_after", ft.hit.retry_after) ||
        header_number(rp, body, "retry_after_ms", ft.hit.retry_after_ms))
        goto out;
    if (!action) {
        reply_invalid(rp, "action is required");
        goto out;
    }
    if (strcmp(action, "status") == 0) {
        ft.hit.action = FAULT_STATUS;
        if (!status) {
            reply_invalid(rp, "a status fault needs status");
            goto out;
        }
    } else if (strcmp(action, "latency") == 0) {
        ft.hit.action = FAULT_LATENCY;
    } else if (strcmp(action, "drop_after_commit") == 0) {
        ft.hit.action = FAULT_DROP;
    } else if (strcmp(action, "drop") == 0) {
        ft.hit.action = FAULT_CUT;
    } else if (strcmp(action, "pages") == 0) {
        ft.hit.action = FAULT_PAGES;
        const cJSON *bad = cJSON_GetObjectItemCaseSensitive(body, "malformed");
        if (bad && !cJSON_IsBool(bad)) {
            reply_invalid(rp, "malformed must be true or false");
            goto out;
        }
        ft.hit.malformed = cJSON_IsTrue(bad);
    } else if (strcmp(action, "reply") == 0) {
        ft.hit.action = FAULT_REPLY;
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(body, "body");
        const cJSON *hex = cJSON_GetObjectItemCaseSensitive(body, "body_hex");
        if (!b && !hex) {
            reply_invalid(rp, "a reply fault needs body (any JSON value) or body_hex");
            goto out;
        }
        if (!status)
            status = 200;
        if (hex) {
            /* Bytes no JSON request can carry (not UTF-8): what a broken or
             * hostile server may answer. */
            if (!(ft.hit.body = hex_bytes(hex))) {
                reply_invalid(rp, "body_hex must be an even number of hex digits, no 00 byte");
                goto out;
            }
        } else if (!(ft.hit.body = cJSON_PrintUnformatted(b))) {
            reply_errno(rp, -ENOMEM);
            goto out;
        }
    } else {
        reply_invalid(rp, "action must be status, latency, drop_after_commit, drop, reply or "
                          "pages");
        goto out;
    }
    if (method && strlen(method) >= sizeof(ft.method)) {
        reply_invalid(rp, "method is too long");
        free(ft.hit.body);
        goto out;
    }
    ft.hit.status = (unsigned)status;
    ft.hit.latency_ms = latency;
    ft.hit.cycle = cycle;
    ft.hit.items = items;
    ft.count = count;
    ft.forever = count == 0;
    snprintf(ft.method, sizeof(ft.method), "%s", method ? method : "");
    if ((glob && !(ft.glob = strdup(glob))) || (query && !(ft.query = strdup(query)))) {
        free(ft.glob);
        free(ft.hit.body);
        reply_errno(rp, -ENOMEM);
        goto out;
    }
    pthread_mutex_lock(&f->lock);
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        struct fault *v = realloc(f->v, cap * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&f->lock);
            free(ft.glob);
            free(ft.query);
            free(ft.hit.body);
            reply_errno(rp, -ENOMEM);
            goto out;
        }
        f->v = v, f->cap = cap;
    }
    ft.id = f->next_id++;
    f->v[f->n++] = ft;
    pthread_mutex_unlock(&f->lock);
    char id[32];
    snprintf(id, sizeof(id), "fault_%d", ft.id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    reply_json(rp, 200, o);
out:
    cJSON_Delete(body);
}

void faults_pages(const struct req *rq, const struct fault_hit *hit, struct reply *rp)
{
    const char *page = req_query(rq, "page");
    long k = 0;
    if (page && strncmp(page, "page_loop", 9) == 0)
        k = strtol(page + 9, NULL, 10);
    if (k < 0)
        k = 0;
    long next = hit->cycle > 0 ? (k + 1) % hit->cycle : k + 1;
    char sha[SHA256_HEX_LEN + 1];
    sha256_hex("", 0, sha);
    cJSON *o = cJSON_CreateObject();
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (long i = 0; data && i < hit->items; i++) {
        char id[64], ver[64], path[128];
        snprintf(id, sizeof(id), "mem_loop%ldx%ld", k, i);
        snprintf(ver, sizeof(ver), "memver_loop%ldx%ld", k, i);
        /* Long paths: each page weighs as much as a real page can. */
        snprintf(path, sizeof(path), "/loop/page-%08ld/memory-%03ld-%0*d.md", k, i, 60, 0);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "memory");
        cJSON_AddStringToObject(m, "id", id);
        cJSON_AddStringToObject(m, "memory_version_id", ver);
        cJSON_AddStringToObject(m, "path", path);
        cJSON_AddStringToObject(m, "content_sha256", hit->malformed ? "not-a-sha256" : sha);
        cJSON_AddNumberToObject(m, "content_size_bytes", 0);
        cJSON_AddItemToArray(data, m);
    }
    char cur[64];
    snprintf(cur, sizeof(cur), "page_loop%ld", next);
    cJSON_AddStringToObject(o, "next_page", cur);
    reply_json(rp, 200, o);
}

static void stats(struct faults *f, struct reply *rp)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *routes = cJSON_CreateObject();
    pthread_mutex_lock(&f->lock);
    cJSON_AddNumberToObject(o, "total", (double)f->total);
    cJSON_AddNumberToObject(o, "writes", (double)f->writes);
    for (size_t i = 0; i < f->nroutes; i++)
        cJSON_AddNumberToObject(routes, f->routes[i].key, (double)f->routes[i].n);
    pthread_mutex_unlock(&f->lock);
    if (!cJSON_AddItemToObject(o, "routes", routes))
        cJSON_Delete(routes);
    reply_json(rp, 200, o);
}

/* POST /admin/clock {"offset_ms": N, "freeze": bool}: the clock of new
 * writes (db_clock_set). */
static void set_clock(struct req *rq, struct reply *rp)
{
    cJSON *body = NULL;
    long offset = 0;
    if (body_object(rq, rp, true, &body) ||
        int_field(rp, body, "offset_ms", -86400000L, 86400000L, &offset))
        goto out;
    const cJSON *fz = cJSON_GetObjectItemCaseSensitive(body, "freeze");
    if (fz && !cJSON_IsBool(fz) && !cJSON_IsNull(fz)) {
        reply_invalid(rp, "freeze must be true or false");
        goto out;
    }
    bool freeze = cJSON_IsTrue(fz);
    db_clock_set(offset, freeze);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "offset_ms", (double)offset);
    cJSON_AddBoolToObject(o, "freeze", freeze);
    reply_json(rp, 200, o);
out:
    cJSON_Delete(body);
}

void faults_admin(struct msd *srv, struct req *rq, struct reply *rp)
{
    struct faults *f = srv->faults;
    const char *p = rq->path + strlen("/admin");
    const char *m = rq->method;
    if (strcmp(p, "/stats") == 0 && strcmp(m, "GET") == 0) {
        stats(f, rp);
    } else if (strcmp(p, "/stats/reset") == 0 && strcmp(m, "POST") == 0) {
        pthread_mutex_lock(&f->lock);
        clear_stats(f);
        pthread_mutex_unlock(&f->lock);
        reply_json(rp, 200, cJSON_CreateObject());
    } else if (strcmp(p, "/faults") == 0 && strcmp(m, "POST") == 0) {
        add_fault(f, rq, rp);
    } else if (strcmp(p, "/clock") == 0 && strcmp(m, "POST") == 0) {
        set_clock(rq, rp);
    } else if (strcmp(p, "/faults") == 0 && strcmp(m, "DELETE") == 0) {
        pthread_mutex_lock(&f->lock);
        clear_faults(f);
        pthread_mutex_unlock(&f->lock);
        reply_json(rp, 200, cJSON_CreateObject());
    } else {
        reply_error(rp, 404, "not_found_error", "no admin route %.16s %.100s", m, rq->path);
    }
}
