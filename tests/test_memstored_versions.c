/* test_memstored_versions.c - memstored's memory versions (A.4, A.8):
 * the operation recorded by each write, newest-first order, no version for
 * a no-op, retrieve views, created_by, filters, redaction (what it clears,
 * the head-of-a-live-memory refusal, idempotence) and versions outliving a
 * deleted memory.  One memstored per test, started in .init and stopped by
 * PID in .fini. */
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
    store = t_create_store(&srv, "versions");
    cr_assert_not_null(store);
}

static void down(void)
{
    msd_stop(&srv);
    free(store);
    store = NULL;
}

TestSuite(versions, .init = up, .fini = down, .timeout = 30);

/* All versions matching query q (e.g. "memory_id=mem_x"), newest first as
 * the server returns them.  Caller deletes. */
static cJSON *versions(const char *q)
{
    char url[512];
    long err;
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memory_versions?%s", store, q);
    cJSON *all = t_list_all(&srv, url, NULL, &err);
    cr_assert_not_null(all, "versions %s failed: %ld", q, err);
    return all;
}

static void expected_key_id(char out[64], const char *key)
{
    snprintf(out, 64, "apikey_%.16s", t_sha(key));
}

/* Create, update, rename, delete one memory; returns its id. */
static char *lifecycle(void)
{
    struct tresp r;
    char *id = t_create_memory(&srv, store, "/v.md", "one");
    cr_assert_not_null(id);
    t_req(&srv, "POST", "{\"content\":\"two\"}", &r, "/v1/memory_stores/%s/memories/%s", store, id);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "POST", "{\"path\":\"/w.md\"}", &r, "/v1/memory_stores/%s/memories/%s", store, id);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    return id;
}

Test(versions, operations_newest_first_and_outlive_the_memory)
{
    char *id = lifecycle();
    char q[128];
    snprintf(q, sizeof q, "memory_id=%s", id);
    cJSON *all = versions(q);
    cr_assert_eq(cJSON_GetArraySize(all), 4, "create+update+rename+delete = 4 versions, got %d",
                 cJSON_GetArraySize(all));
    static const struct {
        const char *op, *path, *content;
    } want[] = {{"deleted", "/w.md", NULL}, {"modified", "/w.md", "two"},
                {"modified", "/v.md", "two"}, {"created", "/v.md", "one"}};
    char key_id[64];
    expected_key_id(key_id, "test-key");
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetArrayItem(all, i);
        cr_expect_str_eq(tj_str(v, "type") ?: "", "memory_version");
        cr_expect(strncmp(tj_str(v, "id") ?: "", "memver_", 7) == 0);
        cr_expect_str_eq(tj_str(v, "operation") ?: "(none)", want[i].op, "version %d", i);
        cr_expect_str_eq(tj_str(v, "path") ?: "(null)", want[i].path, "version %d path", i);
        cr_expect_str_eq(tj_str(v, "memory_id") ?: "", id);
        cr_expect_str_eq(tj_str(v, "memory_store_id") ?: "", store);
        cr_expect(tj_is_null(v, "content"), "list defaults to basic (version %d)", i);
        cr_expect_str_eq(tj_str(v, "created_by.type") ?: "(none)", "api_actor");
        cr_expect_str_eq(tj_str(v, "created_by.api_key_id") ?: "(none)", key_id);
        cr_expect(tj_is_null(v, "redacted_at"), "version %d", i);
        if (want[i].content) {
            cr_expect_str_eq(tj_str(v, "content_sha256") ?: "(null)", t_sha(want[i].content),
                             "version %d sha", i);
            cr_expect_eq(tj_num(v, "content_size_bytes"), (double)strlen(want[i].content));
        } else {
            cr_expect(tj_is_null(v, "content_sha256"), "deleted version has no sha");
            cr_expect(tj_is_null(v, "content_size_bytes"), "deleted version has no size");
        }
    }
    /* created_at never increases down the list. */
    for (int i = 1; i < 4; i++)
        cr_expect(strcmp(tj_str(cJSON_GetArrayItem(all, i - 1), "created_at") ?: "",
                         tj_str(cJSON_GetArrayItem(all, i), "created_at") ?: "") >= 0,
                  "not newest first at %d", i);

    /* Retrieve the created version: full by default, basic on request. */
    char vid[80];
    snprintf(vid, sizeof vid, "%s", tj_str(cJSON_GetArrayItem(all, 3), "id") ?: "");
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions/%s", store, vid);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", "one");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions/%s?view=basic", store, vid);
    T_ASSERT_STATUS(&r, 200);
    cr_expect(tj_is_null(r.json, "content"));
    cr_expect_str_eq(tj_str(r.json, "content_sha256") ?: "(null)", t_sha("one"));
    tresp_free(&r);
    cJSON_Delete(all);

    /* view=full on the list: contents present, limit clamped. */
    all = versions("view=full&limit=100");
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(all, 1), "content") ?: "(null)", "two");
    cJSON_Delete(all);
    free(id);
}

