/* api.c - the Memory Stores API endpoints (contract: api.h) as requests on
 * the shared HTTP client.
 *
 * Owns: building request paths (every id and query value percent-encoded,
 * empty/"."/".." ids refused before sending) and bodies (JSON written by
 * hand with explicit lengths, so content may hold any UTF-8 including NUL),
 * and turning answers into errnos (api_errno: the one place where
 * error.type refines a status).  Parsing lives in api_parse.c.
 *
 * A listing is bounded whatever the server answers: a cursor seen before
 * in the same listing (A, B, A...) ends it as malformed, a cursor longer
 * than LIST_CURSOR_MAX too, and so does passing the memory budget
 * (api_set_list_budget; what the items and the cursors seen weigh) or
 * LIST_PAGES_MAX pages, each with a clear error instead of paging on.
 *
 * State: the list budget only (set once before any thread lists).
 * Thread-safe as http_run is.  A malformed 2xx answer is logged here (one
 * warn line naming the endpoint and the reason). */
#include "api.h"

#include "api_int.h"
#include "json.h"
#include "log.h"
#include "rules.h"
#include "sha256.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_PAGES_MAX 100000 /* 10 M memories: a server that never ends */
#define LIST_CURSOR_MAX 4096
#define LIST_BUDGET_DEFAULT ((size_t)256 << 20)

static size_t list_budget = LIST_BUDGET_DEFAULT;

void api_set_list_budget(size_t bytes)
{
    __atomic_store_n(&list_budget, bytes ? bytes : LIST_BUDGET_DEFAULT, __ATOMIC_RELAXED);
}

/* The cursors one listing has used: open addressing on an FNV-1a hash,
 * kept at most half full.  Owned by one api_memories_list_prefix call. */
struct seen {
    char **slot;
    size_t cap, n;
    size_t bytes; /* what the strings and the table weigh */
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* 1 when cur was seen before, 0 when it was added, -ENOMEM. */
static int seen_add(struct seen *t, const char *cur)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char **v = calloc(cap, sizeof(*v));
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->slot[i])
                continue;
            size_t j = fnv1a(t->slot[i]) & (cap - 1);
            while (v[j])
                j = (j + 1) & (cap - 1);
            v[j] = t->slot[i];
        }
        free(t->slot);
        t->bytes += (cap - t->cap) * sizeof(*v);
        t->slot = v;
        t->cap = cap;
    }
    size_t j = fnv1a(cur) & (t->cap - 1);
    for (; t->slot[j]; j = (j + 1) & (t->cap - 1))
        if (strcmp(t->slot[j], cur) == 0)
            return 1;
    if (!(t->slot[j] = strdup(cur)))
        return -ENOMEM;
    t->n++;
    t->bytes += strlen(cur) + 1;
    return 0;
}

static void seen_free(struct seen *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->slot[i]);
    free(t->slot);
    memset(t, 0, sizeof(*t));
}

/* What the items from index `from` on weigh in memory. */
static size_t items_weight(const struct api_list *l, size_t from)
{
    size_t w = 0;
    for (size_t i = from; i < l->n; i++) {
        const struct api_memory *m = &l->items[i];
        w += sizeof(*m) + strlen(m->id) + strlen(m->path) + strlen(m->version_id) + 3;
    }
    return w;
}

int api_errno(long status, const char *type)
{
    if (status == 409 || status == 412) {
        if (type && strcmp(type, "memory_precondition_failed_error") == 0)
            return -ESTALE;
        if (type && strcmp(type, "memory_path_conflict_error") == 0)
            return -EEXIST;
        return status == 412 ? -ESTALE : -EBUSY;
    }
    return http_status_errno(status);
}

bool api_id_ok(const char *id)
{
    return id && *id && strcmp(id, ".") != 0 && strcmp(id, "..") != 0 && strlen(id) <= 255;
}

/* "/v1/memory_stores/{store}/memories[/{id}]" into b. */
static void mem_path(struct jbuf *b, const char *store, const char *id)
{
    jbuf_adds(b, "/v1/memory_stores/");
    jbuf_add_pct(b, store);
    jbuf_adds(b, "/memories");
    if (id) {
        jbuf_adds(b, "/");
        jbuf_add_pct(b, id);
    }
}

/* Fills e (when not NULL) and returns the errno of a finished call. */
int api_call_result(const struct http_call *call, struct api_error *e)
{
    if (!call->err)
        return 0;
    struct api_error tmp = {0}, *pe = e ? e : &tmp;
    if (call->status)
        apip_error(call->status, call->resp, call->resp_len, call->request_id, pe);
    else
        api_error_clear(pe);
    int rc = call->err;
    if (call->status >= 400 && rc == http_status_errno(call->status))
        rc = api_errno(call->status, pe->type);
    api_error_clear(&tmp);
    return rc;
}

