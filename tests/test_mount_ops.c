/* test_mount_ops.c - what an operator sees of a running daemon: the log
 * targets (--log-file -, syslog on a socket of the test's own, a file
 * that SIGHUP reopens, a target that cannot be opened), systemd's
 * READY=1/STOPPING=1 on a notify socket of the test's own, unmount's exit
 * status and list of what it left unpushed, the listing progress on a
 * terminal, content cached / total in status, and mtime = updated_at. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mnt.h"

static struct mnt_env E;
static char *store;
static char mp[400];

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Ops");
    cr_assert_not_null(store);
    free(t_create_memory(&E.msd, store, "/notes/a.md", "alpha\n"));
    snprintf(mp, sizeof(mp), "%s/s", E.mnt);
}

static void teardown(void)
{
    mnt_teardown(&E);
    free(store);
    store = NULL;
}

TestSuite(mount_ops, .init = setup, .fini = teardown, .timeout = 150);

/* A Unix datagram socket bound at path (the test's syslog or notify). */
static int dgram_at(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(path), sizeof(a.sun_path));
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0, "bind %s", path);
    return fd;
}

/* Receives datagrams until one contains want (true), or none came for
 * timeout_s.  The datagram is copied to got. */
static bool recv_until(int fd, const char *want, int timeout_s, char *got, size_t len)
{
    struct pollfd p = {fd, POLLIN, 0};
    while (poll(&p, 1, timeout_s * 1000) == 1) {
        ssize_t r = recv(fd, got, len - 1, 0);
        if (r < 0)
            return false;
        got[r] = '\0';
        if (strstr(got, want))
            return true;
    }
    got[0] = '\0';
    return false;
}

Test(mount_ops, log_file_dash_is_stderr_not_a_file)
{
    char *out = NULL;
    /* The daemon keeps its stderr: a file the test reads. */
    int rc = mnt_sh(&E, &out, "mkdir -p %s/cwd && cd %s/cwd && $MFS mount --store '%s:%s' "
                              "--cache-dir \"$CACHE\" --log-file - 2>%s/stderr.txt",
                    E.root, E.root, store, mp, E.root);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    pid_t pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 0);
    kill(pid, SIGHUP); /* one more line, after the mount */
    cr_expect(mnt_wait_sh(&E, 20, "grep -q 'log reopened' %s/stderr.txt", E.root),
              "the daemon's log did not reach its stderr");
    cr_expect_eq(mnt_sh(&E, NULL, "test -e %s/cwd/- || test -e /-", E.root), 1,
                 "--log-file - created a file named '-'");
}

Test(mount_ops, unopenable_log_file_refuses_the_mount)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s' --cache-dir \"$CACHE\" "
                              "--log-file %s/no/such/dir/x.log", store, mp, E.root);
    cr_expect_eq(rc, 1, "a log in a missing directory was accepted: %s", out);
    cr_expect(strstr(out, "cannot open the log file"), "%s", out);
    cr_expect(strstr(out, "No such file or directory"), "the reason is missing: %s", out);
    free(out);
    cr_expect_not(mnt_is_mounted(mp), "mounted although its log is lost");
    cr_expect_eq(mnt_sh(&E, NULL, "test -e %s", mp), 1, "the mount directory was left");
}

/* The file is named relative to the directory the mount command ran in:
 * the daemon, in the background, runs from "/" and used to reopen it
 * there (as root, a new /d.log; else nothing, and the log went on into
 * the moved file). */
Test(mount_ops, sighup_reopens_a_moved_log_file)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "cd %s && $MFS mount --store '%s:%s' --cache-dir \"$CACHE\" "
                              "--log-file d.log", E.root, store, mp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert(mnt_wait_sh(&E, 20, "grep -q 'mounted memory store' %s/d.log", E.root));
    pid_t pid = mnt_daemon_pid(&E);
    mnt_sh(&E, NULL, "mv %s/d.log %s/d.log.1", E.root, E.root);
    kill(pid, SIGHUP);
    cr_expect(mnt_wait_sh(&E, 20, "grep -q 'log reopened' %s/d.log", E.root),
              "SIGHUP did not start a new log file");
    cr_expect_eq(mnt_sh(&E, NULL, "grep -q 'log reopened' %s/d.log.1", E.root), 1,
                 "the line went to the moved file");
    cr_expect_eq(mnt_sh(&E, NULL, "stat -c %%a %s/d.log | grep -qx 600", E.root), 0,
                 "the log file is not private");
}

