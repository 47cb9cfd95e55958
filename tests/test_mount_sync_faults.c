/* test_mount_sync_faults.c - faults injected at memstored during syncs
 * (500s, 429 with retry-after, a connection dropped after the write
 * committed, on a create and on an update) lose nothing, duplicate
 * nothing (one memory per path, one version per change) and raise no
 * false conflict (no conflict record, the local content stays). */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reconcile.h"
#include "test_mount_sync.h"

static const char *const seed[] = {"/u.md", "v1\n", NULL};

static void setup(void)
{
    sy_start(seed);
    sy_mount(false, "");
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_faults, .init = setup, .fini = teardown, .timeout = 120);

#define CREATE_ROUTE "POST /v1/memory_stores/{id}/memories"
#define UPDATE_ROUTE "POST /v1/memory_stores/{id}/memories/{id}"

/* What every test ends with: the server holds exactly the local state,
 * once, and nothing was taken for a conflict. */
static void expect_converged(const char *u_id)
{
    const char *const want[] = {"/u.md", "v2\n", "/n.md", "new\n", NULL};
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_assert(ok, "the store did not converge: %s", last);
    free(last);
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    char *n_id = sy_id("/n.md");
    cr_assert_not_null(n_id);
    cr_expect_eq(sy_count_versions(n_id, NULL), 1, "n.md: not exactly one version");
    cr_expect_eq(sy_count_versions(u_id, "modified"), 1, "u.md: not exactly one modified version");
    cr_expect_eq(sy_count_versions(NULL, "created"), 2, "a memory was created twice");
    free(n_id);
    char *out = NULL;
    sy_run(&out, "cat u.md n.md");
    cr_expect_str_eq(out, "v2\nnew\n", "the local content changed");
    free(out);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "a false conflict was recorded");
    free(k);
    cr_expect_eq(sy_log_count("memory changed both locally and remotely", NULL), 0,
                 "a false conflict was logged");
    char *bad = sy_check_hashes();
    cr_expect_null(bad, "%s", bad);
    free(bad);
}

Test(mount_sync_faults, server_errors_and_rate_limits_lose_nothing)
{
    char *u_id = sy_id("/u.md");
    cr_assert_not_null(u_id);
    sy_after_sync();
    /* Every memory write answers 500 until cleared. */
    sy_fault("{\"action\":\"status\",\"status\":500,\"count\":0,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories*\"}");
    cr_assert_eq(sy_run(NULL, "echo new > n.md && echo v2 > u.md"), 0);
    /* One sync: its retries (with backoff) all fail. */
    cr_assert(sy_wait_log(REC_MSG_UPLOAD_FAILED, "path=/n.md", 1, WITHIN + 10),
              "no failed upload logged");
    cr_assert(sy_wait_log(REC_MSG_UPLOAD_FAILED, "path=/u.md", 1, 2),
              "no failed update naming the path logged:\n%s", sy_log_grep("upload"));
    char *c = sy_content("/u.md");
    cr_expect_str_eq(c ? c : "(none)", "v1\n");
    free(c);
    cr_expect_null(sy_id("/n.md"), "a 500 stored the memory");
    cr_expect_eq(sy_pending(), 2, "the changes are not pending any more");
    cr_expect_eq(sy_run(NULL, "test \"$(cat u.md n.md)\" = \"$(printf 'v2\\nnew')\""), 0,
                 "the local files changed");

    /* Then 429 with retry-after for the next two writes, then success. */
    sy_clear_faults();
    sy_reset_stats();
    sy_fault("{\"action\":\"status\",\"status\":429,\"retry_after\":1,\"count\":2,"
             "\"method\":\"POST\",\"path\":\"/v1/memory_stores/*/memories*\"}");
    expect_converged(u_id);
    cr_expect_geq(t_route_count(&E.msd, CREATE_ROUTE) + t_route_count(&E.msd, UPDATE_ROUTE), 4,
                  "the 429s were not answered (2 refused + 2 accepted writes)");
    free(u_id);
}

