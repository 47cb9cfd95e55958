/* pending.c - what the sync push reads: the dirty files with their
 * baselines (only content a writer has finished: closed by its last
 * writer or fsynced, enum cache_saved), and the tombstones of
 * memories deleted locally with the deletion mode each was made under.
 * The state model these follow is in the top comment of cache/write.c.
 *
 * The answers to what was pushed are recorded by cache/sent.c.
 * Every function takes c->lock for its whole duration. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"

bool cache_pushable(const struct cnode *n, bool final)
{
    return n->unsaved == CACHE_SAVED || (final && n->unsaved == CACHE_HELD);
}

struct pushable_only {
    bool final;
    cache_node_fn fn;
    void *arg;
};

static int pushable_only(void *arg, const struct cnode *n)
{
    const struct pushable_only *p = arg;
    return cache_pushable(n, p->final) ? p->fn(p->arg, n) : 0;
}

/* Like cache_store_files: fn returning non-zero stops, and that value is
 * returned. */
int cache_dirty_files(struct cache *c, const char *store_id, bool final, cache_node_fn fn,
                      void *arg)
{
    struct pushable_only p = {final, fn, arg};
    return cache_changed_files(c, store_id, pushable_only, &p);
}

int cache_changed_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg)
{
    db_lock(c);
    int rc = db_apply_saved(c);
    if (!rc)
        rc = db_each_store_node(c, "SELECT " NODE_COLS " FROM nodes WHERE store = ? AND is_dir = 0"
                                   " AND state IN (1, 2) AND unlinked = 0 AND parent IS NOT NULL"
                                   " ORDER BY path", store_id, fn, arg);
    db_unlock(c);
    return rc;
}

int cache_unpushed_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg)
{
    db_lock(c);
    int rc = db_each_store_node(c, "SELECT " NODE_COLS " FROM nodes WHERE store = ? AND is_dir = 0"
                                   " AND state = 1 AND unsaved != 1 AND unlinked = 0"
                                   " ORDER BY path", store_id, fn, arg);
    db_unlock(c);
    return rc;
}

int cache_unsettled_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg)
{
    db_lock(c);
    int rc = db_each_store_node(c, "SELECT " NODE_COLS " FROM nodes WHERE store = ? AND is_dir = 0"
                                   " AND state > 0 AND memory_id IS NOT NULL AND unlinked = 0"
                                   " AND parent IS NOT NULL", store_id, fn, arg);
    db_unlock(c);
    return rc;
}

/* Runs a bound SELECT EXISTS(...) and finishes it: its answer in *yes
 * (left as it was on error). */
static int step_exists(struct cache *c, sqlite3_stmt *st, const char *what, bool *yes)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *yes = sqlite3_column_int(st, 0) != 0;
        rc = 0;
    } else {
        rc = db_fail(c, rc, what);
    }
    db_finish(c, st);
    return rc;
}

int cache_store_has_local_work(struct cache *c, const char *store_id, bool final, bool *work)
{
    sqlite3_stmt *st;
    *work = true; /* on error: assume there is, so the sync looks */
    db_lock(c);
    int rc = db_apply_saved(c);
    if (!rc)
        rc = db_prepare(c, "SELECT EXISTS(SELECT 1 FROM nodes WHERE store = ?1 AND state = 1"
                           " AND is_dir = 0 AND unlinked = 0 AND parent IS NOT NULL"
                           " AND (unsaved = 0 OR (?2 AND unsaved = 2)))"
                           " OR EXISTS(SELECT 1 FROM tombstones WHERE store = ?1)", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 2, final);
        rc = step_exists(c, st, "local work", work);
    }
    db_unlock(c);
    return rc;
}

int cache_store_empty(struct cache *c, const char *store_id, bool *empty)
{
    sqlite3_stmt *st;
    *empty = false; /* on error: assume it is not */
    db_lock(c);
    int rc = db_prepare(c, "SELECT EXISTS(SELECT 1 FROM nodes WHERE store = ?1 AND parent IS NOT NULL)"
                           " OR EXISTS(SELECT 1 FROM tombstones WHERE store = ?1)"
                           " OR EXISTS(SELECT 1 FROM conflicts WHERE store = ?1)", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        bool any = true;
        rc = step_exists(c, st, "store empty", &any);
        *empty = !rc && !any;
    }
    db_unlock(c);
    return rc;
}

void cache_baselines_free(struct cache_base *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].path);
    free(v);
}

static int fill_base(sqlite3_stmt *st, void *item)
{
    struct cache_base *b = item;
    snprintf(b->memory_id, sizeof(b->memory_id), "%s", (const char *)sqlite3_column_text(st, 0));
    b->path = strdup((const char *)sqlite3_column_text(st, 1));
    snprintf(b->sha, sizeof(b->sha), "%s", (const char *)sqlite3_column_text(st, 2));
    b->size = (uint64_t)sqlite3_column_int64(st, 3);
    b->mtime_ns = sqlite3_column_int64(st, 4);
    return b->path ? 0 : -ENOMEM;
}

int cache_baselines(struct cache *c, const char *store_id, struct cache_base **out, size_t *n)
{
    sqlite3_stmt *st;
    void *items = NULL;
    *out = NULL;
    *n = 0;
    db_lock(c);
    int rc = db_prepare(c, "SELECT memory_id, base_path, base_sha, size, mtime FROM nodes"
                           " WHERE store = ?1 AND memory_id IS NOT NULL AND is_dir = 0"
                           " AND unlinked = 0 AND parent IS NOT NULL AND base_sha IS NOT NULL"
                           " AND base_path IS NOT NULL"
                           " UNION ALL SELECT memory_id, base_path, base_sha, 0, 0 FROM tombstones"
                           " WHERE store = ?1 AND base_sha IS NOT NULL AND base_path IS NOT NULL",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        rc = db_collect(c, st, sizeof(**out), &items, n, fill_base, "baselines");
        *out = items;
    }
    db_unlock(c);
    if (rc) {
        cache_baselines_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
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
    t->mode = sqlite3_column_int(st, 4);
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
                           " deleted_at, mode FROM tombstones WHERE store = ? ORDER BY deleted_at,"
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
        db_finish(c, st);
    }
    return db_unlock_rc(c, rc);
}

int cache_tombstone_rebase(struct cache *c, const char *store_id, const char *memory_id,
                           const char *sha, const char *path)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "UPDATE tombstones SET base_sha = NULLIF(?3, ''),"
                           " base_path = NULLIF(?4, '') WHERE store = ?1 AND memory_id = ?2",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, memory_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, sha ? sha : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, path ? path : "", -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? 0 : db_fail(c, rc, "rebase tombstone");
        db_finish(c, st);
    }
    return db_unlock_rc(c, rc);
}
