/* test_memstored_stores.c - memstored's memory-store endpoints (A.2):
 * create, retrieve, list (order, paging, include_archived, created_at
 * filters), update (metadata patch), archive (one-way, idempotent, what an
 * archived store still allows) and delete (cascade).  One memstored per
 * test, started in .init and stopped by PID in .fini. */
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

TestSuite(stores, .init = up, .fini = down, .timeout = 30);

static long count_stores(bool include_archived)
{
    long err = 0;
    cJSON *all = t_list_all(&srv, include_archived ? "/v1/memory_stores?include_archived=true"
                                                   : "/v1/memory_stores",
                            NULL, &err);
    cr_assert_not_null(all, "listing stores failed: %ld", err);
    long n = cJSON_GetArraySize(all);
    cJSON_Delete(all);
    return n;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

Test(stores, create_returns_the_full_object)
{
    struct tresp r;
    t_api(&srv, "POST", "/v1/memory_stores",
          "{\"name\":\"User Preferences\",\"description\":\"per-user\",\"metadata\":{\"team\":\"a\"}}",
          &r);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "type"), "memory_store");
    cr_expect(strncmp(tj_str(r.json, "id") ?: "", "memstore_", 9) == 0, "id %s", r.body);
    cr_expect_str_eq(tj_str(r.json, "name"), "User Preferences");
    cr_expect_str_eq(tj_str(r.json, "description"), "per-user");
    cr_expect_str_eq(tj_str(r.json, "metadata.team"), "a");
    cr_expect(tj_is_null(r.json, "archived_at"), "archived_at must be null: %s", r.body);
    cr_expect_not_null(tj_str(r.json, "created_at"));
    cr_expect_not_null(tj_str(r.json, "updated_at"));
    cr_expect(strncmp(r.request_id, "req_", 4) == 0, "request-id header: '%s'", r.request_id);
    char *id = t_id(&r);
    tresp_free(&r);

    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", id);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "id"), id);
    cr_expect_str_eq(tj_str(r.json, "name"), "User Preferences");
    cr_expect_str_eq(tj_str(r.json, "metadata.team"), "a");
    tresp_free(&r);
    free(id);
}

Test(stores, create_defaults_description_and_metadata)
{
    struct tresp r;
    t_api(&srv, "POST", "/v1/memory_stores", "{\"name\":\"n\"}", &r);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "description"), "", "description must be \"\": %s", r.body);
    const cJSON *md = tj_get(r.json, "metadata");
    cr_expect(cJSON_IsObject(md) && cJSON_GetArraySize(md) == 0, "metadata must be {}: %s",
              r.body);
    tresp_free(&r);
}

