/* db.c - the cache's SQLite connection: opening, schema, transactions and
 * the translation of SQLite result codes into negative errnos.
 *
 * One connection per struct cache, serialised by cache->lock (taken by each
 * public cache_* function for its whole duration; never held across a
 * return, so no caller can hold it during HTTP or FUSE work).  WAL mode with
 * synchronous=NORMAL: a committed transaction survives the daemon being
 * killed; only a power loss may take the last ones.  Inode numbers are the
 * rowids of `nodes` (AUTOINCREMENT, so a number is never reused); rows 1
 * and 2 are reserved placeholders (the FUSE root and the marker). */
#include "db_internal.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "private.h"

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE IF NOT EXISTS stores("
    "  id TEXT PRIMARY KEY, root INTEGER NOT NULL, read_only INTEGER NOT NULL DEFAULT 0,"
    "  last_sync INTEGER, last_result TEXT);"
    "CREATE TABLE IF NOT EXISTS nodes("
    "  ino INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  store TEXT NOT NULL,"
    "  parent INTEGER,"              /* NULL: a root, a placeholder or an unlinked node */
    "  name TEXT NOT NULL,"
    "  path TEXT NOT NULL,"          /* memory path; '/' for a root */
    "  is_dir INTEGER NOT NULL,"
    "  size INTEGER NOT NULL DEFAULT 0,"
    "  mtime INTEGER NOT NULL, ctime INTEGER NOT NULL,"
    "  sha TEXT,"                    /* hash of the current content */
    "  memory_id TEXT,"              /* remote identity, NULL if never synced */
    "  base_sha TEXT, base_path TEXT,"  /* baseline at the last sync */
    "  state INTEGER NOT NULL DEFAULT 0,"  /* 0 clean, 1 dirty, 2 refused */
    "  refused_sha TEXT, refused_why TEXT,"
    "  unlinked INTEGER NOT NULL DEFAULT 0,"
    "  UNIQUE(parent, name));"
    "CREATE INDEX IF NOT EXISTS nodes_store_path ON nodes(store, path);"
    /* memory ids: only synced files have one, so a new file is not in it
     * (every lookup is memory_id = ?, which the partial index serves);
     * nodes_store_mem was the same over every row */
    "DROP INDEX IF EXISTS nodes_store_mem;"
    "CREATE INDEX IF NOT EXISTS nodes_mem ON nodes(store, memory_id) WHERE memory_id IS NOT NULL;"
    "CREATE TABLE IF NOT EXISTS blobs(sha TEXT PRIMARY KEY, data BLOB NOT NULL);"
    /* memories deleted locally, until the sync deletes them remotely */
    "CREATE TABLE IF NOT EXISTS tombstones("
    "  store TEXT NOT NULL, memory_id TEXT NOT NULL, base_sha TEXT, base_path TEXT,"
    "  deleted_at INTEGER NOT NULL, PRIMARY KEY(store, memory_id));"
    /* local versions that lost to the store, kept to be read back */
    "CREATE TABLE IF NOT EXISTS conflicts("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT, store TEXT NOT NULL, path TEXT NOT NULL,"
    "  memory_id TEXT, local_sha TEXT NOT NULL, remote_sha TEXT, at INTEGER NOT NULL);"
    "INSERT OR IGNORE INTO nodes(ino, store, parent, name, path, is_dir, mtime, ctime)"
    "  VALUES (1, '', NULL, '(root)', '', 1, 0, 0), (2, '', NULL, '(marker)', '', 0, 0, 0);"
    "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', '1');"
    /* uploads that went out and await their answer or the next listing
     * (cache/sent.c); ino follows the file through atomic saves */
    "CREATE TABLE IF NOT EXISTS sent("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT, store TEXT NOT NULL, ino INTEGER NOT NULL,"
    "  memory_id TEXT NOT NULL DEFAULT '', path TEXT NOT NULL, sha TEXT NOT NULL,"
    "  at INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sent_store_ino ON sent(store, ino);"
    /* the sync's "anything to push?" and the dirty-file scan */
    "CREATE INDEX IF NOT EXISTS nodes_store_state ON nodes(store, state);"
    /* per memory, the newest store version seen of it (cache/history.c) */
    "CREATE TABLE IF NOT EXISTS memvers("
    "  store TEXT NOT NULL, memory_id TEXT NOT NULL, sha TEXT NOT NULL,"
    "  version_id TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(store, memory_id));";

/* Blobs are freed in the transaction that drops their last reference
 * (cache/gc.c has the model): a blob is needed while a node's content or
 * baseline, a conflict record or an upload in flight names it.  Created
 * after added_columns, with the indexes that keep each check one lookup. */
static const char schema_gc[] =
    "CREATE INDEX IF NOT EXISTS nodes_sha ON nodes(sha);"
    /* baselines: a never-synced file has none (nodes_base_sha was over
     * every row) */
    "DROP INDEX IF EXISTS nodes_base_sha;"
    "CREATE INDEX IF NOT EXISTS nodes_base ON nodes(base_sha) WHERE base_sha IS NOT NULL;"
    "CREATE INDEX IF NOT EXISTS conflicts_local_sha ON conflicts(local_sha);"
    "CREATE INDEX IF NOT EXISTS conflicts_store_at ON conflicts(store, at);"
    "CREATE INDEX IF NOT EXISTS sent_sha ON sent(sha);"
    /* a directory's subdirectories, for its link count (NODE_COLS) */
    "CREATE INDEX IF NOT EXISTS nodes_subdirs ON nodes(parent) WHERE is_dir = 1;"
    /* files an open created and no close saved yet, or held by a writer:
     * few at any time, counted after every sync (cache_store_pending) */
    "CREATE INDEX IF NOT EXISTS nodes_unsaved ON nodes(store) WHERE unsaved != 0;"
    /* A node's two hashes are freed by two statements of one lookup each:
     * "sha IN (OLD.sha, OLD.base_sha)" made SQLite build a temporary table
     * of the list at every firing (a save's UPDATE, an editor's rename
     * detaching its target), a fifth of the statement's work.  A hash the
     * row still names after an update is needed: not looked up.  These
     * replace blobs_free_node_update and _delete, which had the list
     * (dropped after the new ones exist, so one pair always does). */
    "CREATE TRIGGER IF NOT EXISTS blobs_free_node_change AFTER UPDATE OF sha, base_sha ON nodes"
    "  WHEN OLD.sha IS NOT NEW.sha OR OLD.base_sha IS NOT NEW.base_sha BEGIN"
    "  DELETE FROM blobs WHERE sha = OLD.sha AND OLD.sha IS NOT NEW.sha"
    "    AND OLD.sha IS NOT NEW.base_sha AND " DB_BLOB_UNNEEDED ";"
    "  DELETE FROM blobs WHERE sha = OLD.base_sha AND OLD.base_sha IS NOT NEW.base_sha"
    "    AND OLD.base_sha IS NOT NEW.sha AND " DB_BLOB_UNNEEDED "; END;"
    "CREATE TRIGGER IF NOT EXISTS blobs_free_node_gone AFTER DELETE ON nodes BEGIN"
    "  DELETE FROM blobs WHERE sha = OLD.sha AND " DB_BLOB_UNNEEDED ";"
    "  DELETE FROM blobs WHERE sha = OLD.base_sha AND " DB_BLOB_UNNEEDED "; END;"
    "DROP TRIGGER IF EXISTS blobs_free_node_update;"
    "DROP TRIGGER IF EXISTS blobs_free_node_delete;"
    "CREATE TRIGGER IF NOT EXISTS blobs_free_conflict AFTER DELETE ON conflicts BEGIN"
    "  DELETE FROM blobs WHERE sha = OLD.local_sha AND " DB_BLOB_UNNEEDED "; END;"
    "CREATE TRIGGER IF NOT EXISTS blobs_free_sent AFTER DELETE ON sent BEGIN"
    "  DELETE FROM blobs WHERE sha = OLD.sha AND " DB_BLOB_UNNEEDED "; END;";

/* Columns added after the first schema, each added when a cache directory
 * made by an older build lacks it (so no migration needs numbering). */
static const struct {
    const char *table, *column, *decl;
} added_columns[] = {
    /* a file created by an open that no close or fsync has saved yet */
    {"nodes", "unsaved", "INTEGER NOT NULL DEFAULT 0"},
    /* --sync-deletions in force when the memory was removed (cache_del_mode) */
    {"tombstones", "mode", "INTEGER NOT NULL DEFAULT 0"},
    /* the mode of the daemon that has the store mounted now */
    {"stores", "deletions", "INTEGER NOT NULL DEFAULT 0"},
    /* why the record was kept (enum cache_conflict_kind) */
    {"conflicts", "kind", "INTEGER NOT NULL DEFAULT 0"},
    /* access time (ns); NULL: the same as mtime (set by utimensat only) */
    {"nodes", "atime", "INTEGER"},
    /* when the file was last used (ns): opened (hour granularity), created or
     * saved here; the eviction order */
    {"nodes", "used", "INTEGER"},
    /* the content hash --cache-max-size evicted: fetched on open, not prefetched */
    {"nodes", "evicted", "TEXT"},
};

int db_errno(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return 0;
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    case SQLITE_READONLY:
        return -EROFS;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_CANTOPEN:
        return -EACCES;
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return -EPERM;
    case SQLITE_CONSTRAINT:
        return -EEXIST;
    case SQLITE_TOOBIG:
        return -EFBIG;
    case SQLITE_NOTFOUND:
        return -ENOENT;
    case SQLITE_INTERRUPT:
        return -EINTR;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_IOERR:
    default:
        return -EIO;
    }
}

