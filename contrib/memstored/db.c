/* db.c - memstored's storage: one SQLite file, one connection, one mutex.
 *
 * Owns: the schema, the connection, the translation of SQLite result codes
 * to errno (db_errno, the only such table), id generation and the clock.
 *
 * Locking: struct db.lock guards the connection.  db_begin() takes it and
 * opens a transaction (BEGIN IMMEDIATE for writes), db_end() commits or rolls
 * back and releases it, so each request's work is one transaction and no
 * reader ever observes half a change.  Callers never hold the lock across
 * anything slow (no sleeps, no network).  The clock has its own small lock.
 *
 * Invariants: every timestamp db_now() returns is strictly greater than the
 * previous one in this process, so created_at orders stores and versions
 * exactly as they were written.  Paths are TEXT compared with the BINARY
 * collation, i.e. memcmp order, the order lists promise. */
#include "msd.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "private.h"

struct db {
    sqlite3 *h;             /* guarded by lock */
    pthread_mutex_t lock;   /* held from db_begin to db_end */
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS stores("
    " id TEXT PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',"
    " metadata TEXT NOT NULL DEFAULT '{}', archived_at TEXT,"
    " created_at TEXT NOT NULL, updated_at TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS stores_created ON stores(created_at, id);"
    "CREATE TABLE IF NOT EXISTS memories("
    " id TEXT PRIMARY KEY, store_id TEXT NOT NULL, path TEXT NOT NULL,"
    " content TEXT NOT NULL, sha TEXT NOT NULL, size INTEGER NOT NULL,"
    " version_id TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,"
    " UNIQUE(store_id, path));"
    "CREATE TABLE IF NOT EXISTS versions("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,"
    " store_id TEXT NOT NULL, memory_id TEXT NOT NULL, operation TEXT NOT NULL,"
    " path TEXT, content TEXT, sha TEXT, size INTEGER, created_at TEXT NOT NULL,"
    " actor_type TEXT, actor_id TEXT,"
    " redacted_at TEXT, redacted_type TEXT, redacted_id TEXT);"
    "CREATE INDEX IF NOT EXISTS versions_store ON versions(store_id, seq);"
    "CREATE INDEX IF NOT EXISTS versions_memory ON versions(memory_id, seq);"
    "CREATE INDEX IF NOT EXISTS versions_created ON versions(store_id, created_at, id);";

int db_errno(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return 0;
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    case SQLITE_CONSTRAINT:
        return -EEXIST;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return -EACCES;
    case SQLITE_CANTOPEN:
        return -ENOENT;
    case SQLITE_TOOBIG:
        return -EFBIG;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return -EUCLEAN;
    default:
        return -EIO;
    }
}

static int exec_sql(sqlite3 *h, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(h, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        log_error("sqlite statement failed", "error", err ? err : sqlite3_errstr(rc));
        sqlite3_free(err);
        return db_errno(rc);
    }
    return 0;
}

int db_open(const char *file, struct db **out)
{
    struct db *db = calloc(1, sizeof(*db));
    if (!db)
        return -ENOMEM;
    /* The stores' content is nobody else's business: the file is created
     * 0600 (SQLite's -wal and -shm then take its mode), never through a
     * symbolic link, and an existing one of ours is made private. */
    if (strcmp(file, ":memory:") != 0 && strncmp(file, "file:", 5) != 0) {
        char why[1024];
        int fd = priv_open(file, O_RDWR | O_CREAT, why, sizeof(why));
        if (fd < 0) {
            log_error("cannot open the database", "file", file, "error", why);
            free(db);
            return fd;
        }
        close(fd);
        static const char *const sides[] = {"-wal", "-shm", "-journal"};
        for (size_t i = 0; i < 3; i++) {
            char side[4200];
            snprintf(side, sizeof(side), "%s%s", file, sides[i]);
            int rc = priv_fix_file(side, why, sizeof(why));
            if (rc < 0) {
                log_error("cannot open the database", "file", side, "error", why);
                free(db);
                return rc;
            }
        }
    }
    int rc = sqlite3_open_v2(file, &db->h,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             NULL);
    if (rc != SQLITE_OK) {
        log_error("cannot open the database", "file", file,
                  "error", db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
        rc = db_errno(rc);
        goto fail;
    }
    sqlite3_busy_timeout(db->h, 5000);
    if ((rc = exec_sql(db->h, "PRAGMA journal_mode=WAL;")) ||
        (rc = exec_sql(db->h, "PRAGMA synchronous=NORMAL;")) ||
        (rc = exec_sql(db->h, schema)))
        goto fail;
    pthread_mutex_init(&db->lock, NULL);
    *out = db;
    return 0;
fail:
    sqlite3_close(db->h);
    free(db);
    return rc ? rc : -EIO;
}

void db_close(struct db **dbp)
{
    if (!dbp || !*dbp)
        return;
    struct db *db = *dbp;
    sqlite3_close(db->h);
    pthread_mutex_destroy(&db->lock);
    free(db);
    *dbp = NULL;
}

int db_begin(struct db *db, bool write)
{
    pthread_mutex_lock(&db->lock);
    int rc = exec_sql(db->h, write ? "BEGIN IMMEDIATE" : "BEGIN");
    if (rc)
        pthread_mutex_unlock(&db->lock);
    return rc;
}

int db_end(struct db *db, bool commit)
{
    int rc = 0;
    if (commit) {
        rc = exec_sql(db->h, "COMMIT");
        if (rc)
            exec_sql(db->h, "ROLLBACK");
    } else if (!sqlite3_get_autocommit(db->h)) {
        exec_sql(db->h, "ROLLBACK");
    }
    pthread_mutex_unlock(&db->lock);
    return rc;
}

sqlite3 *db_handle(struct db *db)
{
    return db->h;
}

int db_prepare(struct db *db, const char *sql, sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v2(db->h, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        log_error("sqlite prepare failed", "error", sqlite3_errmsg(db->h));
        *st = NULL;
        return db_errno(rc);
    }
    return 0;
}

int db_exec_stmt(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        log_error("sqlite step failed", "error", sqlite3_errmsg(sqlite3_db_handle(st)));
        return db_errno(rc);
    }
    return 0;
}

char *db_col_strdup(sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return NULL;
    const unsigned char *t = sqlite3_column_text(st, i);
    int n = sqlite3_column_bytes(st, i);
    char *out = malloc((size_t)n + 1);
    if (!out)
        return NULL;
    memcpy(out, t ? (const char *)t : "", (size_t)n);
    out[n] = '\0';
    return out;
}

static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t last_ms;   /* guarded by clock_lock */
static int64_t offset_ms; /* guarded by clock_lock: POST /admin/clock */
static bool frozen;       /* guarded by clock_lock */
static int64_t frozen_ms; /* guarded by clock_lock */

void db_clock_set(int64_t offset, bool freeze)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&clock_lock);
    offset_ms = offset;
    frozen = freeze;
    frozen_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + offset;
    pthread_mutex_unlock(&clock_lock);
}

