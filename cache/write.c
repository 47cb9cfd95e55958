/* write.c - local changes to a store's tree: create, mkdir, unlink, rmdir,
 * rename, new content, times.  Each public function is one transaction
 * under c->lock, so a failure changes nothing.
 *
 * The cache state model (the sync push, cache/pending.c, reads exactly this):
 *
 *  node columns   memory_id  remote identity; NULL for a file never synced
 *                 base_sha, base_path  the baseline: content hash and path
 *                            at the last sync (NULL when never synced)
 *                 sha, size  the current content (bytes in `blobs` by sha)
 *                 state      files: 0 clean, 1 dirty, 2 refused;
 *                            directories: 0 implied by the files below it,
 *                            1 made (or kept) locally, kept even when empty
 *                 unlinked   removed; the row stays (parent NULL) while the
 *                            kernel may still use the inode, until the next
 *                            cache_open
 *  tombstones     (store, memory_id, base_sha, base_path, deleted_at, mode):
 *                 a memory deleted locally that the sync must delete
 *                 remotely, under the deletion mode in force when it was
 *                 removed (stores.deletions; log_only and disabled ones
 *                 are never sent and end with the session);
 *                 cache_apply_remote never resurrects a tombstoned memory.
 *
 * Transitions:
 *  cache_create       file: new node, memory_id NULL, dirty, sha of "" (the
 *                     empty blob is stored); directory: state 1.
 *  cache_create_open  the same, marked CACHE_NEW: never pushed as it is.
 *  unsaved            enum cache_saved: content saved by the close of one
 *                     descriptor while a writer still holds the file is
 *                     CACHE_HELD (cache_set_content_if with held), pushed
 *                     only by a final sync, until the last writer closes
 *                     or fsyncs (cache_mark_saved: CACHE_SAVED); so no
 *                     half-written file is pushed by a periodic sync.
 *  content, times     cache/content.c (cache_set_content and friends).
 *  cache_rename       file: same ino and memory_id, new parent/name/path,
 *                     state recomputed as above (dirty: path != base_path).
 *                     Directory: every descendant's path is rewritten (one
 *                     UPDATE by prefix) and every file below recomputed.
 *                     Over an existing file T: the moved file S takes T's
 *                     identity (memory_id, base_sha, base_path) when T has
 *                     one, and S's own memory, if any, gets a tombstone; T is
 *                     unlinked, and T's uploads still in flight become S's
 *                     (cache/sent.c applies their answers to S).  So an editor's write-temp-then-rename save
 *                     is one edit of T's memory and the temp file never
 *                     exists remotely.  Over an empty directory: it goes.
 *  cache_unlink       a synced file leaves a tombstone; every node removed
 *                     is unlinked with memory_id cleared (identity lives in
 *                     exactly one place: a live node or a tombstone).  The
 *                     exception is the store's: a node the apply of a
 *                     listing unlinks (the memory is gone remotely) keeps
 *                     its memory_id, which content.c and journal.c read to
 *                     tell a sync's removal from the user's; no live node
 *                     or tombstone takes it, and cache_mark_synced never
 *                     gives a memory to an unlinked node.
 *  A directory left empty by an unlink or a rename away is marked kept
 *  (state 1), as a local filesystem keeps it; the store root never is.
 *
 * Directory times: every entry made, removed or renamed sets the mtime and
 * ctime of its directory (both directories of a rename) to now, as a
 * local filesystem does; a node made here gets atime = mtime = ctime.
 *
 * Names: rules_check_name (a memory path segment of at most NAME_MAX, 255
 * bytes), plus the whole path (1,024 bytes, 20 segments); a directory must
 * leave room for one file below it.  The
 * marker name at the root is -EPERM.  Read-only stores: -EROFS from every
 * function here (the daemon's third wall; nothing is ever marked dirty). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"
#include "log.h"
#include "rules.h"

/* The state a file has after a change: clean only when back at baseline. */
#define STATE_RECOMPUTE                                                                            \
    "CASE WHEN memory_id IS NOT NULL AND sha IS base_sha AND path IS base_path THEN 0 ELSE 1 END"

static int step_done(struct cache *c, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    db_finish(c, st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, what);
}

