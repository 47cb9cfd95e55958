/* test_mount_refresh.c - remote changes reach the mount within one sync
 * interval; a reused cache directory downloads nothing again; injected
 * 429 and 500 answers during mount and sync are retried. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mnt.h"

static struct mnt_env E;
static char *store;

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Refresh");
    cr_assert_not_null(store);
}

static void teardown(void)
{
    mnt_teardown(&E);
    free(store);
    store = NULL;
}

TestSuite(mount_refresh, .init = setup, .fini = teardown, .timeout = 180);

/* The sync interval of the tests is the minimum, 5 s; one interval plus
 * slack. */
#define WITHIN 9

static char *memory_id_of(const char *path)
{
    struct tresp r;
    char q[600];
    snprintf(q, sizeof(q), "/v1/memory_stores/%s/memories?limit=100", store);
    cr_assert_eq(t_api(&E.msd, "GET", q, NULL, &r), 0);
    char *id = NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, tj_get(r.json, "data"))
    {
        const char *p = tj_str(it, "path");
        if (p && strcmp(p, path) == 0)
            id = strdup(tj_str(it, "id"));
    }
    tresp_free(&r);
    return id;
}

/* method on /v1/memory_stores/STORE/memories/ID. */
static long api(const char *method, const char *body, const char *id)
{
    char path[600];
    snprintf(path, sizeof(path), "/v1/memory_stores/%s/memories/%s", store, id);
    struct tresp r;
    cr_assert_eq(t_api(&E.msd, method, path, body, &r), 0);
    long st = r.status;
    tresp_free(&r);
    return st;
}

Test(mount_refresh, create_change_rename_delete_show_up)
{
    free(t_create_memory(&E.msd, store, "/keep.md", "unchanged\n"));
    free(t_create_memory(&E.msd, store, "/edit.md", "first\n"));
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "r", false, "", &out), 0, "%s", out);
    free(out);
    /* Warm the kernel caches: names, attributes and pages. */
    mnt_sh(&E, NULL, "cat $MNT/r/edit.md $MNT/r/keep.md; ls $MNT/r/new 2>/dev/null");

    free(t_create_memory(&E.msd, store, "/new/deep/file.md", "fresh\n"));
    char *edit = memory_id_of("/edit.md");
    cr_assert_not_null(edit);
    cr_assert_eq(api("POST", "{\"content\":\"second version, longer\\n\"}", edit), 200);

    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(cat $MNT/r/new/deep/file.md)\" = fresh"),
              "a remote create did not appear");
    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(cat $MNT/r/edit.md)\" = 'second version, longer'"),
              "a remote change did not reach cat");
    mnt_sh(&E, &out, "stat -c %%s $MNT/r/edit.md");
    cr_expect_str_eq(out, "23\n");
    free(out);

    /* A rename through the API keeps the inode number. */
    mnt_sh(&E, &out, "stat -c %%i $MNT/r/edit.md");
    long ino = strtol(out, NULL, 10);
    free(out);
    cr_assert_eq(api("POST", "{\"path\":\"/moved/edit.md\"}", edit), 200);
    cr_expect(mnt_wait_sh(&E, WITHIN, "test -f $MNT/r/moved/edit.md && ! test -e $MNT/r/edit.md"),
              "a remote rename did not show");
    mnt_sh(&E, &out, "stat -c %%i $MNT/r/moved/edit.md");
    cr_expect_eq(strtol(out, NULL, 10), ino, "the inode number changed with a rename");
    free(out);

    /* A delete removes the file and the directories it implied. */
    char *fresh = memory_id_of("/new/deep/file.md");
    cr_assert_eq(api("DELETE", NULL, fresh), 200);
    cr_expect(mnt_wait_sh(&E, WITHIN, "! test -e $MNT/r/new"), "a remote delete did not show");
    mnt_sh(&E, &out, "cd $MNT/r && find . | LC_ALL=C sort");
    cr_expect_str_eq(out, ".\n./.anthropic-memory-store\n./keep.md\n./moved\n./moved/edit.md\n");
    free(out);
    mnt_sh(&E, &out, "cat $MNT/r/keep.md");
    cr_expect_str_eq(out, "unchanged\n");
    free(out);
    free(edit);
    free(fresh);
}

Test(mount_refresh, marker_path_on_the_server_is_skipped)
{
    free(t_create_memory(&E.msd, store, "/.anthropic-memory-store", "not the marker"));
    free(t_create_memory(&E.msd, store, "/real.md", "real\n"));
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "m", false, "", &out), 0, "%s", out);
    cr_expect(strstr(out, "the server listed the reserved marker path; skipping"),
              "no warning was logged: %s", out);
    free(out);
    mnt_sh(&E, &out, "cat $MNT/m/.anthropic-memory-store");
    char want[300];
    snprintf(want, sizeof(want), "version 1\n%s", store);
    cr_expect_str_eq(out, want);
    free(out);
}

/* A memory below the marker's path cannot be a file either (no directory
 * takes the marker's name): skipped, and the root lists the marker once. */
Test(mount_refresh, a_memory_below_the_marker_path_is_skipped)
{
    char *below = t_create_memory(&E.msd, store, "/.anthropic-memory-store/below.md", "below");
    cr_assert_not_null(below, "memstored refused a memory below the marker's path");
    free(below);
    free(t_create_memory(&E.msd, store, "/real.md", "real\n"));
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "m", false, "", &out), 0, "%s", out);
    cr_expect(strstr(out, "the server listed a path that cannot be a file; skipping"),
              "no warning was logged: %s", out);
    free(out);
    mnt_sh(&E, &out, "ls -A $MNT/m");
    cr_expect_str_eq(out, ".anthropic-memory-store\nreal.md\n");
    free(out);
    mnt_sh(&E, &out, "cat $MNT/m/.anthropic-memory-store");
    char want[300];
    snprintf(want, sizeof(want), "version 1\n%s", store);
    cr_expect_str_eq(out, want);
    free(out);
}

