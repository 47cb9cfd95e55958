/* versions.c - the memory_version endpoints (memory-store-api.md A.4, A.8)
 * and the one function that appends a version.
 *
 * Owns: the versions table.  seq (AUTOINCREMENT) is the write order.
 * "Newest first" is by created_at, as the service's: ties (one
 * millisecond, only with POST /admin/clock's frozen clock) in the order of
 * the version ids, which are random, so not the write order; a version
 * stamped earlier (the clock's offset) comes after the ones stamped later
 * whenever it was written.  The cursor is "t<created_at>|<id>" of the last
 * row.  (Until 5 December 2026 the list was in seq order, which hid from
 * the daemon's tests a client that took a run's first for the newest.)
 * Invariants:
 *   - a version is appended only by versions_insert, once per real change;
 *   - a deleted version keeps its path and has NULL content/sha/size;
 *   - a redacted version has NULL path/content/sha/size and keeps
 *     operation, memory_id, created_at and created_by; redacted_at is set
 *     once (redacting again answers the version unchanged);
 *   - the head version (memories.version_id) of a live memory is never
 *     redacted.
 * Actors are stored as (actor_type, actor_id): "api" + apikey_..., and the
 * other kinds the filters name ("session", "svac", "user").
 * Locking: each handler runs in one db transaction. */
#include "msd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VER_COLS                                                                           \
    "seq, id, memory_id, store_id, operation, path, content, sha, size, created_at, "     \
    "actor_type, actor_id, redacted_at, redacted_type, redacted_id"

static cJSON *actor_json(sqlite3_stmt *st, int ti, int ii)
{
    if (sqlite3_column_type(st, ti) == SQLITE_NULL)
        return cJSON_CreateNull();
    const char *t = (const char *)sqlite3_column_text(st, ti);
    const char *id = (const char *)sqlite3_column_text(st, ii);
    const char *type = "api_actor", *key = "api_key_id";
    if (strcmp(t, "session") == 0)
        type = "session_actor", key = "session_id";
    else if (strcmp(t, "svac") == 0)
        type = "service_account_actor", key = "service_account_id";
    else if (strcmp(t, "user") == 0)
        type = "user_actor", key = "user_id";
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddStringToObject(o, key, id ? id : "");
    return o;
}

static void add_text_or_null(cJSON *o, const char *k, sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        cJSON_AddNullToObject(o, k);
    else
        cJSON_AddStringToObject(o, k, (const char *)sqlite3_column_text(st, i));
}

static cJSON *version_json(sqlite3_stmt *st, bool full)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "type", "memory_version");
    cJSON_AddStringToObject(o, "id", (const char *)sqlite3_column_text(st, 1));
    cJSON_AddStringToObject(o, "memory_id", (const char *)sqlite3_column_text(st, 2));
    cJSON_AddStringToObject(o, "memory_store_id", (const char *)sqlite3_column_text(st, 3));
    cJSON_AddStringToObject(o, "operation", (const char *)sqlite3_column_text(st, 4));
    if (full)
        add_text_or_null(o, "content", st, 6);
    else
        cJSON_AddNullToObject(o, "content");
    add_text_or_null(o, "content_sha256", st, 7);
    if (sqlite3_column_type(st, 8) == SQLITE_NULL)
        cJSON_AddNullToObject(o, "content_size_bytes");
    else
        cJSON_AddNumberToObject(o, "content_size_bytes", (double)sqlite3_column_int64(st, 8));
    add_text_or_null(o, "path", st, 5);
    cJSON_AddStringToObject(o, "created_at", (const char *)sqlite3_column_text(st, 9));
    cJSON_AddItemToObject(o, "created_by", actor_json(st, 10, 11));
    add_text_or_null(o, "redacted_at", st, 12);
    cJSON_AddItemToObject(o, "redacted_by", actor_json(st, 13, 14));
    return o;
}

int versions_insert(struct db *db, const char *store_id, const char *mem_id, const char *op,
                    const char *path, const char *content, size_t n, const char *sha,
                    const char *actor, const char *now, char out_id[MSD_ID_MAX])
{
    db_new_id("memver_", out_id);
    sqlite3_stmt *st;
    int rc = db_prepare(db,
                        "INSERT INTO versions(id, store_id, memory_id, operation, path, content,"
                        " sha, size, created_at, actor_type, actor_id)"
                        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, out_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, store_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, mem_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, op, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, path, -1, SQLITE_STATIC);
    if (content) {
        sqlite3_bind_text(st, 6, content, (int)n, SQLITE_STATIC);
        sqlite3_bind_text(st, 7, sha, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 8, (sqlite3_int64)n);
    }
    sqlite3_bind_text(st, 9, now, -1, SQLITE_STATIC);
    if (actor) {
        sqlite3_bind_text(st, 10, "api", -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 11, actor, -1, SQLITE_STATIC);
    }
    rc = db_exec_stmt(st);
    sqlite3_finalize(st);
    return rc;
}

