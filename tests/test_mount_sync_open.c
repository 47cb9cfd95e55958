/* test_mount_sync_open.c - only content a writer has closed or fsynced
 * reaches the store: a new file held open across syncs is not created
 * until it is closed; vim's swap file (binary, NUL bytes, fsynced, then
 * removed) never becomes a memory; content with NUL bytes is refused
 * locally without a request and listed by status.  Each failed before the
 * fix (issue 8, case 4): a 0-byte version was created, then modified.
 * An open(O_CREAT) of a name the sync brings at that moment opens it.  */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {"/f.md", "v1\n", NULL};

static void setup(void)
{
    sy_start(seed);
    sy_mount(false, "");
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_open, .init = setup, .fini = teardown, .timeout = 150);

#define CREATE_ROUTE "POST /v1/memory_stores/{id}/memories"

/* How many versions of the store were written at a path ending in tail. */
static int versions_at(const char *tail)
{
    cJSON *l = sy_versions(NULL);
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, l)
    {
        const char *p = tj_str(it, "path");
        if (p && strlen(p) >= strlen(tail) && strcmp(p + strlen(p) - strlen(tail), tail) == 0)
            n++;
    }
    cJSON_Delete(l);
    return n;
}

Test(mount_sync_open, a_new_file_held_open_is_created_only_once_closed)
{
    sy_after_sync();
    /* A writer that keeps the file open across two syncs. */
    cr_assert_eq(sy_run(NULL, "( exec 3>held.md; printf 'part\\n' >&3; sleep 12; "
                              "printf 'rest\\n' >&3; exec 3>&- ) >/dev/null 2>&1 &"), 0);
    /* The syncs run once its first part is written. */
    cr_assert(mnt_wait_sh(&E, WITHIN, "test -s '%s/held.md'", mnt), "the writer never wrote");
    sy_after_sync();
    sy_after_sync();
    cr_expect_eq(versions_at("/held.md"), 0, "a half-written file reached the store");
    const char *const want[] = {"/f.md", "v1\n", "/held.md", "part\nrest\n", NULL};
    char *last = NULL;
    cr_assert(sy_wait_server(want, 2 * WITHIN, &last), "held.md never arrived: %s", last);
    free(last);
    char *id = sy_id("/held.md");
    cr_expect_eq(sy_count_versions(id, NULL), 1, "held.md: more than its one created version");
    free(id);
}

/* vim keeps a swap file beside the file it edits: binary (NUL bytes),
 * fsynced, rewritten, removed when vim quits.  The syncs run while it
 * exists (until 6 December 2026 they ran before the writer, slower to
 * start, had made it, and the test checked nothing). */
Test(mount_sync_open, a_swap_file_never_becomes_a_memory)
{
    sy_after_sync();
    long creates = t_route_count(&E.msd, CREATE_ROUTE);
    char done[600];
    snprintf(done, sizeof(done), "%s/swap.done", E.root);
    cr_assert_eq(sy_run(NULL,
        "python3 - '%s' >/dev/null 2>&1 <<'EOF' &\n"
        "import os, sys, time\n"
        "fd = os.open('.f.md.swp', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)\n"
        "os.write(fd, b'b0VIM 9.0' + b'\\0' * 100 + b'user\\0host\\0f.md\\0')\n"
        "os.fsync(fd)\n"
        "time.sleep(7)\n"
        "os.write(fd, b'\\0' * 50 + b'more')\n"
        "os.fsync(fd)\n"
        "time.sleep(6)\n"
        "os.close(fd)\n"
        "os.unlink('.f.md.swp')\n"
        "open(sys.argv[1], 'w').write('done')\n"
        "EOF\n", done), 0);
    /* A sync after each of its fsyncs (its first 124 bytes, then 178),
     * and one once it is gone. */
    cr_assert(mnt_wait_sh(&E, WITHIN, "test -s '%s/.f.md.swp'", mnt), "the swap file never came");
    sy_after_sync();
    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(stat -c %%s '%s/.f.md.swp')\" -gt 124", mnt),
              "the swap file was never rewritten");
    sy_after_sync();
    cr_expect(mnt_wait_sh(&E, WITHIN, "test -e '%s'", done), "the writer never ended");
    cr_expect(mnt_wait_sh(&E, 1, "! test -e '%s/.f.md.swp'", mnt), "the swap file stayed");
    sy_after_sync();
    cr_expect_eq(versions_at(".swp"), 0, "the swap file reached the store's history");
    cr_expect_eq(t_route_count(&E.msd, CREATE_ROUTE), creates, "a create was sent for it");
    char *st = mnt_q(&E, "SELECT count(*) FROM tombstones");
    cr_expect_str_eq(st, "0", "a deletion is pending for it");
    free(st);
}

