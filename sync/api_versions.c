/* api_versions.c - the memory_versions feed of a store (contract A.4):
 * GET /v1/memory_stores/{id}/memory_versions?view=basic&limit=100
 * [&created_at[gte]=T][&memory_id=M][&operation=OP], newest first, every
 * page in turn (the sync's change detection, and a memory's history for
 * `memstorefs log`); and GET .../memory_versions/{id}?view=full, one
 * version with its content (`memstorefs show` and `restore`).
 *
 * Owns: the request loop and the parsing of version objects.  Each version
 * handed out has a non-empty id and memory_id, an operation of created,
 * modified or deleted, and a created_at time; a live version (not deleted,
 * not redacted) has a path starting with '/', a 64-hex content_sha256 and
 * a size in [0, 102400]; a deleted one keeps its path; a redacted one
 * (redacted_at set) has them null.  An item that breaks this is counted in
 * versions.n_bad and left out: a feed with a bad item cannot be trusted,
 * and the caller falls back to a full listing.
 * Paging stops at max_pages (versions.complete is then false), at a cursor
 * seen before in this read (a loop), or when next_page is null.
 * No state; thread-safe as http_run is. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "api_int.h"
#include "json.h"
#include "log.h"
#include "rules.h"
#include "sha256.h"

void api_version_clear(struct api_version *v)
{
    if (!v)
        return;
    free(v->id);
    free(v->memory_id);
    free(v->path);
    free(v->content);
    memset(v, 0, sizeof(*v));
}

void api_versions_free(struct api_versions *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++)
        api_version_clear(&v->items[i]);
    free(v->items);
    memset(v, 0, sizeof(*v));
}

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

/* The bytes of the control character at p (C0, DEL; C1 as UTF-8), 0
 * when there is none. */
static size_t control_at(const unsigned char *p)
{
    if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
        return 2;
    return p[0] < 0x20 || p[0] == 0x7f ? 1 : 0;
}

/* Copies src, every control character turned into '?': the server's
 * free text reaches terminals (`memstorefs log`). */
static void printable(char *dst, size_t len, const char *src)
{
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && k + 1 < len; p++) {
        size_t c = control_at(p);
        dst[k++] = c ? '?' : (char)*p;
        p += c ? c - 1 : 0;
    }
    dst[k] = '\0';
}

static bool has_control(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (control_at(p))
            return true;
    return false;
}

/* An id as the API gives them: printed by `log`, sent back in URLs. */
static bool id_ok(const char *id)
{
    return id && *id && strlen(id) <= 127 && !has_control(id);
}

/* One version item; 0, or -EPROTO (a bad item), or -ENOMEM. */
static int parse_version(const cJSON *o, struct api_version *v)
{
    memset(v, 0, sizeof(*v));
    v->size = -1;
    const char *type = str_of(o, "type"), *id = str_of(o, "id");
    const char *mid = str_of(o, "memory_id"), *op = str_of(o, "operation");
    const char *at = str_of(o, "created_at"), *path = str_of(o, "path");
    const char *sha = str_of(o, "content_sha256");
    if (!cJSON_IsObject(o) || (type && strcmp(type, "memory_version") != 0) || !id_ok(id) ||
        !id_ok(mid) || !op || !at || strlen(at) >= sizeof(v->created_at) || has_control(at))
        return -EPROTO;
    if (strcmp(op, "created") == 0)
        v->op = API_OP_CREATED;
    else if (strcmp(op, "modified") == 0)
        v->op = API_OP_MODIFIED;
    else if (strcmp(op, "deleted") == 0)
        v->op = API_OP_DELETED;
    else
        return -EPROTO;
    v->created_ns = apip_time_ns(at);
    if (!v->created_ns)
        return -EPROTO;
    snprintf(v->created_at, sizeof(v->created_at), "%s", at);
    const cJSON *red = cJSON_GetObjectItemCaseSensitive(o, "redacted_at");
    v->redacted = cJSON_IsString(red);
    if (v->redacted)
        printable(v->redacted_at, sizeof(v->redacted_at), red->valuestring);
    /* Who wrote it: kept as given (an actor of a kind unknown here too). */
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(o, "created_by");
    if (cJSON_IsObject(by) && str_of(by, "type")) {
        static const char *const keys[] = {"session_id", "api_key_id", "user_id",
                                           "service_account_id"};
        printable(v->actor_type, sizeof(v->actor_type), str_of(by, "type"));
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && !v->actor_id[0]; i++)
            if (str_of(by, keys[i]))
                printable(v->actor_id, sizeof(v->actor_id), str_of(by, keys[i]));
    }
    if (!v->redacted) {
        /* A live version names where and what; a deletion keeps where.
         * A control character, which no memory path may hold, is a bad
         * item (`log` prints paths to a terminal). */
        if (!path || path[0] != '/' || has_control(path))
            return -EPROTO;
        if (v->op != API_OP_DELETED) {
            const cJSON *size = cJSON_GetObjectItemCaseSensitive(o, "content_size_bytes");
            if (!sha || !sha256_is_hex(sha) || !cJSON_IsNumber(size) ||
                !(size->valuedouble >= 0) || size->valuedouble > MEM_CONTENT_MAX_BYTES ||
                floor(size->valuedouble) != size->valuedouble)
                return -EPROTO;
            memcpy(v->sha, sha, SHA256_HEX_LEN + 1);
            v->size = (long)size->valuedouble;
        }
    }
    v->id = strdup(id);
    v->memory_id = strdup(mid);
    v->path = path && !v->redacted ? strdup(path) : NULL;
    if (!v->id || !v->memory_id || (path && !v->redacted && !v->path))
        return -ENOMEM;
    return 0;
}