/* Opens a read transaction and checks the store; 0 or -1 with rp filled. */
static int begin_for_store(struct req *rq, struct reply *rp, bool write, bool *archived)
{
    struct db *db = rq->srv->db;
    int rc = db_begin(db, write);
    if (rc) {
        reply_errno(rp, rc);
        return -1;
    }
    rc = stores_lookup(db, rq->ids[0], archived);
    if (rc) {
        if (rc == -ENOENT)
            reply_not_found(rp, "memory store", rq->ids[0]);
        else
            reply_errno(rp, rc);
        db_end(db, false);
        return -1;
    }
    return 0;
}

void versions_list(struct req *rq, struct reply *rp)
{
    bool full, archived;
    int limit;
    char gte[MSD_TS_LEN], lte[MSD_TS_LEN];
    if (q_view(rq, rp, false, &full) || q_limit(rq, rp, full, &limit) ||
        q_created_at(rq, rp, "gte", gte) || q_created_at(rq, rp, "lte", lte))
        return;
    const char *op = req_query(rq, "operation");
    if (op && strcmp(op, "created") && strcmp(op, "modified") && strcmp(op, "deleted")) {
        reply_invalid(rp, "operation must be created, modified or deleted");
        return;
    }
    const char *actor_type = NULL, *actor_id = NULL;
    static const char *const filters[][2] = {
        {"session_id", "session"}, {"api_key_id", "api"}, {"service_account_id", "svac"}};
    for (size_t i = 0; i < 3; i++) {
        const char *v = req_query(rq, filters[i][0]);
        if (!v)
            continue;
        if (actor_type) {
            reply_invalid(rp, "filter by at most one of session_id, api_key_id and "
                              "service_account_id");
            return;
        }
        actor_type = filters[i][1], actor_id = v;
    }
    /* The last row of the previous page: (created_at, id). */
    char before_at[MSD_TS_LEN] = "", before_id[MSD_ID_MAX] = "";
    const char *page = req_query(rq, "page");
    if (page && *page) {
        size_t n;
        char *c = cursor_decode(page, &n);
        char *bar = c && c[0] == 't' ? strchr(c, '|') : NULL;
        bool ok = bar && (size_t)(bar - c - 1) < sizeof(before_at) && bar > c + 1 &&
                  bar[1] && strlen(bar + 1) < sizeof(before_id);
        if (ok) {
            snprintf(before_at, sizeof(before_at), "%.*s", (int)(bar - c - 1), c + 1);
            snprintf(before_id, sizeof(before_id), "%s", bar + 1);
        }
        free(c);
        if (!ok) {
            reply_invalid(rp, "page is not a valid cursor");
            return;
        }
    }
    if (begin_for_store(rq, rp, false, &archived))
        return;
    struct db *db = rq->srv->db;
    sqlite3_stmt *st = NULL;
    cJSON *res = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(res, "data");
    int rc = db_prepare(db,
                        "SELECT " VER_COLS " FROM versions WHERE store_id=?1"
                        " AND (?2 IS NULL OR memory_id=?2) AND (?3 IS NULL OR operation=?3)"
                        " AND (?4 IS NULL OR (actor_type=?4 AND actor_id=?5))"
                        " AND (?6 = '' OR created_at >= ?6) AND (?7 = '' OR created_at <= ?7)"
                        " AND (?8 = '' OR created_at < ?8 OR (created_at = ?8 AND id < ?10))"
                        " ORDER BY created_at DESC, id DESC LIMIT ?9",
                        &st);
    if (rc || !data)
        goto fail;
    sqlite3_bind_text(st, 1, rq->ids[0], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, req_query(rq, "memory_id"), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, op, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, actor_type, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, actor_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, gte, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, lte, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, before_at, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 9, limit + 1);
    sqlite3_bind_text(st, 10, before_id, -1, SQLITE_STATIC);
    int count = 0, s;
    char last[MSD_TS_LEN + MSD_ID_MAX + 2] = "";
    bool more = false;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == limit) {
            more = true;
            break;
        }
        cJSON_AddItemToArray(data, version_json(st, full));
        const unsigned char *at = sqlite3_column_text(st, 9), *id = sqlite3_column_text(st, 1);
        snprintf(last, sizeof(last), "t%s|%s", at ? (const char *)at : "",
                 id ? (const char *)id : "");
        count++;
    }
    if (s != SQLITE_ROW && s != SQLITE_DONE) {
        rc = db_errno(s);
        goto fail;
    }
    if (more) {
        char *next = cursor_encode(last, strlen(last));
        if (!next) { /* "" would read as the last page: the list cut short */
            rc = -ENOMEM;
            goto fail;
        }
        cJSON_AddStringToObject(res, "next_page", next);
        free(next);
    } else {
        cJSON_AddNullToObject(res, "next_page");
    }
    sqlite3_finalize(st);
    db_end(db, false);
    reply_json(rp, 200, res);
    return;