Test(mount_sync_open, content_with_a_nul_byte_is_refused_locally)
{
    sy_after_sync();
    long creates = t_route_count(&E.msd, CREATE_ROUTE);
    cr_assert_eq(sy_run(NULL, "printf 'a\\0b\\n' > nul.md"), 0);
    sy_after_sync();
    sy_after_sync();
    cr_expect_eq(t_route_count(&E.msd, CREATE_ROUTE), creates, "it was sent to the server");
    char *out = NULL;
    mnt_sh(&E, &out, "$MFS status");
    cr_expect(strstr(out, "refused         /nul.md") && strstr(out, "NUL byte"),
              "status does not list the refusal with its reason: %s", out);
    free(out);
    /* Still there locally, byte for byte; a fixed file is pushed. */
    cr_expect_eq(sy_run(NULL, "test \"$(od -An -c nul.md | tr -d ' \\n')\" = 'a\\0b\\n'"), 0);
    cr_assert_eq(sy_run(NULL, "printf 'ab\\n' > nul.md"), 0);
    const char *const want[] = {"/f.md", "v1\n", "/nul.md", "ab\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, 2 * WITHIN, &last), "the fixed file was not pushed: %s", last);
    free(last);
}

/* A reader holds a file open while the store's newer version arrives: a
 * stat, the reader's next read and every later open see the new version
 * (the kernel's pages and attributes were dropped, and the open file's
 * buffer, clean, must not bring the old bytes or size back into them). */
Test(mount_sync_open, a_remote_update_reaches_every_reader_of_a_file_held_open)
{
    const char *want = "version two, longer than one\n";
    char path[512], buf[128];
    snprintf(path, sizeof(path), "%s/f.md", mnt);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    ssize_t n = pread(fd, buf, sizeof(buf), 0);
    cr_assert_eq(n, 3);
    char *id = sy_id("/f.md");
    cr_assert(id);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"version two, longer than one\\n\"}"), 200);
    free(id);
    sy_after_sync();

    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s", strerror(errno));
    cr_expect_eq(st.st_size, (off_t)strlen(want), "stat's size %lld, the old version's",
                 (long long)st.st_size);
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    cr_expect_str_eq(buf, want, "the reader holding the file read the old version");
    int fd2 = open(path, O_RDONLY);
    cr_assert_geq(fd2, 0, "%s", strerror(errno));
    n = read(fd2, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    cr_expect_str_eq(buf, want, "a new open read the old version");
    close(fd2);
    close(fd);
    fd2 = open(path, O_RDONLY);
    cr_assert_geq(fd2, 0, "%s", strerror(errno));
    n = read(fd2, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    cr_expect_str_eq(buf, want, "an open after the reader closed read the old version");
    close(fd2);
}

/* The same when the store moved the memory and changed its content in one
 * update: the file, held open, shows the new content at its new name. */
Test(mount_sync_open, a_remote_move_with_new_content_reaches_a_reader_of_a_file_held_open)
{
    const char *want = "version two, moved and longer\n";
    char path[512], moved[512], buf[128];
    snprintf(path, sizeof(path), "%s/f.md", mnt);
    snprintf(moved, sizeof(moved), "%s/g.md", mnt);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    ssize_t n = pread(fd, buf, sizeof(buf), 0);
    cr_assert_eq(n, 3);
    char *id = sy_id("/f.md");
    cr_assert(id);
    cr_assert_eq(sy_remote_update(id, "{\"path\":\"/g.md\","
                                      "\"content\":\"version two, moved and longer\\n\"}"), 200);
    free(id);
    sy_after_sync();

    struct stat st;
    cr_assert_eq(stat(moved, &st), 0, "%s", strerror(errno));
    cr_expect_eq(st.st_size, (off_t)strlen(want), "stat's size %lld, the old version's",
                 (long long)st.st_size);
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    cr_expect_str_eq(buf, want, "the reader holding the file read the old version");
    int fd2 = open(moved, O_RDONLY);
    cr_assert_geq(fd2, 0, "%s", strerror(errno));
    n = read(fd2, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    cr_expect_str_eq(buf, want, "an open of the new name read the old version");
    close(fd2);
    close(fd);
}

/* An append after a remote update goes at the end of the store's version:
 * by a new `>>` and by a writer that held the file open with O_APPEND
 * since before the update.  Before the fix the kernel placed the held
 * writer's bytes at the size it had cached (the update invalidates the
 * attributes; nothing reads them again before a write), and the daemon
 * wrote them there: "a mheld\nonger remote line" over a longer version,
 * NUL bytes after a shorter one; and that was pushed. */
Test(mount_sync_open, an_append_after_a_remote_update_goes_at_its_end)
{
    char *id = sy_id("/f.md");
    sy_after_sync();
    char path[600];
    snprintf(path, sizeof(path), "%s/f.md", mnt);
    int fd = open(path, O_WRONLY | O_APPEND);
    cr_assert_geq(fd, 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"a much longer remote line\\n\"}"), 200);
    sy_after_sync();
    cr_assert_eq(write(fd, "held\n", 5), 5);
    cr_assert_eq(close(fd), 0);
    cr_assert_eq(sy_run(NULL, "echo new >> f.md"), 0);
    char *out = NULL;
    sy_run(&out, "cat f.md");
    cr_expect_str_eq(out, "a much longer remote line\nheld\nnew\n");
    free(out);
    sy_after_sync();
    /* Shorter in the store: the append went past its end (NUL bytes). */
    fd = open(path, O_WRONLY | O_APPEND);
    cr_assert_geq(fd, 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"short\\n\"}"), 200);
    sy_after_sync();
    cr_assert_eq(write(fd, "held\n", 5), 5);
    cr_assert_eq(close(fd), 0);
    sy_run(&out, "od -c f.md | head -3");
    char *got = NULL;
    sy_run(&got, "cat f.md");
    cr_expect_str_eq(got, "short\nheld\n", "%s", out);
    free(got);
    free(out);
    sy_after_sync();
    char *c = sy_content("/f.md");
    cr_expect_str_eq(c ? c : "(none)", "short\nheld\n", "the store holds another version");
    free(c);
    free(id);
}

