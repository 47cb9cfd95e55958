/* test_mount_sync_push.c - every kind of local change made through the
 * mount reaches the store within about one sync interval, with the right
 * paths, contents and hashes, and renames keep the memory's identity;
 * editors' saves (sed -i, mv tmp target, vim's write-fsync-rename) are one
 * `modified` version of the target's memory and no temp path ever exists
 * on the server. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {
    "/keep.md", "unchanged\n",
    "/app.md", "first\n",
    "/over.md", "old content\n",
    "/trunc.md", "0123456789\n",
    "/empty.md", "will be emptied\n",
    "/mv/src.md", "moving\n",
    "/dir/x.md", "x\n",
    "/dir/sub/y.md", "y\n",
    "/del.md", "doomed\n",
    "/rmr/a.md", "a\n",
    "/rmr/b/c.md", "c\n",
    "/sed.md", "alpha beta\n",
    "/mvtmp.md", "before mv\n",
    "/vim.md", "before vim\n",
    NULL,
};

static void setup(void)
{
    sy_start(seed);
    sy_mount(false, "");
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_push, .init = setup, .fini = teardown, .timeout = 90);

Test(mount_sync_push, every_kind_of_change_reaches_the_store)
{
    char *id_app = sy_id("/app.md"), *id_src = sy_id("/mv/src.md"), *id_x = sy_id("/dir/x.md"),
         *id_y = sy_id("/dir/sub/y.md"), *id_over = sy_id("/over.md"),
         *id_del = sy_id("/del.md");
    cr_assert(id_app && id_src && id_x && id_y && id_over && id_del);
    char *out = NULL;
    int rc = sy_run(&out,
                    "echo new > create.md && echo more >> app.md && "
                    "echo replaced > over.md && truncate -s 4 trunc.md && "
                    "truncate -s 0 empty.md && "
                    "mkdir -p deep/er/est && echo d1 > deep/er/est/f1.md && "
                    "echo d2 > deep/er/f2.md && "
                    "mv mv/src.md moved.md && mv dir renamed && rm del.md && rm -r rmr");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);

    const char *const want[] = {
        "/keep.md", "unchanged\n",
        "/app.md", "first\nmore\n",
        "/over.md", "replaced\n",
        "/trunc.md", "0123",
        "/empty.md", "",
        "/create.md", "new\n",
        "/deep/er/est/f1.md", "d1\n",
        "/deep/er/f2.md", "d2\n",
        "/moved.md", "moving\n",
        "/renamed/x.md", "x\n",
        "/renamed/sub/y.md", "y\n",
        "/sed.md", "alpha beta\n",
        "/mvtmp.md", "before mv\n",
        "/vim.md", "before vim\n",
        NULL,
    };
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    char *exp = sy_expect_state(want);
    cr_assert(ok, "the store did not get the changes:\n got  %s\n want %s", last, exp);
    free(exp);
    free(last);

    char *bad = sy_check_hashes();
    cr_expect_null(bad, "%s", bad);
    free(bad);

    /* Renames and edits keep the memory; a move is one update of its path. */
    struct {
        const char *path, *id;
    } same[] = {{"/app.md", id_app}, {"/moved.md", id_src}, {"/renamed/x.md", id_x},
                {"/renamed/sub/y.md", id_y}, {"/over.md", id_over}};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        char *id = sy_id(same[i].path);
        cr_expect_str_eq(id ? id : "(none)", same[i].id, "%s is not the same memory",
                         same[i].path);
        free(id);
        cr_expect_eq(sy_count_versions(same[i].id, "modified"), 1, "%s: not one modified "
                     "version", same[i].path);
    }
    cr_expect_eq(sy_count_versions(id_del, "deleted"), 1, "rm did not delete the memory");

    /* The cache agrees: nothing left to push. */
    cr_expect(sy_wait_clean(WITHIN), "changes still pending after the push: %d", sy_pending());
    char *st = mnt_q(&E, "SELECT group_concat(path || ' ' || COALESCE(memory_id, '-') || ' ' ||"
                    " COALESCE(sha, '-') || ' ' || COALESCE(base_sha, '-') || ' ' ||"
                    " COALESCE(base_path, '-') || ' ' || state, '; ') FROM nodes"
                    " WHERE is_dir = 0 AND unlinked = 0 AND parent IS NOT NULL AND"
                    " (memory_id IS NULL OR base_sha IS NOT sha OR base_path IS NOT path"
                    "  OR state != 0)");
    cr_expect_str_eq(st, "", "files whose baseline is not what they hold: %s", st);
    free(st);
    st = mnt_q(&E, "SELECT group_concat(ino || ' ' || path || ' ' || COALESCE(memory_id, '-') || ' '"
              " || state, '; ') FROM nodes WHERE is_dir = 0 AND unlinked = 0"
              " AND parent IS NULL AND ino > 2");
    cr_expect_str_eq(st, "", "live files outside the tree: %s", st);
    free(st);
    free(id_app);
    free(id_src);
    free(id_x);
    free(id_y);
    free(id_over);
    free(id_del);
}

