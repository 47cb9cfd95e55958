/* apply.c - cache_apply_remote: bring the clean part of a store's tree to
 * a remote listing, in one transaction, recording what changed so that the
 * caller can invalidate exactly those kernel cache entries.
 *
 * The listing goes into a temporary table `rl` so that the set operations
 * (memories gone, memories moved) are single queries.  Three passes:
 *   1. clean files whose memory is no longer listed are unlinked; clean
 *      files whose memory is listed at another path are detached
 *      (parent NULL) to be re-attached in pass 2 under the same ino;
 *   2. each listed memory: re-attach a detached node, update a changed
 *      hash (the bytes are fetched later, keyed by the new hash), or create
 *      the node and the directories above it;
 *   3. implied directories (state 0) left empty are unlinked, bottom-up;
 *   then every directory an entry appeared in or left gets mtime = ctime =
 *   now, as a local filesystem's would.
 * Nodes with local changes (state != 0) are never touched here: the sync
 * engine decides about them.  A listed memory that has a tombstone (deleted
 * locally, not yet deleted remotely) is skipped, so it is not resurrected. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"

void cache_changes_free(struct cache_changes *ch)
{
    if (!ch)
        return;
    for (size_t i = 0; i < ch->n; i++)
        free(ch->v[i].name);
    free(ch->v);
    memset(ch, 0, sizeof(*ch));
}

static int record(struct cache_changes *ch, enum cache_change_kind kind, uint64_t parent,
                  uint64_t ino, const char *name)
{
    if (!ch)
        return 0;
    if (ch->n == ch->cap) {
        size_t ncap = ch->cap ? ch->cap * 2 : 32;
        struct cache_change *v = realloc(ch->v, ncap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        ch->v = v;
        ch->cap = ncap;
    }
    char *dup = strdup(name ? name : "");
    if (!dup)
        return -ENOMEM;
    ch->v[ch->n++] = (struct cache_change){kind, parent, ino, dup};
    return 0;
}

static int step_done(struct cache *c, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    db_finish(c, st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, what);
}

/* Steps a query of at most one row: 0 with *row said, or the error (an
 * error is never "no row": that made a memory deleted here come back, or
 * a second node for one memory). */
static int step_row(struct cache *c, sqlite3_stmt *st, const char *what, bool *row)
{
    int s = sqlite3_step(st);
    *row = s == SQLITE_ROW;
    return s == SQLITE_ROW || s == SQLITE_DONE ? 0 : db_fail(c, s, what);
}

/* Unlinks (or only detaches) every node a query selects as (ino, parent,
 * name), bound with the store id. */
static int unlink_selected(struct cache *c, const char *sql, const char *store, bool detach_only,
                           struct cache_changes *ch, size_t *count)
{
    sqlite3_stmt *st, *up;
    int rc = db_prepare(c, sql, &st);
    if (rc)
        return rc;
    rc = db_prepare(c, detach_only ? "UPDATE nodes SET parent = NULL WHERE ino = ?"
                                   : "UPDATE nodes SET parent = NULL, unlinked = 1 WHERE ino = ?",
                    &up);
    if (rc) {
        db_finish(c, st);
        return rc;
    }
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    /* Collect first: updating rows while stepping the same table's query
     * is allowed in SQLite but makes the iteration order fragile. */
    struct cache_changes local = {0};
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = record(&local, CACHE_CH_GONE, (uint64_t)sqlite3_column_int64(st, 1),
                    (uint64_t)sqlite3_column_int64(st, 0),
                    (const char *)sqlite3_column_text(st, 2));
        if (rc)
            break;
    }
    rc = (rc == SQLITE_DONE) ? 0 : (rc < 0 ? rc : db_fail(c, rc, "select gone"));
    db_finish(c, st);
    for (size_t i = 0; !rc && i < local.n; i++) {
        sqlite3_reset(up);
        sqlite3_bind_int64(up, 1, (sqlite3_int64)local.v[i].ino);
        int s = sqlite3_step(up);
        if (s != SQLITE_DONE)
            rc = db_fail(c, s, "unlink node");
        else
            rc = record(ch, CACHE_CH_GONE, local.v[i].parent, local.v[i].ino, local.v[i].name);
    }
    db_finish(c, up);
    if (count)
        *count = local.n;
    cache_changes_free(&local);
    return rc;
}

/* Finds or makes the directory at path (a memory path, "/" for the root)
 * under root; gives its ino, or -ENOTDIR when a file is in the way. */