/* Fills e (when not NULL) for an answer refused on its content. */
static int refuse(const struct http_call *call, const char *type, const char *what,
                  struct api_error *e)
{
    if (e) {
        api_error_clear(e);
        e->status = call->status;
        snprintf(e->type, sizeof(e->type), "%s", type);
        snprintf(e->message, sizeof(e->message), "%s", what);
        snprintf(e->request_id, sizeof(e->request_id), "%s", call->request_id);
    }
    return -EPROTO;
}

int api_malformed(const struct http_call *call, const char *what, struct api_error *e)
{
    char path[256];
    size_t n = strcspn(call->path, "?");
    snprintf(path, sizeof(path), "%.*s", (int)(n < 255 ? n : 255), call->path);
    log_warn("malformed response from the server", "method", call->method, "path", path,
             "reason", what, "request_id", call->request_id);
    return refuse(call, "malformed_response", what, e);
}

int api_store_get(struct http_client *c, const char *store_id, struct api_store *out,
                  struct api_error *e)
{
    memset(out, 0, sizeof(*out));
    if (e)
        api_error_clear(e);
    if (!api_id_ok(store_id))
        return -EINVAL;
    struct jbuf p = {0};
    jbuf_adds(&p, "/v1/memory_stores/");
    jbuf_add_pct(&p, store_id);
    if (p.oom)
        return -ENOMEM;
    struct http_call call = {.method = "GET", .path = p.p};
    http_run(c, &call, 1);
    int rc = api_call_result(&call, e);
    if (!rc) {
        const char *what;
        rc = apip_store_doc(call.resp, call.resp_len, out, &what);
        if (rc == -EPROTO)
            api_malformed(&call, what, e);
    }
    http_call_clear(&call);
    jbuf_release(&p);
    return rc;
}

int api_memories_list(struct http_client *c, const char *store_id, struct api_list *out,
                      struct api_error *e)
{
    return api_memories_list_prefix(c, store_id, NULL, out, e);
}

int api_memories_list_prefix(struct http_client *c, const char *store_id,
                             const char *path_prefix, struct api_list *out,
                             struct api_error *e)
{
    return api_memories_list_progress(c, store_id, path_prefix, out, e, NULL, NULL);
}

int api_memories_list_progress(struct http_client *c, const char *store_id,
                               const char *path_prefix, struct api_list *out,
                               struct api_error *e, api_progress_fn progress, void *arg)
{
    memset(out, 0, sizeof(*out));
    if (e)
        api_error_clear(e);
    if (!api_id_ok(store_id) || (path_prefix && (!*path_prefix || path_prefix[0] != '/')))
        return -EINVAL;
    char *cursor = NULL;
    struct seen seen = {0};
    size_t budget = __atomic_load_n(&list_budget, __ATOMIC_RELAXED), weight = 0;
    int rc = 0;
    for (int page = 0;; page++) {
        if (page >= LIST_PAGES_MAX) {
            rc = -EPROTO;
            log_warn("memory listing never ends; giving up", "memory_store_id", store_id);
            break;
        }
        struct jbuf p = {0};
        mem_path(&p, store_id, NULL);
        jbuf_adds(&p, "?view=basic&limit=100");
        if (path_prefix) {
            jbuf_adds(&p, "&path_prefix=");
            jbuf_add_pct(&p, path_prefix);
        }
        if (cursor) {
            jbuf_adds(&p, "&page=");
            jbuf_add_pct(&p, cursor);
        }
        if (p.oom) {
            jbuf_release(&p);
            rc = -ENOMEM;
            break;
        }
        struct http_call call = {.method = "GET", .path = p.p};
        http_run(c, &call, 1);
        rc = api_call_result(&call, e);
        char *next = NULL;
        size_t before = out->n;
        if (!rc) {
            const char *what;
            rc = apip_memory_page(call.resp, call.resp_len, out, &next, &what);
            if (rc == -EPROTO)
                api_malformed(&call, what, e);
        }
        if (!rc && next && strlen(next) > LIST_CURSOR_MAX)
            rc = api_malformed(&call, "next_page is longer than 4096 bytes", e);
        if (!rc && next) {
            /* Every cursor is remembered as it is handed out: one handed
             * out again means the pages go round for ever. */
            int dup = seen_add(&seen, next);
            if (dup < 0)
                rc = dup;
            else if (dup)
                rc = api_malformed(&call, "next_page repeats a cursor already used by this listing",
                               e);
        }
        weight += items_weight(out, before);
        if (!rc && weight + seen.bytes > budget) {
            char msg[200];
            snprintf(msg, sizeof(msg), "the listing passed its memory budget of %zu MiB after "
                     "%zu memories in %d pages", budget >> 20, out->n, page + 1);
            log_warn("memory listing too large; giving up", "memory_store_id", store_id,
                     "detail", msg);
            refuse(&call, "listing_too_large", msg, e);
            rc = -EFBIG;
        }
        http_call_clear(&call);
        jbuf_release(&p);
        free(cursor);
        cursor = next;
        if (!rc && progress)
            progress(arg, out->n, cursor == NULL);
        if (rc || !cursor)
            break;
    }
    free(cursor);
    seen_free(&seen);
    if (rc)
        api_list_free(out);
    return rc;
}

