/* content.c - a file's content and times: new content from an open
 * file's buffer (or a truncate by path), the saved/held marks of the
 * content a writer finished, the early dirty mark, and utimensat.  Each
 * public function is one transaction (or one statement) under c->lock.
 *
 * Transitions (the state model is in the top comment of cache/write.c):
 *  cache_set_content  blob + sha + size + mtime; state = clean if the file
 *                     is back to its baseline (same memory, sha, path), else
 *                     dirty.  Over 102,400 bytes: -EFBIG, nothing changes.
 *                     The content it replaces is freed in the same
 *                     transaction when nothing else needs it (cache/gc.c).
 *  cache_set_content_if  the same for bytes edited from a known content;
 *                     when the node moved meanwhile (a sync brought the
 *                     store's version), the bytes become a conflict record.
 *  cache_save_closed  the same, held, for the close of a descriptor: no
 *                     commit of its own but a record in the journal of
 *                     closed files (save_closed, cache/journal.c);
 *                     _then says when that record is written, before the
 *                     bytes are stored, so the close can be answered then.
 *  cache_mark_saved   held -> saved (the last writer closed or fsynced):
 *                     cache/saved.c, which defers and groups the marks.
 *  cache_mark_dirty   clean -> dirty before buffered content lands; a file
 *                     already dirty (or a directory) costs no transaction.
 *  cache_set_times    atime and/or mtime (utimensat, touch); ctime = now.
 * Read-only stores: -EROFS from every function here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"
#include "log.h"
#include "rules.h"

static int step_done(struct cache *c, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    db_finish(c, st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, what);
}

struct content_args {
    uint64_t ino;
    const char *buf;
    size_t len;
    int64_t mtime;
    const char *sha;
    const char *expect; /* the hash the bytes were edited from, or NULL */
    bool held;          /* a writer still has the file open */
    bool kept;          /* out: the node had moved; kept as a conflict */
    bool where;         /* fill path (a journal record's) */
    bool moved;         /* out: the node's content is no longer expect */
    const struct cache_then *then; /* told once the close is durable */
    char store[CACHE_ID_MAX];
    char *path;         /* malloc'd */
};

/* The node moved under an open buffer (a sync pulled the store's version
 * over it, or removed it): the store wins, and the buffer's bytes are kept
 * as a conflict record instead of overwriting the store's version. */
static int keep_as_conflict(struct cache *c, const char *store, const struct cnode *n,
                            const char *sha, int kind)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "INSERT INTO conflicts(store, path, memory_id, local_sha, remote_sha,"
                           " at, kind) VALUES (?, ?, NULLIF(?, ''), ?, NULLIF(?, ''), ?, ?)", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, n->path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, n->memory_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, n->sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 6, db_now_ns());
    sqlite3_bind_int(st, 7, kind);
    return step_done(c, st, "keep conflict");
}

/* What a save checks before it changes anything: the store writable, the
 * node a file, whether it moved under the bytes (a->kept's answer to come),
 * and with a->where the store and path a journal record names.  The node
 * in *n (the caller clears it). */
static int content_check(struct cache *c, struct content_args *a, struct cnode *n)
{
    char store[CACHE_ID_MAX] = "";
    int rc = db_writable_store(c, a->ino, store, NULL);
    if (!rc)
        rc = db_get_node(c, a->ino, n);
    if (!rc && n->is_dir)
        rc = -EISDIR;
    /* Moved: its content changed under the bytes, or the sync removed it
     * (its memory deleted remotely, or moved onto a path taken): a node
     * removed that way keeps its memory, one removed locally does not. */
    a->moved = !rc && a->expect &&
               (strcmp(n->sha, a->expect) != 0 || (n->unlinked && n->memory_id[0]));
    if (!rc)
        memcpy(a->store, store, sizeof(store));
    if (!rc && a->where && !a->path && !(a->path = strdup(n->path)))
        rc = -ENOMEM;
    return rc;
}

/* The save itself, after content_check: the bytes stored, then either the
 * node's content replaced (and the file stamped used now: a save here is a
 * use, in the eviction order) or, when it moved, a conflict record kept. */
