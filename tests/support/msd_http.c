/* msd_http.c - the HTTP side of the test support library: one request at a
 * time (t_http and its wrappers), many at once (t_api_multi), list walking,
 * JSON lookups and the error-envelope check.
 *
 * Owns: one CURL easy handle per thread (thread-local, reset between calls
 * so the kept-alive connection is reused; never freed, the test process
 * exits).  curl_global_init runs once through pthread_once before the first
 * handle.  Response bodies are capped at 64 MiB.  Everything a tresp holds
 * is malloc'd and freed by tresp_free(). */
#include "msd.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sha256.h"

#define BODY_CAP (64u << 20)
#define REQ_TIMEOUT_MS 15000L

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static __thread CURL *tl_easy;
static __thread bool tl_fresh;
/* Its destructor cleans up a thread's easy handle when the thread ends
 * (its value is tl_easy), so no handle outlives its thread. */
static pthread_key_t easy_key;

void t_http_fresh(bool on)
{
    tl_fresh = on;
}

static void easy_free(void *e)
{
    curl_easy_cleanup(e);
}

static void global_init(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    pthread_key_create(&easy_key, easy_free);
}

struct buf {
    char *p;
    size_t len, cap;
    bool overflow;
};

static bool buf_add(struct buf *b, const char *data, size_t n)
{
    if (b->len + n + 1 > BODY_CAP) {
        b->overflow = true;
        return false;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np)
            return false;
        b->p = np, b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

struct xfer {
    struct buf body, hdr;
    struct tresp *r;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct xfer *x = arg;
    return buf_add(&x->body, data, size * nmemb) ? size * nmemb : 0;
}

/* Copies the value of header line `line` into out if its name is `name`. */
static void header_value(const char *line, size_t n, const char *name, char *out, size_t outsz)
{
    size_t nl = strlen(name);
    if (n <= nl + 1 || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return;
    const char *v = line + nl + 1;
    const char *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    size_t len = (size_t)(end - v);
    if (len >= outsz)
        len = outsz - 1;
    memcpy(out, v, len);
    out[len] = '\0';
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    struct xfer *x = arg;
    size_t n = size * nmemb;
    /* A new status line (after 100 Continue) starts the header set again. */
    if (n > 5 && strncmp(data, "HTTP/", 5) == 0)
        x->hdr.len = 0;
    buf_add(&x->hdr, data, n);
    header_value(data, n, "retry-after", x->r->retry_after, sizeof x->r->retry_after);
    header_value(data, n, "retry-after-ms", x->r->retry_after_ms, sizeof x->r->retry_after_ms);
    header_value(data, n, "request-id", x->r->request_id, sizeof x->r->request_id);
    header_value(data, n, "x-should-retry", x->r->should_retry, sizeof x->r->should_retry);
    header_value(data, n, "content-type", x->r->content_type, sizeof x->r->content_type);
    return n;
}

static int curl_errno(CURLcode c)
{
    switch (c) {
    case CURLE_OK:
        return 0;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    default:
        return -EIO;
    }
}

/* Sets up easy handle e for one request; *hl gets the header list to free
 * after the transfer. */
static int setup(CURL *e, struct xfer *x, const char *method, const char *url, const char *body,
                 size_t body_len, const char *const *headers, struct curl_slist **hl)
{
    struct curl_slist *l = NULL;
    bool has_ct = false;

    for (size_t i = 0; headers && headers[i]; i++) {
        if (strncasecmp(headers[i], "content-type:", 13) == 0)
            has_ct = true;
        l = curl_slist_append(l, headers[i]);
    }
    if (body && !has_ct)
        l = curl_slist_append(l, "Content-Type: application/json");
    l = curl_slist_append(l, "Expect:");
    *hl = l;

    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, REQ_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, l);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    if (strcmp(method, "GET") == 0 && !body) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body_len : 0));
        curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body ? body : "");
        if (strcmp(method, "POST") != 0)
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    }
    return 0;
}

/* Moves the collected body and headers into r and parses the JSON. */
static void finish(CURL *e, struct xfer *x)
{
    struct tresp *r = x->r;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
    if (!x->body.p)
        buf_add(&x->body, "", 0);
    r->body = x->body.p;
    r->headers = x->hdr.p;
    x->body.p = x->hdr.p = NULL;
    if (r->body && r->body[0])
        r->json = cJSON_Parse(r->body);
}

