/* test_mount_sync_unmount.c - the final sync: what was written right
 * before `memstorefs unmount` (or SIGTERM) is on the server afterwards;
 * with the server failing at unmount, the command returns within the
 * flush timeout, says what was not pushed, and the next mount with the
 * same cache directory pushes it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {
    "/edit.md", "before\n",
    "/gone.md", "to be removed\n",
    NULL,
};

static void setup(void)
{
    sy_start(seed);
}

static pid_t writer_pid; /* a child holding files open, killed in any case */

static void teardown(void)
{
    if (writer_pid > 0) {
        kill(writer_pid, SIGKILL);
        waitpid(writer_pid, NULL, 0);
        writer_pid = 0;
    }
    sy_stop();
}

TestSuite(mount_sync_unmount, .init = setup, .fini = teardown, .timeout = 120);

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static const char *const after[] = {
    "/edit.md", "after\n", "/new/one.md", "one\n", "/two.md", "two\n", NULL,
};

#define CHANGE "echo after > edit.md && mkdir new && echo one > new/one.md && " \
               "echo two > two.md && rm gone.md"

Test(mount_sync_unmount, changes_made_right_before_unmount_are_pushed)
{
    sy_mount(false, "");
    sy_after_sync();
    char *out = NULL;
    /* Changed and unmounted at once: no interval sync in between. */
    int rc = sy_run(&out, CHANGE " && cd / && $MFS unmount '%s'", mnt);
    cr_assert_eq(rc, 0, "unmount failed: %s", out);
    free(out);
    cr_expect(!mnt_is_mounted(mnt), "still mounted");
    char *last = NULL;
    cr_expect(sy_wait_server(after, 0, &last), "the final sync did not push: %s", last);
    free(last);
}

Test(mount_sync_unmount, server_failing_at_unmount_then_the_next_mount_pushes)
{
    sy_mount(false, "--flush-timeout 3");
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, CHANGE), 0);
    /* Every API request answers 503 from now on. */
    sy_fault("{\"action\":\"status\",\"status\":503,\"count\":0}");
    double t0 = now_s();
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "timeout 60 $MFS unmount '%s'", mnt);
    double took = now_s() - t0;
    cr_expect_leq(took, 3 + 5, "unmount took %.1f s with --flush-timeout 3", took);
    cr_expect(!mnt_is_mounted(mnt), "still mounted (unmount exit %d: %s)", rc, out);
    cr_expect(strstr(out, "not pushed") != NULL, "unmount does not say what was not pushed: %s",
              out);
    cr_expect(strstr(out, "4 local changes") != NULL, "unmount miscounts: %s", out);
    free(out);
    cr_expect(sy_log_count("memory flush left changes unpushed", NULL) >= 1,
              "the log does not say what was not pushed");
    sy_clear_faults();
    char *last = NULL;
    cr_expect(sy_wait_server(seed, 0, &last), "the store changed meanwhile: %s", last);
    free(last);

    /* The same cache directory, mounted again, pushes everything. */
    sy_mount(false, "");
    cr_assert(sy_wait_server(after, WITHIN, &last), "the next mount did not push: %s", last);
    free(last);
    char *bad = sy_check_hashes();
    cr_expect_null(bad, "%s", bad);
    free(bad);
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
}

/* Alive and not a zombie (nobody may reap a daemon in a container). */
static bool alive(int pid)
{
    if (kill(pid, 0) != 0)
        return false;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    char *st = mnt_read(path, NULL);
    char *p = st ? strrchr(st, ')') : NULL;
    bool zombie = p && p[1] == ' ' && p[2] == 'Z';
    free(st);
    return !zombie;
}

/* Polls until pid has exited (a zombie counts), at most seconds. */
static bool wait_gone(int pid, int seconds)
{
    double t0 = now_s();
    while (alive(pid)) {
        if (now_s() - t0 >= seconds)
            return false;
        usleep(100 * 1000);
    }
    return true;
}

/* The pid of the daemon a mount command started, once its lock names it
 * (at most 10 s; 0 if none). */
static pid_t wait_daemon_pid(void)
{
    pid_t pid = 0;
    for (int i = 0; i < 200 && pid <= 1; i++) {
        pid = mnt_daemon_pid(&E);
        if (pid <= 1)
            usleep(50 * 1000);
    }
    return pid > 1 ? pid : 0;
}