Test(mount_sync_push, editor_saves_are_one_version_of_the_same_memory)
{
    const char *targets[] = {"/sed.md", "/mvtmp.md", "/vim.md"};
    char *ids[3];
    for (int i = 0; i < 3; i++) {
        ids[i] = sy_id(targets[i]);
        cr_assert_not_null(ids[i]);
    }
    /* Between two syncs: a sync that lands in the milliseconds between a
     * temporary file's close and its rename pushes it (and then deletes
     * it), as it would for any file that exists at that moment. */
    sy_after_sync();
    char *out = NULL;
    int rc = sy_run(&out, "sed -i 's/alpha/gamma/' sed.md && "
                          "printf 'after mv\\n' > .mvtmp.md.tmp && mv .mvtmp.md.tmp mvtmp.md");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* vim: write a swap-like temp file, fsync it, rename it over the target */
    char tmp[600], target[600];
    snprintf(tmp, sizeof(tmp), "%s/.vim.md.swp", mnt);
    snprintf(target, sizeof(target), "%s/vim.md", mnt);
    int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY, 0644);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    cr_assert_eq(write(fd, "after vim\n", 10), 10);
    cr_assert_eq(fsync(fd), 0);
    cr_assert_eq(close(fd), 0);
    cr_assert_eq(rename(tmp, target), 0, "%s", strerror(errno));

    const char *const want[] = {
        "/keep.md", "unchanged\n", "/app.md", "first\n", "/over.md", "old content\n",
        "/trunc.md", "0123456789\n", "/empty.md", "will be emptied\n", "/mv/src.md", "moving\n",
        "/dir/x.md", "x\n", "/dir/sub/y.md", "y\n", "/del.md", "doomed\n", "/rmr/a.md", "a\n",
        "/rmr/b/c.md", "c\n", "/sed.md", "gamma beta\n", "/mvtmp.md", "after mv\n",
        "/vim.md", "after vim\n", NULL,
    };
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    cr_assert(ok, "the saves did not reach the store: %s", last);
    free(last);
    cr_assert(sy_wait_clean(WITHIN), "changes still pending: %d", sy_pending());

    for (int i = 0; i < 3; i++) {
        char *id = sy_id(targets[i]);
        cr_expect_str_eq(id ? id : "(none)", ids[i], "%s changed identity", targets[i]);
        free(id);
        cr_expect_eq(sy_count_versions(ids[i], "modified"), 1, "%s: not exactly one modified "
                     "version", targets[i]);
        cr_expect_eq(sy_count_versions(ids[i], NULL), 2, "%s: not created + modified",
                     targets[i]);
        free(ids[i]);
    }
    /* No version of any memory ever had a path outside the seed's. */
    cJSON *v = sy_versions(NULL);
    const cJSON *it;
    cJSON_ArrayForEach(it, v)
    {
        const char *p = tj_str(it, "path");
        bool known = false;
        for (size_t i = 0; seed[i]; i += 2)
            known |= p && strcmp(p, seed[i]) == 0;
        cr_expect(known, "a temp path reached the store: %s (%s)", p ? p : "(null)",
                  tj_str(it, "operation"));
    }
    cr_expect_eq(cJSON_GetArraySize(v), 14 + 3, "versions: 14 created + 3 modified");
    cJSON_Delete(v);
    char *bad = sy_check_hashes();
    cr_expect_null(bad, "%s", bad);
    free(bad);
}

