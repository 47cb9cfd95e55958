/* gc.c - keeping the cache bounded: content nothing needs is freed, the
 * database gives the space back, conflict records are pruned by policy,
 * and --cache-max-size evicts clean content the store can give again.
 *
 * What keeps a blob: a node's content (nodes.sha: a live file, or an
 * unlinked one a descriptor still holds open: forget_unlinked drops the
 * content of the others), a node's baseline
 * (nodes.base_sha: the store's version a file reverts to when the store
 * wins), a conflict record (conflicts.local_sha) and an upload in flight
 * (sent.sha: it becomes the file's baseline when its answer comes).
 *
 * Freeing: triggers (db.c, schema_gc) delete a blob in the transaction
 * that drops its last reference (a node's content or baseline replaced, a
 * node, conflict record or upload record deleted), so rewriting a file
 * 10,000 times keeps one copy, not 10,000.  A blob stored before anything
 * refers to it (bytes fetched for a memory that changed again since it
 * was listed) is dropped by the collector (cache_gc_blobs) if the next
 * listing does not claim it.  Freed pages are reused by later writes and
 * returned to the file system by the incremental vacuum that
 * cache_housekeep runs; a database made before that is converted by one
 * VACUUM at cache_open (db_reclaim).
 *
 * Eviction (cache_housekeep with max_bytes): while the content held is
 * over the limit, the content of clean files (synced, not dirty, not
 * refused, not a new file, not open here, referenced by nothing else) is
 * dropped, least recently used first (`used`: opened, or created or saved
 * here).  The node keeps its hash and records it in `evicted`: the
 * prefetch leaves it alone, and an open downloads it again
 * (fs/ops_content.c ops_load -> syncer_fetch).  Dirty content,
 * baselines of dirty files, conflict records and uploads in flight are
 * never evicted.
 *
 * Every function takes c->lock for its whole duration. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db_internal.h"
#include "log.h"

/* How often `used` is refreshed by an open: an hour is fine for an order. */
#define USED_GRANULARITY_NS (3600LL * 1000000000LL)

/* A clean file whose content the store can give again (alias n). */
#define CLEAN_FILE(n)                                                                              \
    "(" n ".is_dir = 0 AND " n ".unlinked = 0 AND " n ".parent IS NOT NULL AND " n ".state = 0"  \
    " AND " n ".unsaved = 0 AND " n ".memory_id IS NOT NULL AND " n ".sha IS " n ".base_sha"        \
    " AND NOT EXISTS (SELECT 1 FROM sent s WHERE s.store = " n ".store AND s.ino = " n ".ino))"

static int gc_blobs_locked(struct cache *c, uint64_t *freed)
{
    int rc = db_exec(c, "DELETE FROM blobs WHERE " DB_BLOB_UNNEEDED);
    if (!rc && freed)
        *freed += (uint64_t)sqlite3_changes(c->db);
    return rc;
}

int cache_gc_blobs(struct cache *c)
{
    db_lock(c);
    int rc = gc_blobs_locked(c, NULL);
    db_unlock(c);
    return rc;
}

/* Checkpoints the WAL and cuts it to nothing, never waiting (another
 * process may be reading); the checkpointer's passes are held off
 * meanwhile (they would make it busy).  Caller holds c->lock. */
static int truncate_log(struct cache *c)
{
    (void)db_settle(c); /* a checkpoint waits for no open transaction of ours */
    sqlite3_busy_timeout(c->db, 0);
    db_ckpt_pause(c);
    int rc = sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    db_ckpt_resume(c);
    sqlite3_busy_timeout(c->db, 10000);
    return rc;
}

/* Gives free pages back; the WAL is checkpointed and cut when nobody else
 * reads it. */
static void give_back(struct cache *c)
{
    (void)db_settle(c);
    sqlite3_exec(c->db, "PRAGMA incremental_vacuum", NULL, NULL, NULL);
    (void)truncate_log(c);
}