int db_get_node(struct cache *c, uint64_t ino, struct cnode *out)
{
    sqlite3_stmt *st;
    int rc = db_cached(c, DB_ST_NODE_BY_INO, DB_SQL_NODE_BY_INO, &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    rc = sqlite3_step(st);
    rc = rc == SQLITE_ROW ? db_row_to_node(st, out)
         : rc == SQLITE_DONE ? -ENOENT : db_fail(c, rc, "get node");
    db_done(st);
    return rc;
}

static int get_child(struct cache *c, uint64_t parent, const char *name, struct cnode *out)
{
    sqlite3_stmt *st;
    int rc = db_cached(c, DB_ST_NODE_BY_NAME, DB_SQL_NODE_BY_NAME, &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)parent);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    rc = rc == SQLITE_ROW ? db_row_to_node(st, out)
         : rc == SQLITE_DONE ? -ENOENT : db_fail(c, rc, "get child");
    db_done(st);
    return rc;
}

int db_writable_store(struct cache *c, uint64_t ino, char *store_out, uint64_t *root)
{
    sqlite3_stmt *st;
    int rc = db_cached(c, DB_ST_STORE_OF_NODE, "SELECT s.id, s.root, s.read_only FROM nodes n"
                                               " JOIN stores s ON s.id = n.store WHERE n.ino = ?",
                       &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const unsigned char *id = sqlite3_column_text(st, 0);
        if (store_out)
            snprintf(store_out, CACHE_ID_MAX, "%s", id ? (const char *)id : "");
        if (root)
            *root = (uint64_t)sqlite3_column_int64(st, 1);
        rc = sqlite3_column_int(st, 2) ? -EROFS : 0;
    } else {
        rc = rc == SQLITE_DONE ? -ENOENT : db_fail(c, rc, "store of node");
    }
    db_done(st);
    return rc;
}

/* A live directory to create in: the parent's node in *out. */
static int live_dir(struct cache *c, uint64_t ino, uint64_t root, struct cnode *out)
{
    int rc = db_get_node(c, ino, out);
    if (rc)
        return rc;
    if (out->unlinked || (!out->parent && out->ino != root))
        rc = -ENOENT;
    else if (!out->is_dir)
        rc = -ENOTDIR;
    if (rc)
        cnode_clear(out);
    return rc;
}

/* Checks name under dir and builds the full path (malloc'd, caller frees).
 * A directory must leave room for one file below it. */
static int new_path(const struct cnode *dir, uint64_t root, const char *name, bool is_dir,
                    char **path)
{
    const char *why = NULL;
    *path = NULL;
    if (dir->ino == root && strcmp(name, MEM_MARKER_NAME) == 0)
        return -EPERM;
    int rc = rules_check_name(name, &why);
    if (rc)
        return rc;
    if (asprintf(path, "%s/%s", strcmp(dir->path, "/") == 0 ? "" : dir->path, name) < 0) {
        *path = NULL;
        return -ENOMEM;
    }
    size_t n = strlen(*path);
    rc = rules_check_path(*path, n, &why);
    if (!rc && is_dir) {
        size_t segs = 0;
        for (const char *p = *path; *p; p++)
            segs += *p == '/';
        if (n + 2 > MEM_PATH_MAX_BYTES)
            rc = -ENAMETOOLONG;
        else if (segs >= MEM_PATH_MAX_SEGMENTS)
            rc = -EINVAL;
    }
    if (rc) {
        free(*path);
        *path = NULL;
    }
    return rc;
}

/* A non-root directory left without children is kept (state 1). */
static int keep_if_empty(struct cache *c, uint64_t dir)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "UPDATE nodes SET state = 1 WHERE ino = ?1 AND is_dir = 1"
                           " AND parent IS NOT NULL AND state = 0"
                           " AND NOT EXISTS (SELECT 1 FROM nodes k WHERE k.parent = ?1)", &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)dir);
    return step_done(c, st, "keep directory");
}

/* An entry of dir changed: its mtime and ctime become now. */
static int touch_dir(struct cache *c, uint64_t dir, int64_t now)
{
    sqlite3_stmt *st;
    int rc = db_cached(c, DB_ST_TOUCH_DIR, "UPDATE nodes SET mtime = ?1, ctime = ?1 WHERE ino = ?2",
                       &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)dir);
    rc = sqlite3_step(st);
    db_done(st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, "touch directory");
}

static int add_tombstone(struct cache *c, const char *store, const struct cnode *n)
{
    if (!n->memory_id[0])
        return 0;
    return db_tombstone(c, store, n->memory_id, n->base_sha, n->base_path, -1);
}

/* Detaches a node: unlinked, no identity (moved to a tombstone or to the
 * node that replaced it). */
