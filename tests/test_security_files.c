/* test_security_files.c - who can read the cache, the log and a mount.
 *
 * Another local account (made by the test, users.h) tries to read the
 * cache database and its WAL/SHM files, to append to the log, and to read
 * and write through mounts made by root with the default ownership, with
 * --uid/--gid naming that account, with --umask and with -o allow_other;
 * and what the account may do in a mount of its own.
 * Everything lives in TU_DIR (0755), so only the modes memstorefs sets
 * stand between the other account and the files. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mnt.h"
#include "users.h"

static struct mnt_env E;
static char *store;
static struct tuser other;
static pid_t swapper; /* a child of the test's, killed in the teardown */

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Files");
    cr_assert_not_null(store);
    free(t_create_memory(&E.msd, store, "/notes/a.md", "secret\n"));
    tu_setup();
    tu_create(&other, "mfs-other");
}

static void teardown(void)
{
    if (swapper > 0) {
        kill(swapper, SIGKILL);
        waitpid(swapper, NULL, 0);
        swapper = 0;
    }
    mnt_sh(&E, NULL, "timeout 60 $MFS unmount --all >/dev/null 2>&1");
    if (other.uid)
        tu_sh(&E, &other, NULL, "timeout 60 $MFS unmount --all >/dev/null 2>&1");
    tu_teardown();
    mnt_teardown(&E);
    free(store);
    store = NULL;
}

TestSuite(security_files, .init = setup, .fini = teardown, .timeout = 180);

/* Root mounts the store at TU_DIR/pub/s with extra options; asserts. */
static void root_mount(const char *extra)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/pub/s' --cache-dir '%s/cache' "
                              "--sync-interval 5 %s", store, TU_DIR, TU_DIR, extra);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
}

/* The mode of TU_DIR/rel. */
static unsigned mode_of(const char *rel)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", TU_DIR, rel);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0, "%s is missing", path);
    return st.st_mode & 07777;
}

Test(security_files, cache_and_log_are_private_whatever_the_umask)
{
    /* The cache directory already exists, made with the usual umask. */
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, NULL, "mkdir -m 755 %s/cache", TU_DIR), 0);
    int rc = mnt_sh(&E, &out, "umask 000 && $MFS mount --store '%s:%s/pub/s' --cache-dir "
                              "'%s/cache' --sync-interval 5 && echo edit > %s/pub/s/notes/b.md",
                    store, TU_DIR, TU_DIR, TU_DIR);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "made it private"), "no warning about the open cache directory: %s",
              out);
    free(out);
    cr_expect_eq(mode_of("cache"), 0700);
    static const char *const files[] = {"cache.db", "cache.db-wal", "cache.db-shm",
                                        "memstorefs.log"};
    for (size_t i = 0; i < 4; i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "cache/%s", files[i]);
        cr_expect_eq(mode_of(rel), 0600, "%s has mode %o", files[i], mode_of(rel));
    }
    for (size_t i = 0; i < 4; i++) {
        rc = tu_sh(&E, &other, &out, "cat '%s/cache/%s' | grep -a -c secret", TU_DIR,
                   files[i]);
        cr_expect_neq(rc, 0, "another account read %s: %s", files[i], out);
        free(out);
    }
    rc = tu_sh(&E, &other, &out, "echo 'level=info msg=\"forged\"' >> '%s/cache/memstorefs.log'",
               TU_DIR);
    cr_expect_neq(rc, 0, "another account appended to the log");
    free(out);
    char *log = NULL;
    mnt_sh(&E, &log, "cat '%s/cache/memstorefs.log'", TU_DIR);
    cr_expect(!strstr(log, "forged"), "the log holds a forged line");
    free(log);
}

Test(security_files, cache_dir_of_another_account_is_refused)
{
    char *out = NULL;
    cr_assert_eq(tu_sh(&E, &other, NULL, "mkdir -m 777 \"$HOME_DIR\"/cache"), 0);
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/pub/s' --cache-dir '%s/cache'", store,
                    TU_DIR, other.home);
    cr_expect_neq(rc, 0, "the mount used a cache directory another account owns: %s", out);
    cr_expect(strstr(out, "mfs-other") && strstr(out, "/cache"),
              "the message does not say whose directory it is: %s", out);
    free(out);
    char path[400];
    snprintf(path, sizeof(path), "%s/cache/cache.db", other.home);
    cr_expect_neq(access(path, F_OK), 0, "the cache was created in the refused directory");
    snprintf(path, sizeof(path), "%s/pub/s", TU_DIR);
    cr_expect(!mnt_is_mounted(path));
}

