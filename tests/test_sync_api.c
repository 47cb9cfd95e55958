/* test_sync_api.c - the Memory Stores API bindings (sync/api.h) against a
 * real memstored: create, list over several pages, fetch many, update with
 * a precondition (ok and -ESTALE), rename, delete with an expected hash,
 * path conflicts, unknown ids, exact content round trips, and the errors
 * that must be refused before any request. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "http.h"
#include "msd.h"
#include "sha256.h"

static struct msd srv;
static char *store;
static struct http_client *cli;

static void up(void)
{
    cr_assert_eq(msd_start(&srv, NULL), 0, "memstored did not start");
    store = t_create_store(&srv, "api tests");
    cr_assert_not_null(store);
    struct http_opts o = {.base_url = srv.url, .api_key = "test-key", .max_in_flight = 8,
                          .max_retries = 2, .backoff_base_ms = 10, .backoff_max_ms = 50};
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

TestSuite(api, .init = up, .fini = down, .timeout = 120);

static void make(const char *path, const char *content, struct api_memory *out)
{
    struct api_error e = {0};
    int rc = api_memory_create(cli, store, path, content, strlen(content), out, &e);
    cr_assert_eq(rc, 0, "create %s: %d %ld %s %s", path, rc, e.status, e.type, e.message);
    api_error_clear(&e);
}

Test(api, store_get)
{
    struct api_store s;
    struct api_error e = {0};
    cr_assert_eq(api_store_get(cli, store, &s, &e), 0);
    cr_assert_str_eq(s.id, store);
    cr_assert_str_eq(s.name, "api tests");
    cr_assert_not(s.archived);
    api_store_clear(&s);
    cr_assert_eq(api_store_get(cli, "memstore_nope", &s, &e), -ENOENT);
    cr_assert_eq(e.status, 404);
    cr_assert_str_eq(e.type, "not_found_error");
    cr_assert_null(s.id);
    api_error_clear(&e);
}

Test(api, create_returns_basic_memory)
{
    struct api_memory m;
    make("/notes/todo.md", "buy milk\n", &m);
    char sha[65];
    sha256_hex("buy milk\n", 9, sha);
    cr_assert_eq(strncmp(m.id, "mem_", 4), 0, "%s", m.id);
    cr_assert_str_eq(m.path, "/notes/todo.md");
    cr_assert_str_eq(m.sha, sha);
    cr_assert_eq(m.size, 9);
    cr_assert_null(m.content);
    cr_assert_not_null(m.version_id);
    api_memory_clear(&m);
}

/* 250 memories written in one batch, listed over 3 pages, fetched back. */
Test(api, batch_list_fetch_many)
{
    enum { N = 250 };
    static char paths[N][32], bodies[N][64];
    static struct api_write w[N];
    for (int i = 0; i < N; i++) {
        snprintf(paths[i], sizeof(paths[i]), "/bulk/m%03d.txt", i);
        snprintf(bodies[i], sizeof(bodies[i]), "content of %d\n\"quoted\"\t\x01", i);
        w[i] = (struct api_write){.op = API_WRITE_CREATE, .path = paths[i],
                                  .content = bodies[i], .content_len = strlen(bodies[i])};
    }
    cr_assert_eq(api_memories_write(cli, store, w, N), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(w[i].err, 0, "item %d: %d", i, w[i].err);
        cr_assert_str_eq(w[i].mem.path, paths[i]);
    }
    make("/other.md", "x", NULL);

    struct tresp r = {0};
    t_admin(&srv, "POST", "/admin/stats/reset", NULL, &r);
    tresp_free(&r);
    struct api_list l;
    struct api_error e = {0};
    cr_assert_eq(api_memories_list(cli, store, &l, &e), 0, "%s", e.message);
    cr_assert_eq(l.n, N + 1);
    cr_assert_eq(t_route_count(&srv, "GET /v1/memory_stores/{id}/memories"), 3,
                 "251 memories at 100 a page take 3 pages");
    for (size_t i = 0; i < N; i++) {
        cr_assert_str_eq(l.items[i].path, paths[i]); /* byte-wise path order */
        cr_assert_str_eq(l.items[i].id, w[i].mem.id);
        cr_assert_str_eq(l.items[i].sha, w[i].mem.sha);
        cr_assert_null(l.items[i].content);
    }
    cr_assert_str_eq(l.items[N].path, "/other.md");
    api_list_free(&l);

    /* With a prefix only the bulk ones come back. */
    cr_assert_eq(api_memories_list_prefix(cli, store, "/bulk/", &l, &e), 0);
    cr_assert_eq(l.n, N);
    api_list_free(&l);

    static struct api_fetch f[N];
    for (int i = 0; i < N; i++)
        f[i] = (struct api_fetch){.memory_id = w[i].mem.id};
    cr_assert_eq(api_memories_fetch(cli, store, f, N), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(f[i].err, 0);
        cr_assert_eq(f[i].mem.content_len, strlen(bodies[i]));
        cr_assert(memcmp(f[i].mem.content, bodies[i], strlen(bodies[i])) == 0);
        cr_assert_str_eq(f[i].mem.path, paths[i]);
        api_memory_clear(&f[i].mem);
        api_error_clear(&f[i].e);
        api_write_clear(&w[i]);
    }
}

