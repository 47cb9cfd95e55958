/* test_mount_sync_delete.c - --sync-deletions: `enabled` deletes with the
 * precondition (a memory changed remotely after the local rm is restored
 * locally, not deleted), `log_only` logs and keeps the memory on the
 * server, `disabled` keeps it (both keep the file removed locally for the
 * session; test_mount_sync_modes.c covers later sessions); and the cap
 * max(8, min(50, memories/4)) holds back the rest for later syncs. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reconcile.h"
#include "test_mount_sync.h"

static const char *const seed[] = {
    "/a.md", "alpha\n",
    "/b.md", "beta\n",
    "/keep.md", "kept\n",
    NULL,
};

static void setup(void)
{
    sy_start(seed);
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_delete, .init = setup, .fini = teardown, .timeout = 90);

#define DELETE_ROUTE "DELETE /v1/memory_stores/{id}/memories/{id}"

Test(mount_sync_delete, enabled_deletes_unless_the_memory_changed_remotely)
{
    sy_mount(false, "");
    char *id_a = sy_id("/a.md"), *id_b = sy_id("/b.md");
    cr_assert(id_a && id_b);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "rm a.md b.md"), 0);
    cr_assert_eq(sy_remote_update(id_b, "{\"content\":\"beta, changed remotely\\n\"}"), 200);

    const char *const want[] = {"/b.md", "beta, changed remotely\n", "/keep.md", "kept\n", NULL};
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_assert(ok, "a.md was not deleted, or b.md was: %s", last);
    free(last);
    cr_expect_eq(sy_count_versions(id_a, "deleted"), 1);
    cr_expect_eq(sy_count_versions(id_b, "deleted"), 0, "b.md was deleted");
    /* b.md comes back locally with the remote content, a.md stays gone. */
    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s/b.md')\" = 'beta, changed remotely'",
                          mnt), "b.md was not restored locally");
    cr_expect_neq(sy_run(NULL, "test -e a.md"), 0, "a.md came back");
    cr_expect(sy_wait_log(REC_MSG_RESTORE, "path=/b.md", 1, WITHIN), "no warning for b.md");
    cr_expect(sy_log_count(REC_MSG_DELETED, "path=/a.md") == 1, "no info for a.md's delete");
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    free(id_a);
    free(id_b);
}

Test(mount_sync_delete, log_only_logs_and_keeps_the_memory)
{
    sy_mount(false, "--sync-deletions log_only");
    char *id = sy_id("/a.md");
    cr_assert_not_null(id);
    sy_reset_stats();
    cr_assert_eq(sy_run(NULL, "rm a.md"), 0);
    cr_assert(sy_wait_log(REC_MSG_LOG_ONLY, "path=/a.md", 1, WITHIN), "no log-only line");
    sy_after_sync(); /* one more sync: still nothing sent */
    char *c = sy_content("/a.md");
    cr_expect_str_eq(c ? c : "(deleted)", "alpha\n", "log_only deleted the memory");
    free(c);
    cr_expect_eq(t_route_count(&E.msd, DELETE_ROUTE), 0, "a delete was sent");
    cr_expect_eq(sy_count_versions(id, "deleted"), 0);
    /* Locally the file stays removed (nothing to undo for the user). */
    cr_expect_neq(sy_run(NULL, "test -e a.md"), 0, "a.md came back locally");
    free(id);
}

Test(mount_sync_delete, disabled_keeps_the_memory)
{
    sy_mount(false, "--sync-deletions disabled");
    char *id = sy_id("/a.md");
    cr_assert_not_null(id);
    sy_reset_stats();
    cr_assert_eq(sy_run(NULL, "rm a.md && echo new > new.md"), 0);
    /* Uploads are unaffected by the mode. */
    const char *const want[] = {"/a.md", "alpha\n", "/b.md", "beta\n", "/keep.md", "kept\n",
                                "/new.md", "new\n", NULL};
    char *last = NULL;
    cr_assert(sy_wait_server(want, WITHIN, &last), "%s", last);
    free(last);
    sy_after_sync(); /* a sync after the one that pushed new.md */
    cr_expect_eq(t_route_count(&E.msd, DELETE_ROUTE), 0, "a delete was sent");
    cr_expect_eq(sy_count_versions(id, "deleted"), 0);
    char *c = sy_content("/a.md");
    cr_expect_str_eq(c ? c : "(deleted)", "alpha\n", "disabled deleted the memory");
    free(c);
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    /* Locally the file stays removed for the session, as with log_only. */
    cr_expect_neq(sy_run(NULL, "test -e a.md"), 0, "a.md came back locally");
    free(id);
}