/* "cache database error": a failure that repeats (the same op and error,
 * as a full disk gives every retry of the journal, each second) is logged
 * again only a minute after it last was, with how many times it came
 * meanwhile (repeated=N); another failure is logged at once.  A few such
 * failures are followed at a time (they may alternate); one pushed out,
 * or still counted when an outage ends or the cache closes, is logged
 * with its count then (db_errors_flush).  Caller holds c->lock. */
static void log_repeats(const struct db_errlog *e)
{
    char n[24];
    snprintf(n, sizeof(n), "%llu", (unsigned long long)e->repeats);
    log_error("cache database error", "op", e->op, "error", e->msg, "repeated", n);
}

static void log_db_error(struct cache *c, const char *op, const char *err)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    struct db_errlog *e = NULL, *oldest = &c->errs[0];
    for (size_t i = 0; i < DB_ERRLOGS && !e; i++) {
        struct db_errlog *x = &c->errs[i];
        if (x->logged_ms && strncmp(x->op, op, sizeof(x->op) - 1) == 0 &&
            strncmp(x->msg, err, sizeof(x->msg) - 1) == 0)
            e = x;
        else if (x->logged_ms < oldest->logged_ms)
            oldest = x;
    }
    if (e && ms - e->logged_ms < 60000) {
        e->repeats++;
        return;
    }
    if (e && e->repeats) {
        log_repeats(e);
    } else {
        if (!e && oldest->repeats)
            log_repeats(oldest); /* pushed out: its count now */
        log_error("cache database error", "op", op, "error", err);
        e = e ? e : oldest;
    }
    snprintf(e->op, sizeof(e->op), "%s", op);
    snprintf(e->msg, sizeof(e->msg), "%s", err);
    e->logged_ms = ms;
    e->repeats = 0;
}

