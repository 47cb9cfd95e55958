/* api_parse.c - turning the Memory Stores API's JSON answers into the
 * structs of api.h, and their release (the *_clear/_free of api.h).
 *
 * Invariants enforced on every memory handed out: id and version_id are
 * non-empty strings, path starts with '/', sha is 64 lowercase hex, size is
 * an integer in [0, 102400] (the API's content limit); with view=full,
 * content_len == size and sha256(content) == sha.  Anything else is
 * -EPROTO: the caller logs it and nothing half-parsed escapes (outputs are
 * cleared on failure).  In a listing page, one malformed memory item is
 * left out (described in api_list.skipped) and the rest of the page kept:
 * one bad item must not stop a whole store from syncing.
 *
 * cJSON strings end at the first NUL, so content holding "\u0000" comes
 * out of cJSON short; it is then re-read byte-exact with json_top_string.
 * No shared state: thread-safe. */
#include "api_int.h"

#include "json.h"
#include "rules.h"
#include "sha256.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ID_MAX 127 /* the cache keeps ids in CACHE_ID_MAX (128) bytes */

void api_memory_clear(struct api_memory *m)
{
    if (!m)
        return;
    free(m->id);
    free(m->path);
    free(m->version_id);
    free(m->content);
    memset(m, 0, sizeof(*m));
}

void api_list_free(struct api_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        api_memory_clear(&l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
    for (size_t i = 0; i < l->n_skipped; i++) {
        free(l->skipped[i].id);
        free(l->skipped[i].path);
    }
    free(l->skipped);
    l->skipped = NULL;
    l->n_skipped = 0;
}

void api_store_clear(struct api_store *s)
{
    if (!s)
        return;
    free(s->id);
    free(s->name);
    free(s->description);
    memset(s, 0, sizeof(*s));
}

void api_error_clear(struct api_error *e)
{
    if (!e)
        return;
    free(e->conflicting_path);
    memset(e, 0, sizeof(*e));
}

static const char *get_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

/* A required non-empty id string. */
static int dup_id(const cJSON *o, const char *key, char **out)
{
    const char *s = get_str(o, key);
    if (!s || !*s || strlen(s) > ID_MAX)
        return -EPROTO;
    *out = strdup(s);
    return *out ? 0 : -ENOMEM;
}

int64_t apip_time_ns(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *p = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!p)
        return 0;
    int64_t frac = 0;
    if (*p == '.') {
        int64_t scale = 100000000;
        for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
            frac += scale * (*p - '0');
    }
    int64_t off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int h = (p[1] - '0') * 10 + (p[2] - '0'), m = (p[4] - '0') * 10 + (p[5] - '0');
        off = (*p == '+' ? 1 : -1) * (int64_t)(h * 3600 + m * 60);
        p += 6;
    } else {
        return 0;
    }
    if (*p)
        return 0;
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || t < 0)
        return 0;
    return ((int64_t)t - off) * 1000000000LL + frac;
}

static int parse_memory(const cJSON *o, const char *raw, size_t rawlen, bool full,
                        struct api_memory *m, const char **what)
{
    int rc;
    memset(m, 0, sizeof(*m));
    *what = "memory is not an object";
    if (!cJSON_IsObject(o))
        return -EPROTO;
    const char *type = get_str(o, "type");
    *what = "memory type is not \"memory\"";
    if (cJSON_HasObjectItem(o, "type") && (!type || strcmp(type, "memory") != 0))
        return -EPROTO;
    *what = "memory id missing or not a string";
    if ((rc = dup_id(o, "id", &m->id)))
        goto fail;
    *what = "memory_version_id missing or not a string";
    if ((rc = dup_id(o, "memory_version_id", &m->version_id)))
        goto fail;
    const char *path = get_str(o, "path");
    *what = "memory path missing or not absolute";
    rc = -EPROTO;
    if (!path || path[0] != '/')
        goto fail;
    if (!(m->path = strdup(path))) {
        rc = -ENOMEM;
        goto fail;
    }
    const char *sha = get_str(o, "content_sha256");
    *what = "content_sha256 missing or not 64 lowercase hex digits";
    if (!sha || !sha256_is_hex(sha))
        goto fail;
    memcpy(m->sha, sha, 65);
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(o, "content_size_bytes");
    *what = "content_size_bytes missing or not a non-negative integer";
    if (!cJSON_IsNumber(size) || !(size->valuedouble >= 0) || size->valuedouble > INT32_MAX ||
        floor(size->valuedouble) != size->valuedouble)
        goto fail;
    m->size = (long)size->valuedouble;
    *what = "content_size_bytes over the API's limit of 102400 bytes";
    if (m->size > MEM_CONTENT_MAX_BYTES)
        goto fail;
    m->updated_ns = apip_time_ns(get_str(o, "updated_at")); /* 0 when absent or odd */
    if (!full)
        return 0;

