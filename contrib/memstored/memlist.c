/* memlist.c - GET /v1/memory_stores/{id}/memories (memory-store-api.md A.3).
 *
 * One read transaction walks the store's memories in path order (BINARY
 * collation = memcmp) inside [prefix, prefix-with-its-last-'/'-as-'0'),
 * which is exactly the set of paths starting with prefix, since every
 * string starting with "X/" sorts below "X0".
 *
 * depth=1 turns every path with a '/' after the prefix into the rollup
 * item {"type":"memory_prefix","path":prefix + segment + "/"}.  Paths under
 * one rollup are contiguous in path order and sort after the rollup's own
 * path, so emitting it at its first descendant keeps the page in path order;
 * later descendants are skipped.  Rollups count toward limit.
 *
 * Cursor: "page_" + base64url("m" + last emitted path).  A memory path never
 * ends in '/', a rollup always does, so the token says which it was:
 * after a memory M the next page starts at paths > M; after a rollup P it
 * starts at paths >= P-with-'0' (past everything under P).  next_page is
 * null when nothing follows. */
#include "msd.h"
#include "memint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"

/* s with its last character replaced by '0' (s ends with '/').  Malloc'd. */
static char *upper_bound(const char *s)
{
    size_t n = strlen(s);
    char *u = strdup(s);
    if (u && n)
        u[n - 1] = '0';
    return u;
}

struct listing {
    cJSON *data;
    int count, limit;
    char *last; /* last emitted path (malloc'd) */
    bool more;
};

/* Records path as the last item; 0 or -ENOMEM. */
static int note_last(struct listing *l, const char *path, size_t n)
{
    char *c = malloc(n + 1);
    if (!c)
        return -ENOMEM;
    memcpy(c, path, n);
    c[n] = '\0';
    free(l->last);
    l->last = c;
    l->count++;
    return 0;
}

static int walk(sqlite3_stmt *st, struct listing *l, const char *prefix, bool depth1, bool full)
{
    size_t plen = strlen(prefix);
    char *rollup = NULL; /* current rollup path, malloc'd */
    int s, rc = 0;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *path = (const char *)sqlite3_column_text(st, 2);
        const char *slash = depth1 ? strchr(path + plen, '/') : NULL;
        if (slash && rollup && strncmp(path, rollup, strlen(rollup)) == 0)
            continue; /* under the rollup already emitted */
        if (l->count == l->limit) {
            l->more = true;
            break;
        }
        if (slash) {
            size_t rn = (size_t)(slash - path) + 1;
            free(rollup);
            rollup = malloc(rn + 1);
            cJSON *o = cJSON_CreateObject();
            if (!rollup || !o) {
                cJSON_Delete(o);
                rc = -ENOMEM;
                break;
            }
            memcpy(rollup, path, rn);
            rollup[rn] = '\0';
            cJSON_AddStringToObject(o, "type", "memory_prefix");
            cJSON_AddStringToObject(o, "path", rollup);
            cJSON_AddItemToArray(l->data, o);
            rc = note_last(l, rollup, rn);
        } else {
            cJSON *o = mem_json(st, full);
            if (!o) {
                rc = -ENOMEM;
                break;
            }
            cJSON_AddItemToArray(l->data, o);
            rc = note_last(l, path, strlen(path));
        }
        if (rc)
            break;
    }
    free(rollup);
    if (!rc && s != SQLITE_ROW && s != SQLITE_DONE)
        rc = db_errno(s);
    return rc;
}

void memories_list(struct req *rq, struct reply *rp)
{
    bool full, archived;
    int limit;
    if (q_view(rq, rp, false, &full) || q_limit(rq, rp, full, &limit))
        return;
    const char *prefix = req_query(rq, "path_prefix"), *why = NULL;
    if (!prefix || !*prefix)
        prefix = "/";
    if (rules_check_prefix(prefix, &why)) {
        reply_invalid(rp, "invalid path_prefix: %s", why ? why : "not allowed");
        return;
    }
    const char *depth = req_query(rq, "depth");
    bool depth1 = false;
    if (depth && strcmp(depth, "1") == 0)
        depth1 = true;
    else if (depth && strcmp(depth, "0") != 0) {
        reply_invalid(rp, "depth must be 0 or 1");
        return;
    }
    char *after = NULL, *from = NULL, *hi = upper_bound(prefix);
    const char *page = req_query(rq, "page");
    if (page && *page) {
        size_t n;
        char *c = cursor_decode(page, &n);
        if (!c || n < 2 || c[0] != 'm' || c[1] != '/') {
            free(c);
            free(hi);
            reply_invalid(rp, "page is not a valid cursor");
            return;
        }
        if (c[n - 1] == '/')
            from = upper_bound(c + 1);
        else
            after = strdup(c + 1);
        free(c);
        if (!from && !after) {
            free(hi);
            reply_errno(rp, -ENOMEM);
            return;
        }
    }
    struct db *db = rq->srv->db;
    struct listing l = {.limit = limit};
    cJSON *res = cJSON_CreateObject();
    l.data = cJSON_AddArrayToObject(res, "data");
    sqlite3_stmt *st = NULL;
    int rc = hi && l.data ? db_begin(db, false) : -ENOMEM;
    if (rc) {
        reply_errno(rp, rc);
        goto out;
    }
    rc = stores_lookup(db, rq->ids[0], &archived);
    if (rc == -ENOENT) {
        reply_not_found(rp, "memory store", rq->ids[0]);
        goto end;
    }
    if (!rc)
        rc = db_prepare(db,
                        "SELECT id, store_id, path, CASE WHEN ?6 THEN content END, sha, size,"
                        " version_id, created_at, updated_at FROM memories"
                        " WHERE store_id=?1 AND path >= ?2 AND path < ?3"
                        " AND path > ?4 AND path >= ?5 ORDER BY path LIMIT ?7",
                        &st);
    if (rc) {
        reply_errno(rp, rc);
        goto end;
    }
    sqlite3_bind_text(st, 1, rq->ids[0], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, prefix, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, hi, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, after ? after : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, from ? from : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 6, full);
    sqlite3_bind_int(st, 7, depth1 ? -1 : limit + 1);
    rc = walk(st, &l, prefix, depth1, full);
    if (rc) {
        reply_errno(rp, rc);
        goto end;
    }
    char *next = NULL;
    if (l.more) {
        size_t n = strlen(l.last);
        char *key = malloc(n + 2);
        if (key) {
            key[0] = 'm';
            memcpy(key + 1, l.last, n + 1);
            next = cursor_encode(key, n + 1);
            free(key);
        }
        if (!next) {
            rc = -ENOMEM;
            reply_errno(rp, rc);
            goto end;
        }
        cJSON_AddStringToObject(res, "next_page", next);
        free(next);
    } else {
        cJSON_AddNullToObject(res, "next_page");
    }
    reply_json(rp, 200, res);
    res = NULL;
end:
    sqlite3_finalize(st);
    db_end(db, false);
out:
    cJSON_Delete(res);
    free(l.last);
    free(after);
    free(from);
    free(hi);
}