void db_errors_flush(struct cache *c)
{
    for (size_t i = 0; i < DB_ERRLOGS; i++) {
        if (c->errs[i].repeats)
            log_repeats(&c->errs[i]);
        memset(&c->errs[i], 0, sizeof(c->errs[i]));
    }
}

/* db_errno, told by the system's errno where SQLite's code hides it: a
 * full disk is SQLITE_FULL only for some writes (a quota's EDQUOT, or
 * growing the shared-memory file, come as SQLITE_IOERR).  The errno is
 * the one the cache's VFS caught (walbuf.c): sqlite3_system_errno was 0
 * after a failed COMMIT's write (SQLite 3.40.1, seen in a test), and is
 * never cleared; it is read only when the VFS caught nothing.  A failure for
 * want of room is noted for cache_lacks_room (the final sync then frees
 * the reserve, cache/reserve.c); a commit clears it (db_room_back). */
static int noted(struct cache *c, int rc)
{
    int e = 0, x = sqlite3_extended_errcode(c->db);
    if ((rc & 0xff) == SQLITE_FULL)
        e = ENOSPC; /* its unix VFS keeps no errno for it */
    else if ((rc & 0xff) == SQLITE_IOERR &&
             (x == SQLITE_IOERR_WRITE || x == SQLITE_IOERR_FSYNC || x == SQLITE_IOERR_TRUNCATE ||
              x == SQLITE_IOERR_SHMSIZE || x == SQLITE_IOERR_SHMMAP))
        e = db_io_errno_take(); /* SQLite's own misses a commit's (walbuf.c) */
    if (!e && (rc & 0xff) == SQLITE_IOERR)
        e = sqlite3_system_errno(c->db); /* the cache's VFS not in use */
    if (e != ENOSPC && e != EDQUOT)
        return db_errno(rc);
    __atomic_store_n(&c->no_room, true, __ATOMIC_RELEASE);
    return -e;
}

