/* test_memstored_concurrency.c - memstored under concurrent clients: the
 * precondition race (two updates with the same precondition: exactly one
 * wins, exactly one new version), same-path and overlapping-path create
 * races (exactly one wins, the rest get 409 naming the winner), and many
 * parallel creates over curl multi.  Threads start together on a barrier;
 * each has its own CURL handle (msd_http.c keeps one per thread).  One
 * memstored per test, started in .init and stopped by PID in .fini. */
#include <criterion/criterion.h>
#include <pthread.h>
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
    store = t_create_store(&srv, "race");
    cr_assert_not_null(store);
}

static void down(void)
{
    msd_stop(&srv);
    free(store);
    store = NULL;
}

TestSuite(concurrency, .init = up, .fini = down, .timeout = 60);

struct job {
    pthread_barrier_t *go;
    const char *method;
    char path[256];
    char body[512];
    /* out */
    int rc;
    long status;
    char err_type[64];
    char conflicting_id[64];
    char id[64];
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    struct tresp r;
    /* Warm this thread's connection first so both requests start on an
     * open socket when the barrier drops. */
    t_api(&srv, "GET", "/v1/memory_stores?limit=1", NULL, &r);
    tresp_free(&r);
    pthread_barrier_wait(j->go);
    j->rc = t_api(&srv, j->method, j->path, j->body, &r);
    if (j->rc == 0) {
        j->status = r.status;
        snprintf(j->err_type, sizeof j->err_type, "%s", tj_str(r.json, "error.type") ?: "");
        snprintf(j->conflicting_id, sizeof j->conflicting_id, "%s",
                 tj_str(r.json, "error.conflicting_memory_id") ?: "");
        snprintf(j->id, sizeof j->id, "%s", tj_str(r.json, "id") ?: "");
        tresp_free(&r);
    }
    return NULL;
}

