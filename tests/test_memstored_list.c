/* test_memstored_list.c - memstored's memory list (A.3 list): cursor paging
 * over 2,050 memories in both views, byte-wise path order, depth=1 rollups
 * (memory_prefix items interleaved in path order and counted toward limit),
 * segment-aligned path_prefix, and the parameter checks.  One memstored
 * per test, started in .init and stopped by PID in .fini. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msd.h"

static struct msd srv;
static char *store;

static void up(void)
{
    int rc = msd_start(&srv, NULL);
    cr_assert_eq(rc, 0, "msd_start failed: %s", strerror(-rc));
    store = t_create_store(&srv, "list tests");
    cr_assert_not_null(store);
}

static void down(void)
{
    msd_stop(&srv);
    free(store);
    store = NULL;
}

TestSuite(list, .init = up, .fini = down, .timeout = 60);

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b); /* unsigned bytes */
}

static void make_all(const char *const *paths, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *id = t_create_memory(&srv, store, paths[i], paths[i]);
        cr_assert_not_null(id, "creating %s failed", paths[i]);
        free(id);
    }
}

/* Lists with query q (appended to the memories URL) and renders the items
 * as "M:/path" or "P:/prefix/" joined by spaces into a malloc'd string. */
static char *render(const char *q, int *pages)
{
    char url[512];
    long err;
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories%s", store, q);
    cJSON *all = t_list_all(&srv, url, pages, &err);
    cr_assert_not_null(all, "list %s failed: %ld", q, err);
    size_t cap = 64, len = 0;
    char *out = calloc(1, cap);
    const cJSON *it;
    cJSON_ArrayForEach(it, all)
    {
        const char *type = tj_str(it, "type") ?: "?";
        const char *path = tj_str(it, "path") ?: "?";
        char item[600];
        int k = snprintf(item, sizeof item, "%s%s:%s", len ? " " : "",
                         strcmp(type, "memory") == 0          ? "M"
                         : strcmp(type, "memory_prefix") == 0 ? "P"
                                                              : type,
                         path);
        while (len + (size_t)k + 1 > cap)
            out = realloc(out, cap *= 2);
        memcpy(out + len, item, (size_t)k + 1);
        len += (size_t)k;
    }
    cJSON_Delete(all);
    return out;
}

#define N_BIG 2050

Test(list, pagination_2050_both_views, .timeout = 90)
{
    /* Paths chosen so that creation order, numeric order and byte order all
     * differ: mixed case, '-' '.' '/' neighbours, non-ASCII. */
    static const char *tails[] = {"a.md", "A.md", "a-b.md", "z", "\xc3\xa9t\xc3\xa9.md", "_u"};
    char **paths = calloc(N_BIG, sizeof *paths);
    char **bodies = calloc(N_BIG, sizeof *bodies);
    long *status = calloc(N_BIG, sizeof *status);
    cr_assert(paths && bodies && status);
    for (size_t i = 0; i < N_BIG; i++) {
        size_t j = (i * 7919) % N_BIG; /* a permutation: 7919 is prime to 2050 */
        char p[128];
        snprintf(p, sizeof p, "/d%zu/%zu-%s", j % 37, j, tails[j % 6]);
        paths[i] = strdup(p);
        char content[160];
        snprintf(content, sizeof content, "content of %s", p);
        bodies[i] = tj_memory_body(p, content);
    }
    char url[256];
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories", store);
    int rc = t_api_multi(&srv, "POST", url, (const char *const *)bodies, N_BIG, 8, status, NULL);
    cr_assert_eq(rc, 0);
    for (size_t i = 0; i < N_BIG; i++)
        cr_assert_eq(status[i], 200, "create %zu (%s) got %ld", i, paths[i], status[i]);

    qsort(paths, N_BIG, sizeof *paths, cmp_str);

    struct {
        const char *q;
        int want_pages;
        bool full;
    } runs[] = {
        {"?limit=100", 21, false},
        {"?limit=20&view=full", 103, true},
        {"?limit=100&view=full", 103, true}, /* clamped to 20 */
    };
    for (size_t k = 0; k < 3; k++) {
        snprintf(url, sizeof url, "/v1/memory_stores/%s/memories%s", store, runs[k].q);
        int pages = 0;
        long err = 0;
        cJSON *all = t_list_all(&srv, url, &pages, &err);
        cr_assert_not_null(all, "%s failed: %ld", runs[k].q, err);
        cr_expect_eq(pages, runs[k].want_pages, "%s: %d pages, want %d", runs[k].q, pages,
                     runs[k].want_pages);
        int n = cJSON_GetArraySize(all);
        cr_expect_eq(n, N_BIG, "%s: %d items, want %d", runs[k].q, n, N_BIG);
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, all)
        {
            if (i >= N_BIG)
                break;
            const char *p = tj_str(it, "path") ?: "(none)";
            if (strcmp(p, paths[i]) != 0) {
                cr_expect_fail("%s: item %d is %s, want %s (each exactly once, byte order)",
                               runs[k].q, i, p, paths[i]);
                break;
            }
            if (runs[k].full) {
                char want[160];
                snprintf(want, sizeof want, "content of %s", p);
                const char *c = tj_str(it, "content");
                if (!c || strcmp(c, want) != 0) {
                    cr_expect_fail("%s: item %d content %s", runs[k].q, i, c ? c : "null");
                    break;
                }
            } else if (!tj_is_null(it, "content")) {
                cr_expect_fail("basic view item %d carries content", i);
                break;
            }
            i++;
        }
        cJSON_Delete(all);
    }
    /* One page in full view holds at most 20. */
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?limit=100&view=full", store);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 20);
    tresp_free(&r);
    for (size_t i = 0; i < N_BIG; i++)
        free(paths[i]), free(bodies[i]);
    free(paths);
    free(bodies);
    free(status);
}

