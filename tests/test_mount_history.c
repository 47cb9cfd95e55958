/* test_mount_history.c - memory history and recovery from the shell
 * (issue 14, docs/history.md), through a real mount against memstored:
 * memstorefs log (fields, newest first, renames, --deleted, --json),
 * show (byte-exact; a redacted version or a deletion fails), restore (one
 * new modified version in the store; a deleted file comes back; unpushed
 * changes kept; --to; a file open for writing), and the errors: a
 * read-only store (EROFS wording), an unknown version, a path outside any
 * mount, a server failing or stopped.  The commands run from inside the
 * mount directory with no credential in their environment: the daemon's
 * is used. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {
    "/notes/a.md", "first\n",
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

TestSuite(mount_history, .init = setup, .fini = teardown, .timeout = 120);

/* Runs a memstorefs command in the mount with no credential in its
 * environment (only the daemon's may be used). */
static int mfs(char **out, const char *args)
{
    return sy_run(out, "env -u ANTHROPIC_API_KEY -u ANTHROPIC_BASE_URL $MFS %s", args);
}

/* The JSON lines of out as an array (caller deletes). */
static cJSON *json_lines(const char *out)
{
    cJSON *a = cJSON_CreateArray();
    char *copy = strdup(out), *save = NULL;
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(l);
        cr_assert_not_null(o, "not a JSON line: %s", l);
        cJSON_AddItemToArray(a, o);
    }
    free(copy);
    return a;
}

/* Writes content to path in the mount, then syncs it to the store. */
static void edit_synced(const char *path, const char *content)
{
    char file[600];
    snprintf(file, sizeof(file), "%s/%s", mnt, path);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f, "cannot open %s", file);
    cr_assert_eq(fwrite(content, 1, strlen(content), f), strlen(content));
    cr_assert_eq(fclose(f), 0);
    sy_after_sync();
}

/* The id of version i (0: newest) of memory id on the server (malloc'd). */
static char *server_version(const char *id, int i)
{
    cJSON *v = sy_versions(id);
    const char *s = tj_str(cJSON_GetArrayItem(v, i), "id");
    char *r = s ? strdup(s) : NULL;
    cJSON_Delete(v);
    cr_assert_not_null(r, "memory %s has no version %d", id, i);
    return r;
}

Test(mount_history, log_lists_the_versions_newest_first_with_who_size_and_path)
{
    sy_mount(false, "");
    char *id = sy_id("/notes/a.md");
    cr_assert_not_null(id);
    edit_synced("notes/a.md", "second\n");
    edit_synced("notes/a.md", "third, longer\n");

    char *out = NULL;
    cr_assert_eq(mfs(&out, "log --json notes/a.md"), 0, "%s", out);
    cJSON *l = json_lines(out), *v = sy_versions(id);
    cr_assert_eq(cJSON_GetArraySize(l), 3, "%s", out);
    cr_assert_eq(cJSON_GetArraySize(v), 3);
    static const char *const ops[] = {"modified", "modified", "created"};
    static const int sizes[] = {14, 7, 6};
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_GetArrayItem(l, i), *s = cJSON_GetArrayItem(v, i);
        cr_expect_str_eq(tj_str(x, "version_id"), tj_str(s, "id"), "not newest first: %s", out);
        cr_expect_str_eq(tj_str(x, "memory_id"), id);
        cr_expect_str_eq(tj_str(x, "operation"), ops[i]);
        cr_expect_str_eq(tj_str(x, "created_at"), tj_str(s, "created_at"));
        cr_expect_eq((int)tj_num(x, "size"), sizes[i]);
        cr_expect_str_eq(tj_str(x, "path"), "/notes/a.md");
        cr_expect_str_eq(tj_str(x, "created_by.type"), "api_actor");
        cr_expect_str_eq(tj_str(x, "created_by.id"), tj_str(s, "created_by.api_key_id"));
        cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItem(x, "current")), i == 0,
                     "only the newest is the file's version: %s", out);
    }
    cJSON_Delete(l);
    cJSON_Delete(v);
    free(out);

    /* The human form: a header naming the memory, a line per version. */
    cr_assert_eq(mfs(&out, "log notes/a.md"), 0, "%s", out);
    char want[200];
    snprintf(want, sizeof(want), "memory %s of memory store %s, 3 versions", id, store);
    cr_expect(strstr(out, want), "no header: %s", out);
    char *newest = server_version(id, 0);
    char *first_line = strchr(out, '\n') + 1;
    cr_expect(strncmp(first_line, newest, strlen(newest)) == 0, "not newest first: %s", out);
    cr_expect(strstr(out, "modified") && strstr(out, "created") && strstr(out, "14 B") &&
                  strstr(out, "api apikey_") && strstr(out, "(the file's version)"),
              "a field is missing: %s", out);
    free(newest);
    free(out);
    free(id);
}

