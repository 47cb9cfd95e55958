/* test_memstored_errors.c - bad input to memstored: malformed JSON, wrong
 * types, oversize content and bodies, invalid paths (B.1), invalid UTF-8
 * inside JSON strings, NUL in content, unknown ids and routes.  Each must
 * get a clear 4xx with the error envelope, the server must keep answering,
 * and nothing may change: the test compares a full snapshot (memories in
 * full view plus every version) before and after.  One memstored per test,
 * started in .init and stopped by PID in .fini. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msd.h"
#include "rules.h"

static struct msd srv;
static char *store, *mem;

static void up(void)
{
    int rc = msd_start(&srv, NULL);
    cr_assert_eq(rc, 0, "msd_start failed: %s", strerror(-rc));
    store = t_create_store(&srv, "errors");
    cr_assert_not_null(store);
    mem = t_create_memory(&srv, store, "/keep.md", "keep me");
    cr_assert_not_null(mem);
}

static void down(void)
{
    msd_stop(&srv);
    free(store);
    free(mem);
    store = mem = NULL;
}

TestSuite(errors, .init = up, .fini = down, .timeout = 30);

/* The observable state: the store, its memories (full) and versions. */
static char *snapshot(void)
{
    char url[256];
    long err;
    cJSON *snap = cJSON_CreateObject();
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", store);
    cr_assert_eq(r.status, 200, "store lookup failed: %ld", r.status);
    cJSON_AddItemToObject(snap, "store", cJSON_Duplicate(r.json, 1));
    tresp_free(&r);
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories?view=full", store);
    cJSON *mems = t_list_all(&srv, url, NULL, &err);
    cr_assert_not_null(mems, "list failed: %ld", err);
    cJSON_AddItemToObject(snap, "memories", mems);
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memory_versions?view=full", store);
    cJSON *vers = t_list_all(&srv, url, NULL, &err);
    cr_assert_not_null(vers, "versions failed: %ld", err);
    cJSON_AddItemToObject(snap, "versions", vers);
    snprintf(url, sizeof url, "/v1/memory_stores?include_archived=true");
    cJSON *stores = t_list_all(&srv, url, NULL, &err);
    cr_assert_not_null(stores, "store list failed: %ld", err);
    cJSON_AddItemToObject(snap, "stores", stores);
    char *s = cJSON_PrintUnformatted(snap);
    cJSON_Delete(snap);
    return s;
}

struct bad {
    const char *label;
    const char *method;
    int target; /* 0: create memory, 1: update mem, 2: create store, 3: update store */
    const char *body;
    size_t len; /* 0: strlen */
    long status;
    const char *type;
};

