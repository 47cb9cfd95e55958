/* test_mount_write_ro.c - a read-only store cannot be changed by any
 * writer, root included: every mutating tool fails with "Read-only file
 * system", the files stay as they were, nothing is marked dirty in the
 * cache and memstored receives no write request.  Both walls are checked:
 * the kernel's ro mount, and (after the mount is remounted rw behind the
 * daemon's back) the daemon itself. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mnt.h"

static struct mnt_env E;
static char *store;
static char mnt[400];

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Read Only");
    cr_assert_not_null(store);
    free(t_create_memory(&E.msd, store, "/a.md", "alpha\n"));
    free(t_create_memory(&E.msd, store, "/notes/b.md", "beta\n"));
    free(t_create_memory(&E.msd, store, "/empty/c.md", "gamma\n"));
    struct tresp r = {0};
    cr_assert_eq(t_admin(&E.msd, "POST", "/admin/stats/reset", "{}", &r), 0);
    cr_assert_eq(r.status, 200);
    tresp_free(&r);
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "ro", true, "", &out), 0, "mount failed: %s", out);
    free(out);
    snprintf(mnt, sizeof(mnt), "%s/ro", E.mnt);
}

static void teardown(void)
{
    mnt_teardown(&E);
    free(store);
}

TestSuite(mount_write_ro, .init = setup, .fini = teardown, .timeout = 120);

static const char *const writers[] = {
    "echo x > a.md",
    "echo x >> a.md",
    "echo x > new.md",
    "touch a.md",
    "touch new.md",
    "rm a.md",
    "rm -r notes",
    "mv a.md moved.md",
    "mv notes notes2",
    "mkdir newdir",
    "rmdir notes",
    "truncate -s 0 a.md",
    "chmod 600 a.md",
    "chown 1:1 a.md",
    "ln -s a.md link",
    "ln a.md hard",
    "mkfifo fifo",
    "setfattr -n user.x -v 1 a.md",
    "setfattr -x user.x a.md",
    "cp /etc/hostname copied",
    "cp /etc/hostname a.md",
    "sed -i s/alpha/omega/ a.md",
    "dd if=/dev/zero of=a.md bs=1 count=1 conv=notrunc status=none",
    "rm .anthropic-memory-store",
};
#define NWRITERS (sizeof(writers) / sizeof(writers[0]))

static char *tree(void)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "cd '%s' && find . | LC_ALL=C sort && "
                              "find . -type f -exec sha256sum {} + | LC_ALL=C sort", mnt);
    cr_assert_eq(rc, 0, "%s", out);
    return out;
}

static void expect_all_refused(const char *wall)
{
    for (size_t i = 0; i < NWRITERS; i++) {
        char *out = NULL;
        int rc = mnt_sh(&E, &out, "cd '%s' && %s", mnt, writers[i]);
        cr_expect_neq(rc, 0, "%s: `%s` succeeded", wall, writers[i]);
        cr_expect(strstr(out, "Read-only file system"), "%s: `%s`: %s", wall, writers[i], out);
        free(out);
    }
}

static void expect_nothing_recorded(void)
{
    char db[400];
    snprintf(db, sizeof(db), "%s/cache.db", E.cache);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h,
        "SELECT (SELECT count(*) FROM nodes WHERE store = ?1 AND state != 0 AND parent IS NOT"
        " NULL), (SELECT count(*) FROM tombstones WHERE store = ?1),"
        " (SELECT count(*) FROM nodes WHERE store = ?1 AND unlinked = 1)", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, store, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_eq(sqlite3_column_int(st, 0), 0, "a node of a read-only store was marked changed");
    cr_expect_eq(sqlite3_column_int(st, 1), 0, "a read-only store got a tombstone");
    cr_expect_eq(sqlite3_column_int(st, 2), 0, "a node of a read-only store was unlinked");
    sqlite3_finalize(st);
    sqlite3_close(h);
}

static long writes_received(void)
{
    struct tresp r = {0};
    cr_assert_eq(t_admin(&E.msd, "GET", "/admin/stats", NULL, &r), 0);
    cr_assert_not_null(r.json, "%s", r.body);
    cJSON *w = cJSON_GetObjectItem(r.json, "writes");
    cr_assert(cJSON_IsNumber(w), "%s", r.body);
    long n = (long)w->valuedouble;
    tresp_free(&r);
    return n;
}

Test(mount_write_ro, every_writer_gets_erofs)
{
    cr_assert_eq(geteuid(), 0, "this test checks that root is refused too");
    char *before = tree();
    expect_all_refused("kernel ro mount");
    char *after = tree();
    cr_expect_str_eq(after, before, "a read-only store changed");
    free(after);

    /* The second wall: with the kernel's ro flag removed behind the
     * daemon's back, the daemon refuses every change itself. */
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "mount -i -o remount,rw '%s' && grep ' %s ' /proc/self/mountinfo",
                    mnt, mnt);
    cr_assert_eq(rc, 0, "cannot remount rw: %s", out);
    cr_assert(strstr(out, " rw,"), "the mount is still ro: %s", out);
    free(out);
    expect_all_refused("daemon");
    after = tree();
    cr_expect_str_eq(after, before, "a read-only store changed through the daemon");
    free(after);
    free(before);

    /* A remote refresh runs meanwhile (every 5 s); still nothing to send. */
    sleep(6);
    expect_nothing_recorded();
    cr_expect_eq(writes_received(), 0, "memstored received a write request");
    rc = mnt_sh(&E, &out, "cat '%s/a.md' '%s/notes/b.md'", mnt, mnt);
    cr_expect_str_eq(out, "alpha\nbeta\n");
    free(out);
}