Test(mount_sync_unmount, sigterm_runs_the_final_sync)
{
    sy_mount(false, "");
    sy_after_sync();
    int pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 1);
    cr_assert_eq(sy_run(NULL, CHANGE), 0);
    cr_assert_eq(kill(pid, SIGTERM), 0);
    bool gone = wait_gone(pid, 35);
    cr_assert(gone, "the daemon did not exit after SIGTERM");
    cr_expect(!mnt_is_mounted(mnt), "still mounted after SIGTERM");
    char *last = NULL;
    cr_expect(sy_wait_server(after, 0, &last), "SIGTERM did not push: %s", last);
    free(last);
}

/* Files still open when the worker ends the session: only what a writer
 * saved (fsync) is pushed; what no flush saved is kept in the cache as a
 * record (memstorefs conflicts), and a new file never saved is not
 * created at all (issue 8, case 4: the old code pushed the open buffers). */
Test(mount_sync_unmount, files_still_open_at_sigterm_push_only_what_was_saved)
{
    sy_mount(false, "--flush-timeout 10");
    sy_after_sync();
    int pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 1);
    char path[600];
    snprintf(path, sizeof(path), "%s/saved.md", mnt);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "saved\n", 6), 6);
    cr_assert_eq(fsync(fd), 0);
    cr_assert_eq(write(fd, "unsaved tail\n", 13), 13);
    snprintf(path, sizeof(path), "%s/never.md", mnt);
    int fd2 = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd2, 0);
    cr_assert_eq(write(fd2, "never saved\n", 12), 12);
    cr_assert_eq(kill(pid, SIGTERM), 0);
    bool gone = wait_gone(pid, 35);
    close(fd); /* the mount is gone: the errors do not matter */
    close(fd2);
    cr_assert(gone, "the daemon did not exit after SIGTERM");
    char *c = sy_content("/saved.md");
    cr_expect_str_eq(c ? c : "(missing)", "saved\n", "not the saved state that was pushed");
    free(c);
    c = sy_content("/never.md");
    cr_expect_null(c, "a file never saved was created: %s", c ? c : "");
    free(c);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts WHERE kind = 1");
    cr_expect_str_eq(k, "2", "the unsaved edits were not kept");
    free(k);
    char *out = NULL;
    mnt_sh(&E, &out, "$MFS conflicts --cache-dir $CACHE");
    cr_expect(strstr(out, "/saved.md") && strstr(out, "/never.md") &&
              strstr(out, "unsaved at unmount"), "conflicts does not list them: %s", out);
    free(out);
    char *id = mnt_q(&E, "SELECT id FROM conflicts WHERE path = '/saved.md'");
    mnt_sh(&E, &out, "$MFS conflicts show %s --cache-dir $CACHE", id);
    cr_expect_str_eq(out, "saved\nunsaved tail\n", "the kept edit is not the open buffer");
    free(out);
    free(id);
}

/* Starts writer_pid, which creates each of names[0..n) in the mount,
 * writes text to it and holds it open until killed (mnt_hold_open). */
static void hold_open(const char *const *names, size_t n, const char *text)
{
    char path[8][600];
    const char *v[8];
    cr_assert_leq(n, 8);
    for (size_t i = 0; i < n; i++) {
        snprintf(path[i], sizeof(path[i]), "%s/%s", mnt, names[i]);
        v[i] = path[i];
    }
    writer_pid = mnt_hold_open(v, n, O_WRONLY | O_CREAT | O_TRUNC, text);
}

/* A reader's close, or its fsync, beside a writer that still holds the
 * file open saves nothing of the writer's: its half-written content is
 * pushed neither by a sync nor by the final one, and is kept as a record
 * like any unsaved edit.  (The reader's close saved the writer's buffer,
 * held, which the final sync pushed; its fsync made it pushable at once.) */
