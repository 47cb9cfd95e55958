/* test_cache_lazy.c - the lazy transaction (cache/saved.c), without a
 * mount: an open's new file and a first write's dirty mark are not
 * committed on their own but ride on the next commit; the saver commits
 * them within a few milliseconds when nothing else does; any other write
 * commits them at once; a failed part undoes only itself; and what a
 * flush saved is on disk when the call returns, lazy work or not.  Also
 * the kept statements (db_prepare): a statement built in a buffer is
 * never mistaken for another. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cache.h"

static char dir[64];
static struct cache *C;
static uint64_t root;
#define ST "memstore_l"

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mfs-cl-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(cache_open(dir, &C), 0);
    cr_assert_eq(cache_store_attach(C, ST, false, &root), 0);
}

static void teardown(void)
{
    cache_close(&C);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(cache_lazy, .init = setup, .fini = teardown, .timeout = 30);

/* What another connection (a test, sqlite3, a later daemon) reads: the
 * number of live nodes named name, and the first one's column col. */
static long long on_disk(const char *name, const char *col, int *count)
{
    char db[128], sql[200];
    snprintf(db, sizeof(db), "%s/cache.db", dir);
    snprintf(sql, sizeof(sql), "SELECT count(*), %s FROM nodes WHERE name = ? AND unlinked = 0",
             col);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 2000);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    *count = sqlite3_column_int(st, 0);
    long long v = sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

static int count_on_disk(const char *name)
{
    int n = 0;
    (void)on_disk(name, "1", &n);
    return n;
}

Test(cache_lazy, a_new_file_reaches_the_disk_on_its_own)
{
    struct cnode f;
    cr_assert_eq(cache_create_open(C, root, "alone.md", 1, &f), 0);
    cnode_clear(&f);
    /* The daemon's own connection sees it at once. */
    struct cnode n;
    cr_assert_eq(cache_lookup(C, root, "alone.md", &n), 0);
    cnode_clear(&n);
    int seen = 0;
    for (int i = 0; i < 200 && (seen = count_on_disk("alone.md")) == 0; i++)
        usleep(10 * 1000);
    cr_expect_eq(seen, 1, "the lazy create was not committed within 2 s");
}

Test(cache_lazy, a_flush_commits_the_lazy_work_before_it_returns)
{
    for (int i = 0; i < 20; i++) {
        char name[32];
        snprintf(name, sizeof(name), "f%d.md", i);
        struct cnode f;
        cr_assert_eq(cache_create_open(C, root, name, 1, &f), 0);
        cr_assert_eq(cache_set_content_if(C, f.ino, "body", 4, 2, f.sha, false, NULL), 0);
        cnode_clear(&f);
        int n = 0;
        long long size = on_disk(name, "size", &n);
        cr_assert_eq(n, 1, "%s: saved content not on disk when the flush returned", name);
        cr_assert_eq(size, 4);
    }
}

Test(cache_lazy, any_other_write_commits_it_at_once)
{
    struct cnode f, d;
    cr_assert_eq(cache_create_open(C, root, "a.md", 1, &f), 0);
    /* A write that is a transaction of its own. */
    cr_assert_eq(cache_create(C, root, "d", true, 2, &d), 0);
    cr_expect_eq(count_on_disk("a.md"), 1, "a commit left the lazy create behind");
    cr_expect_eq(count_on_disk("d"), 1);
    cnode_clear(&d);
    /* A write of one statement outside db_begin: db_unlock commits. */
    struct cnode g;
    cr_assert_eq(cache_create_open(C, root, "b.md", 1, &g), 0);
    int64_t mtime = 123456789;
    cr_assert_eq(cache_set_times(C, f.ino, NULL, &mtime), 0);
    int n = 0;
    cr_expect_eq(on_disk("a.md", "mtime", &n), mtime, "a single-statement write was left lazy");
    cr_expect_eq(count_on_disk("b.md"), 1);
    cnode_clear(&f);
    cnode_clear(&g);
}

