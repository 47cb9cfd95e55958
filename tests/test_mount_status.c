/* test_mount_status.c - `memstorefs status` and the log tell the truth
 * when things go wrong: a sync stuck on a server that does not answer, or
 * failing, is shown with since when and why; a warning about a remote item
 * comes once per mount, not at every sync; bytes from the server are
 * escaped in log lines; `status --json` is valid JSON for any mount path;
 * an error message carries its real reason.  Each failed before issue 9:
 * status said ok (or only the last result), the warnings came at every
 * sync, the log held the server's raw bytes, a dead mount at a path with
 * a '"' printed invalid JSON, and the folder error said "Success". */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rules.h"
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

TestSuite(mount_status, .init = setup, .fini = teardown, .timeout = 150);

/* `status --json` of the (one) store, parsed; NULL when it is not JSON. */
static cJSON *status_json(void)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS status --json");
    cr_assert_eq(rc, 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    free(out);
    return j;
}

/* Polls status --json until sync.state is want; the last status seen in
 * *last (caller deletes). */
static bool wait_state(const char *want, int timeout_s, cJSON **last)
{
    *last = NULL;
    for (int i = 0; i < timeout_s * 4; i++) {
        cJSON_Delete(*last);
        *last = status_json();
        const char *st = *last ? tj_str(*last, "sync.state") : NULL;
        if (st && strcmp(st, want) == 0)
            return true;
        usleep(250 * 1000);
    }
    return false;
}

/* No version feed (404): every sync lists the store, so that the faults
 * below, on the listing, meet every sync. */
static void no_feed(void)
{
    sy_fault("{\"action\":\"status\",\"status\":404,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memory_versions\"}");
}

static char *status_text(void)
{
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS status"), 0, "%s", out);
    return out;
}

Test(mount_status, a_sync_stuck_on_a_silent_server_shows)
{
    sy_mount(false, "");
    no_feed();
    /* The next listing waits 14 s for its answer: the sync runs past the
     * 5 s interval. */
    sy_fault("{\"action\":\"latency\",\"latency_ms\":14000,\"count\":1,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
    cJSON *j = NULL;
    cr_assert(wait_state("stuck", 15, &j), "status never said the sync is stuck: %s",
              j ? cJSON_PrintUnformatted(j) : "(not JSON)");
    cr_expect_not_null(tj_str(j, "sync.since"));
    const cJSON *secs = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "sync"), "seconds");
    cr_expect(cJSON_IsNumber(secs) && secs->valuedouble > 5, "seconds past the interval");
    cJSON_Delete(j);
    char *text = status_text();
    cr_expect(strstr(text, "STUCK: a sync has been running for") &&
                  strstr(text, "longer than the 5 s sync interval"), "%s", text);
    free(text);
    /* the answer comes: the status is ok again */
    cr_expect(wait_state("ok", 20, &j), "status stayed %s", j ? tj_str(j, "sync.state") : "?");
    cJSON_Delete(j);
}

Test(mount_status, a_failing_sync_shows_since_when_and_why)
{
    sy_mount(false, "");
    no_feed();
    sy_fault("{\"action\":\"status\",\"status\":403,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memories\"}");
    cJSON *j = NULL;
    cr_assert(wait_state("failing", 25, &j), "status never said the sync is failing: %s",
              j ? cJSON_PrintUnformatted(j) : "(not JSON)");
    const char *err = tj_str(j, "sync.last_error");
    cr_expect(err && strstr(err, "HTTP 403"), "last error: %s", err ? err : "(none)");
    cr_expect_not_null(tj_str(j, "sync.since"));
    cr_expect_not_null(tj_str(j, "sync.last_ok"), "the listing at mount succeeded");
    cJSON_Delete(j);
    char *text = status_text();
    cr_expect(strstr(text, "FAILING since") && strstr(text, "HTTP 403"), "%s", text);
    free(text);
    sy_clear_faults();
    cr_expect(wait_state("ok", WITHIN, &j), "status stayed %s", j ? tj_str(j, "sync.state") : "?");
    cr_expect_null(tj_str(j, "sync.last_error"));
    cJSON_Delete(j);
}