Test(mount_sync_unmount, a_reader_s_close_or_fsync_publishes_no_writer_s_open_edit)
{
    sy_mount(false, "--flush-timeout 10");
    sy_after_sync();
    int pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 1);
    const char *const name[] = {"closed.md", "synced.md"};
    hold_open(name, 2, "first half\n");
    for (int i = 0; i < 2; i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", mnt, name[i]);
        int r = open(path, O_RDONLY | O_CLOEXEC);
        cr_assert_geq(r, 0);
        char buf[64];
        cr_expect_eq(read(r, buf, sizeof(buf)), 11);
        if (i == 1)
            cr_expect_eq(fsync(r), 0);
        close(r);
    }
    sy_after_sync();
    for (int i = 0; i < 2; i++) {
        char tail[32], *c;
        snprintf(tail, sizeof(tail), "/%s", name[i]);
        c = sy_content(tail);
        cr_expect_null(c, "%s: a half-written file was pushed by a sync", name[i]);
        free(c);
    }
    cr_assert_eq(kill(pid, SIGTERM), 0);
    bool gone = wait_gone(pid, 35);
    cr_assert(gone, "the daemon did not exit after SIGTERM");
    for (int i = 0; i < 2; i++) {
        char tail[32], *c;
        snprintf(tail, sizeof(tail), "/%s", name[i]);
        c = sy_content(tail);
        cr_expect_null(c, "%s: a half-written file was pushed at unmount: %s", name[i],
                       c ? c : "");
        free(c);
    }
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts WHERE kind = 1");
    cr_expect_str_eq(k, "2", "the unsaved edits were not kept");
    free(k);
}

/* Mounts the test's store and a second one, B (*store_b: its id,
 * malloc'd), at E.mnt/b (mnt_b), in one daemon with the given flush
 * timeout and no periodic sync, then syncs once. */
static void mount_with_b(int flush_timeout, char **store_b, char *mnt_b, size_t len)
{
    *store_b = t_create_store(&E.msd, "Unmount B");
    cr_assert_not_null(*store_b);
    char opts[700];
    snprintf(mnt_b, len, "%s/b", E.mnt);
    snprintf(opts, sizeof(opts), "--sync-interval 3600 --flush-timeout %d --store %s:%s",
             flush_timeout, *store_b, mnt_b);
    sy_mount(false, opts);
    sy_after_sync();
}

/* Every request about store id waits ms first. */
static void slow_store(const char *id, int ms)
{
    char fault[600];
    snprintf(fault, sizeof(fault), "{\"action\":\"latency\",\"latency_ms\":%d,\"count\":0,"
             "\"path\":\"/v1/memory_stores/%s*\"}", ms, id);
    sy_fault(fault);
}

/* Unmounting one store of a daemon leaves the files open in its other
 * stores alone: a writer there goes on, and what it closes is its whole
 * edit.  (The unmount used to keep every store's open edits as records and
 * drop their buffers: the writer's next write landed on the file's old
 * saved content, and that mix was pushed.) */
Test(mount_sync_unmount, unmounting_one_store_leaves_the_open_files_of_another_alone)
{
    char *store_b = NULL, mnt_b[400], path[600];
    mount_with_b(10, &store_b, mnt_b, sizeof(mnt_b));
    snprintf(path, sizeof(path), "%s/edit.md", mnt);
    int fd = open(path, O_WRONLY | O_TRUNC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "first half\n", 11), 11);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS unmount %s", mnt_b);
    cr_assert_eq(rc, 0, "unmount failed: %s", out);
    free(out);
    cr_assert(!mnt_is_mounted(mnt_b), "the other store is still mounted");
    cr_assert_eq(write(fd, "second half\n", 12), 12);
    cr_assert_eq(close(fd), 0);
    sy_after_sync();
    char *c = sy_content("/edit.md");
    cr_expect_str_eq(c ? c : "(missing)", "first half\nsecond half\n",
                     "the open file of the store left mounted was not pushed whole");
    free(c);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "the unmount of another store kept the open edit as a record");
    free(k);
    free(store_b);
}

/* `truncate FILE` while a writer holds FILE open saves the shared buffer,
 * which is that writer's unfinished work: it is held, as a writer's
 * descriptor close would save it, and pushed once the writer is done.
 * Before the fix the truncate saved it as finished and the next sync
 * pushed "draft part 1" while the writer still had the file open. */
