/* memories.c - the memory endpoints except listing (memory-store-api.md
 * A.3, A.6, A.7, B.1, B.3, B.5); the list lives in memlist.c.
 *
 * Owns: the memories table.  Invariants, each kept inside one write
 * transaction:
 *   - paths are unique per store and never overlap: no memory path equals,
 *     is an ancestor of (path + "/" is a prefix of) or a descendant of
 *     another memory path in the same store (find_conflict);
 *   - memories.version_id names the version holding the current state, and
 *     every real change appends exactly one version (created / modified /
 *     deleted); a no-op update appends nothing;
 *   - sha and size always describe content's exact bytes;
 *   - a store never holds more than srv->max_memories memories.
 * Archived stores refuse create and update (400) but allow delete.
 * Bodies are validated before the db lock is taken. */
#include "msd.h"
#include "memint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "sha256.h"

cJSON *mem_json(sqlite3_stmt *st, bool full)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "type", "memory");
    cJSON_AddStringToObject(o, "id", (const char *)sqlite3_column_text(st, 0));
    cJSON_AddStringToObject(o, "memory_store_id", (const char *)sqlite3_column_text(st, 1));
    cJSON_AddStringToObject(o, "path", (const char *)sqlite3_column_text(st, 2));
    if (full && sqlite3_column_type(st, 3) != SQLITE_NULL)
        cJSON_AddStringToObject(o, "content", (const char *)sqlite3_column_text(st, 3));
    else
        cJSON_AddNullToObject(o, "content");
    cJSON_AddStringToObject(o, "content_sha256", (const char *)sqlite3_column_text(st, 4));
    cJSON_AddNumberToObject(o, "content_size_bytes", (double)sqlite3_column_int64(st, 5));
    cJSON_AddStringToObject(o, "memory_version_id", (const char *)sqlite3_column_text(st, 6));
    cJSON_AddStringToObject(o, "created_at", (const char *)sqlite3_column_text(st, 7));
    cJSON_AddStringToObject(o, "updated_at", (const char *)sqlite3_column_text(st, 8));
    return o;
}

void mem_row_release(struct mem_row *m)
{
    free(m->path);
    free(m->content);
    m->path = m->content = NULL;
}

/* Loads the memory by id (or by path when id is NULL) in store. */
static int mem_load(struct db *db, const char *store, const char *id, const char *path,
                    struct mem_row *m)
{
    sqlite3_stmt *st;
    memset(m, 0, sizeof(*m));
    int rc = db_prepare(db,
                        id ? "SELECT id, path, content, sha FROM memories WHERE store_id=?1 "
                             "AND id=?2"
                           : "SELECT id, path, content, sha FROM memories WHERE store_id=?1 "
                             "AND path=?2",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, id ? id : path, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        snprintf(m->id, sizeof(m->id), "%s", sqlite3_column_text(st, 0));
        snprintf(m->sha, sizeof(m->sha), "%s", sqlite3_column_text(st, 3));
        m->path = db_col_strdup(st, 1);
        m->content = db_col_strdup(st, 2);
        m->content_len = (size_t)sqlite3_column_bytes(st, 2);
        rc = (m->path && m->content) ? 0 : -ENOMEM;
        if (rc)
            mem_row_release(m);
    } else {
        rc = s == SQLITE_DONE ? -ENOENT : db_errno(s);
    }
    sqlite3_finalize(st);
    return rc;
}

/* Looks for a memory (other than exclude) whose path equals path or is
 * its ancestor or descendant.  Returns 0 (none), 1 (found: cf filled) or
 * -errno. */
