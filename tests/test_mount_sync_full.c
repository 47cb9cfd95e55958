/* test_mount_sync_full.c - the cache's disk fills up under a writer: every
 * close that returned success keeps its content, and once the disk has
 * room again the mount shows it and the sync pushes it, without a remount.
 *
 * The cache directory is a small tmpfs the test mounts (as root, as CI
 * runs) and grows later with a remount; notes are written until the
 * writes fail with ENOSPC.  Some closes then return before the commit that
 * carries them fails (the journal of closed files keeps them,
 * cache/journal.c): those are the cases this suite is about, and the test
 * checks from the daemon's log that the run met at least one.  And the
 * conflict records stay readable while the disk is full; and a session
 * that ends on a full disk (unmount, or a kill then `memstorefs flush`)
 * pushes every note closed, with the cache's reserve of disk space
 * (cache/reserve.c), and keeps the edit of a file still open (or says it
 * is lost, without a reserve). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mnt.h"
#include "test_mount_sync.h"

static bool tmpfs_mounted;
static pid_t holder; /* a child holding a file open with an unsaved edit */

static void setup(void)
{
    static const char *const seed[] = {"/notes/seed.md", "seed\n", NULL};
    sy_start(seed);
    if (geteuid() != 0)
        cr_skip_test("mounting a tmpfs for the cache needs root");
    cr_assert(mkdir(E.cache, 0700) == 0 || errno == EEXIST, "cannot make %s", E.cache);
    cr_assert_eq(mount("tmpfs", E.cache, "tmpfs", 0, "size=3m,mode=0700"), 0,
                 "cannot mount a tmpfs at %s: %s", E.cache, strerror(errno));
    tmpfs_mounted = true;
    sy_mount(false, "");
}

static void teardown(void)
{
    if (holder > 0) {
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
        holder = 0;
    }
    mnt_stop_daemons(&E);
    if (tmpfs_mounted && umount2(E.cache, MNT_DETACH) != 0)
        cr_log_error("cannot unmount the tmpfs at %s: %s", E.cache, strerror(errno));
    tmpfs_mounted = false;
    sy_stop();
}

TestSuite(mount_sync_full, .init = setup, .fini = teardown, .timeout = 240);

struct note {
    char path[500];
    char *body;
};

/* Writes notes n001.md, ... until 20 have failed (or 300 were tried), each
 * with one open, write and close; keeps those whose every call succeeded.
 * pause: sleep 20 ms between a note's open and its write, so that its
 * create is committed before the commit carrying its content fails. */
static size_t fill(struct note *v, size_t cap, bool pause, unsigned seed, int *failed)
{
    size_t n = 0;
    *failed = 0;
    for (int i = 1; i <= 300 && *failed < 20 && n < cap; i++) {
        size_t len = 200 + (size_t)(rand_r(&seed) % 60000);
        char *body = malloc(len + 1);
        cr_assert_not_null(body);
        for (size_t k = 0; k < len; k++)
            body[k] = k % 64 == 63 ? '\n' : (char)('a' + (i + k) % 26);
        body[len] = '\0';
        snprintf(v[n].path, sizeof(v[n].path), "%s/%s%03d.md", mnt, pause ? "p" : "n", i);
        bool ok = false;
        int fd = open(v[n].path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            if (pause)
                nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
            ok = write(fd, body, len) == (ssize_t)len;
            ok = close(fd) == 0 && ok;
        }
        if (ok) {
            v[n++].body = body;
        } else {
            free(body);
            ++*failed;
        }
    }
    return n;
}

