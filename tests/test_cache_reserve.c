/* test_cache_reserve.c - the cache directory's reserve of disk space
 * (cache/reserve.c), without a mount: made whole with its blocks
 * allocated, kept, cut to a smaller size, removed for 0, freed once with
 * the bytes it gave back; a link planted at its name is never followed.
 * A write that fails for want of room is noted until a commit goes
 * through.  The full disk it is for is test_mount_sync_full.c's. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cache.h"
#include "db_internal.h" /* the connection, to bound the database's pages */

static char dir[64], path[128];
static struct cache *C;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mfs-cr-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/reserve", dir);
    cr_assert_eq(cache_open(dir, &C), 0);
}

static void teardown(void)
{
    cache_close(&C);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(cache_reserve, .init = setup, .fini = teardown, .timeout = 30);

static long long allocated(void)
{
    struct stat st;
    return lstat(path, &st) == 0 ? (long long)st.st_blocks * 512 : -errno;
}

Test(cache_reserve, is_made_whole_kept_cut_and_freed_once)
{
    cr_expect_not(cache_lacks_room(C), "a new cache lacks room");
    cr_assert_eq(cache_reserve_keep(C, 1 << 20), 0);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect(S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600, "mode %o", st.st_mode);
    cr_expect_eq(st.st_size, 1 << 20);
    cr_expect_geq(allocated(), 1 << 20, "blocks of %lld bytes allocated", allocated());

    cr_expect_eq(cache_reserve_keep(C, 1 << 20), 0, "kept as it is");
    cr_expect_eq(cache_reserve_keep(C, 256 << 10), 0);
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect_eq(st.st_size, 256 << 10, "not cut to a smaller reserve: %lld bytes",
                 (long long)st.st_size);

    uint64_t freed = 0;
    cr_expect_eq(cache_reserve_release(C, &freed), 0);
    cr_expect_geq(freed, 256u << 10, "freed %llu bytes", (unsigned long long)freed);
    cr_expect_eq(allocated(), -ENOENT, "still there");
    cr_expect_eq(cache_reserve_release(C, &freed), 0);
    cr_expect_eq(freed, 0, "freed twice");
    cr_expect_eq(cache_reserve_free(dir, &freed), 0);
    cr_expect_eq(freed, 0);

    /* Made again by a later start; 0 (--cache-reserve 0) removes it. */
    cr_expect_eq(cache_reserve_keep(C, 64 << 10), 0);
    cr_expect_geq(allocated(), 64 << 10);
    cr_expect_eq(cache_reserve_keep(C, 0), 0);
    cr_expect_eq(allocated(), -ENOENT, "--cache-reserve 0 left a reserve");
    cr_expect_eq(cache_reserve_keep(C, 0), 0, "none to remove is no error");
}

/* Another account (or a mistake) planting a link at the reserve's name:
 * neither making nor freeing it touches what the link names. */
Test(cache_reserve, a_link_at_its_name_is_never_followed)
{
    char target[128];
    snprintf(target, sizeof(target), "%s/target", dir);
    FILE *f = fopen(target, "w");
    cr_assert_not_null(f);
    fputs("keep me\n", f);
    fclose(f);
    cr_assert_eq(symlink(target, path), 0);
    cr_expect_lt(cache_reserve_keep(C, 1 << 20), 0, "a link was taken for the reserve");
    uint64_t freed = 1;
    cr_expect_lt(cache_reserve_release(C, &freed), 0, "a link was freed as the reserve");
    cr_expect_eq(freed, 0);
    struct stat st;
    cr_assert_eq(stat(target, &st), 0);
    cr_expect_eq(st.st_size, 8, "what the link names was changed: %lld bytes",
                 (long long)st.st_size);
    cr_expect_eq(lstat(path, &st), 0);
    cr_expect(S_ISLNK(st.st_mode), "the link itself was removed");
}

static int64_t pragma(const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    db_lock(C);
    if (sqlite3_prepare_v2(C->db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&C->lock);
    return v;
}

/* SQLITE_FULL (here from the database's page limit; a full disk answers
 * the same) fails the write with ENOSPC and is noted: the final sync then
 * frees the reserve.  The next commit that goes through clears it. */
Test(cache_reserve, a_write_without_room_is_noted_until_a_commit)
{
    uint64_t root;
    cr_assert_eq(cache_store_attach(C, "memstore_r", false, &root), 0);
    struct cnode h;
    cr_assert_eq(cache_create_open(C, root, "big.md", 1, &h), 0);
    cr_assert_eq(cache_settle(C), 0);
    int64_t pages = pragma("PRAGMA page_count");
    cr_assert_gt(pages, 0);
    char sql[80];
    snprintf(sql, sizeof(sql), "PRAGMA max_page_count=%lld", (long long)pages + 2);
    cr_assert_eq(pragma(sql), pages + 2);

    size_t len = 90 * 1024;
    char *body = malloc(len);
    cr_assert_not_null(body);
    for (size_t i = 0; i < len; i++)
        body[i] = (char)('a' + (i * 7919) % 26);
    char sha[SHA256_HEX_LEN + 1];
    int rc = cache_set_content_if(C, h.ino, body, len, 2, h.sha, false, sha);
    cr_expect_eq(rc, -ENOSPC, "%d %s", rc, strerror(-rc));
    cr_expect(cache_lacks_room(C), "a write that failed for want of room was not noted");

    cr_assert_eq(pragma("PRAGMA max_page_count=1000000"), 1000000);
    rc = cache_set_content_if(C, h.ino, body, len, 3, h.sha, false, sha);
    cr_expect_eq(rc, 0, "%d %s", rc, strerror(-rc));
    cr_expect_not(cache_lacks_room(C), "a commit went through, and the cache still lacks room");
    free(body);
    cnode_clear(&h);
}