Test(cache_lazy, a_failed_part_undoes_only_itself)
{
    struct cnode f, g;
    cr_assert_eq(cache_create_open(C, root, "keep.md", 1, &f), 0);
    cr_assert_eq(cache_mark_dirty(C, f.ino), 0);
    /* Fails inside the open lazy transaction: EEXIST. */
    cr_assert_eq(cache_create_open(C, root, "keep.md", 1, &g), -EEXIST);
    struct cnode n;
    cr_assert_eq(cache_lookup(C, root, "keep.md", &n), 0, "the failure took the earlier part");
    cnode_clear(&n);
    cr_assert_eq(cache_create_open(C, root, "next.md", 1, &g), 0);
    cr_assert_eq(cache_set_content_if(C, g.ino, "x", 1, 2, g.sha, false, NULL), 0);
    cr_expect_eq(count_on_disk("keep.md"), 1);
    cr_expect_eq(count_on_disk("next.md"), 1);
    cnode_clear(&f);
    cnode_clear(&g);
}

Test(cache_lazy, closing_the_cache_commits_it)
{
    struct cnode f;
    cr_assert_eq(cache_create_open(C, root, "late.md", 1, &f), 0);
    cnode_clear(&f);
    cache_close(&C);
    cr_expect_eq(count_on_disk("late.md"), 1);
    cr_assert_eq(cache_open(dir, &C), 0);
}

/* A process killed with lazy work open loses that work only: what its
 * flushes saved is there after a restart, and the cache opens cleanly. */
Test(cache_lazy, a_crash_loses_no_flushed_content)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct cache *k = NULL;
        uint64_t r = 0;
        char sub[128];
        snprintf(sub, sizeof(sub), "%s/child", dir);
        if (cache_open(sub, &k) || cache_store_attach(k, ST, false, &r))
            _exit(2);
        struct cnode f, g;
        if (cache_create_open(k, r, "saved.md", 1, &f) ||
            cache_set_content_if(k, f.ino, "kept", 4, 2, f.sha, false, NULL) ||
            cache_create_open(k, r, "open.md", 1, &g))
            _exit(3);
        _exit(0); /* no cache_close: the lazy create of open.md is still open */
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed: %d", status);
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/child", dir);
    struct cache *k = NULL;
    uint64_t r = 0;
    cr_assert_eq(cache_open(sub, &k), 0);
    cr_assert_eq(cache_store_attach(k, ST, false, &r), 0);
    struct cnode n;
    cr_assert_eq(cache_lookup(k, r, "saved.md", &n), 0, "flushed content lost to a crash");
    char *buf = NULL;
    size_t len = 0;
    cr_assert_eq(cache_blob_get(k, n.sha, &buf, &len), 0);
    cr_expect_eq(len, 4);
    cr_expect(len == 4 && memcmp(buf, "kept", 4) == 0);
    free(buf);
    cnode_clear(&n);
    cache_close(&k);
}

/* Whether another connection can take the write lock at once (busy_timeout
 * 0): false while this cache holds a transaction open. */
static bool writer_free(void)
{
    char db[128];
    snprintf(db, sizeof(db), "%s/cache.db", dir);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    int rc = sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(h);
    return rc == SQLITE_OK;
}

/* A file rewritten again before a sync is dirty already: the open's and the
 * first write's dirty mark then change nothing, and open no transaction
 * (which would hold the write lock until the lazy commit). */
Test(cache_lazy, marking_a_dirty_file_again_opens_no_transaction)
{
    struct cnode f, d;
    cr_assert_eq(cache_create(C, root, "again.md", false, 1, &f), 0);
    cr_assert_eq(cache_set_content(C, f.ino, "one", 3, 2, NULL), 0);
    cr_assert_eq(cache_create(C, root, "dir", true, 3, &d), 0);
    cr_assert(writer_free(), "a committed write left a transaction open");
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(cache_mark_dirty(C, f.ino), 0);
        cr_expect(writer_free(), "marking a dirty file opened a transaction");
        cr_assert_eq(cache_mark_dirty(C, d.ino), 0);
        cr_expect(writer_free(), "marking a directory opened a transaction");
    }
    struct cnode n;
    cr_assert_eq(cache_lookup(C, root, "again.md", &n), 0);
    cr_expect_eq(n.state, CNODE_DIRTY);
    cnode_clear(&n);
    /* A node that is not there still says so. */
    cr_expect_eq(cache_mark_dirty(C, 999999), -ENOENT);
    cnode_clear(&f);
    cnode_clear(&d);
}