/* Paths handed from one memory to another between two syncs: a new file
 * at the path a rename freed, a file removed and written again at the
 * same path, and a chain of renames (b -> c, then a -> b).  The server
 * must end with the local tree (no lasting path conflict, no false
 * conflict), each memory keeping its identity. */
Test(mount_sync_push, paths_handed_over_between_memories_converge)
{
    char *id_over = sy_id("/over.md"), *id_del = sy_id("/del.md"), *id_x = sy_id("/dir/x.md"),
         *id_y = sy_id("/dir/sub/y.md");
    cr_assert(id_over && id_del && id_x && id_y);
    sy_after_sync();
    char *out = NULL;
    int rc = sy_run(&out, "mv over.md over2.md && echo reborn > over.md && "
                          "rm del.md && echo again > del.md && "
                          "mv dir/sub/y.md dir/z.md && mv dir/x.md dir/sub/y.md");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    const char *const want[] = {
        "/keep.md", "unchanged\n", "/app.md", "first\n", "/over2.md", "old content\n",
        "/over.md", "reborn\n", "/trunc.md", "0123456789\n", "/empty.md", "will be emptied\n",
        "/mv/src.md", "moving\n", "/dir/sub/y.md", "x\n", "/dir/z.md", "y\n",
        "/del.md", "again\n", "/rmr/a.md", "a\n", "/rmr/b/c.md", "c\n",
        "/sed.md", "alpha beta\n", "/mvtmp.md", "before mv\n", "/vim.md", "before vim\n", NULL,
    };
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    char *log = sy_log_grep("level=warn");
    cr_assert(ok, "the store did not converge: %s\nwarnings:\n%s", last, log);
    free(log);
    free(last);
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    char *out2 = NULL;
    sy_run(&out2, "cat over.md del.md over2.md");
    cr_expect_str_eq(out2, "reborn\nagain\nold content\n", "the local files changed");
    free(out2);
    struct {
        const char *path, *id;
    } same[] = {{"/over2.md", id_over}, {"/del.md", id_del}, {"/dir/sub/y.md", id_x},
                {"/dir/z.md", id_y}};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        char *id = sy_id(same[i].path);
        cr_expect_str_eq(id ? id : "-", same[i].id, "%s is not the expected memory",
                         same[i].path);
        free(id);
        cr_expect_eq(sy_count_versions(same[i].id, "modified"), 1, "%s: not one modified "
                     "version", same[i].path);
    }
    cr_expect_eq(sy_count_versions(NULL, "deleted"), 0, "a memory was deleted");
    cr_expect_eq(sy_count_versions(NULL, "created"), 15, "not exactly one new memory");
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "a false conflict was recorded");
    free(k);
    free(id_over);
    free(id_del);
    free(id_x);
    free(id_y);
}

/* Names swapped locally (mv a t; mv b a; mv t b) cannot be sent as two
 * renames (each target is held by the other memory): the contents move
 * instead, so the store converges to the local state without a temporary
 * path and without a conflict. */
Test(mount_sync_push, swapped_names_converge)
{
    char *id_keep = sy_id("/keep.md"), *id_app = sy_id("/app.md");
    cr_assert(id_keep && id_app);
    sy_after_sync();
    char *out = NULL;
    int rc = sy_run(&out, "mv keep.md t.md && mv app.md keep.md && mv t.md app.md");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    const char *const want[] = {
        "/keep.md", "first\n", "/app.md", "unchanged\n", "/over.md", "old content\n",
        "/trunc.md", "0123456789\n", "/empty.md", "will be emptied\n", "/mv/src.md", "moving\n",
        "/dir/x.md", "x\n", "/dir/sub/y.md", "y\n", "/del.md", "doomed\n", "/rmr/a.md", "a\n",
        "/rmr/b/c.md", "c\n", "/sed.md", "alpha beta\n", "/mvtmp.md", "before mv\n",
        "/vim.md", "before vim\n", NULL,
    };
    char *last = NULL;
    bool ok = sy_wait_server(want, WITHIN, &last);
    char *log = sy_log_grep("level=warn");
    cr_assert(ok, "the store did not converge: %s\nwarnings:\n%s", last, log);
    free(log);
    free(last);
    cr_expect(sy_wait_clean(WITHIN), "still pending: %d", sy_pending());
    /* Each path keeps its memory; each got one modified version. */
    char *k = sy_id("/keep.md"), *a = sy_id("/app.md");
    cr_expect_str_eq(k ? k : "-", id_keep);
    cr_expect_str_eq(a ? a : "-", id_app);
    cr_expect_eq(sy_count_versions(id_keep, "modified"), 1);
    cr_expect_eq(sy_count_versions(id_app, "modified"), 1);
    char *c = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(c, "0", "a false conflict was recorded");
    free(c);
    sy_run(&out, "cat keep.md app.md");
    cr_expect_str_eq(out, "first\nunchanged\n", "the local files changed");
    free(out);
    free(k);
    free(a);
    free(id_keep);
    free(id_app);
}

