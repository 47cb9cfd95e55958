/* test_mount_sync_faults.c - faults injected at memstored during syncs
 * (500s, 429 with retry-after, a connection dropped after the write
 * committed, on a create and on an update) lose nothing, duplicate
 * nothing (one memory per path, one version per change) and raise no
 * false conflict (no conflict record, the local content stays). */
#include <criterion/criterion.h>
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
