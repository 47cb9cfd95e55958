/* test_mount_sync_conflict.c - the store wins: a memory edited both
 * locally and remotely between two syncs ends with the remote content in
 * the mount, a warning naming the path in the log, and the lost local
 * bytes kept in the cache as a conflict record that can be read back; a
 * memory deleted remotely but edited locally is re-created from the file. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reconcile.h"
#include "test_mount_sync.h"

static const char *const seed[] = {
    "/c.md", "base\n",
    "/notes/r.md", "will be deleted remotely\n",
    "/other.md", "untouched\n",
    NULL,
};

static void setup(void)
{
    sy_start(seed);
    sy_mount(false, "");
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_conflict, .init = setup, .fini = teardown, .timeout = 90);

Test(mount_sync_conflict, both_changed_the_store_wins_and_the_local_bytes_are_kept)
{
    char *id = sy_id("/c.md");
    cr_assert_not_null(id);
    sy_after_sync();
    /* Both edits land between two syncs. */
    cr_assert_eq(sy_run(NULL, "printf 'local edit\\n' > c.md"), 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"remote edit\\n\"}"), 200);

    cr_assert(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s/c.md')\" = 'remote edit'", mnt),
              "the mount does not show the remote version");
    char *out = NULL;
    sy_run(&out, "cat c.md");
    cr_expect_str_eq(out, "remote edit\n");
    free(out);
    cr_expect(sy_wait_log(REC_MSG_BOTH_CHANGED, "path=/c.md", 1, WITHIN),
              "no warning naming the path in the log");
    cr_expect_eq(sy_log_count(REC_MSG_BOTH_CHANGED, "level=warn"), 1,
                 "the conflict is not one warning");

    /* The server kept the remote edit: no push of the losing local one. */
    char *c = sy_content("/c.md");
    cr_expect_str_eq(c ? c : "(none)", "remote edit\n");
    free(c);
    cr_expect_eq(sy_count_versions(id, "modified"), 1, "the local edit reached the store");

    /* The conflict record, with the lost bytes readable. */
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts WHERE path = '/c.md'");
    cr_expect_str_eq(n, "1", "no conflict record for /c.md");
    free(n);
    char *lost = mnt_q(&E, "SELECT CAST(b.data AS TEXT) FROM conflicts k JOIN blobs b"
                      " ON b.sha = k.local_sha WHERE k.path = '/c.md'");
    cr_expect_str_eq(lost, "local edit\n", "the lost local content is not kept");
    free(lost);
    char *rsha = mnt_q(&E, "SELECT remote_sha || ' ' || memory_id FROM conflicts WHERE path = '/c.md'");
    char want[300];
    snprintf(want, sizeof(want), "%s %s", t_sha("remote edit\n"), id);
    cr_expect_str_eq(rsha, want, "the record names another memory or remote version");
    free(rsha);

    /* The file is clean again: the next syncs push nothing. */
    cr_expect(sy_wait_clean(WITHIN), "the file stays pending");
    sy_after_sync();
    cr_expect_eq(sy_count_versions(id, NULL), 2, "a later sync wrote to the memory");

    /* `memstorefs conflicts` lists it and prints the lost content. */
    cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts --cache-dir \"$CACHE\""), 0, "%s", out);
    cr_expect(strstr(out, "/c.md") != NULL, "conflicts does not list /c.md: %s", out);
    free(out);
    char *kid = mnt_q(&E, "SELECT id FROM conflicts WHERE path = '/c.md'");
    cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts show %s --cache-dir \"$CACHE\"", kid), 0,
                 "%s", out);
    cr_expect_str_eq(out, "local edit\n", "conflicts show does not print the lost bytes");
    free(out);
    free(kid);
    free(id);
}

/* An edit still in an open file's buffer when a sync brings the store's
 * version: at close the store wins too; the edit is not pushed over the
 * remote change, and its bytes are kept as a conflict record. */