Test(mount_ops, syslog_lines_reach_the_syslog_socket)
{
    char sock[400], got[8192];
    snprintf(sock, sizeof(sock), "%s/log.sock", E.root);
    char *out = NULL;
    /* No socket: refused with the reason. */
    int rc = mnt_sh(&E, &out, "MEMSTOREFS_SYSLOG_SOCKET=%s $MFS mount --store '%s:%s' "
                              "--cache-dir \"$CACHE\" --log-file syslog", sock, store, mp);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "cannot reach the syslog socket"), "%s", out);
    free(out);
    cr_expect_not(mnt_is_mounted(mp));

    int fd = dgram_at(sock);
    rc = mnt_sh(&E, &out, "MEMSTOREFS_SYSLOG_SOCKET=%s $MFS mount --store '%s:%s' "
                          "--cache-dir \"$CACHE\" --log-file syslog", sock, store, mp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_expect(recv_until(fd, "mounted memory store", 20, got, sizeof(got)),
              "no 'mounted memory store' line on the syslog socket");
    /* As syslog(3) sends it: <daemon.info>TIMESTAMP ident[pid]: message. */
    char head[64];
    snprintf(head, sizeof(head), "memstorefs[%d]: level=info", (int)mnt_daemon_pid(&E));
    cr_expect(strncmp(got, "<30>", 4) == 0 && strstr(got, head), "%s", got);
    cr_expect(strstr(got, store), "%s", got);
    close(fd);
}

Test(mount_ops, systemd_hears_ready_then_stopping)
{
    char sock[400], got[4096];
    snprintf(sock, sizeof(sock), "%s/notify.sock", E.root);
    int fd = dgram_at(sock);
    /* As a Type=notify unit runs it: in the foreground, NOTIFY_SOCKET set. */
    mnt_sh(&E, NULL, "NOTIFY_SOCKET=%s setsid $MFS mount -f --store '%s:%s' "
                     "--cache-dir \"$CACHE\" >%s/fg.log 2>&1 &", sock, store, mp, E.root);
    cr_assert(recv_until(fd, "READY=1", 30, got, sizeof(got)), "no READY=1");
    cr_expect(mnt_is_mounted(mp), "READY=1 came before the store was mounted");
    cr_expect(strstr(got, "STATUS=1 memory store mounted"), "%s", got);
    pid_t pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 0);
    kill(pid, SIGTERM);
    cr_expect(recv_until(fd, "STOPPING=1", 30, got, sizeof(got)), "no STOPPING=1");
    cr_expect(mnt_wait_sh(&E, 30, "! grep -q ' %s ' /proc/self/mountinfo", mp));
    close(fd);
}

Test(mount_ops, unmount_lists_what_it_left_unpushed_and_exits_3)
{
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "s", false, "", &out), 0, "%s", out);
    free(out);
    mnt_hold_writes(&E);
    cr_assert_eq(mnt_sh(&E, NULL, "echo new > %s/notes/new.md && echo more >> %s/notes/a.md",
                        mp, mp), 0);
    int rc = mnt_sh(&E, &out, "$MFS unmount %s", mp);
    cr_expect_eq(rc, 3, "unmount left changes unpushed and exited %d: %s", rc, out);
    cr_expect(strstr(out, "2 local changes not pushed"), "%s", out);
    char want[600];
    snprintf(want, sizeof(want), "not pushed: %s/notes/new.md (new file)", mp);
    cr_expect(strstr(out, want), "'%s' missing from: %s", want, out);
    snprintf(want, sizeof(want), "not pushed: %s/notes/a.md (changed locally)", mp);
    cr_expect(strstr(out, want), "'%s' missing from: %s", want, out);
    free(out);
    cr_expect_not(mnt_is_mounted(mp));
    /* Nothing left: 0. */
    cr_assert_eq(mnt_mount(&E, store, "s", false, "", NULL), 0);
    cr_expect_eq(mnt_sh(&E, &out, "$MFS unmount --all"), 3, "%s", out); /* still held */
    free(out);
}