static int detach(struct cache *c, uint64_t ino)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "UPDATE nodes SET parent = NULL, unlinked = 1, memory_id = NULL,"
                           " base_sha = NULL, base_path = NULL, ctime = ? WHERE ino = ?", &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, db_now_ns());
    sqlite3_bind_int64(st, 2, (sqlite3_int64)ino);
    return step_done(c, st, "unlink node");
}

static bool has_children(struct cache *c, uint64_t dir)
{
    sqlite3_stmt *st;
    if (db_prepare(c, "SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", &st))
        return true;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)dir);
    bool any = sqlite3_step(st) == SQLITE_ROW;
    db_finish(c, st);
    return any;
}

int db_tx_held(struct cache *c, int (*body)(struct cache *, void *), void *arg, bool lazy)
{
    int rc = db_begin(c);
    if (!rc)
        rc = body(c, arg);
    if (!rc)
        rc = lazy ? db_commit_lazy(c) : db_commit(c);
    if (rc)
        db_rollback(c);
    return rc;
}

static int in_tx(struct cache *c, int (*body)(struct cache *, void *), void *arg, bool lazy)
{
    db_lock(c);
    int rc = db_tx_held(c, body, arg, lazy);
    db_unlock(c);
    return rc;
}

int db_in_tx(struct cache *c, int (*body)(struct cache *, void *), void *arg)
{
    return in_tx(c, body, arg, false);
}

int db_in_tx_lazy(struct cache *c, int (*body)(struct cache *, void *), void *arg)
{
    return in_tx(c, body, arg, true);
}

struct create_args {
    uint64_t parent;
    const char *name;
    bool is_dir;
    bool unsaved; /* an open's file: not pushed before it is saved */
    int64_t now;
    struct cnode *out;
    const struct cache_then *then; /* an open's file: told before the row */
    uint64_t want_ino;             /* nonzero: this free ino (a replayed close's) */
};

/* The ino the next node gets: AUTOINCREMENT's sequence plus one.  Inside
 * the write transaction, whose lock no other connection can take before
 * the INSERT that uses it. */
static int next_ino(struct cache *c, uint64_t *ino)
{
    sqlite3_stmt *st;
    int rc = db_cached(c, DB_ST_NEXT_INO, "SELECT seq FROM sqlite_sequence WHERE name = 'nodes'",
                       &st);
    if (rc)
        return rc;
    rc = sqlite3_step(st);
    *ino = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) + 1 : 0;
    db_done(st);
    return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -EIO : db_fail(c, rc, "next ino");
}

/* The node an open's new file is, as db_get_node reads it once its row is
 * written (tests/test_cache_lazy.c compares the two). */
static int new_file_node(const struct create_args *a, uint64_t ino, const char *path,
                         struct cnode *n)
{
    memset(n, 0, sizeof(*n));
    n->ino = ino;
    n->parent = a->parent;
    n->name = strdup(a->name);
    n->path = strdup(path);
    n->base_path = strdup("");
    if (!n->name || !n->path || !n->base_path) {
        cnode_clear(n);
        return -ENOMEM;
    }
    n->mtime_ns = n->ctime_ns = n->atime_ns = n->used_ns = a->now;
    memcpy(n->sha, DB_EMPTY_SHA, sizeof(n->sha));
    n->state = CNODE_DIRTY;
    n->has_content = true; /* the empty blob is kept for good */
    n->unsaved = a->unsaved ? CACHE_NEW : CACHE_SAVED;
    return 0;
}