Test(mount_sync_conflict, an_edit_still_open_loses_to_a_remote_change)
{
    char *id = sy_id("/c.md");
    cr_assert_not_null(id);
    sy_after_sync();
    char path[600];
    snprintf(path, sizeof(path), "%s/c.md", mnt);
    int fd = open(path, O_WRONLY | O_TRUNC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "open edit\n", 10), 10);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"remote while open\\n\"}"), 200);
    sy_after_sync(); /* a sync sees the remote change while the file is open */
    cr_assert_eq(close(fd), 0);

    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s')\" = 'remote while open'", path),
              "the mount does not show the store's version");
    sy_after_sync(); /* and a later sync pushes nothing over it */
    char *c = sy_content("/c.md");
    cr_expect_str_eq(c ? c : "(none)", "remote while open\n", "the open edit overwrote the store");
    free(c);
    cr_expect_eq(sy_count_versions(id, "modified"), 1, "the open edit reached the store");
    char *lost = mnt_q(&E, "SELECT CAST(b.data AS TEXT) FROM conflicts k JOIN blobs b"
                      " ON b.sha = k.local_sha WHERE k.path = '/c.md'");
    char *all = sy_log_grep("level=");
    cr_expect_str_eq(lost, "open edit\n", "the open edit is not kept as a conflict (%s)", all);
    free(all);
    free(lost);
    cr_expect(sy_wait_log(REC_MSG_BOTH_CHANGED, NULL, 1, WITHIN), "no warning in the log");
    free(id);
}

/* An edit still in an open file's buffer when a sync removes the file
 * (its memory deleted remotely): the store wins, and the edit is kept as a
 * conflict record, not saved onto the removed file where nothing would
 * ever push or show it. */
Test(mount_sync_conflict, an_edit_still_open_when_the_memory_is_deleted_remotely_is_kept)
{
    char *id = sy_id("/other.md");
    cr_assert_not_null(id);
    sy_after_sync();
    char path[600];
    snprintf(path, sizeof(path), "%s/other.md", mnt);
    int fd = open(path, O_WRONLY | O_APPEND);
    cr_assert_geq(fd, 0);
    cr_assert_eq(sy_remote_delete(id), 200);
    sy_after_sync(); /* the sync removes the clean file while it is open */
    cr_assert_neq(sy_run(NULL, "test -e other.md"), 0, "the sync did not remove other.md");
    cr_assert_eq(write(fd, "open edit\n", 10), 10);
    cr_assert_eq(close(fd), 0);
    sy_after_sync();
    char *lost = mnt_q(&E, "SELECT CAST(b.data AS TEXT) FROM conflicts k JOIN blobs b"
                           " ON b.sha = k.local_sha WHERE k.path = '/other.md'");
    cr_expect_str_eq(lost, "untouched\nopen edit\n", "the open edit was not kept");
    free(lost);
    char *c = sy_content("/other.md");
    cr_expect_null(c, "the deleted memory came back: %s", c ? c : "");
    free(c);
    free(id);
}

/* c.md opened read-write, LOCAL1 written at its start and fsynced, while
 * the store changed it to remote + "\n"; then a sync, where the store
 * wins over the saved edit: the descriptor, still open (*id: the memory's,
 * malloc'd). */
static int lose_a_saved_edit(const char *remote, char **id)
{
    *id = sy_id("/c.md");
    cr_assert_not_null(*id);
    sy_after_sync();
    char path[600], body[200];
    snprintf(path, sizeof(path), "%s/c.md", mnt);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, "LOCAL1", 6, 0), 6);
    snprintf(body, sizeof(body), "{\"content\":\"%s\\n\"}", remote);
    cr_assert_eq(sy_remote_update(*id, body), 200);
    cr_assert_eq(fsync(fd), 0);
    sy_after_sync(); /* both changed: the store wins over the saved edit */
    return fd;
}