int db_fail(struct cache *c, int rc, const char *what)
{
    log_db_error(c, what, sqlite3_errmsg(c->db));
    return noted(c, rc);
}

/* The slot of sql: its own, or the first free one on its probe path;
 * NULL when neither is there (the statement is then not kept). */
static struct db_kept *kept_slot(struct cache *c, const char *sql)
{
    size_t h = ((uintptr_t)sql >> 3) * 0x9E3779B97F4A7C15ull >> 57; /* 0..127 */
    for (size_t i = 0; i < 8; i++) {
        struct db_kept *k = &c->kept[(h + i) % DB_KEPT];
        if (!k->st || k->sql == sql)
            return k;
    }
    return NULL;
}

int db_prepare(struct cache *c, const char *sql, sqlite3_stmt **st)
{
    struct db_kept *k = kept_slot(c, sql);
    if (k && k->st && !k->busy && strcmp(sqlite3_sql(k->st), sql) == 0) {
        k->busy = true;
        *st = k->st;
        return 0;
    }
    bool keep = k && !k->st;
    int rc = sqlite3_prepare_v3(c->db, sql, -1, keep ? SQLITE_PREPARE_PERSISTENT : 0, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return db_fail(c, rc, sql);
    }
    if (keep && *st) {
        k->sql = sql;
        k->st = *st;
        k->busy = true;
    }
    return 0;
}

void db_finish(struct cache *c, sqlite3_stmt *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < DB_KEPT; i++)
        if (c->kept[i].st == st) {
            db_done(st);
            c->kept[i].busy = false;
            return;
        }
    sqlite3_finalize(st);
}

int db_cached(struct cache *c, enum db_slot slot, const char *sql, sqlite3_stmt **st)
{
    if (!c->cached[slot]) {
        int rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &c->cached[slot],
                                    NULL);
        if (rc != SQLITE_OK) {
            c->cached[slot] = NULL;
            return db_fail(c, rc, sql);
        }
    }
    *st = c->cached[slot];
    db_done(*st);
    return 0;
}

void db_done(sqlite3_stmt *st)
{
    if (st) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
}

int db_exec(struct cache *c, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        /* The schema is several kilobytes of statements: its start names it. */
        char op[72];
        size_t n = strlen(sql);
        snprintf(op, sizeof(op), "%.*s%s", n < 64 ? (int)n : 60, sql, n < 64 ? "" : " ...");
        log_db_error(c, op, err ? err : "?");
        sqlite3_free(err);
        return noted(c, rc);
    }
    return 0;
}

int db_pragma_int(struct cache *c, const char *sql, int64_t *v)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, sql, &st);
    if (rc)
        return rc;
    rc = sqlite3_step(st);
    *v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(c, rc, sql);
    db_finish(c, st);
    return rc;
}

int db_exec_bound(struct cache *c, const char *sql, const char *text)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, sql, &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    db_finish(c, st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, sql);
}

/* Runs a kept statement without results (BEGIN, COMMIT: parsed once). */
static int run_cached(struct cache *c, enum db_slot slot, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int rc = db_cached(c, slot, sql, &st);
    if (rc)
        return rc;
    rc = sqlite3_step(st);
    db_done(st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, sql);
}

