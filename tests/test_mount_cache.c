/* test_mount_cache.c - the cache of a mount stays bounded: a file written
 * thousands of times keeps one copy (and status reports the cache's size),
 * --cache-max-size evicts clean content that an open fetches again and
 * never an unpushed edit, and `memstorefs conflicts drop` removes conflict
 * records and their content.  Before issue 9 the appends left thousands of
 * copies (tens of MB), status had no size, there was no eviction and no
 * way to remove a conflict record. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {"/a.md", "alpha\n", NULL};

static void setup(void)
{
    sy_start(seed);
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_cache, .init = setup, .fini = teardown, .timeout = 200);

static double num(const cJSON *j, const char *obj, const char *key)
{
    const cJSON *o = obj ? cJSON_GetObjectItem(j, obj) : j;
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* Bytes of CACHE/cache.db and its WAL on disk. */
static long long disk_bytes(void)
{
    long long n = 0;
    const char *files[] = {"cache.db", "cache.db-wal"};
    for (int i = 0; i < 2; i++) {
        char p[400];
        struct stat sb;
        snprintf(p, sizeof(p), "%s/%s", E.cache, files[i]);
        if (stat(p, &sb) == 0)
            n += sb.st_size;
    }
    return n;
}

Test(mount_cache, a_file_appended_to_thousands_of_times_keeps_one_copy)
{
    sy_mount(false, "");
    /* 3,000 appends: ~30 KB at the end, ~45 MB if every version stayed */
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "i=0; while [ $i -lt 3000 ]; do echo \"line $i\" >> log.md; "
                              "i=$((i+1)); done; wc -l < log.md"), 0, "%s", out);
    cr_expect_str_eq(out, "3000\n");
    free(out);
    long long disk = 0;
    cJSON *j = NULL;
    /* the collector runs every interval: by then the log is trimmed too */
    for (int i = 0; i < WITHIN * 4; i++) {
        cJSON_Delete(j);
        j = sy_status_json();
        disk = disk_bytes();
        if (disk < 1024 * 1024 && num(j, "cache", "disk_bytes") >= 0 &&
            num(j, "cache", "disk_bytes") < 1024 * 1024)
            break;
        usleep(250 * 1000);
    }
    cr_expect_lt(disk, 1024 * 1024, "the cache takes %lld bytes on disk", disk);
    double content = num(j, "cache", "content_bytes");
    cr_expect(content > 28000 && content < 200 * 1024, "content held: %.0f bytes", content);
    cr_expect(num(j, "cache", "disk_bytes") > 0 && num(j, "cache", "disk_bytes") < 1024 * 1024,
              "status says %.0f bytes on disk", num(j, "cache", "disk_bytes"));
    cJSON_Delete(j);
    char *text = NULL;
    cr_assert_eq(mnt_sh(&E, &text, "$MFS status"), 0);
    cr_expect(strstr(text, "  cache           ") && strstr(text, "KiB on disk"), "%s", text);
    free(text);
    /* nothing is lost: the mount and the store hold the last version */
    cr_assert(sy_wait_clean(2 * WITHIN));
    char *c = sy_content("/log.md");
    cr_expect(c && strlen(c) > 28000 && strstr(c, "line 2999\n"), "the store's copy is wrong");
    free(c);
}

/* Polls status until n files' content is evicted; that status (caller
 * deletes). */
static cJSON *wait_evicted(int n)
{
    cJSON *j = NULL;
    bool evicted = false;
    for (int i = 0; i < WITHIN * 4 && !evicted; i++) {
        cJSON_Delete(j);
        j = sy_status_json();
        evicted = num(j, NULL, "content_evicted") >= n;
        if (!evicted)
            usleep(250 * 1000);
    }
    cr_assert(evicted, "nothing was evicted: %s", cJSON_PrintUnformatted(j));
    return j;
}