Test(mount_history, a_rename_is_visible_in_log)
{
    sy_mount(false, "");
    char *id = sy_id("/notes/a.md");
    cr_assert_eq(sy_run(NULL, "mv notes/a.md notes/b.md"), 0);
    sy_after_sync();
    char *out = NULL;
    /* Options may follow the path, as with every other command. */
    cr_assert_eq(mfs(&out, "log notes/b.md --json"), 0, "%s", out);
    cJSON *l = json_lines(out);
    cr_assert_eq(cJSON_GetArraySize(l), 2, "%s", out);
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(l, 0), "path"), "/notes/b.md");
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(l, 0), "memory_id"), id);
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(l, 1), "path"), "/notes/a.md");
    cJSON_Delete(l);
    free(out);
    free(id);
}

Test(mount_history, show_prints_a_version_byte_exact)
{
    sy_mount(false, "");
    char *id = sy_id("/notes/a.md");
    static const char odd[] = "tab\there\n\n  \xc3\xbcnic\xc3\xb6" "de \\ 'quoted' %s\nno newline";
    edit_synced("notes/a.md", odd);
    edit_synced("notes/a.md", "newer\n");
    char *v1 = server_version(id, 1), *v0 = server_version(id, 2), *cmd = NULL;
    char *out = NULL;
    cr_assert(asprintf(&cmd, "show notes/a.md --version %s", v1) > 0);
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect_str_eq(out, odd, "show changed the bytes");
    free(out);
    free(cmd);
    /* Byte for byte through a pipe too, from an absolute path. */
    cr_assert_eq(sy_run(&out, "test \"$($MFS show '%s/notes/a.md' --version %s | od -An -c)\" = "
                              "\"$(printf 'first\\n' | od -An -c)\"", mnt, v0), 0, "%s", out);
    free(out);
    free(v1);
    free(v0);
    free(id);
}

