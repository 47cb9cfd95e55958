/* test_mount_sync_identity.c - a memory's identity follows its file
 * through saves made while its upload is in flight (sed -i, an editor's
 * write-temp-then-rename, vim's rename-and-rewrite), and through a create
 * whose answer was lost before the file was edited again: the store ends
 * with the last content, under the same memory id, with no deletion, no
 * false conflict and nothing reverted.  Each case failed before the fix
 * (issue 8, cases 1 and 2): the old node's answer deleted the memory, or
 * the lost create made the edit lose to the store's first version. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

TestSuite(mount_sync_identity, .init = setup, .fini = teardown, .timeout = 180);

#define CREATE_ROUTE "POST /v1/memory_stores/{id}/memories"
#define UPDATE_ROUTE "POST /v1/memory_stores/{id}/memories/{id}"

/* The server holds exactly want, path holding content under memory id,
 * the mount shows the same after two more syncs, nothing was deleted or
 * taken for a conflict. */
static void expect_kept(const char *const *want, const char *id, const char *path,
                        const char *content)
{
    char *last = NULL;
    cr_assert(sy_wait_server(want, 3 * WITHIN, &last), "the store did not converge: %s", last);
    free(last);
    sy_after_sync();
    sy_after_sync();
    last = sy_server_state();
    char *w = sy_expect_state(want);
    cr_expect_str_eq(last, w, "the store moved on after converging");
    free(last);
    free(w);
    char *now = sy_id(path);
    cr_expect_str_eq(now ? now : "(none)", id, "the memory lost its id");
    free(now);
    cr_expect_eq(sy_count_versions(id, "deleted"), 0, "the memory was deleted on the way");
    char *out = NULL;
    sy_run(&out, "cat '.%s'", path);
    cr_expect_str_eq(out, content, "the mount does not show the last content");
    free(out);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "a false conflict was recorded");
    free(k);
    cr_expect_eq(sy_log_count("memory changed both locally and remotely", NULL), 0,
                 "a false conflict was logged:\n%s", sy_log_grep("both"));
    cr_expect_eq(sy_pending(), 0, "changes still pending");
}

/* Case 1: the update of v2 waits for its answer; sed -i replaces the file
 * (a new inode takes the name) meanwhile. */