int t_http_n(const char *method, const char *url, const char *body, size_t body_len,
             const char *const *headers, struct tresp *r)
{
    struct xfer x = {.r = r};
    struct curl_slist *hl = NULL;

    memset(r, 0, sizeof *r);
    pthread_once(&global_once, global_init);
    if (!tl_easy) {
        tl_easy = curl_easy_init();
        if (!tl_easy)
            return -ENOMEM;
        pthread_setspecific(easy_key, tl_easy);
    } else {
        curl_easy_reset(tl_easy);
    }
    setup(tl_easy, &x, method, url, body, body_len, headers, &hl);
    if (tl_fresh) {
        curl_easy_setopt(tl_easy, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(tl_easy, CURLOPT_FORBID_REUSE, 1L);
    }
    CURLcode c = curl_easy_perform(tl_easy);
    curl_slist_free_all(hl);
    if (c != CURLE_OK) {
        free(x.body.p);
        free(x.hdr.p);
        return curl_errno(c);
    }
    finish(tl_easy, &x);
    return 0;
}

int t_http(const char *method, const char *url, const char *body, const char *const *headers,
           struct tresp *r)
{
    return t_http_n(method, url, body, body ? strlen(body) : 0, headers, r);
}

/* 0, or -ENAMETOOLONG when the URL does not fit (no request is made). */
static int make_url(char *out, size_t n, const struct msd *m, const char *prefix,
                    const char *path)
{
    size_t pl = strlen(prefix);
    bool has = strncmp(path, prefix, pl) == 0 && (path[pl] == '/' || path[pl] == '\0' ||
                                                   path[pl] == '?');
    int len = snprintf(out, n, "%s%s%s", m->url, has ? "" : prefix, path);
    return len < 0 || (size_t)len >= n ? -ENAMETOOLONG : 0;
}

int t_api_h(const struct msd *m, const char *method, const char *path, const char *body,
            const char *const *extra_headers, struct tresp *r)
{
    char url[4096];
    const char *h[32] = {"x-api-key: test-key", "anthropic-beta: agent-memory-2026-07-22",
                         "anthropic-version: 2023-06-01", "Accept: application/json"};
    size_t n = 4;
    for (size_t i = 0; extra_headers && extra_headers[i] && n < 31; i++)
        h[n++] = extra_headers[i];
    h[n] = NULL;
    int rc = make_url(url, sizeof url, m, "/v1", path);
    return rc ? rc : t_http(method, url, body, h, r);
}

int t_api(const struct msd *m, const char *method, const char *path, const char *body,
          struct tresp *r)
{
    return t_api_h(m, method, path, body, NULL, r);
}

int t_admin(const struct msd *m, const char *method, const char *path, const char *body,
            struct tresp *r)
{
    char url[4096];
    const char *h[] = {"x-admin-key: admin-key", NULL};
    int rc = make_url(url, sizeof url, m, "/admin", path);
    return rc ? rc : t_http(method, url, body, h, r);
}

void tresp_free(struct tresp *r)
{
    if (!r)
        return;
    free(r->body);
    free(r->headers);
    cJSON_Delete(r->json);
    r->body = r->headers = NULL;
    r->json = NULL;
}

long t_req(const struct msd *m, const char *method, const char *body, struct tresp *r,
           const char *path_fmt, ...)
{
    char path[4096];
    va_list ap;
    va_start(ap, path_fmt);
    vsnprintf(path, sizeof path, path_fmt, ap);
    va_end(ap);
    int rc = t_api(m, method, path, body, r);
    return rc < 0 ? rc : r->status;
}

char *t_id(const struct tresp *r)
{
    const char *id = tj_str(r->json, "id");
    return (r->status == 200 && id) ? strdup(id) : NULL;
}

char *t_create_store(const struct msd *m, const char *name)
{
    struct tresp r;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    int rc = t_api(m, "POST", "/v1/memory_stores", body, &r);
    free(body);
    char *id = rc == 0 ? t_id(&r) : NULL;
    tresp_free(&r);
    return id;
}

char *t_create_memory(const struct msd *m, const char *store, const char *path,
                      const char *content)
{
    struct tresp r;
    char *body = tj_memory_body(path, content);
    long st = t_req(m, "POST", body, &r, "/v1/memory_stores/%s/memories", store);
    free(body);
    char *id = st == 200 ? t_id(&r) : NULL;
    tresp_free(&r);
    return id;
}

long t_route_count(const struct msd *m, const char *route)
{
    struct tresp r;
    long n = -1;
    if (t_admin(m, "GET", "/admin/stats", NULL, &r) == 0 && r.status == 200) {
        const cJSON *routes = tj_get(r.json, "routes");
        const cJSON *v = routes ? cJSON_GetObjectItemCaseSensitive(routes, route) : NULL;
        n = cJSON_IsNumber(v) ? (long)v->valuedouble : 0;
    }
    tresp_free(&r);
    return n;
}

int t_api_multi(const struct msd *m, const char *method, const char *path,
                const char *const *bodies, size_t n, int parallel, long *status, char **ids)
{
    char url[4096];
    const char *h[] = {"x-api-key: test-key", "anthropic-beta: agent-memory-2026-07-22", NULL};
    int rc = 0;

    /* Every slot has a value whatever happens below: a request never
     * sent (an early error) reads as cancelled, with no id. */
    for (size_t i = 0; i < n; i++) {
        status[i] = -ECANCELED;
        if (ids)
            ids[i] = NULL;
    }
    pthread_once(&global_once, global_init);
    rc = make_url(url, sizeof url, m, "/v1", path);
    if (rc)
        return rc;
    if (parallel < 1)
        parallel = 1;
    if (parallel > 64)
        parallel = 64;
    CURLM *mh = curl_multi_init();
    struct xfer *xs = calloc(n ? n : 1, sizeof *xs);
    struct tresp *rs = calloc(n ? n : 1, sizeof *rs);
    struct curl_slist **hls = calloc(n ? n : 1, sizeof *hls);
    CURL **es = calloc((size_t)parallel, sizeof *es);
    if (!mh || !xs || !rs || !hls || !es) {
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < parallel; i++)
        es[i] = curl_easy_init();
    curl_multi_setopt(mh, CURLMOPT_MAX_HOST_CONNECTIONS, (long)parallel);

    size_t next = 0, done = 0;
    int free_slots[256];
    int nfree = 0;
    for (int i = parallel - 1; i >= 0 && nfree < 256; i--)
        free_slots[nfree++] = i;
    while (done < n) {
        while (next < n && nfree > 0) {
            int slot = free_slots[--nfree];
            CURL *e = es[slot];
            curl_easy_reset(e);
            xs[next].r = &rs[next];
            const char *b = bodies ? bodies[next] : NULL;
            setup(e, &xs[next], method, url, b, b ? strlen(b) : 0, h, &hls[next]);
            curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)(uintptr_t)(next * 256 + (size_t)slot));
            curl_multi_add_handle(mh, e);
            next++;
        }
        int running = 0;
        curl_multi_perform(mh, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(mh, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            char *priv = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
            size_t idx = (size_t)(uintptr_t)priv / 256;
            int slot = (int)((size_t)(uintptr_t)priv % 256);
            if (msg->data.result == CURLE_OK) {
                finish(msg->easy_handle, &xs[idx]);
                status[idx] = rs[idx].status;
                if (ids)
                    ids[idx] = t_id(&rs[idx]);
            } else {
                status[idx] = curl_errno(msg->data.result);
                if (ids)
                    ids[idx] = NULL;
                free(xs[idx].body.p);
                free(xs[idx].hdr.p);
            }
            tresp_free(&rs[idx]);
            curl_slist_free_all(hls[idx]);
            hls[idx] = NULL;
            curl_multi_remove_handle(mh, msg->easy_handle);
            free_slots[nfree++] = slot;
            done++;
        }
        if (done < n)
            curl_multi_poll(mh, NULL, 0, 100, NULL);
    }
out:
    if (es) {
        for (int i = 0; i < parallel; i++)
            if (es[i])
                curl_easy_cleanup(es[i]);
    }
    if (mh)
        curl_multi_cleanup(mh);
    free(es);
    free(hls);
    free(rs);
    free(xs);
    return rc;
}