Test(mount_history, a_redacted_version_or_a_deletion_has_no_content)
{
    sy_mount(false, "");
    char *id = sy_id("/notes/a.md");
    edit_synced("notes/a.md", "second\n");
    char *old = server_version(id, 1), *path = NULL, *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&path, "/v1/memory_stores/%s/memory_versions/%s/redact", store, old) > 0);
    struct tresp r;
    cr_assert_eq(t_api(&E.msd, "POST", path, "{}", &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    tresp_free(&r);
    cr_assert(asprintf(&cmd, "show notes/a.md --version %s", old) > 0);
    cr_expect_eq(mfs(&out, cmd), 1, "%s", out);
    cr_expect(strstr(out, "was redacted"), "%s", out);
    free(out);
    /* The log shows it, redacted. */
    cr_assert_eq(mfs(&out, "log notes/a.md"), 0, "%s", out);
    cr_expect(strstr(out, "(redacted)"), "%s", out);
    free(out);

    cr_assert_eq(sy_run(NULL, "rm notes/a.md"), 0);
    sy_after_sync();
    char *del = server_version(id, 0), *cmd2 = NULL;
    cr_assert(asprintf(&cmd2, "show notes/a.md --version %s", del) > 0);
    cr_expect_eq(mfs(&out, cmd2), 1, "%s", out);
    cr_expect(strstr(out, "records the deletion"), "%s", out);
    free(out);
    free(cmd);
    free(cmd2);
    free(path);
    free(old);
    free(del);
    free(id);
}

Test(mount_history, restore_adds_one_modified_version_with_the_old_content)
{
    sy_mount(false, "");
    char *id = sy_id("/notes/a.md");
    edit_synced("notes/a.md", "overwritten with something worse\n");
    int before = sy_count_versions(id, NULL);
    char *first = server_version(id, 1), *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s", first) > 0);
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(strstr(out, "restored"), "%s", out);
    free(out);
    /* An ordinary local edit: the mount shows it at once, dirty. */
    sy_run(&out, "cat notes/a.md; getfattr --only-values -n user.memstore.state notes/a.md");
    cr_expect_str_eq(out, "first\ndirty");
    free(out);
    sy_after_sync();
    char *c = sy_content("/notes/a.md");
    cr_expect_str_eq(c, "first\n");
    free(c);
    cr_expect_eq(sy_count_versions(id, NULL), before + 1, "not one new version");
    cJSON *v = sy_versions(id);
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(v, 0), "operation"), "modified");
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(v, 0), "content_sha256"), t_sha("first\n"));
    cJSON_Delete(v);
    cr_expect_eq(sy_pending(), 0);

    /* Again: the file holds it already; nothing changes. */
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(strstr(out, "nothing was changed"), "%s", out);
    free(out);
    sy_after_sync();
    cr_expect_eq(sy_count_versions(id, NULL), before + 1, "a no-op restore wrote a version");
    free(cmd);
    free(first);
    free(id);
}

Test(mount_history, a_deleted_file_is_listed_and_brought_back)
{
    sy_mount(false, "");
    char *id = sy_id("/notes/a.md");
    edit_synced("notes/a.md", "second\n");
    cr_assert_eq(sy_run(NULL, "rm -r notes"), 0);
    sy_after_sync();
    cr_assert_eq(sy_count_versions(id, "deleted"), 1, "the delete was not pushed");

    char *out = NULL;
    cr_assert_eq(mfs(&out, "log --deleted ."), 0, "%s", out);
    cr_expect(strstr(out, id) && strstr(out, "/notes/a.md"), "not listed: %s", out);
    free(out);
    cr_assert_eq(mfs(&out, "log --deleted --json notes"), 0, "%s", out);
    cJSON *l = json_lines(out);
    cr_assert_eq(cJSON_GetArraySize(l), 1, "%s", out);
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(l, 0), "memory_id"), id);
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(l, 0), "path"), "/notes/a.md");
    cr_expect_not_null(tj_str(cJSON_GetArrayItem(l, 0), "deleted_at"));
    cJSON_Delete(l);
    free(out);
    /* Nothing was deleted under another directory. */
    cr_assert_eq(sy_run(NULL, "mkdir other"), 0);
    cr_assert_eq(mfs(&out, "log --deleted other"), 0, "%s", out);
    cr_expect(strstr(out, "no memory deleted"), "%s", out);
    free(out);

    /* Its log, by the path it had: the deletion on top. */
    cr_assert_eq(mfs(&out, "log --json notes/a.md"), 0, "%s", out);
    l = json_lines(out);
    cr_assert_eq(cJSON_GetArraySize(l), 3, "%s", out);
    cr_expect_str_eq(tj_str(cJSON_GetArrayItem(l, 0), "operation"), "deleted");
    char *v = strdup(tj_str(cJSON_GetArrayItem(l, 1), "version_id"));
    cJSON_Delete(l);
    free(out);

    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s", v) > 0);
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(strstr(out, "recreated") && strstr(out, id), "does not say which memory: %s", out);
    free(out);
    sy_run(&out, "cat notes/a.md");
    cr_expect_str_eq(out, "second\n");
    free(out);
    sy_after_sync();
    char *c = sy_content("/notes/a.md"), *nid = sy_id("/notes/a.md");
    cr_expect_str_eq(c, "second\n", "the store did not get it back");
    cr_expect(nid && strcmp(nid, id) != 0, "a deleted memory cannot come back under its id");
    free(c);
    free(nid);
    free(cmd);
    free(v);
    free(id);
}

