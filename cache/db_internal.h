/* db_internal.h - what the files of cache/ share about the SQLite connection.
 * Not for use outside cache/. */
#ifndef MFS_DB_INTERNAL_H
#define MFS_DB_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <sys/types.h>
#include <time.h>

#include "cache.h"

/* Statements of the hottest paths, prepared once per connection and kept
 * (db_cached): preparing one costs more than running it, the more so for
 * a statement that fires the blob triggers or reads NODE_COLS. */
enum db_slot {
    DB_ST_NODE_BY_INO,   /* NODE_COLS of a node by ino (ino > 2) */
    DB_ST_NODE_BY_NAME,  /* NODE_COLS of (parent, name) */
    DB_ST_STORE_OF_NODE, /* a node's store: id, root, read_only */
    DB_ST_PUT_BLOB,      /* INSERT OR IGNORE a blob */
    DB_ST_SET_CONTENT,   /* content.c: a node's new content */
    DB_ST_TOUCH_DIR,     /* a directory's mtime and ctime */
    DB_ST_BEGIN,         /* BEGIN IMMEDIATE */
    DB_ST_COMMIT,        /* COMMIT */
    DB_ST_MARK_SAVED,    /* content.c: held -> saved */
    DB_ST_MARK_NOOP,     /* content.c: whether a dirty mark changes nothing */
    DB_ST_NEXT_INO,      /* write.c: the ino the next node gets */
    DB_ST_INO_BURNT,     /* db.c: the sequence moved past a told ino */
    DB_ST_SAVEPOINT,     /* a part joining the open lazy transaction */
    DB_ST_RELEASE,       /* its end */
    DB_ST_N
};

/* Every other statement made by db_prepare is kept too, up to DB_KEPT of
 * them, keyed by the address of its SQL text and checked against the text
 * itself (a statement built in a buffer is never mistaken for another);
 * one in use (a nested call of the same statement) is not lent twice: the
 * second caller gets a statement of its own, finalized by db_finish. */
#define DB_KEPT 128
struct db_kept {
    const char *sql;   /* the caller's text: the key */
    sqlite3_stmt *st;
    bool busy;         /* lent out: between db_prepare and db_finish */
};

/* A "cache database error" logged: its op and error, when
 * (CLOCK_MONOTONIC ms; 0: a free slot), and the repeats not logged since. */
#define DB_ERRLOGS 4
struct db_errlog {
    char op[72], msg[96];
    int64_t logged_ms;
    uint64_t repeats;
};

struct cache {
    sqlite3 *db;           /* guarded by lock */
    struct db_kept kept[DB_KEPT]; /* guarded by lock; finalized by cache_close */
    pthread_mutex_t lock;  /* taken by every public cache_* call, never held on return */
    char *dir;
    sqlite3_stmt *cached[DB_ST_N]; /* guarded by lock; finalized by cache_close */
    /* Rows whose last writer closed them, not yet marked saved in the
     * database, and the thread that writes them (cache/saved.c); all
     * guarded by lock.  The first n_applied of them were written into the
     * open transaction (db_apply_saved inside it), the first n_part of
     * those by its earlier lazy parts: a commit drops them
     * (db_marks_kept); a part rolled back makes its own wait again
     * (db_marks_undone), a transaction rolled back all of them
     * (db_marks_lost), since only a commit puts a mark in the database. */
    uint64_t *saved;
    size_t n_saved, n_applied, n_part, cap_saved;
    struct timespec saved_since; /* CLOCK_MONOTONIC: the group's first mark */
    pthread_cond_t saved_cond;
    pthread_t saver_thr;
    bool saver_running, saver_failed, saver_stop, saver_retry, saver_idle;
    /* Set by the crash tests only (cache_hold_saver: the cache tests, and
     * the daemon's MEMSTOREFS_TEST_HOLD_SAVER): the saver keeps no
     * deadline, so the state a kill -9 leaves does not depend on how fast
     * the test ran. */
    bool saver_held;
    /* The lazy transaction (saved.c): open while lazy, since lazy_since;
     * lazy_mark is sqlite3_total_changes64 after its last lazy part, so
     * db_unlock sees any other write made into it and commits it. */
    bool lazy;
    struct timespec lazy_since;
    sqlite3_int64 lazy_mark;
    /* The journal of closed files (journal.c): its fd (-1 until the first
     * record), the end of the open epoch's records, the file's size (older
     * epochs' bytes lie between the two), the epoch of the open
     * transaction's records and its meta key; jin_tx: the open transaction
     * carries records; jstuck: a failed commit left them the only copy. */
    int jfd;
    off_t jend, jsize;
    uint64_t jepoch;
    bool jin_tx, jstuck, jfailed;
    /* A write failed for want of disk space (ENOSPC, EDQUOT) and no commit
     * has succeeded since: read without the lock (cache_lacks_room). */
    bool no_room;
    /* Nodes a replay of the stuck journal changed (db_journal_retry), for
     * the saver to hand to replay_hook without the lock: the kernel may
     * hold what the failed commit's rollback showed of them. */
    uint64_t *replayed;
    size_t n_replayed, cap_replayed;
    /* The last "cache database error"s logged (db.c, log_db_error). */
    struct db_errlog errs[DB_ERRLOGS];
    bool jtell_lost; /* a node could not be noted (no memory) */
    void (*replay_hook)(void *arg, const uint64_t *inos, size_t n);
    void *replay_arg;
    struct timespec jstuck_since;
    char jkey[300];
    /* Set by a crash test only: called between the journal's creation and
     * its lock, where another process opening the cache may take it for a
     * dead daemon's and remove it. */
    void (*journal_made)(struct cache *c, const char *path);
    /* The background checkpointer (ckpt.c); NULL: SQLite checkpoints in
     * the commit, as by default. */
    struct db_ckpt *ckpt;
    /* Inos the kernel was told before their rows were written (write.c,
     * create_tx): ino_told the highest, ino_told_safe the highest a commit
     * has carried since.  A rollback while ino_told > ino_told_safe may
     * have undone a told row, and with it the sequence's move past it:
     * ino_burnt takes it (0: none), and every write transaction first
     * moves the sequence past ino_burnt (db_ino_burnt), so no node can take
     * an ino the kernel still holds for another file, until a commit has
     * carried that move (burn_in_tx). */
    uint64_t ino_told, ino_told_safe, ino_burnt;
    bool burn_in_tx;
};