static const struct bad bad_rows[] = {
    {"truncated JSON", "POST", 0, "{\"path\":\"/x\",", 0, 400, "invalid_request_error"},
    {"not JSON", "POST", 0, "path=/x&content=y", 0, 400, "invalid_request_error"},
    {"JSON array", "POST", 0, "[\"/x\",\"y\"]", 0, 400, "invalid_request_error"},
    {"JSON string", "POST", 0, "\"hello\"", 0, 400, "invalid_request_error"},
    {"empty body on create", "POST", 0, "", 0, 400, "invalid_request_error"},
    {"trailing garbage", "POST", 0, "{\"path\":\"/x\",\"content\":\"y\"} junk", 0, 400,
     "invalid_request_error"},
    {"path as number", "POST", 0, "{\"path\":5,\"content\":\"y\"}", 0, 400,
     "invalid_request_error"},
    {"path as array", "POST", 0, "{\"path\":[\"/x\"],\"content\":\"y\"}", 0, 400,
     "invalid_request_error"},
    {"content as number", "POST", 0, "{\"path\":\"/x\",\"content\":5}", 0, 400,
     "invalid_request_error"},
    {"content as object", "POST", 0, "{\"path\":\"/x\",\"content\":{}}", 0, 400,
     "invalid_request_error"},
    {"content null on create", "POST", 0, "{\"path\":\"/x\",\"content\":null}", 0, 400,
     "invalid_request_error"},
    {"content missing", "POST", 0, "{\"path\":\"/x\"}", 0, 400, "invalid_request_error"},
    {"path missing", "POST", 0, "{\"content\":\"y\"}", 0, 400, "invalid_request_error"},
    {"raw 0xff in content", "POST", 0, "{\"path\":\"/x\",\"content\":\"a\xff" "b\"}", 0, 400,
     "invalid_request_error"},
    {"overlong in content", "POST", 0, "{\"path\":\"/x\",\"content\":\"\xc0\xaf\"}", 0, 400,
     "invalid_request_error"},
    {"raw surrogate in content", "POST", 0, "{\"path\":\"/x\",\"content\":\"\xed\xa0\x80\"}", 0,
     400, "invalid_request_error"},
    {"lone surrogate escape", "POST", 0, "{\"path\":\"/x\",\"content\":\"\\ud800\"}", 0, 400,
     "invalid_request_error"},
    {"escaped NUL in content", "POST", 0, "{\"path\":\"/x\",\"content\":\"a\\u0000b\"}", 0, 400,
     "invalid_request_error"},
    {"raw NUL in body", "POST", 0, "{\"path\":\"/x\",\"content\":\"a\0b\"}", 29, 400,
     "invalid_request_error"},
    {"raw 0xff in path", "POST", 0, "{\"path\":\"/x\xff\",\"content\":\"y\"}", 0, 400,
     "invalid_request_error"},
    {"raw line break in content", "POST", 0, "{\"path\":\"/x\",\"content\":\"a\nb\"}", 0, 400,
     "invalid_request_error"},
    {"raw tab in path", "POST", 0, "{\"path\":\"/x\ty\",\"content\":\"y\"}", 0, 400,
     "invalid_request_error"},
    {"byte-order mark", "POST", 0, "\xef\xbb\xbf{\"path\":\"/x\",\"content\":\"y\"}", 0, 400,
     "invalid_request_error"},
    {"form feed as whitespace", "POST", 0, "{\"path\":\"/x\",\f\"content\":\"y\"}", 0, 400,
     "invalid_request_error"},
    {"update: raw control character", "POST", 1, "{\"content\":\"a\x01\"}", 0, 400,
     "invalid_request_error"},
    {"update: content as number", "POST", 1, "{\"content\":5}", 0, 400, "invalid_request_error"},
    {"update: path as bool", "POST", 1, "{\"path\":true}", 0, 400, "invalid_request_error"},
    {"update: bad path", "POST", 1, "{\"path\":\"/a/\"}", 0, 400, "invalid_request_error"},
    {"update: malformed", "POST", 1, "{", 0, 400, "invalid_request_error"},
    {"update: precondition type", "POST", 1,
     "{\"content\":\"z\",\"precondition\":{\"type\":\"etag\",\"content_sha256\":\"x\"}}", 0, 400,
     "invalid_request_error"},
    {"update: precondition not object", "POST", 1, "{\"content\":\"z\",\"precondition\":\"x\"}",
     0, 400, "invalid_request_error"},
    {"update: invalid UTF-8", "POST", 1, "{\"content\":\"\xe2\x82\"}", 0, 400,
     "invalid_request_error"},
    {"store: name as number", "POST", 2, "{\"name\":5}", 0, 400, "invalid_request_error"},
    {"store: metadata as string", "POST", 2, "{\"name\":\"x\",\"metadata\":\"k=v\"}", 0, 400,
     "invalid_request_error"},
    {"store: malformed", "POST", 2, "{\"name\":", 0, 400, "invalid_request_error"},
    {"store: invalid UTF-8 name", "POST", 2, "{\"name\":\"\xff\"}", 0, 400,
     "invalid_request_error"},
    {"store update: description as number", "POST", 3, "{\"description\":1}", 0, 400,
     "invalid_request_error"},
    {"store update: metadata value number", "POST", 3, "{\"metadata\":{\"k\":1}}", 0, 400,
     "invalid_request_error"},
};

