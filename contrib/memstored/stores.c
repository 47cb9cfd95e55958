/* stores.c - the memory_store endpoints (memory-store-api.md A.2, B.4).
 *
 * Owns: the stores table.  A row's metadata column holds a JSON object of
 * string values; description is "" when unset; archived_at is set once and
 * never cleared.  updated_at moves only when name, description or metadata
 * actually change, or on the first archive.  Deleting a store deletes its
 * memories and versions in the same transaction.
 *
 * Every handler validates its body before taking the db lock, then runs
 * one transaction (db_begin/db_end).  List order: created_at desc, id desc;
 * the cursor carries the last row's (created_at, id). */
#include "msd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define STORE_COLS "id, name, description, metadata, archived_at, created_at, updated_at"

static cJSON *store_json(sqlite3_stmt *st)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "type", "memory_store");
    cJSON_AddStringToObject(o, "id", (const char *)sqlite3_column_text(st, 0));
    cJSON_AddStringToObject(o, "name", (const char *)sqlite3_column_text(st, 1));
    cJSON_AddStringToObject(o, "description", (const char *)sqlite3_column_text(st, 2));
    cJSON *md = cJSON_Parse((const char *)sqlite3_column_text(st, 3));
    cJSON_AddItemToObject(o, "metadata", md ? md : cJSON_CreateObject());
    if (sqlite3_column_type(st, 4) == SQLITE_NULL)
        cJSON_AddNullToObject(o, "archived_at");
    else
        cJSON_AddStringToObject(o, "archived_at", (const char *)sqlite3_column_text(st, 4));
    cJSON_AddStringToObject(o, "created_at", (const char *)sqlite3_column_text(st, 5));
    cJSON_AddStringToObject(o, "updated_at", (const char *)sqlite3_column_text(st, 6));
    return o;
}

/* Inside a transaction: the store as JSON into *out (caller deletes). */
static int store_fetch(struct db *db, const char *id, cJSON **out)
{
    sqlite3_stmt *st;
    int rc = db_prepare(db, "SELECT " STORE_COLS " FROM stores WHERE id = ?1", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        *out = store_json(st);
        rc = *out ? 0 : -ENOMEM;
    } else {
        rc = s == SQLITE_DONE ? -ENOENT : db_errno(s);
    }
    sqlite3_finalize(st);
    return rc;
}

int stores_lookup(struct db *db, const char *id, bool *archived)
{
    sqlite3_stmt *st;
    int rc = db_prepare(db, "SELECT archived_at IS NOT NULL FROM stores WHERE id = ?1", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        *archived = sqlite3_column_int(st, 0) != 0;
        rc = 0;
    } else {
        rc = s == SQLITE_DONE ? -ENOENT : db_errno(s);
    }
    sqlite3_finalize(st);
    return rc;
}

int stores_insert(struct db *db, const char *name, const char *description,
                  const char *metadata_json, char out_id[MSD_ID_MAX])
{
    char now[MSD_TS_LEN];
    db_now(now);
    db_new_id("memstore_", out_id);
    sqlite3_stmt *st;
    int rc = db_prepare(db,
                        "INSERT INTO stores(id, name, description, metadata, created_at, "
                        "updated_at) VALUES(?1, ?2, ?3, ?4, ?5, ?5)",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, out_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, description, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, metadata_json, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, now, -1, SQLITE_STATIC);
    rc = db_exec_stmt(st);
    sqlite3_finalize(st);
    return rc;
}

static int check_name(struct reply *rp, const char *name)
{
    size_t n = utf8_chars(name);
    if (n < 1 || n > 255) {
        reply_invalid(rp, "name must be 1 to 255 characters");
        return -EINVAL;
    }
    if (has_control_chars(name)) {
        reply_invalid(rp, "name must not contain control characters");
        return -EINVAL;
    }
    return 0;
}

static int check_description(struct reply *rp, const char *d)
{
    if (utf8_chars(d) > 1024) {
        reply_invalid(rp, "description must be at most 1024 characters");
        return -EINVAL;
    }
    return 0;
}

/* Applies patch (a JSON object) to md.  allow_null: null deletes a key (an
 * update); otherwise null is refused (a create).  Checks the key and value
 * lengths and, afterwards, the 16-pair cap.  0 or -EINVAL with rp filled. */