Test(mount_history, restore_keeps_unpushed_changes_and_to_makes_a_copy)
{
    sy_mount(false, "--sync-interval 3600");
    char *id = sy_id("/notes/a.md");
    edit_synced("notes/a.md", "second\n");
    char *first = server_version(id, 1), *cmd = NULL, *out = NULL;
    /* A local edit the store does not have yet. */
    cr_assert_eq(sy_run(NULL, "echo 'not pushed yet' > notes/a.md"), 0);
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s", first) > 0);
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(strstr(out, "conflict record"), "%s", out);
    free(out);
    char *kept = mnt_q(&E, "SELECT CAST(b.data AS TEXT) FROM conflicts k JOIN blobs b"
                      " ON b.sha = k.local_sha WHERE k.path = '/notes/a.md'");
    cr_expect_str_eq(kept, "not pushed yet\n", "the unpushed edit was lost");
    free(kept);
    sy_run(&out, "cat notes/a.md");
    cr_expect_str_eq(out, "first\n");
    free(out);
    free(cmd);

    /* --to: a new file; an existing one is refused. */
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s --to copy.md", first) > 0);
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    free(out);
    sy_run(&out, "cat copy.md");
    cr_expect_str_eq(out, "first\n");
    free(out);
    cr_expect_eq(mfs(&out, cmd), 1, "%s", out);
    cr_expect(strstr(out, "exists"), "%s", out);
    free(out);
    free(cmd);

    /* A file open for writing is left alone. */
    char *second = server_version(id, 0);
    cr_assert(asprintf(&cmd, "exec 3>>notes/a.md; $MFS restore notes/a.md --version %s",
                       second) > 0);
    cr_expect_eq(sy_run(&out, "%s", cmd), 1, "%s", out);
    cr_expect(strstr(out, "open for writing"), "%s", out);
    free(out);
    sy_run(&out, "cat notes/a.md");
    cr_expect_str_eq(out, "first\n", "a refused restore changed the file");
    free(out);
    free(cmd);
    free(second);
    free(first);
    free(id);
}

/* The cache is a sync behind the store: an edit made in the store since
 * the last sync is what a restore is often meant to undo. */
Test(mount_history, a_restore_right_after_a_remote_edit_undoes_it)
{
    sy_mount(false, "--sync-interval 3600");
    char *id = sy_id("/notes/a.md"), *out = NULL, *cmd = NULL;
    edit_synced("notes/a.md", "second\n");
    char *second = server_version(id, 0);
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s", second) > 0);

    /* The file clean: it holds the version to go back to. */
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"third, a bad remote edit\\n\"}"), 200);
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(strstr(out, "restored"), "the restore changed nothing: %s", out);
    free(out);
    sy_after_sync();
    char *c = sy_content("/notes/a.md");
    cr_expect_str_eq(c, "second\n", "the remote edit stayed");
    free(c);

    /* The file dirty with an edit that went back to its baseline... */
    cr_assert_eq(sy_run(NULL, "echo 'not pushed yet' > notes/a.md"), 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"fourth, another bad edit\\n\"}"), 200);
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(strstr(out, "conflict record"), "the unpushed edit was not kept: %s", out);
    free(out);
    sy_after_sync();
    c = sy_content("/notes/a.md");
    cr_expect_str_eq(c, "second\n", "the second remote edit stayed");
    free(c);
    sy_run(&out, "cat notes/a.md");
    cr_expect_str_eq(out, "second\n");
    free(out);
    char *kept = mnt_q(&E, "SELECT CAST(b.data AS TEXT) FROM conflicts k JOIN blobs b"
                      " ON b.sha = k.local_sha WHERE k.path = '/notes/a.md'"
                      " AND CAST(b.data AS TEXT) = 'not pushed yet\n'");
    cr_expect_str_eq(kept, "not pushed yet\n", "the unpushed edit was lost");
    free(kept);
    cr_expect_eq(sy_pending(), 0);
    free(cmd);
    free(second);
    free(id);
}

