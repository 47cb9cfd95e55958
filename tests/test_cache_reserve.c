/* test_cache_reserve.c - the cache directory's reserve of disk space
 * (cache/reserve.c), without a mount: made whole with its blocks
 * allocated, kept, cut to a smaller size, removed for 0, freed once with
 * the bytes it gave back; a link planted at its name is never followed.
 * The full disk it is for is test_mount_sync_full.c's. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"

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
