/* blobs.c - content bytes keyed by their SHA-256.
 *
 * A blob is immutable: its key is the hash of its bytes, so two nodes (or
 * two sessions reusing a cache directory) holding the same content share
 * one row, and content already here is never downloaded again.  A blob is
 * freed when nothing needs it any more (cache/gc.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"

int cache_blob_get(struct cache *c, const char *sha, char **buf, size_t *len)
{
    sqlite3_stmt *st;
    *buf = NULL;
    *len = 0;
    db_lock(c);
    int rc = db_prepare(c, "SELECT data FROM blobs WHERE sha = ?", &st);
    if (rc)
        goto out;
    sqlite3_bind_text(st, 1, sha, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const void *d = sqlite3_column_blob(st, 0);
        int n = sqlite3_column_bytes(st, 0);
        *buf = malloc((size_t)n + 1);
        if (!*buf) {
            rc = -ENOMEM;
        } else {
            if (n)
                memcpy(*buf, d, (size_t)n);
            (*buf)[n] = '\0';
            *len = (size_t)n;
            rc = 0;
        }
    } else if (rc == SQLITE_DONE) {
        rc = -ENOENT;
    } else {
        rc = db_fail(c, rc, "get blob");
    }
    db_finish(c, st);
out:
    db_unlock(c);
    return rc;
}

int db_blob_put(struct cache *c, const char *sha, const char *buf, size_t len, const char *what)
{
    sqlite3_stmt *st;
    int rc = db_cached(c, DB_ST_PUT_BLOB, DB_SQL_PUT_BLOB, &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 2, len ? buf : "", (int)len, SQLITE_STATIC);
    rc = sqlite3_step(st);
    db_done(st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, what);
}

int cache_blob_put(struct cache *c, const char *sha, const char *buf, size_t len)
{
    char own[SHA256_HEX_LEN + 1];
    if (!sha) {
        sha256_hex(buf, len, own);
        sha = own;
    }
    db_lock(c);
    int rc = db_blob_put(c, sha, buf, len, "put blob");
    return db_unlock_rc(c, rc);
}

struct blobs_args {
    const struct cache_blob_in *v;
    size_t n;
};

static int blobs_tx(struct cache *c, void *arg)
{
    struct blobs_args *a = arg;
    sqlite3_stmt *st = NULL;
    int rc = db_prepare(c, "INSERT OR IGNORE INTO blobs(sha, data) VALUES (?, ?)", &st);
    for (size_t i = 0; !rc && i < a->n; i++) {
        sqlite3_bind_text(st, 1, a->v[i].sha, -1, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, a->v[i].len ? a->v[i].buf : "", (int)a->v[i].len, SQLITE_STATIC);
        int r = sqlite3_step(st);
        rc = (r == SQLITE_DONE) ? 0 : db_fail(c, r, "put blobs");
        sqlite3_reset(st);
    }
    if (st)
        db_finish(c, st);
    return rc;
}

int cache_blobs_put(struct cache *c, const struct cache_blob_in *v, size_t n)
{
    if (n == 0)
        return 0;
    struct blobs_args a = {v, n};
    return db_in_tx(c, blobs_tx, &a);
}

bool cache_blob_has(struct cache *c, const char *sha)
{
    sqlite3_stmt *st;
    bool has = false;
    db_lock(c);
    if (db_prepare(c, "SELECT 1 FROM blobs WHERE sha = ?", &st) == 0) {
        sqlite3_bind_text(st, 1, sha, -1, SQLITE_TRANSIENT);
        has = sqlite3_step(st) == SQLITE_ROW;
        db_finish(c, st);
    }
    db_unlock(c);
    return has;
}