static void run(bool pause)
{
    static struct note v[300];
    int failed = 0;
    size_t n = fill(v, 300, pause, pause ? 7 : 3, &failed);
    cr_assert_gt(failed, 0, "the cache's disk never filled up (%zu notes written)", n);
    cr_assert_gt(n, 0, "no note could be written");
    /* What a reader looks at while the disk is full: the kernel keeps
     * these attributes and listings. */
    char *out = NULL;
    (void)sy_run(&out, "ls -laR . >/dev/null 2>&1; cat ./*.md >/dev/null 2>&1; true");
    free(out);

    cr_assert_eq(mount("tmpfs", E.cache, "tmpfs", MS_REMOUNT, "size=64m,mode=0700"), 0,
                 "cannot grow the tmpfs: %s", strerror(errno));
    cr_assert(sy_wait_log("files closed before a failed commit are in the cache again", NULL, 1,
                          WITHIN),
              "the run met no commit that failed after its closes returned; log:\n%s",
              sy_log_grep("cache"));
    sy_after_sync();
    cr_assert(sy_wait_clean(WITHIN), "changes still pending after the disk has room again");

    cJSON *list = sy_list();
    int unread = 0, unpushed = 0;
    for (size_t i = 0; i < n; i++) {
        char *got = mnt_read(v[i].path, NULL);
        if (!got || strcmp(got, v[i].body) != 0) {
            cr_log_error("%s: the mount shows %zu bytes of %zu", v[i].path,
                         got ? strlen(got) : 0, strlen(v[i].body));
            unread++;
        }
        free(got);
        const cJSON *m = sy_find(list, v[i].path + strlen(mnt));
        const cJSON *c = m ? cJSON_GetObjectItemCaseSensitive(m, "content") : NULL;
        if (!cJSON_IsString(c) || strcmp(c->valuestring, v[i].body) != 0) {
            cr_log_error("%s: not in the store as it was closed", v[i].path + strlen(mnt));
            unpushed++;
        }
        free(v[i].body);
    }
    cJSON_Delete(list);
    cr_expect_eq(unread, 0, "%d of %zu closed notes read back otherwise", unread, n);
    cr_expect_eq(unpushed, 0, "%d of %zu closed notes not in the store", unpushed, n);
}

Test(mount_sync_full, closes_a_failed_commit_left_to_the_journal_are_pushed_once_there_is_room)
{
    run(false);
}

Test(mount_sync_full, a_file_read_while_the_disk_was_full_shows_its_closed_content_after)
{
    run(true);
}

/* Every block of the cache's disk taken, by a file beside the cache (made
 * or grown). */
static void fill_up(void)
{
    char filler[400];
    snprintf(filler, sizeof(filler), "%s/filler", E.cache);
    int fd = open(filler, O_WRONLY | O_CREAT | O_APPEND, 0600);
    cr_assert_geq(fd, 0);
    static char zeros[4096];
    ssize_t w;
    while ((w = write(fd, zeros, sizeof(zeros))) > 0)
        ;
    cr_assert(w < 0 && errno == ENOSPC, "the disk did not fill up: %s", strerror(errno));
    while (write(fd, zeros, 1) > 0) /* the last bytes of a block */
        ;
    close(fd);
}

/* Waits (WITHIN) until the cache's database has the n early notes as
 * their writers closed them.  A close's content is in the journal of
 * closed files until the commit a few milliseconds later: a commit still
 * due when the disk fills fails, and the journal, stuck until its records
 * can be applied again, takes no later close (each fails with ENOSPC). */
static void early_committed(size_t n)
{
    char want[32];
    snprintf(want, sizeof(want), "%zu", n);
    char *got = NULL;
    for (int i = 0; i < WITHIN * 10; i++) {
        free(got);
        got = mnt_q(&E, "SELECT count(*) FROM nodes WHERE path LIKE '/early%%' AND unlinked = 0"
                        " AND unsaved = 0 AND size > 0");
        if (strcmp(got, want) == 0)
            break;
        usleep(100 * 1000);
    }
    cr_assert_str_eq(got, want, "the early notes closed, not all committed:\n%s",
                     sy_log_grep("cache"));
    free(got);
}

/* Whether process pid has ended: gone, or a zombie its parent (init,
 * which the daemon was left to) has not reaped yet. */