Test(mount_cache, the_size_limit_evicts_clean_content_only)
{
    /* five 20 KB memories; the limit holds about two of them */
    static char body[20001];
    for (int i = 0; i < 5; i++) {
        memset(body, 'a' + i, 20000);
        char path[32];
        snprintf(path, sizeof(path), "/m%d.md", i);
        char *id = t_create_memory(&E.msd, store, path, body);
        cr_assert_not_null(id);
        free(id);
    }
    sy_mount(false, "--cache-max-size 45K");
    /* an unpushed edit (the server refuses writes for now) is never evicted */
    mnt_hold_writes(&E);
    cr_assert_eq(sy_run(NULL, "head -c 30000 /dev/zero | tr '\\0' z > m0.md"), 0);
    cJSON *j = wait_evicted(3);
    cr_expect_leq(num(j, "cache", "content_bytes"), 45 * 1024 + 30000,
                  "content held past the limit: %.0f", num(j, "cache", "content_bytes"));
    cr_expect_eq(num(j, NULL, "content_missing"), 0, "evicted content is being fetched again");
    cJSON_Delete(j);
    char *dirty = mnt_q(&E, "SELECT count(*) FROM nodes n JOIN blobs b ON b.sha = n.sha"
                            " WHERE n.path = '/m0.md' AND n.state = 1 AND n.unlinked = 0");
    cr_expect_str_eq(dirty, "1", "the unpushed edit lost its content");
    free(dirty);
    /* an open fetches evicted content again, byte for byte */
    long before = t_route_count(&E.msd, FETCH_ROUTE);
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "for f in m1 m2 m3 m4; do tr -d \"$(head -c 1 $f.md)\" < $f.md | "
                              "wc -c; wc -c < $f.md; done; head -c 1 m0.md; echo"), 0, "%s", out);
    cr_expect_str_eq(out, "0\n20000\n0\n20000\n0\n20000\n0\n20000\nz\n");
    free(out);
    cr_expect_gt(t_route_count(&E.msd, FETCH_ROUTE), before, "nothing was downloaded again");
    char *text = NULL;
    cr_assert_eq(mnt_sh(&E, &text, "$MFS status"), 0);
    cr_expect(strstr(text, "--cache-max-size 45 KiB"), "%s", text);
    free(text);
}

/* An evicted file renamed over a synced file (an editor's save, `mv`):
 * the rename fetches its content first.  Before the fix it moved without
 * it; its own memory was deleted by the next sync, its push was skipped
 * at every sync and `cat` failed with EIO: the content was lost. */
Test(mount_cache, an_evicted_file_renamed_over_another_keeps_its_content)
{
    static char body[2001];
    for (int i = 0; i < 2; i++) {
        memset(body, 'c' + i, 2000);
        char *id = t_create_memory(&E.msd, store, i ? "/d.md" : "/c.md", body);
        cr_assert_not_null(id);
        free(id);
    }
    sy_mount(false, "--cache-max-size 1K");
    cJSON_Delete(wait_evicted(2));
    /* the content cannot be had: the rename fails and changes nothing */
    sy_fault("{\"action\":\"status\",\"status\":500,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    char *out = NULL;
    cr_expect_neq(sy_run(&out, "mv c.md d.md 2>&1"), 0, "%s", out);
    cr_expect(out && strstr(out, "Input/output error"), "%s", out);
    free(out);
    cr_expect_eq(sy_run(&out, "ls"), 0);
    cr_expect_str_eq(out, "a.md\nc.md\nd.md\n");
    free(out);
    sy_clear_faults();
    long before = t_route_count(&E.msd, FETCH_ROUTE);
    cr_expect_eq(sy_run(&out, "mv c.md d.md && tr -d c < d.md | wc -c && wc -c < d.md && ls"), 0,
                 "%s", out ? out : "");
    cr_expect_str_eq(out, "0\n2000\na.md\nd.md\n");
    free(out);
    cr_expect_gt(t_route_count(&E.msd, FETCH_ROUTE), before, "the rename downloaded nothing");
    memset(body, 'c', 2000);
    const char *const want[] = {"/a.md", "alpha\n", "/d.md", body, NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN * 2, &last), "the store holds %s", last);
    free(last);
    cr_expect_eq(sy_log_count("failed to fetch memory content", NULL), 1, "%s",
                 sy_log_grep("failed to fetch")); /* the one while the fault stood */
}