/* A close is followed at once by a change that fails (rmdir of a directory
 * that is not empty, as `rm -r` attempts and scripts try): the release's
 * "saved" mark rides on that change's transaction, which is rolled back.
 * Every file written must still reach the store within two intervals. */
Test(mount_sync_push, a_close_then_a_change_that_fails_is_still_pushed)
{
    char path[512], body[64];
    snprintf(path, sizeof(path), "%s/marks", mnt);
    cr_assert_eq(mkdir(path, 0755), 0, "%s", strerror(errno));
    for (int i = 0; i < 10; i++) {
        snprintf(path, sizeof(path), "%s/marks/f%d.md", mnt, i);
        snprintf(body, sizeof(body), "closed %d\n", i);
        int rc = mnt_write(path, body);
        cr_assert_eq(rc, 0, "%s: %s", path, strerror(-rc));
        snprintf(path, sizeof(path), "%s/dir", mnt);
        cr_assert_eq(rmdir(path), -1);
        cr_assert_eq(errno, ENOTEMPTY);
    }
    /* One bound for all ten (a failure ends within the suite's timeout,
     * and the teardown unmounts). */
    int left = WITHIN * 4;
    for (int i = 0; i < 10; i++) {
        char remote[64], *got = NULL;
        snprintf(remote, sizeof(remote), "/marks/f%d.md", i);
        snprintf(body, sizeof(body), "closed %d\n", i);
        for (;;) {
            free(got);
            got = sy_content(remote);
            if ((got && strcmp(got, body) == 0) || left-- <= 0)
                break;
            usleep(250 * 1000);
        }
        cr_expect_str_eq(got ? got : "(none)", body, "%s never reached the store", remote);
        free(got);
    }
}

/* Opens that change a file without asking to write it: open(O_CREAT) with
 * O_RDONLY makes a new empty file (flock(1) and lock files do it), and
 * O_RDONLY|O_TRUNC empties one.  Each close finishes the change, so the
 * periodic syncs push it like any other; no writer is left counted. */
Test(mount_sync_push, read_only_opens_that_create_or_truncate_are_pushed)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/lock.md", mnt);
    int fd = open(path, O_RDONLY | O_CREAT, 0644);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    cr_assert_eq(close(fd), 0);
    snprintf(path, sizeof(path), "%s/trunc.md", mnt);
    fd = open(path, O_RDONLY | O_TRUNC);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    cr_assert_eq(close(fd), 0);
    /* A writer of another file closes later: its close is its last. */
    snprintf(path, sizeof(path), "%s/after.md", mnt);
    int rc = mnt_write(path, "after\n");
    cr_assert_eq(rc, 0, "%s", strerror(-rc));

    const char *const want[] = {"/lock.md", "", "/trunc.md", "", "/after.md", "after\n", NULL};
    int left = WITHIN * 4;
    for (int i = 0; want[i]; i += 2) {
        char *got = NULL;
        for (;;) {
            free(got);
            got = sy_content(want[i]);
            if ((got && strcmp(got, want[i + 1]) == 0) || left-- <= 0)
                break;
            usleep(250 * 1000);
        }
        cr_expect_str_eq(got ? got : "(none)", want[i + 1], "%s never reached the store",
                         want[i]);
        free(got);
    }
}

