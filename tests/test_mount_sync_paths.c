/* test_mount_sync_paths.c - moves onto a path the store keeps for another
 * memory (docs/sync.md, "Path conflicts"): the move cannot be sent (409
 * at every sync), so the store wins: the path shows the store's memory,
 * the moved file goes back to its own memory's path, its changed content
 * kept as a conflict record.  Chains and swaps settle in one sync, with no
 * request refused, also when a remote edit races the deletion that would
 * have freed the path. */
#include <criterion/criterion.h>
#include <stdio.h>
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

TestSuite(mount_sync_paths, .init = setup, .fini = teardown, .timeout = 90);

/* The mount and the store end with c.md's memory, edited remotely, at
 * c.md and other.md's untouched at other.md, nothing pending (the moves
 * taken back). */
static void expect_the_store_s_names(int within)
{
    cr_expect(mnt_wait_sh(&E, within, "test \"$(cat '%s/c.md')\" = 'edited remotely' && "
                                      "test \"$(cat '%s/other.md')\" = untouched", mnt, mnt),
              "the store's paths do not show");
    const char *const want[] = {
        "/c.md", "edited remotely\n", "/notes/r.md", "will be deleted remotely\n",
        "/other.md", "untouched\n", NULL,
    };
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store changed: %s", last);
    free(last);
    cr_expect(sy_wait_clean(WITHIN), "pending changes remain");
}

/* rm c.md; mv other.md c.md, while another client edits c.md's memory:
 * the deletion loses to the edit (the memory comes back), and the move of
 * other.md onto c.md's path, which the store keeps for that memory, loses
 * too: other.md goes back to its own path, c.md shows the edit.  Before,
 * the move was refused (409) at every sync, and the edited memory never
 * showed in the mount. */
Test(mount_sync_paths, a_move_onto_a_path_the_store_keeps_for_another_memory_loses)
{
    char *a = sy_id("/c.md"), *b = sy_id("/other.md");
    cr_assert(a && b);
    sy_after_sync();
    cr_assert_eq(sy_remote_update(a, "{\"content\":\"edited remotely\\n\"}"), 200);
    cr_assert_eq(sy_run(NULL, "rm c.md && mv other.md c.md"), 0);
    expect_the_store_s_names(WITHIN);
    cr_expect(sy_wait_log(REC_MSG_PATH_HELD, "path=/c.md", 1, WITHIN), "no warning");
    sy_after_sync();
    cr_expect_eq(sy_log_count(REC_MSG_PATH_CONFLICT, NULL), 0, "a move was sent onto the path");
    cr_expect_eq(sy_count_versions(a, "deleted"), 0, "the edited memory was deleted");
    cr_expect_eq(sy_count_versions(b, NULL), 1, "the moved memory was written");
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "a record of content the store has");
    free(k);
    free(a);
    free(b);
}

/* A file edited and moved onto a path another client has just created:
 * the path is the store's; the file goes back to its memory's path, and
 * its edit is kept as a conflict record that `memstorefs conflicts`
 * lists. */