Test(errors, malformed_and_mistyped_bodies_change_nothing)
{
    char *before = snapshot();
    for (size_t i = 0; i < sizeof bad_rows / sizeof bad_rows[0]; i++) {
        const struct bad *b = &bad_rows[i];
        char url[512];
        switch (b->target) {
        case 0:
            snprintf(url, sizeof url, "%s/v1/memory_stores/%s/memories", srv.url, store);
            break;
        case 1:
            snprintf(url, sizeof url, "%s/v1/memory_stores/%s/memories/%s", srv.url, store, mem);
            break;
        case 2:
            snprintf(url, sizeof url, "%s/v1/memory_stores", srv.url);
            break;
        default:
            snprintf(url, sizeof url, "%s/v1/memory_stores/%s", srv.url, store);
            break;
        }
        const char *h[] = {"x-api-key: test-key", "anthropic-beta: agent-memory-2026-07-22",
                           NULL};
        struct tresp r;
        int rc = t_http_n(b->method, url, b->body, b->len ? b->len : strlen(b->body), h, &r);
        cr_expect_eq(rc, 0, "row %zu (%s): no HTTP answer (%d)", i, b->label, rc);
        const char *why = rc == 0 ? t_check_error(&r, b->status, b->type) : "no answer";
        cr_expect(why == NULL, "row %zu (%s): %s: %s", i, b->label, why ? why : "",
                  r.body ? r.body : "");
        if (rc == 0)
            tresp_free(&r);
    }
    char *after = snapshot();
    cr_expect_str_eq(after, before, "refused requests changed the state");
    free(before);
    free(after);
}

Test(errors, invalid_paths_refused)
{
    char p1025[1100], p21[128];
    p1025[0] = '/';
    memset(p1025 + 1, 'p', 1024);
    p1025[1025] = '\0';
    size_t o = 0;
    for (int i = 0; i < 21; i++)
        o += (size_t)snprintf(p21 + o, sizeof p21 - o, "/s");
    const char *paths[] = {
        "/cafe\xcc\x81.md", "/a\xe2\x80\x8b" "b", "/\xef\xbb\xbf" "a", "/a\xe2\x80\xa8", "/a\xe2\x80\xa9",
        "/a\x7f", "/a\xc2\x85", "/a\tb", "/a/", "/a//b", "/./a", "/a/..", "a/b", "/", "",
        p1025, p21, "/a\xc0\xaf", "/a\xed\xa0\x80",
    };
    char *before = snapshot();
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        struct tresp r;
        /* Raw bytes go straight into the JSON (cJSON would pass them too). */
        char *body = tj_memory_body(paths[i], "x");
        t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s/memories", store);
        const char *why = t_check_error(&r, 400, "invalid_request_error");
        cr_expect(why == NULL, "create path #%zu: %s: %s", i, why ? why : "", r.body ?: "");
        tresp_free(&r);
        free(body);
        /* Renames onto it too. */
        body = tj_memory_body(paths[i], NULL);
        t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s/memories/%s", store, mem);
        why = t_check_error(&r, 400, "invalid_request_error");
        cr_expect(why == NULL, "rename path #%zu: %s: %s", i, why ? why : "", r.body ?: "");
        tresp_free(&r);
        free(body);
    }
    char *after = snapshot();
    cr_expect_str_eq(after, before, "refused paths changed the state");
    free(after);
    /* The boundaries are accepted: 1,024 bytes and 20 segments. */
    p1025[1024] = '\0';
    p21[40] = '\0';
    char *a = t_create_memory(&srv, store, p1025, "x");
    char *b = t_create_memory(&srv, store, p21, "x");
    cr_expect_not_null(a, "a 1024-byte path must be accepted");
    cr_expect_not_null(b, "a 20-segment path must be accepted");
    struct tresp r;
    if (a) {
        t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, a);
        tresp_free(&r);
    }
    if (b) {
        t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, b);
        tresp_free(&r);
    }
    free(a);
    free(b);
    free(before);
}

