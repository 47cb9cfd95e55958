/* nodes.c - the cache's tree: reading nodes (lookup, getattr, readdir) and
 * bringing a store's clean nodes to a remote listing (cache_apply_remote).
 *
 * Invariants (checked by tests/test_cache_write.c):
 *  - a live node has parent != NULL except a store root; (parent, name) is
 *    unique; path is the parent's path + "/" + name ("/" for a root);
 *  - a directory is either implied by the memories below it (state 0) or
 *    was made locally with mkdir (state 1); only implied ones are pruned
 *    when they become empty;
 *  - a removed node that the kernel may still reference is kept with
 *    unlinked = 1 and parent NULL until the next cache_open.
 * Every function takes c->lock for its whole duration (db_lock). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"
#include "log.h"

void cnode_clear(struct cnode *n)
{
    if (!n)
        return;
    free(n->name);
    free(n->path);
    free(n->base_path);
    memset(n, 0, sizeof(*n));
}

static void copy_text(char *dst, size_t cap, sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(dst, cap, "%s", t ? (const char *)t : "");
}

int db_row_to_node(sqlite3_stmt *st, struct cnode *n)
{
    memset(n, 0, sizeof(*n));
    n->ino = (uint64_t)sqlite3_column_int64(st, 0);
    n->parent = (uint64_t)sqlite3_column_int64(st, 1);
    const unsigned char *name = sqlite3_column_text(st, 2);
    const unsigned char *path = sqlite3_column_text(st, 3);
    const unsigned char *base_path = sqlite3_column_text(st, 13);
    n->name = strdup(name ? (const char *)name : "");
    n->path = strdup(path ? (const char *)path : "");
    n->base_path = strdup(base_path ? (const char *)base_path : "");
    if (!n->name || !n->path || !n->base_path) {
        cnode_clear(n);
        return -ENOMEM;
    }
    n->is_dir = sqlite3_column_int(st, 4) != 0;
    n->size = (uint64_t)sqlite3_column_int64(st, 5);
    n->mtime_ns = sqlite3_column_int64(st, 6);
    n->ctime_ns = sqlite3_column_int64(st, 7);
    copy_text(n->sha, sizeof(n->sha), st, 8);
    copy_text(n->memory_id, sizeof(n->memory_id), st, 9);
    copy_text(n->base_sha, sizeof(n->base_sha), st, 10);
    n->state = sqlite3_column_int(st, 11);
    n->has_content = sqlite3_column_int(st, 12) != 0;
    n->unlinked = sqlite3_column_int(st, 14) != 0;
    copy_text(n->refused_sha, sizeof(n->refused_sha), st, 15);
    n->unsaved = sqlite3_column_int(st, 16);
    n->atime_ns = sqlite3_column_int64(st, 17);
    n->subdirs = (uint64_t)sqlite3_column_int64(st, 18);
    n->used_ns = sqlite3_column_int64(st, 19);
    n->evicted = sqlite3_column_int(st, 20) != 0;
    return 0;
}

/* Runs a kept single-row select (db_cached); -ENOENT when there is no row. */
static int one_node(struct cache *c, sqlite3_stmt *st, struct cnode *out)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        rc = out ? db_row_to_node(st, out) : 0;
    else if (rc == SQLITE_DONE)
        rc = -ENOENT;
    else
        rc = db_fail(c, rc, "select node");
    db_done(st);
    return rc;
}

