/* test_memstored_memories.c - memstored's memory endpoints (A.3): create,
 * retrieve (views), update (content, rename, precondition, idempotent
 * retry, no-op), delete (expected_content_sha256), path conflicts (A.7)
 * and the per-store memory cap (B.5, --max-memories).  One memstored per
 * test, started in .init and stopped by PID in .fini. */
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
    store = t_create_store(&srv, "mem tests");
    cr_assert_not_null(store, "could not create a store");
}

static void up_cap5(void)
{
    const char *args[] = {"--max-memories", "5", NULL};
    int rc = msd_start(&srv, args);
    cr_assert_eq(rc, 0, "msd_start failed: %s", strerror(-rc));
    store = t_create_store(&srv, "capped");
    cr_assert_not_null(store, "could not create a store");
}

static void down(void)
{
    msd_stop(&srv);
    free(store);
    store = NULL;
}

TestSuite(memories, .init = up, .fini = down, .timeout = 30);
TestSuite(memory_cap, .init = up_cap5, .fini = down, .timeout = 30);

/* POSTs a create and returns the status; r is left for the caller. */
static long create(const char *path, const char *content, struct tresp *r)
{
    char *body = tj_memory_body(path, content);
    long st = t_req(&srv, "POST", body, r, "/v1/memory_stores/%s/memories", store);
    free(body);
    return st;
}

static long update(const char *id, const char *body, struct tresp *r)
{
    return t_req(&srv, "POST", body, r, "/v1/memory_stores/%s/memories/%s", store, id);
}

static int version_count(const char *mem)
{
    char q[256];
    long err;
    snprintf(q, sizeof q, "/v1/memory_stores/%s/memory_versions?limit=100&memory_id=%s", store,
             mem);
    cJSON *all = t_list_all(&srv, q, NULL, &err);
    cr_assert_not_null(all, "versions list failed: %ld", err);
    int n = cJSON_GetArraySize(all);
    cJSON_Delete(all);
    return n;
}

static int memory_count(void)
{
    char q[256];
    long err;
    snprintf(q, sizeof q, "/v1/memory_stores/%s/memories?limit=100", store);
    cJSON *all = t_list_all(&srv, q, NULL, &err);
    cr_assert_not_null(all, "memories list failed: %ld", err);
    int n = cJSON_GetArraySize(all);
    cJSON_Delete(all);
    return n;
}

Test(memories, create_returns_basic_view)
{
    struct tresp r;
    create("/notes/todo.md", "buy milk\n", &r);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "type"), "memory");
    cr_expect(strncmp(tj_str(r.json, "id") ?: "", "mem_", 4) == 0, "%s", r.body);
    cr_expect_str_eq(tj_str(r.json, "memory_store_id"), store);
    cr_expect_str_eq(tj_str(r.json, "path"), "/notes/todo.md");
    cr_expect(tj_is_null(r.json, "content"), "create defaults to view=basic: %s", r.body);
    cr_expect_str_eq(tj_str(r.json, "content_sha256"), t_sha("buy milk\n"));
    cr_expect_eq(tj_num(r.json, "content_size_bytes"), 9);
    cr_expect(strncmp(tj_str(r.json, "memory_version_id") ?: "", "memver_", 7) == 0, "%s",
              r.body);
    cr_expect_not_null(tj_str(r.json, "created_at"));
    cr_expect_not_null(tj_str(r.json, "updated_at"));
    tresp_free(&r);

    /* view=full on create returns the content. */
    t_req(&srv, "POST", "{\"path\":\"/caf\xc3\xa9.md\",\"content\":\"h\xc3\xa9\"}", &r,
          "/v1/memory_stores/%s/memories?view=full", store);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", "h\xc3\xa9");
    cr_expect_eq(tj_num(r.json, "content_size_bytes"), 3, "size counts UTF-8 bytes");
    tresp_free(&r);
}