static bool ended(pid_t pid)
{
    char f[64], st[512] = "";
    snprintf(f, sizeof(f), "/proc/%d/stat", (int)pid);
    FILE *p = fopen(f, "r");
    if (!p)
        return true;
    size_t n = fread(st, 1, sizeof(st) - 1, p);
    fclose(p);
    st[n] = '\0';
    const char *e = strrchr(st, ')'); /* the name may hold anything */
    return e && e[1] == ' ' && e[2] == 'Z';
}

/* Waits (10 s at most) for the daemon pid to end, after a kill or an
 * unmount's answer; asserts that it did. */
static void wait_gone(pid_t pid, bool kill_it)
{
    if (kill_it)
        kill(pid, SIGKILL);
    for (int i = 0; i < 100 && kill(pid, 0) == 0; i++)
        usleep(100 * 1000);
    cr_assert_neq(kill(pid, 0), 0, "the daemon (pid %d) did not end", (int)pid);
}

/* What the store won over stays readable while the disk is full, with the
 * daemon and after it stopped: the conflicts commands only read the cache
 * (opening it wrote its header before, and failed there with ENOSPC; a
 * journal the daemon left is applied at a later open). */
Test(mount_sync_full, the_conflict_records_are_read_while_the_disk_is_full)
{
    char *id = sy_id("/notes/seed.md");
    cr_assert_not_null(id);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "printf 'local edit\\n' > notes/seed.md"), 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"remote edit\\n\"}"), 200);
    sy_after_sync();
    cr_assert(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s/notes/seed.md')\" = 'remote edit'", mnt),
              "the store's version did not win");
    free(id);

    /* A large note first: the daemon's journal keeps the blocks its record
     * took, so the late note's record below needs none. */
    cr_assert_eq(sy_run(NULL, "head -c 90000 /dev/zero | tr '\\0' a > big.md"), 0);
    sy_after_sync(); /* committed, pushed, recorded: the log appends from here */

    fill_up();

    /* A note closed now is in the daemon's journal only: the commit that
     * would carry it needs new blocks for the write-ahead log and fails,
     * and the daemon stops with the note still there. */
    char late[500];
    snprintf(late, sizeof(late), "%s/late.md", mnt);
    cr_assert_eq(mnt_write(late, "late\n"), 0, "the late note failed:\n%s",
                 sy_log_grep("cache"));

    /* With the daemon, then once it is dead (diff then reads the cache too). */
    for (int live = 1; live >= 0; live--) {
        char *out = NULL;
        if (!live) {
            /* Killed, so that its journal holds the late note for the next
             * open to apply, which cannot write now. */
            pid_t pid = mnt_daemon_pid(&E);
            cr_assert_gt(pid, 0);
            wait_gone(pid, true);
            fill_up(); /* what its end gave back */
        }
        cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts --cache-dir \"$CACHE\""), 0, "%s", out);
        cr_expect(out && strstr(out, "/notes/seed.md"), "not listed (daemon %d): %s", live, out);
        if (!live)
            cr_expect(out && strstr(out, "applied at a later open"),
                      "the journal the daemon left was not there to apply: %s", out);
        free(out);
        cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts show 1 --cache-dir \"$CACHE\" 2>/dev/null"),
                     0, "%s", out);
        cr_expect_str_eq(out, "local edit\n");
        free(out);
        if (!live) {
            cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts diff 1 --cache-dir \"$CACHE\""), 0,
                         "%s", out);
            cr_expect(out && strstr(out, "-local edit") && strstr(out, "+remote edit"),
                      "diff: %s", out);
            free(out);
        }
    }
}

/* Notes a writer closed, kept in v (bodies malloc'd): 12 while the disk
 * has room, on a daemon with a reserve of 6 MiB and no periodic sync,
 * then the disk fills up and, with late, as many as it takes (their closes
 * kept by the journal of closed files) until 5 fail.  The count of those
 * in *late. */
