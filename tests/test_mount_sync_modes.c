/* test_mount_sync_modes.c - a deletion carries the --sync-deletions mode in
 * force when the file was removed: a file removed under log_only (or
 * disabled) is never deleted from the store by a later mount in the
 * default mode nor by `memstorefs flush`, which finishes and says what it
 * did not delete and why; the next session shows the memory again.  Each
 * failed before the fix (issue 8, case 5): the next default mount deleted
 * the memory, and flush said "still pending 1" and exited 1. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reconcile.h"
#include "test_mount_sync.h"

static const char *const seed[] = {"/k.md", "kept\n", "/other.md", "other\n", NULL};

static void setup(void)
{
    sy_start(seed);
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_modes, .init = setup, .fini = teardown, .timeout = 150);

#define DELETE_ROUTE "DELETE /v1/memory_stores/{id}/memories/{id}"

static void unmount(void)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS unmount '%s'", mnt);
    cr_assert_eq(rc, 0, "unmount failed: %s", out);
    free(out);
}

/* Removes k.md under mode and waits for the sync that keeps it. */
static void remove_under(const char *mode)
{
    char opt[64];
    snprintf(opt, sizeof(opt), "--sync-deletions %s", mode);
    sy_mount(false, opt);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "rm k.md"), 0);
    sy_after_sync();
    sy_after_sync();
    cr_expect_neq(sy_run(NULL, "test -e k.md"), 0, "k.md came back in the same session");
}

/* Kills the daemon (SIGKILL, by its pid) and cleans its dead mount: a
 * session that ended without its final sync. */
static void kill_daemon(void)
{
    pid_t pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 1);
    kill(pid, SIGKILL);
    for (int i = 0; i < 50 && kill(pid, 0) == 0; i++)
        usleep(100 * 1000);
    char *out = NULL;
    mnt_sh(&E, &out, "$MFS unmount '%s'", mnt); /* cleans the dead mount */
    free(out);
}

static void expect_memory_kept(const char *id)
{
    char *c = sy_content("/k.md");
    cr_expect_str_eq(c ? c : "(deleted)", "kept\n", "the memory was deleted");
    free(c);
    cr_expect_eq(sy_count_versions(id, "deleted"), 0, "a deleted version was written");
    cr_expect_eq(t_route_count(&E.msd, DELETE_ROUTE), 0, "a delete was sent");
}

static void later_default_mount_keeps(const char *mode)
{
    char *id = sy_id("/k.md");
    cr_assert_not_null(id);
    remove_under(mode);
    unmount();
    sy_mount(false, "");
    sy_after_sync();
    sy_after_sync();
    expect_memory_kept(id);
    /* A new session: the memory shows again. */
    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s/k.md')\" = kept", mnt),
              "k.md did not come back in the next session");
    free(id);
}

Test(mount_sync_modes, a_log_only_deletion_is_never_sent_by_a_later_mount)
{
    later_default_mount_keeps("log_only");
}

Test(mount_sync_modes, a_disabled_deletion_is_never_sent_by_a_later_mount)
{
    later_default_mount_keeps("disabled");
}

/* The daemon is killed while a log_only deletion is recorded: flush, in
 * either mode, leaves the memory and finishes with exit 0, saying why. */
Test(mount_sync_modes, flush_finishes_and_says_what_it_did_not_delete)
{
    char *id = sy_id("/k.md");
    cr_assert_not_null(id);
    remove_under("log_only");
    cr_assert_eq(sy_run(NULL, "echo edited > other.md"), 0);
    kill_daemon();
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "timeout 60 $MFS flush --cache-dir $CACHE --sync-deletions log_only");
    cr_expect_eq(rc, 0, "flush log_only failed: %s", out);
    cr_expect(strstr(out, "not deleted 1") && strstr(out, "log_only"),
              "flush does not say what it did not delete and why: %s", out);
    free(out);
    rc = mnt_sh(&E, &out, "timeout 60 $MFS flush --cache-dir $CACHE");
    cr_expect_eq(rc, 0, "flush in the default mode failed: %s", out);
    cr_expect(strstr(out, "not deleted 1"), "flush does not say what it kept: %s", out);
    free(out);
    expect_memory_kept(id);
    char *c = sy_content("/other.md");
    cr_expect_str_eq(c ? c : "(none)", "edited\n", "flush did not push the edit");
    free(c);
    free(id);
}

