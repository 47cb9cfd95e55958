/* test_mount_sync_loop.c - the request loop (fs/fsloop.c): one thread
 * reads and answers the mount's requests, and a request that waits on the
 * network hands that job to another thread first, so a file already local
 * is served while another file downloads.  Without the hand-over the
 * warm read waits the download's 3 s and ends second (seen failing with
 * fsloop_blocking() made a no-op). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