static size_t closed_then_full(struct note *v, size_t cap, bool with_late, bool with_reserve,
                               const char *held_tail, int *late)
{
    /* A start with no room for the reserve (24 MiB by default, on a 3 MiB
     * disk) says so on the mount's terminal, and leaves nothing of it. */
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount %s", mnt), 0, "%s", out);
    free(out);
    cr_assert_eq(mnt_mount(&E, store, "s", false, "", &out), 0, "%s", out);
    cr_expect(out && strstr(out, "no room for the cache's reserve of disk space"), "%s", out);
    free(out);
    char reserve[400];
    snprintf(reserve, sizeof(reserve), "%s/reserve", E.cache);
    cr_expect(access(reserve, F_OK) != 0, "a reserve half made was left");
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount %s", mnt), 0, "%s", out);
    free(out);
    cr_assert_eq(mount("tmpfs", E.cache, "tmpfs", MS_REMOUNT, "size=24m,mode=0700"), 0,
                 "cannot grow the tmpfs: %s", strerror(errno));
    if (!with_reserve) {
        /* One a start before made: --cache-reserve 0 removes it. */
        int fd = open(reserve, O_WRONLY | O_CREAT | O_EXCL, 0600);
        cr_assert_geq(fd, 0, "%s: %s", reserve, strerror(errno));
        cr_assert_eq(posix_fallocate(fd, 0, 1 << 20), 0);
        close(fd);
    }
    sy_mount(false, with_reserve ? "--sync-interval 3600 --cache-reserve 6M"
                                 : "--sync-interval 3600 --cache-reserve 0");
    struct stat st;
    if (!with_reserve) {
        cr_assert_neq(stat(reserve, &st), 0, "a reserve left with --cache-reserve 0");
    } else {
        cr_assert_eq(stat(reserve, &st), 0, "no reserve at %s:\n%s", reserve,
                     sy_log_grep("reserve"));
        cr_assert_geq((long long)st.st_blocks * 512, 6ll << 20, "a reserve of %lld bytes",
                      (long long)st.st_blocks * 512);
    }

    /* A large one first, whose journal record leaves blocks for the late
     * ones. */
    size_t n = 0;
    int failed = 0;
    *late = 0;
    for (int i = 0; i < (with_late ? 112 : 13) && failed < 5 && n < cap; i++) {
        if (i == 12 && !with_reserve)
            sy_after_sync(); /* the late ones are all that is left */
        if (i == 12)
            early_committed(n);
        if (i == 12 && held_tail)
            /* early001.md, held open with an unsaved edit */
            holder = mnt_hold_open((const char *const[]){v[1].path}, 1, O_WRONLY | O_APPEND,
                                   held_tail);
        if (i == 12)
            fill_up();
        if (i == 12 && !with_late)
            return n;
        size_t len = i == 0 ? 90000 : i < 12 ? 300 + (size_t)i * 1000 : 2000 + (size_t)i * 700;
        char *body = malloc(len + 1);
        cr_assert_not_null(body);
        for (size_t k = 0; k < len; k++)
            body[k] = k % 64 == 63 ? '\n' : (char)('a' + (i + k) % 26);
        body[len] = '\0';
        snprintf(v[n].path, sizeof(v[n].path), "%s/%s%03d.md", mnt, i < 12 ? "early" : "late", i);
        if (mnt_write(v[n].path, body) == 0) {
            v[n++].body = body;
            *late += i >= 12;
        } else {
            cr_assert_geq(i, 12, "%s failed while the disk had room", v[n].path);
            free(body);
            failed++;
        }
    }
    cr_assert_gt(failed, 0, "the disk had room for every late note");
    /* The case of the journal: closes a failed commit left to it (status
     * says so: the daemon's log, on the full disk, may not). */
    cr_assert_gt(*late, 0, "no note could be closed once the disk was full");
    cr_expect_eq(mnt_sh(&E, &out, "$MFS status"), 0, "%s", out);
    cr_expect(out && strstr(out, with_reserve ? "; reserve 6.0 MiB)" : "; reserve none)"), "%s",
              out);
    cr_assert(out && strstr(out, "closed since the cache's disk filled up, kept in its journal"),
              "no close is left to the journal: %s", out);
    free(out);
    return n;
}