/* /c.md, 2,000 bytes of 'c' (body, when not NULL, gets them), created in
 * the store, then mounted with a cache too small to keep its content: its
 * id (malloc'd) once it is evicted.  mount_out, when not NULL, gets what
 * the mount command printed (malloc'd). */
static char *evicted_c(char body[2001], char **mount_out)
{
    static char c2000[2001];
    memset(c2000, 'c', 2000);
    if (body)
        memcpy(body, c2000, 2001);
    char *id = t_create_memory(&E.msd, store, "/c.md", c2000);
    cr_assert_not_null(id);
    char *out = NULL;
    int rc = mnt_mount(&E, store, "s", false, "--cache-max-size 1K", &out);
    cr_assert_eq(rc, 0, "mount failed: %s", out);
    if (mount_out)
        *mount_out = out;
    else
        free(out);
    cJSON_Delete(wait_evicted(1));
    return id;
}

/* `> f` of an evicted file, then a write past 100 KiB: the shell saved the
 * emptied file, and the close puts back the store's version, which the
 * cache no longer had: it is downloaded first.  (Without that download,
 * the emptied file would have stayed, refused, instead.) */
Test(mount_cache, a_cut_edit_of_an_evicted_file_puts_back_the_store_s_version)
{
    static char body[2001];
    free(evicted_c(body, NULL));
    char *out = NULL;
    cr_expect_eq(sy_run(&out, "{ dd if=/dev/zero bs=150000 count=1 status=none > c.md; } 2>&1; "
                              "tr -d c < c.md | wc -c; wc -c < c.md"), 0, "%s", out);
    cr_expect(out && strstr(out, "File too large") && strstr(out, "\n0\n2000\n"), "%s", out);
    free(out);
    sy_after_sync();
    const char *const want[] = {"/a.md", "alpha\n", "/c.md", body, NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the store holds %s", last);
    free(last);
}

/* Conflict records of store st written straight into DIR/cache.db, the
 * first n_old of them dated 1970 (older than any age), the rest now. */
static void add_records_in(const char *dir, const char *st, int n, int n_old)
{
    char db[400];
    cr_assert_lt(snprintf(db, sizeof(db), "%s/cache.db", dir), (int)sizeof(db),
                 "path too long: %s", dir);
    sqlite3 *s;
    cr_assert_eq(sqlite3_open(db, &s), SQLITE_OK);
    sqlite3_busy_timeout(s, 5000);
    for (int i = 0; i < n; i++) {
        char *sql = sqlite3_mprintf(
            "INSERT OR IGNORE INTO blobs(sha, data) VALUES ('lost%d', 'lost version %d');"
            "INSERT INTO conflicts(store, path, memory_id, local_sha, remote_sha, at, kind)"
            " VALUES ('%q', '/a.md', NULL, 'lost%d', NULL, %lld, 0);", i, i, st, i,
            (long long)(i < n_old ? 1000000000LL : (long long)time(NULL) * 1000000000LL));
        char *err = NULL;
        cr_assert_eq(sqlite3_exec(s, sql, NULL, NULL, &err), SQLITE_OK, "%s", err);
        sqlite3_free(sql);
    }
    sqlite3_close(s);
}

/* Into CACHE/cache.db (no daemon runs). */
static void add_records(int n)
{
    add_records_in(E.cache, store, n, 2);
}

static int records(void)
{
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS conflicts --json --cache-dir \"$CACHE\" | wc -l"), 0);
    int n = atoi(out);
    free(out);
    return n;
}

