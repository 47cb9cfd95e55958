/* test_mount_sync_budget.c - one request budget for the daemon (issue 11):
 * a 429 pauses every store's requests until its retry-after, not only the
 * request that got it, and status says so; --max-requests-per-minute
 * spreads the requests (the server's clock shows the spacing); a backlog
 * of two stores is drained fairly, a slice of each in turn, by the sync
 * thread and by memstorefs sync --wait alike.
 *
 * Times are read from the server's created_at (same host clock), and only
 * as lower bounds: a slow machine makes them later, never earlier. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_mount_sync.h"

static char *store_b;
static char mnt_b[400];

static void setup(void)
{
    const char *seed[] = {"/a0.md", "a zero\n", NULL};
    sy_start(seed);
    store_b = t_create_store(&E.msd, "Budget B");
    cr_assert_not_null(store_b);
    char *id = t_create_memory(&E.msd, store_b, "/b0.md", "b zero\n");
    cr_assert_not_null(id);
    free(id);
    snprintf(mnt_b, sizeof(mnt_b), "%s/b", E.mnt);
}

static void teardown(void)
{
    sy_stop();
    free(store_b);
    store_b = NULL;
}

TestSuite(mount_sync_budget, .init = setup, .fini = teardown, .timeout = 240);

/* Both stores in one daemon (MNT/s and MNT/b), syncing only when asked. */
static void mount_two(const char *extra)
{
    char opts[600];
    snprintf(opts, sizeof(opts), "--sync-interval 3600 --store %s:%s %s", store_b, mnt_b, extra);
    sy_mount(false, opts);
}

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The created_at (ms) of every "created" version of store id whose path
 * starts with prefix, oldest first, into v (at most max); the count. */
static size_t creates(const char *id, const char *prefix, int64_t *v, size_t max)
{
    char q[300];
    snprintf(q, sizeof(q), "/v1/memory_stores/%s/memory_versions?operation=created&limit=100",
             id);
    long err = 0;
    cJSON *l = t_list_all(&E.msd, q, NULL, &err);
    cr_assert_not_null(l, "cannot list versions: %ld", err);
    size_t n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, l) {
        const char *p = tj_str(it, "path");
        if (p && strncmp(p, prefix, strlen(prefix)) == 0 && n < max)
            v[n++] = sy_ts_ms(tj_str(it, "created_at"));
    }
    cJSON_Delete(l);
    /* newest first from the feed: reverse */
    for (size_t i = 0; i < n / 2; i++) {
        int64_t t = v[i];
        v[i] = v[n - 1 - i];
        v[n - 1 - i] = t;
    }
    return n;
}

static char *status_json(void)
{
    char *out = NULL;
    int rc = sy_run(&out, "$MFS status --json");
    cr_assert_eq(rc, 0, "status failed: %s", out);
    return out;
}

struct bg {
    const char *cmd;
    int rc;
    char *out;
};

static void *run_bg(void *arg)
{
    struct bg *b = arg;
    b->rc = sy_run(&b->out, "%s", b->cmd);
    return NULL;
}