Test(mount_sync_paths, an_edited_file_moved_onto_a_path_created_remotely_keeps_its_edit)
{
    char *b = sy_id("/other.md");
    cr_assert_not_null(b);
    sy_after_sync();
    char *theirs = t_create_memory(&E.msd, store, "/new.md", "theirs\n");
    cr_assert_not_null(theirs);
    cr_assert_eq(sy_run(NULL, "echo mine >> other.md && mv other.md new.md"), 0);
    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s/new.md')\" = theirs && "
                                      "test \"$(cat '%s/other.md')\" = untouched", mnt, mnt),
              "the store's paths do not show");
    const char *const want[] = {
        "/c.md", "base\n", "/new.md", "theirs\n", "/notes/r.md", "will be deleted remotely\n",
        "/other.md", "untouched\n", NULL,
    };
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store changed: %s", last);
    free(last);
    cr_expect(sy_wait_clean(WITHIN), "pending changes remain");
    char *lost = mnt_q(&E, "SELECT k.path || ' ' || k.memory_id || ' ' || CAST(b.data AS TEXT)"
                           " FROM conflicts k JOIN blobs b ON b.sha = k.local_sha");
    char want_rec[200];
    snprintf(want_rec, sizeof want_rec, "/new.md %s untouched\nmine\n", b);
    cr_expect_str_eq(lost, want_rec, "the edit is not kept as a record");
    free(lost);
    char *out = NULL;
    cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts --cache-dir \"$CACHE\""), 0, "%s", out);
    cr_expect(strstr(out, "/new.md") != NULL, "conflicts does not list it: %s", out);
    free(out);
    cr_expect_eq(sy_count_versions(b, NULL), 1, "the moved memory was written");
    free(theirs);
    free(b);
}

/* As above, and a new other.md written where the moved file was: the
 * moved file goes back to its memory, which cannot return to a path the
 * new file holds.  Then the new file meets that memory at its path, as
 * any new file meeting a memory: the store wins, the new file's bytes are
 * kept as a conflict record.  Before, the memory was left out of the
 * syncs that read the version feed, and the new file's create was
 * refused (409) at every sync. */
Test(mount_sync_paths, a_move_back_onto_a_path_a_new_file_took_settles)
{
    char *a = sy_id("/c.md"), *b = sy_id("/other.md");
    cr_assert(a && b);
    sy_after_sync();
    cr_assert_eq(sy_remote_update(a, "{\"content\":\"edited remotely\\n\"}"), 200);
    cr_assert_eq(sy_run(NULL, "rm c.md && mv other.md c.md && echo fresh > other.md"), 0);
    expect_the_store_s_names(WITHIN);
    char *lost = mnt_q(&E, "SELECT k.path || ' ' || CAST(b.data AS TEXT)"
                           " FROM conflicts k JOIN blobs b ON b.sha = k.local_sha");
    cr_expect_str_eq(lost, "/other.md fresh\n", "the new file is not kept as a record");
    free(lost);
    cr_expect_eq(sy_log_count(REC_MSG_PATH_CONFLICT, NULL), 0, "a create was sent onto the path");
    cr_expect_eq(sy_count_versions(b, NULL), 1, "the moved memory was written");
    cr_expect_eq(sy_count_versions(a, "deleted"), 0, "the edited memory was deleted");
    free(a);
    free(b);
}

/* A chain of moves whose end is a path another client created: mv
 * other.md x.md (held: the store gave x.md to another memory), then mv
 * c.md other.md, whose memory therefore stays: both moves lose in the same
 * sync, with no request refused. */
Test(mount_sync_paths, a_chain_of_moves_ending_on_a_held_path_loses_in_one_sync)
{
    char *a = sy_id("/c.md"), *b = sy_id("/other.md");
    cr_assert(a && b);
    sy_after_sync();
    char *theirs = t_create_memory(&E.msd, store, "/x.md", "theirs\n");
    cr_assert_not_null(theirs);
    cr_assert_eq(sy_run(NULL, "mv other.md x.md && mv c.md other.md"), 0);
    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s/x.md')\" = theirs && "
                                      "test \"$(cat '%s/other.md')\" = untouched && "
                                      "test \"$(cat '%s/c.md')\" = base", mnt, mnt, mnt),
              "the store's paths do not show");
    const char *const want[] = {
        "/c.md", "base\n", "/notes/r.md", "will be deleted remotely\n",
        "/other.md", "untouched\n", "/x.md", "theirs\n", NULL,
    };
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store changed: %s", last);
    free(last);
    cr_expect(sy_wait_clean(WITHIN), "pending changes remain");
    cr_expect_eq(sy_log_count(REC_MSG_PATH_CONFLICT, NULL), 0, "a move was sent onto a held path");
    cr_expect_eq(sy_count_versions(a, NULL), 1, "c.md's memory was written");
    cr_expect_eq(sy_count_versions(b, NULL), 1, "other.md's memory was written");
    free(theirs);
    free(a);
    free(b);
}