Test(mount_sync_faults, a_dropped_answer_is_not_sent_twice_nor_a_conflict)
{
    char *u_id = sy_id("/u.md");
    cr_assert_not_null(u_id);
    sy_after_sync();
    /* The next create and the next update commit, then lose their answer. */
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    cr_assert_eq(sy_run(NULL, "echo new > n.md && echo v2 > u.md"), 0);
    expect_converged(u_id);
    /* A later sync changes nothing either. */
    sy_after_sync();
    cr_expect_eq(sy_count_versions(NULL, NULL), 3, "a later sync wrote again");
    /* Both faults fired on the daemon's requests: requests of ours on the
     * same routes now get answers. */
    t_http_fresh(true);
    struct tresp r;
    char path[300];
    snprintf(path, sizeof(path), "/v1/memory_stores/%s/memories", store);
    cr_expect_eq(t_api(&E.msd, "POST", path, "{\"path\":\"/probe.md\",\"content\":\"p\"}", &r), 0,
                 "the create fault was not used by the daemon");
    tresp_free(&r);
    cr_expect_eq(sy_remote_update(u_id, "{\"content\":\"v3\\n\"}"), 200,
                 "the update fault was not used by the daemon");
    t_http_fresh(false);
    free(u_id);
}

/* A file removed while its create is in flight: the memory the create
 * made belongs to no file any more, so it is deleted at the next sync
 * instead of coming back into the mount. */
/* Runs first, waits until the sync's request on route (path: its fault
 * path) is at the server, held there 4 s, runs then, and lets the held
 * answer arrive and two more syncs run. */
static void while_held(const char *path, const char *route, const char *first, const char *then)
{
    sy_after_sync();
    char fault[200];
    snprintf(fault, sizeof(fault),
             "{\"action\":\"latency\",\"latency_ms\":4000,\"count\":1,\"method\":\"POST\","
             "\"path\":\"%s\"}", path);
    sy_fault(fault);
    long before = t_route_count(&E.msd, route);
    cr_assert_eq(sy_run(NULL, "%s", first), 0);
    for (int i = 0; i < WITHIN * 10 && t_route_count(&E.msd, route) == before; i++)
        usleep(100 * 1000);
    cr_assert_neq(t_route_count(&E.msd, route), before, "%s was never sent", route);
    cr_assert_eq(sy_run(NULL, "%s", then), 0);
    sleep(5); /* the held answer arrives */
    sy_after_sync();
    sy_after_sync();
}

Test(mount_sync_faults, a_file_removed_while_its_create_is_in_flight_stays_removed)
{
    while_held("/v1/memory_stores/*/memories", CREATE_ROUTE, "echo short-lived > gone.md",
               "rm gone.md");
    char *c = sy_content("/gone.md");
    cr_expect_null(c, "the removed file stayed on the server: %s", c ? c : "");
    free(c);
    char *out = NULL;
    sy_run(&out, "ls gone.md 2>&1 || true");
    cr_expect(strstr(out, "No such file") != NULL, "the removed file came back: %s", out);
    free(out);
}

/* A file edited back to what the store held while its update is held at
 * the server (an undo, a revert right after a save): once the update's
 * answer lands, the store holds the edit the revert replaced, so the
 * revert is pushed on top of it, and never undone by the next sync. */
Test(mount_sync_faults, an_edit_back_while_its_update_is_in_flight_reaches_the_store)
{
    while_held("/v1/memory_stores/*/memories/*", UPDATE_ROUTE, "echo v2 > u.md",
               "echo v1 > u.md");
    const char *const want[] = {"/u.md", "v1\n", NULL};
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_expect(ok, "the store kept the edit the revert replaced: %s", last);
    free(last);
    char *out = NULL;
    sy_run(&out, "cat u.md");
    cr_expect_str_eq(out, "v1\n", "the revert was undone locally");
    free(out);
}

/* rm u.md; a new u.md takes its memory over (an update), and is removed
 * while that update is held at the server: once the answer lands, the
 * memory belongs to no file and is deleted; u.md does not come back. */
Test(mount_sync_faults, a_file_removed_while_its_takeover_is_in_flight_stays_removed)
{
    while_held("/v1/memory_stores/*/memories/*", UPDATE_ROUTE, "rm u.md && echo v2 > u.md",
               "rm u.md");
    sy_after_sync();
    char *c = sy_content("/u.md");
    cr_expect_null(c, "the removed file stayed on the server: %s", c ? c : "");
    free(c);
    char *out = NULL;
    sy_run(&out, "ls u.md 2>&1 || true");
    cr_expect(strstr(out, "No such file") != NULL, "the removed file came back: %s", out);
    free(out);
}

/* A create whose every answer is lost, then an editor's backup by rename
 * (mv n.md n.md~; a new n.md): the next sync finds the created memory at
 * the old path and gives it to the renamed file; the new n.md is a new
 * memory, not a file never synced meeting that memory (a false conflict
 * that threw it away). */
