/* test_memstored_process.c - memstored as a process: data survives a stop
 * and a restart on the same --db, SIGTERM exits 0, no API key refuses to
 * start, and --seed NAME=DIR imports a tree (printing the seeded line
 * before the listening line) and, on a restart with the same NAME, reuses
 * the store and brings it up to date.  Each test starts and stops its own
 * servers by PID; .fini stops whatever is still running. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "msd.h"

static struct msd srv, srv2;
static char seed_dir[256];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void down(void)
{
    msd_stop(&srv);
    msd_stop(&srv2);
    if (seed_dir[0])
        nftw(seed_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    seed_dir[0] = '\0';
}

TestSuite(process, .fini = down, .timeout = 60);

Test(process, data_survives_restart)
{
    cr_assert_eq(msd_start(&srv, NULL), 0);
    char *st = t_create_store(&srv, "durable");
    char *mem = t_create_memory(&srv, st, "/keep/me.md", "v1");
    cr_assert(st && mem);
    struct tresp r;
    t_req(&srv, "POST", "{\"content\":\"v2\"}", &r, "/v1/memory_stores/%s/memories/%s", st, mem);
    T_ASSERT_STATUS(&r, 200);
    char head[80];
    snprintf(head, sizeof head, "%s", tj_str(r.json, "memory_version_id") ?: "");
    tresp_free(&r);
    char *archived = t_create_store(&srv, "old");
    t_req(&srv, "POST", NULL, &r, "/v1/memory_stores/%s/archive", archived);
    tresp_free(&r);

    char dir[256];
    snprintf(dir, sizeof dir, "%s", srv.dir);
    msd_stop_keep(&srv);
    int rc = msd_start_in(&srv2, dir, NULL);
    cr_assert_eq(rc, 0, "restart on the same db failed: %d", rc);
    cr_expect_neq(srv2.pid, 0);

    t_req(&srv2, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", st, mem);
    T_ASSERT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "content") ?: "", "v2");
    cr_expect_str_eq(tj_str(r.json, "path") ?: "", "/keep/me.md");
    cr_expect_str_eq(tj_str(r.json, "memory_version_id") ?: "", head);
    tresp_free(&r);
    t_req(&srv2, "GET", NULL, &r, "/v1/memory_stores/%s/memory_versions?memory_id=%s", st, mem);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 2);
    tresp_free(&r);
    t_req(&srv2, "GET", NULL, &r, "/v1/memory_stores/%s", archived);
    cr_expect_not_null(tj_str(r.json, "archived_at"), "archive survives: %s", r.body);
    tresp_free(&r);
    /* It keeps working for writes; a path still conflicts. */
    t_req(&srv2, "POST", "{\"path\":\"/keep/me.md\",\"content\":\"dup\"}", &r,
          "/v1/memory_stores/%s/memories", st);
    T_EXPECT_ERROR(&r, 409, "memory_path_conflict_error");
    tresp_free(&r);
    char *mem2 = t_create_memory(&srv2, st, "/new.md", "after restart");
    cr_expect_not_null(mem2);
    free(mem2);
    free(st);
    free(mem);
    free(archived);
}

Test(process, sigterm_exits_zero)
{
    cr_assert_eq(msd_start(&srv, NULL), 0);
    char *st = t_create_store(&srv, "x");
    free(st);
    int status = msd_terminate(&srv);
    cr_expect(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "memstored must exit 0 on SIGTERM (status 0x%x)", status);
}

Test(process, refuses_to_start_without_an_api_key)
{
    unsetenv("MEMSTORED_API_KEYS");
    const char *args[] = {"--db", "x.db", NULL};
    int rc = msd_start_raw(&srv, NULL, args, NULL);
    cr_expect_lt(rc, 0, "memstored started without any API key");
}

static void write_file(const char *rel, const char *content)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", seed_dir, rel);
    /* mkdir -p of the parents. */
    for (char *p = path + strlen(seed_dir) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    fwrite(content, 1, strlen(content), f);
    fclose(f);
}

/* Finds "seeded name=NAME id=ID memories=N" in out; copies the id. */
static bool seeded_line(const char *out, const char *name, char id[128], long *n)
{
    char prefix[160];
    snprintf(prefix, sizeof prefix, "seeded name=%s id=", name);
    const char *l = out ? strstr(out, prefix) : NULL;
    if (!l)
        return false;
    l += strlen(prefix);
    size_t len = strcspn(l, " \n");
    if (len == 0 || len >= 128)
        return false;
    memcpy(id, l, len);
    id[len] = '\0';
    const char *m = strstr(l, " memories=");
    if (!m)
        return false;
    char *end;
    *n = strtol(m + 10, &end, 10);
    return end != m + 10;
}

static char *content_of(struct msd *m, const char *st, const char *path)
{
    char url[512];
    long err;
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories?view=full", st);
    cJSON *all = t_list_all(m, url, NULL, &err);
    cr_assert_not_null(all);
    char *out = NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, all) if (strcmp(tj_str(it, "path") ?: "", path) == 0) out =
        strdup(tj_str(it, "content") ?: "(null)");
    cJSON_Delete(all);
    return out;
}

static int memory_total(struct msd *m, const char *st)
{
    char url[512];
    long err;
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories", st);
    cJSON *all = t_list_all(m, url, NULL, &err);
    cr_assert_not_null(all);
    int n = cJSON_GetArraySize(all);
    cJSON_Delete(all);
    return n;
}

