/* test_cache_wal.c - the cache's VFS (cache/walbuf.c): a commit's WAL
 * frames reach the file system in one write (a few for a large one), and
 * before the commit is published: another connection, with SQLite's own
 * VFS, reads every commit the moment the call that made it returns. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "cache.h"
#include "db_internal.h"

static char dir[64];
static struct cache *C;
static uint64_t root;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mfs-cw-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(cache_open(dir, &C), 0);
    cr_assert_eq(cache_store_attach(C, "memstore_w", false, &root), 0);
}

static void teardown(void)
{
    cache_close(&C);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(cache_wal, .init = setup, .fini = teardown, .timeout = 30);

/* The size and content hash of name, as another connection reads them;
 * -1 when it has no such file. */
static long long size_on_disk(const char *name, char sha[65])
{
    char db[128];
    snprintf(db, sizeof(db), "%s/cache.db", dir);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 2000);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h,
                                    "SELECT n.size, n.sha, length(b.data) FROM nodes n"
                                    " JOIN blobs b ON b.sha = n.sha WHERE n.name = ?"
                                    " AND n.unlinked = 0", -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    long long v = -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        v = sqlite3_column_int64(st, 0);
        snprintf(sha, 65, "%s", (const char *)sqlite3_column_text(st, 1));
        cr_expect_eq(sqlite3_column_int64(st, 2), v, "%s: the blob is not the file's size", name);
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

Test(cache_wal, a_commit_is_one_write_and_is_read_at_once)
{
    uint64_t w0, f0, w1, f1;
    cache_wal_io(&w0, &f0);
    const int n = 40;
    for (int i = 0; i < n; i++) {
        char name[32], body[4096];
        snprintf(name, sizeof(name), "n%d.md", i);
        memset(body, 'a' + i % 26, sizeof(body));
        struct cnode f;
        cr_assert_eq(cache_create_open(C, root, name, 1, &f), 0);
        cr_assert_eq(cache_set_content_if(C, f.ino, body, sizeof(body), 2, f.sha, false, NULL), 0);
        char want[65], got[65] = "";
        sha256_hex(body, sizeof(body), want);
        cr_assert_eq(size_on_disk(name, got), (long long)sizeof(body),
                     "%s: another connection does not read the commit", name);
        cr_assert_str_eq(got, want);
        cnode_clear(&f);
    }
    cache_wal_io(&w1, &f1);
    /* Each create and save: one commit (the create rides on the save's),
     * a dozen pages, two writes a page from SQLite. */
    cr_expect_geq(w1 - w0, (uint64_t)n * 8, "%llu WAL writes for %d commits",
                  (unsigned long long)(w1 - w0), n);
    cr_expect_leq(f1 - f0, (uint64_t)n + 4, "%llu writes reached the file system for %d commits",
                  (unsigned long long)(f1 - f0), n);
}

Test(cache_wal, a_large_commit_goes_out_whole)
{
    static char body[100 * 1024];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (char)('a' + (i * 7 + i / 97) % 26);
    struct cnode f;
    cr_assert_eq(cache_create_open(C, root, "big.md", 1, &f), 0);
    cr_assert_eq(cache_set_content_if(C, f.ino, body, sizeof(body), 2, f.sha, false, NULL), 0);
    char want[65], got[65] = "";
    sha256_hex(body, sizeof(body), want);
    cr_assert_eq(size_on_disk("big.md", got), (long long)sizeof(body));
    cr_assert_str_eq(got, want);
    cnode_clear(&f);
    /* And back through the cache after a reopen (read from the WAL or the
     * checkpointed database). */
    cache_close(&C);
    cr_assert_eq(cache_open(dir, &C), 0);
    char *buf = NULL;
    size_t len = 0;
    cr_assert_eq(cache_blob_get(C, want, &buf, &len), 0);
    cr_assert_eq(len, sizeof(body));
    cr_expect(memcmp(buf, body, len) == 0);
    free(buf);
}

/* Copies dir/name to to/name as the disk holds it now: what a kill -9 at
 * this moment would leave. */
static void copy_file(const char *name, const char *to)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cp '%s/%s' '%s/%s'", dir, name, to, name);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* A transaction larger than SQLite's page cache writes pages to the log
 * before its commit; a page it changes again is written over in place,
 * and after the commit frame SQLite rewrites the frames' checksums, the
 * commit frame's header last.  That header must be on disk when COMMIT
 * returns.  Before the fix it waited in the buffer for the next write:
 * a crash right after the commit lost the whole transaction (recovery
 * stops at the stale checksum), here every row of it. */