/* Every note of v is in the store as it was closed; frees the bodies. */
static void all_in_store(struct note *v, size_t n, int late)
{
    cJSON *list = sy_list();
    int unpushed = 0;
    for (size_t i = 0; i < n; i++) {
        const cJSON *m = sy_find(list, v[i].path + strlen(mnt));
        const cJSON *c = m ? cJSON_GetObjectItemCaseSensitive(m, "content") : NULL;
        if (!cJSON_IsString(c) || strcmp(c->valuestring, v[i].body) != 0) {
            cr_log_error("%s: not in the store as it was closed", v[i].path + strlen(mnt));
            unpushed++;
        }
        free(v[i].body);
    }
    cJSON_Delete(list);
    cr_expect_eq(unpushed, 0, "%d of %zu closed notes not in the store (%d closed on the full "
                 "disk)", unpushed, n, late);
}

/* A session that ends while the disk is full pushes what its writers
 * closed: the final sync finds the cache out of room and frees the
 * reserve the daemon made at its start (cache/reserve.c) to record what
 * it sends.  Without it, the sync pushed nothing and `unmount` exited 3
 * naming the changes left in the cache, which a sandbox then threw away. */
static void end_session_on_full_disk(bool with_late)
{
    static struct note v[60];
    int late = 0;
    size_t n = closed_then_full(v, 60, with_late, true, NULL, &late);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "timeout 90 $MFS unmount %s", mnt);
    cr_expect_eq(rc, 0, "unmount exit %d (%d late notes closed): %s\n%s", rc, late, out,
                 sy_log_grep("reserve"));
    cr_expect(out && !strstr(out, "not pushed"), "unmount left changes: %s", out);
    free(out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_expect_lt(t1.tv_sec - t0.tv_sec, 60, "the unmount took past its flush timeout");
    cr_expect(sy_log_count("its reserve of disk space is freed", NULL) == 1,
              "the reserve was not freed:\n%s", sy_log_grep("reserve"));
    all_in_store(v, n, late);
}

Test(mount_sync_full, a_session_ending_on_a_full_disk_pushes_what_was_closed)
{
    end_session_on_full_disk(true);
}

/* A file still open with an edit no writer saved when the session ends on
 * a full disk: the edit is kept as a record (memstorefs conflicts), which
 * takes room, so the reserve is freed before it is written, not only
 * before the sync (the edit was lost, and only the daemon's log said so);
 * the file's saved state is pushed. */
Test(mount_sync_full, an_edit_left_open_when_a_session_ends_on_a_full_disk_is_kept)
{
    static struct note v[60];
    int late = 0;
    size_t n = closed_then_full(v, 60, true, true, "unsaved tail\n", &late);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "timeout 90 $MFS unmount %s", mnt);
    cr_expect_eq(rc, 0, "unmount exit %d (%d late notes closed): %s\n%s", rc, late, out,
                 sy_log_grep("keep"));
    free(out);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    holder = 0;
    cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts --cache-dir \"$CACHE\""), 0, "%s", out);
    cr_expect(out && strstr(out, "/early001.md") && strstr(out, "unsaved at unmount"),
              "the open file's unsaved edit was not kept: %s\n%s", out, sy_log_grep("keep"));
    free(out);
    char *id = mnt_q(&E, "SELECT id FROM conflicts WHERE path = '/early001.md' AND kind = 1");
    cr_assert(id && *id, "no record of the unsaved edit");
    mnt_sh(&E, &out, "$MFS conflicts show %s --cache-dir \"$CACHE\"", id);
    char *want = NULL;
    cr_assert(asprintf(&want, "%sunsaved tail\n", v[1].body) > 0);
    cr_expect(out && strcmp(out, want) == 0, "the record is not the open buffer (%zu bytes)",
              out ? strlen(out) : 0);
    free(want);
    free(out);
    free(id);
    all_in_store(v, n, late); /* early001.md as it was saved */
}