static int create_tx(struct cache *c, void *arg)
{
    struct create_args *a = arg;
    char store[CACHE_ID_MAX];
    uint64_t root, ino = 0;
    struct cnode dir = {0}, old = {0};
    char *path = NULL;
    sqlite3_stmt *st;
    int rc = db_writable_store(c, a->parent, store, &root);
    if (!rc)
        rc = live_dir(c, a->parent, root, &dir);
    if (!rc)
        rc = new_path(&dir, root, a->name, a->is_dir, &path);
    if (!rc) {
        rc = get_child(c, a->parent, a->name, &old);
        rc = rc == 0 ? -EEXIST : rc == -ENOENT ? 0 : rc;
    }
    /* Told before the row is written: the outcome is settled, what is left
     * (the row, its indexes, the directory's times) cannot fail for the
     * caller's input. */
    bool told = false;
    if (!rc && a->then && a->out && !a->is_dir) {
        rc = next_ino(c, &ino);
        if (!rc)
            rc = new_file_node(a, ino, path, a->out);
        if (!rc) {
            a->then->fn(a->then->arg);
            told = true;
            if (ino > c->ino_told)
                c->ino_told = ino; /* db_inos_ended: never given again if undone */
        }
    }
    const char *sha = a->is_dir ? "" : DB_EMPTY_SHA; /* a new file is empty */
    if (!rc && !a->is_dir)
        rc = db_blob_put(c, sha, "", 0, "put empty blob");
    /* A file made here is used now (the eviction order): its first open
     * then writes no stamp. */
    if (!rc)
        rc = db_prepare(c, "INSERT INTO nodes(ino, store, parent, name, path, is_dir, size, mtime,"
                           " ctime, atime, sha, state, unsaved, used)"
                           " VALUES (?10, ?1, ?2, ?3, ?4, ?5, 0, ?6, ?7, ?7, NULLIF(?8, ''), 1, ?9,"
                           " CASE WHEN ?5 THEN NULL ELSE ?6 END)",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)a->parent);
        sqlite3_bind_text(st, 3, a->name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, path, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 5, a->is_dir);
        sqlite3_bind_int64(st, 6, a->now);
        sqlite3_bind_int64(st, 7, a->now);
        sqlite3_bind_text(st, 8, sha, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 9, a->unsaved);
        if (told || a->want_ino)
            sqlite3_bind_int64(st, 10, (sqlite3_int64)(told ? ino : a->want_ino));
        else
            sqlite3_bind_null(st, 10); /* the next of the sequence */
        rc = step_done(c, st, "create node");
    }
    if (!rc && !told)
        ino = a->want_ino ? a->want_ino : (uint64_t)sqlite3_last_insert_rowid(c->db);
    if (!rc)
        rc = touch_dir(c, a->parent, a->now);
    if (!rc && a->out && !told)
        rc = db_get_node(c, ino, a->out);
    cnode_clear(&dir);
    cnode_clear(&old);
    free(path);
    return rc;
}

int cache_create(struct cache *c, uint64_t parent, const char *name, bool is_dir,
                 int64_t now_ns, struct cnode *out)
{
    if (out)
        memset(out, 0, sizeof(*out));
    struct create_args a = {parent, name, is_dir, false, now_ns, out, NULL, 0};
    int rc = db_in_tx(c, create_tx, &a);
    if (rc && out)
        cnode_clear(out); /* read back before a failed commit */
    return rc;
}

int cache_create_open(struct cache *c, uint64_t parent, const char *name, int64_t now_ns,
                      struct cnode *out)
{
    return cache_create_open_then(c, parent, name, now_ns, out, NULL);
}

int cache_create_open_then(struct cache *c, uint64_t parent, const char *name, int64_t now_ns,
                           struct cnode *out, const struct cache_then *then)
{
    if (out)
        memset(out, 0, sizeof(*out));
    struct create_args a = {parent, name, false, true, now_ns, out, then, 0};
    /* Lazy: an open's file is unsaved, never pushed before its FLUSH, whose
     * commit carries this one; a crash before it loses an empty file no
     * close has returned for. */
    int rc = db_in_tx_lazy(c, create_tx, &a);
    if (rc)
        cnode_clear(out); /* filled before a later failure (then told) */
    return rc;
}

int db_create_node(struct cache *c, uint64_t parent, const char *name, int64_t now_ns,
                   uint64_t ino, struct cnode *out)
{
    memset(out, 0, sizeof(*out));
    struct create_args a = {parent, name, false, true, now_ns, out, NULL, ino};
    return create_tx(c, &a);
}

struct unlink_args {
    uint64_t parent;
    const char *name;
    bool is_dir;
    uint64_t *ino;
    uint64_t only; /* nonzero: only this node (-ESTALE if another is there) */
};

static int unlink_tx(struct cache *c, void *arg)
{
    struct unlink_args *a = arg;
    char store[CACHE_ID_MAX];
    uint64_t root = 0;
    struct cnode n = {0};
    int rc = db_writable_store(c, a->parent, store, &root);
    if (!rc && a->parent == root && strcmp(a->name, MEM_MARKER_NAME) == 0)
        rc = -EPERM;
    if (!rc)
        rc = get_child(c, a->parent, a->name, &n);
    if (!rc && a->only && n.ino != a->only)
        rc = -ESTALE;
    if (!rc && n.is_dir != a->is_dir)
        rc = n.is_dir ? -EISDIR : -ENOTDIR;
    if (!rc && n.is_dir && has_children(c, n.ino))
        rc = -ENOTEMPTY;
    if (!rc && !n.is_dir)
        rc = add_tombstone(c, store, &n);
    if (!rc)
        rc = detach(c, n.ino);
    if (!rc)
        rc = keep_if_empty(c, a->parent);
    if (!rc)
        rc = touch_dir(c, a->parent, db_now_ns());
    if (!rc && a->ino)
        *a->ino = n.ino;
    cnode_clear(&n);
    return rc;
}