Test(errors, oversize_content_is_413)
{
    char *big = malloc(200 * 1024 + 1);
    cr_assert_not_null(big);
    memset(big, 'x', 200 * 1024);
    char *before = snapshot();
    struct tresp r;

    big[102401] = '\0';
    char *body = tj_memory_body("/big.md", big);
    t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s/memories", store);
    T_EXPECT_ERROR(&r, 413, "request_too_large");
    tresp_free(&r);
    free(body);
    body = tj_memory_body(NULL, big);
    t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s/memories/%s", store, mem);
    T_EXPECT_ERROR(&r, 413, "request_too_large");
    tresp_free(&r);
    free(body);
    /* 102,401 bytes made of multibyte characters: counted in bytes. */
    char *mb = malloc(102402);
    for (size_t i = 0; i < 102399; i += 3)
        memcpy(mb + i, "\xe2\x82\xac", 3); /* 34,133 euro signs = 102,399 bytes */
    mb[102399] = 'a', mb[102400] = 'b', mb[102401] = '\0';
    body = tj_memory_body("/big.md", mb);
    t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s/memories", store);
    T_EXPECT_ERROR(&r, 413, "request_too_large");
    tresp_free(&r);
    free(body);
    /* A body far past any content limit (2 MiB). */
    char *huge = malloc(2 * 1024 * 1024 + 64);
    memset(huge, ' ', 2 * 1024 * 1024 + 63);
    memcpy(huge, "{\"path\":\"/h\",\"content\":\"x\"}", 27);
    huge[2 * 1024 * 1024 + 63] = '\0';
    t_req(&srv, "POST", huge, &r, "/v1/memory_stores/%s/memories", store);
    T_EXPECT_ERROR(&r, 413, "request_too_large");
    tresp_free(&r);
    free(huge);
    char *after = snapshot();
    cr_expect_str_eq(after, before, "refused requests changed the state");
    free(after);
    free(before);

    /* Exactly 102,400 bytes is fine, and comes back byte for byte. */
    mb[102400] = '\0';
    big[102400] = '\0';
    for (int k = 0; k < 2; k++) {
        const char *c = k ? mb : big;
        body = tj_memory_body(k ? "/max-mb.md" : "/max.md", c);
        t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s/memories?view=full", store);
        T_EXPECT_STATUS(&r, 200);
        cr_expect_eq(tj_num(r.json, "content_size_bytes"), 102400);
        cr_expect_str_eq(tj_str(r.json, "content_sha256") ?: "", t_sha(c));
        cr_expect(tj_str(r.json, "content") && strcmp(tj_str(r.json, "content"), c) == 0,
                  "content must round-trip");
        tresp_free(&r);
        free(body);
    }
    free(mb);
    free(big);
}

/* An error message quotes what it names cut by bytes (an id to 80): a
 * character cut in two is not left in the body, which must be UTF-8 (a
 * JSON document).  Before the fix the 404 ended in a lone 0xc3. */
Test(errors, a_message_that_cuts_what_it_quotes_stays_utf8)
{
    char id[128];
    snprintf(id, sizeof id, "memstore_%070d%s", 0, "%C3%A9%C3%A9"); /* the cut at 80 */
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", id);
    cr_expect_eq(r.status, 404, "%ld: %s", r.status, r.body ?: "");
    cr_expect(r.body && rules_utf8_valid(r.body, strlen(r.body)), "the body is not UTF-8: %s",
              r.body ?: "");
    cr_expect(t_check_error(&r, 404, "not_found_error") == NULL, "%s", r.body ?: "");
    tresp_free(&r);
}