#define DELETE_ROUTE "DELETE /v1/memory_stores/{id}/memories/{id}"

/* rm c.md; mv other.md c.md, and the other client's edit of c.md lands
 * after the sync read the store, while its deletion is on the way (slow):
 * the deletion meets 409 (the store wins), the move sent after it too; and
 * the next listing fails once (503).  The sync after that takes the move
 * back: the mount ends as the store, nothing pending. */
Test(mount_sync_paths, an_edit_racing_the_deletion_that_frees_the_path_wins_a_sync_later)
{
    char *a = sy_id("/c.md"), *b = sy_id("/other.md");
    cr_assert(a && b);
    sy_after_sync();
    sy_fault("{\"action\":\"latency\",\"latency_ms\":2500,\"count\":1,\"method\":\"DELETE\"}");
    cr_assert_eq(sy_run(NULL, "rm c.md && mv other.md c.md"), 0);
    bool out_now = false;
    for (int i = 0; i < WITHIN * 20 && !out_now; i++) {
        out_now = t_route_count(&E.msd, DELETE_ROUTE) > 0;
        if (!out_now)
            usleep(50 * 1000);
    }
    cr_assert(out_now, "no deletion was sent");
    cr_assert_eq(sy_remote_update(a, "{\"content\":\"edited remotely\\n\"}"), 200);
    sy_fault("{\"action\":\"status\",\"status\":503,\"count\":1,\"method\":\"GET\"}");
    expect_the_store_s_names(WITHIN * 2);
    cr_expect(sy_log_count(REC_MSG_DELETE_LOST_RACE, "path=/c.md") >= 1, "the delete did not race");
    cr_expect_eq(sy_count_versions(a, "deleted"), 0, "the edited memory was deleted");
    cr_expect_eq(sy_count_versions(b, NULL), 1, "the moved memory was written");
    free(a);
    free(b);
}

/* A file whose content the server refused, moved away (mv other.md x.md),
 * then c.md moved onto its old path: the refused file's move only waits
 * for its content to be fixed, so it still moves its memory away, and the
 * move of c.md waits for it; neither is taken back.  Once x.md is written
 * anew, both go out. */
Test(mount_sync_paths, a_move_onto_the_path_a_refused_file_left_waits_for_it)
{
    char *a = sy_id("/c.md"), *b = sy_id("/other.md");
    cr_assert(a && b);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "printf 'x\\000y\\n' > other.md"), 0);
    cr_assert(sy_wait_log(REC_MSG_REFUSED, "path=/other.md", 1, WITHIN), "no refusal logged");
    cr_assert_eq(sy_run(NULL, "mv other.md x.md && mv c.md other.md"), 0);
    sy_after_sync();
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "ls; cat other.md");
    cr_expect_str_eq(out, "notes\nother.md\nx.md\nbase\n", "a move was taken back");
    free(out);
    cr_expect_eq(sy_log_count(REC_MSG_PATH_HELD, NULL), 0, "a move was taken for held");
    cr_assert_eq(sy_run(NULL, "echo fixed > x.md"), 0);
    const char *const want[] = {
        "/notes/r.md", "will be deleted remotely\n", "/other.md", "base\n", "/x.md", "fixed\n",
        NULL,
    };
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN * 2, &last), "the moves did not go out: %s", last);
    free(last);
    char *now_a = sy_id("/other.md"), *now_b = sy_id("/x.md");
    cr_expect(now_a && strcmp(now_a, a) == 0, "other.md is not c.md's memory");
    cr_expect(now_b && strcmp(now_b, b) == 0, "x.md is not other.md's memory");
    free(now_a);
    free(now_b);
    free(a);
    free(b);
}