Test(mount_cache, conflict_records_are_dropped_by_hand)
{
    sy_mount(false, "");
    cr_assert_eq(mnt_sh(&E, NULL, "$MFS unmount --all"), 0);
    add_records(5);
    cr_assert_eq(records(), 5);
    char *out = NULL;
    /* two are from 1970: older than a day */
    cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts drop --older-than 1 --cache-dir \"$CACHE\""),
                 0, "%s", out);
    cr_expect_str_eq(out, "dropped 2 conflict records\n");
    free(out);
    char *id = mnt_q(&E, "SELECT max(id) FROM conflicts");
    cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts drop %s --cache-dir \"$CACHE\"", id), 0, "%s",
                 out);
    cr_expect_str_eq(out, "dropped 1 conflict record\n");
    free(out);
    cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts drop %s --cache-dir \"$CACHE\"", id), 1);
    cr_expect(strstr(out, "no conflict"), "%s", out);
    free(out);
    free(id);
    cr_expect_eq(records(), 2);
    cr_expect_eq(mnt_sh(&E, &out, "$MFS conflicts drop --all --cache-dir \"$CACHE\""), 0, "%s",
                 out);
    cr_expect_str_eq(out, "dropped 2 conflict records\n");
    free(out);
    cr_expect_eq(records(), 0);
    char *left = mnt_q(&E, "SELECT count(*) FROM blobs WHERE sha LIKE 'lost%%'");
    cr_expect_str_eq(left, "0", "the content of dropped records stays in the cache");
    free(left);
    /* bad usage is refused and changes nothing */
    const char *bad[] = {"drop", "drop --all 3", "drop --older-than x", "drop 0",
                         "drop --all --older-than 2", "show --all"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = mnt_sh(&E, &out, "$MFS conflicts %s --cache-dir \"$CACHE\"", bad[i]);
        cr_expect_eq(rc, 2, "`conflicts %s`: %d %s", bad[i], rc, out);
        free(out);
    }
}

/* Without --cache-dir, the conflicts commands read the caches of the
 * mounts (their lock files name them) and the default one: a mount with a
 * --cache-dir of its own (the demo's, any session's) is found.  Record
 * ids are per cache: one that two caches hold needs --cache-dir.  Before,
 * they read the default cache only: "no cache at ...". */
