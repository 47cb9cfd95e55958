/* test_cache_lazy.c - the lazy transaction (cache/saved.c), without a
 * mount: an open's new file and a first write's dirty mark are not
 * committed on their own but ride on the next commit; the saver commits
 * them within a few milliseconds when nothing else does; any other write
 * commits them at once; a failed part undoes only itself; and what a
 * flush saved is on disk when the call returns, lazy work or not.  Also
 * the kept statements (db_prepare): a statement built in a buffer is
 * never mistaken for another.  And SQLite keeps no memory statistics. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cache.h"
#include "failcommit.h" /* hold_saver: the state at the kill */

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
    /* The suite's cache goes first, with its threads (the saver, the
     * checkpointer): a fork while one of them holds a lock (SQLite's,
     * the allocator's) leaves the child waiting for it for good, as one
     * CI run under AddressSanitizer did. */
    cache_close(&C);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct cache *k = NULL;
        uint64_t r = 0;
        char sub[128];
        snprintf(sub, sizeof(sub), "%s/child", dir);
        if (cache_open(sub, &k) || cache_store_attach(k, ST, false, &r))
            _exit(2);
        /* The lazy create is still open at the kill, however slow the
         * run (the saver would commit it 5 ms on). */
        hold_saver(k, true);
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
    /* The lazy work open at the kill, and only it, is lost. */
    struct cnode o = {0};
    cr_expect_eq(cache_lookup(k, r, "open.md", &o), -ENOENT, "the lazy create was committed: "
                 "the crash did not find it open");
    cnode_clear(&o);
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

/* cache_create_open_then: the caller is told (its FUSE answer sent) with
 * the new node in hand before the row is written; that node is the one
 * the cache reads back afterwards, field for field. */
struct told_node {
    struct cnode *out;
    struct cnode copy;
    int calls;
};

static void copy_told(void *arg)
{
    struct told_node *t = arg;
    t->calls++;
    t->copy = *t->out;
    t->copy.name = strdup(t->out->name);
    t->copy.path = strdup(t->out->path);
    t->copy.base_path = strdup(t->out->base_path);
}

Test(cache_lazy, a_new_file_told_before_its_row_is_the_file_read_back)
{
    struct cnode d, before, n;
    cr_assert_eq(cache_create(C, root, "sub", true, 1, &d), 0);
    cr_assert_eq(cache_create(C, root, "before.md", false, 1, &before), 0);
    struct told_node t = {&n, {0}, 0};
    struct cache_then then = {copy_told, &t};
    cr_assert_eq(cache_create_open_then(C, d.ino, "told.md", 1234567, &n, &then), 0);
    cr_assert_eq(t.calls, 1, "told %d times", t.calls);
    struct cnode r;
    cr_assert_eq(cache_getattr(C, t.copy.ino, &r), 0, "the ino told is not the file's");
    struct cnode *a = &t.copy;
    cr_expect_gt(a->ino, before.ino);
    cr_expect_eq(a->ino, r.ino);
    cr_expect_eq(a->parent, r.parent);
    cr_expect_str_eq(a->name, r.name);
    cr_expect_str_eq(a->path, r.path);
    cr_expect_str_eq(r.path, "/sub/told.md");
    cr_expect_eq(a->is_dir, r.is_dir);
    cr_expect_eq(a->size, r.size);
    cr_expect_eq(a->mtime_ns, r.mtime_ns);
    cr_expect_eq(a->ctime_ns, r.ctime_ns);
    cr_expect_eq(a->atime_ns, r.atime_ns);
    cr_expect_eq(a->subdirs, r.subdirs);
    cr_expect_str_eq(a->sha, r.sha);
    cr_expect_str_eq(a->memory_id, r.memory_id);
    cr_expect_str_eq(a->base_sha, r.base_sha);
    cr_expect_str_eq(a->base_path, r.base_path);
    cr_expect_eq(a->state, r.state);
    cr_expect_eq(a->has_content, r.has_content);
    cr_expect_eq(a->unlinked, r.unlinked);
    cr_expect_str_eq(a->refused_sha, r.refused_sha);
    cr_expect_eq(a->unsaved, r.unsaved);
    cr_expect_eq(a->used_ns, r.used_ns);
    cr_expect_eq(a->evicted, r.evicted);
    cr_expect_eq(n.ino, r.ino, "*out is not the node told");
    /* The sequence moved past it: the next node gets another ino. */
    struct cnode next;
    cr_assert_eq(cache_create(C, root, "next.md", false, 1, &next), 0);
    cr_expect_gt(next.ino, r.ino);
    /* A check that fails tells nobody. */
    t.calls = 0;
    struct cnode x;
    cr_expect_eq(cache_create_open_then(C, d.ino, "told.md", 1, &x, &then), -EEXIST);
    cr_expect_eq(cache_create_open_then(C, before.ino, "in-a-file.md", 1, &x, &then), -ENOTDIR);
    cr_expect_eq(t.calls, 0, "told of a create that failed its checks");
    cnode_clear(&t.copy);
    cnode_clear(&r);
    cnode_clear(&n);
    cnode_clear(&next);
    cnode_clear(&d);
    cnode_clear(&before);
}

