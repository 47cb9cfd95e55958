/* test_mount_flush.c - `memstorefs flush` pushes what a killed daemon left
 * in its cache directory, and refuses to race a live daemon. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mnt.h"

static struct mnt_env E;
static char *store;

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Flush");
    cr_assert_not_null(store);
    free(t_create_memory(&E.msd, store, "/kept.md", "kept\n"));
}

static void teardown(void)
{
    mnt_teardown(&E);
    free(store);
    store = NULL;
}

TestSuite(mount_flush, .init = setup, .fini = teardown, .timeout = 120);

static char *server_content(const char *path)
{
    char q[600];
    snprintf(q, sizeof(q), "/v1/memory_stores/%s/memories?view=full&limit=20", store);
    long err = 0;
    cJSON *all = t_list_all(&E.msd, q, NULL, &err);
    cr_assert_not_null(all, "listing failed: %ld", err);
    char *out = NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, all)
    {
        const char *p = tj_str(it, "path");
        if (p && strcmp(p, path) == 0)
            out = strdup(tj_str(it, "content") ? tj_str(it, "content") : "");
    }
    cJSON_Delete(all);
    return out;
}

Test(mount_flush, pushes_what_a_killed_daemon_left)
{
    char *out = NULL;
    /* A long interval: nothing is pushed before the kill. */
    cr_assert_eq(mnt_mount(&E, store, "f", false, "--sync-interval 3600", &out), 0, "%s", out);
    free(out);
    cr_assert_eq(mnt_sh(&E, &out, "sleep 1; echo written > $MNT/f/new.md && "
                                  "echo more >> $MNT/f/kept.md && "
                                  "sed -n 's/^pid=//p' %s/store-*.lock", E.run), 0, "%s", out);
    pid_t pid = (pid_t)strtol(out, NULL, 10);
    free(out);
    cr_assert_gt(pid, 1);
    char *before = server_content("/new.md");
    cr_expect_null(before, "pushed before the kill: the test proves nothing");
    free(before);
    kill(pid, SIGKILL);
    for (int i = 0; i < 50 && kill(pid, 0) == 0; i++)
        usleep(100 * 1000);
    /* While the dead mount is there, flush says to clean it up first. */
    int rc = mnt_sh(&E, &out, "$MFS flush --cache-dir \"$CACHE\"");
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "died with its daemon"), "%s", out);
    free(out);
    /* Once it is cleaned up, the store is not locked any more: flush pushes. */
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount $MNT/f"), 0, "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "$MFS flush --cache-dir \"$CACHE\"");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "pushed 2"), "%s", out);
    free(out);
    char *got = server_content("/new.md");
    cr_expect_str_eq(got ? got : "(missing)", "written\n");
    free(got);
    got = server_content("/kept.md");
    cr_expect_str_eq(got ? got : "(missing)", "kept\nmore\n");
    free(got);
    /* Nothing left: a second flush has nothing to push. */
    rc = mnt_sh(&E, &out, "$MFS flush --cache-dir \"$CACHE\"");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "nothing to push"), "%s", out);
    free(out);
}

Test(mount_flush, leaves_a_mounted_store_to_its_daemon)
{
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "g", false, "--sync-interval 3600", &out), 0, "%s", out);
    free(out);
    cr_assert_eq(mnt_sh(&E, NULL, "sleep 1; echo local > $MNT/g/local.md"), 0);
    int rc = mnt_sh(&E, &out, "$MFS flush --cache-dir \"$CACHE\"");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "that daemon pushes its changes"), "%s", out);
    free(out);
    char *got = server_content("/local.md");
    cr_expect_null(got, "flush pushed a store a live daemon holds");
    free(got);
}

Test(mount_flush, bad_arguments_and_missing_cache)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS flush --cache-dir %s/nowhere", E.root);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "no cache at"), "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "$MFS flush --sync-deletions sometimes");
    cr_expect_eq(rc, 2, "%s", out);
    free(out);
    /* A store the cache does not hold is named, not ignored. */
    rc = mnt_sh(&E, &out, "$MFS mount --store %s:$MNT/x --cache-dir \"$CACHE\" >/dev/null 2>&1; "
                          "$MFS unmount $MNT/x "
                          ">/dev/null 2>&1; $MFS flush --cache-dir \"$CACHE\" --store "
                          "memstore_unknown", store);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "holds no memory store memstore_unknown"), "%s", out);
    free(out);
}

/* A store mounted by a daemon with another cache directory: that daemon
 * cannot push what this cache holds, so flush says it pushed nothing and
 * exits non-zero.  Before the fix it said "that daemon pushes its changes"
 * and exited 0, and the edit stayed in the first cache unpushed. */
Test(mount_flush, names_a_mount_with_another_cache_and_fails)
{
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "h", false, "--sync-interval 3600", &out), 0, "%s", out);
    free(out);
    cr_assert_eq(mnt_sh(&E, &out, "sleep 1; echo left > $MNT/h/left.md && "
                                  "sed -n 's/^pid=//p' %s/store-*.lock", E.run), 0, "%s", out);
    pid_t pid = (pid_t)strtol(out, NULL, 10);
    free(out);
    cr_assert_gt(pid, 1);
    kill(pid, SIGKILL);
    for (int i = 0; i < 50 && kill(pid, 0) == 0; i++)
        usleep(100 * 1000);
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount $MNT/h"), 0, "%s", out);
    free(out);
    /* The same store, mounted again with a cache of its own. */
    cr_assert_eq(mnt_mount(&E, store, "h", false, "--sync-interval 3600 --cache-dir $CACHE-2",
                           &out), 0, "%s", out);
    free(out);
    int rc = mnt_sh(&E, &out, "cd \"$CACHE\"/.. && $MFS flush --cache-dir ./cache");
    cr_expect_neq(rc, 0, "flush exited 0 with the edit unpushed: %s", out);
    cr_expect(strstr(out, "another cache directory") && strstr(out, "not pushed"), "%s", out);
    free(out);
    char *got = server_content("/left.md");
    cr_expect_null(got, "pushed by another cache's daemon: the test proves nothing");
    free(got);
    /* The same cache, given another way, is still that daemon's own. */
    rc = mnt_sh(&E, &out, "echo its own > $MNT/h/own.md && "
                          "cd \"$CACHE\"/.. && $MFS flush --cache-dir ./cache-2");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "that daemon pushes its changes"), "%s", out);
    free(out);
    /* Once that mount is gone, flush pushes the first cache's edit. */
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount $MNT/h"), 0, "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "$MFS flush --cache-dir \"$CACHE\"");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    got = server_content("/left.md");
    cr_expect_str_eq(got ? got : "(missing)", "left\n");
    free(got);
}