/* lose_a_saved_edit, then a new writer takes the file over (`echo fixed
 * > c.md` beside the writer that lost, still open: its fd). */
static int lost_and_taken_over(char **id)
{
    int fd = lose_a_saved_edit("the store's version", id);
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "echo fixed > c.md"), 0, "%s", out);
    free(out);
    return fd;
}

/* A writer whose saved edit lost to the store keeps the file open and
 * writes on: its later writes continue its own version, which is kept as
 * a conflict record whole, never laid over the store's version and
 * pushed. */
Test(mount_sync_conflict, a_writer_that_lost_to_the_store_and_writes_on_pushes_no_mix)
{
    char *id = NULL;
    int fd = lose_a_saved_edit("the store's version, longer", &id);
    cr_assert_eq(pwrite(fd, "LOCAL2", 6, 6), 6);
    char back[64];
    /* Read back: the kernel's pages and size are the writer's version. */
    cr_assert_eq(pread(fd, back, sizeof(back), 0), 12);
    cr_assert_eq(close(fd), 0);
    sy_after_sync();

    char *c = sy_content("/c.md");
    cr_expect_str_eq(c ? c : "(none)", "the store's version, longer\n",
                     "the writer's later writes were pushed over the store's version");
    free(c);
    char *out = NULL;
    sy_run(&out, "cat c.md");
    cr_expect_str_eq(out, "the store's version, longer\n");
    free(out);
    char *kept = sy_records_at("/c.md");
    cr_expect_str_eq(kept, "LOCAL1|LOCAL1LOCAL2", "the writer's version is not kept whole");
    free(kept);
    free(id);
}

/* A writer that opens the file after an edit lost to the store, while the
 * writer that lost still holds it (an editor left open), starts from the
 * store's version, and its edit is saved and pushed as any other, not
 * kept as a record of the edit that lost. */
Test(mount_sync_conflict, a_new_writer_after_a_lost_edit_is_saved_as_any_other)
{
    char *id = NULL;
    int fd = lose_a_saved_edit("the store's version", &id);
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "cat c.md; echo fixed > c.md; cat c.md"), 0, "%s", out);
    cr_expect_str_eq(out, "LOCAL1fixed\n", "the new writer's edit is not the file's");
    free(out);
    cr_assert_eq(close(fd), 0);
    sy_after_sync();
    char *c = sy_content("/c.md");
    cr_expect_str_eq(c ? c : "(none)", "fixed\n", "the new writer's edit did not reach the store");
    free(c);
    char *kept = sy_records_at("/c.md");
    cr_expect_str_eq(kept, "LOCAL1", "the records are not the lost edit's alone");
    free(kept);
    free(id);
}

/* The writer that lost, still open after a new writer took the file
 * over, writes no more: its writes went into the new writer's version
 * (the store's, or what the new writer wrote) and were saved and pushed
 * with it.  Before the fix: the pwrite, the ftruncate and the fsync went
 * in, and the store and the file read "X". */
Test(mount_sync_conflict, a_writer_that_lost_cannot_write_into_the_new_writer_s_version)
{
    char *id = NULL;
    int fd = lost_and_taken_over(&id);
    char *out = NULL;
    errno = 0;
    cr_expect_eq(pwrite(fd, "XX", 2, 0), -1, "the lost writer's write went in");
    cr_expect_eq(errno, EIO, "%s", strerror(errno));
    errno = 0;
    cr_expect_eq(ftruncate(fd, 1), -1, "the lost writer's truncate went in");
    cr_expect_eq(errno, EIO, "%s", strerror(errno));
    errno = 0;
    cr_expect_eq(fsync(fd), -1, "the lost writer's fsync saved");
    cr_expect_eq(errno, EIO, "%s", strerror(errno));
    cr_assert_eq(close(fd), 0);
    sy_after_sync();
    sy_run(&out, "cat c.md");
    cr_expect_str_eq(out, "fixed\n", "the file is a mix");
    free(out);
    char *c = sy_content("/c.md");
    cr_expect_str_eq(c ? c : "(none)", "fixed\n", "a mix reached the store");
    free(c);
    char *kept = sy_records_at("/c.md");
    cr_expect_str_eq(kept, "LOCAL1", "the records are not the lost edit's alone");
    free(kept);
    free(id);
}

