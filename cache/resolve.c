/* resolve.c - what the sync engine records about local files after a
 * decision (sync/reconcile.c): the store winning (revert, drop), a remote
 * memory gone (forget the baseline), a refusal by the server, and the
 * conflict records that keep a losing local version readable.
 *
 * Races with local writes: every change to a node is conditional on the
 * node still holding the content and path the decision saw; otherwise
 * -EAGAIN, nothing changes, and the next sync decides again, so a write
 * that lands during a sync is never overwritten by it.
 * Conflict records point at blobs (their local_sha): cache_gc_blobs keeps
 * those.  A record is either a local version the store won over, or the
 * unsaved edit of a file still open at unmount (cache_keep_unsaved), which
 * was never content a writer closed, so it is kept but never pushed.  Every function takes c->lock for its whole duration. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"

static int step_done(struct cache *c, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    db_finish(c, st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, what);
}

/* Runs an UPDATE bound as (ino, expect_sha, expect_path) in ?1..?3 and
 * says -EAGAIN when it touched nothing. */
static int update_if(struct cache *c, const char *sql, uint64_t ino, const char *sha,
                     const char *path)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, sql, &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    sqlite3_bind_text(st, 2, sha ? sha : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, path ? path : "", -1, SQLITE_TRANSIENT);
    rc = step_done(c, st, "conditional update");
    if (!rc && sqlite3_changes(c->db) == 0)
        rc = -EAGAIN;
    return rc;
}

int cache_revert_if(struct cache *c, uint64_t ino, const char *expect_sha,
                    const char *expect_path)
{
    db_lock(c);
    int rc = update_if(c,
        "UPDATE nodes SET state = 0, sha = base_sha, refused_sha = NULL, refused_why = NULL,"
        " size = COALESCE((SELECT length(data) FROM blobs b WHERE b.sha = nodes.base_sha), size)"
        " WHERE ino = ?1 AND unlinked = 0 AND memory_id IS NOT NULL AND base_sha IS NOT NULL"
        " AND COALESCE(sha, '') = ?2 AND path = ?3", ino, expect_sha, expect_path);
    return db_unlock_rc(c, rc);
}

int cache_drop_if(struct cache *c, uint64_t ino, const char *expect_sha, const char *expect_path,
                  uint64_t *parent, char **name)
{
    sqlite3_stmt *st;
    if (name)
        *name = NULL;
    db_lock(c);
    int rc = db_prepare(c, "SELECT parent, name FROM nodes WHERE ino = ? AND unlinked = 0", &st);
    if (rc)
        goto out;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    if (sqlite3_step(st) == SQLITE_ROW) {
        if (parent)
            *parent = (uint64_t)sqlite3_column_int64(st, 0);
        if (name) {
            const unsigned char *t = sqlite3_column_text(st, 1);
            *name = strdup(t ? (const char *)t : "");
        }
    } else {
        rc = -EAGAIN;
    }
    db_finish(c, st);
    if (!rc)
        /* sha goes too: a buffer still open on the file then sees that its
         * node moved, and keeps its bytes as a conflict (write.c). */
        rc = update_if(c, "UPDATE nodes SET parent = NULL, unlinked = 1, sha = NULL"
                          " WHERE ino = ?1 AND unlinked = 0 AND COALESCE(sha, '') = ?2"
                          " AND path = ?3",
                       ino, expect_sha, expect_path);
out:
    rc = db_unlock_rc(c, rc);
    if (rc && name) {
        free(*name);
        *name = NULL;
    }
    return rc;
}

int cache_forget_base(struct cache *c, uint64_t ino, const char *memory_id)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "UPDATE nodes SET memory_id = NULL, base_sha = NULL,"
                           " base_path = NULL, state = CASE WHEN state = 0 THEN 1 ELSE state END"
                           " WHERE ino = ?1 AND (?2 IS NULL OR memory_id IS ?2)", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
        if (memory_id)
            sqlite3_bind_text(st, 2, memory_id, -1, SQLITE_TRANSIENT);
        rc = step_done(c, st, "forget baseline");
    }
    return db_unlock_rc(c, rc);
}

int cache_mark_refused(struct cache *c, uint64_t ino, const char *sha, const char *why)
{
    sqlite3_stmt *st;
    db_lock(c);
    /* Only while the content is still the refused one: a write since made
     * it something new, which deserves its own try. */
    int rc = db_prepare(c, "UPDATE nodes SET state = 2, refused_sha = ?2, refused_why = ?3"
                           " WHERE ino = ?1 AND sha = ?2 AND state = 1", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
        sqlite3_bind_text(st, 2, sha, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, why ? why : "", -1, SQLITE_TRANSIENT);
        rc = step_done(c, st, "mark refused");
    }
    return db_unlock_rc(c, rc);
}

int cache_conflict_add(struct cache *c, const char *store_id, const char *path,
                       const char *memory_id, const char *local_sha, const char *remote_sha)
{
    sqlite3_stmt *st;
    db_lock(c);
    /* Only over bytes still in the cache: a decision taken from a file
     * saved again since may name content already freed. */
    int rc = db_prepare(c, "INSERT INTO conflicts(store, path, memory_id, local_sha, remote_sha,"
                           " at) SELECT ?1, ?2, ?3, ?4, ?5, ?6"
                           " WHERE EXISTS (SELECT 1 FROM blobs WHERE sha = ?4)", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
        if (memory_id && *memory_id)
            sqlite3_bind_text(st, 3, memory_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, local_sha, -1, SQLITE_TRANSIENT);
        if (remote_sha && *remote_sha)
            sqlite3_bind_text(st, 5, remote_sha, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 6, db_now_ns());
        rc = step_done(c, st, "add conflict");
        if (!rc && sqlite3_changes(c->db) == 0)
            rc = -EAGAIN;
    }
    return db_unlock_rc(c, rc);
}

