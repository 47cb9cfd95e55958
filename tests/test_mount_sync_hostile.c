/* test_mount_sync_hostile.c - a server that answers wrongly (memstored's
 * reply fault serves a canned answer) never costs a local file: an upload
 * answered with another memory's id is refused and the file kept; a
 * malformed item, a duplicate path or a duplicate id in a listing is left
 * out with one warning, the rest of the listing applied; content over the
 * API's limit is not accepted.  Each failed before the fix (issue 8, case
 * 6): the file disappeared, or the whole listing (so the mount) failed.
 * A cold mount lists by directory; answers that do not fit that are
 * listed page by page instead. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {"/a.md", "alpha\n", "/b.md", "beta\n", NULL};

static void setup(void)
{
    sy_start(seed);
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_hostile, .init = setup, .fini = teardown, .timeout = 150);

/* The memory at path as the API returns it (view=basic), as JSON text. */
static char *memory_doc(const char *path)
{
    char *id = sy_id(path);
    cr_assert_not_null(id);
    struct tresp r;
    cr_assert_eq(t_req(&E.msd, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s?view=basic",
                       store, id), 200);
    char *doc = cJSON_PrintUnformatted(r.json);
    tresp_free(&r);
    free(id);
    return doc;
}

/* The store's first listing page (view=basic), as cJSON. */
static cJSON *listing_page(void)
{
    struct tresp r;
    cr_assert_eq(t_req(&E.msd, "GET", NULL, &r,
                       "/v1/memory_stores/%s/memories?view=basic&limit=100", store), 200);
    cJSON *page = cJSON_Duplicate(r.json, true);
    tresp_free(&r);
    return page;
}

/* From now on every listing of the store answers page (owned here). */
static void serve_listing(cJSON *page)
{
    char *body = cJSON_PrintUnformatted(page);
    char *fault = NULL;
    cr_assert(asprintf(&fault, "{\"action\":\"reply\",\"count\":0,\"method\":\"GET\","
                               "\"path\":\"/v1/memory_stores/*/memories\",\"body\":%s}", body) > 0);
    sy_fault(fault);
    free(fault);
    free(body);
    cJSON_Delete(page);
}

/* An item of the page (by path) duplicated, with fields changed. */
static cJSON *copy_item(cJSON *page, const char *path)
{
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(page, "data"))
    {
        const char *p = tj_str(it, "path");
        if (p && strcmp(p, path) == 0)
            return cJSON_Duplicate(it, true);
    }
    cr_assert_fail("no %s in the listing", path);
    return NULL;
}

static void set_str(cJSON *o, const char *k, const char *v)
{
    cJSON_ReplaceItemInObject(o, k, cJSON_CreateString(v));
}

/* Lines of the mount's own output (where the daemon logs until it is
 * mounted) and of its log file that hold a and b. */
static int lines_with(const char *mount_out, const char *a, const char *b)
{
    char *text = NULL;
    char *log = sy_log();
    cr_assert(asprintf(&text, "%s\n%s", mount_out ? mount_out : "", log) > 0);
    free(log);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, a) && (!b || strstr(line, b)))
            n++;
    free(text);
    return n;
}

/* The mount shows exactly "a.md b.md" with their seeded content. */
static void expect_files_intact(void)
{
    char *out = NULL;
    cr_expect_eq(sy_run(&out, "ls; cat a.md b.md"), 0, "%s", out);
    cr_expect_str_eq(out, "a.md\nb.md\nalpha\nbeta\n", "the mount changed");
    free(out);
}

Test(mount_sync_hostile, a_create_answered_with_another_memory_is_refused)
{
    sy_mount(false, "");
    sy_after_sync();
    char *doc = memory_doc("/a.md");
    char *fault = NULL;
    cr_assert(asprintf(&fault, "{\"action\":\"reply\",\"count\":1,\"method\":\"POST\","
                               "\"path\":\"/v1/memory_stores/*/memories\",\"body\":%s}", doc) > 0);
    sy_fault(fault);
    free(fault);
    free(doc);
    cr_assert_eq(sy_run(NULL, "echo new > n.md"), 0);
    cr_assert(sy_wait_log("an upload with a memory another file has", "path=/n.md", 1, WITHIN),
              "the foreign answer was not refused:\n%s", sy_log());
    /* The fault is used up: the next sync creates n.md for real. */
    const char *const want[] = {"/a.md", "alpha\n", "/b.md", "beta\n", "/n.md", "new\n", NULL};
    char *last = NULL;
    cr_assert(sy_wait_server(want, 2 * WITHIN, &last), "n.md never reached the store: %s", last);
    free(last);
    sy_after_sync();
    char *out = NULL;
    cr_expect_eq(sy_run(&out, "cat a.md n.md"), 0, "%s", out);
    cr_expect_str_eq(out, "alpha\nnew\n", "a file was lost or changed");
    free(out);
    char *bad = sy_check_hashes();
    cr_expect_null(bad, "%s", bad);
    free(bad);
}

