/* test_sync_history.c - the history bindings of sync/api.h against a real
 * memstored: the version list filtered by memory and by operation, newest
 * first, with created_by; one version in full, byte-exact (control
 * characters, quotes, multi-byte UTF-8); a deletion and a redacted version have no content; an unknown
 * version is -ENOENT with the 404; a malformed answer is -EPROTO. */
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
    store = t_create_store(&srv, "history tests");
    cr_assert_not_null(store);
    struct http_opts o = {.base_url = srv.url, .api_key = "test-key", .max_in_flight = 8,
                          .max_retries = 1, .backoff_base_ms = 10, .backoff_max_ms = 50};
    cli = http_client_new(&o);
    cr_assert_not_null(cli);
}

static void down(void)
{
    http_client_free(&cli);
    msd_stop(&srv);
    free(store);
    store = NULL;
}

TestSuite(api_history, .init = up, .fini = down, .timeout = 120);

static void create(const char *path, const char *content, size_t len, struct api_memory *out)
{
    struct api_error e = {0};
    int rc = api_memory_create(cli, store, path, content, len, out, &e);
    cr_assert_eq(rc, 0, "create %s: %d %s", path, rc, e.message);
    api_error_clear(&e);
}

Test(api_history, versions_of_one_memory_newest_first_with_who)
{
    struct api_memory a, b, u;
    create("/a.md", "one\n", 4, &a);
    create("/b.md", "other\n", 6, &b);
    cr_assert_eq(api_memory_update(cli, store, a.id, "/moved.md", "two\n", 4, NULL, &u, NULL), 0);
    struct api_vfilter f = {.memory_id = a.id};
    struct api_versions v;
    struct api_error e = {0};
    cr_assert_eq(api_versions_list(cli, store, &f, 1, 10, &v, &e), 0, "%s", e.message);
    cr_assert_eq(v.n, 2, "the filter let another memory's versions through");
    cr_assert(v.complete, "two pages of one were not both read");
    cr_expect_str_eq(v.items[0].id, u.version_id);
    cr_expect_eq(v.items[0].op, API_OP_MODIFIED);
    cr_expect_str_eq(v.items[0].path, "/moved.md");
    cr_expect_eq(v.items[0].size, 4);
    cr_expect_str_eq(v.items[1].id, a.version_id);
    cr_expect_eq(v.items[1].op, API_OP_CREATED);
    cr_expect_str_eq(v.items[1].path, "/a.md");
    for (size_t i = 0; i < 2; i++) {
        cr_expect_str_eq(v.items[i].memory_id, a.id);
        cr_expect_str_eq(v.items[i].actor_type, "api_actor");
        cr_expect(strncmp(v.items[i].actor_id, "apikey_", 7) == 0, "%s", v.items[i].actor_id);
        cr_expect_null(v.items[i].content, "view=basic holds no content");
    }
    api_versions_free(&v);

    /* By operation: only the deletion. */
    cr_assert_eq(api_memory_delete(cli, store, b.id, NULL, NULL), 0);
    struct api_vfilter d = {.operation = "deleted"};
    cr_assert_eq(api_versions_list(cli, store, &d, 100, 10, &v, &e), 0);
    cr_assert_eq(v.n, 1);
    cr_expect_str_eq(v.items[0].memory_id, b.id);
    cr_expect_str_eq(v.items[0].path, "/b.md", "a deletion keeps its path");
    cr_expect_eq(v.items[0].size, -1);
    api_versions_free(&v);
    api_memory_clear(&a);
    api_memory_clear(&b);
    api_memory_clear(&u);
}