int cache_store_attach(struct cache *c, const char *store_id, bool read_only, uint64_t *root_ino)
{
    sqlite3_stmt *st = NULL;
    int rc;
    db_lock(c);
    rc = db_begin(c);
    if (rc)
        goto out;
    rc = db_prepare(c, "SELECT root FROM stores WHERE id = ?", &st);
    if (rc)
        goto out;
    sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW) {
        *root_ino = (uint64_t)sqlite3_column_int64(st, 0);
        db_finish(c, st);
        /* Unlinked nodes were kept only while a kernel referenced them; no
         * kernel references a store that is being attached (its host lock
         * is held), while other stores of a shared cache directory may be
         * mounted by another daemon: only this store's are dropped. */
        rc = db_prepare(c, "DELETE FROM nodes WHERE store = ? AND unlinked = 1", &st);
        if (rc)
            goto out;
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
            rc = db_fail(c, rc, "drop unlinked nodes");
            goto out;
        }
        db_finish(c, st);
        st = NULL;
        /* Content a writer of the last session still held open is what it
         * last closed: saved now, no writer can come back for it. */
        rc = db_exec_bound(c, "UPDATE nodes SET unsaved = 0 WHERE store = ? AND unsaved = 2",
                           store_id);
        if (rc)
            goto out;
        /* A deletion kept local by log_only or disabled lasts one session:
         * the memory is still in the store and shows again now. */
        rc = db_prepare(c, "DELETE FROM tombstones WHERE store = ? AND mode != 0", &st);
        if (rc)
            goto out;
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
            rc = db_fail(c, rc, "end kept deletions");
            goto out;
        }
        db_finish(c, st);
        st = NULL;
        rc = db_prepare(c, "UPDATE stores SET read_only = ? WHERE id = ?", &st);
        if (rc)
            goto out;
        sqlite3_bind_int(st, 1, read_only);
        sqlite3_bind_text(st, 2, store_id, -1, SQLITE_TRANSIENT);
    } else {
        db_finish(c, st);
        int64_t now = db_now_ns();
        rc = db_prepare(c, "INSERT INTO nodes(store, parent, name, path, is_dir, mtime, ctime)"
                           " VALUES (?, NULL, '', '/', 1, ?, ?)", &st);
        if (rc)
            goto out;
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, now);
        sqlite3_bind_int64(st, 3, now);
        if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
            rc = db_fail(c, rc, "insert root");
            goto out;
        }
        db_finish(c, st);
        *root_ino = (uint64_t)sqlite3_last_insert_rowid(c->db);
        rc = db_prepare(c, "INSERT INTO stores(id, root, read_only) VALUES (?, ?, ?)", &st);
        if (rc)
            goto out;
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)*root_ino);
        sqlite3_bind_int(st, 3, read_only);
    }
    if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
        rc = db_fail(c, rc, "attach store");
        goto out;
    }
    rc = db_commit(c);
out:
    db_finish(c, st);
    if (rc)
        db_rollback(c);
    db_unlock(c);
    return rc;
}

int cache_store_of(struct cache *c, uint64_t ino, char store_out[CACHE_ID_MAX])
{
    db_lock(c);
    int rc = db_writable_store(c, ino, store_out, NULL);
    db_unlock(c);
    return rc == -EROFS ? 0 : rc;
}

int cache_getattr(struct cache *c, uint64_t ino, struct cnode *out)
{
    sqlite3_stmt *st;
    db_lock(c);
    /* Closed files a failed commit took out of the database go back in
     * first (journal.c): read without them, a node shows the content from
     * before a close that was answered, which an open would load over its
     * writer's buffer.  At most once a second, as the saver does: a
     * commit that keeps failing is not replayed at every stat (a read in
     * the second after a failure may still show the older content). */
    if (c->jstuck && !c->lazy && db_journal_due(c))
        (void)db_journal_retry(c);
    int rc = db_cached(c, DB_ST_NODE_BY_INO, DB_SQL_NODE_BY_INO, &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
        rc = one_node(c, st, out);
    }
    db_unlock(c);
    return rc;
}

int cache_lookup(struct cache *c, uint64_t parent, const char *name, struct cnode *out)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_cached(c, DB_ST_NODE_BY_NAME, DB_SQL_NODE_BY_NAME, &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)parent);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        rc = one_node(c, st, out);
    }
    db_unlock(c);
    return rc;
}

int db_each_node(struct cache *c, sqlite3_stmt *st, cache_node_fn fn, void *arg)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct cnode n;
        int r = db_row_to_node(st, &n);
        if (!r)
            r = fn(arg, &n);
        cnode_clear(&n);
        if (r) {
            db_finish(c, st);
            return r;
        }
    }
    db_finish(c, st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, "list nodes");
}

int db_each_store_node(struct cache *c, const char *sql, const char *store_id, cache_node_fn fn,
                       void *arg)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, sql, &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
    return db_each_node(c, st, fn, arg);
}

int cache_readdir(struct cache *c, uint64_t dir, uint64_t after, cache_node_fn fn, void *arg)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "SELECT " NODE_COLS " FROM nodes WHERE parent = ? AND ino > ?"
                           " ORDER BY ino", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)dir);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)after);
        rc = db_each_node(c, st, fn, arg);
    }
    db_unlock(c);
    return rc;
}

int cache_store_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg)
{
    db_lock(c);
    int rc = db_each_store_node(c, "SELECT " NODE_COLS " FROM nodes WHERE store = ? AND is_dir = 0"
                                   " AND unlinked = 0 AND parent IS NOT NULL ORDER BY path",
                                store_id, fn, arg);
    db_unlock(c);
    return rc;
}