Test(api, content_roundtrip_exact)
{
    const char *c = "quotes \" and \\ backslash\nnew line\r\ttab \x01\x1f\x7f "
                    "unicode é € 😀 \u2028 end";
    struct api_memory m;
    make("/exact.md", c, &m);
    struct api_fetch f = {.memory_id = m.id};
    cr_assert_eq(api_memories_fetch(cli, store, &f, 1), 0);
    cr_assert_eq(f.mem.content_len, strlen(c));
    cr_assert_str_eq(f.mem.content, c);
    cr_assert_str_eq(f.mem.sha, m.sha);
    api_memory_clear(&f.mem);
    /* Empty content too. */
    struct api_memory e0;
    make("/empty.md", "", &e0);
    f = (struct api_fetch){.memory_id = e0.id};
    cr_assert_eq(api_memories_fetch(cli, store, &f, 1), 0);
    cr_assert_eq(f.mem.content_len, 0);
    cr_assert_not_null(f.mem.content);
    api_memory_clear(&f.mem);
    api_memory_clear(&e0);
    api_memory_clear(&m);
}

Test(api, update_with_precondition)
{
    struct api_memory m, u;
    struct api_error e = {0};
    make("/p.md", "v1", &m);
    char stale[65];
    memcpy(stale, m.sha, 65);
    cr_assert_eq(api_memory_update(cli, store, m.id, NULL, "v2", 2, m.sha, &u, &e), 0);
    char sha2[65];
    sha256_hex("v2", 2, sha2);
    cr_assert_str_eq(u.sha, sha2);
    cr_assert_str_eq(u.id, m.id);
    cr_assert_str_neq(u.version_id, m.version_id);
    api_memory_clear(&u);
    /* The old hash no longer holds. */
    cr_assert_eq(api_memory_update(cli, store, m.id, NULL, "v3", 2, stale, &u, &e), -ESTALE);
    cr_assert_eq(e.status, 409);
    cr_assert_str_eq(e.type, "memory_precondition_failed_error");
    cr_assert_null(u.id);
    api_error_clear(&e);
    /* Without a precondition it applies. */
    cr_assert_eq(api_memory_update(cli, store, m.id, NULL, "v3", 2, NULL, &u, &e), 0);
    api_memory_clear(&u);
    api_memory_clear(&m);
}

