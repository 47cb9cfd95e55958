/* test_mount_sync_util.c - the helpers of test_mount_sync.h, linked into
 * each sync-back mount test.  Owns the suite's globals (E, store, mnt);
 * Criterion runs the tests of a binary one at a time (-j1), each in its
 * own process, so no locking. */
#include "test_mount_sync.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sha256.h"

struct mnt_env E;
char *store;
char mnt[400];

void sy_start(const char *const *seed)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Sync Test");
    cr_assert_not_null(store);
    for (size_t i = 0; seed && seed[i]; i += 2) {
        char *id = t_create_memory(&E.msd, store, seed[i], seed[i + 1]);
        cr_assert_not_null(id, "cannot create %s", seed[i]);
        free(id);
    }
    snprintf(mnt, sizeof(mnt), "%s/s", E.mnt);
}

void sy_mount(bool ro, const char *extra)
{
    char *out = NULL;
    int rc = mnt_mount(&E, store, "s", ro, extra, &out);
    cr_assert_eq(rc, 0, "mount failed: %s", out);
    free(out);
}

void sy_remount(const char *extra)
{
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount %s", mnt), 0, "%s", out);
    free(out);
    sy_mount(false, extra);
}

void sy_stop(void)
{
    mnt_teardown(&E);
    free(store);
    store = NULL;
}

int sy_run(char **out, const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    cr_assert(vasprintf(&cmd, fmt, ap) > 0);
    va_end(ap);
    int rc = mnt_sh(&E, out, "cd '%s' && { %s\n}", mnt, cmd);
    free(cmd);
    return rc;
}

cJSON *sy_list(void)
{
    char q[300];
    snprintf(q, sizeof(q), "/v1/memory_stores/%s/memories?view=full&limit=20", store);
    long err = 0;
    cJSON *l = t_list_all(&E.msd, q, NULL, &err);
    cr_assert_not_null(l, "cannot list the store: %ld", err);
    return l;
}

const cJSON *sy_find(const cJSON *list, const char *path)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        const char *p = tj_str(it, "path");
        if (p && strcmp(p, path) == 0)
            return it;
    }
    return NULL;
}

static char *field_at(const char *path, const char *field)
{
    cJSON *l = sy_list();
    const cJSON *m = sy_find(l, path);
    const char *v = m ? tj_str(m, field) : NULL;
    char *r = v ? strdup(v) : NULL;
    cJSON_Delete(l);
    return r;
}

char *sy_id(const char *path)
{
    return field_at(path, "id");
}

char *sy_content(const char *path)
{
    return field_at(path, "content");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Joins "path=content" entries in path order (byte-wise). */
static char *join_sorted(char **v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_str);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s%s", i ? "|" : "", v[i]);
        free(v[i]);
    }
    fclose(f);
    free(v);
    return buf;
}

char *sy_server_state(void)
{
    cJSON *l = sy_list();
    size_t n = (size_t)cJSON_GetArraySize(l), k = 0;
    char **v = calloc(n + 1, sizeof(*v));
    const cJSON *it;
    cJSON_ArrayForEach(it, l)
    {
        const char *p = tj_str(it, "path"), *c = tj_str(it, "content");
        cr_assert(asprintf(&v[k++], "%s=%s", p ? p : "?", c ? c : "(null)") > 0);
    }
    cJSON_Delete(l);
    return join_sorted(v, k);
}

char *sy_expect_state(const char *const *expect)
{
    size_t n = 0;
    while (expect[2 * n])
        n++;
    char **v = calloc(n + 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        cr_assert(asprintf(&v[i], "%s=%s", expect[2 * i], expect[2 * i + 1]) > 0);
    return join_sorted(v, n);
}

bool sy_wait_server(const char *const *expect, int timeout_s, char **last)
{
    char *want = sy_expect_state(expect);
    char *got = NULL;
    bool ok = false;
    for (int i = 0; i <= timeout_s * 4; i++) {
        free(got);
        got = sy_server_state();
        if (strcmp(got, want) == 0) {
            ok = true;
            break;
        }
        usleep(250 * 1000);
    }
    free(want);
    if (last)
        *last = got;
    else
        free(got);
    return ok;
}

char *sy_check_hashes(void)
{
    cJSON *l = sy_list();
    char *bad = NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, l)
    {
        const char *p = tj_str(it, "path"), *c = tj_str(it, "content");
        const char *sha = tj_str(it, "content_sha256");
        char file[1500], local[SHA256_HEX_LEN + 1] = "(unreadable)";
        snprintf(file, sizeof(file), "%s%s", mnt, p);
        size_t n = 0;
        char *bytes = mnt_read(file, &n);
        if (bytes)
            sha256_hex(bytes, n, local);
        free(bytes);
        if (!sha || !c || strcmp(sha, t_sha(c)) != 0 || strcmp(sha, local) != 0) {
            cr_assert(asprintf(&bad, "%s: server sha %s, sha of its content %s, of the "
                                     "local bytes %s", p, sha ? sha : "-",
                               c ? t_sha(c) : "-", local) > 0);
            break;
        }
    }
    cJSON_Delete(l);
    return bad;
}