Test(mount_cache, the_conflicts_commands_find_the_caches_of_the_mounts)
{
    sy_mount(false, "");
    char *s2 = t_create_store(&E.msd, "Second");
    cr_assert_not_null(s2);
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS mount --store '%s:%s/two' --cache-dir %s/cache2",
                        s2, E.mnt, E.root), 0, "%s", out);
    free(out);
    char cache2[400];
    snprintf(cache2, sizeof(cache2), "%s/cache2", E.root);
    /* Dated now: a mount's housekeeping prunes records past its maximum age. */
    add_records_in(E.cache, store, 1, 0); /* id 1 */
    add_records_in(cache2, s2, 2, 0);     /* ids 1 and 2 */
    static const char env[] = "export MEMSTOREFS_CACHE_DIR=\"$CACHE\"/../no-default;";
    int rc = mnt_sh(&E, &out, "%s $MFS conflicts", env);
    cr_expect_eq(rc, 0, "%s", out);
    char want[1200];
    snprintf(want, sizeof(want), "in %s:\n", E.cache);
    cr_expect(out && strstr(out, want), "the mount's cache is not listed: %s", out);
    snprintf(want, sizeof(want), "in %s:\n", cache2);
    cr_expect(out && strstr(out, want), "the second mount's cache is not listed: %s", out);
    free(out);
    rc = mnt_sh(&E, &out, "%s $MFS conflicts --json | grep -c '\"cache_dir\":'", env);
    cr_expect_str_eq(out ? out : "", "3\n", "not three records, each with its cache (%d)", rc);
    free(out);
    rc = mnt_sh(&E, &out, "%s $MFS conflicts show 2", env);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out ? out : "", "lost version 1");
    free(out);
    rc = mnt_sh(&E, &out, "%s $MFS conflicts show 1", env);
    cr_expect_eq(rc, 1, "an id of two caches was taken from one: %s", out);
    cr_expect(out && strstr(out, "is in several caches") && strstr(out, "give --cache-dir"),
              "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "%s $MFS conflicts show 1 --cache-dir %s", env, cache2);
    cr_expect_str_eq(out ? out : "", "lost version 0", "(exit %d)", rc);
    free(out);
    /* Dropping many records asks which cache; one by id finds its own. */
    rc = mnt_sh(&E, &out, "%s $MFS conflicts drop --all", env);
    cr_expect_eq(rc, 1, "drop --all went to several caches: %s", out);
    cr_expect(out && strstr(out, "2 caches hold conflict records") &&
              strstr(out, "give --cache-dir"), "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "%s $MFS conflicts --json | grep -c '\"cache_dir\":'", env);
    cr_expect_str_eq(out ? out : "", "3\n", "drop --all dropped records (%d)", rc);
    free(out);
    /* Once one cache only holds records, drop --all finds it. */
    rc = mnt_sh(&E, &out, "%s $MFS conflicts drop 2 && $MFS conflicts drop --all --cache-dir %s "
                "&& $MFS conflicts drop --all", env, cache2);
    cr_expect_str_eq(out ? out : "", "dropped 1 conflict record\ndropped 1 conflict record\n"
                     "dropped 1 conflict record\n", "(exit %d)", rc);
    free(out);
    rc = mnt_sh(&E, &out, "%s $MFS conflicts", env);
    cr_expect_str_eq(out ? out : "", "no conflicts\n", "(exit %d)", rc);
    free(out);
    free(s2);
}

/* A download that fails at an open gives EIO, whatever the reason: the
 * log keeps the detail.  Before the fix the open passed the HTTP error's
 * errno on: `cat` said "Permission denied" for a revoked key (401) and
 * "Invalid argument" for a 400, as if the file's mode or the call were
 * wrong, where a read of the same file said EIO. */
Test(mount_cache, a_failed_download_at_an_open_is_an_io_error)
{
    free(evicted_c(NULL, NULL));
    static const int status[] = {401, 400, 403};
    for (size_t i = 0; i < sizeof(status) / sizeof(status[0]); i++) {
        char f[300];
        snprintf(f, sizeof(f), "{\"action\":\"status\",\"status\":%d,\"count\":0,"
                 "\"method\":\"GET\",\"path\":\"/v1/memory_stores/*/memories/*\"}", status[i]);
        sy_fault(f);
        char *out = NULL;
        cr_expect_neq(sy_run(&out, "cat c.md 2>&1"), 0, "%s", out);
        cr_expect(out && strstr(out, "Input/output error"), "HTTP %d: %s", status[i], out);
        free(out);
        sy_clear_faults();
    }
    char *out = NULL;
    cr_expect_eq(sy_run(&out, "wc -c < c.md"), 0);
    cr_expect_str_eq(out, "2000\n", "the file does not read whole once the server answers");
    free(out);
}

/* An open of a file whose content is not in the cache, right after the
 * memory changed in the store (the download finds bytes other than the
 * listed ones), waits for the sync that brings the file to that version,
 * however slow, and reads it.  Before the fix it tried four times a
 * quarter of a second apart, then failed with EIO whenever that sync took
 * longer (here the version feed answers in 3 s). */
Test(mount_cache, an_open_right_after_a_remote_edit_of_an_evicted_file_reads_it)
{
    char *id = evicted_c(NULL, NULL);
    sy_fault("{\"action\":\"latency\",\"latency_ms\":3000,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memory_versions\"}");
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"the store's new version\\n\"}"), 200);
    char *out = NULL;
    int rc = sy_run(&out, "cat c.md 2>&1");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out ? out : "", "the store's new version\n");
    free(out);
    sy_clear_faults();
    free(id);
}

/* An open that downloads hands the device to another thread (fs/fsloop.c),
 * which may run the opener's close before the open's own thread has gone
 * on after its answer: here that thread waits 500 ms after each answer
 * (MEMSTOREFS_TEST_PAUSE_OPEN_MS), so the append's write, close and
 * release all run meanwhile.  Before the fix the open then read the
 * writer's handle, which that release had freed (AddressSanitizer:
 * heap-use-after-free in op_open; met once by chance in CI); the
 * sanitizer stage of .ci/run stops the daemon at that read. */