Test(versions, filters_and_paging)
{
    char *a = lifecycle();
    char *b = t_create_memory(&srv, store, "/b.md", "b");
    cr_assert_not_null(b);
    cJSON *all = versions("operation=created");
    cr_expect_eq(cJSON_GetArraySize(all), 2);
    const cJSON *it;
    cJSON_ArrayForEach(it, all)
        cr_expect_str_eq(tj_str(it, "operation") ?: "", "created");
    cJSON_Delete(all);
    all = versions("operation=deleted");
    cr_expect_eq(cJSON_GetArraySize(all), 1);
    cJSON_Delete(all);

    char q[128], key_id[64];
    expected_key_id(key_id, "test-key");
    snprintf(q, sizeof q, "api_key_id=%s", key_id);
    all = versions(q);
    cr_expect_eq(cJSON_GetArraySize(all), 5);
    cJSON_Delete(all);
    all = versions("api_key_id=apikey_0000000000000000");
    cr_expect_eq(cJSON_GetArraySize(all), 0);
    cJSON_Delete(all);

    /* Every version once across pages of 2, newest first overall. */
    int pages = 0;
    long err;
    char url[256];
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memory_versions?limit=2", store);
    all = t_list_all(&srv, url, &pages, &err);
    cr_assert_not_null(all);
    cr_expect_eq(cJSON_GetArraySize(all), 5);
    cr_expect_eq(pages, 3);
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(all, 0), "memory_id") ?: "", b,
                     "newest version first");
    cJSON_Delete(all);

    struct tresp r;
    const char *bad[] = {"operation=bogus", "limit=0", "limit=101", "view=bogus"};
    for (size_t i = 0; i < 4; i++) {
        t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions?%s", store, bad[i]);
        T_EXPECT_ERROR(&r, 400, "invalid_request_error");
        tresp_free(&r);
    }
    free(a);
    free(b);
}

Test(versions, noop_update_adds_no_version)
{
    char *id = t_create_memory(&srv, store, "/n.md", "same");
    cr_assert_not_null(id);
    struct tresp r;
    char body[256];
    snprintf(body, sizeof body,
             "{\"content\":\"same\",\"path\":\"/n.md\",\"precondition\":{\"type\":\"content_sha256\","
             "\"content_sha256\":\"%s\"}}",
             t_sha("same"));
    const char *noops[] = {"{\"content\":\"same\"}", "{\"path\":\"/n.md\"}", "{}", body};
    for (int i = 0; i < 4; i++) {
        t_req(&srv, "POST", noops[i], &r, "/v1/memory_stores/%s/memories/%s", store, id);
        T_EXPECT_STATUS(&r, 200);
        tresp_free(&r);
    }
    char q[128];
    snprintf(q, sizeof q, "memory_id=%s", id);
    cJSON *all = versions(q);
    cr_expect_eq(cJSON_GetArraySize(all), 1, "no-op updates added versions");
    cJSON_Delete(all);
    free(id);
}