Test(mount_status, a_warning_about_a_remote_item_comes_once_per_mount)
{
    /* Three memories whose paths cannot be local files (a name over 255
     * bytes), and a remote memory below a local file. */
    char path[400];
    for (int i = 0; i < 3; i++) {
        int k = snprintf(path, sizeof(path), "/long%d-", i);
        memset(path + k, 'n', 300);
        path[k + 300] = '\0';
        char *id = t_create_memory(&E.msd, store, path, "x");
        cr_assert_not_null(id, "memstored refused a 300-byte name");
        free(id);
    }
    /* The listing at mount warns on the mount's stderr (the log file takes
     * over once every store is mounted). */
    char *mount_out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "s", false, "", &mount_out), 0, "%s", mount_out);
    /* The sync the daemon starts at mount is over before x is written: it
     * would push x before the remote memory below it is made. */
    sy_after_sync();
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "echo local > x && ls"), 0, "%s", out);
    cr_expect_str_eq(out, "a.md\nx\n", "the long names are not left out of the mount: %s", out);
    free(out);
    char *id = t_create_memory(&E.msd, store, "/x/y.md", "below a local file");
    cr_assert_not_null(id);
    free(id);
    /* Every sync lists the store (no feed), so each of the three meets
     * the long names again, not only the first after the mount. */
    no_feed();
    long lists = t_route_count(&E.msd, "GET /v1/memory_stores/{id}/memories");
    for (int i = 0; i < 3; i++)
        sy_after_sync();
    lists = t_route_count(&E.msd, "GET /v1/memory_stores/{id}/memories") - lists;
    cr_expect_geq(lists, 3, "the syncs listed the store %ld times", lists);
    const char *skip = "the server listed a path that cannot be a file; skipping";
    int at_mount = 0;
    for (const char *p = mount_out; (p = strstr(p, skip)); p++)
        at_mount++;
    cr_expect_eq(at_mount + sy_log_count(skip, NULL), 3, "at mount:\n%s\nlog:\n%s", mount_out,
                 sy_log_grep(skip));
    free(mount_out);
    const char *below = "a remote memory lies below a local file";
    cr_expect_eq(sy_log_count(below, NULL), 1, "%s", sy_log_grep(below));
    const char *conflict = "the path conflicts with another memory on the server";
    cr_expect_eq(sy_log_count(conflict, NULL), 1, "%s", sy_log_grep(conflict));
}

/* A reply fault answering the bytes of body exactly (hex-encoded for the
 * admin API, which takes JSON). */
static void serve_hex(const char *method, const char *path, int status, int count,
                      const char *body)
{
    size_t n = strlen(body);
    char *hex = malloc(2 * n + 1);
    cr_assert_not_null(hex);
    for (size_t i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)body[i]);
    char *fault = NULL;
    cr_assert(asprintf(&fault, "{\"action\":\"reply\",\"status\":%d,\"count\":%d,"
                               "\"method\":\"%s\"%s%s%s,\"body_hex\":\"%s\"}", status, count,
                               method, path ? ",\"path\":\"" : "", path ? path : "",
                               path ? "\"" : "", hex) > 0);
    sy_fault(fault);
    free(fault);
    free(hex);
}

/* True when the whole file is UTF-8. */
static bool file_is_utf8(const char *file)
{
    size_t len = 0;
    char *text = mnt_read(file, &len);
    bool ok = text && rules_utf8_valid(text, len);
    free(text);
    return ok;
}

Test(mount_status, bytes_from_the_server_are_escaped_in_the_log)
{
    sy_mount(false, "");
    no_feed();
    sy_after_sync();
    /* An error message that is not UTF-8 (raw bytes: body_hex) answers the
     * upload of an edit... */
    serve_hex("POST", NULL, 500, 5, "{\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                                   "\"message\":\"broken \xc3\x28 reply\"},\"request_id\":null}");
    cr_assert_eq(sy_run(NULL, "echo edit >> a.md"), 0);
    cr_assert(sy_wait_log("broken", NULL, 1, 2 * WITHIN), "%s", sy_log());
    /* ...and a listing holds a path that is not UTF-8 either. */
    char *listing = NULL;
    cr_assert(asprintf(&listing, "{\"data\":[{\"type\":\"memory\",\"id\":\"mem_bad\","
                                 "\"memory_store_id\":\"%s\",\"path\":\"/bad\xff\xfe.md\","
                                 "\"content\":null,\"content_sha256\":\"%064d\","
                                 "\"content_size_bytes\":1,\"memory_version_id\":\"memver_1\","
                                 "\"created_at\":\"2026-01-01T00:00:00Z\",\"updated_at\":"
                                 "\"2026-01-01T00:00:00Z\"}],\"next_page\":null}", store, 0) > 0);
    serve_hex("GET", "/v1/memory_stores/*/memories", 200, 1, listing);
    free(listing);
    cr_assert(sy_wait_log("mem_bad", NULL, 1, WITHIN), "%s", sy_log());
    char file[400];
    snprintf(file, sizeof(file), "%s/memstorefs.log", E.cache);
    cr_expect(file_is_utf8(file), "the log holds bytes that are not UTF-8");
    cr_expect_eq(sy_log_count("/bad\\xff\\xfe.md", NULL), 1, "%s", sy_log_grep("bad"));
    cr_expect_geq(sy_log_count("broken \\xc3( reply", NULL), 1, "%s", sy_log_grep("broken"));
}