Test(mount_sync_unmount, a_truncate_by_path_publishes_no_writer_s_open_edit)
{
    sy_mount(false, "");
    sy_after_sync();
    char path[600];
    snprintf(path, sizeof(path), "%s/draft.md", mnt);
    const char *const name[] = {"draft.md"};
    hold_open(name, 1, "draft part 1 of 3\n");
    cr_assert_eq(truncate(path, 12), 0, "%s", strerror(errno));
    sy_after_sync();
    char *c = sy_content("/draft.md");
    cr_expect_null(c, "a writer's open file was pushed after a truncate by path: %s", c);
    free(c);
    /* the writer is done (killed: its descriptor closes): what it left goes */
    kill(writer_pid, SIGKILL);
    waitpid(writer_pid, NULL, 0);
    writer_pid = 0;
    const char *const want[] = {"/edit.md", "before\n", "/gone.md", "to be removed\n",
                                "/draft.md", "draft part 1", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store holds %s", last);
    free(last);
}

/* The final sync's flush timeout ends that store's requests only.  Before
 * the fix it cancelled the daemon's whole HTTP client: a sync of another
 * store, still mounted, that was waiting for a slow answer at that moment
 * failed ("cancelled"), as would an open downloading a file there.  (It
 * failed so only when B's request looked at the flag in the milliseconds
 * the client's stayed set: two runs in three before the fix.) */
Test(mount_sync_unmount, the_flush_timeout_of_one_store_cancels_nothing_of_another)
{
    char *store_b = NULL, mnt_b[400];
    mount_with_b(2, &store_b, mnt_b, sizeof(mnt_b));
    cr_assert_eq(sy_run(NULL, "echo changed > edit.md"), 0);
    /* Store A's requests take 8 s (past its flush timeout), B's 6 s. */
    slow_store(store, 8000);
    slow_store(store_b, 6000);
    char *out = NULL, rc_path[400], out_path[400];
    snprintf(rc_path, sizeof(rc_path), "%s/b-sync.rc", E.root);
    snprintf(out_path, sizeof(out_path), "%s/b-sync.out", E.root);
    int rc = mnt_sh(&E, &out, "( $MFS sync --wait '%s' > '%s' 2>&1; echo $? > '%s' ) & "
                    "sleep 0.5; timeout 60 $MFS unmount '%s'; wait", mnt_b, out_path, rc_path,
                    mnt);
    cr_expect(!mnt_is_mounted(mnt), "store A is still mounted (exit %d: %s)", rc, out);
    free(out);
    char *b_rc = mnt_read(rc_path, NULL), *b_out = mnt_read(out_path, NULL);
    cr_expect_str_eq(b_rc ? b_rc : "(none)", "0\n",
                     "the sync of store B failed when A's final sync was cut off: %s",
                     b_out ? b_out : "(no output)");
    free(b_rc);
    free(b_out);
    sy_clear_faults();
    cr_expect(mnt_is_mounted(mnt_b), "store B is not mounted any more");
    free(store_b);
}

/* A client of the control socket that sends its line in time is answered
 * even when another client's unmount held the daemon's main thread past
 * that client's 5 s (here the final sync of store B waits 7 s for the
 * server).  Before the fix it was closed unanswered when the unmount
 * ended: its 5 s had run out while nobody could read it. */
Test(mount_sync_unmount, a_client_that_sent_its_line_during_an_unmount_is_answered)
{
    char *store_b = NULL, mnt_b[400];
    mount_with_b(20, &store_b, mnt_b, sizeof(mnt_b));
    slow_store(store_b, 7000);
    pid_t pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char sock[400];
    snprintf(sock, sizeof(sock), "%s/daemon-%d.sock", E.run, (int)pid);
    cr_assert_lt(strlen(sock), sizeof(a.sun_path), "%s: too long for a socket", sock);
    memcpy(a.sun_path, sock, strlen(sock) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s: %s", a.sun_path,
                 strerror(errno));
    /* The unmount of B starts; this client sends its line once B's final
     * sync has reached the server (the main thread runs that unmount),
     * within its 5 s. */
    sy_reset_stats();
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(fd);
        _exit(mnt_sh(&E, NULL, "$MFS unmount '%s'", mnt_b) == 0 ? 0 : 1);
    }
    bool started = false;
    for (int i = 0; i < 40 && !started; i++) {
        started = t_route_count(&E.msd, FEED_ROUTE) + t_route_count(&E.msd, LIST_ROUTE) > 0;
        if (!started)
            usleep(100 * 1000);
    }
    cr_expect(started, "B's final sync did not reach the server in 4 s");
    cr_assert_eq(send(fd, "status\n", 7, MSG_NOSIGNAL), 7);
    char buf[8192];
    size_t len = 0;
    for (ssize_t r; len < sizeof(buf) - 1 &&
                    (r = recv(fd, buf + len, sizeof(buf) - 1 - len, 0)) > 0;)
        len += (size_t)r;
    buf[len] = '\0';
    close(fd);
    int st = 0;
    waitpid(child, &st, 0);
    sy_clear_faults();
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the unmount of B failed");
    cr_expect(len >= 3 && strcmp(buf + len - 3, "ok\n") == 0,
              "the client was closed without its answer: '%s'", buf);
    free(store_b);
}