cJSON *sy_versions(const char *memory_id)
{
    char q[400];
    snprintf(q, sizeof(q), "/v1/memory_stores/%s/memory_versions?limit=100%s%s", store,
             memory_id ? "&memory_id=" : "", memory_id ? memory_id : "");
    long err = 0;
    cJSON *l = t_list_all(&E.msd, q, NULL, &err);
    cr_assert_not_null(l, "cannot list versions: %ld", err);
    return l;
}

int sy_count_versions(const char *memory_id, const char *op)
{
    cJSON *l = sy_versions(memory_id);
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, l)
    {
        const char *o = tj_str(it, "operation");
        if (!op || (o && strcmp(o, op) == 0))
            n++;
    }
    cJSON_Delete(l);
    return n;
}


int sy_pending(void)
{
    /* Deletions kept by log_only or disabled are never sent: not pending. */
    char *s = mnt_q(&E, "SELECT (SELECT count(*) FROM nodes WHERE is_dir = 0 AND state = 1"
                   " AND unsaved = 0 AND unlinked = 0)"
                   " + (SELECT count(*) FROM tombstones WHERE mode = 0)");
    int n = (int)strtol(s, NULL, 10);
    free(s);
    return n;
}

bool sy_wait_clean(int timeout_s)
{
    for (int i = 0; i <= timeout_s * 4; i++) {
        if (sy_pending() == 0)
            return true;
        usleep(250 * 1000);
    }
    return false;
}

cJSON *sy_status_json(void)
{
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS status --json"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "status --json is not JSON: %s", out);
    free(out);
    return j;
}

char *sy_log(void)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/memstorefs.log", E.cache);
    char *s = mnt_read(path, NULL);
    return s ? s : strdup("");
}

int sy_log_count(const char *a, const char *b)
{
    char *log = sy_log();
    int n = 0;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n"))
        if ((!a || strstr(line, a)) && (!b || strstr(line, b)))
            n++;
    free(log);
    return n;
}

char *sy_log_grep(const char *a)
{
    char *log = sy_log();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n"))
        if (!a || strstr(line, a))
            fprintf(f, "%s\n", line);
    fclose(f);
    free(log);
    return buf;
}

bool sy_wait_log(const char *a, const char *b, int min, int timeout_s)
{
    for (int i = 0; i <= timeout_s * 4; i++) {
        if (sy_log_count(a, b) >= min)
            return true;
        usleep(250 * 1000);
    }
    return false;
}

void sy_fault(const char *json)
{
    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "POST", "/admin/faults", json, &r), 0);
    cr_assert_eq(r.status, 200, "fault %s: %s", json, r.body);
    tresp_free(&r);
}

void sy_clear_faults(void)
{
    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "DELETE", "/admin/faults", NULL, &r), 0);
    cr_assert_eq(r.status, 200);
    tresp_free(&r);
}

void sy_reset_stats(void)
{
    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "POST", "/admin/stats/reset", "{}", &r), 0);
    cr_assert_eq(r.status, 200);
    tresp_free(&r);
}

long sy_writes(void)
{
    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "GET", "/admin/stats", NULL, &r), 0);
    cr_assert_eq(r.status, 200);
    long w = (long)tj_num(r.json, "writes");
    tresp_free(&r);
    return w;
}

void sy_after_sync(void)
{
    char *out = NULL;
    int rc = sy_run(&out, "$MFS sync --all --wait");
    /* 3: the sync ran but left something unpushed (a test that holds the
     * server's writes, or a refused file): still a sync that happened. */
    cr_assert(rc == 0 || rc == 3, "memstorefs sync --wait failed (%d): %s", rc, out);
    free(out);
}

static long remote(const char *method, const char *id, const char *body)
{
    char path[400];
    snprintf(path, sizeof(path), "/v1/memory_stores/%s/memories/%s", store, id);
    struct tresp r;
    cr_assert_eq(t_api(&E.msd, method, path, body, &r), 0);
    long st = r.status;
    tresp_free(&r);
    return st;
}

long sy_remote_update(const char *id, const char *body_json)
{
    return remote("POST", id, body_json);
}

long sy_remote_delete(const char *id)
{
    return remote("DELETE", id, NULL);
}


void sy_wait_route(const char *route, long n0)
{
    for (int i = 0; i < WITHIN * 20 && t_route_count(&E.msd, route) <= n0; i++)
        usleep(50 * 1000);
    cr_assert_gt(t_route_count(&E.msd, route), n0, "no request on %s", route);
}

void sy_refuse_reads(void)
{
    sy_fault("{\"action\":\"status\",\"status\":400,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memory_versions\"}");
    sy_fault("{\"action\":\"status\",\"status\":400,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
}

char *sy_records_at(const char *path)
{
    return mnt_q(&E, "SELECT group_concat(t, '|') FROM (SELECT CAST(b.data AS TEXT) AS t"
                     " FROM conflicts k JOIN blobs b ON b.sha = k.local_sha"
                     " WHERE k.path = '%s' ORDER BY k.id)", path);
}

int64_t sy_ts_ms(const char *s)
{
    struct tm tm = {0};
    cr_assert_not_null(s);
    const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    cr_assert_not_null(rest, "bad timestamp %s", s);
    int ms = 0;
    if (*rest == '.')
        ms = atoi(rest + 1);
    return (int64_t)timegm(&tm) * 1000 + ms;
}