Test(mount_sync_delete, the_cap_holds_back_the_rest_for_later_syncs)
{
    /* 40 memories (3 seeded + 37): cap max(8, min(50, 40/4)) = 10. */
    for (int i = 0; i < 37; i++) {
        char path[64], content[64];
        snprintf(path, sizeof(path), "/many/m%02d.md", i);
        snprintf(content, sizeof(content), "memory %d\n", i);
        free(t_create_memory(&E.msd, store, path, content));
    }
    sy_mount(false, "");
    cJSON *l = sy_list();
    cr_assert_eq(cJSON_GetArraySize(l), 40);
    cJSON_Delete(l);
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "rm many/m0* many/m1*"), 0); /* 20 files */

    cr_assert(sy_wait_log("delete cap reached", NULL, 1, WITHIN), "no delete cap warning");
    cr_expect_eq(sy_log_count("delete cap reached: sent 10 deletes, held 10 for later syncs",
                              "level=warn"), 1, "the first sync did not send 10 and hold 10");
    sleep(1); /* the deletes of that sync are in flight */
    l = sy_list();
    cr_expect_eq(cJSON_GetArraySize(l), 30, "the first sync did not delete exactly 10 (%d left)",
                 cJSON_GetArraySize(l));
    cJSON_Delete(l);
    /* The next sync sends the rest. */
    bool done = false;
    for (int i = 0; i < WITHIN * 4 && !done; i++) {
        l = sy_list();
        done = cJSON_GetArraySize(l) == 20;
        cJSON_Delete(l);
        if (!done)
            usleep(250 * 1000);
    }
    cr_expect(done, "the held deletes were not sent by a later sync");
    cr_expect_eq(t_route_count(&E.msd, DELETE_ROUTE), 20, "not exactly 20 deletes sent");
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    l = sy_list();
    const cJSON *it;
    cJSON_ArrayForEach(it, l)
    {
        const char *p = tj_str(it, "path");
        cr_expect(strncmp(p, "/many/m0", 8) != 0 && strncmp(p, "/many/m1", 8) != 0,
                  "%s survived", p);
    }
    cJSON_Delete(l);
}

Test(mount_sync_delete, a_reader_of_a_file_deleted_remotely_still_reads_it)
{
    sy_mount(false, "");
    char *id = sy_id("/a.md");
    cr_assert_not_null(id);
    sy_after_sync();
    char path[600], buf[64];
    snprintf(path, sizeof(path), "%s/a.md", mnt);
    cr_assert_eq(sy_run(NULL, "cat a.md > /dev/null"), 0); /* warm */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(sy_remote_delete(id), 200);
    bool gone = mnt_wait_sh(&E, WITHIN, "test ! -e '%s/a.md'", mnt);
    /* The kernel may drop its pages at any time: a read then asks us. */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    int e = errno;
    close(fd);
    cr_assert(gone, "a.md was not removed locally");
    cr_assert_eq(n, 6, "read %zd bytes (%s)", n, n < 0 ? strerror(e) : "");
    buf[n] = 0;
    cr_expect_str_eq(buf, "alpha\n");
    free(id);
}

/* An update whose answer was lost, then `rm`, under log_only: the sync
 * that reads the store finds the upload there and keeps the deletion,
 * and so do the syncs after it.  Before the fix the upload's record was
 * used once and dropped while the deletion kept the older baseline: the
 * next sync took the store's copy of the upload for a remote edit and
 * brought the file back ("deleted locally but changed remotely"). */
Test(mount_sync_delete, a_removed_file_s_lost_upload_does_not_bring_it_back)
{
    sy_mount(false, "--sync-deletions log_only");
    char *id = sy_id("/a.md");
    cr_assert_not_null(id);
    sy_after_sync();
    long n0 = t_route_count(&E.msd, "POST /v1/memory_stores/{id}/memories/{id}");
    sy_fault("{\"action\":\"drop_after_commit\",\"count\":0,\"method\":\"POST\","
             "\"path\":\"/v1/memory_stores/*/memories/*\"}");
    cr_assert_eq(sy_run(NULL, "echo edited > a.md"), 0);
    sy_wait_route("POST /v1/memory_stores/{id}/memories/{id}", n0);
    /* No read of the store until the file is removed. */
    sy_refuse_reads();
    cr_assert_neq(sy_run(NULL, "$MFS sync --all --wait >/dev/null 2>&1"), 0);
    cr_assert_eq(sy_run(NULL, "rm a.md"), 0);
    sy_clear_faults();
    /* Every sync from now on lists the whole store (no version feed). */
    sy_fault("{\"action\":\"status\",\"status\":404,\"count\":0,\"method\":\"GET\","
             "\"path\":\"/v1/memory_stores/*/memory_versions\"}");
    sy_after_sync();
    sy_after_sync();
    sy_after_sync();
    cr_expect_neq(sy_run(NULL, "test -e a.md"), 0, "a.md came back");
    cr_expect_eq(sy_log_count(REC_MSG_RESTORE, NULL), 0, "%s", sy_log_grep("restoring"));
    char *c = sy_content("/a.md");
    cr_expect_str_eq(c ? c : "(deleted)", "edited\n", "log_only changed the memory");
    free(c);
    free(id);
}