static int content_apply(struct cache *c, struct content_args *a, const struct cnode *n)
{
    sqlite3_stmt *st;
    int rc = db_blob_put(c, a->sha, a->buf, a->len, "put content");
    if (!rc && a->moved) {
        rc = keep_as_conflict(c, a->store, n, a->sha, CACHE_CONFLICT_STORE_WON);
        a->kept = !rc;
        return rc; /* committed: the record stays, the node is left alone */
    }
    if (rc)
        return rc;
    rc = db_cached(c, DB_ST_SET_CONTENT,
                   "UPDATE nodes SET sha = ?1, size = ?2, mtime = ?3, ctime = ?4, used = ?4,"
                   " unsaved = ?6, state = CASE WHEN memory_id IS NOT NULL AND ?1 IS base_sha"
                   " AND path IS base_path THEN 0 ELSE 1 END WHERE ino = ?5", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, a->sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)a->len);
    sqlite3_bind_int64(st, 3, a->mtime);
    sqlite3_bind_int64(st, 4, db_now_ns());
    sqlite3_bind_int64(st, 5, (sqlite3_int64)a->ino);
    sqlite3_bind_int(st, 6, a->held ? CACHE_HELD : CACHE_SAVED);
    rc = sqlite3_step(st);
    db_done(st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, "set content");
}

static int content_tx(struct cache *c, void *arg)
{
    struct content_args *a = arg;
    struct cnode n = {0};
    int rc = content_check(c, a, &n);
    if (!rc)
        rc = content_apply(c, a, &n);
    cnode_clear(&n);
    return rc;
}

int db_content_put(struct cache *c, uint64_t ino, const char *buf, size_t len, int64_t mtime_ns,
                   const char *sha, const char *expect, bool held, bool *kept)
{
    struct content_args a = {.ino = ino, .buf = buf, .len = len, .mtime = mtime_ns, .sha = sha,
                             .expect = expect, .held = held};
    int rc = content_tx(c, &a);
    *kept = !rc && a.kept;
    return rc;
}

/* A close's content (held: a writer may still have the file open): saved
 * into the lazy transaction, made durable by a journal record before the
 * call returns (cache/journal.c); committed at once when the journal
 * cannot take it or nothing would commit it later (no saver).
 *
 * The record is written as soon as the checks have passed, before the
 * bytes are stored: from then on the close is durable (a->then is told,
 * and the FLUSH answered, while the statements run).  A failure after the
 * record cannot leave this part out of a transaction that commits (the
 * epoch it writes would mark the record applied without its content): the
 * whole transaction is abandoned, and the journal, stuck, applies its
 * records again before any other change; the close stays saved. */
static int save_closed(struct cache *c, struct content_args *a)
{
    db_lock(c);
    bool journal = db_journal_ready(c, a->len), first = false, recorded = false;
    a->where = journal;
    struct cnode n = {0};
    int rc = db_begin(c);
    if (!rc)
        rc = content_check(c, a, &n);
    if (!rc && journal)
        rc = db_journal_begin(c, &first);
    if (!rc && journal && db_lazy_possible(c)) {
        struct db_jrec r = {a->ino, a->store, a->path, a->sha, a->expect, a->mtime, a->held,
                            a->buf, a->len};
        recorded = db_journal_add(c, &r) == 0;
        /* Replayed, the record sets the node's content and held state: the
         * marks of the node written before it are replaced (a moved node's
         * close becomes a conflict record and leaves the node alone). */
        if (recorded && !a->moved)
            db_marks_superseded(c, a->ino);
        if (recorded && a->then)
            a->then->fn(a->then->arg);
    }
    if (!rc)
        rc = content_apply(c, a, &n);
    if (!rc)
        rc = journal ? db_commit_lazy(c) : db_commit(c);
    if (!rc && journal && c->lazy && !recorded)
        rc = db_settle(c); /* no record (the journal refused it): durable by a commit */
    if (rc && recorded) {
        /* The marks this part wrote wait again (the record, applied again
         * first, replaces the mark of its own file). */
        db_marks_undone(c, a->ino);
        db_abandon(c);
        a->kept = a->moved; /* what the record's replay will do */
        rc = 0;
    } else if (rc) {
        if (journal)
            db_journal_unbegin(c, first);
        db_rollback(c);
    }
    db_unlock(c);
    cnode_clear(&n);
    free(a->path);
    return rc;
}

int cache_set_content(struct cache *c, uint64_t ino, const char *buf, size_t len,
                      int64_t mtime_ns, char sha_out[SHA256_HEX_LEN + 1])
{
    return cache_set_content_if(c, ino, buf, len, mtime_ns, NULL, false, sha_out);
}

static int set_content(struct cache *c, uint64_t ino, const char *buf, size_t len,
                       int64_t mtime_ns, const char *expect_sha, bool held, bool closed,
                       const struct cache_then *then, char sha_out[SHA256_HEX_LEN + 1])
{
    if (len > MEM_CONTENT_MAX_BYTES)
        return -EFBIG;
    char sha[SHA256_HEX_LEN + 1];
    sha256_hex(buf, len, sha); /* outside the lock: hashing needs no database */
    struct content_args a = {.ino = ino, .buf = buf, .len = len, .mtime = mtime_ns, .sha = sha,
                             .expect = expect_sha, .held = held, .then = then};
    int rc = closed ? save_closed(c, &a) : db_in_tx(c, content_tx, &a);
    if (!rc && a.kept)
        return -ESTALE;
    if (!rc && sha_out)
        memcpy(sha_out, sha, sizeof(sha));
    return rc;
}