Test(mount_cache, an_open_that_downloads_outlives_its_own_close)
{
    cr_assert_eq(setenv("MEMSTOREFS_TEST_PAUSE_OPEN_MS", "500", 1), 0);
    char *out = NULL;
    char *id = evicted_c(NULL, &out);
    unsetenv("MEMSTOREFS_TEST_PAUSE_OPEN_MS");
    cr_assert(out && strstr(out, "MEMSTOREFS_TEST_PAUSE_OPEN_MS is set"),
              "the daemon did not take the switch: the test proves nothing: %s", out);
    free(out);
    cJSON_Delete(wait_evicted(2)); /* a.md and c.md */
    long before = t_route_count(&E.msd, FETCH_ROUTE);
    cr_expect_eq(sy_run(&out, "echo appended >> c.md && tail -c 9 c.md && wc -c < c.md"), 0,
                 "%s", out);
    cr_expect_str_eq(out ? out : "", "appended\n2009\n");
    free(out);
    cr_expect_gt(t_route_count(&E.msd, FETCH_ROUTE), before,
                 "the append's open did not download: the test proves nothing");
    /* The daemon lives on, and the append is pushed. */
    sy_after_sync();
    char *got = sy_content("/c.md");
    cr_expect(got && strlen(got) == 2009 && strcmp(got + 2000, "appended\n") == 0,
              "the store holds %zu bytes", got ? strlen(got) : 0);
    free(got);
    free(id);
}

/* Opens of many files not in the cache at once, while the server takes
 * its time: the mount's other requests are answered meanwhile.  Before
 * the fix, sixteen downloads took every thread of the mount, and nothing
 * else was answered (not even a create) until one of them ended. */
#define COLD_N 24
#define COLD_LATENCY_MS 10000

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

Test(mount_cache, downloads_that_take_their_time_leave_the_mount_answering)
{
    static char body[2001];
    memset(body, 'k', 2000);
    for (int i = 0; i < COLD_N; i++) {
        char p[32];
        snprintf(p, sizeof(p), "/k%02d.md", i);
        char *id = t_create_memory(&E.msd, store, p, body);
        cr_assert_not_null(id);
        free(id);
    }
    sy_mount(false, "--cache-max-size 1K");
    cJSON_Delete(wait_evicted(COLD_N));
    char f[300];
    snprintf(f, sizeof(f), "{\"action\":\"latency\",\"latency_ms\":%d,\"count\":0,"
             "\"method\":\"GET\",\"path\":\"/v1/memory_stores/*/memories/*\"}", COLD_LATENCY_MS);
    sy_fault(f);
    long before = t_route_count(&E.msd, FETCH_ROUTE);
    double start = mono_s();
    cr_assert_eq(sy_run(NULL, "for i in $(seq -w 0 %d); do "
                              "( wc -c < k$i.md > \"%s/k$i.size\" 2>&1 ) </dev/null >/dev/null 2>&1 & "
                              "done", COLD_N - 1, E.root), 0);
    /* Every download the daemon runs at once has reached the server. */
    for (int i = 0; i < 100 && t_route_count(&E.msd, FETCH_ROUTE) - before < 16; i++)
        usleep(100 * 1000);
    cr_assert_geq(t_route_count(&E.msd, FETCH_ROUTE) - before, 16);
    char *out = NULL;
    cr_expect_eq(sy_run(&out, "echo new > new.md && cat new.md && ls | wc -l"), 0);
    double took = mono_s() - start;
    cr_expect_str_eq(out ? out : "", "new\n26\n");
    free(out);
    cr_expect_lt(took, COLD_LATENCY_MS / 1000.0,
                 "a create waited %.1f s, for a download (the server answers in %d ms)", took,
                 COLD_LATENCY_MS);
    sy_clear_faults();
    /* And every one of the slow opens reads its file whole. */
    double deadline = mono_s() + 60;
    for (int i = 0; i < COLD_N; i++) {
        char p[400];
        snprintf(p, sizeof(p), "%s/k%02d.size", E.root, i);
        char *got = mnt_read(p, NULL);
        while ((!got || strcmp(got, "2000\n") != 0) && mono_s() < deadline) {
            free(got);
            usleep(200 * 1000);
            got = mnt_read(p, NULL);
        }
        cr_expect_str_eq(got ? got : "(none)", "2000\n", "k%02d.md", i);
        free(got);
    }
}