/* A handle a lost edit's take-over ended keeps that give-up's error when
 * a later edit is given up in turn (a write past the size limit cut the
 * new writer's rewrite): its writes and fsyncs still fail with EIO, as
 * documented for a lost writer.  Before the fix one error per file was
 * kept, the latest: they failed with EFBIG ("File too large").  The cut
 * rewrite puts back the new writer's edit, unpushed yet. */
Test(mount_sync_conflict, a_handle_ended_by_a_take_over_keeps_its_error_after_a_later_cut)
{
    char *id = NULL;
    int fd = lost_and_taken_over(&id);
    char *out = NULL;
    errno = 0;
    cr_expect_eq(pwrite(fd, "XX", 2, 0), -1, "the lost writer's write went in");
    cr_expect_eq(errno, EIO, "before the cut: %s", strerror(errno));
    int rc = sy_run(&out, "{ head -c 150000 /dev/zero > c.md; } 2>&1; echo; cat c.md");
    cr_expect(rc == 0 && out && strstr(out, "File too large") && strstr(out, "\nfixed\n"),
              "the cut: %s", out);
    free(out);
    errno = 0;
    cr_expect_eq(pwrite(fd, "XX", 2, 0), -1, "the lost writer's write went in");
    cr_expect_eq(errno, EIO, "after the cut: %s", strerror(errno));
    errno = 0;
    cr_expect_eq(fsync(fd), -1, "the lost writer's fsync saved");
    cr_expect_eq(errno, EIO, "after the cut: %s", strerror(errno));
    cr_assert_eq(close(fd), 0);
    sy_after_sync();
    char *c = sy_content("/c.md");
    cr_expect_str_eq(c ? c : "(none)", "fixed\n", "the store does not hold the new writer's edit");
    free(c);
    free(id);
}

/* `truncate FILE` after an edit lost to the store is a new writer's
 * change too: it cuts the store's version and is pushed.  Before the fix
 * the truncated lost edit went into a record, `truncate` exited 0, and
 * the file showed the store's version whole once the writer closed. */
Test(mount_sync_conflict, a_truncate_by_path_after_a_lost_edit_cuts_the_store_s_version)
{
    char *id = NULL;
    int fd = lose_a_saved_edit("the store's version", &id);
    char *out = NULL, path[600];
    snprintf(path, sizeof(path), "%s/c.md", mnt);
    /* truncate(2) itself: truncate(1) opens the file first. */
    cr_assert_eq(truncate(path, 9), 0, "%s", strerror(errno));
    cr_assert_eq(sy_run(&out, "cat c.md"), 0, "%s", out);
    cr_expect_str_eq(out, "the store", "the file is not the store's version cut");
    free(out);
    cr_assert_eq(close(fd), 0);
    sy_after_sync();
    sy_run(&out, "cat c.md");
    cr_expect_str_eq(out, "the store", "the truncate did not last");
    free(out);
    char *c = sy_content("/c.md");
    cr_expect_str_eq(c ? c : "(none)", "the store", "the truncate did not reach the store");
    free(c);
    char *kept = sy_records_at("/c.md");
    cr_expect_str_eq(kept, "LOCAL1", "the records are not the lost edit's alone");
    free(kept);
    free(id);
}

/* A new writer that opens the file without truncating it, after an edit
 * that lost to the store, reads the store's version whole: the kernel's
 * size was the lost edit's. */