int db_reclaim(struct cache *c)
{
    db_lock(c);
    int64_t mode = 0;
    uint64_t freed = 0;
    int rc = gc_blobs_locked(c, &freed);
    if (!rc)
        rc = db_pragma_int(c, "PRAGMA auto_vacuum", &mode);
    if (!rc && mode != 2) {
        /* Made by an older build: one VACUUM turns incremental vacuum on
         * (the connection asked for it) and drops the free pages.  Another
         * process using the cache may hold it up: then next time. */
        char *err = NULL;
        if (sqlite3_exec(c->db, "VACUUM", NULL, NULL, &err) == SQLITE_OK)
            log_info("cache database compacted", "dir", c->dir);
        else
            log_debug("cache database not compacted yet", "dir", c->dir, "error",
                      err ? err : "?");
        sqlite3_free(err);
    }
    if (!rc)
        give_back(c);
    db_unlock(c);
    if (freed) {
        char n[32];
        snprintf(n, sizeof(n), "%llu", (unsigned long long)freed);
        log_info("freed cached content nothing refers to", "dir", c->dir, "blobs", n);
    }
    return rc;
}

static uint64_t file_size(const char *dir, const char *name)
{
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

static int content_bytes(struct cache *c, uint64_t *bytes, uint64_t *blobs)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "SELECT COALESCE(SUM(length(data)), 0), count(*) FROM blobs", &st);
    if (rc)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *bytes = (uint64_t)sqlite3_column_int64(st, 0);
        if (blobs)
            *blobs = (uint64_t)sqlite3_column_int64(st, 1);
        rc = 0;
    } else {
        rc = db_fail(c, rc, "content size");
    }
    db_finish(c, st);
    return rc;
}

int cache_usage(struct cache *c, struct cache_usage *u)
{
    memset(u, 0, sizeof(*u));
    db_lock(c);
    int rc = content_bytes(c, &u->content_bytes, &u->blobs);
    int64_t v = 0;
    if (!rc)
        rc = db_pragma_int(c, "SELECT count(*) FROM nodes WHERE evicted IS sha AND unlinked = 0"
                           " AND NOT EXISTS (SELECT 1 FROM blobs b WHERE b.sha = nodes.sha)", &v);
    u->evicted_files = (uint64_t)v;
    u->db_bytes = file_size(c->dir, "cache.db");
    u->wal_bytes = file_size(c->dir, "cache.db-wal");
    u->reserve_bytes = db_reserve_bytes(c);
    db_unlock(c);
    return rc;
}

struct used_args {
    uint64_t ino;
    int64_t now_ns;
};

static int mark_used_tx(struct cache *c, void *arg)
{
    struct used_args *a = arg;
    sqlite3_stmt *st;
    int rc = db_prepare(c, "UPDATE nodes SET used = ?2 WHERE ino = ?1 AND COALESCE(used, 0) < ?3",
                        &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)a->ino);
        sqlite3_bind_int64(st, 2, a->now_ns);
        sqlite3_bind_int64(st, 3, a->now_ns - USED_GRANULARITY_NS);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? 0 : db_fail(c, rc, "mark used");
        db_finish(c, st);
    }
    return rc;
}

int cache_mark_used(struct cache *c, uint64_t ino, int64_t now_ns)
{
    /* Lazy: a stamp for the eviction order; a crash may lose it. */
    struct used_args a = {ino, now_ns};
    return db_in_tx_lazy(c, mark_used_tx, &a);
}

/* Conflict records past the policy: older than max_age, or beyond the
 * `keep` newest of their store. */
static int prune_conflicts(struct cache *c, const struct cache_policy *p, int64_t now,
                           uint64_t *pruned)
{
    sqlite3_stmt *st;
    int rc = 0;
    if (p->conflicts_max_age_ns > 0) {
        rc = db_prepare(c, "DELETE FROM conflicts WHERE at < ?", &st);
        if (rc)
            return rc;
        sqlite3_bind_int64(st, 1, now - p->conflicts_max_age_ns);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? 0 : db_fail(c, rc, "prune old conflicts");
        db_finish(c, st);
        if (!rc)
            *pruned += (uint64_t)sqlite3_changes(c->db);
    }
    if (!rc && p->conflicts_keep > 0) {
        /* Each store's newest `keep`, ranked in one pass (a count of the
         * newer records for each record was quadratic, under the lock). */
        rc = db_prepare(c, "DELETE FROM conflicts WHERE id IN (SELECT id FROM (SELECT id,"
                           " row_number() OVER (PARTITION BY store ORDER BY id DESC) AS rn"
                           " FROM conflicts) WHERE rn > ?)", &st);
        if (rc)
            return rc;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)p->conflicts_keep);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? 0 : db_fail(c, rc, "prune conflicts");
        db_finish(c, st);
        if (!rc)
            *pruned += (uint64_t)sqlite3_changes(c->db);
    }
    return rc;
}