Test(api, rename_keeps_id)
{
    struct api_memory m, u;
    struct api_error e = {0};
    make("/old/name.md", "body", &m);
    cr_assert_eq(api_memory_update(cli, store, m.id, "/new/name.md", NULL, 0, m.sha, &u, &e), 0,
                 "%s", e.message);
    cr_assert_str_eq(u.id, m.id);
    cr_assert_str_eq(u.path, "/new/name.md");
    cr_assert_str_eq(u.sha, m.sha);
    api_memory_clear(&u);
    struct api_list l;
    cr_assert_eq(api_memories_list(cli, store, &l, &e), 0);
    cr_assert_eq(l.n, 1);
    cr_assert_str_eq(l.items[0].path, "/new/name.md");
    cr_assert_str_eq(l.items[0].id, m.id);
    api_list_free(&l);
    api_memory_clear(&m);
}

Test(api, delete_with_expected_sha)
{
    struct api_memory m;
    struct api_error e = {0};
    make("/gone.md", "bye", &m);
    char wrong[65];
    sha256_hex("other", 5, wrong);
    cr_assert_eq(api_memory_delete(cli, store, m.id, wrong, &e), -ESTALE);
    cr_assert_str_eq(e.type, "memory_precondition_failed_error");
    api_error_clear(&e);
    cr_assert_eq(api_memory_delete(cli, store, m.id, m.sha, &e), 0);
    struct api_fetch f = {.memory_id = m.id};
    cr_assert_eq(api_memories_fetch(cli, store, &f, 1), -ENOENT);
    cr_assert_eq(f.err, -ENOENT);
    cr_assert_eq(f.e.status, 404);
    api_error_clear(&f.e);
    cr_assert_eq(api_memory_delete(cli, store, m.id, NULL, &e), -ENOENT);
    api_error_clear(&e);
    api_memory_clear(&m);
}

Test(api, path_conflict_and_unknown_ids)
{
    struct api_memory m, x;
    struct api_error e = {0};
    make("/dup.md", "a", &m);
    cr_assert_eq(api_memory_create(cli, store, "/dup.md", "b", 1, &x, &e), -EEXIST);
    cr_assert_str_eq(e.type, "memory_path_conflict_error");
    cr_assert_str_eq(e.conflicting_memory_id, m.id);
    cr_assert_null(x.id);
    api_error_clear(&e);
    /* A path under a file overlaps it. */
    cr_assert_eq(api_memory_create(cli, store, "/dup.md/child", "b", 1, NULL, &e), -EEXIST);
    api_error_clear(&e);
    cr_assert_eq(api_memory_update(cli, store, "mem_unknown", NULL, "z", 1, NULL, NULL, &e),
                 -ENOENT);
    cr_assert_eq(e.status, 404);
    api_error_clear(&e);
    /* Ids are percent-encoded: a slash in one cannot reach another route. */
    cr_assert_eq(api_memory_delete(cli, store, "mem_x/../..", NULL, &e), -ENOENT);
    api_error_clear(&e);
    cr_assert_eq(api_memory_delete(cli, store, "..", NULL, &e), -EINVAL);
    struct api_list l;
    cr_assert_eq(api_memories_list(cli, "memstore_unknown", &l, &e), -ENOENT);
    cr_assert_eq(l.n, 0);
    api_error_clear(&e);
    api_memory_clear(&m);
}