Test(security_files, root_mount_is_private_by_default)
{
    root_mount("");
    char *out = NULL;
    int rc = tu_sh(&E, &other, &out, "cat '%s/pub/s/notes/a.md'", TU_DIR);
    cr_expect_neq(rc, 0, "another account read a root mount: %s", out);
    free(out);
    rc = tu_sh(&E, &other, &out, "ls '%s/pub/s'", TU_DIR);
    cr_expect_neq(rc, 0, "another account listed a root mount: %s", out);
    free(out);
    /* Root itself still uses it. */
    mnt_sh(&E, &out, "cat '%s/pub/s/notes/a.md'", TU_DIR);
    cr_expect_str_eq(out, "secret\n");
    free(out);
}

Test(security_files, uid_names_the_agent_and_umask_keeps_others_out)
{
    struct tuser agent;
    tu_create(&agent, "mfs-agent");
    char extra[128];
    snprintf(extra, sizeof(extra), "--uid %s --gid %u --umask 077", agent.name,
             (unsigned)agent.gid);
    root_mount(extra);
    char *out = NULL;
    int rc = tu_sh(&E, &agent, &out, "cat '%s/pub/s/notes/a.md' && echo more >> "
                                     "'%s/pub/s/notes/a.md' && stat -c '%%a %%U' "
                                     "'%s/pub/s/notes/a.md' '%s/pub/s/notes'", TU_DIR, TU_DIR,
                   TU_DIR, TU_DIR);
    cr_expect_eq(rc, 0, "the agent named by --uid cannot use the mount: %s", out);
    cr_expect_str_eq(out, "secret\n600 mfs-agent\n700 mfs-agent\n");
    free(out);
    rc = tu_sh(&E, &other, &out, "cat '%s/pub/s/notes/a.md'", TU_DIR);
    cr_expect_neq(rc, 0, "a third account read a file of mode 0600: %s", out);
    free(out);
}

/* Root mounts a store for the agent (--uid) at a path through the agent's
 * own directory: a symbolic link the agent put there must not take root's
 * mkdir, chown and mount into a directory only root may write (the same
 * link swapped in between the daemon's checks and its mount would). */
Test(security_files, a_link_the_agent_put_in_the_mount_path_is_not_followed)
{
    struct tuser agent;
    tu_create(&agent, "mfs-agent");
    mnt_sh(&E, NULL, "mkdir -m 755 '%s/rootonly' && ln -s '%s/rootonly' '%s/link' && "
                     "chown -h %s '%s/link'", TU_DIR, TU_DIR, agent.home, agent.name,
           agent.home);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/link/mem' --cache-dir '%s/cache' "
                              "--uid %s", store, agent.home, TU_DIR, agent.name);
    cr_expect_neq(rc, 0, "root mounted through the agent's link: %s", out);
    cr_expect(strstr(out, "symbolic link") && strstr(out, "/link"), "%s", out);
    free(out);
    char made[600];
    snprintf(made, sizeof(made), "%s/rootonly/mem", TU_DIR);
    struct stat st;
    cr_expect_neq(lstat(made, &st), 0, "root made %s (owner %u) through the agent's link", made,
                  (unsigned)st.st_uid);
}

/* The same link swapped in while root mounts: the agent exchanges its
 * empty mount point with a link to a directory only root may write, over
 * and over (renameat2 RENAME_EXCHANGE), while root mounts the store there
 * for it in the mount(8) form (an existing empty directory is accepted).
 * Root's chown and mount must never land on the link's target. */