int cache_set_content_if(struct cache *c, uint64_t ino, const char *buf, size_t len,
                         int64_t mtime_ns, const char *expect_sha, bool held,
                         char sha_out[SHA256_HEX_LEN + 1])
{
    return set_content(c, ino, buf, len, mtime_ns, expect_sha, held, false, NULL, sha_out);
}

int cache_save_closed(struct cache *c, uint64_t ino, const char *buf, size_t len,
                      int64_t mtime_ns, const char *expect_sha, char sha_out[SHA256_HEX_LEN + 1])
{
    return set_content(c, ino, buf, len, mtime_ns, expect_sha, true, true, NULL, sha_out);
}

int cache_save_closed_then(struct cache *c, uint64_t ino, const char *buf, size_t len,
                           int64_t mtime_ns, const char *expect_sha, const struct cache_then *then,
                           char sha_out[SHA256_HEX_LEN + 1])
{
    return set_content(c, ino, buf, len, mtime_ns, expect_sha, true, true, then, sha_out);
}

struct mark_args {
    uint64_t ino;
};

static int mark_dirty_tx(struct cache *c, void *arg)
{
    struct mark_args *a = arg;
    int rc = db_writable_store(c, a->ino, NULL, NULL);
    sqlite3_stmt *st;
    if (!rc)
        rc = db_prepare(c, "UPDATE nodes SET state = ?1, ctime = ?2 WHERE ino = ?3"
                           " AND is_dir = 0 AND state = 0", &st);
    if (!rc) {
        sqlite3_bind_int(st, 1, CNODE_DIRTY);
        sqlite3_bind_int64(st, 2, db_now_ns());
        sqlite3_bind_int64(st, 3, (sqlite3_int64)a->ino);
        rc = step_done(c, st, "mark dirty");
    }
    return rc;
}

int cache_set_times(struct cache *c, uint64_t ino, const int64_t *atime_ns,
                    const int64_t *mtime_ns)
{
    db_lock(c);
    int rc = db_writable_store(c, ino, NULL, NULL);
    sqlite3_stmt *st;
    if (!rc)
        rc = db_prepare(c, "UPDATE nodes SET atime = CASE WHEN ?1 THEN ?2 ELSE atime END,"
                           " mtime = CASE WHEN ?3 THEN ?4 ELSE mtime END, ctime = ?5"
                           " WHERE ino = ?6", &st);
    if (!rc) {
        sqlite3_bind_int(st, 1, atime_ns != NULL);
        sqlite3_bind_int64(st, 2, atime_ns ? *atime_ns : 0);
        sqlite3_bind_int(st, 3, mtime_ns != NULL);
        sqlite3_bind_int64(st, 4, mtime_ns ? *mtime_ns : 0);
        sqlite3_bind_int64(st, 5, db_now_ns());
        sqlite3_bind_int64(st, 6, (sqlite3_int64)ino);
        rc = step_done(c, st, "set times");
    }
    return db_unlock_rc(c, rc);
}

/* Whether marking ino would change nothing: a file of a writable store
 * already dirty or refused, or a directory (the mark's UPDATE matches
 * neither).  False when the row is missing or the store read-only, so that
 * the transaction gives the error it always gave. */
static bool mark_is_noop(struct cache *c, uint64_t ino)
{
    sqlite3_stmt *st;
    if (db_cached(c, DB_ST_MARK_NOOP, "SELECT n.is_dir = 1 OR n.state != 0 FROM nodes n"
                                      " JOIN stores s ON s.id = n.store"
                                      " WHERE n.ino = ? AND s.read_only = 0", &st))
        return false;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    bool noop = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
    db_done(st);
    return noop;
}

int cache_mark_dirty(struct cache *c, uint64_t ino)
{
    /* Lazy: the mark keeps a listing applied meanwhile (on this connection,
     * which sees it at once) off the file; the content it announces is in
     * memory until the FLUSH, whose commit carries the mark.  A file
     * already dirty (rewritten again before a sync) costs no transaction:
     * checked and left under the one lock, so no sync can clean it in
     * between. */
    struct mark_args a = {ino};
    db_lock(c);
    int rc = mark_is_noop(c, ino) ? 0 : db_tx_held(c, mark_dirty_tx, &a, true);
    db_unlock(c);
    return rc;
}
