/* history.c - what the cache knows for memory history and recovery
 * (docs/history.md): the store version each file's baseline is, the
 * extended attributes of a file, and the lookups a restore needs.
 *
 * Owns the table memvers(store, memory_id, sha, version_id, at): per
 * memory, the newest version the daemon saw of it (a listing's
 * memory_version_id and updated_at, the version feed's newest version, a
 * push's answer).  One row per memory (the newer `at` wins, an equal one
 * replaces), so a file's "version the cache holds" is the row of its
 * memory whose sha is the file's baseline (base_sha); a row for other
 * content (the store moved on, the file is not there yet) says nothing
 * about the file.  Rows of memories the cache no longer knows (no live
 * file, no deletion pending) go at cache_versions_prune, run after each
 * full listing, so the table stays the size of the store.
 *
 * Every function takes c->lock for its whole duration. */
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

int cache_versions_note(struct cache *c, const char *store_id, const struct cache_vnote *r,
                        size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += r[i].version_id && r[i].version_id[0] && r[i].sha && r[i].sha[0];
    if (!k)
        return 0;
    db_lock(c);
    sqlite3_stmt *st = NULL;
    int rc = db_begin(c);
    if (!rc)
        rc = db_prepare(c, "INSERT INTO memvers(store, memory_id, sha, version_id, at)"
                           " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(store, memory_id) DO UPDATE"
                           " SET sha = excluded.sha, version_id = excluded.version_id,"
                           " at = excluded.at WHERE excluded.at >= memvers.at"
                           " AND excluded.version_id IS NOT memvers.version_id", &st);
    for (size_t i = 0; !rc && i < n; i++) {
        if (!r[i].version_id || !r[i].version_id[0] || !r[i].sha || !r[i].sha[0])
            continue;
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, r[i].memory_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, r[i].sha, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, r[i].version_id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, r[i].at_ns);
        int s = sqlite3_step(st);
        if (s != SQLITE_DONE)
            rc = db_fail(c, s, "note version");
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    db_finish(c, st);
    if (!rc)
        rc = db_commit(c);
    if (rc)
        db_rollback(c);
    db_unlock(c);
    return rc;
}

int cache_versions_prune(struct cache *c, const char *store_id)
{
    db_lock(c);
    int rc = db_exec_bound(c, "DELETE FROM memvers WHERE store = ?1 AND NOT EXISTS"
                              " (SELECT 1 FROM nodes n WHERE n.store = ?1"
                              "  AND n.memory_id = memvers.memory_id)"
                              " AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.store = ?1"
                              "  AND t.memory_id = memvers.memory_id)", store_id);
    return db_unlock_rc(c, rc);
}

const char *cache_state_name(int state)
{
    switch (state) {
    case CACHE_XSTATE_CLEAN:
        return "clean";
    case CACHE_XSTATE_DIRTY:
        return "dirty";
    case CACHE_XSTATE_REFUSED:
        return "refused";
    default:
        return "conflict";
    }
}

int cache_file_history(struct cache *c, uint64_t ino, struct cache_file_history *out)
{
    memset(out, 0, sizeof(*out));
    sqlite3_stmt *st;
    db_lock(c);
    /* conflict: a record for this file's memory, or at its path. */
    int rc = db_prepare(c,
        "SELECT n.is_dir, COALESCE(n.memory_id, ''), COALESCE(n.sha, ''), n.state,"
        " COALESCE(m.version_id, ''), COALESCE(m.at, 0),"
        " EXISTS(SELECT 1 FROM conflicts k WHERE k.store = n.store"
        "  AND ((n.memory_id IS NOT NULL AND k.memory_id = n.memory_id) OR k.path = n.path))"
        " FROM nodes n LEFT JOIN memvers m ON m.store = n.store AND m.memory_id = n.memory_id"
        "  AND m.sha = n.base_sha"
        " WHERE n.ino = ?1 AND n.ino > 2", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW && sqlite3_column_int(st, 0)) {
            rc = -EISDIR;
        } else if (s == SQLITE_ROW) {
            snprintf(out->memory_id, sizeof(out->memory_id), "%s", sqlite3_column_text(st, 1));
            snprintf(out->sha, sizeof(out->sha), "%s", sqlite3_column_text(st, 2));
            int state = sqlite3_column_int(st, 3);
            snprintf(out->version_id, sizeof(out->version_id), "%s",
                     sqlite3_column_text(st, 4));
            out->updated_ns = sqlite3_column_int64(st, 5);
            out->state = sqlite3_column_int(st, 6)      ? CACHE_XSTATE_CONFLICT
                         : state == CNODE_REFUSED ? CACHE_XSTATE_REFUSED
                         : state == CNODE_DIRTY   ? CACHE_XSTATE_DIRTY
                                                  : CACHE_XSTATE_CLEAN;
            if (!out->memory_id[0]) /* never synced: no version to speak of */
                out->version_id[0] = '\0', out->updated_ns = 0;
        } else {
            rc = s == SQLITE_DONE ? -ENOENT : db_fail(c, s, "file history");
        }
        db_finish(c, st);
    }
    db_unlock(c);
    return rc;
}