static int push_version(struct api_versions *out, struct api_version *v)
{
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 64;
        struct api_version *p = realloc(out->items, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        out->items = p;
        out->cap = cap;
    }
    out->items[out->n++] = *v;
    return 0;
}


/* One page into out; *next gets the cursor (malloc'd) or NULL. */
static int parse_page(const char *body, size_t len, struct api_versions *out, char **next,
                      const char **what)
{
    *next = NULL;
    *what = "response body is not a JSON object";
    cJSON *root = body && len ? cJSON_ParseWithLengthOpts(body, len, NULL, false) : NULL;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return -EPROTO;
    }
    int rc = -EPROTO;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "next_page");
    *what = "page data missing or not an array, or next_page neither a string nor null";
    if (!cJSON_IsArray(data) || (np && !cJSON_IsNull(np) && !cJSON_IsString(np)))
        goto out;
    const cJSON *it;
    rc = 0;
    cJSON_ArrayForEach(it, data) {
        struct api_version v;
        int r = parse_version(it, &v);
        if (r == 0)
            r = push_version(out, &v);
        if (r)
            api_version_clear(&v);
        if (r == -EPROTO)
            out->n_bad++;
        else if (r) {
            rc = r;
            goto out;
        }
    }
    if (cJSON_IsString(np) && np->valuestring && *np->valuestring &&
        !(*next = strdup(np->valuestring)))
        rc = -ENOMEM;
out:
    cJSON_Delete(root);
    return rc;
}

int api_versions_since(struct http_client *c, const char *store_id, const char *gte, int limit,
                       size_t max_pages, struct api_versions *out, struct api_error *e)
{
    struct api_vfilter f = {.gte = gte};
    return api_versions_list(c, store_id, &f, limit, max_pages, out, e);
}

