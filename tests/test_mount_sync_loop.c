/* test_mount_sync_loop.c - the request loop (fs/fsloop.c): one thread
 * reads and answers the mount's requests, and a request that waits on the
 * network hands that job to another thread first, so a file already local
 * is served while another file downloads.  Without the hand-over the
 * warm read waits the download's 3 s and ends second (seen failing with
 * fsloop_blocking() made a no-op).  A download an open waits for is
 * bounded by --fetch-timeout, whatever pause the server asks for. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {"/a.md", "alpha\n", "/b.md", "beta\n", NULL};

static void setup(void)
{
    sy_start(seed);
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_loop, .init = setup, .fini = teardown, .timeout = 120);

/* Polls memstored until it has received n single GETs (counted as they
 * arrive, before their latency). */
static bool wait_fetches(long n)
{
    for (int i = 0; i < 200; i++) {
        if (t_route_count(&E.msd, FETCH_ROUTE) >= n)
            return true;
        usleep(20 * 1000);
    }
    return false;
}

Test(mount_sync_loop, a_local_file_is_served_while_another_downloads)
{
    /* Every single GET of a memory's content waits 3 s: the prefetch's
     * (one a memory, for so small a store), and the read's own. */
    sy_fault("{\"action\":\"latency\",\"latency_ms\":3000,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    sy_mount(false, "--sync-interval 3600");
    cr_assert(wait_fetches(2), "the prefetch sent %ld GETs", t_route_count(&E.msd, FETCH_ROUTE));
    /* A file made here is local; b.md is not yet: its read downloads it. */
    cr_assert_eq(sy_run(NULL, "echo local > n.md"), 0);
    cr_assert_eq(sy_run(NULL, "(cat b.md > ../b.out; echo cold >> ../order) >/dev/null 2>&1 &"), 0);
    cr_assert(wait_fetches(3), "the read of b.md sent no GET");
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "cat n.md && echo warm >> ../order"), 0, "%s", out);
    cr_expect_str_eq(out, "local\n");
    free(out);
    out = NULL;
    /* Both reads end, the local one first; the download gives b.md's bytes. */
    cr_assert_eq(sy_run(&out, "for i in $(seq 100); do [ \"$(wc -l < ../order)\" = 2 ] && break; "
                              "sleep 0.1; done; cat ../order ../b.out"), 0, "%s", out);
    cr_expect_str_eq(out, "warm\ncold\nbeta\n");
    free(out);
}

/* A 429 whose retry-after asks for 300 s pauses every request for all of
 * it (the API's SDK uses any hint up to 2^31 - 1 ms; builds until 5
 * December 2026 capped it at 60 s), but an open that needs a download
 * waits no longer than --fetch-timeout: it fails with EIO, logged, and the
 * other requests stay paused.  Before the bound an open waited each capped
 * pause again, five attempts: several minutes. */
Test(mount_sync_loop, an_open_waits_for_a_download_no_longer_than_the_fetch_timeout)
{
    sy_fault("{\"action\":\"status\",\"status\":429,\"retry_after\":300,\"count\":0,"
             "\"method\":\"GET\",\"path\":\"/v1/memory_stores/*/memories/*\"}");
    sy_mount(false, "--sync-interval 3600 --fetch-timeout 2 --flush-timeout 2");
    cr_assert(wait_fetches(1), "the prefetch sent no GET");
    char *out = NULL;
    /* The pause is the server's whole hint. */
    bool paused = false;
    for (int i = 0; i < 50 && !paused; i++) {
        free(out);
        out = NULL;
        cr_assert_eq(sy_run(&out, "$MFS status --json | sed -n "
                                  "'s/.*\"throttled_until\":\"\\([^\"]*\\)\".*/\\1/p' | head -1"),
                     0);
        paused = out && out[0];
        if (!paused)
            usleep(100 * 1000);
    }
    cr_assert(paused, "status never showed the pause");
    struct tm tm = {0};
    cr_assert_not_null(strptime(out, "%Y-%m-%dT%H:%M:%SZ", &tm), "%s", out);
    long ahead = (long)(timegm(&tm) - time(NULL));
    cr_expect_gt(ahead, 200, "the pause ends %ld s from now, not the 300 s asked", ahead);
    free(out);
    out = NULL;
    /* Ten times the bound, for a loaded machine (KILL: should it hang). */
    int rc = sy_run(&out, "timeout -s KILL 20 cat b.md 2>&1; echo \" rc=$?\"");
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(out && strstr(out, "Input/output error") && strstr(out, " rc=1"),
              "the open did not fail with EIO within the bound: %s", out);
    free(out);
    cr_expect(sy_wait_log("failed to fetch memory content", "path=/b.md", 1, WITHIN),
              "the failed download is not logged: %s", sy_log_grep("fetch"));
}

/* A server whose GET of a memory answers another version than its listing
 * names (a replica that lags, a memory that keeps changing): each download
 * is stale (ESTALE), and the open waits for the sync to bring the file to
 * the listing, then tries again, four downloads in all.  That wait (10 s)
 * and each try started again the whole --fetch-timeout: the open below
 * took about 11 s against a bound of 2.  Now the tries and the wait share
 * one deadline. */
Test(mount_sync_loop, an_open_whose_downloads_are_stale_waits_no_longer_than_the_fetch_timeout)
{
    char *id = sy_id("/b.md");
    cr_assert_not_null(id);
    char *text = t_memory_reply_fault(store, id, 0, id, "/b.md", "older\n", "memver_older");
    cr_assert_not_null(text);
    sy_fault(text);
    free(text);
    sy_mount(false, "--sync-interval 3600 --fetch-timeout 2");
    cr_assert(sy_wait_log("downloaded memories", NULL, 1, WITHIN), "the prefetch did not end");
    char *out = NULL;
    /* (KILL at 30 s: should it hang.) */
    int rc = sy_run(&out, "s=$(date +%%s%%N); timeout -s KILL 30 cat b.md >/dev/null 2>&1; "
                          "r=$?; e=$(date +%%s%%N); echo \"$r $(( (e - s) / 1000000 ))\"");
    cr_assert_eq(rc, 0, "%s", out);
    int st = -1;
    long ms = -1;
    cr_assert_eq(sscanf(out ? out : "", "%d %ld", &st, &ms), 2, "%s", out);
    cr_expect_eq(st, 1, "cat of a file whose downloads are all stale exited %d", st);
    /* 2 s, and twice as much again for a loaded machine: 10.8 s before. */
    cr_expect_lt(ms, 6000, "the open took %ld ms against a bound of 2 s", ms);
    cr_expect(sy_wait_log("failed to fetch memory content", "error=\"Connection timed out\"", 1,
                          WITHIN),
              "the download is not logged as ended by the bound: %s", sy_log_grep("fetch"));
    free(out);
    free(id);
}