int cache_store_set_mode(struct cache *c, const char *store_id, enum cache_del_mode mode)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "UPDATE stores SET deletions = ? WHERE id = ?", &st);
    if (!rc) {
        sqlite3_bind_int(st, 1, (int)mode);
        sqlite3_bind_text(st, 2, store_id, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? (sqlite3_changes(c->db) ? 0 : -ENOENT)
                               : db_fail(c, rc, "set deletion mode");
        db_finish(c, st);
    }
    return db_unlock_rc(c, rc);
}

int cache_store_pending(struct cache *c, const char *store_id, struct cache_store_stats *s)
{
    sqlite3_stmt *st;
    memset(s, 0, sizeof(*s));
    db_lock(c);
    /* state = 1 and state = 2 rows through nodes_store_state; unsaved ones
     * through the partial index nodes_unsaved (its WHERE is repeated so
     * that SQLite may use it). */
    int rc = db_prepare(c,
        "SELECT (SELECT count(*) FROM nodes WHERE store = ?1 AND state = 1 AND is_dir = 0"
        "   AND unsaved != 1 AND unlinked = 0),"
        " (SELECT count(*) FROM nodes WHERE store = ?1 AND state = 2 AND is_dir = 0"
        "   AND unlinked = 0),"
        " (SELECT count(*) FROM nodes WHERE store = ?1 AND unsaved != 0 AND unsaved = 1"
        "   AND is_dir = 0 AND unlinked = 0),"
        " (SELECT count(*) FROM tombstones t WHERE t.store = ?1),"
        " (SELECT count(*) FROM tombstones t WHERE t.store = ?1 AND t.mode != 0)", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            s->dirty = (uint64_t)sqlite3_column_int64(st, 0);
            s->refused = (uint64_t)sqlite3_column_int64(st, 1);
            s->unsaved = (uint64_t)sqlite3_column_int64(st, 2);
            s->tombstones = (uint64_t)sqlite3_column_int64(st, 3);
            s->kept_deletions = (uint64_t)sqlite3_column_int64(st, 4);
            rc = 0;
        } else {
            rc = db_fail(c, rc, "store pending");
        }
        db_finish(c, st);
    }
    db_unlock(c);
    return rc;
}

int cache_store_stats(struct cache *c, const char *store_id, struct cache_store_stats *s)
{
    sqlite3_stmt *st;
    memset(s, 0, sizeof(*s));
    db_lock(c);
    int rc = db_prepare(c,
        "SELECT COALESCE(SUM(is_dir = 0), 0), COALESCE(SUM(is_dir = 1 AND parent IS NOT NULL), 0),"
        " COALESCE(SUM(CASE WHEN is_dir = 0 THEN size ELSE 0 END), 0),"
        " COALESCE(SUM(is_dir = 0 AND state = 1 AND unsaved != 1), 0),"
        " COALESCE(SUM(is_dir = 0 AND state = 2), 0),"
        " COALESCE(SUM(is_dir = 0 AND evicted IS NOT sha AND (sha IS NULL OR NOT EXISTS"
        "   (SELECT 1 FROM blobs b WHERE b.sha = nodes.sha))), 0),"
        " (SELECT count(*) FROM tombstones t WHERE t.store = ?1),"
        " (SELECT count(*) FROM conflicts k WHERE k.store = ?1),"
        " (SELECT count(*) FROM tombstones t WHERE t.store = ?1 AND t.mode != 0),"
        " COALESCE(SUM(is_dir = 0 AND unsaved = 1), 0),"
        " COALESCE(SUM(is_dir = 0 AND evicted IS sha AND NOT EXISTS"
        "   (SELECT 1 FROM blobs b WHERE b.sha = nodes.sha)), 0)"
        " FROM nodes WHERE store = ?1 AND unlinked = 0", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            s->files = (uint64_t)sqlite3_column_int64(st, 0);
            s->dirs = (uint64_t)sqlite3_column_int64(st, 1);
            s->bytes = (uint64_t)sqlite3_column_int64(st, 2);
            s->dirty = (uint64_t)sqlite3_column_int64(st, 3);
            s->refused = (uint64_t)sqlite3_column_int64(st, 4);
            s->missing_content = (uint64_t)sqlite3_column_int64(st, 5);
            s->tombstones = (uint64_t)sqlite3_column_int64(st, 6);
            s->conflicts = (uint64_t)sqlite3_column_int64(st, 7);
            s->kept_deletions = (uint64_t)sqlite3_column_int64(st, 8);
            s->unsaved = (uint64_t)sqlite3_column_int64(st, 9);
            s->evicted = (uint64_t)sqlite3_column_int64(st, 10);
            rc = 0;
        } else {
            rc = db_fail(c, rc, "store stats");
        }
        db_finish(c, st);
    }
    /* Closed on a full disk: only the journal holds them yet. */
    size_t waiting = 0, was_new = 0;
    if (!rc)
        rc = db_journal_waiting(c, store_id, &waiting, &was_new, NULL);
    s->journal_waiting = waiting;
    s->unsaved -= was_new <= s->unsaved ? was_new : s->unsaved;
    db_unlock(c);
    return rc;
}