Test(mount_sync_conflict, a_new_writer_after_a_lost_edit_reads_the_store_s_version_whole)
{
    char *id = NULL;
    int fd = lose_a_saved_edit("the store's version, much longer than the file was", &id);
    char path[600], buf[200];
    snprintf(path, sizeof(path), "%s/c.md", mnt);
    int fd2 = open(path, O_RDWR);
    cr_assert_geq(fd2, 0);
    ssize_t n = read(fd2, buf, sizeof(buf) - 1);
    cr_assert_geq(n, 0);
    buf[n] = '\0';
    cr_expect_str_eq(buf, "the store's version, much longer than the file was\n");
    struct stat sb;
    cr_assert_eq(fstat(fd2, &sb), 0);
    cr_expect_eq(sb.st_size, (off_t)strlen("the store's version, much longer than the file was\n"));
    cr_assert_eq(close(fd2), 0);
    cr_assert_eq(close(fd), 0);
    free(id);
}

/* The same when the sync removed the file (memory deleted remotely) under
 * the writer's unsaved edit: its fsync keeps the edit as a record, and
 * what it writes after that is kept too, not saved onto the removed file
 * where nothing shows or pushes it. */
Test(mount_sync_conflict, a_writer_whose_file_was_deleted_remotely_keeps_its_later_writes)
{
    char *id = sy_id("/other.md");
    cr_assert_not_null(id);
    sy_after_sync();
    char path[600];
    snprintf(path, sizeof(path), "%s/other.md", mnt);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, "x", 1, 0), 1);
    cr_assert_eq(sy_remote_delete(id), 200);
    sy_after_sync();
    cr_assert_neq(sy_run(NULL, "test -e other.md"), 0, "the sync did not remove other.md");
    cr_assert_eq(fsync(fd), 0);
    cr_assert_eq(pwrite(fd, "LOST", 4, 1), 4);
    cr_assert_eq(close(fd), 0);
    sy_after_sync();
    char *kept = sy_records_at("/other.md");
    cr_expect_str_eq(kept, "xntouched\n|xLOSTched\n", "the later writes were lost");
    free(kept);
    char *c = sy_content("/other.md");
    cr_expect_null(c, "the deleted memory came back: %s", c ? c : "");
    free(c);
    free(id);
}

/* rm c.md and a new c.md, while c.md's memory is renamed at the server:
 * the new file does not take over a memory that is no longer at its path
 * (the store would win against it and throw it away, and the tombstone
 * left would later delete the moved memory); the memory stays where it
 * went, and the new file is created. */
Test(mount_sync_conflict, a_new_file_does_not_take_over_a_memory_renamed_remotely)
{
    char *id = sy_id("/c.md");
    cr_assert_not_null(id);
    sy_after_sync();
    cr_assert_eq(sy_remote_update(id, "{\"path\":\"/moved.md\"}"), 200);
    cr_assert_eq(sy_run(NULL, "rm -f c.md; echo new > c.md"), 0);
    char *t = mnt_q(&E, "SELECT count(*) FROM tombstones");
    cr_assert_str_eq(t, "1", "c.md was moved by a sync before rm");
    free(t);
    const char *const want[] = {
        "/c.md", "new\n", "/moved.md", "base\n", "/notes/r.md", "will be deleted remotely\n",
        "/other.md", "untouched\n", NULL,
    };
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_expect(ok, "the store did not keep both: %s", last);
    free(last);
    sy_after_sync();
    sy_after_sync();
    ok = sy_wait_server(want, 1, &last);
    cr_expect(ok, "a later sync changed the store: %s", last);
    free(last);
    char *now = sy_id("/moved.md");
    cr_expect(now && strcmp(now, id) == 0, "the renamed memory was replaced");
    free(now);
    cr_expect_eq(sy_count_versions(id, "deleted"), 0, "the renamed memory was deleted");
    char *out = NULL;
    sy_run(&out, "cat c.md moved.md 2>&1");
    cr_expect_str_eq(out, "new\nbase\n", "the mount does not show both");
    free(out);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "the new file was kept as a conflict record");
    free(k);
    free(id);
}

