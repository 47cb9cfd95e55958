/* test_mount_sync_feed.c - syncs from the store's version feed (issue
 * 11): an idle sync is one request; a randomized run of creates, edits,
 * renames, deletes and redactions made at the server between syncs (and
 * during them) leaves the cache exactly as a full listing says after each
 * sync; the daemon's own pushes coming back in the feed cost nothing;
 * writes that share a millisecond or arrive late are not missed; a
 * redacted newest version is settled by asking for the memory; and the
 * periodic full listing finds what the feed could not see and says so.
 * The mounts sync only when asked (memstorefs sync --wait). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_mount_sync.h"

static void setup(void)
{
    const char *seed[41];
    static char paths[20][32], contents[20][32];
    for (int i = 0; i < 20; i++) {
        snprintf(paths[i], sizeof(paths[i]), "/s/m%02d.md", i);
        snprintf(contents[i], sizeof(contents[i]), "seed %d\n", i);
        seed[2 * i] = paths[i];
        seed[2 * i + 1] = contents[i];
    }
    seed[40] = NULL;
    sy_start(seed);
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_feed, .init = setup, .fini = teardown, .timeout = 240);

static void mount_quiet(const char *extra)
{
    char opts[200];
    snprintf(opts, sizeof(opts), "--sync-interval 3600 %s", extra);
    sy_mount(false, opts);
}

/* "path=id:sha|..." of the cache's files, in path order. */
static char *cache_state(void)
{
    return mnt_q(&E, "SELECT group_concat(x, '|') FROM (SELECT path || '=' ||"
                     " COALESCE(memory_id, '') || ':' || COALESCE(sha, '') AS x FROM nodes"
                     " WHERE is_dir = 0 AND unlinked = 0 AND parent IS NOT NULL ORDER BY path)");
}

/* The same from a full listing of the store. */
static char *server_state(void)
{
    char q[300];
    snprintf(q, sizeof(q), "/v1/memory_stores/%s/memories?view=basic&limit=100", store);
    long err = 0;
    cJSON *l = t_list_all(&E.msd, q, NULL, &err);
    cr_assert_not_null(l, "cannot list: %ld", err);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    const cJSON *it;
    int k = 0;
    cJSON_ArrayForEach(it, l)
        fprintf(f, "%s%s=%s:%s", k++ ? "|" : "", tj_str(it, "path"), tj_str(it, "id"),
                tj_str(it, "content_sha256"));
    fclose(f);
    cJSON_Delete(l);
    return buf;
}

static void expect_cache_is_listing(const char *when)
{
    char *c = cache_state(), *s = server_state();
    cr_expect_str_eq(c, s, "%s: the cache differs from a full listing", when);
    free(c);
    free(s);
}

static void clock_set(long offset_ms, bool freeze)
{
    char body[100];
    snprintf(body, sizeof(body), "{\"offset_ms\":%ld,\"freeze\":%s}", offset_ms,
             freeze ? "true" : "false");
    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "POST", "/admin/clock", body, &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
}

static long admin_total(void)
{
    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "GET", "/admin/stats", NULL, &r), 0);
    long n = (long)tj_num(r.json, "total");
    tresp_free(&r);
    return n;
}

/* ---- a random writer at the server ---- */

static unsigned rs;
static int made;

static cJSON *live(void)
{
    char q[300];
    snprintf(q, sizeof(q), "/v1/memory_stores/%s/memories?view=basic&limit=100", store);
    long err = 0;
    cJSON *l = t_list_all(&E.msd, q, NULL, &err);
    cr_assert_not_null(l);
    return l;
}

