/* api.c - the Memory Stores API endpoints (contract: api.h) as requests on
 * the shared HTTP client.
 *
 * Owns: building request paths (every id and query value percent-encoded,
 * empty/"."/".." ids refused before sending) and bodies (JSON written by
 * hand with explicit lengths, so content may hold any UTF-8 including NUL),
 * and turning answers into errnos (api_errno: the one place where
 * error.type refines a status).  Parsing lives in api_parse.c, the
 * listings in api_list.c.
 *
 * State: none.  Thread-safe as http_run is.  A malformed 2xx answer is logged here (one
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
int api_refuse(const struct http_call *call, const char *type, const char *what,
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
    return api_refuse(call, "malformed_response", what, e);
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
    if (p.oom) {
        jbuf_release(&p);
        return -ENOMEM;
    }
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

int api_memories_fetch(struct http_client *c, const char *store_id, struct api_fetch *f,
                       size_t n)
{
    return api_memories_fetch_until(c, store_id, f, n, 0);
}

int api_memories_fetch_until(struct http_client *c, const char *store_id, struct api_fetch *f,
                             size_t n, int64_t deadline_ms)
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
        for (size_t i = 0; i < n; i++) /* none reads as fetched */
            f[i].err = -ENOMEM;
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
            /* Every item not sent ends with the error: none reads as
             * fetched (err 0, no content). */
            for (size_t j = i; j < n; j++)
                if (!f[j].err)
                    f[j].err = -ENOMEM;
            for (size_t k = 0; k < m; k++)
                f[idx[k]].err = -ENOMEM;
            rc = -ENOMEM;
            goto out;
        }
        calls[m] = (struct http_call){.method = "GET", .path = paths[m].p};
        idx[m++] = i;
    }
    struct http_run_opts ro = {.deadline_ms = deadline_ms};
    http_run_ex(c, calls, m, &ro); /* each call carries its own result */
    rc = 0;
    for (size_t k = 0; k < m; k++) {
        struct api_fetch *it = &f[idx[k]];
        it->err = api_call_result(&calls[k], &it->e);
        if (!it->err) {
            const char *what;
            it->err = apip_memory_doc(calls[k].resp, calls[k].resp_len, true, &it->mem, &what);
            if (!it->err && (!it->mem.id || strcmp(it->mem.id, it->memory_id) != 0)) {
                /* Another memory's document: its bytes are not this one's. */
                api_memory_clear(&it->mem);
                it->err = -EPROTO;
                what = "an answer about another memory than the one asked for";
            }
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
    int rc = 0;
    size_t m = 0; /* requests built */
    bool sent = false;
    struct http_call *calls = NULL;
    struct jbuf *paths = NULL, *bodies = NULL;
    size_t *idx = NULL;
    if (!api_id_ok(store_id)) {
        rc = -ENXIO; /* the batch's, not a refusal of any write's content */
        goto out;
    }
    calls = calloc(n, sizeof(*calls));
    paths = calloc(n, sizeof(*paths));
    bodies = calloc(n, sizeof(*bodies));
    idx = calloc(n, sizeof(*idx));
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
    sent = true;
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
    /* Nothing went out when the batch failed before it was sent: every
     * write says so (one left at 0 read as done, with no memory). */
    for (size_t i = 0; rc && !sent && i < n; i++)
        if (!w[i].err)
            w[i].err = rc;
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