int api_versions_list(struct http_client *c, const char *store_id, const struct api_vfilter *f,
                      int limit, size_t max_pages, struct api_versions *out,
                      struct api_error *e)
{
    memset(out, 0, sizeof(*out));
    if (e)
        api_error_clear(e);
    if (!api_id_ok(store_id) || !max_pages || limit < 1 || limit > 100)
        return -EINVAL;
    char **seen = calloc(max_pages, sizeof(*seen));
    if (!seen)
        return -ENOMEM;
    char *cursor = NULL;
    size_t pages = 0;
    int rc = 0;
    for (;;) {
        struct jbuf p = {0};
        jbuf_adds(&p, "/v1/memory_stores/");
        jbuf_add_pct(&p, store_id);
        char lim[64];
        snprintf(lim, sizeof(lim), "/memory_versions?view=basic&limit=%d", limit);
        jbuf_adds(&p, lim);
        if (f && f->gte) {
            jbuf_adds(&p, "&created_at%5Bgte%5D=");
            jbuf_add_pct(&p, f->gte);
        }
        if (f && f->memory_id) {
            jbuf_adds(&p, "&memory_id=");
            jbuf_add_pct(&p, f->memory_id);
        }
        if (f && f->operation) {
            jbuf_adds(&p, "&operation=");
            jbuf_add_pct(&p, f->operation);
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
        if (!rc && !pages && !out->server_ns)
            out->server_ns = http_date_ns(call.date);
        if (!rc) {
            const char *what;
            rc = parse_page(call.resp, call.resp_len, out, &next, &what);
            if (rc == -EPROTO)
                api_malformed(&call, what, e);
            for (size_t i = 0; !rc && next && i < pages; i++)
                if (strcmp(seen[i], next) == 0)
                    rc = api_malformed(&call, "next_page repeats a cursor seen before", e);
        }
        http_call_clear(&call);
        jbuf_release(&p);
        free(cursor);
        cursor = next;
        if (rc || !cursor) {
            out->complete = !rc;
            break;
        }
        if (pages + 1 >= max_pages)
            break; /* out->complete stays false: the caller lists the store */
        if (!(seen[pages++] = strdup(cursor))) {
            rc = -ENOMEM;
            break;
        }
    }
    for (size_t i = 0; i < max_pages; i++)
        free(seen[i]);
    free(seen);
    free(cursor);
    if (rc)
        api_versions_free(out);
    return rc;
}

/* The content of a live version (view=full), byte-exact and checked. */
static int version_content(const cJSON *o, const char *raw, size_t rawlen,
                           struct api_version *v, const char **what)
{
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    *what = "content missing or not a string (view=full)";
    if (!cJSON_IsString(content) || !content->valuestring)
        return -EPROTO;
    size_t clen = strlen(content->valuestring);
    if (clen == (size_t)v->size) {
        if (!(v->content = malloc(clen + 1)))
            return -ENOMEM;
        memcpy(v->content, content->valuestring, clen + 1);
        v->content_len = clen;
    } else {
        /* Shorter than announced: it may hold NUL bytes cJSON cut off. */
        int rc = json_top_string(raw, rawlen, "content", &v->content, &v->content_len);
        *what = "content could not be decoded";
        if (rc)
            return rc == -ENOMEM ? rc : -EPROTO;
    }
    *what = "content length differs from content_size_bytes";
    if (v->content_len != (size_t)v->size)
        return -EPROTO;
    char got[SHA256_HEX_LEN + 1];
    sha256_hex(v->content, v->content_len, got);
    *what = "content does not hash to content_sha256";
    return strcmp(got, v->sha) == 0 ? 0 : -EPROTO;
}

int api_version_get(struct http_client *c, const char *store_id, const char *version_id,
                    struct api_version *out, struct api_error *e)
{
    memset(out, 0, sizeof(*out));
    if (e)
        api_error_clear(e);
    if (!api_id_ok(store_id) || !api_id_ok(version_id))
        return -EINVAL;
    struct jbuf p = {0};
    jbuf_adds(&p, "/v1/memory_stores/");
    jbuf_add_pct(&p, store_id);
    jbuf_adds(&p, "/memory_versions/");
    jbuf_add_pct(&p, version_id);
    jbuf_adds(&p, "?view=full");
    if (p.oom) {
        jbuf_release(&p);
        return -ENOMEM;
    }
    struct http_call call = {.method = "GET", .path = p.p};
    http_run(c, &call, 1);
    int rc = api_call_result(&call, e);
    if (!rc) {
        const char *what = "response body is not a JSON object";
        cJSON *root = call.resp && call.resp_len
                          ? cJSON_ParseWithLengthOpts(call.resp, call.resp_len, NULL, false)
                          : NULL;
        rc = cJSON_IsObject(root) ? 0 : -EPROTO;
        if (!rc) {
            what = "not a memory version (a field is missing or malformed)";
            rc = parse_version(root, out);
        }
        if (!rc && strcmp(out->id, version_id) != 0) {
            what = "a version other than the one asked for";
            rc = -EPROTO;
        }
        if (!rc && !out->redacted && out->op != API_OP_DELETED)
            rc = version_content(root, call.resp, call.resp_len, out, &what);
        cJSON_Delete(root);
        if (rc == -EPROTO)
            api_malformed(&call, what, e);
        if (rc)
            api_version_clear(out);
    }
    http_call_clear(&call);
    jbuf_release(&p);
    return rc;
}