Test(security_files, a_mount_point_swapped_for_a_link_while_root_mounts_is_not_followed)
{
    struct tuser agent;
    tu_create(&agent, "mfs-agent");
    char mp[600], sw[600], target[600];
    snprintf(mp, sizeof(mp), "%s/mp", agent.home);
    snprintf(sw, sizeof(sw), "%s/swap", agent.home);
    snprintf(target, sizeof(target), "%s/rootonly", TU_DIR);
    cr_assert_eq(mnt_sh(&E, NULL, "mkdir -m 755 '%s' '%s' && ln -s '%s' '%s' && "
                                  "chown -h %s '%s' '%s'", target, mp, target, sw,
                        agent.name, mp, sw), 0);
    swapper = fork();
    cr_assert_geq(swapper, 0);
    if (swapper == 0) {
        if (setgroups(0, NULL) || setresgid(agent.gid, agent.gid, agent.gid) ||
            setresuid(agent.uid, agent.uid, agent.uid))
            _exit(1);
        /* Longer than any run of the suite: the teardown ends it. */
        for (time_t end = time(NULL) + 600; time(NULL) < end;)
            syscall(SYS_renameat2, AT_FDCWD, mp, AT_FDCWD, sw, 2 /* RENAME_EXCHANGE */);
        _exit(0);
    }
    /* The swaps run: the mount point is seen as the link at least once
     * (a swapper that could not swap left every attempt an ordinary
     * mount, and the test checked nothing). */
    bool seen = false;
    for (int i = 0; i < 5000 && !seen; i++) {
        struct stat ls;
        seen = lstat(mp, &ls) == 0 && S_ISLNK(ls.st_mode);
        if (!seen)
            usleep(1000);
    }
    cr_assert(seen, "the agent's swaps never put the link at %s", mp);
    int mounted = 0;
    for (int i = 0; i < 30; i++) {
        char *out = NULL;
        int rc = mnt_sh(&E, &out, "$MFS '%s' '%s' -o uid=%s,cache_dir='%s/cache'", store, mp,
                        agent.name, TU_DIR);
        free(out);
        struct stat st;
        cr_assert_eq(stat(target, &st), 0);
        cr_expect_eq(st.st_uid, 0, "root gave %s to the agent (attempt %d)", target, i + 1);
        cr_expect_not(mnt_is_mounted(target), "root mounted the store on %s (attempt %d)",
                      target, i + 1);
        if (rc == 0) {
            mounted++;
            mnt_sh(&E, NULL, "timeout 60 $MFS unmount --all >/dev/null 2>&1; "
                             "umount -l '%s' 2>/dev/null; true", target);
        }
        if (st.st_uid != 0)
            break;
    }
    int wst = 0;
    pid_t w = waitpid(swapper, &wst, WNOHANG);
    if (w == swapper)
        swapper = 0; /* reaped: the teardown must not signal its pid */
    cr_expect_eq(w, 0, "the agent stopped swapping during the attempts (status %d)", wst);
    cr_log_info("mounted in %d of the attempts", mounted);
}

/* The folders root made for the agent's mount are removed at unmount
 * through the parts it opened, not through the path again: the agent
 * moved one away and put a link in its place, to a directory tree only
 * root may write, with empty directories of the same names.  Root's rmdir
 * must not remove those. */
Test(security_files, folders_are_removed_through_no_link_the_agent_put_back)
{
    struct tuser agent;
    tu_create(&agent, "mfs-agent");
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/a/b/mp' --cache-dir '%s/cache' "
                              "--uid %s", store, agent.home, TU_DIR, agent.name);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert_eq(mnt_sh(&E, NULL, "mkdir -p -m 755 '%s/victim/b/mp'", TU_DIR), 0);
    rc = tu_sh(&E, &agent, &out, "mv '%s/a' '%s/moved' && ln -s '%s/victim' '%s/a'",
               agent.home, agent.home, TU_DIR, agent.home);
    cr_assert_eq(rc, 0, "the agent could not move the folder: %s", out);
    free(out);
    mnt_sh(&E, &out, "timeout 60 $MFS unmount --all 2>&1");
    free(out);
    char path[600];
    snprintf(path, sizeof(path), "%s/victim/b/mp", TU_DIR);
    struct stat st;
    cr_expect_eq(stat(path, &st), 0, "root's unmount removed %s through the agent's link", path);
    snprintf(path, sizeof(path), "%s/victim/b", TU_DIR);
    cr_expect_eq(stat(path, &st), 0, "root's unmount removed %s through the agent's link", path);
}

/* A link only root can change (as /var/run -> /run) is still followed. */
Test(security_files, a_link_only_root_can_change_is_followed)
{
    struct tuser agent;
    tu_create(&agent, "mfs-agent");
    mnt_sh(&E, NULL, "mkdir -m 755 '%s/rootonly' '%s/real' && ln -s '%s/real' "
                     "'%s/rootonly/link'", TU_DIR, TU_DIR, TU_DIR, TU_DIR);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/rootonly/link/s' --cache-dir "
                              "'%s/cache' --uid %s", store, TU_DIR, TU_DIR, agent.name);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = tu_sh(&E, &agent, &out, "cat '%s/real/s/notes/a.md'", TU_DIR);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out, "secret\n");
    free(out);
}

/* A root mount that libfuse hands to fusermount3 (auto_unmount) takes the
 * path itself: fusermount3 has no descriptor of the daemon's to go
 * through. */
Test(security_files, root_mount_with_auto_unmount_works)
{
    root_mount("-o auto_unmount");
    char *out = NULL;
    mnt_sh(&E, &out, "cat '%s/pub/s/notes/a.md'", TU_DIR);
    cr_expect_str_eq(out, "secret\n");
    free(out);
}

/* A link only root can change that leads nowhere: said, nothing made. */
Test(security_files, a_trusted_link_to_nothing_is_said)
{
    mnt_sh(&E, NULL, "mkdir -m 755 '%s/rootonly' && ln -s '%s/missing' '%s/rootonly/link'",
           TU_DIR, TU_DIR, TU_DIR);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/rootonly/link/s' --cache-dir "
                              "'%s/cache'", store, TU_DIR, TU_DIR);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "/rootonly/link") && strstr(out, "cannot be opened"), "%s", out);
    free(out);
}