static void remote_op(void)
{
    cJSON *l = live();
    int n = cJSON_GetArraySize(l);
    unsigned k = (unsigned)rand_r(&rs) % 100;
    const cJSON *m = n ? cJSON_GetArrayItem(l, rand_r(&rs) % n) : NULL;
    const char *id = m ? tj_str(m, "id") : NULL;
    char path[400], body[300];
    struct tresp r;
    if (k < 25 || !m) {
        char p[64], c[64];
        snprintf(p, sizeof(p), "/r/n%03d.md", made);
        snprintf(c, sizeof(c), "made %d\n", made++);
        free(t_create_memory(&E.msd, store, p, c));
    } else if (k < 50) {
        snprintf(body, sizeof(body), "{\"content\":\"edit %u\\n\"}", (unsigned)rand_r(&rs));
        sy_remote_update(id, body);
    } else if (k < 65) {
        snprintf(body, sizeof(body), "{\"path\":\"/moved/v%03d.md\"}", made++);
        sy_remote_update(id, body);
    } else if (k < 80) {
        sy_remote_delete(id);
    } else {
        /* A redaction: an older version of a memory edited twice here, or
         * the deleted version of a memory deleted here. */
        snprintf(body, sizeof(body), "{\"content\":\"before redaction %u\\n\"}", made++);
        sy_remote_update(id, body);
        sy_remote_update(id, "{\"content\":\"after redaction\\n\"}");
        bool drop = rand_r(&rs) % 2;
        if (drop)
            sy_remote_delete(id);
        cJSON *v = sy_versions(id);
        const cJSON *target = cJSON_GetArrayItem(v, drop ? 0 : 1); /* newest first */
        snprintf(path, sizeof(path), "/v1/memory_stores/%s/memory_versions/%s/redact", store,
                 tj_str(target, "id"));
        cr_expect_eq(t_api(&E.msd, "POST", path, "{}", &r), 0);
        cr_expect_eq(r.status, 200, "redact: %s", r.body);
        tresp_free(&r);
        cJSON_Delete(v);
    }
    cJSON_Delete(l);
}

static volatile int writing;
static int written; /* the writer's operations */

static void *writer(void *arg)
{
    while (__atomic_load_n(&writing, __ATOMIC_ACQUIRE)) {
        remote_op();
        __atomic_add_fetch(&written, 1, __ATOMIC_RELEASE);
        usleep(20 * 1000);
    }
    return NULL;
}

Test(mount_sync_feed, random_remote_changes_leave_the_cache_as_a_listing_says)
{
    mount_quiet("--full-resync 0");
    sy_after_sync();
    expect_cache_is_listing("after the mount");
    int listed = 0;
    rs = 1111;
    for (int round = 0; round < 24; round++) {
        char when[64];
        snprintf(when, sizeof(when), "round %d", round);
        if (round % 4 == 3) {
            /* Writes during the sync; the sync after them settles them.
             * The daemon's read of the feed (memory_versions with
             * view=basic; the writer's reads of versions carry no view) is
             * held 400 ms, so that the writes meet it (a sync of 30 ms
             * could end before the writer's first one, and the round test
             * nothing new). */
            sy_fault("{\"action\":\"latency\",\"latency_ms\":400,\"count\":1,"
                     "\"method\":\"GET\",\"path\":\"/v1/memory_stores/*/memory_versions\","
                     "\"query\":\"view=basic\"}");
            writing = 1;
            written = 0;
            pthread_t t;
            cr_assert_eq(pthread_create(&t, NULL, writer, NULL), 0);
            sy_after_sync();
            int during = __atomic_load_n(&written, __ATOMIC_ACQUIRE);
            __atomic_store_n(&writing, 0, __ATOMIC_RELEASE);
            pthread_join(t, NULL);
            cr_expect_geq(during, 3, "%s: %d writes during the sync", when, during);
        } else {
            for (int k = 0, n = 1 + rand_r(&rs) % 4; k < n; k++)
                remote_op();
        }
        /* Only the daemon talks to the server during this sync. */
        long lists = t_route_count(&E.msd, LIST_ROUTE);
        sy_after_sync();
        listed += t_route_count(&E.msd, LIST_ROUTE) != lists;
        expect_cache_is_listing(when);
    }
    cr_expect_eq(listed, 0, "%d syncs listed the store instead of reading the feed", listed);
    /* The mount shows it too. */
    char *out = NULL;
    sy_run(&out, "find . -type f ! -name .anthropic-memory-store | wc -l");
    char *n = mnt_q(&E, "SELECT count(*) FROM nodes WHERE is_dir = 0 AND unlinked = 0"
                        " AND parent IS NOT NULL");
    cr_expect_eq(atoi(out), atoi(n), "the mount shows %s files, the cache holds %s", out, n);
    free(out);
    free(n);
    char *bad = sy_check_hashes();
    cr_expect_null(bad, "%s", bad);
    free(bad);
}

