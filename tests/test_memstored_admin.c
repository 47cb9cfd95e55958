/* test_memstored_admin.c - memstored's admin API (CONTRACTS.md): stats per
 * route template, stats reset, and injected faults (status with
 * retry-after, 500, 529, count, count 0 until cleared, method and path
 * filters, order, latency, drop_after_commit).  One memstored per test,
 * started in .init and stopped by PID in .fini. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msd.h"

static struct msd srv;

static void up(void)
{
    int rc = msd_start(&srv, NULL);
    cr_assert_eq(rc, 0, "msd_start failed: %s", strerror(-rc));
}

static void down(void)
{
    msd_stop(&srv);
}

TestSuite(admin, .init = up, .fini = down, .timeout = 30);

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void add_fault(const char *json)
{
    struct tresp r;
    t_admin(&srv, "POST", "/admin/faults", json, &r);
    cr_assert_eq(r.status, 200, "adding fault %s: %ld %s", json, r.status, r.body);
    cr_expect(strncmp(tj_str(r.json, "id") ?: "", "fault_", 6) == 0, "fault id: %s", r.body);
    tresp_free(&r);
}

static long store_count(void)
{
    struct tresp r;
    t_api(&srv, "GET", "/v1/memory_stores?limit=100&include_archived=true", NULL, &r);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    long n = cJSON_GetArraySize(tj_get(r.json, "data"));
    tresp_free(&r);
    return n;
}

Test(admin, needs_the_admin_key)
{
    char url[128];
    snprintf(url, sizeof url, "%s/admin/stats", srv.url);
    const char *hs[][2] = {{NULL, NULL},
                           {"x-admin-key: wrong", NULL},
                           {"x-api-key: test-key", NULL},
                           {"Authorization: Bearer admin-key", NULL}};
    for (int i = 0; i < 4; i++) {
        struct tresp r;
        t_http("GET", url, NULL, hs[i], &r);
        T_EXPECT_ERROR(&r, 401, "authentication_error");
        tresp_free(&r);
    }
    snprintf(url, sizeof url, "%s/admin/faults", srv.url);
    struct tresp r;
    t_http("POST", url, "{\"action\":\"status\",\"status\":500}", hs[1], &r);
    T_EXPECT_ERROR(&r, 401, "authentication_error");
    tresp_free(&r);
    /* ...and that refused fault is not active. */
    cr_expect_eq(store_count(), 0);
}