static int metadata_apply(struct reply *rp, cJSON *md, const cJSON *patch, bool allow_null)
{
    if (!cJSON_IsObject(patch)) {
        reply_invalid(rp, "metadata must be an object of strings");
        return -EINVAL;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, patch)
    {
        const char *k = it->string ? it->string : "";
        size_t kn = utf8_chars(k);
        if (kn < 1 || kn > 64) {
            reply_invalid(rp, "metadata keys must be 1 to 64 characters");
            return -EINVAL;
        }
        if (cJSON_IsNull(it) && allow_null) {
            cJSON_DeleteItemFromObjectCaseSensitive(md, k);
            continue;
        }
        if (!cJSON_IsString(it) || !it->valuestring) {
            reply_invalid(rp, "metadata value of %.64s must be a string", k);
            return -EINVAL;
        }
        if (utf8_chars(it->valuestring) > 512) {
            reply_invalid(rp, "metadata values must be at most 512 characters");
            return -EINVAL;
        }
        cJSON *v = cJSON_CreateString(it->valuestring);
        if (!v) {
            reply_errno(rp, -ENOMEM);
            return -ENOMEM;
        }
        if (cJSON_GetObjectItemCaseSensitive(md, k))
            cJSON_ReplaceItemInObjectCaseSensitive(md, k, v);
        else
            cJSON_AddItemToObject(md, k, v);
    }
    if (cJSON_GetArraySize(md) > 16) {
        reply_invalid(rp, "metadata may hold at most 16 pairs");
        return -EINVAL;
    }
    return 0;
}

/* Answers rp with store id (inside the transaction). */
static int reply_store(struct db *db, struct reply *rp, const char *id)
{
    cJSON *o = NULL;
    int rc = store_fetch(db, id, &o);
    if (rc == -ENOENT)
        reply_not_found(rp, "memory store", id);
    else if (rc)
        reply_errno(rp, rc);
    else
        reply_json(rp, 200, o);
    return rc;
}

void stores_create(struct req *rq, struct reply *rp)
{
    cJSON *body = NULL, *md = NULL;
    char *md_text = NULL;
    const char *name, *desc;
    if (body_object(rq, rp, false, &body) || jfield_str(rp, body, "name", &name) ||
        jfield_str(rp, body, "description", &desc))
        goto out;
    if (!name) {
        reply_invalid(rp, "name is required");
        goto out;
    }
    if (check_name(rp, name) || (desc && check_description(rp, desc)))
        goto out;
    md = cJSON_CreateObject();
    const cJSON *patch = cJSON_GetObjectItemCaseSensitive(body, "metadata");
    if (!md || (patch && !cJSON_IsNull(patch) && metadata_apply(rp, md, patch, false)))
        goto out;
    md_text = cJSON_PrintUnformatted(md);
    if (!md_text) {
        reply_errno(rp, -ENOMEM);
        goto out;
    }
    struct db *db = rq->srv->db;
    int rc = db_begin(db, true);
    if (rc) {
        reply_errno(rp, rc);
        goto out;
    }
    char id[MSD_ID_MAX];
    rc = stores_insert(db, name, desc ? desc : "", md_text, id);
    if (!rc)
        rc = reply_store(db, rp, id);
    else
        reply_errno(rp, rc);
    if (db_end(db, rc == 0) && rc == 0)
        reply_errno(rp, -EIO);
out:
    free(md_text);
    cJSON_Delete(md);
    cJSON_Delete(body);
}