Test(mount_sync_faults, a_new_file_at_the_path_of_a_lost_create_moved_away_is_kept)
{
    sy_after_sync();
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":0,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
    cr_assert_eq(sy_run(NULL, "echo n1 > n.md"), 0);
    cr_assert(sy_wait_log(REC_MSG_UPLOAD_FAILED, "path=/n.md", 1, WITHIN + 10),
              "the create did not fail");
    cr_assert_eq(sy_run(NULL, "mv n.md n.md~ && echo n2 > n.md"), 0);
    sy_clear_faults();
    const char *const want[] = {"/n.md", "n2\n", "/n.md~", "n1\n", "/u.md", "v1\n", NULL};
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_expect(ok, "the store did not get both files: %s", last);
    free(last);
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "cat n.md n.md~ 2>&1");
    cr_expect_str_eq(out, "n2\nn1\n", "a local file was thrown away");
    free(out);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "a false conflict was recorded");
    free(k);
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
}

/* u.md's update is held at the server while its memory is deleted there
 * and u.md is moved over b.md (a synced file): the update meets 404, but
 * the file has b.md's memory by then, which it keeps; its content goes
 * to that memory, not into a conflict record against it. */
Test(mount_sync_faults, a_404_after_the_file_was_moved_over_another_keeps_its_new_memory)
{
    cr_assert_eq(sy_run(NULL, "echo b1 > b.md"), 0);
    const char *const first[] = {"/b.md", "b1\n", "/u.md", "v1\n", NULL};
    char *last = NULL;
    cr_assert(sy_wait_server(first, WITHIN, &last), "b.md was not pushed: %s", last);
    free(last);
    char *u_id = sy_id("/u.md"), *b_id = sy_id("/b.md");
    cr_assert(u_id && b_id);
    sy_after_sync();
    sy_fault("{\"action\":\"latency\",\"latency_ms\":4000,\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    long before = t_route_count(&E.msd, UPDATE_ROUTE);
    cr_assert_eq(sy_run(NULL, "echo v2 > u.md"), 0);
    for (int i = 0; i < WITHIN * 10 && t_route_count(&E.msd, UPDATE_ROUTE) == before; i++)
        usleep(100 * 1000);
    cr_assert_neq(t_route_count(&E.msd, UPDATE_ROUTE), before, "the update was never sent");
    cr_assert_eq(sy_remote_delete(u_id), 200);
    cr_assert_eq(sy_run(NULL, "mv u.md b.md"), 0);
    sleep(5); /* the held update meets the deletion */
    const char *const want[] = {"/b.md", "v2\n", NULL};
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_expect(ok, "the moved file's content did not reach b.md's memory: %s", last);
    free(last);
    sy_after_sync();
    char *now = sy_id("/b.md");
    cr_expect(now && strcmp(now, b_id) == 0, "b.md's memory was replaced");
    free(now);
    char *out = NULL;
    sy_run(&out, "cat b.md 2>&1");
    cr_expect_str_eq(out, "v2\n", "the moved file lost its content");
    free(out);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "the moved file's content became a conflict record");
    free(k);
    free(u_id);
    free(b_id);
}

/* rm u.md and a new u.md, while u.md's memory is deleted at the server:
 * nothing is left to take over, so the new file is created; every answer
 * to its create is lost.  The memory it made is the file's at the next
 * sync: the deleted memory does not stand beside it in the listing (two
 * memories at one path), and the file is neither thrown away nor
 * created again. */