/* A file never synced at the path of a pending deletion takes that memory
 * over at the next sync (rm f; echo > f is one update): a restore says so,
 * and restores into such a file as into the memory's own. */
Test(mount_history, a_restore_at_a_pending_deletion_says_which_memory_it_updates)
{
    sy_mount(false, "--sync-interval 3600 --sync-deletions log_only");
    char *a = sy_id("/notes/a.md"), *k = sy_id("/keep.md"), *out = NULL, *cmd = NULL;
    cr_assert(a && k);
    char *first = server_version(a, 0);

    /* --to the path of keep.md, removed: that memory is updated. */
    cr_assert_eq(sy_run(NULL, "rm keep.md"), 0);
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s --to keep.md", first) > 0);
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(strstr(out, "a new file") && strstr(out, k) && strstr(out, "updates memory"),
              "does not say memory %s is updated: %s", k, out);
    cr_expect_null(strstr(out, "as a new memory"), "%s", out);
    free(out);
    free(cmd);
    sy_after_sync();
    char *c = sy_content("/keep.md"), *id = sy_id("/keep.md");
    cr_expect_str_eq(c ? c : "(none)", "first\n");
    cr_expect_str_eq(id ? id : "(none)", k, "not the memory the answer named");
    free(c);
    free(id);

    /* rm a.md; a new a.md: a restore of a.md's version goes into it. */
    cr_assert_eq(sy_run(NULL, "rm notes/a.md && echo new > notes/a.md"), 0);
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s", first) > 0);
    cr_assert_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(strstr(out, "restored") && strstr(out, "updates memory"), "%s", out);
    free(out);
    free(cmd);
    sy_run(&out, "cat notes/a.md");
    cr_expect_str_eq(out, "first\n");
    free(out);
    free(first);
    free(a);
    free(k);
}

Test(mount_history, restore_is_refused_on_a_read_only_store)
{
    sy_mount(true, "");
    char *id = sy_id("/notes/a.md");
    char *v = server_version(id, 0), *cmd = NULL, *out = NULL;
    cr_assert_eq(mfs(&out, "log notes/a.md"), 0, "reading history is allowed: %s", out);
    free(out);
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s", v) > 0);
    cr_expect_eq(mfs(&out, cmd), 1, "%s", out);
    cr_expect(strstr(out, "read-only") && strstr(out, "EROFS"), "%s", out);
    free(out);
    cr_expect_eq(sy_count_versions(id, NULL), 1);
    free(cmd);
    free(v);
    free(id);
}