Test(mount_ops, unmount_with_everything_pushed_exits_0)
{
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "s", false, "", &out), 0, "%s", out);
    free(out);
    cr_assert_eq(mnt_sh(&E, NULL, "echo new > %s/notes/new.md", mp), 0);
    int rc = mnt_sh(&E, &out, "$MFS unmount --all");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_null(strstr(out, "not pushed"), "%s", out);
    free(out);
}

Test(mount_ops, big_listing_shows_progress_on_a_terminal_only)
{
    /* 230 memories: three pages of 100. */
    const char *bodies[230];
    char *owned[230];
    for (int i = 0; i < 230; i++) {
        char path[64];
        snprintf(path, sizeof(path), "/big/m%03d.md", i);
        owned[i] = tj_memory_body(path, "x\n");
        bodies[i] = owned[i];
    }
    long status[230];
    char path[300];
    snprintf(path, sizeof(path), "/v1/memory_stores/%s/memories", store);
    cr_assert_eq(t_api_multi(&E.msd, "POST", path, bodies, 230, 8, status, NULL), 0);
    for (int i = 0; i < 230; i++) {
        cr_assert_eq(status[i], 200);
        free(owned[i]);
    }
    char *out = NULL;
    /* script(1) gives the command a terminal. */
    int rc = mnt_sh(&E, &out, "script -qec \"$MFS mount --store '%s:%s' --cache-dir $CACHE\" "
                              "/dev/null", store, mp);
    cr_assert_eq(rc, 0, "%s", out);
    char want[300];
    snprintf(want, sizeof(want), "listing memory store %s: 100 memories...", store);
    cr_expect(strstr(out, want), "no progress line on a terminal: %s", out);
    snprintf(want, sizeof(want), "listing memory store %s: 231 memories", store);
    cr_expect(strstr(out, want), "no final count: %s", out);
    free(out);
    cr_assert_eq(mnt_sh(&E, NULL, "$MFS unmount --all"), 0);
    rc = mnt_mount(&E, store, "s", false, "", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_null(strstr(out, "listing memory store"), "progress without a terminal: %s", out);
    free(out);
    /* status: the prefetch's progress as cached / total. */
    cr_expect(mnt_wait_sh(&E, 60, "$MFS status | grep -q 'content cached  231 / 231'"));
    cr_expect(mnt_wait_sh(&E, 60, "$MFS status --json | grep -q "
                                  "'\"content_cached\":231,\"content_total\":231'"));
}

Test(mount_ops, mtime_is_the_memory_updated_at)
{
    /* A memory written a second before the mount: the cache time would differ. */
    sleep(1);
    free(t_create_memory(&E.msd, store, "/notes/b.md", "beta\n"));
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "s", false, "", &out), 0, "%s", out);
    free(out);
    struct tresp r;
    cr_assert_eq(t_req(&E.msd, "GET", NULL, &r, "/v1/memory_stores/%s/memories?limit=100",
                       store), 200);
    const cJSON *it;
    int checked = 0;
    cJSON_ArrayForEach(it, tj_get(r.json, "data")) {
        const char *p = tj_str(it, "path"), *upd = tj_str(it, "updated_at");
        cr_assert(p && upd);
        /* updated_at is UTC with milliseconds; stat gives the same time. */
        mnt_sh(&E, &out, "stat -c %%.3Y %s%s", mp, p);
        char *exp = NULL;
        mnt_sh(&E, &exp, "date -u -d '%s' +%%s.%%3N", upd);
        cr_expect_str_eq(out, exp, "%s: mtime %s is not updated_at %s", p, out, upd);
        free(out);
        free(exp);
        checked++;
    }
    tresp_free(&r);
    cr_expect_eq(checked, 2);
    /* Edited locally: the write time, later than updated_at. */
    cr_assert_eq(mnt_sh(&E, NULL, "sleep 1; echo more >> %s/notes/b.md", mp), 0);
    cr_expect_eq(mnt_sh(&E, NULL, "test %s/notes/b.md -nt %s/notes/a.md && "
                                  "ls -t %s/notes | head -n1 | grep -qx b.md", mp, mp, mp), 0);
}