Test(mount_sync_hostile, a_malformed_listing_item_is_left_out_once)
{
    cJSON *page = listing_page();
    cJSON *data = cJSON_GetObjectItem(page, "data");
    const char *kinds[][2] = {{"path", "relative.md"}, {"id", ""}, {"size", "-1"}};
    for (size_t i = 0; i < 3; i++) {
        cJSON *x = copy_item(page, "/a.md");
        if (strcmp(kinds[i][0], "size") == 0) {
            cJSON_ReplaceItemInObject(x, "content_size_bytes", cJSON_CreateNumber(-1));
            set_str(x, "id", "mem_negative_size");
            set_str(x, "path", "/negative.md");
        } else {
            set_str(x, kinds[i][0], kinds[i][1]);
            if (strcmp(kinds[i][0], "path") == 0)
                set_str(x, "id", "mem_relative");
        }
        cJSON_AddItemToArray(data, x);
    }
    serve_listing(page);
    char *out = NULL;
    int rc = mnt_mount(&E, store, "s", false, "", &out);
    cr_assert_eq(rc, 0, "one malformed item refused the mount: %s", out);
    sy_after_sync();
    sy_after_sync();
    expect_files_intact();
    cr_expect_eq(lines_with(out, "the server listed a malformed memory", NULL), 3,
                 "not one warning per malformed item:\n%s\n%s", out, sy_log_grep("server listed"));
    free(out);
}

/* A malformed item for a memory the cache knows: that file is held as it
 * is, not taken for deleted remotely. */
Test(mount_sync_hostile, a_known_memory_listed_malformed_is_held)
{
    sy_mount(false, "");
    sy_after_sync();
    cJSON *page = listing_page();
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(page, "data"))
    {
        const char *p = tj_str(it, "path");
        if (p && strcmp(p, "/b.md") == 0)
            cJSON_ReplaceItemInObject(it, "content_sha256", cJSON_CreateString("not-a-hash"));
    }
    serve_listing(page);
    /* No version feed: every sync lists the store (the fallback). */
    sy_fault("{\"action\":\"status\",\"status\":404,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memory_versions\"}");
    sy_after_sync();
    sy_after_sync();
    expect_files_intact();
    cr_expect_eq(sy_log_count("the server listed a malformed memory", "path=/b.md"), 1,
                 "%s", sy_log_grep("server listed"));
}

Test(mount_sync_hostile, duplicate_paths_and_ids_are_resolved_the_same_way_every_time)
{
    cJSON *page = listing_page();
    cJSON *data = cJSON_GetObjectItem(page, "data");
    /* A second memory at a.md's path (its id sorts after every real id),
     * and b.md's id listed a second time at another path. */
    cJSON *dup_path = copy_item(page, "/a.md");
    set_str(dup_path, "id", "mem_zzzzzzzz_duplicate");
    cJSON_AddItemToArray(data, dup_path);
    cJSON *dup_id = copy_item(page, "/b.md");
    set_str(dup_id, "path", "/c.md");
    cJSON_AddItemToArray(data, dup_id);
    serve_listing(page);
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "s", false, "", &out), 0, "%s", out);
    sy_after_sync();
    sy_after_sync();
    expect_files_intact();
    cr_expect_eq(lines_with(out, "two memories at one path", "path=/a.md"), 1, "%s\n%s", out,
                 sy_log_grep("server listed"));
    cr_expect_eq(lines_with(out, "one memory at two paths", "path=/c.md"), 1, "%s\n%s", out,
                 sy_log_grep("server listed"));
    free(out);
}