cJSON *t_list_all(const struct msd *m, const char *path_and_query, int *pages, long *err)
{
    cJSON *all = cJSON_CreateArray();
    char *cursor = NULL;
    int np = 0;
    *err = 0;
    for (;;) {
        char path[4096];
        struct tresp r;
        if (cursor)
            snprintf(path, sizeof path, "%s%spage=%s", path_and_query,
                     strchr(path_and_query, '?') ? "&" : "?", cursor);
        else
            snprintf(path, sizeof path, "%s", path_and_query);
        int rc = t_api(m, "GET", path, NULL, &r);
        free(cursor);
        cursor = NULL;
        if (rc < 0 || r.status != 200 || !cJSON_IsArray(tj_get(r.json, "data"))) {
            *err = rc < 0 ? rc : (r.status != 200 ? r.status : -EPROTO);
            tresp_free(&r);
            cJSON_Delete(all);
            return NULL;
        }
        np++;
        const cJSON *it;
        cJSON_ArrayForEach(it, tj_get(r.json, "data"))
            cJSON_AddItemToArray(all, cJSON_Duplicate(it, 1));
        const char *next = tj_str(r.json, "next_page");
        if (next && *next)
            cursor = strdup(next);
        tresp_free(&r);
        if (!cursor || np > 10000)
            break;
    }
    if (pages)
        *pages = np;
    return all;
}