/* A mount still setting up (the store's lock taken, the listing waiting
 * for a slow server) is shown as mounting, and an unmount waits for it
 * to be mounted, then unmounts it.  Before the fix both asked a control
 * socket that did not exist yet: status said the daemon "did not answer:
 * No such file or directory" and exited 1, and the unmount failed the
 * same way while the mount went on and stayed. */
Test(mount_ops, a_mount_being_set_up_is_shown_and_can_be_unmounted)
{
    struct tresp r = {0};
    cr_assert_eq(t_admin(&E.msd, "POST", "/admin/faults",
                         "{\"action\":\"latency\",\"latency_ms\":4000,\"count\":1,"
                         "\"method\":\"GET\",\"path\":\"/v1/memory_stores/*/memories\"}", &r), 0);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s' --cache-dir \"$CACHE\" & "
                    "while ! ls $MEMSTOREFS_RUNTIME_DIR/store-*.lock >/dev/null 2>&1; do "
                    "sleep 0.05; done; sleep 0.3; "
                    "$MFS status; echo \"status=$?\"; $MFS status --json; "
                    "$MFS unmount '%s'; echo \"unmount=$?\"; wait; echo \"mount=$?\"",
                    store, mp, mp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "MOUNTING") && strstr(out, "\"state\":\"mounting\""), "%s", out);
    cr_expect(strstr(out, "status=0\n"), "%s", out);
    cr_expect(strstr(out, "unmount=0\n") && strstr(out, "mount=0\n"), "%s", out);
    free(out);
    cr_expect_not(mnt_is_mounted(mp), "the mount set up during the unmount stayed");
}

/* A command that looks at the store's lock file (status, sync, unmount
 * --all take each one shared for a moment, to see whether a daemon holds
 * it) while a mount of that store starts: the mount waits for it and
 * goes on.  Before the fix it was refused at once: "already mounted on
 * this host at ? (memstorefs pid 0)". */
Test(mount_ops, a_lock_file_looked_at_while_the_mount_starts_is_taken)
{
    char lock[700];
    snprintf(lock, sizeof(lock), "%s/store-%s.lock", E.run, store);
    int fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0, "%s: %s", lock, strerror(errno));
    cr_assert_eq(flock(fd, LOCK_SH), 0); /* a file no daemon wrote yet, looked at */
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(fd);
        char *out = NULL;
        int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s' --cache-dir \"$CACHE\"", store, mp);
        if (rc)
            fprintf(stderr, "%s", out ? out : "");
        _exit(rc == 0 ? 0 : 1);
    }
    /* 1.5 s: the mount has reached the lock by then on any machine, and
     * waits up to 2 s from its first try (300 ms, until 6 December 2026,
     * could end before a slow start reached it). */
    usleep(1500 * 1000);
    int st = 0;
    /* Still waiting for the lock (before the fix it had failed by now;
     * a mount that had not reached the lock yet would prove nothing). */
    cr_expect_eq(waitpid(child, &st, WNOHANG), 0, "the mount did not wait for the lock");
    cr_assert_eq(flock(fd, LOCK_UN), 0);
    close(fd);
    if (waitpid(child, &st, WNOHANG) == 0)
        waitpid(child, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the mount was refused");
    cr_expect(mnt_is_mounted(mp), "not mounted");
    char *out = NULL;
    cr_expect_eq(mnt_sh(&E, &out, "cat '%s/notes/a.md'", mp), 0, "%s", out);
    cr_expect_str_eq(out ? out : "", "alpha\n");
    free(out);
}