int db_ino_burnt(struct cache *c)
{
    if (!c->ino_burnt)
        return 0;
    sqlite3_stmt *st = NULL;
    int rc = db_cached(c, DB_ST_INO_BURNT,
                       "UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'nodes' AND seq < ?1", &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)c->ino_burnt);
    rc = sqlite3_step(st);
    db_done(st);
    if (rc != SQLITE_DONE)
        return db_fail(c, rc, "move the inos past a told one");
    c->burn_in_tx = true;
    return 0;
}

void db_inos_ended(struct cache *c, bool committed)
{
    if (committed) {
        c->ino_told_safe = c->ino_told;
        if (c->burn_in_tx)
            c->ino_burnt = 0;
    } else if (c->ino_told > c->ino_told_safe && c->ino_told > c->ino_burnt) {
        c->ino_burnt = c->ino_told; /* perhaps undone: never given again */
    }
    c->burn_in_tx = false;
}

int db_begin(struct cache *c)
{
    db_lazy_check(c);
    /* Closed files a failed commit took out of the database go back in
     * before anything else changes (journal.c). */
    if (c->jstuck && !c->lazy) {
        int jrc = db_journal_retry(c);
        if (jrc)
            return jrc;
    }
    int rc = c->lazy ? run_cached(c, DB_ST_SAVEPOINT, "SAVEPOINT lazy_part")
                     : run_cached(c, DB_ST_BEGIN, "BEGIN IMMEDIATE");
    /* No node takes an ino the kernel may hold for another (db_ino_burnt);
     * then the saved marks still in memory (saved.c), so none lands after
     * a later change of its row. */
    if (rc)
        return rc;
    if ((rc = db_ino_burnt(c)) != 0 || (rc = db_apply_saved(c)) != 0)
        db_rollback(c);
    return rc;
}

int db_commit(struct cache *c)
{
    if (c->lazy) {
        int rc = run_cached(c, DB_ST_RELEASE, "RELEASE lazy_part");
        if (rc)
            return rc; /* the caller's db_rollback undoes its part */
        c->lazy = false; /* a failed COMMIT below: the caller rolls all back */
    }
    int rc = run_cached(c, DB_ST_COMMIT, "COMMIT");
    if (!rc) {
        db_room_back(c);
        db_journal_ended(c, true);
        db_inos_ended(c, true);
        db_marks_kept(c);
    }
    return rc;
}

void db_rollback(struct cache *c)
{
    /* The marks this part wrote wait again (those of earlier lazy parts
     * too when SQLite or a failed COMMIT rolls the whole transaction back:
     * db_abandon). */
    db_marks_undone(c, 0);
    db_inos_ended(c, false);
    if (c->lazy) {
        /* This part only: the lazy work before it stays (committed soon,
         * db_unlock seeing the changes count move). */
        sqlite3_exec(c->db, "ROLLBACK TO lazy_part; RELEASE lazy_part", NULL, NULL, NULL);
        if (!sqlite3_get_autocommit(c->db))
            return;
        /* SQLite rolled the whole transaction back itself (it may, after
         * SQLITE_FULL, IOERR or NOMEM): the lazy work is gone, and the
         * closes it carried are left to the journal. */
    }
    db_abandon(c);
}

void db_abandon(struct cache *c)
{
    db_marks_lost(c);
    c->lazy = false;
    if (!sqlite3_get_autocommit(c->db))
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    db_journal_ended(c, false);
    db_inos_ended(c, false);
}

void db_lazy_lost(struct cache *c)
{
    log_warn("the cache's recent changes were rolled back by the database; the files closed "
             "since its last commit are written again from the journal");
    db_marks_undone(c, 0);
    db_abandon(c);
}

int db_settle(struct cache *c)
{
    if (!c->lazy)
        return 0;
    c->lazy = false;
    int rc = run_cached(c, DB_ST_COMMIT, "COMMIT");
    if (!rc)
        db_room_back(c);
    if (rc && !sqlite3_get_autocommit(c->db))
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    db_journal_ended(c, rc == 0);
    db_inos_ended(c, rc == 0);
    /* Marks written into the lazy transaction outside any part (the
     * sync's read of what it may push writes them first: pending.c). */
    if (rc)
        db_marks_lost(c);
    else
        db_marks_kept(c);
    return rc;
}