void db_now(char out[MSD_TS_LEN])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    pthread_mutex_lock(&clock_lock);
    if (frozen) {
        ms = frozen_ms; /* every write shares one millisecond */
    } else if (offset_ms) {
        ms += offset_ms; /* stamped earlier (or later) than the real order */
    } else {
        if (ms <= last_ms)
            ms = last_ms + 1;
        last_ms = ms;
    }
    pthread_mutex_unlock(&clock_lock);

    ts_format(ms, out);
}

void ts_format(int64_t ms, char out[MSD_TS_LEN])
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, MSD_TS_LEN, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, MSD_TS_LEN - n, ".%03uZ", (unsigned)(ms % 1000));
}

void db_new_id(const char *prefix, char out[MSD_ID_MAX])
{
    static const char alphabet[] =
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    size_t p = strlen(prefix);
    if (p > MSD_ID_MAX - 25)
        p = MSD_ID_MAX - 25;
    memcpy(out, prefix, p);
    size_t o = 0;
    while (o < 24) {
        unsigned char buf[48];
        ssize_t got = getrandom(buf, sizeof(buf), 0);
        if (got <= 0)
            continue; /* EINTR; getrandom never fails otherwise once seeded */
        for (ssize_t i = 0; i < got && o < 24; i++) {
            if (buf[i] >= 248) /* 248 = 4 * 62: keeps the draw uniform */
                continue;
            out[p + o++] = alphabet[buf[i] % 62];
        }
    }
    out[p + o] = '\0';
}