void stores_list(struct req *rq, struct reply *rp)
{
    int limit;
    char gte[MSD_TS_LEN], lte[MSD_TS_LEN];
    bool all = false;
    const char *ia = req_query(rq, "include_archived");
    if (ia) {
        if (strcmp(ia, "true") == 0)
            all = true;
        else if (strcmp(ia, "false") != 0) {
            reply_invalid(rp, "include_archived must be true or false");
            return;
        }
    }
    if (q_limit(rq, rp, false, &limit) || q_created_at(rq, rp, "gte", gte) ||
        q_created_at(rq, rp, "lte", lte))
        return;
    char *after = NULL;
    const char *after_id = "";
    const char *page = req_query(rq, "page");
    if (page && *page) {
        size_t n;
        after = cursor_decode(page, &n);
        char *bar = after ? strchr(after, '|') : NULL;
        if (!bar || after[0] != 's') {
            free(after);
            reply_invalid(rp, "page is not a valid cursor");
            return;
        }
        *bar = '\0';
        after_id = bar + 1;
    }
    struct db *db = rq->srv->db;
    int rc = db_begin(db, false);
    if (rc) {
        free(after);
        reply_errno(rp, rc);
        return;
    }
    sqlite3_stmt *st = NULL;
    cJSON *res = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(res, "data");
    rc = db_prepare(db,
                    "SELECT " STORE_COLS " FROM stores WHERE (?1 OR archived_at IS NULL)"
                    " AND (?2 = '' OR created_at >= ?2) AND (?3 = '' OR created_at <= ?3)"
                    " AND (?4 = '' OR created_at < ?4 OR (created_at = ?4 AND id < ?5))"
                    " ORDER BY created_at DESC, id DESC LIMIT ?6",
                    &st);
    if (rc || !data)
        goto fail;
    sqlite3_bind_int(st, 1, all);
    sqlite3_bind_text(st, 2, gte, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, lte, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, after ? after + 1 : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, after_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 6, limit + 1);
    int count = 0, s;
    char last[MSD_TS_LEN + MSD_ID_MAX + 2] = "";
    bool more = false;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == limit) {
            more = true;
            break;
        }
        cJSON_AddItemToArray(data, store_json(st));
        snprintf(last, sizeof(last), "s%s|%s", sqlite3_column_text(st, 5),
                 sqlite3_column_text(st, 0));
        count++;
    }
    if (s != SQLITE_ROW && s != SQLITE_DONE) {
        rc = db_errno(s);
        goto fail;
    }
    char *next = more ? cursor_encode(last, strlen(last)) : NULL;
    if (next)
        cJSON_AddStringToObject(res, "next_page", next);
    else
        cJSON_AddNullToObject(res, "next_page");
    free(next);
    sqlite3_finalize(st);
    db_end(db, false);
    free(after);
    reply_json(rp, 200, res);
    return;
fail:
    sqlite3_finalize(st);
    db_end(db, false);
    free(after);
    cJSON_Delete(res);
    reply_errno(rp, rc ? rc : -ENOMEM);
}

void stores_get(struct req *rq, struct reply *rp)
{
    struct db *db = rq->srv->db;
    int rc = db_begin(db, false);
    if (rc) {
        reply_errno(rp, rc);
        return;
    }
    reply_store(db, rp, rq->ids[0]);
    db_end(db, false);
}

