/* test_security_runtime.c - the runtime directory, its lock files and
 * sockets against another local account, and `unmount` against a mount
 * that is not ours.  Each attack runs for real: a victim user and an
 * attacker user made by the test (users.h), the victim mounting through
 * fusermount3 with the default runtime directory of a user without
 * XDG_RUNTIME_DIR (/tmp/memstorefs-UID). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mnt.h"
#include "users.h"

static struct mnt_env E;
static char *store;
static struct tuser victim, attacker;
static char rundir[64];

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Runtime");
    cr_assert_not_null(store);
    free(t_create_memory(&E.msd, store, "/notes/a.md", "a\n"));
    tu_setup();
    tu_create(&victim, "mfs-victim");
    tu_create(&attacker, "mfs-attacker");
    tu_runtime_dir(&victim, rundir, sizeof(rundir));
}

static void teardown(void)
{
    if (victim.uid)
        tu_sh(&E, &victim, NULL, "timeout 60 $MFS unmount --all >/dev/null 2>&1");
    tu_teardown();
    mnt_teardown(&E);
    free(store);
    store = NULL;
}

TestSuite(security_runtime, .init = setup, .fini = teardown, .timeout = 180);

/* The victim's mount at ~/m with its cache in ~/cache. */
static int victim_mount(char **out)
{
    return tu_sh(&E, &victim, out, "$MFS mount --store '%s:'\"$HOME_DIR\"/m --cache-dir "
                                   "\"$HOME_DIR\"/cache --sync-interval 5", store);
}

/* victim_mount, then its daemon's pid. */
static pid_t victim_daemon(void)
{
    char *out = NULL;
    int rc = victim_mount(&out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    pid_t pid = tu_daemon_pid(&victim);
    cr_assert_gt(pid, 0, "no daemon found");
    return pid;
}

static void expect_victim_file(const char *want)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/important.txt", victim.home);
    char *got = mnt_read(path, NULL);
    cr_expect_str_eq(got ? got : "(missing)", want, "the victim's file was changed");
    free(got);
}

static void expect_not_mounted(void)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/m", victim.home);
    cr_expect(!mnt_is_mounted(path), "the refused mount is mounted anyway");
    cr_expect_neq(access(path, F_OK), 0, "the refused mount left its directory");
}

Test(security_runtime, symlinked_lock_in_a_planted_runtime_dir)
{
    char *out = NULL;
    cr_assert_eq(tu_sh(&E, &victim, NULL, "echo precious > \"$HOME_DIR\"/important.txt && "
                                          "chmod 644 \"$HOME_DIR\"/important.txt"), 0);
    /* The attacker plants the victim's runtime directory, world-writable,
     * with the lock file of the store linked to the victim's file. */
    cr_assert_eq(tu_sh(&E, &attacker, &out, "mkdir -m 777 %s && ln -s %s/important.txt "
                                            "%s/store-%s.lock", rundir, victim.home, rundir,
                       store), 0, "%s", out);
    free(out);
    int rc = victim_mount(&out);
    cr_expect_neq(rc, 0, "the mount went ahead in a runtime directory the attacker owns: %s",
                  out);
    cr_expect(strstr(out, "runtime directory") && strstr(out, rundir) &&
              strstr(out, "mfs-attacker"),
              "the message does not say which directory is refused and why: %s", out);
    free(out);
    expect_victim_file("precious\n");
    expect_not_mounted();
}

Test(security_runtime, world_writable_runtime_dir_of_the_victim_is_refused)
{
    char *out = NULL;
    cr_assert_eq(tu_sh(&E, &victim, NULL, "mkdir %s && chmod 777 %s", rundir, rundir), 0);
    int rc = victim_mount(&out);
    cr_expect_neq(rc, 0, "a runtime directory every account can write was used: %s", out);
    cr_expect(strstr(out, rundir) && strstr(out, "0777") && strstr(out, "0700"),
              "the message does not give the mode and the fix: %s", out);
    free(out);
    expect_not_mounted();
}

Test(security_runtime, symlinked_lock_in_the_victims_own_dir_is_not_followed)
{
    char *out = NULL;
    cr_assert_eq(tu_sh(&E, &victim, &out,
                       "echo precious > \"$HOME_DIR\"/important.txt && mkdir -m 700 %s && "
                       "ln -s \"$HOME_DIR\"/important.txt %s/store-%s.lock", rundir, rundir,
                       store), 0, "%s", out);
    free(out);
    int rc = victim_mount(&out);
    cr_expect_neq(rc, 0, "a symbolic link was taken for the lock file: %s", out);
    cr_expect(strstr(out, "symbolic link"), "the message does not say why: %s", out);
    free(out);
    expect_victim_file("precious\n");
    expect_not_mounted();
}