/* Creates n memories /d<i%10>/m<i>.md, several requests at a time. */
static void make_many(int n)
{
    char **bodies = calloc((size_t)n, sizeof(*bodies));
    long *status = calloc((size_t)n, sizeof(*status));
    for (int i = 0; i < n; i++) {
        char path[64], content[64];
        snprintf(path, sizeof(path), "/d%d/m%04d.md", i % 10, i);
        snprintf(content, sizeof(content), "memory number %d\n", i);
        bodies[i] = tj_memory_body(path, content);
    }
    char p[300];
    snprintf(p, sizeof(p), "/v1/memory_stores/%s/memories", store);
    cr_assert_eq(t_api_multi(&E.msd, "POST", p, (const char *const *)bodies, (size_t)n, 8,
                             status, NULL), 0);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(status[i], 200, "create %d: %ld", i, status[i]);
        free(bodies[i]);
    }
    free(bodies);
    free(status);
}

#define FETCH_ROUTE "GET /v1/memory_stores/{id}/memories/{id}"

Test(mount_refresh, reused_cache_downloads_nothing_again, .timeout = 240)
{
    make_many(500);
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "c", false, "", &out), 0, "%s", out);
    free(out);
    /* The background prefetch brings every file into the cache. */
    cr_assert(mnt_wait_sh(&E, 60, "$MFS status --json | grep -q '\"content_missing\":0,'"),
              "the prefetch did not finish");
    /* Content comes one memory a GET or 20 a list page (the bulk
     * prefetch); beside the mount's 5 pages of listing. */
    cr_expect_geq(t_route_count(&E.msd, FETCH_ROUTE) +
                      t_route_count(&E.msd, "GET /v1/memory_stores/{id}/memories"),
                  5 + 500 / 20);
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount --all"), 0, "%s", out);
    free(out);

    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "POST", "/admin/stats/reset", NULL, &r), 0);
    tresp_free(&r);
    cr_assert_eq(mnt_mount(&E, store, "c", false, "", &out), 0, "%s", out);
    free(out);
    /* Read every file: all of it comes from the cache. */
    cr_assert_eq(mnt_sh(&E, &out, "cat $MNT/c/d*/*.md | wc -l"), 0);
    cr_expect_str_eq(out, "500\n");
    free(out);
    mnt_sh(&E, &out, "cat $MNT/c/d7/m0427.md");
    cr_expect_str_eq(out, "memory number 427\n");
    free(out);
    cr_expect_eq(t_route_count(&E.msd, FETCH_ROUTE), 0, "content was downloaded again");
    cr_expect_geq(t_route_count(&E.msd, "GET /v1/memory_stores/{id}/memories"), 5,
                  "the listing should take 5 pages of 100");
}

static void add_fault(const char *json)
{
    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "POST", "/admin/faults", json, &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
}

Test(mount_refresh, faults_during_mount_and_sync_are_retried)
{
    free(t_create_memory(&E.msd, store, "/a.md", "a\n"));
    /* The mount's listing first gets two 429s (retry-after 1 s), its
     * content fetch a 500, the store retrieval a 529. */
    add_fault("{\"action\":\"status\",\"status\":529,\"count\":1,\"method\":\"GET\","
              "\"path\":\"/v1/memory_stores/*\"}");
    add_fault("{\"action\":\"status\",\"status\":429,\"retry_after\":1,\"count\":2,"
              "\"method\":\"GET\",\"path\":\"/v1/memory_stores/*/memories\"}");
    add_fault("{\"action\":\"status\",\"status\":500,\"count\":1,\"method\":\"GET\","
              "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "f", false, "", &out), 0, "%s", out);
    free(out);
    mnt_sh(&E, &out, "cat $MNT/f/a.md");
    cr_expect_str_eq(out, "a\n");
    free(out);

    /* During syncs: 500s on the listing, then a change must still arrive.
     * No version feed (404): the syncs list the store, and meet them
     * (with the feed they read it and fetched b.md alone: the 500s were
     * never met, until 6 December 2026). */
    add_fault("{\"action\":\"status\",\"status\":404,\"count\":0,\"method\":\"GET\","
              "\"path\":\"/v1/memory_stores/*/memory_versions\"}");
    long lists = t_route_count(&E.msd, "GET /v1/memory_stores/{id}/memories");
    add_fault("{\"action\":\"status\",\"status\":500,\"count\":3,\"method\":\"GET\","
              "\"path\":\"/v1/memory_stores/*/memories\"}");
    free(t_create_memory(&E.msd, store, "/b.md", "b\n"));
    cr_expect(mnt_wait_sh(&E, 2 * WITHIN, "test \"$(cat $MNT/f/b.md)\" = b"),
              "a change did not arrive after injected 500s");
    /* The 500s were met: three listings refused, then the one that
     * brought b.md. */
    lists = t_route_count(&E.msd, "GET /v1/memory_stores/{id}/memories") - lists;
    cr_expect_geq(lists, 4, "the syncs listed the store %ld times: the 500s were never met",
                  lists);
    /* The mount kept working throughout. */
    mnt_sh(&E, &out, "cat $MNT/f/a.md");
    cr_expect_str_eq(out, "a\n");
    free(out);
}