/* open(O_CREAT) without O_EXCL of a name the sync brings at that
 * moment: the kernel looked the name up (not there), then sent its
 * create, and the sync's new row went in between.  The open must open
 * the memory, as it would a moment later, never fail with EEXIST.  The
 * window is the kernel's turn between the two requests, so two threads
 * make and remove the names in a loop through several syncs, each
 * bringing new ones. */
#define RACE_ROUNDS 16
#define RACE_N 40

struct opener {
    volatile bool stop;
    volatile int round;
    int eexist, other, ok, last_errno;
};

static void *open_loop(void *arg)
{
    struct opener *o = arg;
    while (!o->stop) {
        int r = o->round;
        for (int i = 0; i < RACE_N && !o->stop; i++) {
            char p[600];
            snprintf(p, sizeof(p), "%s/d/r%d-%02d.md", mnt, r, i);
            int fd = open(p, O_CREAT | O_RDONLY, 0644);
            if (fd >= 0) {
                close(fd);
                unlink(p);
                __atomic_add_fetch(&o->ok, 1, __ATOMIC_RELAXED);
            } else if (errno == EEXIST) {
                __atomic_add_fetch(&o->eexist, 1, __ATOMIC_RELAXED);
            } else {
                __atomic_add_fetch(&o->other, 1, __ATOMIC_RELAXED);
                o->last_errno = errno;
            }
        }
    }
    return NULL;
}