void cache_conflicts_free(struct cache_conflict *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].path);
    free(v);
}

static int fill_conflict(sqlite3_stmt *st, void *item)
{
    struct cache_conflict *x = item;
    x->id = sqlite3_column_int64(st, 0);
    x->kind = sqlite3_column_int(st, 6);
    x->path = strdup((const char *)sqlite3_column_text(st, 1));
    snprintf(x->memory_id, sizeof(x->memory_id), "%s", sqlite3_column_text(st, 2));
    snprintf(x->local_sha, sizeof(x->local_sha), "%s", sqlite3_column_text(st, 3));
    snprintf(x->remote_sha, sizeof(x->remote_sha), "%s", sqlite3_column_text(st, 4));
    x->at_ns = sqlite3_column_int64(st, 5);
    return x->path ? 0 : -ENOMEM;
}

int cache_conflicts(struct cache *c, const char *store_id, struct cache_conflict **out, size_t *n)
{
    sqlite3_stmt *st;
    void *items = NULL;
    *out = NULL;
    *n = 0;
    db_lock(c);
    int rc = db_prepare(c, "SELECT id, path, COALESCE(memory_id, ''), local_sha,"
                           " COALESCE(remote_sha, ''), at, kind FROM conflicts"
                           " WHERE ?1 IS NULL OR store = ?1 ORDER BY id DESC", &st);
    if (!rc) {
        if (store_id)
            sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        rc = db_collect(c, st, sizeof(**out), &items, n, fill_conflict, "list conflicts");
        *out = items;
    }
    db_unlock(c);
    if (rc) {
        cache_conflicts_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int cache_conflict_content(struct cache *c, int64_t id, char **buf, size_t *len)
{
    sqlite3_stmt *st;
    char sha[SHA256_HEX_LEN + 1] = "";
    db_lock(c);
    int rc = db_prepare(c, "SELECT local_sha FROM conflicts WHERE id = ?", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, id);
        if (sqlite3_step(st) == SQLITE_ROW)
            snprintf(sha, sizeof(sha), "%s", sqlite3_column_text(st, 0));
        else
            rc = -ENOENT;
        db_finish(c, st);
    }
    db_unlock(c);
    return rc ? rc : cache_blob_get(c, sha, buf, len);
}

const char *cache_conflict_kind_name(int kind)
{
    return kind == CACHE_CONFLICT_UNSAVED ? "unsaved_at_unmount"
           : kind == CACHE_CONFLICT_CUT   ? "cut_at_size_limit"
                                          : "store_won";
}

int cache_keep_unsaved(struct cache *c, uint64_t ino, const char *buf, size_t len, int kind)
{
    char sha[SHA256_HEX_LEN + 1];
    sha256_hex(buf, len, sha);
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_begin(c);
    if (!rc)
        rc = db_prepare(c, "INSERT OR IGNORE INTO blobs(sha, data) VALUES (?, ?)", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, sha, -1, SQLITE_TRANSIENT);
        sqlite3_bind_blob(st, 2, len ? buf : "", (int)len, SQLITE_STATIC);
        rc = step_done(c, st, "keep unsaved content");
    }
    if (!rc)
        rc = db_prepare(c, "INSERT INTO conflicts(store, path, memory_id, local_sha, remote_sha,"
                           " at, kind) SELECT store, path, memory_id, ?2, sha, ?3, ?4"
                           " FROM nodes WHERE ino = ?1 AND is_dir = 0", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
        sqlite3_bind_text(st, 2, sha, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, db_now_ns());
        sqlite3_bind_int(st, 4, kind);
        rc = step_done(c, st, "keep unsaved record");
        if (!rc && sqlite3_changes(c->db) == 0)
            rc = -ENOENT;
    }
    if (!rc)
        rc = db_commit(c);
    if (rc)
        db_rollback(c);
    db_unlock(c);
    return rc;
}

void cache_refused_free(struct cache_refused *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].path);
        free(v[i].why);
    }
    free(v);
}

static int fill_refused(sqlite3_stmt *st, void *item)
{
    struct cache_refused *r = item;
    r->path = strdup((const char *)sqlite3_column_text(st, 0));
    r->why = strdup((const char *)sqlite3_column_text(st, 1));
    return r->path && r->why ? 0 : -ENOMEM;
}

int cache_refused_files(struct cache *c, const char *store_id, struct cache_refused **out,
                        size_t *n)
{
    sqlite3_stmt *st;
    void *items = NULL;
    *out = NULL;
    *n = 0;
    db_lock(c);
    int rc = db_prepare(c, "SELECT path, COALESCE(refused_why, '') FROM nodes WHERE store = ?"
                           " AND state = 2 AND unlinked = 0 ORDER BY path", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        rc = db_collect(c, st, sizeof(**out), &items, n, fill_refused, "list refused");
        *out = items;
    }
    db_unlock(c);
    if (rc) {
        cache_refused_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}