Test(mount_status, status_json_is_valid_for_any_mount_path)
{
    char name[] = "q\"uote\\d";
    char *out = NULL;
    int rc = mnt_mount(&E, store, name, false, "", &out);
    cr_assert_eq(rc, 0, "mount failed: %s", out);
    free(out);
    cJSON *j = status_json();
    cr_assert_not_null(j, "status --json of a live mount is not JSON");
    char want[600];
    snprintf(want, sizeof(want), "%s/%s", E.mnt, name);
    cr_expect_str_eq(tj_str(j, "mount_path"), want);
    cJSON_Delete(j);
    /* the daemon dies: a dead mount, shown from its lock file */
    pid_t pid = mnt_daemon_pid(&E);
    cr_assert_gt(pid, 0);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    for (int i = 0; i < 50 && kill(pid, 0) == 0; i++)
        usleep(100 * 1000);
    j = status_json();
    cr_assert_not_null(j, "status --json of a dead mount is not JSON");
    cr_expect_str_eq(tj_str(j, "state"), "dead");
    cr_expect_str_eq(tj_str(j, "mount_path"), want);
    cJSON_Delete(j);
}

Test(mount_status, a_folder_that_cannot_be_made_says_why)
{
    /* As an unprivileged user, below a directory only root may write to;
     * the runtime directory is the user's own. */
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "mkdir -p '%s/locked' '%s/run-nobody' && chmod 755 '%s/locked' && "
                              "chown 65534:65534 '%s/run-nobody' && chmod 700 '%s/run-nobody' && "
                              "chmod 755 '%s' && MEMSTOREFS_RUNTIME_DIR='%s/run-nobody' "
                              "setpriv --reuid=65534 --regid=65534 --clear-groups "
                              "$MFS mount --foreground --store %s:'%s/locked/sub' "
                              "--cache-dir '%s/run-nobody/cache'",
                    E.root, E.root, E.root, E.root, E.root, E.root, E.root, store, E.root,
                    E.root);
    cr_expect_neq(rc, 0, "the mount succeeded: %s", out);
    cr_expect(strstr(out, "cannot create the memory store's folder") &&
                  strstr(out, "Permission denied"), "%s", out);
    cr_expect_null(strstr(out, "Success"), "%s", out);
    free(out);
}

Test(mount_status, unmount_says_what_happens_to_a_refused_file)
{
    sy_mount(false, "");
    cr_assert_eq(sy_run(NULL, "printf 'not \\377 utf-8' > bin.md"), 0);
    cJSON *j = NULL;
    bool refused = false;
    for (int i = 0; i < WITHIN * 4 && !refused; i++) {
        cJSON_Delete(j);
        j = status_json();
        const cJSON *r = j ? cJSON_GetObjectItem(j, "refused") : NULL;
        refused = cJSON_IsNumber(r) && r->valueint == 1;
        if (!refused)
            usleep(250 * 1000);
    }
    cJSON_Delete(j);
    cr_assert(refused, "the file was never refused");
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS unmount '%s'", mnt);
    cr_expect_eq(rc, 3, "%s", out);
    cr_expect(strstr(out, "1 file refused by the server (retried only once its content changes)"),
              "%s", out);
    cr_expect_null(strstr(out, "pushes"), "a refused file is said to be pushed: %s", out);
    free(out);
}