Test(security_runtime, attacker_cannot_remove_the_lock_or_the_socket)
{
    char *out = NULL;
    /* A planted empty directory is refused... */
    cr_assert_eq(tu_sh(&E, &attacker, NULL, "mkdir -m 777 %s", rundir), 0);
    int rc = victim_mount(&out);
    cr_expect_neq(rc, 0, "the mount used the attacker's directory: %s", out);
    free(out);
    cr_assert_eq(tu_sh(&E, &attacker, NULL, "rmdir %s", rundir), 0);
    /* ...and the directory the mount makes itself is the victim's alone. */
    rc = victim_mount(&out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    struct stat st;
    cr_assert_eq(lstat(rundir, &st), 0);
    cr_expect_eq(st.st_uid, victim.uid);
    cr_expect_eq(st.st_mode & 07777, 0700, "runtime dir mode %o", st.st_mode & 07777);
    rc = tu_sh(&E, &attacker, &out, "rm -f %s/*.lock %s/*.sock; ls %s", rundir, rundir, rundir);
    cr_expect_neq(rc, 0, "the attacker could list the runtime directory: %s", out);
    free(out);
    rc = tu_sh(&E, &victim, &out, "$MFS status");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, store) && !strstr(out, "no memory store is mounted"),
              "the victim's status lost the store: %s", out);
    free(out);
    rc = tu_sh(&E, &victim, &out, "$MFS unmount --all");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
}

Test(security_runtime, unmount_of_a_dead_mount_leaves_another_filesystem_alone)
{
    char *out = NULL;
    mnt_mount_dead(&E, store, "dead");
    int rc;
    /* By hand: the dead mount is detached, and a tmpfs takes its place. */
    rc = mnt_sh(&E, &out, "umount -l $MNT/dead && mount -t tmpfs mfs-test-tmpfs $MNT/dead && "
                          "echo mine > $MNT/dead/keep.txt");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "$MFS unmount --all");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "left alone") && strstr(out, "tmpfs"),
              "unmount does not say it left the tmpfs alone: %s", out);
    free(out);
    char path[400];
    snprintf(path, sizeof(path), "%s/dead", E.mnt);
    cr_expect(mnt_is_mounted(path), "unmount --all detached a tmpfs that is not ours");
    mnt_sh(&E, &out, "cat $MNT/dead/keep.txt");
    cr_expect_str_eq(out, "mine\n", "the tmpfs lost its file");
    free(out);
    /* The stale lock is gone: status no longer reports a dead mount. */
    mnt_sh(&E, &out, "$MFS status");
    cr_expect(!strstr(out, "DEAD"), "%s", out);
    free(out);
    mnt_sh(&E, NULL, "umount $MNT/dead");
}

/* Nor another account's mount of the same store: root's dead mount at
 * the victim's ~/m, detached by hand, and the victim's own mount of the
 * store made there since.  Root cannot read that mount's id (a FUSE
 * mount without allow_other refuses even that to root), so it cannot
 * tell it from its dead mount: unmount leaves it mounted and says so, and
 * root's mount of the store elsewhere stays refused.  Before, root's
 * unmount detached the victim's live mount. */
Test(security_runtime, unmount_of_a_dead_mount_leaves_another_account_s_mount_of_the_store)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/m' --cache-dir \"$CACHE\" "
                              "--sync-interval 5", store, victim.home);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    pid_t dead = mnt_daemon_pid(&E);
    cr_assert_gt(dead, 1);
    kill(dead, SIGKILL);
    for (int i = 0; i < 50 && kill(dead, 0) == 0; i++)
        usleep(100 * 1000);
    if (mnt_sh(&E, NULL, "grep -q '^mount_id=[1-9]' \"$MEMSTOREFS_RUNTIME_DIR\"/store-*")) {
        /* Before Linux 6.8 the kernel does not tell a mount's id: any mount
         * of the store at the path is taken for the dead one. */
        cr_skip_test("the lock file has no mount_id= line (a kernel before 6.8)");
    }
    rc = mnt_sh(&E, &out, "umount -l %s/m && rmdir %s/m", victim.home, victim.home);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    victim_daemon();
    rc = mnt_sh(&E, &out, "$MFS unmount --all");
    cr_expect_neq(rc, 0, "unmount said it cleaned up: %s", out);
    cr_expect(out && strstr(out, "cannot be told") && strstr(out, "Permission denied"),
              "unmount does not say why it left the mount: %s", out);
    free(out);
    char path[400];
    snprintf(path, sizeof(path), "%s/m", victim.home);
    cr_expect(mnt_is_mounted(path), "root's unmount detached the victim's live mount");
    rc = tu_sh(&E, &victim, &out, "cat \"$HOME_DIR\"/m/notes/a.md");
    cr_expect_str_eq(out ? out : "", "a\n", "the victim's mount does not serve (exit %d)", rc);
    free(out);
    rc = mnt_mount(&E, store, "else", false, "", &out);
    cr_expect_eq(rc, 1, "root mounted the store over a dead mount it cannot tell: %s", out);
    free(out);
    /* Once the victim has unmounted, root's record is cleaned up. */
    rc = tu_sh(&E, &victim, &out, "$MFS unmount --all");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "$MFS unmount --all");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
}