static int ensure_dir(struct cache *c, const char *store, uint64_t root, const char *path,
                      uint64_t *ino, struct cache_changes *ch)
{
    uint64_t cur = root;
    const char *p = path + 1;
    int rc = 0;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        char *seg = strndup(p, n);
        char *sub = strndup(path, (size_t)(p - path) + n);
        if (!seg || !sub) {
            free(seg);
            free(sub);
            return -ENOMEM;
        }
        sqlite3_stmt *st;
        rc = db_prepare(c, "SELECT ino, is_dir FROM nodes WHERE parent = ? AND name = ?", &st);
        if (!rc) {
            sqlite3_bind_int64(st, 1, (sqlite3_int64)cur);
            sqlite3_bind_text(st, 2, seg, -1, SQLITE_TRANSIENT);
            int s = sqlite3_step(st);
            if (s == SQLITE_ROW) {
                uint64_t next = (uint64_t)sqlite3_column_int64(st, 0);
                rc = sqlite3_column_int(st, 1) ? 0 : -ENOTDIR;
                db_finish(c, st);
                cur = next;
            } else {
                db_finish(c, st);
                int64_t now = db_now_ns();
                rc = db_prepare(c, "INSERT INTO nodes(store, parent, name, path, is_dir, mtime,"
                                   " ctime) VALUES (?, ?, ?, ?, 1, ?, ?)", &st);
                if (!rc) {
                    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
                    sqlite3_bind_int64(st, 2, (sqlite3_int64)cur);
                    sqlite3_bind_text(st, 3, seg, -1, SQLITE_TRANSIENT);
                    sqlite3_bind_text(st, 4, sub, -1, SQLITE_TRANSIENT);
                    sqlite3_bind_int64(st, 5, now);
                    sqlite3_bind_int64(st, 6, now);
                    rc = step_done(c, st, "insert dir");
                }
                if (!rc) {
                    uint64_t parent = cur;
                    cur = (uint64_t)sqlite3_last_insert_rowid(c->db);
                    rc = record(ch, CACHE_CH_NEW, parent, cur, seg);
                }
            }
        }
        free(seg);
        free(sub);
        if (rc)
            return rc;
        if (!slash)
            break;
        p = slash + 1;
    }
    *ino = cur;
    return 0;
}

/* Splits a memory path into its directory ("/" for top level) and name. */
static int split_path(const char *path, char **dir, const char **name)
{
    const char *slash = strrchr(path, '/');
    *name = slash + 1;
    *dir = (slash == path) ? strdup("/") : strndup(path, (size_t)(slash - path));
    return *dir ? 0 : -ENOMEM;
}