Test(stores, create_validation)
{
    char name255[300], name256[300], desc1025[1100], key65[80], val513[600];
    memset(name255, 'n', 255), name255[255] = '\0';
    memset(name256, 'n', 256), name256[256] = '\0';
    memset(desc1025, 'd', 1025), desc1025[1025] = '\0';
    memset(key65, 'k', 65), key65[65] = '\0';
    memset(val513, 'v', 513), val513[513] = '\0';

    char b17[1024];
    size_t o = (size_t)snprintf(b17, sizeof b17, "{\"name\":\"x\",\"metadata\":{");
    for (int i = 0; i < 17; i++)
        o += (size_t)snprintf(b17 + o, sizeof b17 - o, "%s\"k%d\":\"v\"", i ? "," : "", i);
    snprintf(b17 + o, sizeof b17 - o, "}}");

    char bad[8][2048];
    snprintf(bad[0], sizeof bad[0], "{}");
    snprintf(bad[1], sizeof bad[1], "{\"name\":\"\"}");
    snprintf(bad[2], sizeof bad[2], "{\"name\":\"%s\"}", name256);
    snprintf(bad[3], sizeof bad[3], "{\"name\":\"a\\nb\"}");
    snprintf(bad[4], sizeof bad[4], "{\"name\":\"x\",\"description\":\"%s\"}", desc1025);
    snprintf(bad[5], sizeof bad[5], "{\"name\":\"x\",\"metadata\":{\"%s\":\"v\"}}", key65);
    snprintf(bad[6], sizeof bad[6], "{\"name\":\"x\",\"metadata\":{\"k\":\"%s\"}}", val513);
    snprintf(bad[7], sizeof bad[7], "{\"name\":\"x\",\"metadata\":{\"k\":5}}");
    for (int i = 0; i < 8; i++) {
        struct tresp r;
        t_api(&srv, "POST", "/v1/memory_stores", bad[i], &r);
        T_EXPECT_ERROR(&r, 400, "invalid_request_error");
        if (r.status != 400)
            cr_log_error("bad store body %d accepted: %.200s", i, bad[i]);
        tresp_free(&r);
    }
    struct tresp r;
    t_api(&srv, "POST", "/v1/memory_stores", b17, &r);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);
    cr_expect_eq(count_stores(true), 0, "refused creates must not leave stores behind");

    /* The boundaries themselves are fine: 255-char name, 16 pairs, 64-char
     * key, 512-char value, 1024-char description. */
    char ok[4096];
    key65[64] = '\0', val513[512] = '\0', desc1025[1024] = '\0';
    snprintf(ok, sizeof ok, "{\"name\":\"%s\",\"description\":\"%s\",\"metadata\":{\"%s\":\"%s\"}}",
             name255, desc1025, key65, val513);
    t_api(&srv, "POST", "/v1/memory_stores", ok, &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    o = (size_t)snprintf(b17, sizeof b17, "{\"name\":\"x\",\"metadata\":{");
    for (int i = 0; i < 16; i++)
        o += (size_t)snprintf(b17 + o, sizeof b17 - o, "%s\"k%d\":\"v\"", i ? "," : "", i);
    snprintf(b17 + o, sizeof b17 - o, "}}");
    t_api(&srv, "POST", "/v1/memory_stores", b17, &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    cr_expect_eq(count_stores(true), 2);
}

Test(stores, name_length_counts_characters)
{
    /* 255 two-byte characters (510 bytes) are 255 characters: fine. */
    char body[1200];
    for (int extra = 0; extra < 2; extra++) {
        size_t o = (size_t)snprintf(body, sizeof body, "{\"name\":\"");
        for (int i = 0; i < 255 + extra; i++)
            o += (size_t)snprintf(body + o, sizeof body - o, "\xc3\xa9");
        snprintf(body + o, sizeof body - o, "\"}");
        struct tresp r;
        t_api(&srv, "POST", "/v1/memory_stores", body, &r);
        if (extra)
            T_EXPECT_ERROR(&r, 400, "invalid_request_error");
        else
            T_EXPECT_STATUS(&r, 200);
        tresp_free(&r);
    }
}

Test(stores, retrieve_unknown_is_404)
{
    struct tresp r;
    t_api(&srv, "GET", "/v1/memory_stores/memstore_doesnotexist000000000000", NULL, &r);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_api(&srv, "POST", "/v1/memory_stores/memstore_doesnotexist000000000000",
          "{\"name\":\"x\"}", &r);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_api(&srv, "POST", "/v1/memory_stores/memstore_doesnotexist000000000000/archive", NULL, &r);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_api(&srv, "DELETE", "/v1/memory_stores/memstore_doesnotexist000000000000", NULL, &r);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
}

Test(stores, list_newest_first_and_paged)
{
    char *ids[7];
    for (int i = 0; i < 7; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        ids[i] = t_create_store(&srv, name);
        cr_assert_not_null(ids[i]);
    }
    int pages = 0;
    long err = 0;
    cJSON *all = t_list_all(&srv, "/v1/memory_stores?limit=3", &pages, &err);
    cr_assert_not_null(all, "list failed: %ld", err);
    cr_expect_eq(cJSON_GetArraySize(all), 7);
    cr_expect_eq(pages, 3, "7 stores at limit 3 make 3 pages, got %d", pages);
    /* Newest first: the reverse of creation order. */
    for (int i = 0; i < 7 && i < cJSON_GetArraySize(all); i++)
        cr_expect_str_eq(tj_str(cJSON_GetArrayItem(all, i), "id"), ids[6 - i],
                         "position %d holds the wrong store", i);
    cJSON_Delete(all);

    struct tresp r;
    t_api(&srv, "GET", "/v1/memory_stores", NULL, &r);
    T_ASSERT_STATUS(&r, 200);
    cr_expect(tj_is_null(r.json, "next_page"), "a complete page has next_page null: %s", r.body);
    tresp_free(&r);
    const char *bad_limits[] = {"0", "101", "-1", "abc", "1.5"};
    for (size_t i = 0; i < sizeof bad_limits / sizeof bad_limits[0]; i++) {
        t_req(&srv, "GET", NULL, &r, "/v1/memory_stores?limit=%s", bad_limits[i]);
        T_EXPECT_ERROR(&r, 400, "invalid_request_error");
        tresp_free(&r);
    }
    t_api(&srv, "GET", "/v1/memory_stores?limit=100", NULL, &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    for (int i = 0; i < 7; i++)
        free(ids[i]);
}

Test(stores, list_created_at_filters_are_inclusive)
{
    char *ids[3];
    char created[3][64];
    for (int i = 0; i < 3; i++) {
        struct tresp r;
        char body[64];
        snprintf(body, sizeof body, "{\"name\":\"t%d\"}", i);
        t_api(&srv, "POST", "/v1/memory_stores", body, &r);
        T_ASSERT_STATUS(&r, 200);
        ids[i] = t_id(&r);
        snprintf(created[i], sizeof created[i], "%s", tj_str(r.json, "created_at"));
        tresp_free(&r);
        sleep_ms(5);
    }
    cr_assert(strcmp(created[0], created[1]) < 0 && strcmp(created[1], created[2]) < 0,
              "created_at must increase: %s %s %s", created[0], created[1], created[2]);

    struct {
        const char *op;
        bool want[3];
    } rows[] = {{"gte", {false, true, true}}, {"lte", {true, true, false}}};
    for (size_t k = 0; k < 2; k++) {
        char q[256];
        snprintf(q, sizeof q, "/v1/memory_stores?created_at%%5B%s%%5D=%s", rows[k].op,
                 created[1]);
        long err;
        cJSON *all = t_list_all(&srv, q, NULL, &err);
        cr_assert_not_null(all, "%s failed: %ld", q, err);
        for (int i = 0; i < 3; i++) {
            bool seen = false;
            const cJSON *it;
            cJSON_ArrayForEach(it, all) seen |= strcmp(tj_str(it, "id") ?: "", ids[i]) == 0;
            cr_expect_eq(seen, rows[k].want[i], "created_at[%s]=%s: store %d seen=%d",
                         rows[k].op, created[1], i, seen);
        }
        cJSON_Delete(all);
    }
    struct tresp r;
    t_api(&srv, "GET", "/v1/memory_stores?created_at%5Bgte%5D=yesterday", NULL, &r);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);
    for (int i = 0; i < 3; i++)
        free(ids[i]);
}

Test(stores, update_and_metadata_patch)
{
    struct tresp r;
    t_api(&srv, "POST", "/v1/memory_stores",
          "{\"name\":\"old\",\"description\":\"d\",\"metadata\":{\"a\":\"1\",\"b\":\"2\",\"c\":\"3\"}}",
          &r);
    T_ASSERT_STATUS(&r, 200);
    char *id = t_id(&r);
    char updated0[64];
    snprintf(updated0, sizeof updated0, "%s", tj_str(r.json, "updated_at"));
    tresp_free(&r);
    sleep_ms(3);

    /* Upsert a, delete b, keep c, add d; rename. */
    t_req(&srv, "POST", "{\"name\":\"new\",\"metadata\":{\"a\":\"9\",\"b\":null,\"d\":\"4\"}}", &r,
          "/v1/memory_stores/%s", id);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "name"), "new");
    cr_expect_str_eq(tj_str(r.json, "description"), "d", "omitted description is kept");
    cr_expect_str_eq(tj_str(r.json, "metadata.a"), "9");
    cr_expect_null(tj_get(r.json, "metadata.b"), "null deletes the key: %s", r.body);
    cr_expect_str_eq(tj_str(r.json, "metadata.c"), "3");
    cr_expect_str_eq(tj_str(r.json, "metadata.d"), "4");
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "metadata")), 3);
    cr_expect_str_neq(tj_str(r.json, "updated_at"), updated0, "updated_at must change");
    tresp_free(&r);

    /* description "" clears; name null keeps. */
    t_req(&srv, "POST", "{\"name\":null,\"description\":\"\"}", &r, "/v1/memory_stores/%s", id);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "name"), "new");
    cr_expect_str_eq(tj_str(r.json, "description"), "");
    tresp_free(&r);

    /* A patch that would leave 17 pairs is refused and changes nothing. */
    char body[1024];
    size_t o = (size_t)snprintf(body, sizeof body, "{\"name\":\"nope\",\"metadata\":{");
    for (int i = 0; i < 14; i++)
        o += (size_t)snprintf(body + o, sizeof body - o, "%s\"x%d\":\"v\"", i ? "," : "", i);
    snprintf(body + o, sizeof body - o, "}}");
    t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s", id);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", id);
    cr_expect_str_eq(tj_str(r.json, "name"), "new", "a refused update must change nothing");
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "metadata")), 3);
    tresp_free(&r);

    /* 13 more make 16: allowed. */
    o = (size_t)snprintf(body, sizeof body, "{\"metadata\":{");
    for (int i = 0; i < 13; i++)
        o += (size_t)snprintf(body + o, sizeof body - o, "%s\"x%d\":\"v\"", i ? "," : "", i);
    snprintf(body + o, sizeof body - o, "}}");
    t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s", id);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "metadata")), 16);
    tresp_free(&r);

    t_req(&srv, "POST", "{\"name\":\"\"}", &r, "/v1/memory_stores/%s", id);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);
    free(id);
}