static int calls;
static uint64_t told_ino;

static void count_call(void *arg)
{
    calls++;
    if (arg)
        told_ino = ((const struct cnode *)arg)->ino;
}

/* A failure after the caller was told (here the row's INSERT, refused by
 * a trigger another connection adds) leaves no node and no *out. */
Test(cache_lazy, a_failure_after_telling_leaves_no_node)
{
    char db[128];
    snprintf(db, sizeof(db), "%s/cache.db", dir);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_busy_timeout(h, 2000);
    cr_assert_eq(sqlite3_exec(h, "CREATE TRIGGER insert_fails BEFORE INSERT ON nodes"
                                 " WHEN NEW.name = 'boom.md'"
                                 " BEGIN SELECT RAISE(ABORT, 'injected'); END", NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
    struct cnode n;
    calls = 0;
    told_ino = 0;
    struct cache_then then = {count_call, &n};
    cr_expect_neq(cache_create_open_then(C, root, "boom.md", 1, &n, &then), 0);
    cr_expect_eq(calls, 1);
    cr_expect_null(n.name, "*out left filled after a failure");
    struct cnode x;
    cr_expect_eq(cache_lookup(C, root, "boom.md", &x), -ENOENT);
    /* The kernel holds the ino it was told for boom.md: no later node
     * (an open's create, a directory, a file the sync brings) takes it. */
    uint64_t boom = told_ino;
    cr_assert_neq(boom, 0);
    cr_assert_eq(cache_create_open_then(C, root, "fine.md", 1, &n, &then), 0);
    cr_expect_eq(calls, 2);
    cr_expect_neq(n.ino, boom, "a new file took the ino told for one rolled back");
    cnode_clear(&n);
    struct cnode d;
    cr_assert_eq(cache_create(C, root, "dir", true, 1, &d), 0);
    cr_expect_neq(d.ino, boom, "a directory took the ino told for a file rolled back");
    cnode_clear(&d);
}

/* SQLite keeps no memory statistics in a process whose first connection
 * is the cache's (cache/db.c, sqlite_setup): each of its allocations and
 * frees would take a global mutex for them.  Failed before: 401,184
 * bytes counted as in use, a high mark of 403,552. */
Test(cache_lazy, sqlite_counts_no_memory)
{
    struct cnode f;
    cr_assert_eq(cache_create_open(C, root, "counted.md", 1, &f), 0);
    cnode_clear(&f);
    sqlite3_int64 cur = -1, high = -1;
    cr_assert_eq(sqlite3_status64(SQLITE_STATUS_MEMORY_USED, &cur, &high, 0), SQLITE_OK);
    cr_expect_eq(cur, 0, "SQLite counts %lld bytes in use", (long long)cur);
    cr_expect_eq(high, 0, "SQLite counts a high mark of %lld bytes", (long long)high);
}