Test(cache_wal, a_commit_that_rewrote_its_own_frames_is_on_disk_when_it_returns)
{
    char db[128];
    snprintf(db, sizeof(db), "%s/big.db", dir);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, db_vfs()),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                                 "PRAGMA wal_autocheckpoint=0; PRAGMA cache_size=10;"
                                 "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_exec(h, "BEGIN;"
                                 "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
                                 " WHERE i < 300) INSERT INTO t SELECT i, randomblob(1500) FROM n;"
                                 "UPDATE t SET v = zeroblob(1400) WHERE k <= 30;"
                                 "COMMIT;",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    /* The disk now, with the connection still open and idle. */
    char to[80];
    snprintf(to, sizeof(to), "%s/crash", dir);
    cr_assert_eq(mkdir(to, 0700), 0);
    copy_file("big.db", to);
    copy_file("big.db-wal", to);
    char copy[128];
    snprintf(copy, sizeof(copy), "%s/big.db", to);
    sqlite3 *r = NULL;
    cr_assert_eq(sqlite3_open_v2(copy, &r, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(r, "SELECT count(*), sum(length(v)) FROM t", -1, &st, NULL);
    long long n = -1, bytes = -1;
    if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        n = sqlite3_column_int64(st, 0);
        bytes = sqlite3_column_int64(st, 1);
    }
    cr_expect_eq(rc, SQLITE_OK, "the committed table is gone after recovery: %s",
                 sqlite3_errmsg(r));
    cr_expect_eq(n, 300, "rows after recovery: %lld", n);
    cr_expect_eq(bytes, 30LL * 1400 + 270LL * 1500, "bytes after recovery: %lld", bytes);
    sqlite3_finalize(st);
    sqlite3_close(r);
    sqlite3_close(h);
}

/* Runs sql on h and fails the test with SQLite's message. */
static void exec_ok(sqlite3 *h, const char *sql)
{
    cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(h));
}

/* A transaction larger than the page cache writes frames to the log before
 * its commit; rolled back, those frames are nobody's, and another
 * connection (another daemon sharing the cache directory) commits its own
 * at the same offsets.  Before the fix the rolled-back frames stayed in the
 * buffer and went out at the first connection's next use of the log, over
 * the other's committed frames: their rows read wrong, and a checkpoint
 * would have copied the wrong pages into the database. */
Test(cache_wal, frames_of_a_rolled_back_transaction_never_reach_the_log)
{
    char db[128];
    snprintf(db, sizeof(db), "%s/shared.db", dir);
    sqlite3 *a = NULL, *b = NULL, *r = NULL;
    cr_assert_eq(sqlite3_open_v2(db, &a, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, db_vfs()),
                 SQLITE_OK);
    exec_ok(a, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; PRAGMA cache_size=10;"
               "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);"
               "PRAGMA wal_checkpoint(TRUNCATE);");
    /* Spills, then is given up (its undo reads nothing from the log: the
     * pages it had are all in the database file). */
    exec_ok(a, "BEGIN;"
               "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)"
               " INSERT INTO t SELECT i, randomblob(1500) FROM n;"
               "ROLLBACK;");
    /* The other connection, with SQLite's own VFS, commits over the same
     * stretch of the log. */
    cr_assert_eq(sqlite3_open_v2(db, &b, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    exec_ok(b, "PRAGMA wal_autocheckpoint=0;"
               "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)"
               " INSERT INTO t SELECT i, zeroblob(1000 + i) FROM n;");
    /* The first connection reads the log again. */
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(a, "SELECT count(*) FROM t", -1, &st, NULL), SQLITE_OK);
    (void)sqlite3_step(st);
    sqlite3_finalize(st);
    /* A third connection reads what the disk holds. */
    cr_assert_eq(sqlite3_open_v2(db, &r, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    long long n = -1, bytes = -1;
    int rc = sqlite3_prepare_v2(r, "SELECT count(*), sum(length(v)) FROM t"
                                   " WHERE v = zeroblob(1000 + k)", -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        n = sqlite3_column_int64(st, 0);
        bytes = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    cr_expect(rc == SQLITE_ROW, "the other connection's commit cannot be read: %s",
              sqlite3_errmsg(r));
    cr_expect_eq(n, 200, "rows of the other connection's commit read back: %lld", n);
    cr_expect_eq(bytes, 200LL * 1000 + 200LL * 201 / 2, "bytes: %lld", bytes);
    char *ok = NULL;
    if (sqlite3_prepare_v2(r, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        ok = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    cr_expect(ok && strcmp(ok, "ok") == 0, "integrity_check: %s", ok ? ok : sqlite3_errmsg(r));
    free(ok);
    sqlite3_close(r);
    sqlite3_close(b);
    sqlite3_close(a);
}