Test(memories, empty_content_and_odd_but_valid_paths)
{
    const char *paths[] = {"/empty", "/with space/a: b.md", "/.hidden", "/a\\b*c", "/A.md",
                           "/a.md", "/.anthropic-memory-store"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        struct tresp r;
        create(paths[i], "", &r);
        T_EXPECT_STATUS(&r, 200);
        if (r.status == 200) {
            cr_expect_str_eq(tj_str(r.json, "path"), paths[i]);
            cr_expect_str_eq(tj_str(r.json, "content_sha256"),
                             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
            cr_expect_eq(tj_num(r.json, "content_size_bytes"), 0);
        }
        tresp_free(&r);
    }
}

Test(memories, retrieve_views)
{
    char *id = t_create_memory(&srv, store, "/r.md", "hello");
    cr_assert_not_null(id);
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", "hello", "retrieve defaults to full");
    cr_expect_str_eq(tj_str(r.json, "id"), id);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s?view=basic", store, id);
    T_ASSERT_STATUS(&r, 200);
    cr_expect(tj_is_null(r.json, "content"), "%s", r.body);
    cr_expect_str_eq(tj_str(r.json, "content_sha256"), t_sha("hello"));
    cr_expect_eq(tj_num(r.json, "content_size_bytes"), 5);
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s?view=bogus", store, id);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    tresp_free(&r);

    /* The memory is not reachable through another store. */
    char *other = t_create_store(&srv, "other");
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", other, id);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "POST", "{\"content\":\"x\"}", &r, "/v1/memory_stores/%s/memories/%s", other, id);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", other, id);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/mem_nope", store);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    free(other);
    free(id);
}

Test(memories, update_content_rename_and_noop)
{
    struct tresp r;
    create("/u.md", "one", &r);
    T_ASSERT_STATUS(&r, 200);
    char *id = t_id(&r);
    char head[80];
    snprintf(head, sizeof head, "%s", tj_str(r.json, "memory_version_id"));
    tresp_free(&r);

    update(id, "{\"content\":\"two!\"}", &r);
    T_ASSERT_STATUS(&r, 200);
    cr_expect(tj_is_null(r.json, "content"), "update defaults to basic: %s", r.body);
    cr_expect_str_eq(tj_str(r.json, "content_sha256"), t_sha("two!"));
    cr_expect_eq(tj_num(r.json, "content_size_bytes"), 4);
    cr_expect_str_eq(tj_str(r.json, "path"), "/u.md");
    cr_expect_str_neq(tj_str(r.json, "memory_version_id") ?: "", head, "head must move");
    snprintf(head, sizeof head, "%s", tj_str(r.json, "memory_version_id") ?: "");
    tresp_free(&r);

    /* Rename only: id kept, content kept. */
    t_req(&srv, "POST", "{\"path\":\"/dir/v.md\",\"content\":null}", &r,
          "/v1/memory_stores/%s/memories/%s?view=full", store, id);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "id"), id);
    cr_expect_str_eq(tj_str(r.json, "path"), "/dir/v.md");
    cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", "two!");
    snprintf(head, sizeof head, "%s", tj_str(r.json, "memory_version_id") ?: "");
    tresp_free(&r);
    cr_expect_eq(version_count(id), 3);

    /* No-op updates: {} , same content, same path: 200, head unchanged, no
     * version. */
    const char *noops[] = {"{}", "{\"content\":\"two!\"}", "{\"path\":\"/dir/v.md\"}",
                           "{\"path\":\"/dir/v.md\",\"content\":\"two!\"}"};
    for (size_t i = 0; i < 4; i++) {
        update(id, noops[i], &r);
        T_EXPECT_STATUS(&r, 200);
        cr_expect_str_eq(tj_str(r.json, "memory_version_id") ?: "", head, "no-op %zu moved head",
                         i);
        tresp_free(&r);
    }
    cr_expect_eq(version_count(id), 3, "no-op updates must not add versions");

    /* The old path is free again. */
    create("/u.md", "again", &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    free(id);
}

