/* test_mount_lifecycle.c - what `memstorefs mount` refuses (and that it
 * then leaves nothing behind), one mount per store per host, and that
 * unmount, SIGTERM and SIGINT take the mounts and their directories away. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "mnt.h"

static struct mnt_env E;
static struct mnt_env other; /* a second daemon's (another runtime directory) */
static char *store;

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Lifecycle");
    cr_assert_not_null(store);
    free(t_create_memory(&E.msd, store, "/a/b.md", "b\n"));
}

static void teardown(void)
{
    if (other.root[0])
        mnt_stop_daemons(&other);
    memset(&other, 0, sizeof(other));
    mnt_teardown(&E);
    free(store);
    store = NULL;
}

TestSuite(mount_lifecycle, .init = setup, .fini = teardown, .timeout = 120);

/* Nothing is mounted below the private root and mnt/ is empty. */
static void expect_nothing_left(void)
{
    char *out = NULL;
    mnt_sh(&E, &out, "grep -c ' %s' /proc/self/mountinfo", E.root);
    cr_expect_str_eq(out, "0\n", "a mount was left behind");
    free(out);
    mnt_sh(&E, &out, "ls -A $MNT");
    cr_expect_str_eq(out, "", "something was left in the mount directory: %s", out);
    free(out);
}

Test(mount_lifecycle, existing_path_is_refused_and_kept)
{
    char *out = NULL;
    mnt_sh(&E, NULL, "mkdir -p $MNT/here && echo mine > $MNT/here/keep.txt");
    int rc = mnt_mount(&E, store, "here", false, "", &out);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "something already exists at the memory store's path"), "%s", out);
    cr_expect(strstr(out, store), "the message does not name the store: %s", out);
    free(out);
    mnt_sh(&E, &out, "cat $MNT/here/keep.txt");
    cr_expect_str_eq(out, "mine\n", "the existing directory was touched");
    free(out);
    mnt_sh(&E, NULL, "rm -rf $MNT/here");
    expect_nothing_left();
}

Test(mount_lifecycle, symlink_counts_as_existing)
{
    char *out = NULL;
    mnt_sh(&E, NULL, "ln -s /nonexistent $MNT/link");
    int rc = mnt_mount(&E, store, "link", false, "", &out);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "already exists"), "%s", out);
    free(out);
    mnt_sh(&E, NULL, "rm -f $MNT/link");
    expect_nothing_left();
}

Test(mount_lifecycle, unclean_paths_are_refused)
{
    const char *bad[] = {"relative/path", "/x/../y", "/x/./y", "/x//y", "/x/"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *out = NULL;
        int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s' --cache-dir \"$CACHE\"", store,
                        bad[i]);
        cr_expect_neq(rc, 0, "%s was accepted", bad[i]);
        cr_expect(strstr(out, "not a clean absolute path"), "%s: %s", bad[i], out);
        free(out);
    }
    expect_nothing_left();
}

/* The cache directory is written into each store's lock file, one line a
 * field: a line break in it would add a forged mount_path or created
 * line, which the dead-mount cleanup acts on. */
Test(mount_lifecycle, a_cache_dir_with_a_line_break_is_refused)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/nl' --cache-dir \"$CACHE/x\n"
                              "created=/tmp\"", store, E.mnt);
    cr_expect_neq(rc, 0, "a cache directory with a line break was accepted");
    cr_expect(strstr(out, "the cache directory's path holds a control character"), "%s", out);
    free(out);
    mnt_sh(&E, &out, "test -e %s/nl && echo mounted; ls -d \"$CACHE\"/x* 2>/dev/null", E.mnt);
    cr_expect_str_eq(out, "", "the mount or its cache directory was made: %s", out);
    free(out);
    expect_nothing_left();
}

Test(mount_lifecycle, missing_credential_is_refused)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "unset ANTHROPIC_API_KEY; $MFS mount --store '%s:%s/nocred' "
                              "--cache-dir \"$CACHE\"", store, E.mnt);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "ANTHROPIC_API_KEY"), "the message does not say what to set: %s", out);
    free(out);
    expect_nothing_left();
}

