/* test_memstored_auth.c - memstored's authentication and header rules
 * (C.1, C.2, CONTRACTS.md): x-api-key and Authorization: Bearer, 401 for a
 * missing or wrong key, the anthropic-beta rule (exactly one of the two
 * memory betas), request-id on every answer, several keys (--api-key
 * repeated, MEMSTORED_API_KEYS) and the api_key_id each gets.  One
 * memstored per test, started in .init and stopped by PID in .fini. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msd.h"

static struct msd srv, m2; /* m2: the tests that need other server options */

static void up(void)
{
    int rc = msd_start(&srv, NULL);
    cr_assert_eq(rc, 0, "msd_start failed: %s", strerror(-rc));
}

static void down(void)
{
    msd_stop(&srv);
    msd_stop(&m2);
}

TestSuite(auth, .init = up, .fini = down, .timeout = 30);

/* GET /v1/memory_stores with exactly these headers. */
static void get_with(const char *const *h, struct tresp *r)
{
    char url[128];
    snprintf(url, sizeof url, "%s/v1/memory_stores", srv.url);
    int rc = t_http("GET", url, NULL, h, r);
    cr_assert_eq(rc, 0, "no answer: %d", rc);
}

#define BETA "anthropic-beta: agent-memory-2026-07-22"

Test(auth, api_key_in_either_header)
{
    struct {
        const char *label;
        const char *h[5];
        long status;
    } rows[] = {
        {"x-api-key", {"x-api-key: test-key", BETA, NULL}, 200},
        {"bearer", {"Authorization: Bearer test-key", BETA, NULL}, 200},
        {"bearer lower-case scheme header name", {"authorization: Bearer test-key", BETA, NULL},
         200},
        {"no key", {BETA, NULL}, 401},
        {"wrong x-api-key", {"x-api-key: wrong-key", BETA, NULL}, 401},
        {"wrong bearer", {"Authorization: Bearer wrong-key", BETA, NULL}, 401},
        {"empty x-api-key", {"x-api-key:", BETA, NULL}, 401},
        {"basic scheme", {"Authorization: Basic dGVzdC1rZXk6", BETA, NULL}, 401},
        {"bearer without token", {"Authorization: Bearer", BETA, NULL}, 401},
        {"key prefix only", {"x-api-key: test", BETA, NULL}, 401},
        {"key with suffix", {"x-api-key: test-key2", BETA, NULL}, 401},
        {"admin key is not an API key", {"x-api-key: admin-key", BETA, NULL}, 401},
        /* Either header may carry the key: a stale x-api-key beside a
         * valid Bearer token (a proxy's, ANTHROPIC_CUSTOM_HEADERS) is
         * accepted, and so is the reverse.  Before, x-api-key alone was
         * looked at when present: 401. */
        {"stale x-api-key, valid bearer",
         {"x-api-key: stale-key", "Authorization: Bearer test-key", BETA, NULL}, 200},
        {"valid x-api-key, stale bearer",
         {"x-api-key: test-key", "Authorization: Bearer stale-key", BETA, NULL}, 200},
        {"both stale", {"x-api-key: stale-key", "Authorization: Bearer stale", BETA, NULL}, 401},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct tresp r;
        get_with(rows[i].h, &r);
        if (rows[i].status == 200) {
            cr_expect_eq(r.status, 200, "%s: got %ld %s", rows[i].label, r.status, r.body);
        } else {
            const char *why = t_check_error(&r, 401, "authentication_error");
            cr_expect(why == NULL, "%s: %s: %s", rows[i].label, why ? why : "", r.body);
        }
        tresp_free(&r);
    }
}

Test(auth, unauthenticated_writes_change_nothing)
{
    char url[128];
    snprintf(url, sizeof url, "%s/v1/memory_stores", srv.url);
    const char *h[] = {"x-api-key: nope", BETA, NULL};
    struct tresp r;
    t_http("POST", url, "{\"name\":\"sneaky\"}", h, &r);
    T_EXPECT_ERROR(&r, 401, "authentication_error");
    tresp_free(&r);
    t_api(&srv, "GET", "/v1/memory_stores", NULL, &r);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 0, "%s", r.body);
    tresp_free(&r);
}

Test(auth, beta_header_rule)
{
    struct {
        const char *label;
        const char *h[5];
        long status;
    } rows[] = {
        {"agent-memory beta", {"x-api-key: test-key", "anthropic-beta: agent-memory-2026-07-22",
                               NULL},
         200},
        {"managed-agents beta",
         {"x-api-key: test-key", "anthropic-beta: managed-agents-2026-04-01", NULL}, 200},
        {"listed with others",
         {"x-api-key: test-key", "anthropic-beta: foo-2025-01-01,agent-memory-2026-07-22", NULL},
         200},
        {"listed with spaces",
         {"x-api-key: test-key", "anthropic-beta: foo-2025-01-01, managed-agents-2026-04-01",
          NULL},
         200},
        {"no beta", {"x-api-key: test-key", NULL}, 400},
        {"unrelated beta", {"x-api-key: test-key", "anthropic-beta: foo-2025-01-01", NULL}, 400},
        {"empty beta", {"x-api-key: test-key", "anthropic-beta:", NULL}, 400},
        {"both betas",
         {"x-api-key: test-key",
          "anthropic-beta: agent-memory-2026-07-22,managed-agents-2026-04-01", NULL},
         400},
        {"both betas, two headers",
         {"x-api-key: test-key", "anthropic-beta: agent-memory-2026-07-22",
          "anthropic-beta: managed-agents-2026-04-01"},
         400},
        {"near miss", {"x-api-key: test-key", "anthropic-beta: agent-memory-2026-07-2", NULL},
         400},
        {"SDK version header", {"Authorization: Bearer test-key", BETA,
                                "anthropic-version: 2026-10-21"},
         200},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct tresp r;
        get_with(rows[i].h, &r);
        if (rows[i].status == 200) {
            cr_expect_eq(r.status, 200, "%s: got %ld %s", rows[i].label, r.status, r.body);
        } else {
            const char *why = t_check_error(&r, 400, "invalid_request_error");
            cr_expect(why == NULL, "%s: %s: %s", rows[i].label, why ? why : "", r.body);
        }
        tresp_free(&r);
    }
}