const cJSON *tj_get(const cJSON *root, const char *dotted)
{
    char key[128];
    const cJSON *cur = root;
    const char *p = dotted;
    while (cur && *p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len >= sizeof key)
            return NULL;
        memcpy(key, p, len);
        key[len] = '\0';
        cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, key) : NULL;
        p += len + (dot ? 1 : 0);
    }
    return cur;
}

const char *tj_str(const cJSON *root, const char *dotted)
{
    const cJSON *v = tj_get(root, dotted);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

double tj_num(const cJSON *root, const char *dotted)
{
    const cJSON *v = tj_get(root, dotted);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

bool tj_is_null(const cJSON *root, const char *dotted)
{
    return cJSON_IsNull(tj_get(root, dotted));
}

char *tj_quote(const char *s)
{
    cJSON *v = cJSON_CreateString(s);
    char *out = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    return out;
}

char *tj_memory_body(const char *path, const char *content)
{
    cJSON *o = cJSON_CreateObject();
    if (path)
        cJSON_AddStringToObject(o, "path", path);
    if (content)
        cJSON_AddStringToObject(o, "content", content);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

char *t_memory_reply_fault(const char *store, const char *asked_id, int count, const char *id,
                           const char *path, const char *content, const char *version_id)
{
    cJSON *fault = cJSON_CreateObject();
    cJSON_AddStringToObject(fault, "action", "reply");
    cJSON_AddStringToObject(fault, "method", "GET");
    cJSON_AddNumberToObject(fault, "count", count);
    char at[300];
    snprintf(at, sizeof(at), "/v1/memory_stores/%s/memories/%s", store, asked_id);
    cJSON_AddStringToObject(fault, "path", at);
    cJSON *body = cJSON_AddObjectToObject(fault, "body");
    cJSON_AddStringToObject(body, "type", "memory");
    cJSON_AddStringToObject(body, "id", id);
    cJSON_AddStringToObject(body, "path", path);
    cJSON_AddStringToObject(body, "content", content);
    cJSON_AddStringToObject(body, "content_sha256", t_sha(content));
    cJSON_AddNumberToObject(body, "content_size_bytes", (double)strlen(content));
    cJSON_AddStringToObject(body, "memory_version_id", version_id);
    cJSON_AddStringToObject(body, "created_at", "2026-12-01T00:00:00Z");
    cJSON_AddStringToObject(body, "updated_at", "2026-12-01T00:00:00Z");
    char *text = cJSON_PrintUnformatted(fault);
    cJSON_Delete(fault);
    return text;
}

const char *t_sha(const char *s)
{
    static __thread char hex[SHA256_HEX_LEN + 1];
    sha256_hex(s, strlen(s), hex);
    return hex;
}

const char *t_check_error(const struct tresp *r, long status, const char *type)
{
    static __thread char why[256];
    if (r->status != status) {
        snprintf(why, sizeof why, "expected HTTP %ld, got %ld", status, r->status);
        return why;
    }
    if (!r->json)
        return "error body is not JSON";
    const char *t = tj_str(r->json, "type");
    if (!t || strcmp(t, "error") != 0)
        return "envelope type is not \"error\"";
    const char *et = tj_str(r->json, "error.type");
    if (!et || (type && strcmp(et, type) != 0)) {
        snprintf(why, sizeof why, "expected error.type %s, got %s", type ? type : "(any)",
                 et ? et : "(none)");
        return why;
    }
    const char *rid = tj_str(r->json, "request_id");
    if (!rid || strncmp(rid, "req_", 4) != 0)
        return "request_id missing or not req_-prefixed in the error body";
    if (strcmp(rid, r->request_id) != 0) {
        snprintf(why, sizeof why, "request_id %.60s differs from the request-id header '%.60s'",
                 rid, r->request_id);
        return why;
    }
    return NULL;
}