Test(stores, archive_is_one_way_and_idempotent)
{
    char *id = t_create_store(&srv, "arch");
    cr_assert_not_null(id);
    struct tresp r;
    t_req(&srv, "POST", NULL, &r, "/v1/memory_stores/%s/archive", id);
    T_ASSERT_STATUS(&r, 200);
    const char *at = tj_str(r.json, "archived_at");
    cr_assert_not_null(at, "archived_at must be set: %s", r.body);
    char first[64];
    snprintf(first, sizeof first, "%s", at);
    tresp_free(&r);

    /* Again (with the docs' "{}" body): 200, same archived_at. */
    t_req(&srv, "POST", "{}", &r, "/v1/memory_stores/%s/archive", id);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "archived_at") ?: "(null)", first);
    tresp_free(&r);

    /* Updating an archived store: 400; nothing clears archived_at. */
    t_req(&srv, "POST", "{\"name\":\"x\",\"archived_at\":null}", &r, "/v1/memory_stores/%s", id);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", id);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "archived_at") ?: "(null)", first);
    cr_expect_str_eq(tj_str(r.json, "name"), "arch");
    tresp_free(&r);
    free(id);
}

Test(stores, list_excludes_archived_unless_asked)
{
    char *live = t_create_store(&srv, "live");
    char *arch = t_create_store(&srv, "archived");
    struct tresp r;
    t_req(&srv, "POST", NULL, &r, "/v1/memory_stores/%s/archive", arch);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);

    const char *queries[] = {"/v1/memory_stores", "/v1/memory_stores?include_archived=false",
                             "/v1/memory_stores?include_archived=true"};
    for (int q = 0; q < 3; q++) {
        long err;
        cJSON *all = t_list_all(&srv, queries[q], NULL, &err);
        cr_assert_not_null(all);
        bool seen_live = false, seen_arch = false;
        const cJSON *it;
        cJSON_ArrayForEach(it, all)
        {
            seen_live |= strcmp(tj_str(it, "id") ?: "", live) == 0;
            seen_arch |= strcmp(tj_str(it, "id") ?: "", arch) == 0;
        }
        cr_expect(seen_live, "%s: live store missing", queries[q]);
        cr_expect_eq(seen_arch, q == 2, "%s: archived store seen=%d", queries[q], seen_arch);
        cJSON_Delete(all);
    }
    free(live);
    free(arch);
}