Test(mount_sync_identity, sed_while_the_update_is_in_flight_keeps_the_memory)
{
    char *id = sy_id("/f.md");
    cr_assert_not_null(id);
    sy_after_sync();
    long n0 = t_route_count(&E.msd, UPDATE_ROUTE);
    sy_fault("{\"action\":\"latency\",\"latency_ms\":3000,\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    cr_assert_eq(sy_run(NULL, "echo v2 > f.md"), 0);
    sy_wait_route(UPDATE_ROUTE, n0);
    cr_assert_eq(sy_run(NULL, "sed -i s/v2/v3/ f.md"), 0);
    const char *const want[] = {"/f.md", "v3\n", NULL};
    expect_kept(want, id, "/f.md", "v3\n");
    free(id);
}

/* The same with an editor's save: write a temporary file, rename it over
 * the original. */
Test(mount_sync_identity, temp_then_rename_while_the_update_is_in_flight)
{
    char *id = sy_id("/f.md");
    cr_assert_not_null(id);
    sy_after_sync();
    long n0 = t_route_count(&E.msd, UPDATE_ROUTE);
    sy_fault("{\"action\":\"latency\",\"latency_ms\":3000,\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    cr_assert_eq(sy_run(NULL, "echo v2 > f.md"), 0);
    sy_wait_route(UPDATE_ROUTE, n0);
    cr_assert_eq(sy_run(NULL, "printf 'v3\\n' > .f.md.tmp && mv .f.md.tmp f.md"), 0);
    const char *const want[] = {"/f.md", "v3\n", NULL};
    expect_kept(want, id, "/f.md", "v3\n");
    free(id);
}

/* vim's save (backupcopy=no): rename the original to a backup, write a new
 * file under the name, remove the backup. */
Test(mount_sync_identity, vim_style_save_while_the_update_is_in_flight)
{
    char *id = sy_id("/f.md");
    cr_assert_not_null(id);
    sy_after_sync();
    long n0 = t_route_count(&E.msd, UPDATE_ROUTE);
    sy_fault("{\"action\":\"latency\",\"latency_ms\":3000,\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    cr_assert_eq(sy_run(NULL, "echo v2 > f.md"), 0);
    sy_wait_route(UPDATE_ROUTE, n0);
    cr_assert_eq(sy_run(NULL, "mv f.md f.md~ && printf 'v3\\n' > f.md && rm f.md~"), 0);
    const char *const want[] = {"/f.md", "v3\n", NULL};
    expect_kept(want, id, "/f.md", "v3\n");
    free(id);
}

/* Case 2: the first create's answer is lost (the server committed it, then
 * dropped the connection; libcurl resends on a new connection by itself)
 * and the file is edited right after: the edit lands on the memory the
 * create made, it is not reverted to the first version. */
Test(mount_sync_identity, a_lost_create_answer_then_an_edit_keeps_the_edit)
{
    sy_after_sync();
    long n0 = t_route_count(&E.msd, CREATE_ROUTE);
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
    cr_assert_eq(sy_run(NULL, "echo n1 > n.md"), 0);
    sy_wait_route(CREATE_ROUTE, n0);
    cr_assert_eq(sy_run(NULL, "echo n2 > n.md"), 0);
    const char *const want[] = {"/f.md", "v1\n", "/n.md", "n2\n", NULL};
    char *last = NULL;
    cr_assert(sy_wait_server(want, 3 * WITHIN, &last), "the store did not converge: %s", last);
    free(last);
    char *id = sy_id("/n.md");
    cr_assert_not_null(id);
    cr_expect_eq(sy_count_versions(NULL, "created"), 2, "n.md was created twice");
    cr_expect_eq(sy_count_versions(id, NULL), 2, "n.md: not one create and one edit");
    expect_kept(want, id, "/n.md", "n2\n");
    free(id);
}

/* A create whose answer was lost, then the file renamed before the next
 * sync: the memory the create made is the file's (renamed), not a second
 * file in the mount. */
Test(mount_sync_identity, a_lost_create_answer_then_a_rename_keeps_one_memory)
{
    sy_after_sync();
    long n0 = t_route_count(&E.msd, CREATE_ROUTE);
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
    cr_assert_eq(sy_run(NULL, "echo n1 > n.md"), 0);
    sy_wait_route(CREATE_ROUTE, n0);
    cr_assert_eq(sy_run(NULL, "sleep 1; mv n.md m.md"), 0);
    const char *const want[] = {"/f.md", "v1\n", "/m.md", "n1\n", NULL};
    char *last = NULL;
    cr_assert(sy_wait_server(want, 3 * WITHIN, &last), "the store did not converge: %s", last);
    free(last);
    cr_expect_eq(sy_count_versions(NULL, "created"), 2, "the renamed file was created twice");
    char *out = NULL;
    sy_run(&out, "ls");
    cr_expect_str_eq(out, "f.md\nm.md\n", "the mount holds: %s", out);
    free(out);
}

/* Another client renames the memory while the update of a local edit
 * waits at the server (its content precondition still holds): the file
 * follows the rename, with the edit.  Before the fix the answer's path
 * became the file's baseline while the file stayed where it was, and the
 * next sync took that for a local rename and moved the memory back. */
Test(mount_sync_identity, a_remote_rename_while_an_edit_is_in_flight_moves_the_file)
{
    char *id = sy_id("/f.md");
    cr_assert_not_null(id);
    sy_after_sync();
    long n0 = t_route_count(&E.msd, UPDATE_ROUTE);
    sy_fault("{\"action\":\"latency\",\"latency_ms\":3000,\"count\":1,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    cr_assert_eq(sy_run(NULL, "echo v2 > f.md"), 0);
    sy_wait_route(UPDATE_ROUTE, n0);
    cr_assert_eq(sy_remote_update(id, "{\"path\":\"/g.md\"}"), 200);
    const char *const want[] = {"/g.md", "v2\n", NULL};
    expect_kept(want, id, "/g.md", "v2\n");
    char *out = NULL;
    cr_expect_eq(sy_run(&out, "ls"), 0);
    cr_expect_str_eq(out ? out : "", "g.md\n");
    free(out);
    free(id);
}