void stores_update(struct req *rq, struct reply *rp)
{
    cJSON *body = NULL, *md = NULL;
    char *md_text = NULL;
    const char *name, *desc;
    if (body_object(rq, rp, true, &body) || jfield_str(rp, body, "name", &name) ||
        jfield_str(rp, body, "description", &desc))
        goto out;
    if ((name && check_name(rp, name)) || (desc && check_description(rp, desc)))
        goto out;
    const cJSON *patch = cJSON_GetObjectItemCaseSensitive(body, "metadata");
    if (patch && cJSON_IsNull(patch))
        patch = NULL;
    if (patch && !cJSON_IsObject(patch)) {
        reply_invalid(rp, "metadata must be an object");
        goto out;
    }

    struct db *db = rq->srv->db;
    const char *id = rq->ids[0];
    int rc = db_begin(db, true);
    if (rc) {
        reply_errno(rp, rc);
        goto out;
    }
    sqlite3_stmt *st = NULL;
    rc = db_prepare(db, "SELECT name, description, metadata, archived_at FROM stores WHERE id=?1",
                    &st);
    if (rc) {
        reply_errno(rp, rc);
        goto end;
    }
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s != SQLITE_ROW) {
        rc = s == SQLITE_DONE ? -ENOENT : db_errno(s);
        if (rc == -ENOENT)
            reply_not_found(rp, "memory store", id);
        else
            reply_errno(rp, rc);
        goto end;
    }
    if (sqlite3_column_type(st, 3) != SQLITE_NULL) {
        rc = -EINVAL;
        reply_invalid(rp, "memory store %.80s is archived and cannot be updated", id);
        goto end;
    }
    bool changed = (name && strcmp(name, (const char *)sqlite3_column_text(st, 0)) != 0) ||
                   (desc && strcmp(desc, (const char *)sqlite3_column_text(st, 1)) != 0);
    const char *old_md = (const char *)sqlite3_column_text(st, 2);
    md = cJSON_Parse(old_md);
    if (!md) {
        rc = -ENOMEM;
        reply_errno(rp, rc);
        goto end;
    }
    if (patch && (rc = metadata_apply(rp, md, patch, true)))
        goto end;
    md_text = cJSON_PrintUnformatted(md);
    if (!md_text) {
        rc = -ENOMEM;
        reply_errno(rp, rc);
        goto end;
    }
    changed = changed || strcmp(md_text, old_md) != 0;
    sqlite3_finalize(st);
    st = NULL;
    if (changed) {
        char now[MSD_TS_LEN];
        db_now(now);
        rc = db_prepare(db,
                        "UPDATE stores SET name=coalesce(?2, name), "
                        "description=coalesce(?3, description), metadata=?4, updated_at=?5 "
                        "WHERE id=?1",
                        &st);
        if (!rc) {
            sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 3, desc, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 4, md_text, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 5, now, -1, SQLITE_STATIC);
            rc = db_exec_stmt(st);
        }
        if (rc) {
            reply_errno(rp, rc);
            goto end;
        }
    }
    rc = reply_store(db, rp, id);
end:
    sqlite3_finalize(st);
    if (db_end(db, rc == 0) && rc == 0)
        reply_errno(rp, -EIO);
out:
    free(md_text);
    cJSON_Delete(md);
    cJSON_Delete(body);
}

void stores_archive(struct req *rq, struct reply *rp)
{
    cJSON *body = NULL;
    if (body_object(rq, rp, true, &body))
        return;
    cJSON_Delete(body);
    struct db *db = rq->srv->db;
    const char *id = rq->ids[0];
    int rc = db_begin(db, true);
    if (rc) {
        reply_errno(rp, rc);
        return;
    }
    bool archived;
    rc = stores_lookup(db, id, &archived);
    if (!rc && !archived) {
        char now[MSD_TS_LEN];
        db_now(now);
        sqlite3_stmt *st;
        rc = db_prepare(db, "UPDATE stores SET archived_at=?2, updated_at=?2 WHERE id=?1", &st);
        if (!rc) {
            sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, now, -1, SQLITE_STATIC);
            rc = db_exec_stmt(st);
            sqlite3_finalize(st);
        }
    }
    if (!rc)
        rc = reply_store(db, rp, id);
    else if (rc == -ENOENT)
        reply_not_found(rp, "memory store", id);
    else
        reply_errno(rp, rc);
    if (db_end(db, rc == 0) && rc == 0)
        reply_errno(rp, -EIO);
}

void stores_delete(struct req *rq, struct reply *rp)
{
    struct db *db = rq->srv->db;
    const char *id = rq->ids[0];
    int rc = db_begin(db, true);
    if (rc) {
        reply_errno(rp, rc);
        return;
    }
    bool archived;
    rc = stores_lookup(db, id, &archived);
    static const char *const sqls[] = {
        "DELETE FROM versions WHERE store_id=?1",
        "DELETE FROM memories WHERE store_id=?1",
        "DELETE FROM stores WHERE id=?1",
    };
    for (size_t i = 0; !rc && i < sizeof(sqls) / sizeof(sqls[0]); i++) {
        sqlite3_stmt *st;
        rc = db_prepare(db, sqls[i], &st);
        if (rc)
            break;
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        rc = db_exec_stmt(st);
        sqlite3_finalize(st);
    }
    if (rc == -ENOENT)
        reply_not_found(rp, "memory store", id);
    else if (rc)
        reply_errno(rp, rc);
    if (db_end(db, rc == 0) && rc == 0)
        rc = -EIO, reply_errno(rp, rc);
    if (rc)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "memory_store_deleted");
    reply_json(rp, 200, o);
}