/* A FIFO where the credentials file should be: refused at once (its
 * open waited for a writer, so the mount hung). */
Test(mount_lifecycle, a_fifo_as_credentials_file_is_refused_at_once)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "rm -f \"$CACHE.fifo\" && mkfifo -m 600 \"$CACHE.fifo\" && "
                              "timeout 20 $MFS mount --store '%s:%s/fifo' --cache-dir \"$CACHE\" "
                              "--credentials \"$CACHE.fifo\"; echo rc=$?; rm -f \"$CACHE.fifo\"",
                    store, E.mnt);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_null(strstr(out, "rc=124"), "the mount hung on the FIFO: %s", out);
    cr_expect(strstr(out, "not a regular file"), "%s", out);
    free(out);
    expect_nothing_left();
}

Test(mount_lifecycle, unreachable_server_is_refused)
{
    char *out = NULL;
    /* Port 1 on loopback: nothing listens there. */
    int rc = mnt_sh(&E, &out, "ANTHROPIC_BASE_URL=http://127.0.0.1:1 $MFS mount --store "
                              "'%s:%s/unreach' --cache-dir \"$CACHE\"", store, E.mnt);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "cannot reach"), "%s", out);
    free(out);
    expect_nothing_left();
}

Test(mount_lifecycle, unknown_store_is_refused)
{
    char *out = NULL;
    int rc = mnt_mount(&E, "memstore_doesnotexist", "unknown", false, "", &out);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "unknown memory store memstore_doesnotexist"), "%s", out);
    free(out);
    expect_nothing_left();
}

Test(mount_lifecycle, one_bad_store_undoes_the_good_ones)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/good' --store "
                              "'memstore_nope:%s/bad' --cache-dir \"$CACHE\"", store, E.mnt,
                    E.mnt);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "memstore_nope"), "%s", out);
    free(out);
    expect_nothing_left();
}

Test(mount_lifecycle, parent_that_cannot_hold_a_directory)
{
    char *out = NULL;
    mnt_sh(&E, NULL, "echo file > $MNT/afile");
    int rc = mnt_mount(&E, store, "afile/sub", false, "", &out);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "cannot create the memory store's folder"), "%s", out);
    cr_expect(strstr(out, "writable"), "%s", out);
    free(out);
    mnt_sh(&E, NULL, "rm -f $MNT/afile");
    expect_nothing_left();
}

Test(mount_lifecycle, second_mount_of_a_store_is_refused)
{
    char *out = NULL;
    int rc = mnt_mount(&E, store, "first", false, "", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = mnt_mount(&E, store, "second", false, "", &out);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "already mounted"), "%s", out);
    cr_expect(strstr(out, "/first"), "the message does not name the other mount: %s", out);
    free(out);
    char second[400];
    snprintf(second, sizeof(second), "%s/second", E.mnt);
    cr_expect_neq(access(second, F_OK), 0, "the second mount path was created");
    /* The first mount still works. */
    mnt_sh(&E, &out, "cat $MNT/first/a/b.md");
    cr_expect_str_eq(out, "b\n");
    free(out);
}