/* The kept statement of slot (prepared from sql the first time), reset and
 * with its bindings cleared.  The caller holds c->lock, binds and steps it,
 * and gives it back with db_done, never sqlite3_finalize: a statement left
 * stepped would hold a read transaction open. */
int db_cached(struct cache *c, enum db_slot slot, const char *sql, sqlite3_stmt **st);
void db_done(sqlite3_stmt *st);

/* SQLite result code -> negative errno (the one translation table). */
int db_errno(int rc);
/* Logs a SQLite failure (with the statement's text) and returns db_errno. */
int db_fail(struct cache *c, int rc, const char *what);
/* Logs the counts of the repeated failures not logged yet, and forgets
 * them: an outage is over (the stuck journal applied) or the cache closes. */
void db_errors_flush(struct cache *c);

/* A statement for sql, kept from an earlier call when there is one (see
 * DB_KEPT); the caller holds c->lock and gives it back with db_finish
 * (never sqlite3_finalize), which resets it and clears its bindings. */
int db_prepare(struct cache *c, const char *sql, sqlite3_stmt **st);
void db_finish(struct cache *c, sqlite3_stmt *st);
/* Runs sql with no results. */
int db_exec(struct cache *c, const char *sql);
/* The first column of the first row of a PRAGMA (0 when none). */
int db_pragma_int(struct cache *c, const char *sql, int64_t *v);
/* Runs one statement with no results, its ?1 bound to text. */
int db_exec_bound(struct cache *c, const char *sql, const char *text);
/* A write transaction: BEGIN IMMEDIATE, or a savepoint of the open lazy
 * transaction (saved.c), which the commit then commits with it; a
 * rollback undoes this part only. */
int db_begin(struct cache *c);
/* Inside a write transaction: the sequence of nodes' inos moved past
 * c->ino_burnt (nothing when it is 0). */
int db_ino_burnt(struct cache *c);
/* The end of a transaction (committed or not) or a part rolled back
 * (committed false), for the told inos' bookkeeping above. */
void db_inos_ended(struct cache *c, bool committed);
int db_commit(struct cache *c);
void db_rollback(struct cache *c);
/* Ends a db_begin without committing: the work joins the lazy transaction,
 * committed by the next db_commit, by any other write (db_unlock) or by
 * the saver LAZY_DELAY_MS later (saved.c).  Only for work a crash may lose
 * without losing anything closed or fsynced. */
