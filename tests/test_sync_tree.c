/* test_sync_tree.c - the listing by directory (api_memories_list_tree)
 * lists exactly what the page-by-page listing lists, in one request for
 * the root and one a directory's page, and trusts nothing it can check: a
 * server that ignores depth=1, a rollup that is not one level down, a
 * directory's item outside it (each -ENOTSUP, so the caller lists page by
 * page), a malformed rollup, a directory whose cursor goes round, and a
 * directory that never ends (the memory budget); and a root of more than
 * 64 directories gives way to pages (-E2BIG).  And the bulk pages with
 * content (api_pages_run): a lane takes prefix after prefix, and lanes
 * do not wait for each other.  The server is a real
 * memstored; its reply and pages faults play the wrong servers. */
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
    store = t_create_store(&srv, "tree");
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

TestSuite(tree, .init = up, .fini = down, .timeout = 120);

static void put(const char *path)
{
    char *id = t_create_memory(&srv, store, path, path);
    cr_assert_not_null(id, "cannot create %s", path);
    free(id);
}

static void fault(const char *json)
{
    struct tresp r;
    cr_assert_eq(t_admin(&srv, "POST", "/admin/faults", json, &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
}

static void reset_stats(void)
{
    struct tresp r;
    cr_assert_eq(t_admin(&srv, "POST", "/admin/stats/reset", NULL, &r), 0);
    tresp_free(&r);
}

static long list_requests(void)
{
    return t_route_count(&srv, "GET /v1/memory_stores/{id}/memories");
}

static int cmp_mem(const void *a, const void *b)
{
    const struct api_memory *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : strcmp(x->id, y->id);
}

/* Every field a sync uses, item by item, in path order. */
static void expect_same(struct api_list *a, struct api_list *b)
{
    cr_assert_eq(a->n, b->n, "%zu memories listed by directory, %zu page by page", a->n, b->n);
    qsort(a->items, a->n, sizeof(*a->items), cmp_mem);
    qsort(b->items, b->n, sizeof(*b->items), cmp_mem);
    for (size_t i = 0; i < a->n; i++) {
        cr_expect_str_eq(a->items[i].path, b->items[i].path);
        cr_expect_str_eq(a->items[i].id, b->items[i].id);
        cr_expect_str_eq(a->items[i].sha, b->items[i].sha);
        cr_expect_str_eq(a->items[i].version_id, b->items[i].version_id);
        cr_expect_eq(a->items[i].size, b->items[i].size);
    }
}

static void on_progress(void *arg, size_t n, bool last)
{
    (void)n;
    (void)last;
    (*(size_t *)arg)++;
}

Test(tree, lists_what_the_plain_listing_lists)
{
    put("/root-a.md");
    put("/root-b.md");
    put("/a/x.md");
    put("/a/b/c.md");
    put("/a/b/d/e.md");
    for (int d = 0; d < 12; d++)
        for (int f = 0; f < 5; f++) {
            char p[64];
            snprintf(p, sizeof(p), "/dir%02d/m%d.md", d, f);
            put(p);
        }
    for (int f = 0; f < 230; f++) {
        char p[64];
        snprintf(p, sizeof(p), "/big/m%03d.md", f);
        put(p);
    }
    struct api_list plain = {0}, tree = {0};
    struct api_error e = {0};
    cr_assert_eq(api_memories_list(cli, store, &plain, &e), 0, "%s", e.message);
    reset_stats();
    size_t calls = 0;
    int rc = api_memories_list_tree(cli, store, &tree, &e, on_progress, &calls);
    cr_assert_eq(rc, 0, "the listing by directory failed: %d %s", rc, e.message);
    cr_expect_eq(tree.n, 2 + 3 + 60 + 230);
    /* The root (one page: 2 files, 14 rollups), then a page for each of
     * /a/ and the 12 dirNN/, and 3 for /big/. */
    cr_expect_eq(list_requests(), 1 + 1 + 12 + 3, "%ld requests", list_requests());
    cr_expect_geq(calls, 2, "progress was called %zu times", calls);
    expect_same(&tree, &plain);
    api_list_free(&plain);
    api_list_free(&tree);
    api_error_clear(&e);
}

Test(tree, a_store_with_files_at_the_root_only_is_one_request)
{
    put("/one.md");
    put("/two.md");
    reset_stats();
    struct api_list l = {0};
    struct api_error e = {0};
    cr_assert_eq(api_memories_list_tree(cli, store, &l, &e, NULL, NULL), 0, "%s", e.message);
    cr_expect_eq(l.n, 2);
    cr_expect_eq(list_requests(), 1);
    api_list_free(&l);
    api_error_clear(&e);
}

/* A root answer given by a reply fault on depth=1 requests. */
static void root_answer(const char *data)
{
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"action\":\"reply\",\"count\":0,\"method\":\"GET\",\"query\":\"depth=1\","
             "\"path\":\"/v1/memory_stores/*/memories\",\"body\":{\"data\":%s,"
             "\"next_page\":null}}", data);
    fault(body);
}

static void expect_not_tree(void)
{
    struct api_list l = {0};
    struct api_error e = {0};
    int rc = api_memories_list_tree(cli, store, &l, &e, NULL, NULL);
    cr_expect_eq(rc, -ENOTSUP, "a listing that does not fit ended with %d", rc);
    cr_expect_eq(l.n, 0, "a refused listing handed out %zu memories", l.n);
    api_list_free(&l);
    api_error_clear(&e);
}

#define MEM(path)                                                                           \
    "{\"type\":\"memory\",\"id\":\"mem_x\",\"memory_version_id\":\"memver_x\",\"path\":\"" \
    path "\",\"content_sha256\":"                                                          \
    "\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\","                \
    "\"content_size_bytes\":0}"

Test(tree, a_server_ignoring_depth_is_not_trusted)
{
    put("/a/x.md");
    root_answer("[" MEM("/a/x.md") "]");
    expect_not_tree();
}

Test(tree, a_rollup_more_than_one_level_down_is_not_trusted)
{
    put("/a/b/x.md");
    root_answer("[{\"type\":\"memory_prefix\",\"path\":\"/a/b/\"}]");
    expect_not_tree();
}

Test(tree, a_directory_item_outside_it_is_not_trusted)
{
    put("/a/x.md");
    fault("{\"action\":\"reply\",\"count\":0,\"method\":\"GET\",\"query\":\"path_prefix=/a/\","
          "\"path\":\"/v1/memory_stores/*/memories\",\"body\":{\"data\":[" MEM("/b/x.md")
          "],\"next_page\":null}}");
    expect_not_tree();
}

Test(tree, a_malformed_rollup_is_a_malformed_answer)
{
    put("/a/x.md");
    root_answer("[{\"type\":\"memory_prefix\",\"path\":\"no-slashes\"}]");
    struct api_list l = {0};
    struct api_error e = {0};
    cr_expect_eq(api_memories_list_tree(cli, store, &l, &e, NULL, NULL), -EPROTO);
    cr_expect_str_eq(e.type, "malformed_response");
    cr_expect_eq(l.n, 0);
    api_error_clear(&e);
}

Test(tree, a_directory_whose_cursor_goes_round_is_refused)
{
    put("/loop/x.md");
    fault("{\"action\":\"pages\",\"cycle\":2,\"items\":3,\"count\":0,\"method\":\"GET\","
          "\"query\":\"path_prefix=/loop/\",\"path\":\"/v1/memory_stores/*/memories\"}");
    struct api_list l = {0};
    struct api_error e = {0};
    int rc = api_memories_list_tree(cli, store, &l, &e, NULL, NULL);
    cr_expect_eq(rc, -EPROTO, "%d", rc);
    cr_expect(strstr(e.message, "repeats a cursor"), "%s", e.message);
    cr_expect_eq(l.n, 0);
    /* The root, then the directory's pages until the repeat. */
    cr_expect_leq(list_requests(), 1 + 3, "%ld requests", list_requests());
    api_error_clear(&e);
}

Test(tree, a_directory_that_never_ends_stops_at_the_memory_budget)
{
    api_set_list_budget(1 << 20);
    put("/loop/x.md");
    fault("{\"action\":\"pages\",\"cycle\":0,\"items\":100,\"count\":0,\"method\":\"GET\","
          "\"query\":\"path_prefix=/loop/\",\"path\":\"/v1/memory_stores/*/memories\"}");
    struct api_list l = {0};
    struct api_error e = {0};
    int rc = api_memories_list_tree(cli, store, &l, &e, NULL, NULL);
    cr_expect_eq(rc, -EFBIG, "%d", rc);
    cr_expect_str_eq(e.type, "listing_too_large");
    cr_expect_eq(l.n, 0);
    long n = list_requests();
    cr_expect(n > 10 && n < 100, "the listing paged %ld times", n);
    api_error_clear(&e);
}

/* Many small directories would cost more round trips than pages of 100:
 * past 64 the listing by directory gives way (-E2BIG) after the root. */
static void dirs_of_one(int n)
{
    for (int d = 0; d < n; d++) {
        char p[64];
        snprintf(p, sizeof(p), "/d%02d/only.md", d);
        put(p);
    }
    reset_stats();
}

Test(tree, more_than_64_directories_give_way_to_pages)
{
    dirs_of_one(65);
    struct api_list l = {0};
    struct api_error e = {0};
    cr_expect_eq(api_memories_list_tree(cli, store, &l, &e, NULL, NULL), -E2BIG);
    cr_expect_eq(l.n, 0);
    cr_expect_eq(list_requests(), 1, "%ld requests", list_requests());
    api_error_clear(&e);
}

Test(tree, up_to_64_directories_are_listed_by_directory)
{
    dirs_of_one(64);
    struct api_list l = {0};
    struct api_error e = {0};
    cr_assert_eq(api_memories_list_tree(cli, store, &l, &e, NULL, NULL), 0, "%s", e.message);
    cr_expect_eq(l.n, 64);
    cr_expect_eq(list_requests(), 1 + 64, "%ld requests", list_requests());
    api_list_free(&l);
    api_error_clear(&e);
}

/* ---- the bulk pages with content (api_pages_run) ---------------------- */

struct lanes {
    const char *const *prefix; /* the prefixes still to start, NULL-ended */
    size_t next;
    int pages[8], memories, wrong, slow_first_at;
    const char *slow;          /* a prefix whose page is slow (or NULL) */
    int turns;
};

static int prefix_no(struct lanes *l, const char *p)
{
    for (int i = 0; l->prefix[i]; i++)
        if (l->prefix[i] == p)
            return i;
    return -1;
}

static bool turn(void *arg, struct api_page_req *r)
{
    struct lanes *l = arg;
    l->turns++;
    cr_assert_eq(r->err, 0, "%s: %s", r->path_prefix, strerror(-r->err));
    int k = prefix_no(l, r->path_prefix);
    cr_assert(k >= 0);
    l->pages[k]++;
    for (size_t i = 0; i < r->items.n; i++) {
        const struct api_memory *m = &r->items.items[i];
        l->memories++;
        /* Each memory's content is its path, and it lies in the prefix. */
        if (!m->content || strcmp(m->content, m->path) != 0 ||
            strncmp(m->path, r->path_prefix, strlen(r->path_prefix)) != 0)
            l->wrong++;
    }
    if (l->slow && strcmp(r->path_prefix, l->slow) == 0 && !l->slow_first_at)
        l->slow_first_at = l->turns;
    if (!r->done)
        return true;
    if (!l->prefix[l->next])
        return false;
    api_page_req_clear(r);
    memset(r, 0, sizeof(*r));
    r->path_prefix = l->prefix[l->next++];
    r->depth1 = strcmp(r->path_prefix, "/") == 0;
    return true;
}

static void put_many(const char *dir, int n)
{
    for (int i = 0; i < n; i++) {
        char p[64];
        snprintf(p, sizeof(p), "%sm%02d.md", dir, i);
        put(p);
    }
}

/* One lane goes through every prefix it is given, page after page, each
 * memory once with its content: 45 + 5 + 25 memories and 3 at the root
 * in 3 + 1 + 2 + 1 requests. */
Test(tree, one_lane_takes_prefix_after_prefix)
{
    put_many("/a/", 45);
    put_many("/b/", 5);
    put_many("/c/", 25);
    put_many("/", 3);
    static const char *const prefix[] = {"/a/", "/b/", "/c/", "/", NULL};
    struct lanes l = {.prefix = prefix, .next = 1};
    struct api_page_req r = {.path_prefix = prefix[0]};
    reset_stats();
    cr_assert_eq(api_pages_run(cli, store, &r, 1, turn, &l), 0);
    api_page_req_clear(&r);
    cr_expect_eq(l.memories, 78);
    cr_expect_eq(l.wrong, 0);
    cr_expect_eq(l.pages[0], 3);
    cr_expect_eq(l.pages[1], 1);
    cr_expect_eq(l.pages[2], 2);
    cr_expect_eq(l.pages[3], 1);
    cr_expect_eq(list_requests(), 7);
}

/* Lanes do not go in lock step: while the one page of a slow directory
 * is in flight (1.5 s), the other lane lists its three pages and the
 * next directory's, each leaving as soon as the one before it came. */
Test(tree, a_lane_goes_on_while_another_waits)
{
    put_many("/a/", 45);
    put_many("/b/", 10);
    put_many("/s/", 3);
    fault("{\"action\":\"latency\",\"latency_ms\":1500,\"count\":0,\"method\":\"GET\","
          "\"query\":\"path_prefix=/s/\"}");
    static const char *const prefix[] = {"/s/", "/a/", "/b/", NULL};
    struct lanes l = {.prefix = prefix, .next = 2, .slow = "/s/"};
    struct api_page_req r[2] = {{.path_prefix = prefix[0]}, {.path_prefix = prefix[1]}};
    cr_assert_eq(api_pages_run(cli, store, r, 2, turn, &l), 0);
    api_page_req_clear(&r[0]);
    api_page_req_clear(&r[1]);
    cr_expect_eq(l.memories, 58);
    cr_expect_eq(l.wrong, 0);
    cr_expect_eq(l.slow_first_at, 5, "the slow page came at turn %d, not after the 4 others",
                 l.slow_first_at);
}

/* A cancel ends every lane, each with done set and -ECANCELED. */
Test(tree, a_cancel_ends_the_lanes)
{
    put_many("/a/", 3);
    static const char *const prefix[] = {"/a/", NULL};
    struct lanes l = {.prefix = prefix, .next = 1};
    struct api_page_req r = {.path_prefix = prefix[0]};
    http_client_cancel(cli, true);
    cr_assert_eq(api_pages_run(cli, store, &r, 1, turn, &l), 0);
    http_client_cancel(cli, false);
    cr_expect(r.done);
    cr_expect_eq(r.err, -ECANCELED);
    cr_expect_eq(l.turns, 0);
    api_page_req_clear(&r);
}