Test(api_history, one_version_in_full_byte_exact)
{
    static const char bytes[] = "ctl\x01\t\"q\" \\ \n\xc3\xa9 \xe2\x80\x94 end";
    struct api_memory m, u;
    create("/n.md", bytes, sizeof(bytes) - 1, &m);
    cr_assert_eq(api_memory_update(cli, store, m.id, NULL, "later", 5, NULL, &u, NULL), 0);
    struct api_version v;
    struct api_error e = {0};
    cr_assert_eq(api_version_get(cli, store, m.version_id, &v, &e), 0, "%s", e.message);
    cr_expect_str_eq(v.id, m.version_id);
    cr_expect_str_eq(v.memory_id, m.id);
    cr_expect_eq(v.op, API_OP_CREATED);
    cr_assert_eq(v.content_len, sizeof(bytes) - 1);
    cr_expect_eq(memcmp(v.content, bytes, v.content_len), 0, "the bytes changed");
    api_version_clear(&v);

    /* Redacted: no content, and says so. */
    char path[300];
    snprintf(path, sizeof(path), "/v1/memory_stores/%s/memory_versions/%s/redact", store,
             m.version_id);
    struct tresp r;
    cr_assert_eq(t_api(&srv, "POST", path, "{}", &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
    cr_assert_eq(api_version_get(cli, store, m.version_id, &v, &e), 0);
    cr_expect(v.redacted);
    cr_expect(v.redacted_at[0]);
    cr_expect_null(v.content);
    cr_expect_null(v.path);
    cr_expect_str_eq(v.actor_type, "api_actor", "created_by survives a redaction");
    api_version_clear(&v);

    /* A deletion: no content either. */
    cr_assert_eq(api_memory_delete(cli, store, m.id, NULL, NULL), 0);
    struct api_vfilter f = {.memory_id = m.id, .operation = "deleted"};
    struct api_versions l;
    cr_assert_eq(api_versions_list(cli, store, &f, 10, 1, &l, &e), 0);
    cr_assert_eq(l.n, 1);
    cr_assert_eq(api_version_get(cli, store, l.items[0].id, &v, &e), 0);
    cr_expect_eq(v.op, API_OP_DELETED);
    cr_expect_null(v.content);
    cr_expect_str_eq(v.path, "/n.md");
    api_version_clear(&v);
    api_versions_free(&l);

    /* Unknown. */
    cr_expect_eq(api_version_get(cli, store, "memver_nope", &v, &e), -ENOENT);
    cr_expect_eq(e.status, 404);
    cr_expect_null(v.id);
    api_error_clear(&e);
    cr_expect_eq(api_version_get(cli, store, "..", &v, &e), -EINVAL, "refused before sending");
    api_memory_clear(&m);
    api_memory_clear(&u);
}

/* A canned answer for GET .../memory_versions/{id}: content (JSON-escaped
 * in json_content) claimed to hash to sha with size bytes. */
static void reply_version_as(const struct api_memory *m, const char *version_id,
                             const char *json_content, const char *sha, int size)
{
    char body[1200];
    snprintf(body, sizeof(body),
             "{\"action\":\"reply\",\"status\":200,"
             "\"path\":\"/v1/memory_stores/*/memory_versions/*\","
             "\"body\":{\"type\":\"memory_version\",\"id\":\"%s\",\"memory_id\":\"%s\","
             "\"memory_store_id\":\"%s\",\"operation\":\"created\",\"content\":\"%s\","
             "\"content_sha256\":\"%s\",\"content_size_bytes\":%d,\"path\":\"/h.md\","
             "\"created_at\":\"2026-01-01T00:00:00Z\",\"created_by\":null,"
             "\"redacted_at\":null,\"redacted_by\":null}}",
             version_id, m->id, store, json_content, sha, size);
    struct tresp r;
    cr_assert_eq(t_admin(&srv, "POST", "/admin/faults", body, &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
}

static void reply_version(const struct api_memory *m, const char *json_content,
                          const char *sha, int size)
{
    reply_version_as(m, m->version_id, json_content, sha, size);
}

/* An answer about another version (a misbehaving server or proxy) would
 * have a restore write content the user did not ask for. */
Test(api_history, an_answer_with_another_version_s_id_is_refused)
{
    struct api_memory m;
    create("/h.md", "real\n", 5, &m);
    reply_version_as(&m, "memver_someotherversion", "real\\n", m.sha, 5);
    struct api_version v;
    struct api_error e = {0};
    cr_expect_eq(api_version_get(cli, store, m.version_id, &v, &e), -EPROTO);
    cr_expect_str_eq(e.type, "malformed_response");
    cr_expect_null(v.content);
    api_error_clear(&e);
    api_memory_clear(&m);
}

Test(api_history, a_version_whose_content_does_not_match_its_hash_is_refused)
{
    struct api_memory m;
    create("/h.md", "real\n", 5, &m);
    reply_version(&m, "fake\\n", m.sha, 5);
    struct api_version v;
    struct api_error e = {0};
    cr_expect_eq(api_version_get(cli, store, m.version_id, &v, &e), -EPROTO);
    cr_expect_str_eq(e.type, "malformed_response");
    cr_expect_null(v.content);
    api_error_clear(&e);
    api_memory_clear(&m);
}

/* What `memstorefs log` prints to a terminal comes from the server: a
 * path with a control character (an escape sequence) is a bad item, as
 * no memory may have it; free text (who wrote it, when it was redacted)
 * keeps no control character. */
Test(api_history, control_characters_from_the_server_never_reach_a_terminal)
{
    char body[2000];
    snprintf(body, sizeof(body),
             "{\"action\":\"reply\",\"status\":200,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memory_versions\",\"body\":{\"data\":["
             "{\"type\":\"memory_version\",\"id\":\"memver_a\",\"memory_id\":\"mem_a\","
             "\"operation\":\"deleted\",\"path\":\"/x\\u001b]52;c;aGk=\\u0007.md\","
             "\"created_at\":\"2026-01-01T00:00:00Z\",\"created_by\":null,\"redacted_at\":null},"
             "{\"type\":\"memory_version\",\"id\":\"memver_b\\u001b[2J\",\"memory_id\":\"mem_b\","
             "\"operation\":\"deleted\",\"path\":\"/y.md\","
             "\"created_at\":\"2026-01-01T00:00:00Z\",\"created_by\":null,\"redacted_at\":null},"
             "{\"type\":\"memory_version\",\"id\":\"memver_c\",\"memory_id\":\"mem_c\","
             "\"operation\":\"deleted\",\"path\":\"/z.md\",\"created_at\":\"2026-01-01T00:00:00Z\","
             "\"created_by\":{\"type\":\"api\\u001b[31m_actor\",\"api_key_id\":\"k\\u009b1\\r\"},"
             "\"redacted_at\":\"2026\\u0007\"}],\"next_page\":null}}");
    struct tresp r;
    cr_assert_eq(t_admin(&srv, "POST", "/admin/faults", body, &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
    struct api_vfilter f = {.operation = "deleted"};
    struct api_versions v;
    struct api_error e = {0};
    cr_assert_eq(api_versions_list(cli, store, &f, 10, 1, &v, &e), 0, "%s", e.message);
    cr_expect_eq(v.n_bad, 2, "%zu items with a control character were taken", 2 - v.n_bad);
    cr_assert_eq(v.n, 1);
    cr_expect_str_eq(v.items[0].actor_type, "api?[31m_actor");
    cr_expect_str_eq(v.items[0].actor_id, "k?1?");
    cr_expect_str_eq(v.items[0].redacted_at, "2026?");
    api_versions_free(&v);
    api_error_clear(&e);
}