struct victim {
    char sha[SHA256_HEX_LEN + 1];
    uint64_t len;
};

static int fill_victim(sqlite3_stmt *st, void *item)
{
    struct victim *v = item;
    snprintf(v->sha, sizeof(v->sha), "%s", (const char *)sqlite3_column_text(st, 0));
    v->len = (uint64_t)sqlite3_column_int64(st, 1);
    return 0;
}

/* True when a node holding sha is open here (busy says so). */
static bool in_use(struct cache *c, const char *sha, cache_busy_fn busy, void *arg)
{
    if (!busy)
        return false;
    sqlite3_stmt *st;
    if (db_prepare(c, "SELECT ino FROM nodes WHERE sha = ?", &st))
        return true;
    sqlite3_bind_text(st, 1, sha, -1, SQLITE_TRANSIENT);
    bool used = false;
    while (!used && sqlite3_step(st) == SQLITE_ROW)
        used = busy(arg, (uint64_t)sqlite3_column_int64(st, 0));
    db_finish(c, st);
    return used;
}

/* Drops clean content, least recently used first, until the content
 * held is at most max bytes (or nothing more may go). */
static int evict(struct cache *c, uint64_t max, cache_busy_fn busy, void *arg,
                 struct cache_gc_report *r)
{
    uint64_t total = 0;
    int rc = content_bytes(c, &total, NULL);
    if (rc || total <= max)
        return rc;
    sqlite3_stmt *st;
    rc = db_prepare(c, "SELECT b.sha, length(b.data), MAX(COALESCE(n.used, 0)) AS u,"
                       " MAX(n.mtime) AS m FROM blobs b JOIN nodes n ON n.sha = b.sha"
                       " WHERE " CLEAN_FILE("n") " AND length(b.data) > 0 GROUP BY b.sha"
                       " HAVING NOT EXISTS (SELECT 1 FROM nodes o WHERE (o.sha = b.sha"
                       "   OR o.base_sha = b.sha) AND NOT " CLEAN_FILE("o") ")"
                       " AND NOT EXISTS (SELECT 1 FROM conflicts k WHERE k.local_sha = b.sha)"
                       " AND NOT EXISTS (SELECT 1 FROM sent x WHERE x.sha = b.sha)"
                       " ORDER BY u, m", &st);
    if (rc)
        return rc;
    void *items = NULL;
    size_t n = 0;
    rc = db_collect(c, st, sizeof(struct victim), &items, &n, fill_victim, "eviction");
    struct victim *v = items;
    sqlite3_stmt *del = NULL, *mark = NULL;
    if (!rc)
        rc = db_prepare(c, "DELETE FROM blobs WHERE sha = ?", &del);
    if (!rc)
        rc = db_prepare(c, "UPDATE nodes SET evicted = ?1 WHERE sha = ?1", &mark);
    for (size_t i = 0; !rc && i < n && total > max; i++) {
        if (in_use(c, v[i].sha, busy, arg))
            continue;
        sqlite3_reset(del);
        sqlite3_bind_text(del, 1, v[i].sha, -1, SQLITE_TRANSIENT);
        sqlite3_reset(mark);
        sqlite3_bind_text(mark, 1, v[i].sha, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(del) != SQLITE_DONE || sqlite3_step(mark) != SQLITE_DONE) {
            rc = db_fail(c, SQLITE_ERROR, "evict content");
            break;
        }
        total -= v[i].len < total ? v[i].len : total;
        r->evicted++;
        r->evicted_bytes += v[i].len;
    }
    db_finish(c, del);
    db_finish(c, mark);
    free(items);
    r->over_limit = total > max;
    return rc;
}

