/* pending.c - what the sync push reads and records: the dirty files with
 * their baselines, the tombstones of memories deleted locally, and the new
 * baseline after a successful push.  The state model these follow is in
 * the top comment of cache/write.c.
 *
 * Stale answers: cache_mark_synced applies the pushed (sha, path) as the
 * baseline, but marks the file clean only if its current content and path
 * are still the ones pushed; a write that landed while the request was in
 * flight keeps the file dirty, to be pushed against the new baseline.
 * Every function takes c->lock for its whole duration. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"

/* Like cache_store_files: fn returning non-zero stops, and that value is
 * returned. */
int cache_dirty_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "SELECT " NODE_COLS " FROM nodes WHERE store = ? AND is_dir = 0"
                           " AND state = 1 AND unlinked = 0 AND parent IS NOT NULL"
                           " ORDER BY path", &st);
    if (rc)
        goto out;
    sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
    int r = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct cnode n;
        r = db_row_to_node(st, &n);
        if (!r)
            r = fn(arg, &n);
        cnode_clear(&n);
        if (r)
            break;
    }
    if (r)
        rc = r; /* fn's value (or -ENOMEM) */
    else
        rc = rc == SQLITE_DONE ? 0 : db_fail(c, rc, "dirty files");
    sqlite3_finalize(st);
out:
    db_unlock(c);
    return rc;
}

void cache_tombstones_free(struct cache_tombstone *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].base_path);
    free(v);
}

static int fill_tombstone(sqlite3_stmt *st, void *item)
{
    struct cache_tombstone *t = item;
    snprintf(t->memory_id, sizeof(t->memory_id), "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(t->base_sha, sizeof(t->base_sha), "%s", (const char *)sqlite3_column_text(st, 1));
    t->base_path = strdup((const char *)sqlite3_column_text(st, 2));
    t->deleted_at_ns = sqlite3_column_int64(st, 3);
    return t->base_path ? 0 : -ENOMEM;
}

int cache_tombstones(struct cache *c, const char *store_id, struct cache_tombstone **out,
                     size_t *n)
{
    sqlite3_stmt *st;
    void *items = NULL;
    *out = NULL;
    *n = 0;
    db_lock(c);
    int rc = db_prepare(c, "SELECT memory_id, COALESCE(base_sha, ''), COALESCE(base_path, ''),"
                           " deleted_at FROM tombstones WHERE store = ? ORDER BY deleted_at,"
                           " memory_id", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        rc = db_collect(c, st, sizeof(**out), &items, n, fill_tombstone,
                        "list tombstones");
        *out = items;
    }
    db_unlock(c);
    if (rc) {
        cache_tombstones_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int cache_tombstone_drop(struct cache *c, const char *store_id, const char *memory_id)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "DELETE FROM tombstones WHERE store = ? AND memory_id = ?", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, memory_id, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? 0 : db_fail(c, rc, "drop tombstone");
        sqlite3_finalize(st);
    }
    db_unlock(c);
    return rc;
}

/* The memory just pushed lost its file meanwhile: record it as deleted
 * locally (with what it now holds), so the next sync deletes it. */
static int orphan(struct cache *c, uint64_t ino, const char *memory_id, const char *sha,
                  const char *path)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "INSERT OR REPLACE INTO tombstones(store, memory_id, base_sha,"
                           " base_path, deleted_at) SELECT store, ?2, ?3, ?4, ?5 FROM nodes"
                           " WHERE ino = ?1", &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    sqlite3_bind_text(st, 2, memory_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, db_now_ns());
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, "orphan tombstone");
}

int cache_mark_synced(struct cache *c, uint64_t ino, const char *memory_id, const char *sha,
                      const char *path)
{
    return cache_mark_synced_if(c, ino, NULL, memory_id, sha, path);
}

int cache_mark_synced_if(struct cache *c, uint64_t ino, const char *expect_id,
                         const char *memory_id, const char *sha, const char *path)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_begin(c);
    if (rc)
        goto out;
    rc = db_prepare(c, "SELECT COALESCE(memory_id, ''), unlinked FROM nodes WHERE ino = ?"
                       " AND ino > 2 AND is_dir = 0", &st);
    if (rc)
        goto out;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    char cur[CACHE_ID_MAX] = "";
    bool unlinked = false, found = false;
    if (sqlite3_step(st) == SQLITE_ROW) {
        found = true;
        snprintf(cur, sizeof(cur), "%s", (const char *)sqlite3_column_text(st, 0));
        unlinked = sqlite3_column_int(st, 1) != 0;
    }
    sqlite3_finalize(st);
    if (!found) {
        rc = -ENOENT;
        goto out;
    }
    if (unlinked || (expect_id && strcmp(cur, expect_id) != 0 && strcmp(cur, memory_id) != 0)) {
        /* Removed, or given another memory's identity (a rename over it),
         * while the request was in flight: the memory pushed belongs to no
         * file any more. */
        rc = orphan(c, ino, memory_id, sha, path);
        goto out;
    }
    rc = db_prepare(c, "UPDATE nodes SET memory_id = ?1, base_sha = ?2, base_path = ?3,"
                       " state = CASE WHEN sha IS ?2 AND path IS ?3 THEN 0 ELSE state END"
                       " WHERE ino = ?4", &st);
    if (rc)
        goto out;
    sqlite3_bind_text(st, 1, memory_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)ino);
    rc = sqlite3_step(st);
    rc = rc == SQLITE_DONE ? 0 : db_fail(c, rc, "mark synced");
    sqlite3_finalize(st);
out:
    if (!rc)
        rc = db_commit(c);
    if (rc)
        db_rollback(c);
    db_unlock(c);
    return rc;
}