int db_collect(struct cache *c, sqlite3_stmt *st, size_t elem, void **out, size_t *n,
               int (*fill)(sqlite3_stmt *st, void *item), const char *what)
{
    size_t cap = 0;
    int rc;
    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            void *v = realloc(*out, ncap * elem);
            if (!v) {
                rc = -ENOMEM;
                break;
            }
            *out = v;
            cap = ncap;
        }
        void *item = (char *)*out + *n * elem;
        memset(item, 0, elem);
        (*n)++; /* counted first, so the caller's free sees a partial item */
        if ((rc = fill(st, item)))
            break;
    }
    if (rc == SQLITE_DONE)
        rc = 0;
    else if (rc > 0)
        rc = db_fail(c, rc, what);
    db_finish(c, st);
    return rc;
}

int64_t db_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The cache directory and its files are private (private.h): the
 * directory 0700 and ours (group/other bits on it are taken away, with a
 * warning; another owner is refused), cache.db created 0600 before SQLite
 * opens it, so that the -wal and -shm files SQLite makes take its mode,
 * and existing files of an older run made private too. */
static int make_private(const char *dir, const char *file)
{
    char why[1024];
    int rc = priv_dir_p(dir, PRIV_FIX, why, sizeof(why));
    if (rc == 2)
        log_warn("the cache directory was open to other accounts; made it private", "dir", dir,
                 "detail", why);
    if (rc < 0) {
        log_error("cannot use the cache directory", "dir", dir, "error", why);
        return rc;
    }
    int fd = priv_open(file, O_RDWR | O_CREAT, why, sizeof(why));
    if (fd < 0) {
        log_error("cannot use the cache database", "file", file, "error", why);
        return fd;
    }
    close(fd);
    static const char *const sides[] = {"-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof(sides) / sizeof(sides[0]); i++) {
        char side[4200];
        snprintf(side, sizeof(side), "%s%s", file, sides[i]);
        if ((rc = priv_fix_file(side, why, sizeof(why))) < 0) {
            log_error("cannot use the cache database", "file", side, "error", why);
            return rc;
        }
    }
    return 0;
}

/* ALTER TABLE table ADD COLUMN column decl, unless it is there already. */
static int add_column(struct cache *c, const char *table, const char *column, const char *decl)
{
    char *sql = sqlite3_mprintf("SELECT 1 FROM pragma_table_info(%Q) WHERE name = %Q", table,
                                column);
    if (!sql)
        return -ENOMEM;
    sqlite3_stmt *st;
    int rc = db_prepare(c, sql, &st);
    sqlite3_free(sql);
    if (rc)
        return rc;
    bool have = sqlite3_step(st) == SQLITE_ROW;
    db_finish(c, st);
    if (have)
        return 0;
    sql = sqlite3_mprintf("ALTER TABLE \"%w\" ADD COLUMN \"%w\" %s", table, column, decl);
    if (!sql)
        return -ENOMEM;
    rc = db_exec(c, sql);
    sqlite3_free(sql);
    return rc;
}

/* What a full disk, a quota or a read-only file system answers a write. */
static bool no_room(int rc)
{
    return rc == -ENOSPC || rc == -EDQUOT || rc == -EROFS;
}

/* SQLite's process-wide settings, made once before its first use (the
 * cache's first connection; a process that used SQLite before keeps its
 * defaults).  No memory statistics: with them every allocation and free
 * of SQLite's takes a global mutex, and nothing here reads them.
 * Measured (December 2026, two mounts side by side, 2,000 creates and
 * overwrites a round, rounds alternated): creates 8-12 % and overwrites
 * 7-8 % faster. */