Test(mount_sync_faults, a_lost_create_after_rm_and_a_remote_delete_is_adopted)
{
    char *u_id = sy_id("/u.md");
    cr_assert_not_null(u_id);
    sy_after_sync();
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":0,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
    cr_assert_eq(sy_remote_delete(u_id), 200);
    cr_assert_eq(sy_run(NULL, "rm -f u.md; echo v2 > u.md"), 0);
    /* rm made a deletion (no sync removed the clean u.md before it). */
    char *t = mnt_q(&E, "SELECT count(*) FROM tombstones");
    cr_assert_str_eq(t, "1", "u.md was removed by a sync before rm");
    free(t);
    cr_assert(sy_wait_log(REC_MSG_UPLOAD_FAILED, "path=/u.md", 1, WITHIN + 10),
              "the create did not fail");
    sy_clear_faults();
    char *n = mnt_q(&E, "SELECT count(*) FROM tombstones");
    cr_expect_str_eq(n, "0", "the deleted memory's tombstone stays");
    free(n);
    sy_after_sync();
    sy_after_sync();
    const char *const want[] = {"/u.md", "v2\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, 1, &last), "the store lost the new file: %s", last);
    free(last);
    cr_expect_eq(sy_count_versions(NULL, "created"), 2, "u.md was created twice");
    cr_expect_eq(sy_log_count("two memories at one path", NULL), 0,
                 "the deleted memory was taken for listed");
    char *out = NULL;
    sy_run(&out, "cat u.md 2>&1");
    cr_expect_str_eq(out, "v2\n", "the new file was thrown away");
    free(out);
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    free(u_id);
}

/* Names swapped locally (mv a t; mv b a; mv t b) go out as two content
 * updates, each file writing the other's memory.  When only one of them
 * succeeds, the file whose update failed must still reach the store with
 * its content.  (The file that succeeded took the other's memory while
 * that file kept it too; the next sync then saw the failed file's memory
 * changed remotely and its path changed locally, and brought it back to
 * the other file's content: both files read the same, no conflict record,
 * and one content was left only in the server's history.) */
Test(mount_sync_faults, a_swap_half_refused_loses_neither_content)
{
    cr_assert_eq(sy_run(NULL, "echo A > a.md && echo B > b.md"), 0);
    const char *const before[] = {"/u.md", "v1\n", "/a.md", "A\n", "/b.md", "B\n", NULL};
    char *last = NULL;
    cr_assert(sy_wait_server(before, WITHIN, &last), "%s", last);
    free(last);
    cr_assert(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    char *id_b = sy_id("/b.md");
    cr_assert_not_null(id_b);
    sy_after_sync();
    /* Every write to b.md's memory fails until cleared. */
    char fault[512];
    snprintf(fault, sizeof(fault), "{\"action\":\"status\",\"status\":500,\"count\":0,"
             "\"method\":\"POST\",\"path\":\"/v1/memory_stores/*/memories/%s\"}", id_b);
    sy_fault(fault);
    cr_assert_eq(sy_run(NULL, "mv a.md t.md && mv b.md a.md && mv t.md b.md"), 0);
    cr_assert(sy_wait_log(REC_MSG_UPLOAD_FAILED, "path=/b.md", 1, WITHIN + 10),
              "no failed upload logged:\n%s", sy_log_grep("upload"));
    sy_clear_faults();
    const char *const want[] = {"/u.md", "v1\n", "/a.md", "B\n", "/b.md", "A\n", NULL};
    bool ok = sy_wait_server(want, 2 * WITHIN, &last);
    char *out = NULL;
    sy_run(&out, "cat a.md b.md");
    cr_expect_str_eq(out, "B\nA\n", "the local files changed");
    free(out);
    cr_expect(ok, "the store did not converge: %s", last);
    free(last);
    free(id_b);
}

/* An update the store took whose answer was lost, then more than an hour
 * without a sync that could read the store (here: the upload's record
 * made two hours old while every read fails), then another edit: the
 * first sync that reads the store again recognises the upload and sends
 * the edit on top.  Before the fix the sync dropped records an hour old
 * before it read the store: the store's copy of the lost upload looked
 * like another client's edit, and the newer local edit lost to it. */
Test(mount_sync_faults, a_lost_answer_over_an_hour_old_still_settles_at_the_next_read)
{
    char *u_id = sy_id("/u.md");
    cr_assert_not_null(u_id);
    sy_after_sync();
    long n0 = t_route_count(&E.msd, UPDATE_ROUTE);
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":0,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    cr_assert_eq(sy_run(NULL, "echo sent > u.md"), 0);
    sy_wait_route(UPDATE_ROUTE, n0);
    /* No read of the store goes through from now on: no listing shows
     * the upload, whose retries lose their answers too. */
    sy_refuse_reads();
    char path[400];
    snprintf(path, sizeof(path), "/v1/memory_stores/%s/memories/%s", store, u_id);
    struct tresp r;
    cr_assert_eq(t_api(&E.msd, "GET", path, NULL, &r), 0);
    cr_assert(r.body && strstr(r.body, "\"content\":\"sent\\n\""),
              "the store did not take the update: %s", r.body ? r.body : "");
    tresp_free(&r);
    /* Waits for the sync's retries to end, then fails at its read. */
    cr_assert_neq(sy_run(NULL, "$MFS sync --all --wait >/dev/null 2>&1"), 0);
    char *k = mnt_q(&E, "SELECT count(*) FROM sent WHERE sha != ''");
    cr_assert_neq(strcmp(k, "0"), 0, "no record of the upload");
    free(k);
    char db[400];
    snprintf(db, sizeof(db), "%s/cache.db", E.cache);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    cr_assert_eq(sqlite3_exec(h, "UPDATE sent SET at = at - 7200000000000", NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
    cr_assert_eq(sy_run(NULL, "echo v2 > u.md"), 0);
    sy_clear_faults();
    sy_after_sync();
    const char *const want[] = {"/u.md", "v2\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store holds %s", last);
    free(last);
    char *out = NULL;
    sy_run(&out, "cat u.md");
    cr_expect_str_eq(out ? out : "", "v2\n", "the local edit was reverted");
    free(out);
    k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "a false conflict was recorded");
    free(k);
    cr_expect_eq(sy_log_count("memory changed both locally and remotely", NULL), 0,
                 "a false conflict was logged");
    free(u_id);
}

/* A create whose every attempt lost its answer, then a round that goes on
 * with a push backlog: it decides against the cache, where the memory the
 * create made does not show, and sends the create again.  That send meets
 * the memory at its path (409): our own earlier upload, not another
 * client's.  Before, the lost create's record was dropped there, and an
 * edit made before the next read of the store lost to the store (a
 * conflict record; the store kept the first upload). */
Test(mount_sync_faults, a_lost_create_sent_again_by_a_backlog_round_keeps_its_record)
{
    /* Rounds only when asked for (and the backlog's, at once). */
    sy_remount("--sync-interval 3600");
    char *out = NULL;
    /* 160 synced files: editing all of them is more than one round's slice. */
    cr_assert_eq(sy_run(NULL, "i=100; while [ $i -lt 260 ]; do echo v1 > b$i.md; i=$((i+1));"
                              " done"), 0);
    for (int i = 0; i < 4 && sy_run(NULL, "$MFS sync --wait . >/dev/null 2>&1") != 0; i++)
        ;
    cr_assert(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    long n0 = t_route_count(&E.msd, CREATE_ROUTE);
    /* The next create commits and loses its answer; its resend meets its
     * own memory, which cannot be read to recognise it: its record stays
     * for the next read of the store. */
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
    sy_fault("{\"action\":\"status\",\"status\":503,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    cr_assert_eq(sy_run(NULL, "echo new > a0.md; i=100; while [ $i -lt 260 ]; do "
                              "echo v2 > b$i.md; i=$((i+1)); done; $MFS sync . >/dev/null"), 0);
    /* The round after (the backlog's) sends it once more, with the last
     * of the edits. */
    int edited = 0;
    for (int i = 0; i < WITHIN * 12 && edited < 160; i++) {
        usleep(250 * 1000);
        cJSON *l = sy_list();
        const cJSON *it;
        edited = 0;
        cJSON_ArrayForEach(it, l)
        {
            const char *p = tj_str(it, "path"), *c = tj_str(it, "content");
            edited += p && c && strncmp(p, "/b", 2) == 0 && strcmp(c, "v2\n") == 0;
        }
        cJSON_Delete(l);
    }
    cr_assert_eq(edited, 160, "the backlog was not pushed");
    cr_assert_geq(t_route_count(&E.msd, CREATE_ROUTE), n0 + 3, "the create was not sent again: %ld", t_route_count(&E.msd, CREATE_ROUTE) - n0);
    sleep(2); /* its answer is recorded (the same batch's, moments after) */
    sy_clear_faults();
    cr_assert_eq(sy_run(NULL, "echo edit >> a0.md"), 0);
    for (int i = 0; i < 4 && sy_run(NULL, "$MFS sync --wait . >/dev/null 2>&1") != 0; i++)
        ;
    char *got = sy_content("/a0.md");
    cr_expect_str_eq(got ? got : "(none)", "new\nedit\n", "the edit did not reach the store");
    free(got);
    sy_run(&out, "cat a0.md");
    cr_expect_str_eq(out ? out : "", "new\nedit\n", "the local edit was reverted");
    free(out);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "a false conflict was recorded");
    free(k);
    cr_expect_eq(sy_count_versions(NULL, "created"), 162, "a memory was created twice");
}