/* The credential the daemon was started with is not left where another
 * process of its account can read it: /proc/PID/environ showed
 * ANTHROPIC_API_KEY to every process of the daemon's user (the agent's
 * tools, when the daemon runs as the agent's account with a key the
 * agent was not given), and every program the daemon runs inherited it.
 * Before the fix: the key read back whole.  Root reads the file here:
 * the next test shows the account itself cannot. */
Test(security_runtime, the_daemon_s_environment_does_not_hold_the_key)
{
    char *out = NULL;
    pid_t pid = victim_daemon();
    int rc;
    /* Read as root: since the daemon is not dumpable, its own account can
     * no longer open the file at all (the next test). */
    rc = mnt_sh(&E, &out, "tr '\\0' '\\n' < /proc/%d/environ | "
                          "grep -c '^ANTHROPIC_\\(API_KEY\\|AUTH_TOKEN\\|WORK_SECRET\\)=.'; "
                          "tr '\\0' '\\n' < /proc/%d/environ | grep -c test-key",
           (int)pid, (int)pid);
    cr_expect_str_eq(out ? out : "", "0\n0\n",
                     "the daemon's environment still holds the credential: %s", out);
    free(out);
    /* The daemon itself works on: it has the key, and uses it. */
    rc = tu_sh(&E, &victim, &out, "cat \"$HOME_DIR\"/m/notes/a.md && "
                                  "echo new > \"$HOME_DIR\"/m/n.md && $MFS sync \"$HOME_DIR\"/m --wait");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    char path[200];
    snprintf(path, sizeof(path), "/v1/memory_stores/%s/memories?view=full",
             store);
    struct tresp r = {0};
    cr_assert_eq(t_api(&E.msd, "GET", path, NULL, &r), 0);
    cr_expect(r.body && strstr(r.body, "\"content\":\"new\\n\""),
              "the daemon could not push with its key: %s", r.body);
    tresp_free(&r);
}

/* Searches every readable, writable mapping of the process whose pid is
 * its argument for the key: "found" or "not found", or which of
 * /proc/PID/maps and /proc/PID/mem was refused.  (No '%' and no single
 * quote: it goes through a format and the shell's quotes.)  Mappings
 * past 256 MiB are a sanitizer's shadow, never the heap. */
static const char scan_py[] =
    "import sys\n"
    "pid = sys.argv[1]\n"
    "try:\n"
    "    maps = open(\"/proc/\" + pid + \"/maps\").read().splitlines()\n"
    "except PermissionError:\n"
    "    print(\"maps denied\"); sys.exit(0)\n"
    "try:\n"
    "    mem = open(\"/proc/\" + pid + \"/mem\", \"rb\", 0)\n"
    "except PermissionError:\n"
    "    print(\"mem denied\"); sys.exit(0)\n"
    "found = False\n"
    "for line in maps:\n"
    "    f = line.split()\n"
    "    if not f[1].startswith(\"rw\"): continue\n"
    "    lo, hi = (int(x, 16) for x in f[0].split(\"-\"))\n"
    "    if hi - lo > 1 << 28: continue\n"
    "    try:\n"
    "        mem.seek(lo); found = found or b\"test-key\" in mem.read(hi - lo)\n"
    "    except (OSError, OverflowError, ValueError, MemoryError):\n"
    "        pass\n"
    "print(\"found\" if found else \"not found\")\n";

/* Nor can another process of its account read the key out of the
 * daemon's memory, or get it from a core dump: the daemon holds the key
 * for its whole life (every request sends it), and /proc/PID/mem, ptrace
 * and core files gave it to any process of the same user (the agent's
 * tools, when the daemon runs as the agent's account).  Before the fix
 * the scan below, run as the victim, found the key (this host has no
 * Yama; where ptrace_scope is 1, /proc/PID/mem was refused before too,
 * but not /proc/PID/maps, which only a non-dumpable process keeps from
 * its own account).  Root, which keeps its access, finds the key: the
 * scan can see it. */
Test(security_runtime, another_process_of_the_account_cannot_read_the_daemon_s_memory)
{
    char *out = NULL;
    pid_t pid = victim_daemon();
    int rc;
    rc = tu_sh(&E, &victim, &out, "python3 -c '%s' %d 2>&1", scan_py, (int)pid);
    cr_expect_str_eq(out ? out : "", "maps denied\n",
                     "a process of the daemon's account read its memory: %s (exit %d)", out, rc);
    free(out);
    rc = mnt_sh(&E, &out, "python3 -c '%s' %d 2>&1", scan_py, (int)pid);
    cr_expect_str_eq(out ? out : "", "found\n", "root's scan did not find the key: %s (exit %d)",
                     out, rc);
    free(out);
    /* The daemon works on with the key it holds. */
    rc = tu_sh(&E, &victim, &out, "echo kept > \"$HOME_DIR\"/m/k.md && "
                                  "$MFS sync \"$HOME_DIR\"/m --wait");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
}