static void sqlite_setup(void)
{
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static int open_cache(const char *dir, bool reader, struct cache **out)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sqlite_setup);
    *out = NULL;
    int rc = 0;
    struct cache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    c->jfd = -1;
    c->dir = strdup(dir);
    char *file = NULL;
    if (!c->dir || asprintf(&file, "%s/cache.db", dir) < 0) {
        file = NULL;
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = make_private(dir, file)))
        goto fail;
    int src = sqlite3_open_v2(file, &c->db,
                              SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                              db_vfs());
    if (src != SQLITE_OK) {
        log_error("cannot open the cache database", "file", file,
                  "error", c->db ? sqlite3_errmsg(c->db) : "out of memory");
        rc = db_errno(src);
        goto fail;
    }
    sqlite3_busy_timeout(c->db, 10000);
    /* A new database gives freed pages back to the file system on demand
     * (incremental vacuum, cache/gc.c); set before its first table.  Set
     * only where it differs: setting it writes the header, which fails on
     * a full disk, and a command that only reads (conflicts, log) must
     * still open the cache there. */
    int64_t vacuum = -1;
    rc = db_pragma_int(c, "PRAGMA auto_vacuum", &vacuum);
    if (!rc && vacuum != 2)
        rc = db_exec(c, "PRAGMA auto_vacuum=INCREMENTAL;");
    /* The WAL is checkpointed every 1,000 pages (SQLite's default: more
     * often costs a sync each time), by a thread of its own (ckpt.c; by
     * the commit past 4,000), and written over from its beginning when it
     * starts again: its limit is above the bound past which a commit
     * checkpoints it (DB_WAL_BOUND_PAGES), so SQLite does not cut the
     * file there, and the next commits write into blocks it already has
     * instead of allocating them again (an editor's save: its commit's
     * pwrite about 75 us -> 30 us).  The collector truncates it
     * (cache/gc.c). */
    _Static_assert(DB_WAL_LIMIT_BYTES > DB_WAL_BOUND_PAGES * (4096 + 24) * 3 / 2,
                   "the log's file limit must stay above its bound, frames of 4 KiB pages");
    if (!rc)
        rc = db_exec(c, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                        "PRAGMA foreign_keys=OFF;"
                        "PRAGMA journal_size_limit=" DB_STR(DB_WAL_LIMIT_BYTES) ";"
                        "PRAGMA temp_store=MEMORY;");
    if (!rc)
        rc = db_exec(c, schema);
    for (size_t i = 0; !rc && i < sizeof(added_columns) / sizeof(added_columns[0]); i++)
        rc = add_column(c, added_columns[i].table, added_columns[i].column,
                        added_columns[i].decl);
    if (!rc)
        rc = db_exec(c, schema_gc);
    /* Files closed before a crash whose commit had not come yet. */
    if (!rc)
        rc = db_journal_open(c);
    /* What an older build left behind goes now (a cache made before blobs
     * were freed may hold hundreds of MB nothing refers to). */
    if (!rc)
        rc = db_reclaim(c);
    /* A command that only reads records reads them without that work when
     * nothing can be written: its journals stay for the next open. */
    if (rc && reader && no_room(rc)) {
        log_warn("the cache cannot be written, so what a stopped daemon left in its journal is "
                 "applied at a later open; reading it as it is", "dir", dir, "error",
                 strerror(-rc));
        rc = 0;
    }
    if (rc)
        goto fail;
    int krc = db_ckpt_start(c, file);
    if (krc)
        log_warn("cannot start the cache's background checkpoints; commits checkpoint the "
                 "write-ahead log themselves", "error", strerror(-krc));
    free(file);
    *out = c;
    return 0;
fail:
    free(file);
    cache_close(&c);
    return rc ? rc : -EIO;
}

int cache_open(const char *dir, struct cache **out)
{
    return open_cache(dir, false, out);
}

int cache_open_reader(const char *dir, struct cache **out)
{
    return open_cache(dir, true, out);
}

void cache_close(struct cache **cp)
{
    struct cache *c = cp ? *cp : NULL;
    if (!c)
        return;
    if (c->db) {
        db_saver_stop(c);
        db_lock(c);
        (void)db_settle(c);
        (void)db_journal_retry(c); /* if stuck; else the next open applies them */
        db_journal_close(c);
        db_errors_flush(c);
        pthread_mutex_unlock(&c->lock);
        db_ckpt_stop(c); /* its connection closes first: the last one removes the WAL */
    }
    for (int i = 0; i < DB_ST_N; i++)
        sqlite3_finalize(c->cached[i]);
    for (int i = 0; i < DB_KEPT; i++)
        sqlite3_finalize(c->kept[i].st);
    if (c->db)
        sqlite3_close_v2(c->db);
    pthread_mutex_destroy(&c->lock);
    free(c->saved);
    free(c->replayed);
    free(c->dir);
    free(c);
    *cp = NULL;
}