static int find_conflict(struct db *db, const char *store, const char *path,
                         const char *exclude, struct mem_row *cf)
{
    size_t n = strlen(path);
    char *probe = malloc(n + 2);
    if (!probe)
        return -ENOMEM;
    sqlite3_stmt *eq = NULL, *below = NULL;
    int rc = db_prepare(db,
                        "SELECT id, path FROM memories WHERE store_id=?1 AND path=?2 AND "
                        "id != ?3",
                        &eq);
    if (!rc)
        rc = db_prepare(db,
                        "SELECT id, path FROM memories WHERE store_id=?1 AND path >= ?2 AND "
                        "path < ?3 AND id != ?4 ORDER BY path LIMIT 1",
                        &below);
    if (rc)
        goto out;
    /* The path itself and each ancestor: "/a/b/c" probes "/a/b/c", "/a", "/a/b". */
    for (size_t cut = n;;) {
        memcpy(probe, path, cut);
        probe[cut] = '\0';
        sqlite3_reset(eq);
        sqlite3_bind_text(eq, 1, store, -1, SQLITE_STATIC);
        sqlite3_bind_text(eq, 2, probe, -1, SQLITE_STATIC);
        sqlite3_bind_text(eq, 3, exclude ? exclude : "", -1, SQLITE_STATIC);
        int s = sqlite3_step(eq);
        if (s == SQLITE_ROW) {
            snprintf(cf->id, sizeof(cf->id), "%s", sqlite3_column_text(eq, 0));
            cf->path = db_col_strdup(eq, 1);
            rc = cf->path ? 1 : -ENOMEM;
            goto out;
        }
        if (s != SQLITE_DONE) {
            rc = db_errno(s);
            goto out;
        }
        const char *prev = cut > 1 ? memrchr(path + 1, '/', cut - 1) : NULL;
        if (!prev)
            break;
        cut = (size_t)(prev - path);
    }
    /* Descendants: every path in [path + "/", path + "0"). */
    char *hi = malloc(n + 2);
    if (!hi) {
        rc = -ENOMEM;
        goto out;
    }
    memcpy(probe, path, n);
    memcpy(hi, path, n);
    probe[n] = '/', hi[n] = '0';
    probe[n + 1] = hi[n + 1] = '\0';
    sqlite3_bind_text(below, 1, store, -1, SQLITE_STATIC);
    sqlite3_bind_text(below, 2, probe, -1, SQLITE_STATIC);
    sqlite3_bind_text(below, 3, hi, -1, SQLITE_STATIC);
    sqlite3_bind_text(below, 4, exclude ? exclude : "", -1, SQLITE_STATIC);
    int s = sqlite3_step(below);
    if (s == SQLITE_ROW) {
        snprintf(cf->id, sizeof(cf->id), "%s", sqlite3_column_text(below, 0));
        cf->path = db_col_strdup(below, 1);
        rc = cf->path ? 1 : -ENOMEM;
    } else {
        rc = s == SQLITE_DONE ? 0 : db_errno(s);
    }
    free(hi);
out:
    sqlite3_finalize(eq);
    sqlite3_finalize(below);
    free(probe);
    return rc;
}

static int count_memories(struct db *db, const char *store, long *out)
{
    sqlite3_stmt *st;
    int rc = db_prepare(db, "SELECT count(*) FROM memories WHERE store_id=?1", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    rc = s == SQLITE_ROW ? 0 : db_errno(s);
    *out = rc ? 0 : (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc;
}

/* Appends the "created" version and inserts the memory row. */
static int insert_memory(struct db *db, const char *store, const char *path, const char *content,
                         size_t n, const char *actor, char out_id[MSD_ID_MAX])
{
    char now[MSD_TS_LEN], sha[SHA256_HEX_LEN + 1], ver[MSD_ID_MAX];
    db_now(now);
    sha256_hex(content, n, sha);
    db_new_id("mem_", out_id);
    int rc = versions_insert(db, store, out_id, "created", path, content, n, sha, actor, now, ver);
    if (rc)
        return rc;
    sqlite3_stmt *st;
    rc = db_prepare(db,
                    "INSERT INTO memories(id, store_id, path, content, sha, size, version_id,"
                    " created_at, updated_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
                    &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, out_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, store, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, path, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, content, (int)n, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, sha, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)n);
    sqlite3_bind_text(st, 7, ver, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, now, -1, SQLITE_STATIC);
    rc = db_exec_stmt(st);
    sqlite3_finalize(st);
    return rc;
}

/* Appends the "modified" version and rewrites the memory row. */
static int write_memory(struct db *db, const char *store, const char *id, const char *path,
                        const char *content, size_t n, const char *actor)
{
    char now[MSD_TS_LEN], sha[SHA256_HEX_LEN + 1], ver[MSD_ID_MAX];
    db_now(now);
    sha256_hex(content, n, sha);
    int rc = versions_insert(db, store, id, "modified", path, content, n, sha, actor, now, ver);
    if (rc)
        return rc;
    sqlite3_stmt *st;
    rc = db_prepare(db,
                    "UPDATE memories SET path=?2, content=?3, sha=?4, size=?5, version_id=?6,"
                    " updated_at=?7 WHERE id=?1",
                    &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, content, (int)n, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, sha, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)n);
    sqlite3_bind_text(st, 6, ver, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, now, -1, SQLITE_STATIC);
    rc = db_exec_stmt(st);
    sqlite3_finalize(st);
    return rc;
}