    const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    *what = "content missing or not a string (view=full)";
    if (!cJSON_IsString(content) || !content->valuestring)
        goto fail;
    size_t clen = strlen(content->valuestring);
    if (clen == (size_t)m->size) {
        if (!(m->content = malloc(clen + 1))) {
            rc = -ENOMEM;
            goto fail;
        }
        memcpy(m->content, content->valuestring, clen + 1);
        m->content_len = clen;
    } else if (raw) {
        /* Shorter than announced: it may hold NUL bytes cJSON cut off. */
        rc = json_top_string(raw, rawlen, "content", &m->content, &m->content_len);
        if (rc) {
            *what = "content could not be decoded";
            rc = rc == -ENOMEM ? rc : -EPROTO;
            goto fail;
        }
        rc = -EPROTO;
    }
    *what = "content length differs from content_size_bytes";
    if (!m->content || m->content_len != (size_t)m->size)
        goto fail;
    char got[SHA256_HEX_LEN + 1];
    sha256_hex(m->content, m->content_len, got);
    *what = "content does not hash to content_sha256";
    if (strcmp(got, m->sha) != 0)
        goto fail;
    return 0;
fail:
    api_memory_clear(m);
    return rc;
}

static cJSON *parse_doc(const char *body, size_t len, const char **what)
{
    *what = "response body is not a JSON object";
    if (!body || !len)
        return NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, NULL, false);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int apip_memory_doc(const char *body, size_t len, bool full, struct api_memory *m,
                    const char **what)
{
    memset(m, 0, sizeof(*m));
    cJSON *root = parse_doc(body, len, what);
    if (!root)
        return -EPROTO;
    int rc = parse_memory(root, body, len, full, m, what);
    cJSON_Delete(root);
    return rc;
}