Test(api, refused_content)
{
    struct api_error e = {0};
    struct tresp r = {0};
    t_admin(&srv, "POST", "/admin/stats/reset", NULL, &r);
    tresp_free(&r);
    /* Invalid UTF-8 never leaves the process. */
    cr_assert_eq(api_memory_create(cli, store, "/bin", "\xff\xfe", 2, NULL, &e), -EILSEQ);
    cr_assert_eq(t_route_count(&srv, "POST /v1/memory_stores/{id}/memories"), 0);
    /* Too large: the server answers 413. */
    size_t big = 102401;
    char *b = malloc(big);
    memset(b, 'a', big);
    cr_assert_eq(api_memory_create(cli, store, "/big.md", b, big, NULL, &e), -EFBIG);
    cr_assert_eq(e.status, 413);
    api_error_clear(&e);
    /* Exactly at the limit is fine. */
    cr_assert_eq(api_memory_create(cli, store, "/max.md", b, big - 1, NULL, &e), 0,
                 "%s", e.message);
    free(b);
    /* A bad path is the server's 400. */
    cr_assert_eq(api_memory_create(cli, store, "no-slash", "x", 1, NULL, &e), -EINVAL);
    cr_assert_eq(e.status, 400);
    api_error_clear(&e);
    /* A NUL byte is encoded as \u0000; memstored refuses it with 400. */
    int rc = api_memory_create(cli, store, "/nul.md", "a\0b", 3, NULL, &e);
    cr_assert(rc == 0 || rc == -EINVAL, "rc %d", rc);
    api_error_clear(&e);
}

Test(api, batch_mixed_results)
{
    struct api_memory a, d;
    make("/mix/a.md", "a", &a);
    make("/mix/d.md", "d", &d);
    struct api_write w[] = {
        {.op = API_WRITE_CREATE, .path = "/mix/new.md", .content = "n", .content_len = 1},
        {.op = API_WRITE_CREATE, .path = "/mix/a.md", .content = "x", .content_len = 1},
        {.op = API_WRITE_UPDATE, .memory_id = a.id, .content = "a2", .content_len = 2,
         .sha = a.sha},
        {.op = API_WRITE_DELETE, .memory_id = d.id, .sha = d.sha},
        {.op = API_WRITE_UPDATE, .memory_id = "mem_missing", .content = "q", .content_len = 1},
        {.op = API_WRITE_CREATE, .path = "/mix/bad", .content = "\xc3", .content_len = 1},
    };
    size_t n = sizeof(w) / sizeof(w[0]);
    cr_assert_eq(api_memories_write(cli, store, w, n), -EEXIST); /* the first failure */
    cr_assert_eq(w[0].err, 0);
    cr_assert_str_eq(w[0].mem.path, "/mix/new.md");
    cr_assert_eq(w[1].err, -EEXIST);
    cr_assert_eq(w[2].err, 0);
    cr_assert_eq(w[3].err, 0);
    cr_assert_eq(w[4].err, -ENOENT);
    cr_assert_eq(w[5].err, -EILSEQ);
    cr_assert_eq(w[5].attempts, 0);
    for (size_t i = 0; i < n; i++)
        api_write_clear(&w[i]);
    api_memory_clear(&a);
    api_memory_clear(&d);
}

/* An answer to a single GET that is another memory's document (a proxy's
 * cache, a server's bug) is refused: its bytes are not the memory asked
 * for.  Before the fix it was taken as that memory's content. */
Test(api, a_fetch_answered_with_another_memory_is_refused)
{
    struct api_memory a, b;
    make("/asked.md", "asked\n", &a);
    make("/other.md", "other\n", &b);
    struct api_fetch f = {.memory_id = b.id};
    cr_assert_eq(api_memories_fetch(cli, store, &f, 1), 0);
    /* memstored answers the GET of a with b's document. */
    char *text = t_memory_reply_fault(store, a.id, 1, b.id, "/other.md", "other\n", b.version_id);
    struct tresp r = {0};
    cr_assert_eq(t_admin(&srv, "POST", "/admin/faults", text, &r), 0);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
    free(text);
    api_memory_clear(&f.mem);
    f = (struct api_fetch){.memory_id = a.id};
    cr_expect_eq(api_memories_fetch(cli, store, &f, 1), -EPROTO);
    cr_expect_eq(f.err, -EPROTO, "another memory's document was taken: %s",
                 f.mem.content ? f.mem.content : "(none)");
    cr_expect_null(f.mem.content);
    api_memory_clear(&f.mem);
    api_error_clear(&f.e);
    api_memory_clear(&a);
    api_memory_clear(&b);
}