int api_memories_fetch(struct http_client *c, const char *store_id, struct api_fetch *f,
                       size_t n)
{
    for (size_t i = 0; i < n; i++) {
        f[i].err = 0;
        memset(&f[i].mem, 0, sizeof(f[i].mem));
        memset(&f[i].e, 0, sizeof(f[i].e));
    }
    if (n == 0)
        return 0;
    if (!api_id_ok(store_id))
        return -EINVAL;
    struct http_call *calls = calloc(n, sizeof(*calls));
    struct jbuf *paths = calloc(n, sizeof(*paths));
    size_t *idx = calloc(n, sizeof(*idx));
    size_t m = 0;
    int rc = 0;
    if (!calls || !paths || !idx) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!api_id_ok(f[i].memory_id)) {
            f[i].err = -EINVAL;
            continue;
        }
        mem_path(&paths[m], store_id, f[i].memory_id);
        jbuf_adds(&paths[m], "?view=full");
        if (paths[m].oom) {
            rc = -ENOMEM;
            goto out;
        }
        calls[m] = (struct http_call){.method = "GET", .path = paths[m].p};
        idx[m++] = i;
    }
    http_run(c, calls, m); /* each call carries its own result */
    rc = 0;
    for (size_t k = 0; k < m; k++) {
        struct api_fetch *it = &f[idx[k]];
        it->err = api_call_result(&calls[k], &it->e);
        if (!it->err) {
            const char *what;
            it->err = apip_memory_doc(calls[k].resp, calls[k].resp_len, true, &it->mem, &what);
            if (it->err == -EPROTO)
                api_malformed(&calls[k], what, &it->e);
        }
    }
    for (size_t i = 0; i < n && !rc; i++)
        rc = f[i].err;
out:
    for (size_t k = 0; calls && paths && k < n; k++) {
        http_call_clear(&calls[k]);
        jbuf_release(&paths[k]);
    }
    free(calls);
    free(paths);
    free(idx);
    return rc;
}

/* Builds the request of one write; returns 0, or the error that ends the
 * item without sending it. */
static int build_write(const char *store_id, const struct api_write *w, struct jbuf *path,
                       struct jbuf *body, const char **method)
{
    const char *content = w->content ? w->content : "";
    switch (w->op) {
    case API_WRITE_CREATE:
        if (!w->path || !rules_utf8_valid(w->path, strlen(w->path)))
            return -EINVAL;
        if (!rules_utf8_valid(content, w->content ? w->content_len : 0))
            return -EILSEQ;
        mem_path(path, store_id, NULL);
        jbuf_adds(body, "{\"path\":");
        jbuf_add_json_str(body, w->path, strlen(w->path));
        jbuf_adds(body, ",\"content\":");
        jbuf_add_json_str(body, content, w->content ? w->content_len : 0);
        jbuf_adds(body, "}");
        *method = "POST";
        break;
    case API_WRITE_UPDATE:
        if (!api_id_ok(w->memory_id) || (w->sha && !sha256_is_hex(w->sha)) ||
            (w->path && !rules_utf8_valid(w->path, strlen(w->path))))
            return -EINVAL;
        if (w->content && !rules_utf8_valid(w->content, w->content_len))
            return -EILSEQ;
        mem_path(path, store_id, w->memory_id);
        jbuf_adds(body, "{");
        const char *sep = "";
        if (w->content) {
            jbuf_adds(body, "\"content\":");
            jbuf_add_json_str(body, w->content, w->content_len);
            sep = ",";
        }
        if (w->path) {
            jbuf_adds(body, sep);
            jbuf_adds(body, "\"path\":");
            jbuf_add_json_str(body, w->path, strlen(w->path));
            sep = ",";
        }
        if (w->sha) {
            jbuf_adds(body, sep);
            jbuf_adds(body, "\"precondition\":{\"type\":\"content_sha256\",\"content_sha256\":");
            jbuf_add_json_cstr(body, w->sha);
            jbuf_adds(body, "}");
        }
        jbuf_adds(body, "}");
        *method = "POST";
        break;
    case API_WRITE_DELETE:
        if (!api_id_ok(w->memory_id) || (w->sha && !sha256_is_hex(w->sha)))
            return -EINVAL;
        mem_path(path, store_id, w->memory_id);
        if (w->sha) {
            jbuf_adds(path, "?expected_content_sha256=");
            jbuf_add_pct(path, w->sha);
        }
        *method = "DELETE";
        break;
    default:
        return -EINVAL;
    }
    return path->oom || body->oom ? -ENOMEM : 0;
}