int cache_unlink(struct cache *c, uint64_t parent, const char *name, bool is_dir, uint64_t *ino)
{
    struct unlink_args a = {parent, name, is_dir, ino, 0};
    return db_in_tx(c, unlink_tx, &a);
}

int cache_unlink_node(struct cache *c, uint64_t parent, const char *name, uint64_t ino)
{
    struct unlink_args a = {parent, name, false, NULL, ino};
    return db_in_tx(c, unlink_tx, &a);
}

struct rename_args {
    uint64_t parent, newparent;
    const char *name, *newname;
    unsigned flags;
};

/* Would moving directory src to new_path keep every path below it valid?
 * A directory counts with room for one file below it ("/x": two bytes and
 * a segment more), as when it is made (new_path). */
static int check_subtree(struct cache *c, const char *store, const char *old_path,
                         const char *new_path)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "SELECT COALESCE(MAX(length(CAST(path AS BLOB)) + 2 * is_dir), 0),"
                           " COALESCE(MAX(length(path) - length(replace(path, '/', ''))"
                           " + is_dir), 0)"
                           " FROM nodes WHERE store = ?1 AND unlinked = 0 AND parent IS NOT NULL"
                           " AND substr(path, 1, length(?2) + 1) = ?2 || '/'", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, old_path, -1, SQLITE_TRANSIENT);
    long long max_len = 0, max_segs = 0;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        max_len = sqlite3_column_int64(st, 0);
        max_segs = sqlite3_column_int64(st, 1);
        rc = 0;
    } else {
        rc = db_fail(c, rc, "check subtree");
    }
    db_finish(c, st);
    if (rc || max_len == 0)
        return rc;
    long long old_segs = 0, new_segs = 0;
    for (const char *p = old_path; *p; p++)
        old_segs += *p == '/';
    for (const char *p = new_path; *p; p++)
        new_segs += *p == '/';
    if (max_len - (long long)strlen(old_path) + (long long)strlen(new_path) > MEM_PATH_MAX_BYTES)
        return -ENAMETOOLONG;
    if (max_segs - old_segs + new_segs > MEM_PATH_MAX_SEGMENTS)
        return -EINVAL;
    return 0;
}

/* Rewrites the paths below a moved directory; files below are recomputed. */
static int move_subtree(struct cache *c, const char *store, const char *old_path,
                        const char *new_path)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "UPDATE nodes SET path = ?3 || substr(path, length(?2) + 1)"
                           " WHERE store = ?1 AND unlinked = 0 AND parent IS NOT NULL"
                           " AND substr(path, 1, length(?2) + 1) = ?2 || '/'", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, old_path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, new_path, -1, SQLITE_TRANSIENT);
    if ((rc = step_done(c, st, "move subtree")))
        return rc;
    rc = db_prepare(c, "UPDATE nodes SET state = " STATE_RECOMPUTE
                       " WHERE store = ?1 AND unlinked = 0 AND parent IS NOT NULL AND is_dir = 0"
                       " AND substr(path, 1, length(?2) + 1) = ?2 || '/'", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, new_path, -1, SQLITE_TRANSIENT);
    return step_done(c, st, "mark moved files");
}

/* The file src takes over the identity of the file it replaces. */
static int take_identity(struct cache *c, const char *store, const struct cnode *src,
                         const struct cnode *dst)
{
    /* Uploads of dst still in flight are src's now: their answers are
     * applied to the file that replaced it (cache/sent.c). */
    sqlite3_stmt *st;
    int rc = db_prepare(c, "UPDATE sent SET ino = ? WHERE ino = ?", &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)src->ino);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)dst->ino);
    if ((rc = step_done(c, st, "move sent")))
        return rc;
    if (!dst->memory_id[0])
        return 0; /* the target was never synced: src keeps its own identity */
    rc = add_tombstone(c, store, src);
    if (rc)
        return rc;
    rc = db_prepare(c, "UPDATE nodes SET memory_id = ?, base_sha = NULLIF(?, ''),"
                       " base_path = NULLIF(?, '') WHERE ino = ?", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, dst->memory_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, dst->base_sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, dst->base_path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)src->ino);
    return step_done(c, st, "take identity");
}