Test(mount_history, unknown_versions_and_paths_outside_a_mount)
{
    sy_mount(false, "");
    char *out = NULL;
    cr_expect_eq(mfs(&out, "show notes/a.md --version memver_doesnotexist"), 1, "%s", out);
    cr_expect(strstr(out, "has no version memver_doesnotexist"), "%s", out);
    free(out);
    cr_expect_eq(mfs(&out, "restore notes/a.md --version memver_doesnotexist"), 1, "%s", out);
    cr_expect(strstr(out, "has no version"), "%s", out);
    free(out);
    cr_expect_eq(mfs(&out, "show notes/a.md --version 'a/b'"), 2, "%s", out);
    free(out);
    cr_expect_eq(mfs(&out, "show notes/a.md"), 2, "--version is required: %s", out);
    free(out);
    cr_expect_eq(mfs(&out, "log"), 2, "%s", out);
    free(out);
    cr_expect_eq(mfs(&out, "log nothing/here.md"), 1, "%s", out);
    cr_expect(strstr(out, "no memory deleted at that path"), "%s", out);
    free(out);
    cr_expect_eq(mfs(&out, "log .anthropic-memory-store"), 1, "%s", out);
    cr_expect(strstr(out, "marker"), "%s", out);
    free(out);
    cr_assert_eq(sy_run(NULL, "echo new > fresh.md"), 0);
    cr_expect_eq(mfs(&out, "log fresh.md"), 1, "%s", out);
    cr_expect(strstr(out, "never synced"), "%s", out);
    free(out);
    static const char *const point[] = {"restore . --version memver_x",
                                        "show . --version memver_x"};
    for (size_t i = 0; i < sizeof(point) / sizeof(point[0]); i++) {
        cr_expect_eq(mfs(&out, point[i]), 2, "%s: %s", point[i], out);
        cr_expect(strstr(out, "is the mount point of memory store"), "%s: %s", point[i], out);
        free(out);
    }
    static const char *const outside[] = {"log /tmp", "log --deleted /", "show / --version x",
                                          "restore /etc/hostname --version x"};
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
        cr_expect_eq(mfs(&out, outside[i]), 1, "%s: %s", outside[i], out);
        cr_expect(strstr(out, "is not inside a memstorefs mount"), "%s: %s", outside[i], out);
        free(out);
    }
}

/* The link re-pointed after the mount was made: the mount stays where
 * the kernel put it, and the commands still find it from that path (they
 * resolved the link again, to where the mount is not, and said the path
 * was not inside a mount). */
Test(mount_history, a_mount_is_found_where_it_was_made_after_its_link_is_re_pointed)
{
    cr_assert_eq(mnt_sh(&E, NULL, "mkdir %s/real %s/elsewhere && ln -s real %s/lnk", E.mnt,
                        E.mnt, E.mnt), 0);
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "lnk/s", false, "", &out), 0, "%s", out);
    free(out);
    cr_assert_eq(mnt_sh(&E, &out, "ln -sfn elsewhere $MNT/lnk"), 0, "%s", out);
    free(out);
    static const char *const cmds[] = {
        "$MFS log $MNT/real/s/notes/a.md",
        "cd $MNT/real/s && $MFS log notes/a.md",
        "cd $MNT/real/s && echo more >> keep.md && $MFS sync --wait .",
    };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cr_expect_eq(mnt_sh(&E, &out, "unset ANTHROPIC_API_KEY; %s", cmds[i]), 0, "%s: %s",
                     cmds[i], out);
        cr_expect(!strstr(out, "not inside") && !strstr(out, "not a memstorefs mount"), "%s: %s",
                  cmds[i], out);
        free(out);
    }
    char *keep = sy_content("/keep.md");
    cr_expect_str_eq(keep, "kept\nmore\n", "the sync from the mount did not push");
    free(keep);
    cr_expect_eq(mnt_sh(&E, &out, "$MFS unmount $MNT/real/s"), 0, "%s", out);
    free(out);
    char p[600];
    snprintf(p, sizeof(p), "%s/real/s", E.mnt);
    cr_expect(!mnt_is_mounted(p), "still mounted at %s", p);
}

/* A mount path whose parent is reached through a symbolic link (a home
 * under /var/home): realpath and getcwd give the path through the link's
 * target, which is not the mount path the session named.  The commands
 * find the mount from either form. */