/* The same swap while another client edits one of the two memories: the
 * edit must stay the memory's current version (the store wins), never
 * be overwritten by the swap's content.  Before the fix the content sent
 * to that memory took its current hash, read from the listing, as
 * precondition: the update passed, and the remote edit was left only in
 * the memory's history.  The swap then loses to the store: the edited
 * memory's file is taken back, and the other file's move onto the path
 * that memory keeps is not sent (docs/sync.md, "Path conflicts"). */
Test(mount_sync_push, a_swap_over_a_remote_edit_keeps_the_edit_and_comes_to_the_store)
{
    char *id_keep = sy_id("/keep.md"), *id_app = sy_id("/app.md");
    cr_assert(id_keep && id_app);
    sy_after_sync();
    char *out = NULL;
    int rc = sy_run(&out, "mv keep.md t.md && mv app.md keep.md && mv t.md app.md");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert_eq(sy_remote_update(id_keep, "{\"content\":\"edited in the store\\n\"}"), 200);
    sy_after_sync();
    sy_after_sync();
    char *state = sy_server_state();
    cr_expect_str_eq(state, "/app.md=first\n|/del.md=doomed\n|/dir/sub/y.md=y\n|/dir/x.md=x\n"
                            "|/empty.md=will be emptied\n|/keep.md=edited in the store\n"
                            "|/mv/src.md=moving\n|/mvtmp.md=before mv\n|/over.md=old content\n"
                            "|/rmr/a.md=a\n|/rmr/b/c.md=c\n|/sed.md=alpha beta\n"
                            "|/trunc.md=0123456789\n|/vim.md=before vim\n",
                     "the remote edit was overwritten");
    free(state);
    char *k = sy_id("/keep.md"), *a = sy_id("/app.md");
    cr_expect_str_eq(k ? k : "(none)", id_keep, "/keep.md is another memory");
    cr_expect_str_eq(a ? a : "(none)", id_app, "/app.md is another memory");
    cr_expect_eq(sy_count_versions(id_keep, "modified"), 1, "the edited memory was written again");
    cr_expect_eq(sy_count_versions(id_app, "modified"), 0, "the other memory was written");
    /* The swap lost to the edit: the mount comes to the store's names, and
     * nothing stays pending (before, the other file's move met the path
     * the edited memory holds, 409, at every sync). */
    cr_expect(mnt_wait_sh(&E, WITHIN, "test \"$(cat '%s/keep.md')\" = 'edited in the store' && "
                                      "test \"$(cat '%s/app.md')\" = first", mnt, mnt),
              "the mount does not show the store's names");
    cr_expect(sy_wait_clean(WITHIN), "pending changes remain");
    cr_expect_eq(sy_count_versions(id_app, "modified"), 0, "the other memory was written");
    cr_expect_eq(sy_log_count("the path conflicts with another memory", NULL), 0,
                 "a move was sent onto a held path");
    free(k);
    free(a);
    free(id_keep);
    free(id_app);
}

/* `rm a; mv b a`: the delete goes out before the rename, which then finds
 * the path free.  Before the fix both went out together, and a rename
 * that overtook the delete (here the delete takes a second and a half)
 * met the old memory at the path: a 409, retried a sync later. */
Test(mount_sync_push, a_rename_onto_a_path_removed_in_the_same_sync_finds_it_free)
{
    char *id_app = sy_id("/app.md");
    cr_assert_not_null(id_app);
    sy_after_sync();
    sy_fault("{\"action\":\"latency\",\"latency_ms\":1500,\"count\":1,\"method\":\"DELETE\"}");
    cr_assert_eq(sy_run(NULL, "rm keep.md && mv app.md keep.md"), 0);
    sy_after_sync();
    char *id = sy_id("/keep.md"), *c = sy_content("/keep.md"), *gone = sy_id("/app.md");
    cr_expect_str_eq(id ? id : "(none)", id_app, "/keep.md is not the moved memory");
    cr_expect_str_eq(c ? c : "(none)", "first\n");
    cr_expect_null(gone, "/app.md is still in the store");
    cr_expect_eq(sy_log_count("the path conflicts with another memory", NULL), 0, "%s",
                 sy_log_grep("conflicts"));
    free(id);
    free(c);
    free(gone);
    free(id_app);
}