Test(mount_lifecycle, unmount_removes_created_directories)
{
    char *out = NULL;
    int rc = mnt_mount(&E, store, "deep/er/store", false, "", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char path[400];
    snprintf(path, sizeof(path), "%s/deep/er/store", E.mnt);
    cr_assert(mnt_is_mounted(path));
    rc = mnt_sh(&E, &out, "$MFS unmount $MNT/deep/er/store/");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    cr_expect(!mnt_is_mounted(path));
    expect_nothing_left();
    rc = mnt_sh(&E, &out, "$MFS unmount $MNT/deep/er/store");
    cr_expect_neq(rc, 0, "unmounting twice succeeded");
    cr_expect(strstr(out, "not a memstorefs mount"), "%s", out);
    free(out);
}


static void signal_unmounts(int sig)
{
    char *out = NULL;
    int rc = mnt_mount(&E, store, "sig/store", false, "", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    pid_t pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 1);
    cr_assert_eq(kill(pid, sig), 0);
    for (int i = 0; i < 100 && kill(pid, 0) == 0; i++)
        usleep(100 * 1000);
    cr_expect_neq(kill(pid, 0), 0, "the daemon did not exit on signal %d", sig);
    expect_nothing_left();
}

Test(mount_lifecycle, sigterm_unmounts)
{
    signal_unmounts(SIGTERM);
}

Test(mount_lifecycle, sigint_unmounts)
{
    signal_unmounts(SIGINT);
}

Test(mount_lifecycle, dead_mount_is_cleaned_by_unmount)
{
    char *out = NULL;
    mnt_mount_dead(&E, store, "dead");
    int rc;
    /* The dead mount blocks a new session at the same path... */
    rc = mnt_mount(&E, store, "dead", false, "", &out);
    cr_expect_neq(rc, 0);
    free(out);
    /* ...until unmount cleans it up. */
    rc = mnt_sh(&E, &out, "$MFS unmount $MNT/dead");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "dead mount"), "%s", out);
    free(out);
    expect_nothing_left();
    rc = mnt_mount(&E, store, "dead", false, "", &out);
    cr_expect_eq(rc, 0, "remount after cleanup failed: %s", out);
    free(out);
}

/* Mounts the store at MNT/ab/store, closes a file in it, ends the mount
 * from outside with how (a shell command; $CONN is the connection's number),
 * and checks what a user sees afterwards: the daemon gone, nothing
 * mounted or left in MNT, the closed file in the store, and the store
 * mounting again at the same path.  The daemon's log, in *log. */
static void end_from_outside(const char *how, char **log)
{
    char *out = NULL;
    int rc = mnt_mount(&E, store, "ab/store", false, "", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char path[400], file[440];
    snprintf(path, sizeof(path), "%s/ab/store", E.mnt);
    snprintf(file, sizeof(file), "%s/a/closed.md", path);
    cr_assert_eq(mnt_write(file, "closed before the end\n"), 0);
    pid_t pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 1);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    rc = mnt_sh(&E, &out, "CONN=%u; %s", minor(st.st_dev), how);
    cr_assert_eq(rc, 0, "%s: %s", how, out);
    free(out);
    for (int i = 0; i < 150 && kill(pid, 0) == 0; i++)
        usleep(100 * 1000);
    cr_assert_neq(kill(pid, 0), 0, "the daemon did not exit after: %s", how);
    cr_expect(!mnt_is_mounted(path), "the mount was left in place");
    expect_nothing_left();
    struct tresp r = {0};
    char api[300];
    snprintf(api, sizeof(api), "/v1/memory_stores/%s/memories?view=full&path_prefix=/a/", store);
    cr_assert_eq(t_api(&E.msd, "GET", api, NULL, &r), 0);
    cr_expect(strstr(r.body, "closed before the end"), "the closed file was not pushed: %s",
              r.body);
    tresp_free(&r);
    mnt_sh(&E, log, "cat \"$CACHE\"/memstorefs.log");
    rc = mnt_mount(&E, store, "ab/store", false, "", &out);
    cr_expect_eq(rc, 0, "the store does not mount again at the same path: %s", out);
    free(out);
    mnt_sh(&E, &out, "cat $MNT/ab/store/a/closed.md");
    cr_expect_str_eq(out, "closed before the end\n");
    free(out);
}

/* An abort of the store's connection through fusectl (the way out of a
 * hung FUSE mount: /sys/fs/fuse/connections/N/abort) ends the daemon's
 * request loop as an unmount from outside does, but the mount stays in
 * place, every access to it failing with ENOTCONN.  The daemon detaches it
 * itself, so everything end_from_outside checks holds.  Before the fix
 * the dead mount stayed: the next mount there was refused ("something
 * already exists"), and no lock file was left for `memstorefs unmount` to
 * find it by.  fusectl is mounted if it is not (and left so: other
 * suites' daemons may be using it, and mount it themselves too). */