Test(mount_sync_open, an_open_o_creat_of_a_name_the_sync_brings_opens_it)
{
    cr_assert_eq(sy_run(NULL, "mkdir d && touch d/seed.md"), 0);
    sy_after_sync();
    struct opener o = {0};
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        cr_assert_eq(pthread_create(&t[k], NULL, open_loop, &o), 0);
    for (int r = 0; r < RACE_ROUNDS; r++) {
        o.round = r;
        for (int i = 0; i < RACE_N; i++) {
            char path[64];
            snprintf(path, sizeof(path), "/d/r%d-%02d.md", r, i);
            char *id = t_create_memory(&E.msd, store, path, "remote\n");
            cr_assert_not_null(id, "cannot create %s", path);
            free(id);
        }
        sy_after_sync();
    }
    o.stop = true;
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    cr_expect_eq(o.eexist, 0, "%d of %d opens failed with EEXIST", o.eexist,
                 o.eexist + o.ok + o.other);
    cr_expect_eq(o.other, 0, "%d opens failed otherwise: %s", o.other, strerror(o.last_errno));
}

/* A file closed by one writer while another still holds it open is held:
 * no periodic sync pushes it.  `sync --wait` says so (exit 3, the file
 * named) whether or not the round found anything else to do.  Before the
 * fix a round with nothing to do answered "pending 0" and exit 0. */
Test(mount_sync_open, sync_wait_names_a_file_another_writer_holds_open)
{
    sy_after_sync();
    char *out = NULL;
    int rc = sy_run(&out, "exec 3>>f.md; echo more >> f.md; $MFS sync --wait . 2>&1;"
                          " echo \"rc=$?\"; exec 3>&-");
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "rc=3"), "sync --wait did not say the held file is unpushed: %s", out);
    cr_expect(strstr(out, "pending 1"), "%s", out);
    cr_expect(strstr(out, "f.md"), "the held file is not named: %s", out);
    free(out);
    /* Its last writer gone, the next sync pushes it. */
    rc = sy_run(&out, "$MFS sync --wait . 2>&1");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    const char *const want[] = {"/f.md", "v1\nmore\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "f.md was not pushed: %s", last);
    free(last);
}

/* A file saved by one writer while another holds it open is held: no
 * periodic sync pushes it, its rename included.  Renamed away, it still
 * owns its memory, which the store lists at the path it left: a new file
 * written there waits for that rename (the create is refused until then);
 * it is not a file that met another memory at its path, which the store
 * wins (the new file went, its bytes only in a conflict record). */
Test(mount_sync_open, a_new_file_at_the_path_a_held_file_left_waits_for_it)
{
    sy_after_sync();
    char *out = NULL;
    int rc = sy_run(&out, "exec 3>>f.md; echo more >> f.md; mv f.md g.md; echo new > f.md; "
                          "$MFS sync --wait . >/dev/null 2>&1; echo \"rc=$?\"; cat f.md 2>&1;"
                          " exec 3>&-");
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "rc=3"), "the held rename was not left pending: %s", out);
    cr_expect(strstr(out, "new\n"), "the new file went: %s", out);
    free(out);
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(n, "0", "the new file was taken for a conflict");
    free(n);
    /* Its writer gone, the rename goes out, then the create. */
    rc = sy_run(&out, "$MFS sync --wait . 2>&1 || $MFS sync --wait . 2>&1");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    const char *const want[] = {"/f.md", "new\n", "/g.md", "v1\nmore\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store differs: %s", last);
    free(last);
}

/* rm, then a new file at the path, still open when a sync comes: the new
 * file takes the memory over once closed (an update, docs/sync.md), the
 * deletion is not sent meanwhile (the memory's history ended, a new one
 * began). */
Test(mount_sync_open, a_file_made_again_and_held_open_takes_its_memory_over)
{
    /* Rounds only when asked for: one between the rm and the open would
     * send the deletion, rightly. */
    sy_remount("--sync-interval 3600");
    char *out = NULL;
    cJSON *l = sy_list();
    char *was = strdup(tj_str(sy_find(l, "/f.md"), "id"));
    cJSON_Delete(l);
    int rc = sy_run(&out, "rm f.md; exec 3>f.md; echo again >&3; $MFS sync --wait . 2>&1;"
                          " exec 3>&-; $MFS sync --wait . 2>&1");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    const char *const want[] = {"/f.md", "again\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store differs: %s", last);
    free(last);
    l = sy_list();
    const char *now = tj_str(sy_find(l, "/f.md"), "id");
    cr_expect(now && strcmp(now, was) == 0, "f.md is memory %s, was %s", now ? now : "-", was);
    cJSON_Delete(l);
    free(was);
}