Test(admin, stats_count_per_route)
{
    struct tresp r;
    t_admin(&srv, "POST", "/admin/stats/reset", NULL, &r);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);

    char *st = t_create_store(&srv, "s");
    char *m1 = t_create_memory(&srv, st, "/a.md", "a");
    char *m2 = t_create_memory(&srv, st, "/b.md", "b");
    cr_assert(st && m1 && m2);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", st, m1);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/mem_missing", st); /* 404 */
    tresp_free(&r);
    t_req(&srv, "POST", "{\"content\":\"a2\"}", &r, "/v1/memory_stores/%s/memories/%s", st, m1);
    tresp_free(&r);
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", st, m2);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories", st);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions", st);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", st);
    tresp_free(&r);
    t_req(&srv, "POST", NULL, &r, "/v1/memory_stores/%s/archive", st);
    tresp_free(&r);
    /* An unauthenticated request is still a request received under /v1. */
    char url[256];
    snprintf(url, sizeof url, "%s/v1/memory_stores", srv.url);
    t_http("GET", url, NULL, NULL, &r);
    tresp_free(&r);
    /* Requests no route takes share one count whatever their method, so
     * invented methods cannot grow the table. */
    t_req(&srv, "BREW", NULL, &r, "/v1/teapot");
    tresp_free(&r);
    t_req(&srv, "STEEP", NULL, &r, "/v1/teapot");
    tresp_free(&r);

    struct {
        const char *route;
        long n;
    } want[] = {
        {"POST /v1/memory_stores", 1},
        {"POST /v1/memory_stores/{id}/memories", 2},
        {"GET /v1/memory_stores/{id}/memories/{id}", 2},
        {"POST /v1/memory_stores/{id}/memories/{id}", 1},
        {"DELETE /v1/memory_stores/{id}/memories/{id}", 1},
        {"GET /v1/memory_stores/{id}/memories", 1},
        {"GET /v1/memory_stores/{id}/memory_versions", 1},
        {"GET /v1/memory_stores", 2},
        {"GET /v1/memory_stores/{id}", 1},
        {"POST /v1/memory_stores/{id}/archive", 1},
        {"DELETE /v1/memory_stores/{id}", 0},
        {"other", 2},
        {"BREW other", 0},
    };
    t_admin(&srv, "GET", "/admin/stats", NULL, &r);
    T_ASSERT_STATUS(&r, 200);
    long sum = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(tj_get(r.json, "routes"), want[i].route);
        long got = cJSON_IsNumber(v) ? (long)v->valuedouble : 0;
        cr_expect_eq(got, want[i].n, "%s: %ld, want %ld (%s)", want[i].route, got, want[i].n,
                     r.body);
        sum += want[i].n;
    }
    cr_expect_eq(tj_num(r.json, "total"), (double)sum, "total: %s", r.body);
    cr_expect_eq(tj_num(r.json, "writes"), 6.0, "writes (POST+DELETE): %s", r.body);
    tresp_free(&r);
    cr_expect_eq(t_route_count(&srv, "GET /v1/memory_stores/{id}"), 1,
                 "admin requests must not count");

    t_admin(&srv, "POST", "/admin/stats/reset", NULL, &r);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    t_admin(&srv, "GET", "/admin/stats", NULL, &r);
    cr_expect_eq(tj_num(r.json, "total"), 0, "after reset: %s", r.body);
    cr_expect_eq(tj_num(r.json, "writes"), 0, "after reset: %s", r.body);
    tresp_free(&r);
    free(st);
    free(m1);
    free(m2);
}