Test(mount_lifecycle, an_aborted_connection_is_detached_and_the_store_mounts_again)
{
    char *log = NULL;
    end_from_outside("{ grep -q ' /sys/fs/fuse/connections ' /proc/self/mountinfo || "
                     "mount -t fusectl fusectl /sys/fs/fuse/connections; } && "
                     "echo 1 > /sys/fs/fuse/connections/$CONN/abort", &log);
    cr_expect(log && strstr(log, "aborted from outside; its mount was detached"), "%s", log);
    cr_expect(log && strstr(log, "connection ended from outside with its mount in place"),
              "%s", log);
    cr_expect(log && !strstr(log, "unmounted from outside"), "an abort logged as an unmount: %s",
              log);
    free(log);
}

/* An unmount from outside (fusermount3 -u) while the daemon runs: the
 * final sync, the directories removed, the daemon gone, and nothing taken
 * for an abort. */
Test(mount_lifecycle, an_unmount_from_outside_ends_the_store_cleanly)
{
    char *log = NULL;
    end_from_outside("fusermount3 -u $MNT/ab/store", &log);
    cr_expect(log && strstr(log, "unmounted from outside; final sync"), "%s", log);
    cr_expect(log && !strstr(log, "aborted"), "%s", log);
    free(log);
}

/* ...and a new session of the store at another path says so too: it
 * used to take the store's lock over, and with it the only record of the
 * dead mount, which then stayed mounted ("Transport endpoint is not
 * connected") where neither status nor unmount --all saw it any more. */
Test(mount_lifecycle, a_dead_mount_elsewhere_is_named_before_the_store_mounts_again)
{
    char *out = NULL;
    /* Through a symbolic link, as a session may name it: the mount table
     * holds the path it leads to (unmount used to miss the dead mount
     * there, say it was cleaned up, and drop its record). */
    int rc = mnt_sh(&E, &out, "mkdir $MNT/real && ln -s real $MNT/lnk");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    mnt_mount_dead(&E, store, "lnk/dead");
    rc = mnt_mount(&E, store, "other", false, "", &out);
    cr_expect_eq(rc, 1, "the store mounted again elsewhere over its dead mount: %s", out);
    char want[1024];
    snprintf(want, sizeof(want), "its mount at %s/lnk/dead died with its daemon; run "
             "'memstorefs unmount %s/lnk/dead' first", E.mnt, E.mnt);
    cr_expect(out && strstr(out, want), "the refusal does not name the dead mount: %s", out);
    free(out);
    char path[400];
    snprintf(path, sizeof(path), "%s/other", E.mnt);
    cr_expect(!mnt_is_mounted(path), "the refused mount is mounted anyway");
    cr_expect_neq(access(path, F_OK), 0, "the refused mount left its directory");
    /* status still shows the dead mount, and unmount --all cleans it. */
    mnt_sh(&E, &out, "$MFS status");
    cr_expect(out && strstr(out, "DEAD"), "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "$MFS unmount --all");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    snprintf(path, sizeof(path), "%s/real/dead", E.mnt);
    cr_expect(!mnt_is_mounted(path), "unmount --all left the dead mount");
    rc = mnt_mount(&E, store, "other", false, "", &out);
    cr_expect_eq(rc, 0, "the mount after the cleanup failed: %s", out);
    free(out);
}

/* A dead mount at dead, detached and its directory removed by hand, and
 * the store mounted there since by a daemon of another runtime directory
 * (`other`, stopped by the teardown). */
static void dead_mount_replaced(void)
{
    mnt_mount_dead(&E, store, "dead");
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "grep -q '^mount_id=[1-9][0-9]*$' \"$MEMSTOREFS_RUNTIME_DIR\"/store-*");
    free(out);
    if (rc != 0) { /* before Linux 6.8: the kernel does not tell a mount's id */
        struct utsname u;
        uname(&u);
        cr_skip_test("the lock file has no mount_id= line (kernel %s)", u.release);
    }
    rc = mnt_sh(&E, &out, "fusermount3 -u -z $MNT/dead && rmdir $MNT/dead");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    other = E;
    snprintf(other.run, sizeof(other.run), "%s/run2", E.root);
    snprintf(other.cache, sizeof(other.cache), "%s/cache2", E.root);
    rc = mnt_mount(&other, store, "dead", false, "", &out);
    cr_assert_eq(rc, 0, "the other daemon's mount failed: %s", out);
    free(out);
}

