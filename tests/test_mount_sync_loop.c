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

#define FETCH_ROUTE "GET /v1/memory_stores/{id}/memories/{id}"

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