/* Mount paths and ids the daemon refuses before mounting anything:
 * a path that would hide its own cache directory (the FUSE mount covered
 * cache.db), a path with a line break (it forged lines of the store's lock
 * file, which the dead-mount cleanup acts on as root), an id too long for
 * the lock file (two such ids shared one lock).  Each was taken before. */
Test(mount_ops, paths_and_ids_that_would_break_the_daemon_are_refused)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s/c2' --cache-dir '%s/c2/inner'", store,
                    E.root, E.root);
    cr_expect_neq(rc, 0, "a mount over its own cache directory");
    cr_expect(out && strstr(out, "would hide the cache directory"), "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "$MFS mount --store \"%s:$MNT/x\ncreated=/tmp/victim\" "
                          "--cache-dir \"$CACHE\"", store);
    cr_expect_neq(rc, 0, "a mount path with a line break");
    cr_expect(out && strstr(out, "not a clean absolute path"), "%s", out);
    free(out);
    char id[200];
    memset(id, 'a', 150);
    id[150] = '\0';
    rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s' --cache-dir \"$CACHE\"", id, mp);
    cr_expect_neq(rc, 0, "a 150-character id was taken");
    cr_expect(out && strstr(out, "too long"), "%s", out);
    free(out);
    cr_expect_not(mnt_is_mounted(mp));
}

/* A read-only store stays read-only for the kernel whatever -o says: the
 * caller's options used to come after the daemon's ",ro", and a "rw"
 * there cleared the mount's read-only flag. */
Test(mount_ops, o_rw_does_not_make_a_read_only_mount_writable_for_the_kernel)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s:ro' --cache-dir \"$CACHE\" -o rw && "
                              "grep ' %s ' /proc/self/mountinfo", store, mp, mp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, " ro,") || strstr(out, " ro "), "not mounted ro: %s", out);
    free(out);
}

/* A relative MEMSTOREFS_RUNTIME_DIR names one directory for the daemon
 * and the commands: the daemon (running from "/") looked for its lock
 * file and socket elsewhere and left them behind at its unmount. */
Test(mount_ops, a_relative_runtime_dir_is_cleaned_up_at_unmount)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "cd %s && export MEMSTOREFS_RUNTIME_DIR=rel-run && "
                              "$MFS mount --store '%s:%s' --cache-dir \"$CACHE\" && "
                              "ls rel-run | grep -c . && $MFS unmount '%s'", E.root, store, mp, mp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* The daemon removes its socket as it exits, after its answer. */
    cr_expect(mnt_wait_sh(&E, 10, "test -z \"$(ls %s/rel-run)\"", E.root),
              "files left in the runtime directory");
}

/* A runtime directory whose path leaves no room for the control socket's
 * name (a socket address holds 107 bytes) is refused before anything is
 * mounted.  Before, the stores were mounted with a warning, and no
 * `memstorefs unmount` could reach the daemon afterwards. */
Test(mount_ops, a_runtime_dir_too_long_for_the_control_socket_is_refused)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "d=%s/run-$(printf 'x%%.0s' $(seq 100)) && mkdir -m 700 \"$d\" && "
                              "MEMSTOREFS_RUNTIME_DIR=\"$d\" $MFS mount --store '%s:%s' "
                              "--cache-dir \"$CACHE\" 2>&1", E.root, store, mp);
    cr_expect_neq(rc, 0, "mounted: %s", out);
    cr_expect(strstr(out, "too long for the control socket"), "%s", out);
    free(out);
    cr_expect(!mnt_is_mounted(mp), "the store was mounted");
}

/* The directories a mount makes for its path are 0755 whatever the
 * caller's umask: a root worker's umask 077 made them 0700, which shut
 * the --uid user out of its own mount. */
Test(mount_ops, the_directories_made_for_a_mount_are_0755_under_any_umask)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "umask 077 && $MFS mount --store '%s:%s/made/deeper/s' "
                              "--cache-dir \"$CACHE\" 2>&1 && stat -c %%a %s/made %s/made/deeper",
                    store, E.mnt, E.mnt, E.mnt);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "\n755\n755\n"), "%s", out);
    free(out);
}