Test(process, seed_imports_a_tree_and_reuses_the_store)
{
    snprintf(seed_dir, sizeof seed_dir, "/tmp/msd-seed.XXXXXX");
    cr_assert_not_null(mkdtemp(seed_dir));
    write_file("top.md", "top\n");
    write_file("notes/todo.md", "- milk\n");
    write_file("notes/deep/x/y.md", "deep");
    write_file("empty.md", "");
    write_file("caf\xc3\xa9.md", "\xc3\xa9t\xc3\xa9");

    char arg[300];
    snprintf(arg, sizeof arg, "Seeded Notes=%s", seed_dir);
    const char *args[] = {"--seed", arg, NULL};
    cr_assert_eq(msd_start(&srv, args), 0);
    char id[128];
    long n = -1;
    cr_assert(seeded_line(srv.out, "Seeded Notes", id, &n), "no seeded line in: %s",
              srv.out ?: "");
    cr_expect_eq(n, 5, "memories=%ld, want 5", n);
    cr_expect(strncmp(id, "memstore_", 9) == 0);
    cr_expect(strstr(srv.out, "seeded") < strstr(srv.out, "listening url="),
              "seeded line comes before the listening line");

    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s", id);
    T_EXPECT_STATUS(&r, 200);
    cr_expect_str_eq(tj_str(r.json, "name") ?: "", "Seeded Notes");
    tresp_free(&r);
    struct {
        const char *path, *content;
    } want[] = {{"/top.md", "top\n"},
                {"/notes/todo.md", "- milk\n"},
                {"/notes/deep/x/y.md", "deep"},
                {"/empty.md", ""},
                {"/caf\xc3\xa9.md", "\xc3\xa9t\xc3\xa9"}};
    for (int i = 0; i < 5; i++) {
        char *c = content_of(&srv, id, want[i].path);
        cr_expect_not_null(c, "%s not seeded", want[i].path);
        if (c)
            cr_expect_str_eq(c, want[i].content, "%s", want[i].path);
        free(c);
    }
    cr_expect_eq(memory_total(&srv, id), 5);

    /* Restart on the same db with the tree changed: same store, one file
     * updated, one added. */
    char dir[256];
    snprintf(dir, sizeof dir, "%s", srv.dir);
    msd_stop_keep(&srv);
    write_file("top.md", "top, edited\n");
    write_file("notes/new.md", "new");
    cr_assert_eq(msd_start_in(&srv2, dir, args), 0);
    char id2[128];
    cr_assert(seeded_line(srv2.out, "Seeded Notes", id2, &n), "no seeded line: %s",
              srv2.out ?: "");
    cr_expect_str_eq(id2, id, "a seed NAME naming a live store reuses it");
    char *c = content_of(&srv2, id, "/top.md");
    cr_expect_str_eq(c ?: "(missing)", "top, edited\n");
    free(c);
    c = content_of(&srv2, id, "/notes/new.md");
    cr_expect_str_eq(c ?: "(missing)", "new");
    free(c);
    cr_expect_eq(memory_total(&srv2, id), 6);
    t_api(&srv2, "GET", "/v1/memory_stores", NULL, &r);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 1, "no second store: %s", r.body);
    tresp_free(&r);
}

Test(process, two_seeds)
{
    snprintf(seed_dir, sizeof seed_dir, "/tmp/msd-seed.XXXXXX");
    cr_assert_not_null(mkdtemp(seed_dir));
    write_file("a/one.md", "1");
    write_file("b/two.md", "2");
    write_file("b/sub/three.md", "3");
    char a1[300], a2[300];
    snprintf(a1, sizeof a1, "A=%s/a", seed_dir);
    snprintf(a2, sizeof a2, "B=%s/b", seed_dir);
    const char *args[] = {"--seed", a1, "--seed", a2, NULL};
    cr_assert_eq(msd_start(&srv, args), 0);
    char ida[128], idb[128];
    long na = -1, nb = -1;
    cr_expect(seeded_line(srv.out, "A", ida, &na), "%s", srv.out ?: "");
    cr_expect(seeded_line(srv.out, "B", idb, &nb), "%s", srv.out ?: "");
    cr_expect_eq(na, 1);
    cr_expect_eq(nb, 2);
    cr_expect_str_neq(ida, idb);
    char *c = content_of(&srv, idb, "/sub/three.md");
    cr_expect_str_eq(c ?: "(missing)", "3");
    free(c);
}

static void *slow_request(void *arg)
{
    struct tresp r;
    if (t_api(arg, "GET", "/v1/memory_stores", NULL, &r) == 0)
        tresp_free(&r);
    return NULL;
}

/* SIGTERM while a request sleeps in a latency fault: memstored stops at
 * once, exit 0.  Before, it waited for the sleep to end (here ten
 * minutes), past the test's timeout. */
Test(process, sigterm_ends_a_latency_fault_s_sleep)
{
    cr_assert_eq(msd_start(&srv, NULL), 0);
    struct tresp r;
    t_admin(&srv, "POST", "/admin/faults",
            "{\"action\":\"latency\",\"latency_ms\":600000,\"count\":0}", &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, slow_request, &srv), 0);
    for (int i = 0; i < 100 && t_route_count(&srv, "GET /v1/memory_stores") < 1; i++)
        usleep(50 * 1000);
    cr_assert_eq(t_route_count(&srv, "GET /v1/memory_stores"), 1);
    int status = msd_terminate(&srv);
    cr_expect(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "memstored must exit 0 on SIGTERM (status 0x%x)", status);
    pthread_join(t, NULL);
}