/* notes/r.md edited here, its memory deleted at the server; its id. */
static char *edit_here_delete_there(void)
{
    char *id = sy_id("/notes/r.md");
    cr_assert_not_null(id);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "printf 'edited here\\n' >> notes/r.md"), 0);
    cr_assert_eq(sy_remote_delete(id), 200);
    return id;
}

Test(mount_sync_conflict, deleted_remotely_edited_locally_is_created_again)
{
    char *id = edit_here_delete_there();

    const char *const want[] = {
        "/c.md", "base\n", "/other.md", "untouched\n",
        "/notes/r.md", "will be deleted remotely\nedited here\n", NULL,
    };
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_assert(ok, "the edited file was not created again: %s", last);
    free(last);
    char *nid = sy_id("/notes/r.md");
    cr_expect(nid && strcmp(nid, id) != 0, "the deleted memory came back with its id");
    free(nid);
    char *out = NULL;
    sy_run(&out, "cat notes/r.md");
    cr_expect_str_eq(out, "will be deleted remotely\nedited here\n", "the local edit was lost");
    free(out);
    cr_expect(sy_wait_log(REC_MSG_RECREATE, "path=/notes/r.md", 1, WITHIN),
              "no log line for the re-creation");
    cr_expect(sy_wait_clean(WITHIN), "the file stays pending");
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(n, "0", "a conflict was recorded");
    free(n);
    free(id);
}

/* The re-creation's answer is lost (the server made the memory, then the
 * connection dropped): the next sync recognises the memory at the path as
 * its own upload, so the file takes it; it is neither created a second
 * time nor deleted as a memory no file has. */
Test(mount_sync_conflict, a_re_creation_whose_answer_was_lost_is_adopted)
{
    /* Every answer to a create is lost (the first request makes the
     * memory, each resend meets it) until the sync gives up. */
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":0,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
    char *id = edit_here_delete_there();
    cr_assert(sy_wait_log(REC_MSG_UPLOAD_FAILED, "path=/notes/r.md", 1, WITHIN + 10),
              "the re-creation did not fail");
    sy_clear_faults();
    const char *const want[] = {
        "/c.md", "base\n", "/other.md", "untouched\n",
        "/notes/r.md", "will be deleted remotely\nedited here\n", NULL,
    };
    char *last = NULL;
    bool ok = sy_wait_server(want, 1, &last);
    cr_assert(ok, "the re-creation was not made: %s", last);
    free(last);
    char *nid = sy_id("/notes/r.md");
    cr_assert_not_null(nid);
    cr_expect(sy_wait_clean(WITHIN), "the file stays pending");
    sy_after_sync();
    sy_after_sync();
    ok = sy_wait_server(want, 1, &last);
    cr_expect(ok, "a later sync changed the store: %s", last);
    free(last);
    char *now = sy_id("/notes/r.md");
    cr_expect(now && strcmp(now, nid) == 0, "the re-created memory was replaced by %s",
              now ? now : "nothing");
    free(now);
    cr_expect_eq(sy_count_versions(nid, NULL), 1, "the re-created memory was written again");
    cr_expect_eq(sy_count_versions(NULL, "created"), 4, "the path was created twice");
    cr_expect_eq(sy_count_versions(NULL, "deleted"), 1, "a memory was deleted by the daemon");
    cr_expect_eq(sy_log_count("two memories at one path", NULL), 0,
                 "the deleted memory was taken for listed");
    char *out = NULL;
    sy_run(&out, "cat notes/r.md");
    cr_expect_str_eq(out, "will be deleted remotely\nedited here\n", "the local edit was lost");
    free(out);
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(n, "0", "a conflict was recorded");
    free(n);
    n = mnt_q(&E, "SELECT count(*) FROM tombstones");
    cr_expect_str_eq(n, "0", "a memory waits to be deleted");
    free(n);
    free(nid);
    free(id);
}