Test(memories, update_precondition)
{
    char *id = t_create_memory(&srv, store, "/p.md", "base");
    cr_assert_not_null(id);
    struct tresp r;
    char body[512];

    /* Mismatch: 409, x-should-retry false, nothing changes. */
    snprintf(body, sizeof body,
             "{\"content\":\"next\",\"precondition\":{\"type\":\"content_sha256\","
             "\"content_sha256\":\"%s\"}}",
             t_sha("something else"));
    update(id, body, &r);
    T_EXPECT_ERROR(&r, 409, "memory_precondition_failed_error");
    cr_expect_str_eq(r.should_retry, "false", "409 must carry x-should-retry: false");
    tresp_free(&r);
    cr_expect_eq(version_count(id), 1);

    /* Match: applies. */
    snprintf(body, sizeof body,
             "{\"content\":\"next\",\"precondition\":{\"type\":\"content_sha256\","
             "\"content_sha256\":\"%s\"}}",
             t_sha("base"));
    update(id, body, &r);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "content_sha256") ?: "", t_sha("next"));
    tresp_free(&r);
    cr_expect_eq(version_count(id), 2);

    /* The same request again: the hash is stale but the state already
     * equals the request, so 200 and no new version. */
    update(id, body, &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    cr_expect_eq(version_count(id), 2);

    /* Stale hash with different content: 409. */
    snprintf(body, sizeof body,
             "{\"content\":\"third\",\"precondition\":{\"type\":\"content_sha256\","
             "\"content_sha256\":\"%s\"}}",
             t_sha("base"));
    update(id, body, &r);
    T_EXPECT_ERROR(&r, 409, "memory_precondition_failed_error");
    tresp_free(&r);

    /* A rename checked against the current content. */
    snprintf(body, sizeof body,
             "{\"path\":\"/moved.md\",\"precondition\":{\"type\":\"content_sha256\","
             "\"content_sha256\":\"%s\"}}",
             t_sha("next"));
    update(id, body, &r);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "path") ?: "", "/moved.md");
    tresp_free(&r);
    /* ...and its retry (stale for nothing, state equal): 200. */
    update(id, body, &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    cr_expect_eq(version_count(id), 3);

    /* Nothing asked for but a stale precondition: nothing can already
     * equal the request, 409 (before: 200). */
    snprintf(body, sizeof body,
             "{\"precondition\":{\"type\":\"content_sha256\",\"content_sha256\":\"%s\"}}",
             t_sha("base"));
    update(id, body, &r);
    T_EXPECT_ERROR(&r, 409, "memory_precondition_failed_error");
    tresp_free(&r);
    cr_expect_eq(version_count(id), 3);

    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", "next");
    tresp_free(&r);
    free(id);
}

Test(memories, delete_and_expected_sha)
{
    char *id = t_create_memory(&srv, store, "/d.md", "bye");
    cr_assert_not_null(id);
    struct tresp r;
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s?expected_content_sha256=%s",
          store, id, t_sha("other"));
    T_EXPECT_ERROR(&r, 409, "memory_precondition_failed_error");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);

    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s?expected_content_sha256=%s",
          store, id, t_sha("bye"));
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "type"), "memory_deleted");
    cr_expect_str_eq(tj_str(r.json, "id"), id);
    tresp_free(&r);

    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    update(id, "{\"content\":\"zombie\"}", &r);
    T_EXPECT_ERROR(&r, 404, "not_found_error");
    tresp_free(&r);
    cr_expect_eq(memory_count(), 0);

    /* Unconditional delete; the path can be reused, with a new id. */
    char *id2 = t_create_memory(&srv, store, "/d.md", "hello again");
    cr_assert_not_null(id2);
    cr_expect_str_neq(id2, id);
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id2);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    free(id);
    free(id2);
}

/* Asserts a 409 path conflict naming want_id and want_path. */
static void expect_conflict(struct tresp *r, const char *want_id, const char *want_path)
{
    T_EXPECT_ERROR(r, 409, "memory_path_conflict_error");
    cr_expect_str_eq(tj_str(r->json, "error.conflicting_memory_id") ?: "(none)", want_id,
                     "conflicting_memory_id: %s", r->body);
    cr_expect_str_eq(tj_str(r->json, "error.conflicting_path") ?: "(none)", want_path,
                     "conflicting_path: %s", r->body);
    cr_expect_str_eq(r->should_retry, "false", "409 must carry x-should-retry: false");
}

Test(memories, path_conflicts)
{
    char *deep = t_create_memory(&srv, store, "/a/b", "x");
    char *file = t_create_memory(&srv, store, "/f", "y");
    cr_assert(deep && file);
    struct tresp r;

    create("/a", "ancestor of /a/b", &r);
    expect_conflict(&r, deep, "/a/b");
    tresp_free(&r);
    create("/f/g/h", "under a file", &r);
    expect_conflict(&r, file, "/f");
    tresp_free(&r);
    create("/f", "same path", &r);
    expect_conflict(&r, file, "/f");
    tresp_free(&r);

    /* Renames onto taken or overlapping paths. */
    char *mover = t_create_memory(&srv, store, "/m", "z");
    cr_assert_not_null(mover);
    update(mover, "{\"path\":\"/f\"}", &r);
    expect_conflict(&r, file, "/f");
    tresp_free(&r);
    update(mover, "{\"path\":\"/a\"}", &r);
    expect_conflict(&r, deep, "/a/b");
    tresp_free(&r);
    update(mover, "{\"path\":\"/f/inside\"}", &r);
    expect_conflict(&r, file, "/f");
    tresp_free(&r);
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, mover);
    cr_expect_str_eq(tj_str(r.json, "path") ?: "", "/m", "a refused rename changes nothing");
    tresp_free(&r);
    cr_expect_eq(version_count(mover), 1);

    /* Not overlaps: sibling names sharing a string prefix, case. */
    const char *fine[] = {"/a-b", "/ab", "/a.md", "/F", "/fg", "/a/c"};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        create(fine[i], "ok", &r);
        T_EXPECT_STATUS(&r, 200);
        tresp_free(&r);
    }
    /* Freeing the path makes it usable. */
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, file);
    tresp_free(&r);
    create("/f/g/h", "now fine", &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    cr_expect_eq(memory_count(), 3 + 6 + 1 - 1);
    free(deep);
    free(file);
    free(mover);
}