Test(mount_sync_feed, an_idle_sync_is_one_request_and_own_pushes_cost_nothing)
{
    /* 250 memories: a listing takes 3 pages, the feed 1 request.  Most
     * were written two minutes ago (by the server's clock): the feed
     * reads again only the writes of the last 30 s before a read. */
    clock_set(-120000, false);
    for (int i = 0; i < 230; i++) {
        char p[64];
        snprintf(p, sizeof(p), "/big/b%03d.md", i);
        free(t_create_memory(&E.msd, store, p, "b\n"));
    }
    clock_set(0, false);
    mount_quiet("");
    sy_after_sync();
    sy_reset_stats();
    for (int i = 0; i < 3; i++)
        sy_after_sync();
    cr_expect_eq(admin_total(), 3, "three idle syncs took %ld requests", admin_total());
    cr_expect_eq(t_route_count(&E.msd, FEED_ROUTE), 3);
    /* A local edit is pushed; the version it makes comes back in the
     * feed, and is recognised: no download, no second write. */
    cr_assert_eq(sy_run(NULL, "echo mine > s/m03.md"), 0);
    sy_after_sync();
    sy_reset_stats();
    sy_after_sync();
    sy_after_sync();
    cr_expect_eq(admin_total(), 2, "syncs after a push took %ld requests", admin_total());
    cr_expect_eq(t_route_count(&E.msd, FETCH_ROUTE), 0, "our own push was downloaded");
    char *c = sy_content("/s/m03.md");
    cr_expect_str_eq(c ? c : "(none)", "mine\n");
    free(c);
}

Test(mount_sync_feed, writes_in_one_millisecond_or_stamped_late_are_not_missed)
{
    mount_quiet("--full-resync 0");
    sy_after_sync();
    char *a = sy_id("/s/m01.md"), *b = sy_id("/s/m02.md");
    /* Every write in the same millisecond, across two syncs. */
    clock_set(0, true);
    cr_assert_eq(sy_remote_update(a, "{\"content\":\"frozen a\\n\"}"), 200);
    sy_after_sync();
    cr_assert_eq(sy_remote_update(b, "{\"content\":\"frozen b\\n\"}"), 200);
    free(t_create_memory(&E.msd, store, "/s/frozen.md", "frozen c\n"));
    sy_after_sync();
    expect_cache_is_listing("frozen clock");
    /* Writes stamped 10 s before writes already read. */
    clock_set(-10000, false);
    cr_assert_eq(sy_remote_update(a, "{\"content\":\"late a\\n\"}"), 200);
    free(t_create_memory(&E.msd, store, "/s/late.md", "late\n"));
    clock_set(0, false);
    sy_after_sync();
    expect_cache_is_listing("late writes");
    char *out = NULL;
    sy_run(&out, "cat s/m01.md s/m02.md s/frozen.md s/late.md");
    cr_expect_str_eq(out, "late a\nfrozen b\nfrozen c\nlate\n");
    free(out);
    free(a);
    free(b);
}

Test(mount_sync_feed, a_redacted_deletion_is_settled_by_asking_for_the_memory)
{
    mount_quiet("--full-resync 0");
    sy_after_sync();
    char *id = sy_id("/s/m05.md");
    cr_assert_eq(sy_remote_delete(id), 200);
    cJSON *v = sy_versions(id);
    char path[400];
    snprintf(path, sizeof(path), "/v1/memory_stores/%s/memory_versions/%s/redact", store,
             tj_str(cJSON_GetArrayItem(v, 0), "id"));
    cJSON_Delete(v);
    struct tresp r;
    cr_assert_eq(t_api(&E.msd, "POST", path, "{}", &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
    long fetches = t_route_count(&E.msd, FETCH_ROUTE);
    sy_after_sync();
    cr_expect_gt(t_route_count(&E.msd, FETCH_ROUTE), fetches, "the memory was not asked for");
    cr_expect_neq(sy_run(NULL, "test -e s/m05.md"), 0, "the deleted memory is still there");
    expect_cache_is_listing("redacted deletion");
    free(id);
}

/* A write stamped a minute before the watermark is beyond the feed's
 * overlap: only the periodic full listing sees it, and says so. */
Test(mount_sync_feed, the_full_resync_finds_what_the_feed_missed)
{
    mount_quiet("--full-resync 30");
    sy_after_sync();
    char *id = sy_id("/s/m07.md");
    clock_set(-120000, false);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"hidden\\n\"}"), 200);
    clock_set(0, false);
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "cat s/m07.md");
    cr_expect_str_eq(out, "seed 7\n", "the feed saw a write stamped before its window: the "
                                      "test proves nothing");
    free(out);
    sleep(31);
    long lists = t_route_count(&E.msd, LIST_ROUTE);
    sy_after_sync();
    cr_expect_gt(t_route_count(&E.msd, LIST_ROUTE), lists, "no full listing after --full-resync");
    sy_run(&out, "cat s/m07.md");
    cr_expect_str_eq(out, "hidden\n", "the full listing did not repair the cache");
    free(out);
    cr_expect_eq(sy_log_count("the version feed missed changes", NULL), 1, "%s",
                 sy_log_grep("feed"));
    expect_cache_is_listing("after the full resync");
    free(id);
}

