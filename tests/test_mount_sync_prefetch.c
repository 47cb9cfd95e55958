/* test_mount_sync_prefetch.c - the bulk prefetch (issue 12): after a cold
 * mount, directories whose content is missing come down as view=full list
 * pages (20 memories a request), not one GET a memory; pages that fail
 * fall back to single GETs; a few changed memories are fetched one by one;
 * and every byte the mount shows is the server's. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_mount_sync.h"

#define N_DIRS 3
#define PER_DIR 100
#define AT_ROOT 25
#define TOTAL (N_DIRS * PER_DIR + AT_ROOT)

static void setup(void)
{
    sy_start(NULL);
    for (int i = 0; i < TOTAL; i++) {
        char p[64], body[128];
        if (i < N_DIRS * PER_DIR)
            snprintf(p, sizeof(p), "/d%d/m%03d.md", i / PER_DIR, i % PER_DIR);
        else
            snprintf(p, sizeof(p), "/r%03d.md", i);
        snprintf(body, sizeof(body), "memory %d\n%.*s\n", i, i % 90, "abcdefghijklmnopqrstuvwxyz"
                 "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
        char *id = t_create_memory(&E.msd, store, p, body);
        cr_assert_not_null(id, "cannot create %s", p);
        free(id);
    }
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_prefetch, .init = setup, .fini = teardown, .timeout = 240);

/* Polls status until no content is missing. */
static bool wait_all_local(int timeout_s)
{
    for (int i = 0; i < timeout_s * 10; i++) {
        char *out = NULL;
        sy_run(&out, "$MFS status --json");
        bool done = out && strstr(out, "\"content_missing\":0,");
        free(out);
        if (done)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

static void expect_bytes_are_the_servers(void)
{
    char *bad = sy_check_hashes();
    cr_expect_null(bad, "%s", bad);
    free(bad);
}

Test(mount_sync_prefetch, a_cold_mount_downloads_by_the_page)
{
    sy_mount(false, "--sync-interval 3600");
    cr_assert(wait_all_local(WITHIN), "content still missing");
    long singles = t_route_count(&E.msd, FETCH_ROUTE);
    long lists = t_route_count(&E.msd, LIST_ROUTE);
    /* The mount's listing (4 pages of 100) and 17 pages of 20 with content. */
    cr_expect_eq(singles, 0, "%ld memories fetched one by one", singles);
    cr_expect_leq(lists, 4 + 17 + 2, "%ld list requests for %d memories", lists, TOTAL);
    expect_bytes_are_the_servers();
}

Test(mount_sync_prefetch, pages_that_fail_fall_back_to_single_gets)
{
    sy_fault("{\"action\":\"status\",\"status\":500,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories\",\"query\":\"path_prefix\"}");
    sy_mount(false, "--sync-interval 3600");
    cr_assert(wait_all_local(WITHIN * 2), "content still missing");
    long singles = t_route_count(&E.msd, FETCH_ROUTE);
    cr_expect_eq(singles, TOTAL, "%ld single GETs", singles);
    expect_bytes_are_the_servers();
}

Test(mount_sync_prefetch, a_few_changes_are_fetched_one_by_one)
{
    sy_mount(false, "--sync-interval 3600");
    cr_assert(wait_all_local(WITHIN));
    cJSON *l = sy_list();
    int changed = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, l) {
        if (changed == 3)
            break;
        char body[100];
        snprintf(body, sizeof(body), "{\"content\":\"changed %d\\n\"}", changed);
        cr_assert_eq(sy_remote_update(tj_str(it, "id"), body), 200);
        changed++;
    }
    cJSON_Delete(l);
    sy_reset_stats();
    sy_after_sync();
    cr_assert(wait_all_local(WITHIN));
    cr_expect_eq(t_route_count(&E.msd, FETCH_ROUTE), 3);
    cr_expect_eq(t_route_count(&E.msd, LIST_ROUTE), 0, "a listing for 3 changes");
    expect_bytes_are_the_servers();
}

/* The final sync at unmount pushes what is local; it downloads none of
 * the content the mount going away lacks (that would spend the flush
 * timeout other stores' final pushes need).  Every content download is
 * refused here (403: not retried), so the content stays missing until the
 * unmount. */
Test(mount_sync_prefetch, the_unmount_downloads_no_content)
{
    sy_fault("{\"action\":\"status\",\"status\":403,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories\",\"query\":\"path_prefix\"}");
    sy_fault("{\"action\":\"status\",\"status\":403,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    sy_mount(false, "--sync-interval 3600 --flush-timeout 10");
    /* The mount's own attempts (pages, then single GETs, each retried)
     * end: no new one for 6 s. */
    long last = -1, now = 0;
    for (int i = 0, still = 0; i < 60 && still < 3; i++) {
        sleep(2);
        now = t_route_count(&E.msd, FETCH_ROUTE) + t_route_count(&E.msd, LIST_ROUTE);
        still = now == last ? still + 1 : 0;
        last = now;
    }
    cr_assert_eq(now, last, "the mount's downloads did not settle");
    cr_assert_gt(t_route_count(&E.msd, FETCH_ROUTE), 0, "the mount never fell back to single "
                                                        "GETs: the test proves nothing");
    sy_reset_stats();
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS unmount %s", mnt);
    cr_expect_eq(rc, 0, "unmount failed: %s", out);
    free(out);
    cr_expect_eq(t_route_count(&E.msd, FETCH_ROUTE), 0, "the unmount downloaded content");
    cr_expect_eq(t_route_count(&E.msd, LIST_ROUTE), 0, "the unmount listed pages of content");
}

/* Every page of content takes 4 s: the cold mount's download lasts about
 * 20 s (five pages in a row for each directory). */
static void slow_pages(void)
{
    sy_fault("{\"action\":\"latency\",\"latency_ms\":4000,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories\",\"query\":\"view=full\"}");
}

/* Whether status shows content still missing (the download not over). */
static bool content_missing(void)
{
    char *out = NULL;
    sy_run(&out, "$MFS status --json");
    bool missing = out && strstr(out, "\"content_missing\":") &&
                   !strstr(out, "\"content_missing\":0,");
    free(out);
    return missing;
}

/* Polls the server for path's content, at most seconds. */
static bool server_has(const char *path, const char *want, int seconds)
{
    for (int i = 0; i < seconds * 10; i++) {
        char *c = sy_content(path);
        bool ok = c && strcmp(c, want) == 0;
        free(c);
        if (ok)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

/* `memstorefs unmount` during a cold mount's download: its final sync takes the
 * store at once (the download's requests end; nothing of it is needed by
 * a mount going away).  Before the fix it waited for the store's lock
 * until the flush timeout, then ran with its own requests cancelled: the
 * edit stayed unpushed. */
Test(mount_sync_prefetch, the_unmount_pushes_while_a_cold_mount_downloads)
{
    slow_pages();
    sy_mount(false, "--sync-interval 3600 --flush-timeout 10");
    cr_assert_eq(sy_run(NULL, "echo late > late.md"), 0);
    cr_assert(content_missing(), "the download was over: the test proves nothing");
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "timeout 60 $MFS unmount %s", mnt);
    cr_expect_eq(rc, 0, "unmount failed (%d): %s", rc, out);
    cr_expect_null(strstr(out, "not pushed"), "%s", out);
    free(out);
    sy_clear_faults(); /* the checks below read the server */
    cr_expect(server_has("/late.md", "late\n", 1), "the edit was not pushed by the unmount");
    cr_expect_eq(sy_log_count("memory sync failed", NULL), 0, "a round cut short was logged");
    cr_expect_eq(sy_log_count("failed to fetch memory content", NULL), 0,
                 "a download cut short was logged");
}