/* Pass 2 for one listed memory. */
static int apply_one(struct cache *c, const char *store, uint64_t root, const struct cache_remote *r,
                     struct cache_changes *ch)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "SELECT 1 FROM tombstones WHERE store = ? AND memory_id = ?", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->memory_id, -1, SQLITE_TRANSIENT);
    bool deleted;
    rc = step_row(c, st, "find tombstone", &deleted);
    db_finish(c, st);
    if (rc || deleted)
        return rc; /* deleted locally: the sync deletes it remotely */
    rc = db_prepare(c, "SELECT ino, parent IS NULL, state, COALESCE(sha, ''), path,"
                           " COALESCE(base_path, '')"
                           " FROM nodes WHERE store = ? AND memory_id = ? AND unlinked = 0"
                           " AND is_dir = 0", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->memory_id, -1, SQLITE_TRANSIENT);
    uint64_t ino = 0;
    bool detached = false, found = false, same_sha = false, same_base_path = false;
    int state = 0;
    rc = step_row(c, st, "find memory's node", &found);
    if (found) {
        ino = (uint64_t)sqlite3_column_int64(st, 0);
        detached = sqlite3_column_int(st, 1) != 0;
        state = sqlite3_column_int(st, 2);
        same_sha = strcmp((const char *)sqlite3_column_text(st, 3), r->sha) == 0;
        same_base_path = strcmp((const char *)sqlite3_column_text(st, 5), r->path) == 0;
    }
    db_finish(c, st);
    if (rc)
        return rc;
    if (found && state != CNODE_CLEAN)
        return 0; /* local changes: the sync engine decides */
    if (found && !detached) {
        /* At the listed path (pass 1 detached it otherwise), so that is its
         * baseline path too: a file the sync took back to its baseline
         * content after both sides moved it there still had the old path
         * as baseline, and the next sync built from baselines (the version
         * feed) moved it back. */
        if (same_sha && same_base_path)
            return 0;
        if (same_sha) {
            rc = db_prepare(c, "UPDATE nodes SET base_path = path WHERE ino = ?", &st);
            if (rc)
                return rc;
            sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
            return step_done(c, st, "update node's base path");
        }
        rc = db_prepare(c, "UPDATE nodes SET sha = ?1, base_sha = ?1, size = ?2, mtime = ?3,"
                           " ctime = ?3, base_path = path WHERE ino = ?4", &st);
        if (rc)
            return rc;
        sqlite3_bind_text(st, 1, r->sha, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)r->size);
        sqlite3_bind_int64(st, 3, r->mtime_ns ? r->mtime_ns : db_now_ns());
        sqlite3_bind_int64(st, 4, (sqlite3_int64)ino);
        rc = step_done(c, st, "update node");
        return rc ? rc : record(ch, CACHE_CH_CONTENT, 0, ino, NULL);
    }

    /* A new memory, or a moved one to re-attach: the target must be free. */
    char *dir;
    const char *name;
    if ((rc = split_path(r->path, &dir, &name)))
        return rc;
    uint64_t parent;
    rc = ensure_dir(c, store, root, dir, &parent, ch);
    free(dir);
    if (rc == -ENOTDIR) /* the caller warns (once per mount, not at every sync) */
        return record(ch, CACHE_CH_BLOCKED, 0, 0, r->path);
    if (rc)
        return rc;
    rc = db_prepare(c, "SELECT 1 FROM nodes WHERE parent = ? AND name = ?", &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)parent);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    bool taken;
    rc = step_row(c, st, "find entry", &taken);
    db_finish(c, st);
    if (rc || taken)
        return rc; /* a local node holds the path (a detached one stays so); the sync decides */
    int64_t now = db_now_ns();
    if (found) {
        rc = db_prepare(c, "UPDATE nodes SET parent = ?1, name = ?2, path = ?3, base_path = ?3,"
                           " sha = ?4, base_sha = ?4, size = ?5, ctime = ?6, mtime = ?9"
                           " WHERE ino = ?7", &st);
        if (rc)
            return rc;
        sqlite3_bind_int64(st, 7, (sqlite3_int64)ino);
    } else {
        rc = db_prepare(c, "INSERT INTO nodes(parent, name, path, base_path, sha, base_sha, size,"
                           " ctime, mtime, store, memory_id, is_dir, state)"
                           " VALUES (?1, ?2, ?3, ?3, ?4, ?4, ?5, ?6, ?9, ?7, ?8, 0, 0)", &st);
        if (rc)
            return rc;
        sqlite3_bind_text(st, 7, store, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 8, r->memory_id, -1, SQLITE_TRANSIENT);
    }
    sqlite3_bind_int64(st, 1, (sqlite3_int64)parent);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, r->path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, r->sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)r->size);
    sqlite3_bind_int64(st, 6, now);
    sqlite3_bind_int64(st, 9, r->mtime_ns ? r->mtime_ns : now);
    rc = step_done(c, st, found ? "attach node" : "insert node");
    if (rc)
        return rc;
    if (!found)
        ino = (uint64_t)sqlite3_last_insert_rowid(c->db);
    rc = record(ch, CACHE_CH_NEW, parent, ino, name);
    /* Moved with new content in one update: the node is the same inode, and
     * whoever holds it open, or the kernel's pages and attributes of it,
     * has the old bytes and size (an hour of attribute timeout). */
    if (!rc && found && !same_sha)
        rc = record(ch, CACHE_CH_CONTENT, 0, ino, NULL);
    return rc;
}

static int load_listing(struct cache *c, const struct cache_remote *r, size_t n)
{
    int rc = db_exec(c, "CREATE TEMP TABLE IF NOT EXISTS rl(memory_id TEXT PRIMARY KEY,"
                        " path TEXT, sha TEXT, size INTEGER); DELETE FROM rl;");
    if (rc)
        return rc;
    sqlite3_stmt *st;
    rc = db_prepare(c, "INSERT OR REPLACE INTO rl(memory_id, path, sha, size) VALUES (?,?,?,?)",
                    &st);
    if (rc)
        return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, r[i].memory_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, r[i].path, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, r[i].sha, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)r[i].size);
        int s = sqlite3_step(st);
        if (s != SQLITE_DONE)
            rc = db_fail(c, s, "load listing");
    }
    db_finish(c, st);
    return rc;
}

/* Entries appeared in or left the directories of ch->v[from..]: their
 * mtime and ctime become now, as a local filesystem's would. */
static int touch_dirs(struct cache *c, const struct cache_changes *ch, size_t from)
{
    sqlite3_stmt *st = NULL;
    int rc = db_prepare(c, "UPDATE nodes SET mtime = ?1, ctime = ?1 WHERE ino = ?2 AND is_dir = 1",
                        &st);
    int64_t now = db_now_ns();
    for (size_t i = from; !rc && i < ch->n; i++) {
        if ((ch->v[i].kind != CACHE_CH_NEW && ch->v[i].kind != CACHE_CH_GONE) ||
            !ch->v[i].parent)
            continue;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, now);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)ch->v[i].parent);
        int s = sqlite3_step(st);
        if (s != SQLITE_DONE)
            rc = db_fail(c, s, "touch directory");
    }
    db_finish(c, st);
    return rc;
}

