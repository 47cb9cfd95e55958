/* test_sync_bounds.c - a listing ends whatever the server answers: a
 * next_page cursor that comes round again (A, B, A...; A, B, C, A...) is
 * refused at once as a malformed answer, and a listing that never ends
 * with fresh cursors stops at the memory budget with a clear error.  The
 * server is a real memstored with a "pages" fault (made-up list pages). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "http.h"
#include "msd.h"

static struct msd srv;
static char *store;
static struct http_client *cli;

static void up(void)
{
    cr_assert_eq(msd_start(&srv, NULL), 0, "memstored did not start");
    store = t_create_store(&srv, "bounds");
    cr_assert_not_null(store);
    struct http_opts o = {.base_url = srv.url, .api_key = "test-key", .max_in_flight = 8,
                          .max_retries = 2, .backoff_base_ms = 10, .backoff_max_ms = 50};
    cli = http_client_new(&o);
    cr_assert_not_null(cli);
}

static void down(void)
{
    api_set_list_budget(0);
    http_client_free(&cli);
    msd_stop(&srv);
    free(store);
    store = NULL;
}

TestSuite(bounds, .init = up, .fini = down, .timeout = 120);

static void pages_fault_ex(int cycle, int items, bool malformed)
{
    char body[256];
    snprintf(body, sizeof(body),
             "{\"action\":\"pages\",\"cycle\":%d,\"items\":%d,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories\",\"malformed\":%s}", cycle, items,
             malformed ? "true" : "false");
    struct tresp r;
    cr_assert_eq(t_admin(&srv, "POST", "/admin/faults", body, &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
}

static void pages_fault(int cycle, int items)
{
    pages_fault_ex(cycle, items, false);
}

static long list_requests(void)
{
    return t_route_count(&srv, "GET /v1/memory_stores/{id}/memories");
}

static void expect_cycle_refused(int cycle)
{
    pages_fault(cycle, 3);
    struct api_list l = {0};
    struct api_error e = {0};
    int rc = api_memories_list(cli, store, &l, &e);
    cr_expect_eq(rc, -EPROTO, "a listing going round %d cursors ended with %d", cycle, rc);
    cr_expect_str_eq(e.type, "malformed_response");
    cr_expect(strstr(e.message, "repeats a cursor"), "%s", e.message);
    cr_expect_eq(l.n, 0, "a failed listing handed out %zu memories", l.n);
    /* The first page has no cursor; then cycle pages, then the repeat. */
    cr_expect_leq(list_requests(), cycle + 1, "the listing paged %ld times", list_requests());
    api_error_clear(&e);
}

Test(bounds, cursor_going_back_and_forth_is_refused)
{
    expect_cycle_refused(2);
}

Test(bounds, cursor_going_round_three_is_refused)
{
    expect_cycle_refused(3);
}

Test(bounds, endless_listing_stops_at_the_memory_budget)
{
    api_set_list_budget(1 << 20);
    pages_fault(0, 100);
    struct api_list l = {0};
    struct api_error e = {0};
    int rc = api_memories_list(cli, store, &l, &e);
    cr_expect_eq(rc, -EFBIG, "an endless listing ended with %d", rc);
    cr_expect_str_eq(e.type, "listing_too_large");
    cr_expect(strstr(e.message, "memory budget of 1 MiB"), "%s", e.message);
    cr_expect_eq(l.n, 0);
    /* 100 memories of about 230 bytes a page: about 45 pages. */
    long n = list_requests();
    cr_expect(n > 10 && n < 100, "the listing paged %ld times", n);
    api_error_clear(&e);
}

/* The same with nothing but malformed items: left out, they are still
 * held in memory (to be reported), and weigh against the budget.  Before,
 * only the items taken did, and the listing went on to its 100,000th page
 * (about 10 million items left out held). */
Test(bounds, endless_malformed_listing_stops_at_the_memory_budget)
{
    api_set_list_budget(1 << 20);
    pages_fault_ex(0, 100, true);
    struct api_list l = {0};
    struct api_error e = {0};
    int rc = api_memories_list(cli, store, &l, &e);
    cr_expect_eq(rc, -EFBIG, "an endless listing of bad items ended with %d", rc);
    cr_expect_str_eq(e.type, "listing_too_large");
    cr_expect_eq(l.n, 0);
    cr_expect_eq(l.n_skipped, 0, "a failed listing handed out %zu items left out", l.n_skipped);
    long n = list_requests();
    cr_expect(n > 10 && n < 100, "the listing paged %ld times", n);
    api_error_clear(&e);
    api_list_free(&l);
}

Test(bounds, a_listing_within_the_budget_is_whole)
{
    api_set_list_budget(1 << 20);
    for (int i = 0; i < 150; i++) {
        char path[64];
        snprintf(path, sizeof(path), "/d/m%03d.md", i);
        free(t_create_memory(&srv, store, path, "x"));
    }
    struct api_list l = {0};
    struct api_error e = {0};
    cr_assert_eq(api_memories_list(cli, store, &l, &e), 0, "%s", e.message);
    cr_expect_eq(l.n, 150);
    api_list_free(&l);
    api_error_clear(&e);
}