fail:
    sqlite3_finalize(st);
    db_end(db, false);
    cJSON_Delete(res);
    reply_errno(rp, rc ? rc : -ENOMEM);
}

/* Inside a transaction: replies with version ids[1] of store ids[0]. */
static int reply_version(struct req *rq, struct reply *rp, bool full)
{
    sqlite3_stmt *st;
    int rc = db_prepare(rq->srv->db,
                        "SELECT " VER_COLS " FROM versions WHERE id=?1 AND store_id=?2", &st);
    if (rc) {
        reply_errno(rp, rc);
        return rc;
    }
    sqlite3_bind_text(st, 1, rq->ids[1], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, rq->ids[0], -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        reply_json(rp, 200, version_json(st, full));
        rc = 0;
    } else if (s == SQLITE_DONE) {
        reply_not_found(rp, "memory version", rq->ids[1]);
        rc = -ENOENT;
    } else {
        rc = db_errno(s);
        reply_errno(rp, rc);
    }
    sqlite3_finalize(st);
    return rc;
}

void versions_get(struct req *rq, struct reply *rp)
{
    bool full, archived;
    if (q_view(rq, rp, true, &full) || begin_for_store(rq, rp, false, &archived))
        return;
    reply_version(rq, rp, full);
    db_end(rq->srv->db, false);
}

void versions_redact(struct req *rq, struct reply *rp)
{
    bool archived;
    cJSON *body = NULL;
    if (body_object(rq, rp, true, &body))
        return;
    cJSON_Delete(body);
    if (begin_for_store(rq, rp, true, &archived))
        return;
    struct db *db = rq->srv->db;
    sqlite3_stmt *st = NULL;
    /* head: 1 when this version is the head of its live memory. */
    int rc = db_prepare(db,
                        "SELECT v.redacted_at IS NOT NULL, EXISTS(SELECT 1 FROM memories m"
                        " WHERE m.id = v.memory_id AND m.version_id = v.id)"
                        " FROM versions v WHERE v.id=?1 AND v.store_id=?2",
                        &st);
    if (rc) {
        reply_errno(rp, rc);
        goto end;
    }
    sqlite3_bind_text(st, 1, rq->ids[1], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, rq->ids[0], -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s != SQLITE_ROW) {
        rc = s == SQLITE_DONE ? -ENOENT : db_errno(s);
        if (rc == -ENOENT)
            reply_not_found(rp, "memory version", rq->ids[1]);
        else
            reply_errno(rp, rc);
        goto end;
    }
    bool redacted = sqlite3_column_int(st, 0), head = sqlite3_column_int(st, 1);
    sqlite3_finalize(st);
    st = NULL;
    if (head) {
        rc = -EINVAL;
        reply_invalid(rp, "cannot redact the current version of a live memory; write a new "
                          "version or delete the memory first");
        goto end;
    }
    if (!redacted) {
        char now[MSD_TS_LEN];
        db_now(now);
        rc = db_prepare(db,
                        "UPDATE versions SET content=NULL, path=NULL, sha=NULL, size=NULL,"
                        " redacted_at=?2, redacted_type=?3, redacted_id=?4 WHERE id=?1",
                        &st);
        if (!rc) {
            sqlite3_bind_text(st, 1, rq->ids[1], -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, now, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 3, rq->actor_key_id ? "api" : NULL, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 4, rq->actor_key_id, -1, SQLITE_STATIC);
            rc = db_exec_stmt(st);
        }
        if (rc) {
            reply_errno(rp, rc);
            goto end;
        }
    }
    rc = reply_version(rq, rp, true);
end:
    sqlite3_finalize(st);
    if (db_end(db, rc == 0) && rc == 0)
        reply_errno(rp, -EIO);
}