int cache_file_of_memory(struct cache *c, const char *store_id, const char *memory_id,
                         struct cnode *out)
{
    memset(out, 0, sizeof(*out));
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "SELECT " NODE_COLS " FROM nodes WHERE store = ?1 AND memory_id = ?2"
                           " AND unlinked = 0 AND is_dir = 0 LIMIT 1", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, memory_id, -1, SQLITE_TRANSIENT);
        int s = sqlite3_step(st);
        rc = s == SQLITE_ROW    ? db_row_to_node(st, out)
             : s == SQLITE_DONE ? -ENOENT
                                : db_fail(c, s, "file of memory");
        db_finish(c, st);
    }
    db_unlock(c);
    return rc;
}

int cache_node_at(struct cache *c, const char *store_id, const char *path, struct cnode *out)
{
    memset(out, 0, sizeof(*out));
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "SELECT " NODE_COLS " FROM nodes WHERE store = ?1 AND path = ?2"
                           " AND unlinked = 0 AND (parent IS NOT NULL OR path = '/') LIMIT 1",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
        int s = sqlite3_step(st);
        rc = s == SQLITE_ROW    ? db_row_to_node(st, out)
             : s == SQLITE_DONE ? -ENOENT
                                : db_fail(c, s, "node at path");
        db_finish(c, st);
    }
    db_unlock(c);
    return rc;
}

int cache_deletion_at(struct cache *c, const char *store_id, const char *path,
                      char memory_id[CACHE_ID_MAX])
{
    memory_id[0] = '\0';
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "SELECT memory_id FROM tombstones WHERE store = ?1 AND base_path = ?2"
                           " ORDER BY deleted_at DESC LIMIT 1", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW)
            snprintf(memory_id, CACHE_ID_MAX, "%s", sqlite3_column_text(st, 0));
        rc = s == SQLITE_ROW ? 0 : s == SQLITE_DONE ? -ENOENT : db_fail(c, s, "deletion at");
        db_finish(c, st);
    }
    db_unlock(c);
    return rc;
}

int cache_conflict_get(struct cache *c, int64_t id, char store_id[CACHE_ID_MAX],
                       struct cache_conflict *out)
{
    memset(out, 0, sizeof(*out));
    store_id[0] = '\0';
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "SELECT store, path, COALESCE(memory_id, ''), local_sha,"
                           " COALESCE(remote_sha, ''), at, kind FROM conflicts WHERE id = ?1",
                        &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, id);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW) {
            snprintf(store_id, CACHE_ID_MAX, "%s", sqlite3_column_text(st, 0));
            out->id = id;
            out->path = strdup((const char *)sqlite3_column_text(st, 1));
            snprintf(out->memory_id, sizeof(out->memory_id), "%s", sqlite3_column_text(st, 2));
            snprintf(out->local_sha, sizeof(out->local_sha), "%s", sqlite3_column_text(st, 3));
            snprintf(out->remote_sha, sizeof(out->remote_sha), "%s",
                     sqlite3_column_text(st, 4));
            out->at_ns = sqlite3_column_int64(st, 5);
            out->kind = sqlite3_column_int(st, 6);
            rc = out->path ? 0 : -ENOMEM;
        } else {
            rc = s == SQLITE_DONE ? -ENOENT : db_fail(c, s, "get conflict");
        }
        db_finish(c, st);
    }
    db_unlock(c);
    return rc;
}

int cache_conflict_restored(struct cache *c, int64_t id)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "DELETE FROM conflicts WHERE id = ?1", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, id);
        rc = step_done(c, st, "forget restored conflict");
        if (!rc && sqlite3_changes(c->db) == 0)
            rc = -ENOENT;
    }
    return db_unlock_rc(c, rc);
}