Test(security_files, allow_other_opens_reading_to_every_account)
{
    root_mount("-o allow_other");
    char *out = NULL;
    int rc = tu_sh(&E, &other, &out, "cat '%s/pub/s/notes/a.md'", TU_DIR);
    cr_expect_eq(rc, 0, "-o allow_other did not open the mount: %s", out);
    cr_expect_str_eq(out, "secret\n");
    free(out);
    rc = tu_sh(&E, &other, &out, "echo x >> '%s/pub/s/notes/a.md'", TU_DIR);
    cr_expect_neq(rc, 0, "another account wrote to a root file of mode 0644");
    free(out);
}

/* The store mounted by the other account at ~/m, with extra options. */
static void own_mount(const char *extra)
{
    char *out = NULL;
    int rc = tu_sh(&E, &other, &out, "$MFS mount --store '%s:'\"$HOME_DIR\"/m --cache-dir "
                                     "\"$HOME_DIR\"/cache --sync-interval 5 %s", store, extra);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
}

/* An account's own mount: every process the kernel lets in is the files'
 * owner, so the kernel's mode checks (default_permissions) are left out
 * (fs/fsmount.c) and the daemon answers access(2) from the modes; a
 * --umask that takes the owner's write bit keeps them, and the owner is
 * refused the writes the modes refuse.  Failed before: default_permissions
 * on every mount. */
Test(security_files, own_mount_checks_modes_only_where_they_refuse)
{
    char *out = NULL, m[400];
    snprintf(m, sizeof(m), "%s/m", other.home);
    own_mount("");
    cr_expect(!mnt_has_option(m, "default_permissions"), "the owner's own mount checks modes");
    int rc = tu_sh(&E, &other, &out,
                   "cd \"$HOME_DIR\"/m/notes && echo more >> a.md && cat a.md && test -w a.md && "
                   "! test -x a.md && test -x . && echo new > b.md && "
                   "{ (./a.md) 2>/dev/null; echo \"exec $?\"; }");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out, "secret\nmore\nexec 126\n");
    free(out);
    cr_assert_eq(tu_sh(&E, &other, &out, "$MFS unmount --all"), 0, "%s", out);
    free(out);

    own_mount("--umask 222");
    cr_expect(mnt_has_option(m, "default_permissions"), "--umask 222 left the checks out");
    rc = tu_sh(&E, &other, &out, "cd \"$HOME_DIR\"/m/notes && cat a.md && ! test -w a.md && "
                                 "! test -w . && { echo x >> a.md; } 2>&1; echo x > c.md");
    cr_expect_neq(rc, 0, "the owner wrote what --umask 222 made read-only: %s", out);
    cr_expect(out && strstr(out, "secret\nmore\n") && strstr(out, "Permission denied"), "%s",
              out);
    free(out);
}

Test(security_files, bad_umask_is_refused)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/pub/s' --umask 999", store, TU_DIR);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "--umask must be an octal mode"), "%s", out);
    free(out);
}

/* An account aborts its own mount's connection (the abort file of its
 * connection is its own): the daemon, not root, detaches the dead mount
 * through fusermount3 and removes the directory it made, so the account
 * mounts the store there again.  Before: the mount stayed, answering
 * ENOTCONN, and the next mount there was refused. */
Test(security_files, an_own_mount_whose_connection_is_aborted_is_detached)
{
    char *out = NULL, m[400];
    snprintf(m, sizeof(m), "%s/m", other.home);
    own_mount("");
    /* fusectl mounted by root if it is not (left mounted: the daemons of
     * other suites may be using it, and mount it themselves too). */
    mnt_sh(&E, NULL, "grep -q ' /sys/fs/fuse/connections ' /proc/self/mountinfo || "
                     "mount -t fusectl fusectl /sys/fs/fuse/connections");
    int rc = tu_sh(&E, &other, &out, "d=$(stat -c %%d \"$HOME_DIR\"/m) && "
                                     "echo 1 > /sys/fs/fuse/connections/$(( (d & 255) | "
                                     "((d >> 12) & ~255) ))/abort");
    cr_assert_eq(rc, 0, "cannot abort the connection: %s", out);
    free(out);
    for (int i = 0; i < 150 && (mnt_is_mounted(m) || access(m, F_OK) == 0); i++)
        usleep(100 * 1000);
    cr_expect(!mnt_is_mounted(m), "the aborted mount was left in place");
    cr_expect_neq(access(m, F_OK), 0, "the mount's directory was left");
    own_mount("");
    rc = tu_sh(&E, &other, &out, "cat \"$HOME_DIR\"/m/notes/a.md");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out, "secret\n");
    free(out);
}