int cache_journal_files(struct cache *c, const char *store_id, struct cache_jfile **out,
                        size_t *n)
{
    size_t was_new = 0;
    db_lock(c);
    int rc = db_journal_waiting(c, store_id, n, &was_new, out);
    db_unlock(c);
    if (rc)
        *n = 0;
    return rc;
}

void cache_jfiles_free(struct cache_jfile *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].path);
    free(v);
}

static int fill_missing(sqlite3_stmt *st, void *item)
{
    struct cache_missing *m = item;
    copy_text(m->memory_id, CACHE_ID_MAX, st, 0);
    copy_text(m->sha, SHA256_HEX_LEN + 1, st, 1);
    return 0;
}

static int fill_group(sqlite3_stmt *st, void *item)
{
    struct cache_content_group *g = item;
    copy_text(g->prefix, sizeof(g->prefix), st, 0);
    g->files = (uint64_t)sqlite3_column_int64(st, 1);
    g->missing = (uint64_t)sqlite3_column_int64(st, 2);
    return 0;
}

int cache_content_groups(struct cache *c, const char *store_id,
                         struct cache_content_group **out, size_t *n)
{
    sqlite3_stmt *st;
    void *items = NULL;
    *out = NULL;
    *n = 0;
    db_lock(c);
    int rc = db_prepare(c, "SELECT CASE WHEN instr(substr(path, 2), '/') > 0"
                           " THEN substr(path, 1, instr(substr(path, 2), '/') + 1) ELSE '/' END AS g,"
                           " count(*), sum(evicted IS NOT sha AND"
                           " NOT EXISTS (SELECT 1 FROM blobs b WHERE b.sha = nodes.sha))"
                           " FROM nodes WHERE store = ? AND is_dir = 0 AND unlinked = 0"
                           " AND memory_id IS NOT NULL AND sha IS NOT NULL GROUP BY g ORDER BY g",
                    &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        rc = db_collect(c, st, sizeof(**out), &items, n, fill_group, "content groups");
        *out = items;
    }
    db_unlock(c);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int cache_missing_content(struct cache *c, const char *store_id, struct cache_missing **out,
                          size_t *n)
{
    sqlite3_stmt *st;
    void *items = NULL;
    *out = NULL;
    *n = 0;
    db_lock(c);
    int rc = db_prepare(c, "SELECT memory_id, sha FROM nodes WHERE store = ? AND is_dir = 0"
                           " AND unlinked = 0 AND memory_id IS NOT NULL AND sha IS NOT NULL"
                           " AND evicted IS NOT sha"
                           " AND NOT EXISTS (SELECT 1 FROM blobs b WHERE b.sha = nodes.sha)"
                           " ORDER BY path", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        rc = db_collect(c, st, sizeof(**out), &items, n, fill_missing, "missing content");
        *out = items;
    }
    db_unlock(c);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

static int fill_store(sqlite3_stmt *st, void *item)
{
    struct cache_store *s = item;
    copy_text(s->id, CACHE_ID_MAX, st, 0);
    s->read_only = sqlite3_column_int(st, 1) != 0;
    return 0;
}

int cache_stores(struct cache *c, struct cache_store **out, size_t *n)
{
    sqlite3_stmt *st;
    void *items = NULL;
    *out = NULL;
    *n = 0;
    db_lock(c);
    int rc = db_prepare(c, "SELECT id, read_only FROM stores ORDER BY id", &st);
    if (!rc)
        rc = db_collect(c, st, sizeof(**out), &items, n, fill_store, "list stores");
    *out = items;
    db_unlock(c);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}