/* The feed names a remote change of a file the sync does not decide then
 * (held: written and flushed, its writer still open).  Once the writer
 * closes, the update meets the newer version (409): the store wins, once.
 * The next sync lists the store in full to pull what the feed gave before
 * (the feed will not name it again), so it records one conflict and
 * brings the file to the store's version, and does not fail the same
 * update at every sync until the periodic full listing. */
/* s/m03.md edited and held by a writer while its memory is changed
 * remotely (body: the update's JSON) and a sync reads the feed; then the
 * writer rewrites the file with back (NULL: leaves the edit) and closes.
 * The memory's id. */
static char *remote_change_while_held(const char *body, const char *back)
{
    mount_quiet("");
    sy_after_sync();
    char path[512];
    snprintf(path, sizeof(path), "%s/s/m03.md", mnt);
    int fd = open(path, O_WRONLY | O_TRUNC);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    cr_assert_eq(write(fd, "local edit\n", 11), 11);
    int d = dup(fd);
    cr_assert_eq(close(d), 0); /* a flush: held while fd stays open */
    char *id = sy_id("/s/m03.md");
    cr_assert_not_null(id);
    cr_assert_eq(sy_remote_update(id, body), 200);
    sy_after_sync(); /* the feed names it; the file is held */
    if (back) {
        cr_assert_eq(ftruncate(fd, 0), 0);
        cr_assert_eq(pwrite(fd, back, strlen(back), 0), (ssize_t)strlen(back));
    }
    cr_assert_eq(close(fd), 0);
    return id;
}

Test(mount_sync_feed, a_remote_change_met_while_the_file_was_held_is_pulled_at_once)
{
    char *id = remote_change_while_held("{\"content\":\"remote edit\\n\"}", NULL);
    sy_after_sync(); /* the update meets the remote edit: the store wins */
    sy_after_sync();
    sy_after_sync();
    char *got = sy_content("/s/m03.md");
    cr_expect_str_eq(got ? got : "(none)", "remote edit\n");
    free(got);
    char *out = NULL;
    sy_run(&out, "cat s/m03.md");
    cr_expect_str_eq(out, "remote edit\n", "the store's version was not pulled");
    free(out);
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts WHERE path = '/s/m03.md'");
    cr_expect_str_eq(n, "1", "not exactly one conflict record of the local edit");
    free(n);
    cr_expect_eq(sy_pending(), 0, "the file stays pending");
    free(id);
}

/* The same with a remote rename, which an update of the content alone
 * does not meet (a rename keeps the hash: no 409): the feed names the
 * rename while the file is held, and the apply leaves the held file
 * alone.  The syncs list the store in full until the file is decided, so
 * the store wins (the local edit kept as a record, the file at the
 * memory's new path); the rename is not undone by a path update sent
 * back from the file's old path. */
Test(mount_sync_feed, a_remote_rename_met_while_the_file_was_held_is_not_undone)
{
    char *id = remote_change_while_held("{\"path\":\"/s/moved.md\"}", NULL);
    sy_after_sync();
    sy_after_sync();
    char *got = sy_content("/s/moved.md");
    cr_expect_str_eq(got ? got : "(none)", "seed 3\n", "the remote rename was undone");
    free(got);
    got = sy_content("/s/m03.md");
    cr_expect_null(got, "the memory went back to its old path");
    free(got);
    char *out = NULL;
    sy_run(&out, "cat s/moved.md 2>&1; test -e s/m03.md && echo old path still there");
    cr_expect_str_eq(out, "seed 3\n", "the mount does not show the store's version");
    free(out);
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts WHERE path = '/s/m03.md'");
    cr_expect_str_eq(n, "1", "not exactly one conflict record of the local edit");
    free(n);
    cr_expect_eq(sy_pending(), 0, "the file stays pending");
    free(id);
}