/* Runs n jobs at once and waits for all. */
static void run_all(struct job *jobs, int n)
{
    pthread_t th[32];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        jobs[i].go = &go;
        cr_assert_eq(pthread_create(&th[i], NULL, run_job, &jobs[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
}

static int version_count(const char *mem)
{
    char q[256];
    long err;
    snprintf(q, sizeof q, "/v1/memory_stores/%s/memory_versions?limit=100&memory_id=%s", store,
             mem);
    cJSON *all = t_list_all(&srv, q, NULL, &err);
    cr_assert_not_null(all);
    int n = cJSON_GetArraySize(all);
    cJSON_Delete(all);
    return n;
}

Test(concurrency, precondition_race_exactly_one_wins)
{
    for (int round = 0; round < 10; round++) {
        char path[32];
        snprintf(path, sizeof path, "/race%d.md", round);
        char *id = t_create_memory(&srv, store, path, "base");
        cr_assert_not_null(id);
        struct job jobs[2];
        memset(jobs, 0, sizeof jobs);
        for (int k = 0; k < 2; k++) {
            jobs[k].method = "POST";
            snprintf(jobs[k].path, sizeof jobs[k].path, "/v1/memory_stores/%s/memories/%s", store,
                     id);
            snprintf(jobs[k].body, sizeof jobs[k].body,
                     "{\"content\":\"writer %c\",\"precondition\":{\"type\":\"content_sha256\","
                     "\"content_sha256\":\"%s\"}}",
                     'A' + k, t_sha("base"));
        }
        run_all(jobs, 2);
        int wins = 0, lost = 0, winner = -1;
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(jobs[k].rc, 0, "round %d writer %d: no answer", round, k);
            if (jobs[k].status == 200)
                wins++, winner = k;
            else if (jobs[k].status == 409 &&
                     strcmp(jobs[k].err_type, "memory_precondition_failed_error") == 0)
                lost++;
        }
        cr_assert_eq(wins, 1, "round %d: %d winners (statuses %ld, %ld)", round, wins,
                     jobs[0].status, jobs[1].status);
        cr_assert_eq(lost, 1, "round %d: the loser must get 409 memory_precondition_failed_error",
                     round);
        cr_expect_eq(version_count(id), 2, "round %d: exactly one new version", round);
        struct tresp r;
        t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories/%s", store, id);
        char want[16];
        snprintf(want, sizeof want, "writer %c", 'A' + winner);
        cr_expect_str_eq(tj_str(r.json, "content") ?: "", want, "the winner's content stays");
        tresp_free(&r);
        free(id);
    }
}

Test(concurrency, same_content_race_both_succeed_one_version)
{
    /* Both send the same update with the same precondition: the second to
     * be applied finds the state already equal (idempotent retry): 200. */
    char *id = t_create_memory(&srv, store, "/same.md", "base");
    cr_assert_not_null(id);
    struct job jobs[2];
    memset(jobs, 0, sizeof jobs);
    for (int k = 0; k < 2; k++) {
        jobs[k].method = "POST";
        snprintf(jobs[k].path, sizeof jobs[k].path, "/v1/memory_stores/%s/memories/%s", store, id);
        snprintf(jobs[k].body, sizeof jobs[k].body,
                 "{\"content\":\"agreed\",\"precondition\":{\"type\":\"content_sha256\","
                 "\"content_sha256\":\"%s\"}}",
                 t_sha("base"));
    }
    run_all(jobs, 2);
    cr_expect_eq(jobs[0].status, 200);
    cr_expect_eq(jobs[1].status, 200);
    cr_expect_eq(version_count(id), 2);
    free(id);
}

Test(concurrency, same_path_create_race)
{
    enum { N = 8 };
    struct job jobs[N];
    memset(jobs, 0, sizeof jobs);
    for (int k = 0; k < N; k++) {
        jobs[k].method = "POST";
        snprintf(jobs[k].path, sizeof jobs[k].path, "/v1/memory_stores/%s/memories", store);
        snprintf(jobs[k].body, sizeof jobs[k].body, "{\"path\":\"/one.md\",\"content\":\"%d\"}", k);
    }
    run_all(jobs, N);
    int winner = -1, conflicts = 0;
    for (int k = 0; k < N; k++) {
        cr_assert_eq(jobs[k].rc, 0);
        if (jobs[k].status == 200) {
            cr_expect_eq(winner, -1, "two creates of one path both won");
            winner = k;
        } else if (jobs[k].status == 409 &&
                   strcmp(jobs[k].err_type, "memory_path_conflict_error") == 0) {
            conflicts++;
        }
    }
    cr_assert_neq(winner, -1, "nobody won");
    cr_expect_eq(conflicts, N - 1);
    for (int k = 0; k < N; k++)
        if (k != winner)
            cr_expect_str_eq(jobs[k].conflicting_id, jobs[winner].id,
                             "loser %d names the winner", k);
    struct tresp r;
    t_req(&srv, "GET", NULL, &r, "/v1/memory_stores/%s/memories", store);
    cr_expect_eq(cJSON_GetArraySize(tj_get(r.json, "data")), 1);
    tresp_free(&r);
}

Test(concurrency, overlapping_path_create_race)
{
    for (int round = 0; round < 5; round++) {
        struct job jobs[2];
        memset(jobs, 0, sizeof jobs);
        for (int k = 0; k < 2; k++) {
            jobs[k].method = "POST";
            snprintf(jobs[k].path, sizeof jobs[k].path, "/v1/memory_stores/%s/memories", store);
        }
        snprintf(jobs[0].body, sizeof jobs[0].body, "{\"path\":\"/o%d\",\"content\":\"f\"}", round);
        snprintf(jobs[1].body, sizeof jobs[1].body, "{\"path\":\"/o%d/x\",\"content\":\"g\"}",
                 round);
        run_all(jobs, 2);
        int wins = (jobs[0].status == 200) + (jobs[1].status == 200);
        cr_expect_eq(wins, 1, "round %d: /o and /o/x both or neither created (%ld, %ld)", round,
                     jobs[0].status, jobs[1].status);
        for (int k = 0; k < 2; k++)
            if (jobs[k].status != 200)
                cr_expect_str_eq(jobs[k].err_type, "memory_path_conflict_error");
    }
}

Test(concurrency, parallel_creates_and_reads)
{
    enum { N = 300 };
    char **bodies = calloc(N, sizeof *bodies);
    long *status = calloc(N, sizeof *status);
    char **ids = calloc(N, sizeof *ids);
    for (int i = 0; i < N; i++) {
        char p[64];
        snprintf(p, sizeof p, "/p/%03d.md", i);
        bodies[i] = tj_memory_body(p, p);
    }
    char url[256];
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories", store);
    cr_assert_eq(t_api_multi(&srv, "POST", url, (const char *const *)bodies, N, 16, status, ids), 0);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(status[i], 200, "create %d: %ld", i, status[i]);
        cr_expect_not_null(ids[i]);
        for (int k = 0; k < i && ids[i]; k++)
            if (ids[k] && strcmp(ids[k], ids[i]) == 0)
                cr_expect_fail("ids %d and %d collide", k, i);
    }
    /* Parallel reads of the list: all answered. */
    const char *gets[N];
    for (int i = 0; i < N; i++)
        gets[i] = NULL;
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories?limit=100", store);
    cr_assert_eq(t_api_multi(&srv, "GET", url, gets, 50, 16, status, NULL), 0);
    for (int i = 0; i < 50; i++)
        cr_expect_eq(status[i], 200);
    long err;
    snprintf(url, sizeof url, "/v1/memory_stores/%s/memories?limit=100", store);
    cJSON *all = t_list_all(&srv, url, NULL, &err);
    cr_assert_not_null(all);
    cr_expect_eq(cJSON_GetArraySize(all), N);
    cJSON_Delete(all);
    for (int i = 0; i < N; i++)
        free(bodies[i]), free(ids[i]);
    free(bodies);
    free(ids);
    free(status);
}