/* Inside a transaction: replies with memory id of store. */
static int reply_memory(struct db *db, struct reply *rp, const char *store, const char *id,
                        bool full)
{
    sqlite3_stmt *st;
    int rc = db_prepare(db, "SELECT " MEM_COLS " FROM memories WHERE store_id=?1 AND id=?2",
                        &st);
    if (rc) {
        reply_errno(rp, rc);
        return rc;
    }
    sqlite3_bind_text(st, 1, store, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        reply_json(rp, 200, mem_json(st, full));
        rc = 0;
    } else {
        rc = s == SQLITE_DONE ? -ENOENT : db_errno(s);
        if (rc == -ENOENT)
            reply_not_found(rp, "memory", id);
        else
            reply_errno(rp, rc);
    }
    sqlite3_finalize(st);
    return rc;
}

/* Validates a path or content field; 0 or -EINVAL with rp filled. */
static int check_path(struct reply *rp, const char *path)
{
    const char *why = NULL;
    if (rules_check_path(path, strlen(path), &why)) {
        reply_invalid(rp, "invalid path: %s", why ? why : "not allowed");
        return -EINVAL;
    }
    return 0;
}

static int check_content(struct reply *rp, const char *content)
{
    const char *why = NULL;
    int rc = rules_check_content(content, strlen(content), &why);
    if (rc == -EFBIG)
        reply_error(rp, 413, "request_too_large", "content is larger than %d bytes",
                    MEM_CONTENT_MAX_BYTES);
    else if (rc)
        reply_invalid(rp, "invalid content: %s", why ? why : "not allowed");
    return rc ? -EINVAL : 0;
}

/* Opens a transaction and checks the store (404) and, for writes that an
 * archive forbids, that it is live (400).  0, or -1 with rp filled. */
static int begin_store(struct req *rq, struct reply *rp, bool need_live)
{
    struct db *db = rq->srv->db;
    bool archived;
    int rc = db_begin(db, true);
    if (rc) {
        reply_errno(rp, rc);
        return -1;
    }
    rc = stores_lookup(db, rq->ids[0], &archived);
    if (rc == -ENOENT)
        reply_not_found(rp, "memory store", rq->ids[0]);
    else if (rc)
        reply_errno(rp, rc);
    else if (archived && need_live)
        reply_invalid(rp, "memory store %.80s is archived; its memories are read-only",
                      rq->ids[0]);
    else
        return 0;
    db_end(db, false);
    return -1;
}

/* Finishes a handler's write transaction; a failed commit becomes a 500. */
static void end_write(struct db *db, struct reply *rp, int rc)
{
    if (db_end(db, rc == 0) && rc == 0)
        reply_errno(rp, -EIO);
}