/* `unmount --all` finds the dead mount's record names no mount there now:
 * it says so, exit 0 (why: the failure's message). */
static void expect_unmount_says_gone(const char *why)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS unmount --all");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(out && strstr(out, "is gone already") && strstr(out, "was left alone"), "%s: %s",
              why, out);
    free(out);
}

/* The other daemon's mount at dead still serves. */
static void expect_other_mount_serves(void)
{
    char *out = NULL, path[400];
    snprintf(path, sizeof(path), "%s/dead", E.mnt);
    cr_expect(mnt_is_mounted(path), "the other daemon's mount was detached");
    mnt_sh(&E, &out, "cat $MNT/dead/a/b.md");
    cr_expect_str_eq(out, "b\n", "the other daemon's mount does not serve: %s", out);
    free(out);
}

Test(mount_lifecycle, a_mount_of_the_store_by_another_daemon_is_not_taken_for_its_dead_mount)
{
    dead_mount_replaced();
    /* The dead mount's record names that path, where a mount of the store
     * is: another one (another mount id). */
    char *out = NULL;
    int rc = mnt_mount(&E, store, "elsewhere", false, "", &out);
    cr_expect_eq(rc, 0, "the mount was refused over a live mount of another daemon: %s", out);
    cr_expect(!strstr(out, "died with its daemon"), "%s", out);
    free(out);
    expect_other_mount_serves();
}

Test(mount_lifecycle, unmount_leaves_another_daemon_s_mount_where_a_dead_mount_was)
{
    dead_mount_replaced();
    expect_unmount_says_gone("unmount took another daemon's mount for the dead one");
    expect_other_mount_serves();
}

/* A lock file of an earlier boot names no mount of this one, whatever
 * the mount at its path (mount ids start again at each boot, so an id
 * alone could match another daemon's mount made since).  Here the dead
 * mount's record is made to look a boot old: unmount leaves the mount at
 * its path and removes the record; before boot_id=, it detached it. */
Test(mount_lifecycle, a_record_of_an_earlier_boot_is_not_taken_for_a_mount_of_this_one)
{
    mnt_mount_dead(&E, store, "dead");
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "grep -q '^boot_id=' \"$MEMSTOREFS_RUNTIME_DIR\"/store-* && sed -i "
                    "'s/^boot_id=.*/boot_id=00000000-0000-0000-0000-000000000000/' "
                    "\"$MEMSTOREFS_RUNTIME_DIR\"/store-*");
    cr_assert_eq(rc, 0, "the lock file has no boot_id= line: %s", out);
    free(out);
    expect_unmount_says_gone("unmount took an earlier boot's record for this mount");
    char path[400];
    snprintf(path, sizeof(path), "%s/dead", E.mnt);
    cr_expect(mnt_is_mounted(path), "the mount was detached");
    mnt_sh(&E, &out, "$MFS status");
    cr_expect(out && !strstr(out, "DEAD"), "the record stayed: %s", out);
    free(out);
    mnt_sh(&E, NULL, "fusermount3 -u -z $MNT/dead");
}

Test(mount_lifecycle, foreground_mode_serves_until_signalled)
{
    char *out = NULL;
    /* Start in the foreground in the background of the shell, wait for the
     * mount, then SIGTERM that pid. */
    int rc = mnt_sh(&E, &out,
                    "$MFS mount --foreground --store '%s:%s/fg' --cache-dir \"$CACHE\" "
                    ">%s/fg.log 2>&1 & pid=$!; "
                    "for i in $(seq 100); do [ -f $MNT/fg/a/b.md ] && break; sleep 0.1; done; "
                    "cat $MNT/fg/a/b.md; kill -TERM $pid; wait $pid; echo exit=$?",
                    store, E.mnt, E.root);
    cr_expect_eq(rc, 0);
    cr_expect_str_eq(out, "b\nexit=0\n");
    free(out);
    expect_nothing_left();
}