int api_memories_write(struct http_client *c, const char *store_id, struct api_write *w,
                       size_t n)
{
    for (size_t i = 0; i < n; i++) {
        w[i].err = 0;
        w[i].attempts = 0;
        memset(&w[i].mem, 0, sizeof(w[i].mem));
        memset(&w[i].e, 0, sizeof(w[i].e));
    }
    if (n == 0)
        return 0;
    if (!api_id_ok(store_id))
        return -EINVAL;
    struct http_call *calls = calloc(n, sizeof(*calls));
    struct jbuf *paths = calloc(n, sizeof(*paths));
    struct jbuf *bodies = calloc(n, sizeof(*bodies));
    size_t *idx = calloc(n, sizeof(*idx));
    size_t m = 0;
    int rc = 0;
    if (!calls || !paths || !bodies || !idx) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *method = NULL;
        int brc = build_write(store_id, &w[i], &paths[m], &bodies[m], &method);
        if (brc == -ENOMEM) {
            rc = brc;
            goto out;
        }
        if (brc) {
            w[i].err = brc;
            jbuf_release(&paths[m]);
            jbuf_release(&bodies[m]);
            continue;
        }
        calls[m] = (struct http_call){.method = method, .path = paths[m].p,
                                      .body = bodies[m].p, .body_len = bodies[m].len};
        idx[m++] = i;
    }
    http_run(c, calls, m); /* each call carries its own result */
    rc = 0;
    for (size_t k = 0; k < m; k++) {
        struct api_write *it = &w[idx[k]];
        it->attempts = calls[k].attempts;
        it->err = api_call_result(&calls[k], &it->e);
        if (it->err)
            continue;
        const char *what;
        if (it->op == API_WRITE_DELETE)
            it->err = apip_deleted_doc(calls[k].resp, calls[k].resp_len, &what);
        else
            it->err = apip_memory_doc(calls[k].resp, calls[k].resp_len, false, &it->mem, &what);
        if (it->err == -EPROTO)
            api_malformed(&calls[k], what, &it->e);
    }
    for (size_t i = 0; i < n && !rc; i++)
        rc = w[i].err;
out:
    for (size_t k = 0; calls && paths && bodies && k < n; k++) {
        http_call_clear(&calls[k]);
        jbuf_release(&paths[k]);
        jbuf_release(&bodies[k]);
    }
    free(calls);
    free(paths);
    free(bodies);
    free(idx);
    return rc;
}

void api_write_clear(struct api_write *w)
{
    if (!w)
        return;
    api_memory_clear(&w->mem);
    api_error_clear(&w->e);
    w->err = 0;
    w->attempts = 0;
}

/* The single-write forms: one-item batches; their results move to out/e. */
static int write_one(struct http_client *c, const char *store_id, struct api_write *w,
                     struct api_memory *out, struct api_error *e)
{
    if (out)
        memset(out, 0, sizeof(*out));
    if (e)
        api_error_clear(e);
    int rc = api_memories_write(c, store_id, w, 1);
    if (!rc)
        rc = w->err;
    if (out) {
        *out = w->mem;
        memset(&w->mem, 0, sizeof(w->mem));
    }
    if (e) {
        *e = w->e;
        memset(&w->e, 0, sizeof(w->e));
    }
    api_write_clear(w);
    return rc;
}

int api_memory_create(struct http_client *c, const char *store_id, const char *path,
                      const char *content, size_t len, struct api_memory *out,
                      struct api_error *e)
{
    struct api_write w = {.op = API_WRITE_CREATE, .path = path, .content = content,
                          .content_len = len};
    return write_one(c, store_id, &w, out, e);
}

int api_memory_update(struct http_client *c, const char *store_id, const char *id,
                      const char *new_path, const char *content, size_t len,
                      const char *precondition_sha, struct api_memory *out,
                      struct api_error *e)
{
    struct api_write w = {.op = API_WRITE_UPDATE, .memory_id = id, .path = new_path,
                          .content = content, .content_len = len, .sha = precondition_sha};
    return write_one(c, store_id, &w, out, e);
}

int api_memory_delete(struct http_client *c, const char *store_id, const char *id,
                      const char *expected_sha, struct api_error *e)
{
    struct api_write w = {.op = API_WRITE_DELETE, .memory_id = id, .sha = expected_sha};
    return write_one(c, store_id, &w, NULL, e);
}