static int rename_tx(struct cache *c, void *arg)
{
    struct rename_args *a = arg;
    char store[CACHE_ID_MAX], store2[CACHE_ID_MAX];
    uint64_t root, root2;
    struct cnode src = {0}, dst = {0}, dir = {0};
    char *path = NULL;
    bool replace = false;
    int rc = db_writable_store(c, a->parent, store, &root);
    if (!rc)
        rc = db_writable_store(c, a->newparent, store2, &root2);
    if (!rc && strcmp(store, store2) != 0)
        rc = -EXDEV;
    if (!rc && a->parent == root && strcmp(a->name, MEM_MARKER_NAME) == 0)
        rc = -EPERM;
    if (!rc)
        rc = get_child(c, a->parent, a->name, &src);
    if (!rc)
        rc = live_dir(c, a->newparent, root, &dir);
    if (!rc)
        rc = new_path(&dir, root, a->newname, src.is_dir, &path);
    /* A directory cannot move below itself. */
    if (!rc && src.is_dir && (strcmp(dir.path, src.path) == 0 ||
                              (strncmp(dir.path, src.path, strlen(src.path)) == 0 &&
                               dir.path[strlen(src.path)] == '/')))
        rc = -EINVAL;
    if (!rc && src.is_dir)
        rc = check_subtree(c, store, src.path, path);
    if (!rc) {
        rc = get_child(c, a->newparent, a->newname, &dst);
        if (rc == -ENOENT)
            rc = 0;
        else if (!rc)
            replace = true;
    }
    if (!rc && replace) {
        if (dst.ino == src.ino)
            goto out; /* renaming a node onto itself changes nothing */
        if (a->flags & CACHE_RENAME_NOREPLACE)
            rc = -EEXIST;
        else if (!src.is_dir && dst.is_dir)
            rc = -EISDIR;
        else if (src.is_dir && !dst.is_dir)
            rc = -ENOTDIR;
        else if (dst.is_dir && has_children(c, dst.ino))
            rc = -ENOTEMPTY;
    }
    /* A file that takes another memory moves with its content: its own
     * memory is deleted, and the store keeps these bytes (evicted by
     * --cache-max-size, or not yet downloaded) nowhere else.  The caller
     * fetches them and tries again.  Any other move is a path update of
     * the same memory, which needs no content (offline too). */
    if (!rc && replace && dst.memory_id[0] && !src.is_dir && src.sha[0] && src.memory_id[0] &&
        !src.has_content)
        rc = -ENODATA;
    if (!rc && replace) {
        if (!src.is_dir)
            rc = take_identity(c, store, &src, &dst);
        if (!rc)
            rc = detach(c, dst.ino);
    }
    if (rc)
        goto out;
    sqlite3_stmt *st;
    rc = db_prepare(c, "UPDATE nodes SET parent = ?, name = ?, path = ?, ctime = ? WHERE ino = ?",
                    &st);
    if (rc)
        goto out;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)a->newparent);
    sqlite3_bind_text(st, 2, a->newname, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, db_now_ns());
    sqlite3_bind_int64(st, 5, (sqlite3_int64)src.ino);
    if ((rc = step_done(c, st, "rename node")))
        goto out;
    if (src.is_dir) {
        rc = move_subtree(c, store, src.path, path);
    } else {
        rc = db_prepare(c, "UPDATE nodes SET state = " STATE_RECOMPUTE " WHERE ino = ?", &st);
        if (!rc) {
            sqlite3_bind_int64(st, 1, (sqlite3_int64)src.ino);
            rc = step_done(c, st, "mark renamed file");
        }
    }
    if (!rc && a->parent != a->newparent)
        rc = keep_if_empty(c, a->parent);
    int64_t now = db_now_ns();
    if (!rc)
        rc = touch_dir(c, a->parent, now);
    if (!rc && a->parent != a->newparent)
        rc = touch_dir(c, a->newparent, now);
out:
    cnode_clear(&src);
    cnode_clear(&dst);
    cnode_clear(&dir);
    free(path);
    return rc;
}

int cache_rename(struct cache *c, uint64_t parent, const char *name, uint64_t newparent,
                 const char *newname, unsigned flags)
{
    if (flags & ~CACHE_RENAME_NOREPLACE)
        return -EINVAL;
    struct rename_args a = {parent, newparent, name, newname, flags};
    return db_in_tx(c, rename_tx, &a);
}