static int fill_ino(sqlite3_stmt *st, void *item)
{
    *(uint64_t *)item = (uint64_t)sqlite3_column_int64(st, 0);
    return 0;
}

/* Removed files (unlinked nodes: a file deleted, or replaced by a rename
 * such as every editor's save) of the stores this process mounts, that no
 * file open here holds: their content goes.  The node itself stays until
 * the store's next attach (the kernel may still know its number); nothing
 * reads its bytes again, since only an open descriptor reaches it.  Before,
 * each `sed -i` of a file left a copy of its last version until the next
 * mount.  Caller holds c->lock, in a transaction. */
static int forget_unlinked(struct cache *c, const struct cache_policy *p, cache_busy_fn busy,
                           void *arg, uint64_t *freed)
{
    int rc = 0;
    sqlite3_stmt *st = NULL, *clear = NULL;
    for (size_t i = 0; !rc && busy && i < p->n_stores; i++) {
        const char *id = __atomic_load_n(&p->stores[i], __ATOMIC_ACQUIRE);
        if (!id)
            continue; /* (no longer this process's: cache_policy) */
        rc = db_prepare(c, "SELECT ino FROM nodes WHERE store = ? AND unlinked = 1"
                           " AND sha IS NOT NULL", &st);
        if (rc)
            break;
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        void *items = NULL;
        size_t n = 0;
        rc = db_collect(c, st, sizeof(uint64_t), &items, &n, fill_ino, "removed files");
        const uint64_t *ino = items;
        if (!rc && n && !clear)
            rc = db_prepare(c, "UPDATE nodes SET sha = NULL WHERE ino = ? AND unlinked = 1",
                            &clear);
        for (size_t k = 0; !rc && k < n; k++) {
            if (busy(arg, ino[k]))
                continue;
            sqlite3_reset(clear);
            sqlite3_bind_int64(clear, 1, (sqlite3_int64)ino[k]);
            if (sqlite3_step(clear) != SQLITE_DONE)
                rc = db_fail(c, SQLITE_ERROR, "free a removed file's content");
            else
                (*freed)++;
        }
        free(items);
    }
    if (clear)
        db_finish(c, clear);
    return rc;
}

int cache_housekeep(struct cache *c, const struct cache_policy *p, cache_busy_fn busy, void *arg,
                    struct cache_gc_report *r)
{
    struct cache_gc_report local;
    if (!r)
        r = &local;
    memset(r, 0, sizeof(*r));
    db_lock(c);
    int rc = db_begin(c);
    if (!rc)
        rc = prune_conflicts(c, p, db_now_ns(), &r->conflicts_pruned);
    if (!rc)
        rc = forget_unlinked(c, p, busy, arg, &r->unlinked_freed);
    if (!rc)
        rc = gc_blobs_locked(c, &r->blobs_freed);
    if (!rc && p->max_bytes)
        rc = evict(c, p->max_bytes, busy, arg, r);
    if (!rc)
        rc = db_commit(c);
    if (rc)
        db_rollback(c);
    else
        give_back(c);
    db_unlock(c);
    return rc;
}

int cache_conflicts_drop(struct cache *c, int64_t id, int64_t before_ns, uint64_t *dropped)
{
    sqlite3_stmt *st;
    if (dropped)
        *dropped = 0;
    db_lock(c);
    int rc = db_prepare(c, id > 0 ? "DELETE FROM conflicts WHERE id = ?1"
                                  : "DELETE FROM conflicts WHERE at < ?2", &st);
    if (!rc) {
        if (id > 0)
            sqlite3_bind_int64(st, 1, id);
        else
            sqlite3_bind_int64(st, 2, before_ns);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? 0 : db_fail(c, rc, "drop conflicts");
        db_finish(c, st);
    }
    uint64_t n = rc ? 0 : (uint64_t)sqlite3_changes(c->db);
    if (!rc && id > 0 && n == 0)
        rc = -ENOENT;
    if (!rc)
        give_back(c);
    rc = db_unlock_rc(c, rc);
    if (dropped)
        *dropped = rc ? 0 : n;
    return rc;
}