Test(mount_sync_conflict, a_local_rename_against_a_remote_edit_loses)
{
    char *id = sy_id("/other.md");
    cr_assert_not_null(id);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "mv other.md renamed.md"), 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"changed remotely\\n\"}"), 200);

    cr_assert(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s/other.md' 2>/dev/null)\" = "
                                      "'changed remotely' && ! test -e '%s/renamed.md'", mnt, mnt),
              "the remote version did not win");
    const char *const want[] = {
        "/c.md", "base\n", "/notes/r.md", "will be deleted remotely\n",
        "/other.md", "changed remotely\n", NULL,
    };
    char *last = NULL;
    cr_expect(sy_wait_server(want, 2, &last), "the store changed: %s", last);
    free(last);
    cr_expect(sy_log_count(REC_MSG_BOTH_CHANGED, "path=/renamed.md") +
                  sy_log_count(REC_MSG_BOTH_CHANGED, "path=/other.md") >= 1,
              "no warning");
    cr_expect(sy_wait_clean(WITHIN), "pending changes remain");
    free(id);
}

/* The file's memory is deleted remotely and another memory takes its path
 * (another client removed it and wrote the path anew) while the file is
 * edited here: the path changed on both sides, so the store wins, as for
 * a new file meeting a memory at its path: the other memory's content
 * shows, the local edit is kept as a conflict record, and the sync does
 * not keep asking to create the path again. */
Test(mount_sync_conflict, a_path_another_memory_took_after_a_remote_delete_is_the_stores)
{
    char *id = edit_here_delete_there();
    char *other = t_create_memory(&E.msd, store, "/notes/r.md", "written anew remotely\n");
    cr_assert_not_null(other);
    sy_after_sync();
    sy_after_sync();
    const char *const want[] = {
        "/c.md", "base\n", "/other.md", "untouched\n",
        "/notes/r.md", "written anew remotely\n", NULL,
    };
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_expect(ok, "the store changed: %s", last);
    free(last);
    char *out = NULL;
    sy_run(&out, "cat notes/r.md");
    cr_expect_str_eq(out, "written anew remotely\n", "the store's memory does not show");
    free(out);
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts WHERE path = '/notes/r.md'");
    cr_expect_str_eq(n, "1", "the local edit was not kept as a conflict record");
    free(n);
    cr_expect(sy_wait_clean(WITHIN), "the file stays pending");
    free(other);
    free(id);
}

/* Both sides moved the memory to the same path, and the store changed its
 * content too: the file takes the store's content at that path, and stays
 * there at the next syncs (which read the version feed). */
Test(mount_sync_conflict, a_move_both_sides_made_stays_where_both_put_it)
{
    char *id = sy_id("/c.md"), *other = sy_id("/other.md");
    cr_assert(id && other);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "mv c.md moved.md"), 0);
    cr_assert_eq(sy_remote_update(id, "{\"path\":\"/moved.md\",\"content\":\"remote\\n\"}"), 200);
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "ls; cat moved.md");
    cr_expect_str_eq(out, "moved.md\nnotes\nother.md\nremote\n");
    free(out);
    /* Another change, for a sync that reads the feed. */
    cr_assert_eq(sy_remote_update(other, "{\"content\":\"touched\\n\"}"), 200);
    sy_after_sync();
    sy_after_sync();
    sy_run(&out, "ls; cat moved.md");
    cr_expect_str_eq(out, "moved.md\nnotes\nother.md\nremote\n", "the file went back");
    free(out);
    char *c = sy_content("/moved.md");
    cr_expect_str_eq(c ? c : "(none)", "remote\n");
    free(c);
    cr_expect_eq(sy_pending(), 0);
    free(id);
    free(other);
}