Test(auth, request_id_on_every_answer)
{
    const char *seen[6] = {0};
    char ids[6][64];
    struct tresp r;
    int n = 0;
    const char *paths[] = {"/v1/memory_stores", "/v1/memory_stores/memstore_nope",
                           "/v1/memory_stores?limit=0"};
    for (int i = 0; i < 3; i++) {
        t_api(&srv, "GET", paths[i], NULL, &r);
        cr_expect(strncmp(r.request_id, "req_", 4) == 0, "%s: request-id '%s'", paths[i],
                  r.request_id);
        snprintf(ids[n], sizeof ids[n], "%s", r.request_id);
        seen[n] = ids[n];
        n++;
        tresp_free(&r);
    }
    const char *h[] = {BETA, NULL};
    get_with(h, &r); /* a 401 */
    cr_expect(strncmp(r.request_id, "req_", 4) == 0, "401: request-id '%s'", r.request_id);
    snprintf(ids[n], sizeof ids[n], "%s", r.request_id);
    seen[n] = ids[n];
    n++;
    tresp_free(&r);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            cr_expect_str_neq(seen[i], seen[j], "request ids must differ");
}

Test(auth, json_content_type)
{
    struct tresp r;
    t_api(&srv, "GET", "/v1/memory_stores", NULL, &r);
    cr_expect(strncmp(r.content_type, "application/json", 16) == 0, "content-type '%s'",
              r.content_type);
    tresp_free(&r);
    t_api(&srv, "GET", "/v1/memory_stores/memstore_nope", NULL, &r);
    cr_expect(strncmp(r.content_type, "application/json", 16) == 0, "error content-type '%s'",
              r.content_type);
    tresp_free(&r);
}

/* Versions written with key k carry api_key_id apikey_<16 hex of sha256(k)>. */
static void write_as(struct msd *m, const char *key, const char *store, const char *path)
{
    char url[256], hk[64];
    snprintf(url, sizeof url, "%s/v1/memory_stores/%s/memories", m->url, store);
    snprintf(hk, sizeof hk, "Authorization: Bearer %s", key);
    const char *h[] = {hk, BETA, NULL};
    char *body = tj_memory_body(path, "x");
    struct tresp r;
    t_http("POST", url, body, h, &r);
    cr_expect_eq(r.status, 200, "key %s: %ld %s", key, r.status, r.body);
    free(body);
    tresp_free(&r);
}

static void check_actor(struct msd *m, const char *store, const char *path, const char *key)
{
    char url[256], want[64];
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memory_versions?limit=100", store);
    long err;
    cJSON *all = t_list_all(m, url, NULL, &err);
    cr_assert_not_null(all);
    snprintf(want, sizeof want, "apikey_%.16s", t_sha(key));
    bool found = false;
    const cJSON *it;
    cJSON_ArrayForEach(it, all)
    {
        if (strcmp(tj_str(it, "path") ?: "", path) != 0)
            continue;
        found = true;
        cr_expect_str_eq(tj_str(it, "created_by.api_key_id") ?: "(none)", want, "%s", path);
    }
    cr_expect(found, "no version for %s", path);
    cJSON_Delete(all);
}

Test(auth, several_keys_on_the_command_line)
{
    const char *args[] = {"--api-key", "second-key", NULL};
    int rc = msd_start(&m2, args);
    cr_assert_eq(rc, 0);
    char *st = t_create_store(&m2, "s");
    cr_assert_not_null(st, "the default test key must still work");
    write_as(&m2, "second-key", st, "/second.md");
    write_as(&m2, "test-key", st, "/first.md");
    check_actor(&m2, st, "/second.md", "second-key");
    check_actor(&m2, st, "/first.md", "test-key");
    free(st);
}

Test(auth, keys_from_the_environment)
{
    const char *args[] = {"--db", "env.db", NULL};
    const char *env[] = {"MEMSTORED_API_KEYS=k1,k2", "MEMSTORED_ADMIN_KEY=adm", NULL};
    int rc = msd_start_raw(&m2, NULL, args, env);
    cr_assert_eq(rc, 0, "memstored with keys only in the env did not start");
    struct tresp r;
    char url[256];
    snprintf(url, sizeof url, "%s/v1/memory_stores", m2.url);
    for (int k = 0; k < 3; k++) {
        const char *keys[] = {"x-api-key: k1", "x-api-key: k2", "x-api-key: k3"};
        const char *h[] = {keys[k], BETA, NULL};
        t_http("GET", url, NULL, h, &r);
        cr_expect_eq(r.status, k < 2 ? 200 : 401, "%s: %ld", keys[k], r.status);
        tresp_free(&r);
    }
    snprintf(url, sizeof url, "%s/admin/stats", m2.url);
    const char *ha[] = {"x-admin-key: adm", NULL};
    t_http("GET", url, NULL, ha, &r);
    cr_expect_eq(r.status, 200, "admin key from MEMSTORED_ADMIN_KEY: %ld", r.status);
    tresp_free(&r);
}
