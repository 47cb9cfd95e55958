/* test_cache_ckpt.c - checkpoints off the request path (cache/ckpt.c),
 * without a mount: commits that take the write-ahead log past 1,000 pages
 * are checkpointed by the cache's own thread, not by the commit; under a
 * steady stream of commits the log stays bounded; the collector's
 * TRUNCATE checkpoint is never made busy by a pass under way; when the
 * log starts again its file is written over, not cut (so the next commits
 * write into blocks the file already has); and a clean close leaves no
 * log behind (the thread's connection closes first). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "db_internal.h" /* db_ckpt_counts */

static char dir[64], sub[96], wal[128];
#define ST "memstore_k"
#define PAGE_BYTES (4096 + 24) /* a WAL frame */
#define BODY (60 * 1024)

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mfs-ck-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/cache", dir);
    snprintf(wal, sizeof(wal), "%s/cache.db-wal", sub);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(cache_ckpt, .init = setup, .fini = teardown, .timeout = 120);

static struct cache *open_store(uint64_t *root)
{
    struct cache *c = NULL;
    cr_assert_eq(cache_open(sub, &c), 0);
    cr_assert_eq(cache_store_attach(c, ST, false, root), 0);
    return c;
}

static long wal_pages(void)
{
    struct stat st;
    return stat(wal, &st) == 0 ? (long)(st.st_size / PAGE_BYTES) : 0;
}

static uint64_t new_file(struct cache *c, uint64_t root)
{
    struct cnode f;
    cr_assert_eq(cache_create(c, root, "big.md", false, 1, &f), 0);
    uint64_t ino = f.ino;
    cnode_clear(&f);
    return ino;
}

/* Commits a 60 KiB content of the file (each time another) n times, or
 * until the log's file holds until_pages; the largest it was. */
static long commits(struct cache *c, uint64_t ino, int n, long until_pages)
{
    static char body[BODY];
    static int seq;
    long max_pages = 0;
    for (int i = 0; i < n; i++) {
        memset(body, 'a' + seq % 26, sizeof(body));
        snprintf(body, 16, "%09d\n", seq++);
        cr_assert_eq(cache_set_content(c, ino, body, sizeof(body), 2 + seq, NULL), 0);
        long p = wal_pages();
        if (p > max_pages)
            max_pages = p;
        if (until_pages && p >= until_pages)
            break;
    }
    return max_pages;
}

Test(cache_ckpt, the_thread_checkpoints_and_the_commits_do_not)
{
    uint64_t root;
    struct cache *c = open_store(&root);
    /* Past 1,000 pages (a pass starts) and below 4,000 (the bound a commit
     * checkpoints at itself): the log is never longer than its file. */
    long got = commits(c, new_file(c, root), 10000, 1500);
    cr_assert_geq(got, 1500);
    unsigned long passes = 0, inline_passes = 0;
    for (int i = 0; i < 1000 && !passes; i++) {
        db_ckpt_counts(c, &passes, &inline_passes);
        if (!passes)
            usleep(10 * 1000);
    }
    cr_expect_geq(passes, 1, "no background checkpoint in 10 s");
    cr_expect_eq(inline_passes, 0, "a commit below 4,000 pages checkpointed itself");
    cache_close(&c);
}

/* One round of the collector, which ends by truncating the log. */
static int collect(struct cache *c)
{
    struct cache_policy p = {0};
    return cache_housekeep(c, &p, NULL, NULL, NULL);
}

Test(cache_ckpt, the_log_stays_bounded_under_a_steady_stream)
{
    uint64_t root;
    struct cache *c = open_store(&root);
    long max_pages = commits(c, new_file(c, root), 700, 0); /* over 10,000 pages, no pause */
    /* 4,000 pages and what commits add while a pass makes the hook's own
     * checkpoint busy. */
    cr_expect_leq(max_pages, 6000, "the log grew to %ld pages", max_pages);
    cache_close(&c);
}

Test(cache_ckpt, the_log_is_written_over_when_it_starts_again)
{
    uint64_t root;
    struct cache *c = open_store(&root);
    uint64_t ino = new_file(c, root);
    /* Over 10,000 pages with no pause: the log starts again from its
     * beginning several times (it stays under 6,000 pages, above). */
    long prev = 0, max_pages = 0;
    for (int i = 0; i < 70; i++) {
        long got = commits(c, ino, 10, 0);
        long now = wal_pages();
        cr_expect_geq(now, prev, "the log's file was cut from %ld pages to %ld", prev, now);
        prev = now;
        if (got > max_pages)
            max_pages = got;
    }
    cr_expect_leq(max_pages, 6000, "the log grew to %ld pages", max_pages);
    /* The collector still gives it all back. */
    cr_expect_eq(collect(c), 0);
    cr_expect_eq(wal_pages(), 0, "the collector's truncate left %ld pages", wal_pages());
    cache_close(&c);
}

Test(cache_ckpt, a_truncate_is_not_made_busy_by_a_pass)
{
    uint64_t root;
    struct cache *c = open_store(&root);
    uint64_t ino = new_file(c, root);
    for (int round = 0; round < 5; round++) {
        commits(c, ino, 10000, 1200); /* past 1,000 pages: a pass starts */
        cr_expect_eq(collect(c), 0, "round %d", round);
        cr_expect_eq(wal_pages(), 0, "round %d: the log was not cut", round);
    }
    cache_close(&c);
}

Test(cache_ckpt, a_clean_close_leaves_no_log)
{
    uint64_t root;
    struct cache *c = open_store(&root);
    commits(c, new_file(c, root), 100, 0);
    cache_close(&c);
    cr_expect_neq(access(wal, F_OK), 0, "the write-ahead log is still there");
    cr_assert_eq(cache_open(sub, &c), 0); /* and the content is whole */
    struct cnode f;
    cr_assert_eq(cache_store_attach(c, ST, false, &root), 0);
    cr_assert_eq(cache_lookup(c, root, "big.md", &f), 0);
    cr_expect_eq(f.size, BODY);
    cnode_clear(&f);
    cache_close(&c);
}