Test(errors, unknown_ids_and_routes)
{
    char *before = snapshot();
    struct {
        const char *method, *fmt;
        long status;
    } rows[] = {
        {"GET", "/v1/memory_stores/memstore_nope", 404},
        {"GET", "/v1/memory_stores/memstore_nope/memories/mem_nope", 404},
        {"GET", "/v1/memory_stores/STORE/memories/mem_nope", 404},
        {"POST", "/v1/memory_stores/STORE/memories/mem_nope", 404},
        {"DELETE", "/v1/memory_stores/STORE/memories/mem_nope", 404},
        {"POST", "/v1/memory_stores/memstore_nope/memories", 404},
        {"GET", "/v1/memory_stores/STORE/memory_versions/memver_nope", 404},
        {"POST", "/v1/memory_stores/STORE/memory_versions/memver_nope/redact", 404},
        {"GET", "/v1/nothing_here", 404},
        {"GET", "/v1/memory_stores/STORE/memories/MEM/extra", 404},
        {"GET", "/", 404},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char path[512];
        const char *s = strstr(rows[i].fmt, "STORE");
        const char *m = strstr(rows[i].fmt, "MEM/");
        if (s && m)
            snprintf(path, sizeof path, "%.*s%s/memories/%s/extra", (int)(s - rows[i].fmt),
                     rows[i].fmt, store, mem);
        else if (s)
            snprintf(path, sizeof path, "%.*s%s%s", (int)(s - rows[i].fmt), rows[i].fmt, store,
                     s + 5);
        else
            snprintf(path, sizeof path, "%s", rows[i].fmt);
        struct tresp r;
        char url[700];
        snprintf(url, sizeof url, "%s%s", srv.url, path);
        const char *h[] = {"x-api-key: test-key", "anthropic-beta: agent-memory-2026-07-22",
                           NULL};
        int rc = t_http(rows[i].method, url, rows[i].method[0] == 'P' ? "{\"path\":\"/q\",\"content\":\"q\"}" : NULL,
                        h, &r);
        cr_expect_eq(rc, 0);
        const char *why = t_check_error(&r, rows[i].status, "not_found_error");
        cr_expect(why == NULL, "%s %s: %s: %s", rows[i].method, path, why ? why : "",
                  r.body ?: "");
        tresp_free(&r);
    }
    /* A method the route does not have: some 4xx with the envelope. */
    struct tresp r;
    t_req(&srv, "PUT", "{\"name\":\"x\"}", &r, "/v1/memory_stores/%s", store);
    cr_expect(r.status >= 400 && r.status < 500, "PUT gave %ld", r.status);
    cr_expect(t_check_error(&r, r.status, NULL) == NULL, "PUT: %s", r.body ?: "");
    tresp_free(&r);
    t_req(&srv, "PATCH", "{\"content\":\"x\"}", &r, "/v1/memory_stores/%s/memories/%s", store,
          mem);
    cr_expect(r.status >= 400 && r.status < 500, "PATCH gave %ld", r.status);
    tresp_free(&r);
    char *after = snapshot();
    cr_expect_str_eq(after, before, "refused requests changed the state");
    free(after);
    free(before);
}

Test(errors, server_survives_a_burst_of_garbage)
{
    char url[256];
    snprintf(url, sizeof url, "%s/v1/memory_stores/%s/memories", srv.url, store);
    const char *h[] = {"x-api-key: test-key", "anthropic-beta: agent-memory-2026-07-22",
                       "Content-Type: text/plain", NULL};
    unsigned seed = 12345;
    for (int i = 0; i < 100; i++) {
        char body[256];
        size_t n = (size_t)(rand_r(&seed) % 255) + 1;
        for (size_t k = 0; k < n; k++)
            body[k] = (char)(rand_r(&seed) % 256);
        if (i % 2)
            memcpy(body, "{\"path\":\"", n > 9 ? 9 : n);
        struct tresp r;
        int rc = t_http_n("POST", url, body, n, h, &r);
        cr_expect_eq(rc, 0, "request %d got no answer (%d)", i, rc);
        if (rc == 0) {
            cr_expect(r.status >= 400 && r.status < 500, "garbage %d gave %ld", i, r.status);
            tresp_free(&r);
        }
    }
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, mem);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "", "keep me");
    tresp_free(&r);
}