static const char *const tree[] = {
    "/d.md", "/b/d/e.md", "/a.md", "/b/c.md", "/c/x.md", "/e/f/g.md", "/b-x.md", "/b.md",
};

Test(list, depth1_rollups_root_and_nested)
{
    make_all(tree, sizeof tree / sizeof tree[0]);
    const char *want_root = "M:/a.md M:/b-x.md M:/b.md P:/b/ P:/c/ M:/d.md P:/e/";
    char *got = render("?depth=1", NULL);
    cr_expect_str_eq(got, want_root);
    free(got);
    got = render("?depth=1&path_prefix=/", NULL);
    cr_expect_str_eq(got, want_root);
    free(got);

    /* Prefixes count toward limit; paging through them yields the same. */
    int pages = 0;
    got = render("?depth=1&limit=2", &pages);
    cr_expect_str_eq(got, want_root);
    cr_expect_eq(pages, 4, "7 items at limit 2 are 4 pages, got %d", pages);
    free(got);
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?depth=1&limit=4", store);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 4, "%s", r.body);
    tresp_free(&r);

    got = render("?depth=1&path_prefix=/b/", NULL);
    cr_expect_str_eq(got, "M:/b/c.md P:/b/d/");
    free(got);
    got = render("?depth=1&path_prefix=/b/d/", NULL);
    cr_expect_str_eq(got, "M:/b/d/e.md");
    free(got);
    got = render("?depth=1&path_prefix=/e/", NULL);
    cr_expect_str_eq(got, "P:/e/f/");
    free(got);
    got = render("?depth=0&path_prefix=/b/", NULL);
    cr_expect_str_eq(got, "M:/b/c.md M:/b/d/e.md");
    free(got);
    got = render("", NULL);
    cr_expect_str_eq(got, "M:/a.md M:/b-x.md M:/b.md M:/b/c.md M:/b/d/e.md M:/c/x.md M:/d.md "
                          "M:/e/f/g.md");
    free(got);
}