Test(admin, fault_429_then_normal_service)
{
    add_fault("{\"action\":\"status\",\"status\":429,\"retry_after\":2}");
    struct tresp r;
    t_api(&srv, "POST", "/v1/memory_stores", "{\"name\":\"limited\"}", &r);
    T_EXPECT_ERROR(&r, 429, "rate_limit_error");
    cr_expect_str_eq(r.retry_after, "2", "retry-after header");
    tresp_free(&r);
    cr_expect_eq(store_count(), 0, "a faulted write must not touch state");
    t_api(&srv, "POST", "/v1/memory_stores", "{\"name\":\"ok\"}", &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    cr_expect_eq(store_count(), 1);
    cr_expect_eq(t_route_count(&srv, "POST /v1/memory_stores"), 2, "faulted requests count");

    add_fault("{\"action\":\"status\",\"status\":429,\"retry_after_ms\":150}");
    t_api(&srv, "GET", "/v1/memory_stores", NULL, &r);
    T_EXPECT_ERROR(&r, 429, "rate_limit_error");
    cr_expect_str_eq(r.retry_after_ms, "150", "retry-after-ms header");
    tresp_free(&r);
}

Test(admin, faults_500_529_and_count)
{
    add_fault("{\"action\":\"status\",\"status\":500,\"count\":2}");
    add_fault("{\"action\":\"status\",\"status\":529}");
    const struct {
        long status;
        const char *type;
    } want[] = {{500, "api_error"}, {500, "api_error"}, {529, "overloaded_error"}, {200, NULL}};
    for (int i = 0; i < 4; i++) {
        struct tresp r;
        t_api(&srv, "POST", "/v1/memory_stores", "{\"name\":\"x\"}", &r);
        if (want[i].type)
            T_EXPECT_ERROR(&r, want[i].status, want[i].type);
        else
            T_EXPECT_STATUS(&r, 200);
        tresp_free(&r);
    }
    cr_expect_eq(store_count(), 1, "only the unfaulted create may land");
}

Test(admin, count_zero_lasts_until_cleared)
{
    add_fault("{\"action\":\"status\",\"status\":500,\"count\":0,\"method\":\"GET\"}");
    for (int i = 0; i < 4; i++) {
        struct tresp r;
        t_api(&srv, "GET", "/v1/memory_stores", NULL, &r);
        T_EXPECT_ERROR(&r, 500, "api_error");
        tresp_free(&r);
    }
    struct tresp r;
    t_admin(&srv, "DELETE", "/admin/faults", NULL, &r);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    t_api(&srv, "GET", "/v1/memory_stores", NULL, &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
}

Test(admin, method_and_path_filters)
{
    char *st = t_create_store(&srv, "s");
    cr_assert_not_null(st);
    add_fault("{\"action\":\"status\",\"status\":500,\"count\":0,\"method\":\"POST\","
              "\"path\":\"/v1/memory_stores/*/memories\"}");
    struct tresp r;
    /* Not matching: other method, other path. */
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories", st);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "POST", "{\"name\":\"t\"}", &r, "/v1/memory_stores");
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    /* The query string is not part of the matched path. */
    for (int i = 0; i < 2; i++) {
        t_req(&srv, "POST", "{\"path\":\"/a\",\"content\":\"a\"}", &r,
              i ? "/v1/memory_stores/%s/memories?view=full" : "/v1/memory_stores/%s/memories", st);
        T_EXPECT_ERROR(&r, 500, "api_error");
        tresp_free(&r);
    }
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories", st);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 0, "faulted creates landed");
    tresp_free(&r);
    free(st);
}

Test(admin, query_filter)
{
    char *st = t_create_store(&srv, "s");
    cr_assert_not_null(st);
    add_fault("{\"action\":\"status\",\"status\":503,\"count\":0,\"method\":\"GET\","
              "\"path\":\"/v1/memory_stores/*/memories\",\"query\":\"view=full\"}");
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?view=basic", st);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories", st);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?limit=20&view=full", st);
    T_EXPECT_ERROR(&r, 503, "api_error");
    tresp_free(&r);
    free(st);
}

Test(admin, first_matching_fault_wins)
{
    add_fault("{\"action\":\"status\",\"status\":529,\"method\":\"DELETE\"}");
    add_fault("{\"action\":\"status\",\"status\":500}");
    struct tresp r;
    /* A GET skips the DELETE-only fault and takes the catch-all. */
    t_api(&srv, "GET", "/v1/memory_stores", NULL, &r);
    T_EXPECT_ERROR(&r, 500, "api_error");
    tresp_free(&r);
    t_api(&srv, "DELETE", "/v1/memory_stores/memstore_x", NULL, &r);
    T_EXPECT_ERROR(&r, 529, "overloaded_error");
    tresp_free(&r);
    t_api(&srv, "DELETE", "/v1/memory_stores/memstore_x", NULL, &r);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
}

Test(admin, latency_then_normal)
{
    /* 2 s: far above what a loaded machine adds to the next request,
     * which must not wait for it. */
    add_fault("{\"action\":\"latency\",\"latency_ms\":2000}");
    struct tresp r;
    long t0 = now_ms();
    t_api(&srv, "POST", "/v1/memory_stores", "{\"name\":\"slow\"}", &r);
    long dt = now_ms() - t0;
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    cr_expect_geq(dt, 1980, "the request took %ld ms, want >= 2000", dt);
    t0 = now_ms();
    t_api(&srv, "GET", "/v1/memory_stores", NULL, &r);
    dt = now_ms() - t0;
    T_EXPECT_STATUS(&r, 200);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 1);
    tresp_free(&r);
    cr_expect_lt(dt, 1500, "a latency fault of count 1 must be used up (took %ld ms)", dt);
}