Test(mount_sync_budget, a_429_pauses_every_store)
{
    mount_two("");
    /* The mounts' first rounds end first: one still running when b1.md is
     * written could send it before A's 429 exists. */
    sy_after_sync();
    /* Store A's first write gets a 429 that asks for 5 seconds. */
    char f[400];
    snprintf(f, sizeof(f),
             "{\"action\":\"status\",\"status\":429,\"retry_after\":5,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/%s/memories\"}", store);
    sy_fault(f);
    int64_t t0 = now_ms();
    cr_assert_eq(sy_run(NULL, "echo one > a1.md && echo one > '%s/b1.md'", mnt_b), 0);
    char cmd_a[600], cmd_b[600];
    snprintf(cmd_a, sizeof(cmd_a), "$MFS sync %s --wait", mnt);
    snprintf(cmd_b, sizeof(cmd_b), "$MFS sync %s --wait", mnt_b);
    struct bg a = {.cmd = cmd_a}, b = {.cmd = cmd_b};
    pthread_t ta, tb;
    cr_assert_eq(pthread_create(&ta, NULL, run_bg, &a), 0);
    /* The daemon says it is throttled once the 429 came. */
    char *st = NULL;
    bool throttled = false;
    for (int i = 0; i < 40 && !throttled; i++) {
        free(st);
        st = status_json();
        throttled = strstr(st, "\"throttled_until\":\"") != NULL;
        if (!throttled)
            usleep(100 * 1000);
    }
    cr_assert(throttled, "status never showed the pause: %s", st);
    free(st);
    /* Store B's sync now: its requests wait for the pause too. */
    cr_assert_eq(pthread_create(&tb, NULL, run_bg, &b), 0);
    bool waiting = false;
    char *human = NULL;
    for (int i = 0; i < 20 && !waiting; i++) {
        st = status_json();
        waiting = strstr(st, "\"requests_waiting\":0") == NULL &&
                  strstr(st, "\"throttled_until\":\"") != NULL;
        free(st);
        if (waiting) {
            sy_run(&human, "$MFS status");
            break;
        }
        usleep(100 * 1000);
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    cr_expect(waiting, "status never showed B's requests waiting");
    if (human)
        cr_expect(strstr(human, "throttled") && strstr(human, "waiting"),
                  "the human status does not say it: %s", human);
    free(human);
    cr_expect_eq(a.rc, 0, "sync A: %s", a.out);
    cr_expect_eq(b.rc, 0, "sync B: %s", b.out);
    free(a.out);
    free(b.out);
    /* Neither write reached the server before the pause ended. */
    int64_t ca[4], cb[4];
    cr_assert_eq(creates(store, "/a1", ca, 4), 1);
    cr_assert_eq(creates(store_b, "/b1", cb, 4), 1);
    cr_expect_geq(ca[0], t0 + 5000 - 50, "A's write came %lld ms after the 429's start",
                  (long long)(ca[0] - t0));
    cr_expect_geq(cb[0], t0 + 5000 - 50, "B's write came %lld ms after A's 429, within its pause",
                  (long long)(cb[0] - t0));
    cr_expect_geq(sy_log_count("the server limits the rate (429)", NULL), 1);
}

Test(mount_sync_budget, the_cap_spreads_requests)
{
    /* 60 a minute: bursts of 5, then one a second. */
    mount_two("--max-requests-per-minute 60");
    sleep(6); /* the mount's requests are behind; the bucket is full */
    cr_assert_eq(sy_run(NULL, "for i in $(seq 1 12); do echo c$i > c$i.md; done"), 0);
    char *out = NULL;
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "$MFS sync %s --wait", mnt);
    struct bg a = {.cmd = cmd};
    pthread_t ta;
    cr_assert_eq(pthread_create(&ta, NULL, run_bg, &a), 0);
    bool capped = false;
    for (int i = 0; i < 60 && !capped; i++) {
        usleep(100 * 1000);
        free(out);
        out = NULL;
        sy_run(&out, "$MFS status");
        capped = out && strstr(out, "request cap     60 per minute");
    }
    pthread_join(ta, NULL);
    cr_expect(capped, "status never showed the cap holding requests: %s", out);
    free(out);
    cr_expect_eq(a.rc, 0, "sync: %s", a.out);
    free(a.out);
    int64_t v[16];
    size_t n = creates(store, "/c", v, 16);
    cr_assert_eq(n, 12);
    /* 12 writes with at most 5 at once and one more a second: the last
     * came at least 7 s after the first (6.5 s with rounding). */
    cr_expect_geq(v[11] - v[0], 6500, "12 writes in %lld ms under a cap of 60 a minute",
                  (long long)(v[11] - v[0]));
}

/* Writes n files pfx1.md..pfxN.md in dir. */
static void write_many(const char *dir, const char *pfx, int n)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "cd '%s' && for i in $(seq 1 %d); do echo %s$i > %s$i.md; done",
             dir, n, pfx, pfx);
    cr_assert_eq(mnt_sh(&E, NULL, "%s", cmd), 0);
}

/* Both stores progressed before either finished: each store's first
 * write came before the other's last. */
static void expect_interleaved(int n)
{
    static int64_t a[1000], b[1000];
    cr_assert_eq(creates(store, "/x", a, 1000), (size_t)n);
    cr_assert_eq(creates(store_b, "/y", b, 1000), (size_t)n);
    cr_expect_lt(b[0], a[n - 1], "B's backlog started only after A's was done");
    cr_expect_lt(a[0], b[n - 1], "A's backlog started only after B's was done");
}

Test(mount_sync_budget, a_backlog_is_drained_fairly_by_the_sync_thread)
{
    mount_two("");
    write_many(mnt, "x", 300);
    write_many(mnt_b, "y", 300);
    /* Not --wait: the sync thread's own rounds. */
    cr_assert_eq(sy_run(NULL, "$MFS sync --all"), 0);
    cr_assert(sy_wait_clean(120), "the backlog did not drain: %d pending", sy_pending());
    expect_interleaved(300);
}

Test(mount_sync_budget, sync_wait_drains_every_backlog_fairly)
{
    mount_two("");
    write_many(mnt, "x", 300);
    write_many(mnt_b, "y", 300);
    sy_reset_stats();
    char *out = NULL;
    int rc = sy_run(&out, "$MFS sync --all --wait");
    /* One write a file, one read of each feed: the later slices do not
     * page through the writes of the earlier ones again. */
    struct tresp st;
    cr_assert_eq(t_admin(&E.msd, "GET", "/admin/stats", NULL, &st), 0);
    cr_expect_leq(tj_num(st.json, "total"), 600 + 2 + 2, "%s", st.body);
    tresp_free(&st);
    cr_expect_eq(rc, 0, "%s", out);
    /* The report adds up the rounds. */
    cr_expect(strstr(out, "pushed 300,"), "%s", out);
    cr_expect(strstr(out, "pending 0"), "%s", out);
    free(out);
    cr_expect_eq(sy_pending(), 0);
    expect_interleaved(300);
}