int db_commit_lazy(struct cache *c);
/* Commits the lazy transaction, if one is open.  Caller holds c->lock. */
int db_settle(struct cache *c);
/* Whether db_commit_lazy, called now, would leave the work to a later
 * commit (a lazy transaction is open, or the saver runs or can start)
 * rather than commit it at once.  Caller holds c->lock, and keeps it until
 * that db_commit_lazy. */
bool db_lazy_possible(struct cache *c);
/* Rolls the whole transaction back, the lazy work before this part
 * included, and leaves the journal stuck (its records applied again before
 * any other change): db_rollback's end once no lazy work is left to keep,
 * and for a part that failed after its close's journal record was
 * written, which no commit may then carry without the content (content.c,
 * save_closed). */
void db_abandon(struct cache *c);

/* A commit went through: the cache has room again (cache_lacks_room). */
static inline void db_room_back(struct cache *c)
{
    __atomic_store_n(&c->no_room, false, __ATOMIC_RELEASE);
}

/* The blocks CACHE_DIR/reserve holds (reserve.c); 0 when there is none. */
uint64_t db_reserve_bytes(const struct cache *c);

/* The errno of this thread's first failed write, sync, truncate or
 * shared-memory call of the cache's files (walbuf.c), 0 if none since the
 * last take; taking it clears it.  Inline: db_lock takes it at every
 * operation. */
extern __thread int db_io_errno;
static inline int db_io_errno_take(void)
{
    int e = db_io_errno;
    db_io_errno = 0;
    return e;
}

static inline void db_lock(struct cache *c)
{
    pthread_mutex_lock(&c->lock);
    (void)db_io_errno_take(); /* none of an earlier operation's */
}
/* SQLite rolled the whole transaction back on its own (it may, after
 * SQLITE_FULL, IOERR or NOMEM) in a statement run inside the lazy
 * transaction but outside any part (the sync's read writes the saved
 * marks waiting: pending.c): the lazy work is gone, and db_abandon's
 * bookkeeping follows (the closes come back from the journal, the inos
 * told are burnt), before anything takes the transaction for still open. */
void db_lazy_lost(struct cache *c);
static inline void db_lazy_check(struct cache *c)
{
    if (c->lazy && sqlite3_get_autocommit(c->db))
        db_lazy_lost(c);
}
/* A public call that wrote anything outside a lazy part commits the lazy
 * transaction before it returns, so every other write is as durable as
 * it was without one. */
static inline void db_unlock(struct cache *c)
{
    db_lazy_check(c);
    if (c->lazy && sqlite3_total_changes64(c->db) != c->lazy_mark)
        (void)db_settle(c);
    pthread_mutex_unlock(&c->lock);
}
/* db_unlock for a call that wrote with single statements (no db_begin):
 * such a write inside an open lazy transaction is durable only with that
 * transaction's commit, so a failed commit (a full disk) is the call's
 * error, not a silent loss.  Returns rc, or the commit's error if rc is 0. */