Test(memory_cap, sixth_memory_refused_existing_still_editable)
{
    char *ids[5];
    for (int i = 0; i < 5; i++) {
        char path[32];
        snprintf(path, sizeof path, "/m%d.md", i);
        ids[i] = t_create_memory(&srv, store, path, "x");
        cr_assert_not_null(ids[i], "create %d under the cap failed", i);
    }
    struct tresp r;
    create("/m5.md", "one too many", &r);
    T_EXPECT_ERROR(&r, 400, "invalid_request_error");
    const char *msg = tj_str(r.json, "error.message");
    cr_expect(msg && strcasestr(msg, "full"), "the message should say the store is full: %s",
              r.body);
    tresp_free(&r);
    cr_expect_eq(memory_count(), 5);

    /* Other stores have their own cap. */
    char *other = t_create_store(&srv, "other");
    char *om = t_create_memory(&srv, other, "/m5.md", "fine");
    cr_expect_not_null(om, "the cap is per store");
    free(om);
    free(other);

    update(ids[0], "{\"content\":\"edited\",\"path\":\"/renamed.md\"}", &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    t_req(&srv, "DELETE", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, ids[1]);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    create("/m5.md", "room again", &r);
    T_EXPECT_STATUS(&r, 200);
    tresp_free(&r);
    for (int i = 0; i < 5; i++)
        free(ids[i]);
}

Test(memories, json_escapes_and_controls_in_content)
{
    struct {
        const char *json, *bytes;
    } rows[] = {
        {"\\u00e9", "\xc3\xa9"},
        {"\\ud83d\\ude00", "\xf0\x9f\x98\x80"},
        {"tab\\tnl\\ncr\\r", "tab\tnl\ncr\r"},
        {"\\u0001\\u001f\\u007f", "\x01\x1f\x7f"},
        {"\\\"quoted\\\" \\\\ \\/", "\"quoted\" \\ /"},
        {"cafe\xcc\x81", "cafe\xcc\x81"}, /* NFD is fine in content, kept as is */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"path\":\"/e%zu.md\",\"content\":\"%s\"}", i, rows[i].json);
        struct tresp r;
        t_req(&srv, "POST", body, &r, "/v1/memory_stores/%s/memories?view=full", store);
        T_EXPECT_STATUS(&r, 200);
        cr_expect_str_eq(tj_str(r.json, "content") ?: "(null)", rows[i].bytes, "row %zu", i);
        cr_expect_str_eq(tj_str(r.json, "content_sha256") ?: "", t_sha(rows[i].bytes),
                         "row %zu: the hash is over the decoded UTF-8 bytes", i);
        cr_expect_eq(tj_num(r.json, "content_size_bytes"), (double)strlen(rows[i].bytes),
                     "row %zu", i);
        tresp_free(&r);
    }
}

Test(memories, timestamps_memory_and_store)
{
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", store);
    char store_updated[64];
    snprintf(store_updated, sizeof store_updated, "%s", tj_str(r.json, "updated_at") ?: "");
    tresp_free(&r);

    create("/t.md", "1", &r);
    T_ASSERT_STATUS(&r, 200);
    char *id = t_id(&r);
    char created[64], updated[64];
    snprintf(created, sizeof created, "%s", tj_str(r.json, "created_at") ?: "");
    snprintf(updated, sizeof updated, "%s", tj_str(r.json, "updated_at") ?: "");
    tresp_free(&r);
    update(id, "{\"content\":\"1\"}", &r); /* no-op */
    cr_expect_str_eq(tj_str(r.json, "updated_at") ?: "", updated, "a no-op keeps updated_at");
    tresp_free(&r);
    update(id, "{\"content\":\"2\"}", &r);
    cr_expect_str_eq(tj_str(r.json, "created_at") ?: "", created, "created_at never changes");
    cr_expect(strcmp(tj_str(r.json, "updated_at") ?: "", updated) > 0, "updated_at moves on: %s",
              r.body);
    tresp_free(&r);

    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", store);
    cr_expect_str_eq(tj_str(r.json, "updated_at") ?: "", store_updated,
                     "memory writes must not bump the store's updated_at");
    tresp_free(&r);
    free(id);
}