Test(list, depth1_paging_through_many_prefixes)
{
    /* 30 directories and 5 files at the top, interleaved. */
    for (int i = 0; i < 30; i++) {
        char p[64];
        snprintf(p, sizeof p, "/dir%02d/sub/x.md", i);
        char *id = t_create_memory(&srv, store, p, "x");
        cr_assert_not_null(id);
        free(id);
        if (i % 6 == 0) {
            snprintf(p, sizeof p, "/dir%02d.md", i);
            id = t_create_memory(&srv, store, p, "x");
            cr_assert_not_null(id);
            free(id);
        }
    }
    char *want = render("?depth=1&limit=100", NULL);
    int pages = 0;
    char *got = render("?depth=1&limit=8", &pages);
    cr_expect_str_eq(got, want);
    cr_expect_eq(pages, 5, "35 items at limit 8 are 5 pages, got %d", pages);
    /* Each prefix exactly once, and the shape is right. */
    int prefixes = 0, mems = 0;
    for (char *p = got; (p = strstr(p, "P:/dir")); p++)
        prefixes++;
    for (char *p = got; (p = strstr(p, "M:/dir")); p++)
        mems++;
    cr_expect_eq(prefixes, 30, "%s", got);
    cr_expect_eq(mems, 5, "%s", got);
    cr_expect(strncmp(got, "M:/dir00.md P:/dir00/ P:/dir01/", 31) == 0, "%s", got);
    free(got);
    free(want);
    got = render("?depth=1&path_prefix=/dir07/", NULL);
    cr_expect_str_eq(got, "P:/dir07/sub/");
    free(got);
}

Test(list, path_prefix_is_segment_aligned)
{
    const char *const paths[] = {"/notes/todo.md", "/notes-archive/x.md", "/notes.md",
                                 "/notesx", "/notes/deep/y.md", "/other/notes/z.md"};
    make_all(paths, 6);
    char *got = render("?path_prefix=/notes/", NULL);
    cr_expect_str_eq(got, "M:/notes/deep/y.md M:/notes/todo.md");
    free(got);
    got = render("?path_prefix=/nope/", NULL);
    cr_expect_str_eq(got, "");
    free(got);
    got = render("?path_prefix=%2Fnotes%2F&depth=1", NULL);
    cr_expect_str_eq(got, "P:/notes/deep/ M:/notes/todo.md");
    free(got);

    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?path_prefix=/nope/", store);
    T_ASSERT_STATUS(&r, 200);
    cr_expect(tj_is_null(r.json, "next_page"), "empty list: next_page null: %s", r.body);
    tresp_free(&r);
}

Test(list, parameter_errors)
{
    char *id = t_create_memory(&srv, store, "/x.md", "x");
    free(id);
    const char *bad[] = {
        "depth=2",       "depth=-1",          "depth=x",         "limit=0",
        "limit=101",     "limit=abc",         "limit=2.5",       "view=bogus",
        "path_prefix=/notes", "path_prefix=notes/", "path_prefix=//", "path_prefix=/a/../",
        "page=garbage_cursor",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct tresp r;
        t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?%s", store, bad[i]);
        T_EXPECT_ERROR(&r, 400, "invalid_request_error");
        if (r.status != 400)
            cr_log_error("query %s gave %ld", bad[i], r.status);
        tresp_free(&r);
    }
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/memstore_missing/memories");
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?limit=1&limit=1", store);
    cr_expect(r.status == 200 || r.status == 400, "repeated limit: %ld", r.status);
    tresp_free(&r);
    /* Still serving, and the list is unchanged. */
    char *got = render("", NULL);
    cr_expect_str_eq(got, "M:/x.md");
    free(got);
}

Test(list, cursor_is_stable_under_concurrent_writes)
{
    /* An offset cursor would repeat or skip items when earlier paths
     * appear or vanish between pages; a path cursor does not. */
    for (int i = 0; i < 10; i++) {
        char p[32];
        snprintf(p, sizeof p, "/m%02d.md", i);
        char *id = t_create_memory(&srv, store, p, "x");
        cr_assert_not_null(id);
        free(id);
    }
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?limit=5", store);
    T_ASSERT_STATUS(&r, 200);
    const char *next = tj_str(r.json, "next_page");
    cr_assert(next && *next, "a full first page must have next_page: %s", r.body);
    char cursor[512];
    snprintf(cursor, sizeof cursor, "%s", next);
    tresp_free(&r);

    /* Two new paths sort before the cursor, one after; one old one before
     * the cursor goes away. */
    char *a = t_create_memory(&srv, store, "/a-new.md", "x");
    char *b = t_create_memory(&srv, store, "/m00-new.md", "x");
    char *z = t_create_memory(&srv, store, "/z-new.md", "x");
    cr_assert(a && b && z);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?limit=100", store);
    const cJSON *it;
    cJSON_ArrayForEach(it, tj_get(r.json, "data")) if (strcmp(tj_str(it, "path") ?: "",
                                                              "/m01.md") == 0)
    {
        struct tresp d;
        t_req(&srv, "DELETE", NULL, &d, "/v1/memory_stores/%s/memories/%s", store,
              tj_str(it, "id"));
        tresp_free(&d);
    }
    tresp_free(&r);

    char url[700];
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories?limit=5&page=%s", store, cursor);
    t_api(&srv, "GET", url, NULL, &r);
    T_ASSERT_STATUS(&r, 200);
    char got[256] = "";
    size_t o = 0;
    cJSON_ArrayForEach(it, tj_get(r.json, "data"))
        o += (size_t)snprintf(got + o, sizeof got - o, "%s ", tj_str(it, "path") ?: "?");
    cr_expect_str_eq(got, "/m05.md /m06.md /m07.md /m08.md /m09.md ", "page 2 after writes: %s",
                     r.body);
    tresp_free(&r);
    free(a);
    free(b);
    free(z);
}