void memories_create(struct req *rq, struct reply *rp)
{
    cJSON *body = NULL;
    const char *path, *content;
    bool full;
    if (q_view(rq, rp, false, &full) || body_object(rq, rp, false, &body) ||
        jfield_str(rp, body, "path", &path) || jfield_str(rp, body, "content", &content))
        goto out;
    if (!path || !content) {
        reply_invalid(rp, "%s is required", path ? "content" : "path");
        goto out;
    }
    if (check_path(rp, path) || check_content(rp, content) || begin_store(rq, rp, true))
        goto out;
    struct db *db = rq->srv->db;
    const char *store = rq->ids[0];
    struct mem_row cf = {0};
    long count = 0;
    char id[MSD_ID_MAX];
    int rc = find_conflict(db, store, path, NULL, &cf);
    if (rc == 1) {
        reply_path_conflict(rp, cf.id, cf.path);
        mem_row_release(&cf);
    } else if (rc || (rc = count_memories(db, store, &count))) {
        reply_errno(rp, rc);
    } else if (count >= rq->srv->max_memories) {
        rc = -ENOSPC;
        reply_invalid(rp, "memory store is full: it holds the maximum of %ld memories",
                      rq->srv->max_memories);
    } else if ((rc = insert_memory(db, store, path, content, strlen(content), rq->actor_key_id,
                                   id))) {
        reply_errno(rp, rc);
    } else {
        rc = reply_memory(db, rp, store, id, full);
    }
    end_write(db, rp, rc);
out:
    cJSON_Delete(body);
}

void memories_get(struct req *rq, struct reply *rp)
{
    bool full, archived;
    if (q_view(rq, rp, true, &full))
        return;
    struct db *db = rq->srv->db;
    int rc = db_begin(db, false);
    if (rc) {
        reply_errno(rp, rc);
        return;
    }
    rc = stores_lookup(db, rq->ids[0], &archived);
    if (rc == -ENOENT)
        reply_not_found(rp, "memory store", rq->ids[0]);
    else if (rc)
        reply_errno(rp, rc);
    else
        reply_memory(db, rp, rq->ids[0], rq->ids[1], full);
    db_end(db, false);
}

/* Parses the optional precondition; *sha = NULL when absent. */
static int parse_precondition(struct reply *rp, const cJSON *body, const char **sha)
{
    *sha = NULL;
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(body, "precondition");
    if (!pc || cJSON_IsNull(pc))
        return 0;
    const char *type;
    if (!cJSON_IsObject(pc)) {
        reply_invalid(rp, "precondition must be an object");
        return -EINVAL;
    }
    if (jfield_str(rp, pc, "type", &type) || jfield_str(rp, pc, "content_sha256", sha))
        return -EINVAL;
    if (!type || strcmp(type, "content_sha256") != 0) {
        reply_invalid(rp, "precondition.type must be content_sha256");
        return -EINVAL;
    }
    if (!*sha || !sha256_is_hex(*sha)) {
        reply_invalid(rp, "precondition.content_sha256 must be 64 lowercase hex digits");
        return -EINVAL;
    }
    return 0;
}