/* The same, but the writer puts the file back as it was before it
 * closes: nothing local is left to keep, so the store's version comes in
 * with no conflict record, and nothing is sent. */
Test(mount_sync_feed, a_held_file_put_back_as_it_was_takes_the_remote_change)
{
    char *id = remote_change_while_held("{\"content\":\"remote edit\\n\"}", "seed 3\n");
    long writes = sy_writes();
    sy_after_sync();
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "cat s/m03.md");
    cr_expect_str_eq(out, "remote edit\n", "the store's version was not pulled");
    free(out);
    char *got = sy_content("/s/m03.md");
    cr_expect_str_eq(got ? got : "(none)", "remote edit\n", "the store's version was replaced");
    free(got);
    cr_expect_eq(sy_writes(), writes, "the file was sent back");
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts WHERE path = '/s/m03.md'");
    cr_expect_str_eq(n, "0", "a conflict record of content the store already had");
    free(n);
    cr_expect_eq(sy_pending(), 0, "the file stays pending");
    free(id);
}

/* A new file held by its writer (flushed, never pushed) while a memory is
 * created remotely at its path, then a full listing: the apply cannot
 * place the memory where the held file stands, and the feed will not name
 * it again (the listing's head read it).  The listing keeps it for the
 * syncs from the feed that follow, so once the writer closes the store
 * wins (the local file kept as a record) instead of the file's create
 * meeting a 409 at every sync until the next full listing. */
Test(mount_sync_feed, a_memory_a_full_listing_could_not_place_is_not_forgotten)
{
    mount_quiet("--full-resync 30");
    sy_after_sync();
    char path[512];
    snprintf(path, sizeof(path), "%s/s/new.md", mnt);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    cr_assert_eq(write(fd, "local\n", 6), 6);
    int d = dup(fd);
    cr_assert_eq(close(d), 0); /* a flush: held while fd stays open */
    char *id = t_create_memory(&E.msd, store, "/s/new.md", "remote\n");
    cr_assert_not_null(id);
    sleep(31); /* past --full-resync */
    long lists = t_route_count(&E.msd, LIST_ROUTE);
    sy_after_sync();
    cr_assert_gt(t_route_count(&E.msd, LIST_ROUTE), lists, "no full listing: the test proves "
                                                           "nothing");
    cr_assert_eq(close(fd), 0);
    lists = t_route_count(&E.msd, LIST_ROUTE);
    sy_after_sync();
    sy_after_sync();
    cr_expect_eq(t_route_count(&E.msd, LIST_ROUTE), lists, "the syncs listed in full: the test "
                                                           "proves nothing");
    char *got = sy_content("/s/new.md");
    cr_expect_str_eq(got ? got : "(none)", "remote\n", "the store's memory was replaced");
    free(got);
    char *out = NULL;
    sy_run(&out, "cat s/new.md");
    cr_expect_str_eq(out, "remote\n", "the mount does not show the store's version");
    free(out);
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts WHERE path = '/s/new.md'");
    cr_expect_str_eq(n, "1", "not exactly one conflict record of the local file");
    free(n);
    cr_expect_eq(sy_pending(), 0, "the file stays pending");
    free(id);
}

/* Two versions of one memory in one millisecond: the list's order cannot
 * say which is newer, so the memory is asked for, once.  The reads that
 * follow within the overlap see the same two versions, both settled: no
 * request of their own.  (Before the fix every read of the overlap asked
 * for the memory again.) */
Test(mount_sync_feed, versions_of_one_millisecond_are_settled_once)
{
    mount_quiet("--full-resync 0");
    sy_after_sync();
    char *a = sy_id("/s/m01.md");
    clock_set(0, true);
    cr_assert_eq(sy_remote_update(a, "{\"content\":\"tie one\\n\"}"), 200);
    cr_assert_eq(sy_remote_update(a, "{\"content\":\"tie two\\n\"}"), 200);
    clock_set(0, false);
    sy_reset_stats();
    sy_after_sync();
    sy_after_sync();
    sy_after_sync();
    cr_expect_eq(t_route_count(&E.msd, FETCH_ROUTE), 1, "the memory was asked for %ld times",
                 t_route_count(&E.msd, FETCH_ROUTE));
    char *out = NULL;
    sy_run(&out, "cat s/m01.md");
    cr_expect_str_eq(out, "tie two\n");
    free(out);
    expect_cache_is_listing("a tie");
    free(a);
}