Test(list, query_encoding_of_path_prefix)
{
    const char *const paths[] = {"/c++/x.md", "/a b/y.md", "/100%/z.md", "/caf\xc3\xa9/w.md",
                                 "/c/x.md", "/a/y.md"};
    make_all(paths, 6);
    struct {
        const char *q, *want;
    } rows[] = {
        {"?path_prefix=%2Fc%2B%2B%2F", "M:/c++/x.md"},
        {"?path_prefix=/a%20b/", "M:/a b/y.md"},
        {"?path_prefix=/100%25/", "M:/100%/z.md"},
        {"?path_prefix=/caf%C3%A9/", "M:/caf\xc3\xa9/w.md"},
        {"?depth=1&path_prefix=%2F", "P:/100%/ P:/a b/ P:/a/ P:/c++/ P:/c/ P:/caf\xc3\xa9/"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char *got = render(rows[i].q, NULL);
        cr_expect_str_eq(got, rows[i].want, "%s", rows[i].q);
        free(got);
    }
}

Test(list, prefix_items_shape_in_full_view)
{
    const char *const paths[] = {"/dir/deep/x.md", "/top.md"};
    make_all(paths, 2);
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?depth=1&view=full", store);
    T_ASSERT_STATUS(&r, 200);
    const cJSON *data = tj_get(r.json, "data");
    cr_assert_eq(cJSON_GetArraySize(data), 2, "%s", r.body);
    const cJSON *p = cJSON_GetArrayItem(data, 0), *m = cJSON_GetArrayItem(data, 1);
    cr_expect_str_eq(tj_str(p, "type") ?: "", "memory_prefix");
    cr_expect_str_eq(tj_str(p, "path") ?: "", "/dir/");
    cr_expect_null(tj_get(p, "id"), "a memory_prefix has no id: %s", r.body);
    cr_expect_str_eq(tj_str(m, "type") ?: "", "memory");
    cr_expect_str_eq(tj_str(m, "content") ?: "(null)", "/top.md", "full view: content present");
    tresp_free(&r);
}

Test(list, default_limit_is_20)
{
    enum { N = 25 };
    char *bodies[N];
    long status[N];
    for (int i = 0; i < N; i++) {
        char p[32];
        snprintf(p, sizeof p, "/x%02d", i);
        bodies[i] = tj_memory_body(p, "x");
    }
    char url[256];
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories", store);
    cr_assert_eq(t_api_multi(&srv, "POST", url, (const char *const *)bodies, N, 4, status, NULL), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(status[i], 200);
        free(bodies[i]);
    }
    const char *lists[] = {"memories", "memories?view=full", "memory_versions",
                           "memory_versions?view=full&limit=21"};
    for (int i = 0; i < 4; i++) {
        struct tresp r;
        t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/%s", store, lists[i]);
        T_ASSERT_STATUS(&r, 200);
        cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 20, "%s: %d items", lists[i],
                     cJSON_GetArraySize(tj_get(r.json, "data")));
        cr_expect(tj_str(r.json, "next_page") != NULL, "%s: next_page missing", lists[i]);
        tresp_free(&r);
    }
}