Test(mount_history, a_mount_reached_through_a_symbolic_link_is_found_from_either_path)
{
    cr_assert_eq(mnt_sh(&E, NULL, "mkdir %s/real && ln -s real %s/lnk", E.mnt, E.mnt), 0);
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "lnk/s", false, "", &out), 0, "%s", out);
    free(out);
    static const char *const cmds[] = {
        "cd $MNT/lnk/s && $MFS log notes/a.md",        /* getcwd: real/s */
        "$MFS log $MNT/lnk/s/notes/a.md",              /* resolved by the command */
        "$MFS log $MNT/real/s/notes/a.md",
        "cd $MNT/lnk/s && echo more >> keep.md && $MFS sync --wait .",
        "$MFS sync $MNT/real/s",
    };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cr_expect_eq(mnt_sh(&E, &out, "unset ANTHROPIC_API_KEY; %s", cmds[i]), 0, "%s: %s",
                     cmds[i], out);
        cr_expect(!strstr(out, "not inside") && !strstr(out, "not a memstorefs mount"), "%s: %s",
                  cmds[i], out);
        if (i < 3)
            cr_expect(strstr(out, "/notes/a.md"), "%s: %s", cmds[i], out);
        free(out);
    }
    char *keep = sy_content("/keep.md");
    cr_expect_str_eq(keep, "kept\nmore\n", "the sync from the mount did not push");
    free(keep);
    /* An empty path (an unset variable) names no mount: nothing goes. */
    cr_expect_eq(mnt_sh(&E, &out, "$MFS unmount ''"), 1, "%s", out);
    cr_expect(strstr(out, "is not an absolute path"), "%s", out);
    free(out);
    char p[600];
    snprintf(p, sizeof(p), "%s/real/s", E.mnt); /* as the kernel has it */
    cr_expect(mnt_is_mounted(p), "unmount '' unmounted %s", p);
    cr_expect_eq(mnt_sh(&E, &out, "$MFS unmount $MNT/real/s"), 0, "%s", out);
    free(out);
    cr_expect(!mnt_is_mounted(p), "still mounted at %s", p);
}

Test(mount_history, a_server_failing_or_down_is_a_clear_error)
{
    sy_mount(false, "--flush-timeout 5");
    char *id = sy_id("/notes/a.md");
    char *v = server_version(id, 0), *cmd = NULL, *out = NULL;
    sy_fault("{\"action\":\"status\",\"status\":500,\"count\":0,"
             "\"path\":\"/v1/memory_stores/*/memory_versions*\"}");
    cr_expect_eq(mfs(&out, "log notes/a.md"), 1, "%s", out);
    cr_expect(strstr(out, "HTTP 500"), "%s", out);
    free(out);
    sy_clear_faults();

    cr_assert_eq(msd_terminate(&E.msd) >= 0, true);
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s", v) > 0);
    cr_expect_eq(mfs(&out, cmd), 1, "%s", out);
    cr_expect(strstr(out, "cannot be reached") && strstr(out, "nothing was changed"), "%s", out);
    free(out);
    cr_expect_eq(mfs(&out, "log notes/a.md"), 1, "%s", out);
    cr_expect(strstr(out, "cannot be reached"), "%s", out);
    free(out);
    sy_run(&out, "cat notes/a.md");
    cr_expect_str_eq(out, "first\n", "a failed restore changed the file");
    free(out);
    free(cmd);
    free(v);
    free(id);
}

/* The memory moved and edited in the store since the last sync: the
 * restore's catch-up sync moves the file away from the path it checked.
 * The restore must not then make a new file there (a second memory with
 * the old version, while the memory kept the edit it was meant to undo):
 * it says the file changed meanwhile and changes nothing. */