/* A store with a file held open, where the daemon could not abort the
 * connection through fusectl (a container without
 * /sys/fs/fuse/connections, here hidden in a mount namespace of the
 * test's own), holds up neither the exit nor the other store's teardown:
 * the store is torn down around its loop thread, and the exit ends the
 * connection.  Before the fix, when no request came after the unmount to
 * wake the loop (about one run in four here), the teardown waited for its
 * thread until the file was closed, for ever, with the other store still
 * mounted. */
Test(mount_sync_unmount, open_files_that_cannot_be_cut_off_hold_up_no_exit)
{
    cr_assert_eq(unshare(CLONE_NEWNS), 0, "unshare: %s", strerror(errno));
    cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0, "%s", strerror(errno));
    cr_assert_eq(mount("none", "/sys/fs/fuse", "tmpfs", MS_RDONLY, "size=4k"), 0,
                 "cannot hide fusectl: %s", strerror(errno));
    char *store_b = NULL, mnt_b[400];
    mount_with_b(5, &store_b, mnt_b, sizeof(mnt_b));
    int pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 1);
    const char *const name[] = {"held.md"};
    hold_open(name, 1, "held\n");
    cr_assert_eq(kill(pid, SIGTERM), 0);
    bool gone = wait_gone(pid, 40);
    cr_assert(gone, "the daemon did not exit after SIGTERM with a file held open");
    cr_expect(!mnt_is_mounted(mnt_b), "the other store is still mounted");
    free(store_b);
}

/* `memstorefs mount` killed before its stores are mounted (a timeout
 * wrapper, Ctrl-C): the daemon it started, in a session of its own, does
 * not leave them mounted behind the caller's back.  Before the fix the
 * caller saw a failure, and the stores were mounted anyway; its next
 * attempt met "already mounted". */
Test(mount_sync_unmount, a_mount_command_killed_during_its_setup_leaves_nothing_mounted)
{
    slow_store(store, 1500);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "timeout -s KILL 0.5 $MFS mount --store '%s:%s' --cache-dir "
                              "\"$CACHE\" --log-level debug", store, mnt);
    cr_assert_eq(rc, 137, "the mount was not killed in its setup: %d %s", rc, out);
    free(out);
    /* Its daemon ends its setup, then sees that nobody waits for it. */
    pid_t pid = wait_daemon_pid();
    cr_assert_gt(pid, 1, "no daemon was started");
    bool gone = wait_gone(pid, 30);
    cr_expect(gone, "the daemon of a killed mount command is still running");
    cr_expect(!mnt_is_mounted(mnt), "the store was mounted for a mount command that was killed");
    cr_expect_gt(sy_log_count("the mount command ended before", NULL), 0,
                 "the daemon logged no reason for unmounting");
}

/* SIGTERM while the daemon looks its stores up and lists them (a slow
 * server) stops it at once, and nothing is mounted.  Before the fix the
 * signal waited, blocked, for the end of the setup: here 20 s of latency,
 * with a slow server minutes (each request up to 5 attempts of 60 s). */
Test(mount_sync_unmount, sigterm_during_the_setup_stops_it_at_once)
{
    slow_store(store, 20000);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --store '%s:%s' --cache-dir \"$CACHE\" "
                              "--log-level debug > %s/mount.out 2>&1 & echo $!", store, mnt,
                    E.root);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    pid_t pid = wait_daemon_pid();
    cr_assert_gt(pid, 1, "no daemon was started");
    usleep(300 * 1000); /* in its first request */
    double t0 = now_s();
    cr_assert_eq(kill(pid, SIGTERM), 0);
    bool gone = wait_gone(pid, 30);
    double dt = now_s() - t0;
    cr_assert(gone, "the daemon did not exit after SIGTERM");
    cr_expect(dt < 10, "SIGTERM took %.1f s to stop the setup", dt);
    cr_expect(!mnt_is_mounted(mnt), "the store was mounted");
    mnt_sh(&E, &out, "sleep 0.2; cat %s/mount.out", E.root);
    cr_expect(out && strstr(out, "stopped by SIGTERM during the setup"), "%s", out);
    free(out);
}