/* The disk filled by another process after the daemon's last write: no
 * write of the cache failed yet, and a commit may still fit in blocks the
 * write-ahead log has, but the sync's records do not (a record it cannot
 * write does not fail the sync: the upload went out, its answer was lost,
 * and unmount named the file as not pushed).  The room left decides. */
Test(mount_sync_full, a_disk_filled_by_another_process_before_the_end_is_no_loss_either)
{
    end_session_on_full_disk(false);
}

/* The daemon killed on a full disk: `memstorefs flush` cannot open the
 * cache without applying the journal the daemon left, which needs room;
 * it frees the reserve, then pushes every note closed. */
Test(mount_sync_full, a_flush_after_a_daemon_died_on_a_full_disk_pushes_what_was_closed)
{
    static struct note v[60];
    int late = 0;
    size_t n = closed_then_full(v, 60, true, true, NULL, &late);
    pid_t pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 0);
    wait_gone(pid, true);
    fill_up(); /* what its end gave back */
    char *out = NULL;
    (void)mnt_sh(&E, &out, "$MFS unmount %s", mnt); /* the dead mount detached */
    free(out);
    int rc = mnt_sh(&E, &out, "$MFS flush --cache-dir \"$CACHE\"");
    cr_expect_eq(rc, 0, "flush exit %d (%d late notes closed): %s", rc, late, out);
    cr_expect(out && strstr(out, "reserve of disk space is freed"), "%s", out);
    free(out);
    all_in_store(v, n, late);
}

/* An unmount of one store of a daemon that serves two, on a full disk:
 * the first store's final sync frees the reserve and pushes; the reserve
 * is tried again at once for the second store (no room: said), whose own
 * unmount then pushes too. */
Test(mount_sync_full, an_unmount_that_leaves_a_store_mounted_tries_the_reserve_again)
{
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount %s", mnt), 0, "%s", out);
    free(out);
    cr_assert_eq(mount("tmpfs", E.cache, "tmpfs", MS_REMOUNT, "size=24m,mode=0700"), 0,
                 "cannot grow the tmpfs: %s", strerror(errno));
    char *store_b = t_create_store(&E.msd, "Full B");
    cr_assert_not_null(store_b);
    char mnt_b[400], opts[700];
    snprintf(mnt_b, sizeof(mnt_b), "%s/b", E.mnt);
    snprintf(opts, sizeof(opts), "--sync-interval 3600 --cache-reserve 6M --store %s:%s",
             store_b, mnt_b);
    sy_mount(false, opts);
    static struct note v[2][8];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 8; i++) {
            snprintf(v[s][i].path, sizeof(v[s][i].path), "%s/n%d.md", s ? mnt_b : mnt, i);
            cr_assert(asprintf(&v[s][i].body, "note %d of store %c\n", i, 'a' + s) > 0);
            cr_assert_eq(mnt_write(v[s][i].path, v[s][i].body), 0, "%s", v[s][i].path);
        }
    fill_up();

    cr_expect_eq(mnt_sh(&E, &out, "timeout 90 $MFS unmount %s", mnt), 0, "%s", out);
    free(out);
    cr_expect(sy_log_count("its reserve of disk space is freed", NULL) == 1, "%s",
              sy_log_grep("reserve"));
    cr_expect(sy_wait_log("no room for the cache's reserve", NULL, 1, WITHIN),
              "the reserve was not tried again for the store still mounted:\n%s",
              sy_log_grep("reserve"));
    all_in_store(v[0], 8, 0);

    cr_expect_eq(mnt_sh(&E, &out, "timeout 90 $MFS unmount %s", mnt_b), 0, "%s", out);
    free(out);
    /* all_in_store reads the store named by `store`, paths past mnt's
     * length: the same for mnt_b. */
    cr_assert_eq(strlen(mnt_b), strlen(mnt));
    char *first = store;
    store = store_b;
    all_in_store(v[1], 8, 0);
    store = first;
    free(store_b);
}