Test(mount_history, a_restore_of_a_file_a_sync_moves_away_makes_no_new_memory)
{
    sy_mount(false, "--sync-interval 3600");
    char *id = sy_id("/notes/a.md"), *out = NULL, *cmd = NULL;
    edit_synced("notes/a.md", "second\n");
    char *second = server_version(id, 0);
    cr_assert(asprintf(&cmd, "restore notes/a.md --version %s", second) > 0);
    cr_assert_eq(sy_remote_update(id, "{\"path\":\"/notes/moved.md\","
                                      "\"content\":\"moved and edited\\n\"}"), 200);
    cr_expect_neq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(out && strstr(out, "changed while the restore was looking at it"), "%s", out);
    free(out);
    sy_after_sync();
    cr_expect_eq(sy_count_versions(NULL, "created"), 2, "a memory was created");
    char *c = sy_content("/notes/moved.md");
    cr_expect_str_eq(c ? c : "(none)", "moved and edited\n");
    free(c);
    c = sy_content("/notes/a.md");
    cr_expect_null(c, "a new memory holds the old version: %s", c);
    free(c);
    cr_expect_neq(sy_run(NULL, "test -e notes/a.md"), 0, "a new file was made");
    free(cmd);
    free(second);
    free(id);
}

/* A conflict record of a memory deleted since, at a path another memory
 * holds now: `conflicts restore` refuses to write it into that memory's
 * file (its next sync would push the record into the other memory).
 * Before the fix it did, and said it restored the deleted memory. */
Test(mount_history, a_conflict_restore_never_writes_into_another_memory_s_file)
{
    sy_mount(false, "--sync-interval 3600");
    char *id = sy_id("/notes/a.md"), *out = NULL;
    edit_synced("notes/a.md", "second\n");
    cr_assert_eq(sy_run(NULL, "echo local > notes/a.md"), 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"remote\\n\"}"), 200);
    sy_after_sync();
    char *k = mnt_q(&E, "SELECT id FROM conflicts");
    cr_assert(k && *k, "no conflict record");
    cr_assert_eq(sy_remote_delete(id), 200);
    char *other = t_create_memory(&E.msd, store, "/notes/a.md", "another memory\n");
    cr_assert_not_null(other);
    sy_after_sync();
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "conflicts restore %s", k) > 0);
    cr_expect_neq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(out && strstr(out, "not restored over it"), "%s", out);
    free(out);
    /* diff shows the file at the record's path, and says whose it is. */
    free(cmd);
    cr_assert(asprintf(&cmd, "conflicts diff %s", k) > 0);
    cr_expect_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(out && strstr(out, "+another memory") &&
              strstr(out, "'s file, not the record's: conflicts restore does not write into it"),
              "%s", out);
    free(out);
    sy_after_sync();
    char *c = sy_content("/notes/a.md");
    cr_expect_str_eq(c ? c : "(none)", "another memory\n", "the record went into another memory");
    free(c);
    free(cmd);
    free(other);
    free(k);
    free(id);
}

/* A file only renamed since its last sync holds the store's bytes: a
 * restore keeps no conflict record of them (before: one, and the file's
 * state read "conflict" until it was dropped by hand). */
Test(mount_history, a_restore_of_a_renamed_file_keeps_no_record_of_the_store_s_bytes)
{
    sy_mount(false, "--sync-interval 3600");
    char *id = sy_id("/notes/a.md"), *out = NULL, *cmd = NULL;
    edit_synced("notes/a.md", "second\n");
    char *first = server_version(id, 1);
    cr_assert_eq(sy_run(NULL, "mv notes/a.md notes/b.md"), 0);
    cr_assert(asprintf(&cmd, "restore notes/b.md --version %s", first) > 0);
    cr_expect_eq(mfs(&out, cmd), 0, "%s", out);
    cr_expect(out && !strstr(out, "conflict record"), "%s", out);
    free(out);
    char *k = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(k, "0", "a record of the store's own bytes was kept");
    free(k);
    sy_run(&out, "cat notes/b.md");
    cr_expect_str_eq(out ? out : "", "first\n");
    free(out);
    free(cmd);
    free(first);
    free(id);
}