Test(versions, redact_clears_and_is_idempotent)
{
    char *id = t_create_memory(&srv, store, "/secret.md", "password=hunter2");
    cr_assert_not_null(id);
    struct tresp r;
    t_req(&srv, "POST", "{\"content\":\"password=<removed>\"}", &r,
          "/v1/memory_stores/%s/memories/%s", store, id);
    T_ASSERT_STATUS(&r, 200);
    char head[80];
    snprintf(head, sizeof head, "%s", tj_str(r.json, "memory_version_id") ?: "");
    tresp_free(&r);

    char q[128];
    snprintf(q, sizeof q, "memory_id=%s&operation=created", id);
    cJSON *all = versions(q);
    cr_assert_eq(cJSON_GetArraySize(all), 1);
    char old[80], created_at[64];
    snprintf(old, sizeof old, "%s", tj_str(cJSON_GetArrayItem(all, 0), "id") ?: "");
    snprintf(created_at, sizeof created_at, "%s",
             tj_str(cJSON_GetArrayItem(all, 0), "created_at") ?: "");
    cJSON_Delete(all);

    /* The head of a live memory cannot be redacted. */
    t_req(&srv, "POST", NULL, &r, "/v1/memory_stores/%s/memory_versions/%s/redact", store, head);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions/%s", store, head);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", "password=<removed>");
    cr_expect(tj_is_null(r.json, "redacted_at"));
    tresp_free(&r);

    /* An older one can (with an empty body or {}). */
    for (int round = 0; round < 2; round++) {
        t_req(&srv, "POST", round ? "{}" : NULL, &r,
              "/v1/memory_stores/%s/memory_versions/%s/redact", store, old);
        T_ASSERT_STATUS(&r, 200);
        cr_expect_str_eq(tj_str(r.json, "type") ?: "", "memory_version");
        cr_expect(tj_is_null(r.json, "content"), "%s", r.body);
        cr_expect(tj_is_null(r.json, "path"), "%s", r.body);
        cr_expect(tj_is_null(r.json, "content_sha256"), "%s", r.body);
        cr_expect(tj_is_null(r.json, "content_size_bytes"), "%s", r.body);
        cr_expect_not_null(tj_str(r.json, "redacted_at"), "%s", r.body);
        cr_expect(cJSON_IsObject(tj_get(r.json, "redacted_by")), "redacted_by: %s", r.body);
        cr_expect_str_eq(tj_str(r.json, "operation") ?: "", "created", "operation kept");
        cr_expect_str_eq(tj_str(r.json, "memory_id") ?: "", id, "memory_id kept");
        cr_expect_str_eq(tj_str(r.json, "created_at") ?: "", created_at, "created_at kept");
        cr_expect_str_eq(tj_str(r.json, "created_by.type") ?: "", "api_actor", "created_by kept");
        tresp_free(&r);
    }
    /* Retrieval still 200 and still redacted; the memory is untouched. */
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions/%s", store, old);
    T_EXPECT_STATUS(&r, 200);
    cr_expect(tj_is_null(r.json, "content"));
    cr_expect_not_null(tj_str(r.json, "redacted_at"));
    cr_expect(r.body && !strstr(r.body, "hunter2"), "redacted content leaked: %s", r.body);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", "password=<removed>");
    tresp_free(&r);
    all = versions("view=full&limit=20");
    char *dump = cJSON_PrintUnformatted(all);
    cr_expect(dump && !strstr(dump, "hunter2"), "redacted content leaked in the list");
    free(dump);
    cJSON_Delete(all);

    /* After the memory is deleted its last content version may go too. */
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "POST", NULL, &r, "/v1/memory_stores/%s/memory_versions/%s/redact", store, head);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    free(id);
}

Test(versions, unknown_ids)
{
    char *id = t_create_memory(&srv, store, "/x.md", "x");
    char *other = t_create_store(&srv, "other");
    char q[128];
    snprintf(q, sizeof q, "memory_id=%s", id);
    cJSON *all = versions(q);
    char vid[80];
    snprintf(vid, sizeof vid, "%s", tj_str(cJSON_GetArrayItem(all, 0), "id") ?: "");
    cJSON_Delete(all);

    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions/memver_nope", store);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "POST", NULL, &r, "/v1/memory_stores/%s/memory_versions/memver_nope/redact", store);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions/%s", other, vid);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/memstore_nope/memory_versions");
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    /* A memory_id filter naming nothing is an empty list, not an error. */
    all = versions("memory_id=mem_nope");
    cr_expect_eq(cJSON_GetArraySize(all), 0);
    cJSON_Delete(all);
    free(id);
    free(other);
}