/* Our own upload whose answer was lost (the store committed it) is listed
 * now, and the file was edited back since (its content or path returned
 * to the old baseline): clean, it would be brought to the upload below,
 * and that last edit undone.  The upload becomes its baseline, the file is
 * dirty (pushed on top of it), and the upload is settled.  A dirty file is
 * left to the sync, which adopts the upload itself (sync/reconcile.c,
 * step 0). */
static int adopt_lost_uploads(struct cache *c, const char *store)
{
    static const char *const sql[] = {
        "UPDATE nodes SET (base_sha, base_path) = (SELECT sha, path FROM rl"
        "  WHERE rl.memory_id = nodes.memory_id), state = 1"
        " WHERE ino IN (SELECT ino FROM sent WHERE store = ?1)" /* few: uploads out */
        "  AND store = ?1 AND is_dir = 0 AND unlinked = 0 AND state = 0"
        "  AND memory_id IS NOT NULL AND EXISTS (SELECT 1 FROM rl JOIN sent s"
        "   ON s.store = ?1 AND s.ino = nodes.ino AND s.sha = rl.sha AND s.path = rl.path"
        "   WHERE rl.memory_id = nodes.memory_id"
        "    AND (rl.sha IS NOT nodes.base_sha OR rl.path IS NOT nodes.base_path)"
        "    AND (rl.sha IS NOT nodes.sha OR rl.path IS NOT nodes.path))",
        "DELETE FROM sent WHERE store = ?1 AND EXISTS (SELECT 1 FROM nodes n JOIN rl"
        "  ON rl.memory_id = n.memory_id WHERE n.ino = sent.ino AND n.state = 1"
        "  AND n.base_sha = sent.sha AND n.base_path = sent.path"
        "  AND rl.sha = sent.sha AND rl.path = sent.path)",
    };
    for (size_t i = 0; i < 2; i++) {
        sqlite3_stmt *st;
        int rc = db_prepare(c, sql[i], &st);
        if (rc)
            return rc;
        sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
        if ((rc = step_done(c, st, i ? "settle lost uploads" : "adopt lost uploads")))
            return rc;
    }
    return 0;
}

int cache_apply_remote(struct cache *c, const char *store, const struct cache_remote *r, size_t n,
                       struct cache_changes *ch)
{
    sqlite3_stmt *st;
    uint64_t root = 0;
    struct cache_changes own = {0};
    if (!ch)
        ch = &own; /* the changes are needed for the directories' times */
    size_t first = ch->n;
    db_lock(c);
    int rc = db_begin(c);
    if (rc)
        goto out;
    rc = db_prepare(c, "SELECT root FROM stores WHERE id = ?", &st);
    if (rc)
        goto out;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    bool row;
    rc = step_row(c, st, "find store", &row);
    if (row)
        root = (uint64_t)sqlite3_column_int64(st, 0);
    db_finish(c, st);
    if (rc)
        goto out;
    if (!root) {
        rc = -ENOENT;
        goto out;
    }
    if ((rc = load_listing(c, r, n)) || (rc = adopt_lost_uploads(c, store)))
        goto out;
    rc = unlink_selected(c,
        "SELECT ino, parent, name FROM nodes WHERE store = ?1 AND is_dir = 0 AND unlinked = 0"
        " AND parent IS NOT NULL AND state = 0 AND memory_id IS NOT NULL"
        " AND memory_id NOT IN (SELECT memory_id FROM rl)", store, false, ch, NULL);
    if (!rc)
        rc = unlink_selected(c,
            "SELECT n.ino, n.parent, n.name FROM nodes n JOIN rl ON rl.memory_id = n.memory_id"
            " WHERE n.store = ?1 AND n.is_dir = 0 AND n.unlinked = 0 AND n.parent IS NOT NULL"
            " AND n.state = 0 AND n.path != rl.path", store, true, ch, NULL);
    for (size_t i = 0; !rc && i < n; i++)
        rc = apply_one(c, store, root, &r[i], ch);
    /* Detached nodes that found no place are gone for this session. */
    if (!rc)
        rc = db_exec(c, "UPDATE nodes SET unlinked = 1 WHERE parent IS NULL AND unlinked = 0"
                        " AND ino > 2 AND path != '/'");
    for (size_t pruned = 1; !rc && pruned;)
        rc = unlink_selected(c,
            "SELECT d.ino, d.parent, d.name FROM nodes d WHERE d.store = ?1 AND d.is_dir = 1"
            " AND d.parent IS NOT NULL AND d.unlinked = 0 AND d.state = 0"
            " AND NOT EXISTS (SELECT 1 FROM nodes k WHERE k.parent = d.ino)",
            store, false, ch, &pruned);
    if (!rc)
        rc = touch_dirs(c, ch, first);
    if (!rc)
        rc = db_commit(c);
out:
    if (rc)
        db_rollback(c);
    db_unlock(c);
    cache_changes_free(&own);
    return rc;
}