/* rm k.md; then a new k.md (an editor that removes before it writes),
 * under a mode that sends no deletion: the new file takes the memory over
 * (one update), as in the default mode; it is not thrown away as a file
 * never synced meeting the memory at its path. */
static void rewrite_under(const char *mode)
{
    char opt[64];
    snprintf(opt, sizeof(opt), "--sync-deletions %s", mode);
    sy_mount(false, opt);
    char *id = sy_id("/k.md");
    cr_assert_not_null(id);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "rm k.md && echo new > k.md"), 0);
    const char *const want[] = {"/k.md", "new\n", "/other.md", "other\n", NULL};
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_expect(ok, "the new file did not reach the store: %s", last);
    free(last);
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "cat k.md 2>&1");
    cr_expect_str_eq(out, "new\n", "the new file was thrown away");
    free(out);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "the new file was kept as a conflict record");
    free(k);
    char *now = sy_id("/k.md");
    cr_expect(now && strcmp(now, id) == 0, "the memory was not taken over");
    free(now);
    cr_expect_eq(sy_count_versions(id, "deleted"), 0, "a deleted version was written");
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    k = mnt_q(&E, "SELECT count(*) FROM tombstones");
    cr_expect_str_eq(k, "0", "the removed file's deletion stays recorded");
    free(k);
    free(id);
}

Test(mount_sync_modes, a_file_written_anew_after_a_log_only_removal_takes_the_memory_over)
{
    rewrite_under("log_only");
}

Test(mount_sync_modes, a_file_written_anew_after_a_disabled_removal_takes_the_memory_over)
{
    rewrite_under("disabled");
}

/* A rename left unpushed by a session that ended abruptly, and a rename
 * of the same memory by another client while nothing was mounted: both
 * sides changed the path, and the store wins.  Before the fix the mount's
 * listing left the file alone (it is dirty) and the first sync, read from
 * the version feed (which names nothing before the mount), decided it
 * against its old baseline: the update with the local path passed its
 * precondition and undid the other client's rename. */
Test(mount_sync_modes, a_rename_left_unpushed_loses_to_a_rename_made_while_unmounted)
{
    sy_mount(false, "");
    char *id = sy_id("/k.md");
    cr_assert_not_null(id);
    sy_after_sync();
    sy_fault("{\"action\":\"status\",\"status\":503,\"count\":0,\"method\":\"POST\"}");
    cr_assert_eq(sy_run(NULL, "mv k.md b.md"), 0);
    kill_daemon();
    sy_clear_faults();
    cr_assert_eq(sy_remote_update(id, "{\"path\":\"/c.md\"}"), 200);
    sy_mount(false, "");
    sy_after_sync();
    sy_after_sync();
    char *at_c = sy_id("/c.md"), *at_b = sy_id("/b.md");
    cr_expect_str_eq(at_c ? at_c : "(none)", id, "the other client's rename was undone");
    cr_expect_null(at_b, "the memory is at /b.md");
    cr_expect(mnt_wait_sh(&E, WITHIN, "test -e '%s/c.md' && ! test -e '%s/b.md'", mnt, mnt),
              "the mount does not show the store's path");
    free(at_c);
    free(at_b);
    free(id);
}

/* rm k.md; mv other.md k.md under log_only: the deletion is never sent,
 * so k.md's memory keeps its path on the server and the move cannot go
 * out; the mount keeps the tree as it was made for the session (the move
 * is not taken back as a path the store keeps: that rule is for memories
 * nothing of this mount would move), and the store is left as it was. */
Test(mount_sync_modes, a_move_onto_a_path_removed_under_log_only_stays_as_made)
{
    sy_mount(false, "--sync-deletions log_only");
    char *k = sy_id("/k.md"), *o = sy_id("/other.md");
    cr_assert(k && o);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "rm k.md && mv other.md k.md"), 0);
    sy_after_sync();
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "ls; cat k.md");
    cr_expect_str_eq(out, "k.md\nother\n", "the mount does not keep the move");
    free(out);
    const char *const want[] = {"/k.md", "kept\n", "/other.md", "other\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, 1, &last), "the store changed: %s", last);
    free(last);
    cr_expect_eq(sy_log_count(REC_MSG_PATH_HELD, NULL), 0, "the move was taken back");
    cr_expect_eq(sy_count_versions(k, "deleted"), 0, "the memory was deleted");
    free(k);
    free(o);
}