/* Without a reserve (--cache-reserve 0), a session that ends on a full
 * disk pushes nothing of what was closed since its last sync, and says
 * so: the files closed on the full disk, which only the journal holds,
 * are named in a part of their own (they were in no count, and a session
 * that had closed only such files reported everything pushed).  A flush
 * once the disk has room pushes them all. */
Test(mount_sync_full, without_a_reserve_the_unmount_names_what_the_journal_holds)
{
    static struct note v[60];
    int late = 0;
    size_t n = closed_then_full(v, 60, true, false, "unsaved tail\n", &late);
    pid_t pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 0);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "timeout 90 $MFS unmount %s", mnt);
    cr_expect_eq(rc, 3, "unmount exit %d: %s", rc, out);
    /* Every note closed is in one count or the other: in a row (a commit
     * that carried it went through), or in the journal only. */
    const char *w = out ? strstr(out, " closed while the cache's disk was full, kept in its "
                                      "journal of closed files") : NULL;
    cr_assert_not_null(w, "the files the journal holds are not named: %s", out);
    while (w > out && w[-1] != ' ')
        w--;
    while (w > out && w[-1] == ' ')
        w--;
    while (w > out && w[-1] >= '0' && w[-1] <= '9')
        w--;
    long waiting = strtol(w, NULL, 10), in_rows = 0;
    const char *r = strstr(out, "local change");
    if (r) {
        while (r > out && r[-1] == ' ')
            r--;
        while (r > out && r[-1] >= '0' && r[-1] <= '9')
            r--;
        in_rows = strtol(r, NULL, 10);
    }
    cr_expect_gt(waiting, 0, "%s", out);
    /* ... and each is named by its path, as the files in rows are. */
    long named = 0;
    char line_start[600];
    snprintf(line_start, sizeof(line_start), "  not pushed: %s/late", mnt);
    for (const char *l = out; (l = strstr(l, line_start)); l++) {
        const char *eol = strchr(l, '\n');
        const char *why = strstr(l, " (closed while the cache's disk was full, in its journal of "
                                    "closed files)");
        named += why && (!eol || why < eol);
    }
    cr_expect_eq(named, waiting, "%ld of %ld files the journal holds named: %s", named, waiting,
                 out);
    /* The file in a row is named too: the list of them, read without a
     * write, no longer fails on the full disk. */
    char held[700];
    snprintf(held, sizeof(held), "  not pushed: %s/early001.md (changed locally)\n", mnt);
    cr_expect(strstr(out, held), "the changed file in a row is not named: %s", out);
    /* The file held open with an unsaved edit: no room to keep it, and
     * the report says that edit is lost (only the log said it). */
    cr_expect(strstr(out, "1 file still open with edits no writer saved, which the cache "
                          "could not keep (No space left on device): those edits are lost"),
              "the lost edit is not named: %s", out);
    /* ... and the file held open, which its writer's open marked. */
    cr_expect_eq(waiting + in_rows, (long)late + 1, "%ld in the journal and %ld in rows, of %d "
                 "closed on the full disk (the others were pushed) and one held open: %s",
                 waiting, in_rows, late, out);
    free(out);

    /* The daemon ends after its answer, and holds its journal until then
     * (a start leaves a journal a live process holds to it): unmount
     * waits for that end, so a flush right after it finds the journal. */
    cr_expect(ended(pid), "the daemon (pid %d) was still running when unmount returned",
              (int)pid);
    cr_assert_eq(mount("tmpfs", E.cache, "tmpfs", MS_REMOUNT, "size=64m,mode=0700"), 0,
                 "cannot grow the tmpfs: %s", strerror(errno));
    rc = mnt_sh(&E, &out, "$MFS flush --cache-dir \"$CACHE\"");
    cr_expect_eq(rc, 0, "flush exit %d: %s", rc, out);
    free(out);
    all_in_store(v, n, late);
}