Test(admin, drop_after_commit)
{
    char *st = t_create_store(&srv, "s");
    cr_assert_not_null(st);
    add_fault("{\"action\":\"drop_after_commit\",\"method\":\"POST\"}");
    struct tresp r;
    /* A new connection per request: libcurl would silently resend a
     * request whose reused connection closed without an answer. */
    t_http_fresh(true);
    char url[256];
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories", st);
    int rc = t_api(&srv, "POST", url, "{\"path\":\"/lost-answer.md\",\"content\":\"kept\"}", &r);
    cr_expect_lt(rc, 0, "the client must see a transport error, got HTTP %ld", r.status);
    if (rc == 0)
        tresp_free(&r);

    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories?view=full", st);
    T_ASSERT_STATUS(&r, 200);
    const cJSON *first = cJSON_GetArrayItem(tj_get(r.json, "data"), 0);
    cr_expect_str_eq(tj_str(first, "path") ?: "(none)", "/lost-answer.md",
                     "the write must be committed: %s", r.body);
    cr_expect_str_eq(tj_str(first, "content") ?: "(none)", "kept");
    char *mid = strdup(tj_str(first, "id") ?: "");
    tresp_free(&r);

    /* Also for an update; and afterwards the service is normal. */
    add_fault("{\"action\":\"drop_after_commit\",\"method\":\"POST\",\"path\":\"/v1/memory_stores/*/memories/*\"}");
    rc = (int)t_req(&srv, "POST", "{\"content\":\"v2\"}", &r, "/v1/memory_stores/%s/memories/%s",
                    st, mid);
    cr_expect_lt(rc, 0, "update: the client must see a transport error");
    if (rc >= 0)
        tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", st, mid);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "", "v2");
    tresp_free(&r);
    t_http_fresh(false);
    t_req(&srv, "POST", "{\"content\":\"v3\"}", &r, "/v1/memory_stores/%s/memories/%s", st, mid);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    free(mid);
    free(st);
}

Test(admin, bad_fault_bodies)
{
    const char *bad[] = {"{", "{\"action\":\"explode\"}", "{\"action\":\"status\",\"status\":\"x\"}",
                         "{\"action\":\"pages\",\"items\":3,\"malformed\":\"yes\"}"};
    for (int i = 0; i < 4; i++) {
        struct tresp r;
        t_admin(&srv, "POST", "/admin/faults", bad[i], &r);
        cr_expect_eq(r.status, 400, "fault body %s: %ld", bad[i], r.status);
        tresp_free(&r);
    }
    /* None of them became active: the stores' list and a memories list
     * (what a pages fault acts on) are answered as they are. */
    cr_expect_eq(store_count(), 0);
    char *st = t_create_store(&srv, "s");
    cr_assert_not_null(st);
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories", st);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 0, "%s", r.body);
    tresp_free(&r);
    free(st);
}

/* A fault is used up only by a request it acts on: a pages fault by a
 * memories list, a drop_after_commit fault by a request that is served.
 * Before, the store's GET used up the pages fault (the list after it was
 * normal), and a request refused for its key used up the drop (the next
 * write was answered). */
Test(admin, pages_and_drop_faults_wait_for_a_request_they_act_on)
{
    char *st = t_create_store(&srv, "s");
    cr_assert_not_null(st);
    add_fault("{\"action\":\"pages\",\"items\":3}");
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", st);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories", st);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 3, "not the made-up page: %s",
                 r.body);
    tresp_free(&r);

    add_fault("{\"action\":\"drop_after_commit\",\"method\":\"POST\"}");
    char url[300];
    snprintf(url, sizeof(url), "%s/v1/memory_stores/%s/memories", srv.url, st);
    const char *const bad[] = {"x-api-key: not-the-key",
                               "anthropic-beta: agent-memory-2026-07-22",
                               "content-type: application/json", NULL};
    t_http_fresh(true);
    cr_assert_eq(t_http("POST", url, "{\"path\":\"/a.md\",\"content\":\"a\"}", bad, &r), 0);
    T_EXPECT_STATUS(&r, 401);
    tresp_free(&r);
    snprintf(url, sizeof(url), "/v1/memory_stores/%s/memories", st);
    int rc = t_api(&srv, "POST", url, "{\"path\":\"/b.md\",\"content\":\"b\"}", &r);
    cr_expect_lt(rc, 0, "the served write was answered (HTTP %ld): the fault was used up",
                 r.status);
    if (rc == 0)
        tresp_free(&r);
    t_http_fresh(false);
    free(st);
}