Test(mount_sync_hostile, content_over_the_limit_is_not_accepted)
{
    /* Every retrieve answers 102,401 bytes, consistently hashed and sized. */
    size_t n = 102401;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\0';
    char *id = sy_id("/a.md");
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "type", "memory");
    cJSON_AddStringToObject(doc, "id", id);
    cJSON_AddStringToObject(doc, "memory_store_id", store);
    cJSON_AddStringToObject(doc, "path", "/a.md");
    cJSON_AddStringToObject(doc, "content", big);
    cJSON_AddStringToObject(doc, "content_sha256", t_sha(big));
    cJSON_AddNumberToObject(doc, "content_size_bytes", (double)n);
    cJSON_AddStringToObject(doc, "memory_version_id", "memver_big");
    cJSON_AddStringToObject(doc, "created_at", "2026-01-01T00:00:00Z");
    cJSON_AddStringToObject(doc, "updated_at", "2026-01-01T00:00:00Z");
    char *body = cJSON_PrintUnformatted(doc);
    char *fault = NULL;
    cr_assert(asprintf(&fault, "{\"action\":\"reply\",\"count\":0,\"method\":\"GET\","
                               "\"path\":\"/v1/memory_stores/*/memories/*\",\"body\":%s}", body) > 0);
    sy_fault(fault);
    free(fault);
    free(body);
    cJSON_Delete(doc);
    free(big);
    free(id);
    sy_mount(false, "");
    char *out = NULL;
    cr_expect_neq(sy_run(&out, "cat a.md"), 0, "content over the limit was served: %.40s", out);
    free(out);
    char *k = mnt_q(&E, "SELECT count(*) FROM blobs WHERE length(data) > 102400");
    cr_expect_str_eq(k, "0", "content over the limit was stored in the cache");
    free(k);
    cr_expect_geq(sy_log_count("malformed response", "102400"), 1, "%s", sy_log_grep("malformed"));
    /* Once the server behaves, the real content comes. */
    sy_clear_faults();
    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s/a.md')\" = alpha", mnt),
              "the real content never came");
}

#define NOT_TREE "cannot list the store by directory"

/* Mounts as sy_mount does; how many lines of what the mount command said
 * (its listing runs before it detaches) hold a and b (b may be NULL). */
static int mount_saying(const char *a, const char *b)
{
    char *out = NULL;
    int rc = mnt_mount(&E, store, "s", false, "--sync-interval 3600", &out);
    cr_assert_eq(rc, 0, "mount failed: %s", out);
    int n = 0;
    for (char *l = out, *e; l && *l; l = e ? e + 1 : NULL) {
        e = strchr(l, '\n');
        if (e)
            *e = '\0';
        n += strstr(l, a) && (!b || strstr(l, b));
        if (!e)
            break;
    }
    free(out);
    return n;
}

/* A cold mount lists the store by directory (api_memories_list_tree): a
 * server whose depth=1 answer says a memory lies at /x/deep.md but then
 * lists nothing under /x/ (a depth it ignores: the item is not at the
 * root) is not trusted; the mount lists it page by page, with one warning,
 * and shows exactly what the plain listing holds. */
Test(mount_sync_hostile, a_cold_mount_not_listable_by_directory_lists_page_by_page)
{
    sy_fault("{\"action\":\"reply\",\"count\":0,\"method\":\"GET\",\"query\":\"depth=1\","
             "\"path\":\"/v1/memory_stores/*/memories\",\"body\":{\"data\":[{\"type\":\"memory\","
             "\"id\":\"mem_deep\",\"memory_version_id\":\"memver_deep\",\"path\":\"/x/deep.md\","
             "\"content_sha256\":"
             "\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\","
             "\"content_size_bytes\":0}],\"next_page\":null}}");
    cr_expect_eq(mount_saying(NOT_TREE, "not as documented"), 1, "no warning, or more than one");
    expect_files_intact();
}

/* Only a store the cache holds nothing of is listed by directory: a warm
 * mount lists page by page (a depth=1 request would fail here, and say so
 * in the log), so a listing that missed a memory could never remove or
 * re-create a local file. */
Test(mount_sync_hostile, only_a_cold_mount_lists_by_directory)
{
    sy_fault("{\"action\":\"status\",\"status\":400,\"count\":1,\"method\":\"GET\","
             "\"query\":\"depth=1\",\"path\":\"/v1/memory_stores/*/memories\"}");
    cr_expect_eq(mount_saying(NOT_TREE, "HTTP 400"), 1, "the cold mount did not list by "
                 "directory");
    expect_files_intact();
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount '%s'", mnt), 0, "%s", out);
    free(out);
    sy_fault("{\"action\":\"status\",\"status\":400,\"count\":0,\"method\":\"GET\","
             "\"query\":\"depth=1\",\"path\":\"/v1/memory_stores/*/memories\"}");
    cr_expect_eq(mount_saying(NOT_TREE, NULL), 0, "the warm mount listed by directory");
    expect_files_intact();
    cr_expect_eq(sy_log_count(NOT_TREE, NULL), 0, "%s", sy_log_grep(NOT_TREE));
}