static inline int db_unlock_rc(struct cache *c, int rc)
{
    db_lazy_check(c);
    if (c->lazy && sqlite3_total_changes64(c->db) != c->lazy_mark) {
        int src = db_settle(c);
        if (!rc)
            rc = src;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int64_t db_now_ns(void);

/* Checkpoints off the request path (ckpt.c): a thread with its own
 * connection to file checkpoints the WAL once the cache's commits took it
 * past 1,000 pages.  A negative errno when it cannot start (SQLite's own
 * checkpoint in the commit then stays).  db_ckpt_stop before the cache's
 * connection closes.  db_ckpt_pause waits for a pass under way and holds
 * off the next until db_ckpt_resume (around a TRUNCATE checkpoint of the
 * cache's connection, which a pass would make busy). */
int db_ckpt_start(struct cache *c, const char *file);
void db_ckpt_stop(struct cache *c);
void db_ckpt_pause(struct cache *c);
void db_ckpt_resume(struct cache *c);
/* Passes of the thread, and checkpoints the commits made themselves
 * because the log passed its bound (for tests). */
void db_ckpt_counts(struct cache *c, unsigned long *passes, unsigned long *inline_passes);

/* The cache's SQLite VFS (walbuf.c: the default one, with each WAL commit
 * written in one call), registered at the first call; NULL when it could
 * not be (the default VFS is then used). */
#define DB_VFS_NAME "memstorefs-walbuf"
const char *db_vfs(void);


/* Records memory_id as deleted locally (INSERT OR REPLACE a tombstone) with
 * base (sha, path) and mode (-1: the store's current mode).  Caller holds
 * c->lock. */
int db_tombstone(struct cache *c, const char *store_id, const char *memory_id, const char *sha,
                 const char *path, int mode);

/* Shared by write.c and content.c (defined in write.c), caller holds
 * c->lock:  a node by ino (live or not; -ENOENT when absent); the store of
 * a node (its id in store_out, CACHE_ID_MAX bytes, may be NULL; its root)
 * and -EROFS for a read-only one; body(c, arg) run in one transaction
 * (db_in_tx takes the lock itself; db_in_tx_lazy ends it with
 * db_commit_lazy; db_tx_held runs it under the lock the caller holds,
 * ended either way). */
int db_get_node(struct cache *c, uint64_t ino, struct cnode *out);
int db_writable_store(struct cache *c, uint64_t ino, char *store_out, uint64_t *root);
int db_in_tx(struct cache *c, int (*body)(struct cache *, void *), void *arg);
int db_in_tx_lazy(struct cache *c, int (*body)(struct cache *, void *), void *arg);
int db_tx_held(struct cache *c, int (*body)(struct cache *, void *), void *arg, bool lazy);
/* Writes the saved marks cache_mark_saved deferred (cache/saved.c).  The
 * caller holds c->lock; inside a transaction or not.  db_begin calls it,
 * so every write transaction starts with them. */
int db_apply_saved(struct cache *c);
/* The end of a transaction part that may have written marks: committed or
 * carried into the lazy transaction (kept), or rolled back (undone: they
 * wait again, but for the row except, whose change in the part undone
 * comes after its mark and replaces it; 0 for none). */
void db_marks_kept(struct cache *c);
void db_marks_undone(struct cache *c, uint64_t except);
/* A lazy part's end (db_commit_lazy): its marks are carried by the open
 * transaction, in the database only once it commits. */
void db_marks_carried(struct cache *c);
/* The whole transaction rolled back: all the marks it carried wait again. */
void db_marks_lost(struct cache *c);
/* A journal record of ino was added: marks of ino the transaction carries
 * come before it, and replaying it replaces them. */
void db_marks_superseded(struct cache *c, uint64_t ino);
/* Stops the saver thread and writes what is left (cache_close). */
void db_saver_stop(struct cache *c);

/* Steps st (prepared and bound by the caller, who holds c->lock) and
 * appends one item of elem bytes per row to the array *out (malloc'd,
 * *n items), zeroed and then filled by fill (0 or a negative errno).
 * Finalizes st.  On failure the items filled so far stay in *out for the
 * caller to free. */
int db_collect(struct cache *c, sqlite3_stmt *st, size_t elem, void **out, size_t *n,
               int (*fill)(sqlite3_stmt *st, void *item), const char *what);

/* The columns db_row_to_node reads, in its order (nodes.c). */
#define NODE_COLS                                                                                  \
    "ino, parent, name, path, is_dir, size, mtime, ctime, sha, memory_id, base_sha, state,"      \
    " (sha IS NOT NULL AND EXISTS(SELECT 1 FROM blobs b WHERE b.sha = nodes.sha)),"           \
    " base_path, unlinked, refused_sha, unsaved, COALESCE(atime, mtime),"                        \
    " (CASE WHEN is_dir THEN (SELECT count(*) FROM nodes k WHERE k.parent = nodes.ino"          \
    "  AND k.is_dir = 1) ELSE 0 END), COALESCE(used, 0), (evicted IS sha)"
/* The write-ahead log's bound: a commit that takes it past this many
 * pages checkpoints it itself (cache/ckpt.c).  Its file's limit
 * (journal_size_limit, cache/db.c) stays above the bound and what commits
 * add while a pass makes that checkpoint wait, so SQLite never cuts the
 * file when the log starts again. */
#define DB_WAL_BOUND_PAGES 4000
#define DB_WAL_LIMIT_BYTES 25165824 /* 24 MiB; a literal: it goes into SQL */
#define DB_STR_(x) #x
#define DB_STR(x) DB_STR_(x)
/* The hash of "": the content of every new file.  Its blob (0 bytes) is
 * kept for good, so that making and writing files does not insert and
 * delete it again and again. */
#define DB_EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* The condition under which the row of `blobs` being considered is
 * needed by nothing: no node's content or baseline, no conflict record,
 * no upload in flight (cache/gc.c has the model); the empty blob is
 * always kept. */
#define DB_BLOB_UNNEEDED                                                                           \
    "blobs.sha != '" DB_EMPTY_SHA "'"                                                             \
    " AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.sha = blobs.sha)"                             \
    " AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.base_sha = blobs.sha)"                        \
    " AND NOT EXISTS (SELECT 1 FROM conflicts k WHERE k.local_sha = blobs.sha)"                   \
    " AND NOT EXISTS (SELECT 1 FROM sent x WHERE x.sha = blobs.sha)"
/* Frees every blob nothing refers to, gives the free pages back to the
 * file system, and turns on incremental vacuum in a database made before
 * it (a one-time VACUUM).  Caller does not hold c->lock (gc.c). */
int db_reclaim(struct cache *c);

/* The kept selects of one node (db_cached slots of the same names). */
#define DB_SQL_NODE_BY_INO "SELECT " NODE_COLS " FROM nodes WHERE ino = ? AND ino > 2"
#define DB_SQL_NODE_BY_NAME "SELECT " NODE_COLS " FROM nodes WHERE parent = ? AND name = ?"
#define DB_SQL_PUT_BLOB "INSERT OR IGNORE INTO blobs(sha, data) VALUES (?, ?)"
/* Stores len bytes of buf as the blob of sha unless it is there (c->lock
 * held; buf only read during the call).  what names the step in the
 * error's log line. */
int db_blob_put(struct cache *c, const char *sha, const char *buf, size_t len, const char *what);

/* The journal of closed files (journal.c).  All with c->lock held.
 * db_journal_open replays the journals no live process holds (cache_open);
 * db_journal_ready: a record of len content bytes may be added (the
 * journal exists or could be made, is not stuck, has room);
 * db_journal_begin, inside the part that saves the content: the open
 * transaction records the journal's epoch (*first: this call did; undone
 * by db_journal_unbegin when the part fails before its record);
 * db_journal_add appends the record, once the part's checks have passed
 * and before its content is stored; db_journal_ended: the outermost transaction
 * committed (the journal is emptied) or was rolled back (stuck);
 * db_journal_retry applies a stuck journal's records again; and
 * db_journal_close removes a journal whose records are all committed. */
struct db_jrec {
    uint64_t ino;
    const char *store, *path;
    const char *sha, *expect; /* expect: NULL when not edited from a known version */
    int64_t mtime;
    bool held;
    const char *buf;
    size_t len;
};
int db_journal_open(struct cache *c);
bool db_journal_ready(struct cache *c, size_t len);
int db_journal_begin(struct cache *c, bool *first);
void db_journal_unbegin(struct cache *c, bool first);
int db_journal_add(struct cache *c, const struct db_jrec *r);
void db_journal_ended(struct cache *c, bool committed);
int db_journal_retry(struct cache *c);
/* cache_store_stats's journal_waiting (*n) for store, and how many of
 * those rows count as unsaved (*n_new); both 0 unless the journal is
 * stuck.  files (may be NULL): those files, sorted by ino, malloc'd
 * (cache_jfiles_free; NULL for none).  Caller holds c->lock. */
int db_journal_waiting(struct cache *c, const char *store, size_t *n, size_t *n_new,
                       struct cache_jfile **files);
/* Whether a stuck journal's last try is a second old (J_RETRY_MS): a read
 * path retries no more often than the saver. */
#define J_RETRY_MS 1000
bool db_journal_due(const struct cache *c);
void db_journal_close(struct cache *c);
/* What a replayed record needs: a new file made by an open (write.c,
 * CACHE_NEW; ino: a free ino it takes, 0 for the next of the sequence),
 * and a content saved as a close saves it (content.c; *kept: edited from
 * a version since replaced, kept as a conflict record). */
int db_create_node(struct cache *c, uint64_t parent, const char *name, int64_t now_ns,
                   uint64_t ino, struct cnode *out);
int db_content_put(struct cache *c, uint64_t ino, const char *buf, size_t len, int64_t mtime_ns,
                   const char *sha, const char *expect, bool held, bool *kept);

/* Fills n from a row selected with NODE_COLS (n is cleared with cnode_clear). */
int db_row_to_node(sqlite3_stmt *st, struct cnode *n);
/* Steps st (NODE_COLS rows) and finishes it, calling fn on each row;
 * fn returning non-zero stops the walk, and that value is returned. */
int db_each_node(struct cache *c, sqlite3_stmt *st, cache_node_fn fn, void *arg);
/* db_each_node over the rows of sql (NODE_COLS, one parameter: the store
 * id); the caller holds c->lock. */
int db_each_store_node(struct cache *c, const char *sql, const char *store_id, cache_node_fn fn,
                       void *arg);

#endif
