/* test_cache_reserve.c - the cache directory's reserve of disk space
 * (cache/reserve.c), without a mount: made whole with its blocks
 * allocated, kept, cut to a smaller size, removed for 0, freed once with
 * the bytes it gave back; a link planted at its name is never followed.
 * A write that fails for want of room is noted until a commit goes
 * through, whether SQLite says SQLITE_FULL or an I/O error with ENOSPC or
 * EDQUOT as the system errno (a VFS in the test fails the writes).  The
 * full disk it is for is test_mount_sync_full.c's. */
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

/* A system errno SQLite hides behind SQLITE_IOERR: a quota's EDQUOT, or
 * ENOSPC from a write SQLite does not report as SQLITE_FULL.  The "unix"
 * VFS wrapped by one whose writes fail, while fail_errno is set, with
 * SQLITE_IOERR_WRITE and that errno in errno, as the unix VFS fails them;
 * registered as the default before the cache's VFS (cache/walbuf.c)
 * takes the default as its base, at the suite's first open.  (SQLite
 * 3.40 does not keep that errno for a COMMIT's write: sqlite3_system_errno
 * said 0, and the cache took EDQUOT for EIO.) */
struct shim_file {
    sqlite3_file base;
    sqlite3_file *real;
};
static sqlite3_vfs *unix_vfs, shim_vfs;
static int fail_errno;

#define REAL(f) (((struct shim_file *)(f))->real)
static int s_close(sqlite3_file *f)
{
    return REAL(f)->pMethods->xClose(REAL(f));
}
static int s_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
    return REAL(f)->pMethods->xRead(REAL(f), b, n, o);
}
static int s_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
    int e = __atomic_load_n(&fail_errno, __ATOMIC_ACQUIRE);
    if (e) {
        errno = e; /* as the unix VFS leaves it after a failed pwrite */
        return SQLITE_IOERR_WRITE;
    }
    return REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
}
static int s_truncate(sqlite3_file *f, sqlite3_int64 n)
{
    return REAL(f)->pMethods->xTruncate(REAL(f), n);
}
static int s_sync(sqlite3_file *f, int fl)
{
    return REAL(f)->pMethods->xSync(REAL(f), fl);
}
static int s_size(sqlite3_file *f, sqlite3_int64 *n)
{
    return REAL(f)->pMethods->xFileSize(REAL(f), n);
}
static int s_lock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xLock(REAL(f), l);
}
static int s_unlock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), l);
}
static int s_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int s_control(sqlite3_file *f, int op, void *arg)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int s_sector(sqlite3_file *f)
{
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int s_device(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int s_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **out)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, out);
}
static int s_shm_lock(sqlite3_file *f, int off, int n, int fl)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, fl);
}
static void s_shm_barrier(sqlite3_file *f)
{
    REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int s_shm_unmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int s_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **out)
{
    *out = NULL; /* no memory map: every read is an xRead */
    (void)f, (void)o, (void)n;
    return SQLITE_OK;
}
static int s_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{
    (void)f, (void)o, (void)p;
    return SQLITE_OK;
}
static const sqlite3_io_methods shim_io = {
    3, s_close, s_read, s_write, s_truncate, s_sync, s_size, s_lock, s_unlock, s_reserved,
    s_control, s_sector, s_device, s_shm_map, s_shm_lock, s_shm_barrier, s_shm_unmap, s_fetch,
    s_unfetch,
};

static int s_open(sqlite3_vfs *v, sqlite3_filename name, sqlite3_file *f, int flags, int *out)
{
    (void)v;
    struct shim_file *p = (struct shim_file *)f;
    p->real = (sqlite3_file *)(p + 1);
    p->base.pMethods = NULL;
    int rc = unix_vfs->xOpen(unix_vfs, name, p->real, flags, out);
    if (p->real->pMethods)
        p->base.pMethods = &shim_io;
    return rc;
}
static void setup_shim(void)
{
    if (sqlite3_vfs_find("mfs-test-shim")) { /* registered once a process */
        setup();
        return;
    }
    unix_vfs = sqlite3_vfs_find("unix");
    cr_assert_not_null(unix_vfs);
    shim_vfs = *unix_vfs;
    shim_vfs.zName = "mfs-test-shim";
    shim_vfs.szOsFile = (int)sizeof(struct shim_file) + unix_vfs->szOsFile;
    shim_vfs.xOpen = s_open;
    shim_vfs.pNext = NULL;
    cr_assert_eq(sqlite3_vfs_register(&shim_vfs, 1), SQLITE_OK);
    setup();
}

TestSuite(cache_room, .init = setup_shim, .fini = teardown, .timeout = 30);

/* One file's save while writes fail with errno e: its result, and whether
 * the cache was noted as out of room. */
static int save_failing(const char *name, int e, bool *noted)
{
    uint64_t root;
    cr_assert_eq(cache_store_attach(C, "memstore_q", false, &root), 0);
    struct cnode h;
    cr_assert_eq(cache_create_open(C, root, name, 1, &h), 0);
    cr_assert_eq(cache_settle(C), 0);
    char sha[SHA256_HEX_LEN + 1];
    __atomic_store_n(&fail_errno, e, __ATOMIC_RELEASE);
    int rc = cache_set_content_if(C, h.ino, "a note\n", 7, 2, h.sha, false, sha);
    *noted = cache_lacks_room(C);
    __atomic_store_n(&fail_errno, 0, __ATOMIC_RELEASE);
    int again = cache_set_content_if(C, h.ino, "a note\n", 7, 3, h.sha, false, sha);
    cr_expect_eq(again, 0, "the save once writes work again: %s", strerror(-again));
    cr_expect_not(cache_lacks_room(C), "a commit went through, and the cache still lacks room");
    cnode_clear(&h);
    return rc;
}

/* A quota's EDQUOT fails the write with EDQUOT (it was EIO) and is noted
 * as want of room, as is an ENOSPC SQLite reports as an I/O error; any
 * other errno is an I/O error, and no want of room. */
Test(cache_room, an_i_o_error_for_want_of_room_is_told_by_its_errno)
{
    bool noted = false;
    int rc = save_failing("quota.md", EDQUOT, &noted);
    cr_expect_eq(rc, -EDQUOT, "%d %s", rc, strerror(-rc));
    cr_expect(noted, "EDQUOT was not noted as want of room");
    rc = save_failing("nospc.md", ENOSPC, &noted);
    cr_expect_eq(rc, -ENOSPC, "%d %s", rc, strerror(-rc));
    cr_expect(noted, "ENOSPC was not noted as want of room");
    rc = save_failing("eio.md", EIO, &noted);
    cr_expect_eq(rc, -EIO, "%d %s", rc, strerror(-rc));
    cr_expect_not(noted, "EIO was noted as want of room");
}