Test(versions, paging_is_stable_under_new_versions_and_time_filters)
{
    char *id = t_create_memory(&srv, store, "/p.md", "0");
    cr_assert_not_null(id);
    for (int i = 1; i < 8; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"content\":\"%d\"}", i);
        struct tresp r;
        t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s/memories/%s", store, id);
        T_ASSERT_STATUS(&r, 200);
        tresp_free(&r);
    }
    /* 8 versions; page 1 of 3, then 2 more writes, then page 2. */
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions?limit=3&view=full", store);
    T_ASSERT_STATUS(&r, 200);
    char cursor[512];
    snprintf(cursor, sizeof cursor, "%s", tj_str(r.json, "next_page") ?: "");
    cr_assert(cursor[0], "next_page missing: %s", r.body);
    tresp_free(&r);
    t_req(&srv, "POST", "{\"content\":\"8\"}", &r, "/v1/memory_stores/%s/memories/%s", store, id);
    tresp_free(&r);
    t_req(&srv, "POST", "{\"content\":\"9\"}", &r, "/v1/memory_stores/%s/memories/%s", store, id);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions?limit=3&view=full&page=%s",
          store, cursor);
    T_ASSERT_STATUS(&r, 200);
    char got[64] = "";
    size_t o = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, tj_get(r.json, "data"))
        o += (size_t)snprintf(got + o, sizeof got - o, "%s", tj_str(it, "content") ?: "?");
    cr_expect_str_eq(got, "432", "page 2 after two new versions: %s", r.body);
    tresp_free(&r);
    cJSON *all;

    /* created_at filters are inclusive: cut at the version holding "4". */
    char mid_time[64] = "";
    all = versions("view=full&limit=20");
    cJSON_ArrayForEach(it, all) if (strcmp(tj_str(it, "content") ?: "", "4") == 0)
        snprintf(mid_time, sizeof mid_time, "%s", tj_str(it, "created_at") ?: "");
    cJSON_Delete(all);
    cr_assert(mid_time[0], "no version with content 4");
    char q[160];
    snprintf(q, sizeof q, "view=full&created_at%%5Blte%%5D=%s", mid_time);
    all = versions(q);
    o = 0;
    got[0] = '\0';
    cJSON_ArrayForEach(it, all)
        o += (size_t)snprintf(got + o, sizeof got - o, "%s", tj_str(it, "content") ?: "?");
    cr_expect_str_eq(got, "43210", "created_at[lte]=%s", mid_time);
    cJSON_Delete(all);
    snprintf(q, sizeof q, "view=full&created_at%%5Bgte%%5D=%s", mid_time);
    all = versions(q);
    o = 0;
    got[0] = '\0';
    cJSON_ArrayForEach(it, all)
        o += (size_t)snprintf(got + o, sizeof got - o, "%s", tj_str(it, "content") ?: "?");
    cr_expect_str_eq(got, "987654", "created_at[gte]=%s", mid_time);
    cJSON_Delete(all);
    free(id);
}

/* POST /admin/clock for the versions written next. */
static void clock_set(const char *body)
{
    struct tresp r;
    cr_assert_eq(t_admin(&srv, "POST", "/admin/clock", body, &r), 0);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
}

/* The list is newest first by the clock that stamped each version, as the
 * service's: a version stamped earlier comes after those stamped later
 * whenever it was written, and versions of one millisecond come in the
 * order of their ids, not the order of their writing; a cursor goes on
 * from its row in that order.  Before, the list was in writing order. */
Test(versions, newest_first_is_the_clocks_order_not_the_writings)
{
    char *id = t_create_memory(&srv, store, "/c.md", "a");
    cr_assert_not_null(id);
    clock_set("{\"offset_ms\":-60000}");
    struct tresp r;
    t_req(&srv, "POST", "{\"content\":\"late\"}", &r, "/v1/memory_stores/%s/memories/%s", store,
          id);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    /* Frozen a second ahead: the creation's stamp can share the frozen
     * millisecond when both fall in one (then its place among the frozen
     * six is its id's, not last but one). */
    clock_set("{\"offset_ms\":1000,\"freeze\":true}");
    for (int i = 0; i < 6; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"content\":\"f%d\"}", i);
        t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s/memories/%s", store, id);
        T_ASSERT_STATUS(&r, 200);
        tresp_free(&r);
    }
    clock_set("{}");
    /* Read two at a time: the cursors must follow the same order. */
    char got[20][64], cursor[512] = "";
    int n = 0;
    do {
        if (cursor[0])
            t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions?limit=2&view=full"
                  "&page=%s", store, cursor);
        else
            t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions?limit=2&view=full",
                  store);
        T_ASSERT_STATUS(&r, 200);
        const cJSON *it;
        cJSON_ArrayForEach(it, tj_get(r.json, "data"))
        {
            cr_assert_lt(n, 20);
            snprintf(got[n], sizeof got[n], "%s|%s|%s", tj_str(it, "created_at") ?: "",
                     tj_str(it, "id") ?: "", tj_str(it, "content") ?: "");
            n++;
        }
        snprintf(cursor, sizeof cursor, "%s", tj_str(r.json, "next_page") ?: "");
        tresp_free(&r);
    } while (cursor[0]);
    cr_expect_eq(n, 8, "%d versions", n);
    for (int i = 1; i < n; i++)
        cr_expect_gt(strcmp(got[i - 1], got[i]), 0, "not newest first by (created_at, id): "
                     "%s before %s", got[i - 1], got[i]);
    /* The one stamped a minute early is last, after the creation written
     * before it. */
    cr_expect(n == 8 && strstr(got[6], "|a") && strstr(got[7], "|late"), "%s / %s", got[6],
              got[7]);
    free(id);
}