void memories_update(struct req *rq, struct reply *rp)
{
    cJSON *body = NULL;
    const char *path, *content, *want_sha;
    bool full;
    if (q_view(rq, rp, false, &full) || body_object(rq, rp, true, &body) ||
        jfield_str(rp, body, "path", &path) || jfield_str(rp, body, "content", &content) ||
        parse_precondition(rp, body, &want_sha))
        goto out;
    if ((path && check_path(rp, path)) || (content && check_content(rp, content)) ||
        begin_store(rq, rp, false))
        goto out;
    struct db *db = rq->srv->db;
    const char *store = rq->ids[0], *id = rq->ids[1];
    struct mem_row cur = {0}, cf = {0};
    bool archived = false;
    int rc = mem_load(db, store, id, NULL, &cur);
    if (!rc)
        rc = stores_lookup(db, store, &archived);
    if (rc) {
        if (rc == -ENOENT)
            reply_not_found(rp, "memory", id);
        else
            reply_errno(rp, rc);
        goto end;
    }
    if (archived) {
        rc = -EINVAL;
        reply_invalid(rp, "memory store %.80s is archived; its memories are read-only", store);
        goto end;
    }
    size_t n = content ? strlen(content) : cur.content_len;
    bool same_content = !content || (n == cur.content_len && memcmp(content, cur.content, n) == 0);
    bool same_path = !path || strcmp(path, cur.path) == 0;
    /* The idempotent-retry exception needs something asked for: an
     * update carrying only a stale precondition is refused. */
    bool asked = content || path;
    if (want_sha && strcmp(want_sha, cur.sha) != 0 && !(asked && same_content && same_path)) {
        rc = -EAGAIN;
        reply_precondition(rp, "the memory's content_sha256 does not match the precondition");
        goto end;
    }
    if (!(same_content && same_path)) {
        if (!same_path && (rc = find_conflict(db, store, path, id, &cf))) {
            if (rc == 1)
                reply_path_conflict(rp, cf.id, cf.path);
            else
                reply_errno(rp, rc);
            goto end;
        }
        rc = write_memory(db, store, id, path ? path : cur.path, content ? content : cur.content,
                          n, rq->actor_key_id);
        if (rc) {
            reply_errno(rp, rc);
            goto end;
        }
    }
    rc = reply_memory(db, rp, store, id, full);
end:
    mem_row_release(&cur);
    mem_row_release(&cf);
    end_write(db, rp, rc);
out:
    cJSON_Delete(body);
}

void memories_delete(struct req *rq, struct reply *rp)
{
    const char *want = req_query(rq, "expected_content_sha256");
    if (want && !sha256_is_hex(want)) {
        reply_invalid(rp, "expected_content_sha256 must be 64 lowercase hex digits");
        return;
    }
    if (begin_store(rq, rp, false))
        return;
    struct db *db = rq->srv->db;
    const char *store = rq->ids[0], *id = rq->ids[1];
    struct mem_row cur;
    int rc = mem_load(db, store, id, NULL, &cur);
    if (rc) {
        if (rc == -ENOENT)
            reply_not_found(rp, "memory", id);
        else
            reply_errno(rp, rc);
        end_write(db, rp, rc);
        return;
    }
    char now[MSD_TS_LEN], ver[MSD_ID_MAX];
    sqlite3_stmt *st = NULL;
    if (want && strcmp(want, cur.sha) != 0) {
        rc = -EAGAIN;
        reply_precondition(rp, "the memory's content_sha256 does not match "
                               "expected_content_sha256");
        goto end;
    }
    db_now(now);
    rc = versions_insert(db, store, id, "deleted", cur.path, NULL, 0, NULL, rq->actor_key_id,
                         now, ver);
    if (!rc)
        rc = db_prepare(db, "DELETE FROM memories WHERE id=?1", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        rc = db_exec_stmt(st);
    }
    if (rc) {
        reply_errno(rp, rc);
        goto end;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "memory_deleted");
    reply_json(rp, 200, o);
end:
    sqlite3_finalize(st);
    mem_row_release(&cur);
    end_write(db, rp, rc);
}

int memories_put_locked(struct msd *srv, const char *store, const char *path,
                        const char *content, size_t n, const char *actor)
{
    struct db *db = srv->db;
    struct mem_row cur, cf = {0};
    char id[MSD_ID_MAX];
    long count;
    int rc = mem_load(db, store, NULL, path, &cur);
    if (rc == 0) {
        if (n != cur.content_len || memcmp(content, cur.content, n) != 0)
            rc = write_memory(db, store, cur.id, path, content, n, actor);
        mem_row_release(&cur);
        return rc;
    }
    if (rc != -ENOENT)
        return rc;
    rc = find_conflict(db, store, path, NULL, &cf);
    mem_row_release(&cf);
    if (rc)
        return rc == 1 ? -EEXIST : rc;
    if ((rc = count_memories(db, store, &count)))
        return rc;
    if (count >= srv->max_memories)
        return -ENOSPC;
    return insert_memory(db, store, path, content, n, actor, id);
}