Test(stores, archived_store_allows_reads_deletes_and_redacts_only)
{
    char *st = t_create_store(&srv, "a");
    char *keep = t_create_memory(&srv, st, "/keep.md", "v1");
    char *gone = t_create_memory(&srv, st, "/gone.md", "x");
    cr_assert(st && keep && gone);
    struct tresp r;
    /* Give /keep.md a second version so its first is not the head. */
    t_req(&srv, "POST", "{\"content\":\"v2\"}", &r, "/v1/memory_stores/%s/memories/%s", st, keep);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions?memory_id=%s&operation=created",
          st, keep);
    T_ASSERT_STATUS(&r, 200);
    const char *v1 = tj_str(cJSON_GetArrayItem(tj_get(r.json, "data"), 0), "id");
    cr_assert_not_null(v1, "no created version: %s", r.body);
    char *v1id = strdup(v1);
    tresp_free(&r);

    t_req(&srv, "POST", NULL, &r, "/v1/memory_stores/%s/archive", st);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);

    t_req(&srv, "POST", "{\"path\":\"/new.md\",\"content\":\"n\"}", &r,
          "/v1/memory_stores/%s/memories", st);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);
    t_req(&srv, "POST", "{\"content\":\"v3\"}", &r, "/v1/memory_stores/%s/memories/%s", st, keep);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);
    t_req(&srv, "POST", "{\"path\":\"/renamed.md\"}", &r, "/v1/memory_stores/%s/memories/%s", st,
          keep);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);

    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", st, keep);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", "v2");
    cr_expect_str_eq(tj_str(r.json, "path") ?: "(null)", "/keep.md");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories", st);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 2);
    tresp_free(&r);

    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", st, gone);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "POST", NULL, &r, "/v1/memory_stores/%s/memory_versions/%s/redact", st, v1id);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_not_null(tj_str(r.json, "redacted_at"));
    tresp_free(&r);

    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s", st);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    free(v1id);
    free(st);
    free(keep);
    free(gone);
}

Test(stores, delete_cascades)
{
    char *st = t_create_store(&srv, "doomed");
    char *other = t_create_store(&srv, "survivor");
    char *mem = t_create_memory(&srv, st, "/a/b.md", "x");
    char *omem = t_create_memory(&srv, other, "/a/b.md", "y");
    cr_assert(st && other && mem && omem);

    struct tresp r;
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s", st);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "type"), "memory_store_deleted");
    cr_expect_str_eq(tj_str(r.json, "id"), st);
    tresp_free(&r);

    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", st);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", st, mem);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories", st);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions", st);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s", st);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);

    /* The other store is untouched. */
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", other, omem);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", "y");
    tresp_free(&r);
    cr_expect_eq(count_stores(true), 1);
    free(st);
    free(other);
    free(mem);
    free(omem);
}