static int list_push(struct api_list *l, struct api_memory *m)
{
    /* Capacity is implicit: 16, then doubled whenever n reaches a power of
     * two past 16, so it is always max(16, next power of two >= n). */
    size_t n = l->n;
    bool grow = n == 0 || (n >= 16 && (n & (n - 1)) == 0);
    if (grow) {
        size_t cap = n ? n * 2 : 16;
        struct api_memory *p = realloc(l->items, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        l->items = p;
    }
    l->items[l->n++] = *m;
    memset(m, 0, sizeof(*m));
    return 0;
}

int api_list_add(struct api_list *l, const char *id, const char *path, const char *sha,
                 long size, int64_t updated_ns)
{
    return api_list_add_version(l, id, path, sha, size, updated_ns, NULL);
}

int api_list_add_version(struct api_list *l, const char *id, const char *path, const char *sha,
                         long size, int64_t updated_ns, const char *version_id)
{
    struct api_memory m = {0};
    m.updated_ns = updated_ns;
    m.id = strdup(id);
    m.path = strdup(path);
    m.version_id = strdup(version_id ? version_id : "");
    snprintf(m.sha, sizeof(m.sha), "%s", sha);
    m.size = size;
    int rc = m.id && m.path && m.version_id ? list_push(l, &m) : -ENOMEM;
    if (rc)
        api_memory_clear(&m);
    return rc;
}

/* Remembers a malformed item (its id and path when usable) in acc. */
static int skip_push(struct api_list *acc, const cJSON *it, const char *why)
{
    /* Grown by doubling: 4, then whenever the count reaches a power of
     * two (a page of nothing but bad items is a page like any other). */
    size_t n = acc->n_skipped;
    if (n == 0 || (n >= 4 && (n & (n - 1)) == 0)) {
        size_t cap = n ? n * 2 : 4;
        struct api_skipped *v = realloc(acc->skipped, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        acc->skipped = v;
    }
    struct api_skipped *x = &acc->skipped[n];
    memset(x, 0, sizeof(*x));
    const char *id = get_str(it, "id"), *path = get_str(it, "path");
    if (id && *id && strlen(id) <= ID_MAX && !(x->id = strdup(id)))
        return -ENOMEM;
    if (path && strlen(path) <= 4096 && !(x->path = strdup(path))) {
        free(x->id);
        return -ENOMEM;
    }
    x->reason = why ? why : "malformed item";
    acc->n_skipped++;
    return 0;
}

int apip_memory_page(const char *body, size_t len, struct api_list *acc, char **next_page,
                     const char **what)
{
    return apip_memory_page_view(body, len, false, acc, next_page, what);
}

int apip_memory_page_view(const char *body, size_t len, bool full, struct api_list *acc,
                          char **next_page, const char **what)
{
    return apip_memory_page_ex(body, len, full, acc, NULL, next_page, what);
}

void apip_prefixes_free(struct api_prefixes *px)
{
    for (size_t i = 0; i < px->n; i++)
        free(px->v[i]);
    free(px->v);
    memset(px, 0, sizeof(*px));
}

/* A memory_prefix rollup's path, kept in px. */
static int prefix_push(struct api_prefixes *px, const cJSON *it, const char **what)
{
    const char *path = get_str(it, "path");
    size_t len = path ? strlen(path) : 0;
    *what = "memory_prefix item without a path of the form /.../";
    if (len < 2 || len > 4096 || path[0] != '/' || path[len - 1] != '/')
        return -EPROTO;
    /* Capacity: max(16, next power of two >= n), as in list_push. */
    if (px->n == 0 || (px->n >= 16 && (px->n & (px->n - 1)) == 0)) {
        size_t cap = px->n ? px->n * 2 : 16;
        char **v = realloc(px->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        px->v = v;
    }
    if (!(px->v[px->n] = strdup(path)))
        return -ENOMEM;
    px->n++;
    return 0;
}

int apip_memory_page_ex(const char *body, size_t len, bool full, struct api_list *acc,
                        struct api_prefixes *px, char **next_page, const char **what)
{
    *next_page = NULL;
    cJSON *root = parse_doc(body, len, what);
    if (!root)
        return -EPROTO;
    int rc = -EPROTO;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    *what = "page data missing or not an array";
    if (!cJSON_IsArray(data))
        goto out;
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "next_page");
    *what = "next_page is neither a string nor null";
    if (np && !cJSON_IsNull(np) && !cJSON_IsString(np))
        goto out;
    const cJSON *it;
    cJSON_ArrayForEach(it, data) {
        const char *type = get_str(it, "type");
        if (!cJSON_IsObject(it) || !type) {
            if ((rc = skip_push(acc, it, "list item without a type")))
                goto out;
            rc = -EPROTO;
            continue;
        }
        if (px && strcmp(type, "memory_prefix") == 0) {
            if ((rc = prefix_push(px, it, what)))
                goto out;
            continue;
        }
        if (strcmp(type, "memory") != 0)
            continue; /* rollups nobody asked for (and future kinds) */
        struct api_memory m;
        const char *why = NULL;
        if ((rc = parse_memory(it, NULL, 0, full, &m, &why))) {
            if (rc != -EPROTO || (rc = skip_push(acc, it, why)))
                goto out;
            continue;
        }
        if ((rc = list_push(acc, &m))) {
            api_memory_clear(&m);
            goto out;
        }
    }
    rc = 0;
    if (cJSON_IsString(np) && np->valuestring && *np->valuestring &&
        !(*next_page = strdup(np->valuestring)))
        rc = -ENOMEM;
out:
    cJSON_Delete(root);
    return rc;
}

int apip_store_doc(const char *body, size_t len, struct api_store *s, const char **what)
{
    memset(s, 0, sizeof(*s));
    cJSON *root = parse_doc(body, len, what);
    if (!root)
        return -EPROTO;
    int rc = -EPROTO;
    const char *type = get_str(root, "type");
    *what = "store type is not \"memory_store\"";
    if (cJSON_HasObjectItem(root, "type") && (!type || strcmp(type, "memory_store") != 0))
        goto out;
    *what = "store id missing or not a string";
    if ((rc = dup_id(root, "id", &s->id)))
        goto out;
    rc = -EPROTO;
    const char *name = get_str(root, "name");
    *what = "store name missing or not a string";
    if (!name)
        goto out;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "description");
    *what = "store description is neither a string nor null";
    if (d && !cJSON_IsNull(d) && !cJSON_IsString(d))
        goto out;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "archived_at");
    *what = "store archived_at is neither a string nor null";
    if (a && !cJSON_IsNull(a) && !cJSON_IsString(a))
        goto out;
    s->archived = cJSON_IsString(a);
    s->name = strdup(name);
    s->description = strdup(cJSON_IsString(d) && d->valuestring ? d->valuestring : "");
    rc = s->name && s->description ? 0 : -ENOMEM;
out:
    if (rc)
        api_store_clear(s);
    cJSON_Delete(root);
    return rc;
}

int apip_deleted_doc(const char *body, size_t len, const char **what)
{
    cJSON *root = parse_doc(body, len, what);
    if (!root)
        return -EPROTO;
    const char *type = get_str(root, "type");
    *what = "delete answer type is not \"memory_deleted\"";
    int rc = (type && strcmp(type, "memory_deleted") == 0) ? 0 : -EPROTO;
    cJSON_Delete(root);
    return rc;
}

void apip_error(long status, const char *body, size_t len, const char *request_id,
                struct api_error *e)
{
    api_error_clear(e);
    e->status = status;
    snprintf(e->request_id, sizeof(e->request_id), "%s", request_id ? request_id : "");
    if (!body || !len)
        return;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, NULL, false);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (cJSON_IsObject(err)) {
        const char *s;
        if ((s = get_str(err, "type")))
            snprintf(e->type, sizeof(e->type), "%s", s);
        if ((s = get_str(err, "message")))
            snprintf(e->message, sizeof(e->message), "%s", s);
        if ((s = get_str(err, "conflicting_memory_id")))
            snprintf(e->conflicting_memory_id, sizeof(e->conflicting_memory_id), "%s", s);
        if ((s = get_str(err, "conflicting_path")))
            e->conflicting_path = strdup(s);
    }
    const char *rid = get_str(root, "request_id");
    if (!e->request_id[0] && rid)
        snprintf(e->request_id, sizeof(e->request_id), "%s", rid);
    cJSON_Delete(root);
}
