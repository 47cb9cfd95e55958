/* test_mount_history_attrs.c - the read-only user.memstore.* extended
 * attributes of every file (getfattr lists the five with the values the
 * store and the cache hold; setfattr is refused, quietly enough for cp -a;
 * the marker and
 * directories have none), and conflict records you can act on: a real
 * store-wins conflict shown with `conflicts diff` and put back with
 * `conflicts restore`, which the next sync pushes (issue 14). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {
    "/notes/a.md", "alpha\n",
    "/c.md", "shared\n",
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

TestSuite(mount_history_attrs, .init = setup, .fini = teardown, .timeout = 120);

/* getfattr --only-values -n user.memstore.NAME PATH (malloc'd; the error
 * text when it fails). */
static char *attr(const char *path, const char *name)
{
    char *out = NULL;
    sy_run(&out, "getfattr --only-values -n user.memstore.%s %s 2>&1", name, path);
    return out;
}

static void expect_attr(const char *path, const char *name, const char *want)
{
    char *v = attr(path, name);
    cr_expect_str_eq(v, want, "user.memstore.%s of %s", name, path);
    free(v);
}

Test(mount_history_attrs, getfattr_lists_the_five_attributes_with_their_values)
{
    sy_after_sync();
    cJSON *l = sy_list();
    const cJSON *m = sy_find(l, "/notes/a.md");
    cr_assert_not_null(m);
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "getfattr -d notes/a.md"), 0, "%s", out);
    char want[2000];
    snprintf(want, sizeof(want),
             "# file: notes/a.md\n"
             "user.memstore.memory_id=\"%s\"\n"
             "user.memstore.sha256=\"%s\"\n"
             "user.memstore.state=\"clean\"\n"
             "user.memstore.updated_at=\"%s\"\n"
             "user.memstore.version_id=\"%s\"\n\n",
             tj_str(m, "id"), t_sha("alpha\n"), tj_str(m, "updated_at"),
             tj_str(m, "memory_version_id"));
    cr_expect_str_eq(out, want);
    free(out);
    cJSON_Delete(l);

    /* A local edit: dirty, the new hash; then pushed: clean, the new version. */
    cr_assert_eq(sy_run(NULL, "echo beta > notes/a.md"), 0);
    expect_attr("notes/a.md", "state", "dirty");
    expect_attr("notes/a.md", "sha256", t_sha("beta\n"));
    sy_after_sync();
    l = sy_list();
    m = sy_find(l, "/notes/a.md");
    expect_attr("notes/a.md", "state", "clean");
    expect_attr("notes/a.md", "version_id", tj_str(m, "memory_version_id"));
    expect_attr("notes/a.md", "updated_at", tj_str(m, "updated_at"));
    cJSON_Delete(l);

    /* A remote change reaches them too (the version feed). */
    char *id = sy_id("/c.md");
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"changed remotely\\n\"}"), 200);
    sy_after_sync();
    l = sy_list();
    m = sy_find(l, "/c.md");
    expect_attr("c.md", "version_id", tj_str(m, "memory_version_id"));
    expect_attr("c.md", "sha256", t_sha("changed remotely\n"));
    cJSON_Delete(l);
    free(id);

    /* A file never synced has only its hash and state. */
    cr_assert_eq(sy_run(NULL, "printf new > fresh.md"), 0);
    cr_assert_eq(sy_run(&out, "getfattr -d fresh.md"), 0, "%s", out);
    snprintf(want, sizeof(want), "# file: fresh.md\nuser.memstore.sha256=\"%s\"\n"
                                 "user.memstore.state=\"dirty\"\n\n", t_sha("new"));
    cr_expect_str_eq(out, want);
    free(out);

    /* Content the server refuses (not UTF-8). */
    cr_assert_eq(sy_run(NULL, "printf '\\377\\376' > bad.md"), 0);
    sy_after_sync();
    expect_attr("bad.md", "state", "refused");

    /* The marker and directories have none. */
    cr_assert_eq(sy_run(&out, "getfattr -d .anthropic-memory-store notes; getfattr -d -m - "
                              ".anthropic-memory-store"), 0, "%s", out);
    cr_expect_str_eq(out, "", "%s", out);
    free(out);
    char *v = attr(".anthropic-memory-store", "state");
    cr_expect(strstr(v, "No such attribute"), "%s", v);
    free(v);
}

Test(mount_history_attrs, setting_or_removing_them_is_refused)
{
    char *out = NULL;
    /* Refused as "not supported": what cp -a takes as a filesystem
     * without attributes, so a copy within the mount stays quiet. */
    static const char *const cmds[] = {
        "setfattr -n user.memstore.state -v clean notes/a.md",
        "setfattr -n user.memstore.memory_id -v mem_other notes/a.md",
        "setfattr -x user.memstore.sha256 notes/a.md",
        "setfattr -n user.memstore.state -v x .anthropic-memory-store",
    };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cr_expect_neq(sy_run(&out, "%s", cmds[i]), 0, "%s succeeded", cmds[i]);
        cr_expect(strstr(out, "Operation not supported"), "%s: %s", cmds[i], out);
        free(out);
    }
    /* Other attributes: as before. */
    cr_expect_neq(sy_run(&out, "setfattr -n user.comment -v x notes/a.md"), 0);
    cr_expect(strstr(out, "Operation not supported"), "%s", out);
    free(out);
    cr_expect_eq(sy_run(&out, "cp -a notes/a.md copy.md && cat copy.md"), 0, "%s", out);
    cr_expect_str_eq(out, "alpha\n", "cp -a complained: %s", out);
    free(out);
    char *id = sy_id("/notes/a.md");
    expect_attr("notes/a.md", "memory_id", id);
    expect_attr("notes/a.md", "state", "clean");
    free(id);
}

Test(mount_history_attrs, a_store_wins_conflict_is_diffed_and_restored)
{
    char *id = sy_id("/c.md");
    sy_after_sync();
    /* Both sides change between two syncs: the store wins. */
    cr_assert_eq(sy_run(NULL, "printf 'local line\\nshared\\n' > c.md"), 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"remote line\\nshared\\n\"}"), 200);
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "cat c.md");
    cr_assert_str_eq(out, "remote line\nshared\n", "the store did not win");
    free(out);
    expect_attr("c.md", "state", "conflict");
    char *kid = mnt_q(&E, "SELECT id FROM conflicts WHERE path = '/c.md'");
    cr_assert(kid[0], "no conflict record");
    int versions = sy_count_versions(id, NULL);

    /* diff: the lost version against the current content. */
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "env -u ANTHROPIC_API_KEY $MFS conflicts diff %s", kid) > 0);
    cr_assert_eq(sy_run(&out, "%s", cmd), 0, "%s", out);
    cr_expect(strstr(out, "\n-local line\n+remote line\n shared\n"), "%s", out);
    cr_expect(strstr(out, "--- ") && strstr(out, "/c.md (conflict") && strstr(out, "+++ "),
              "%s", out);
    free(out);
    free(cmd);

    /* restore: the local version is the file's content again, a local
     * edit that the next sync pushes as one new version. */
    cr_assert(asprintf(&cmd, "env -u ANTHROPIC_API_KEY $MFS conflicts restore %s", kid) > 0);
    cr_assert_eq(sy_run(&out, "%s", cmd), 0, "%s", out);
    cr_expect(strstr(out, "restored conflict"), "%s", out);
    free(out);
    sy_run(&out, "cat c.md");
    cr_expect_str_eq(out, "local line\nshared\n");
    free(out);
    expect_attr("c.md", "state", "dirty");
    char *n = mnt_q(&E, "SELECT count(*) FROM conflicts");
    cr_expect_str_eq(n, "0", "the record stays after it was restored");
    free(n);
    sy_after_sync();
    char *c = sy_content("/c.md");
    cr_expect_str_eq(c, "local line\nshared\n", "the restored content was not pushed");
    free(c);
    cr_expect_eq(sy_count_versions(id, NULL), versions + 1);
    cr_expect_eq(sy_count_versions(id, "modified"), 2);
    expect_attr("c.md", "state", "clean");

    /* It is gone now; ids that are not records. */
    cr_expect_eq(sy_run(&out, "%s", cmd), 1, "%s", out);
    cr_expect(strstr(out, "no running daemon holds conflict"), "%s", out);
    free(out);
    cr_expect_eq(sy_run(&out, "$MFS conflicts diff 999 --cache-dir \"$CACHE\""), 1, "%s", out);
    cr_expect(strstr(out, "no conflict 999"), "%s", out);
    free(out);
    cr_expect_eq(sy_run(&out, "$MFS conflicts restore x1"), 2, "%s", out);
    free(out);
    free(cmd);
    free(kid);
    free(id);
}

Test(mount_history_attrs, no_xattrs_turns_them_off)
{
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount '%s'", mnt), 0, "%s", out);
    free(out);
    sy_mount(false, "--no-xattrs");
    /* Not supported at all: the kernel no longer asks the daemon. */
    int rc = sy_run(&out, "getfattr -n user.memstore.memory_id notes/a.md 2>&1");
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "Operation not supported"), "%s", out);
    free(out);
    rc = sy_run(&out, "getfattr -d notes/a.md 2>&1; echo x >> notes/a.md && cat notes/a.md");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(!strstr(out, "user.memstore"), "%s", out);
    cr_expect(strstr(out, "x\n"), "writes still work: %s", out);
    free(out);
}

/* A store-wins conflict on c.md; its record's id (malloc'd). */
static char *conflict_on_c(void)
{
    char *id = sy_id("/c.md");
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "printf 'local %%d\\n' $$ > c.md"), 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"remote again\\n\"}"), 200);
    sy_after_sync();
    free(id);
    char *kid = mnt_q(&E, "SELECT max(id) FROM conflicts WHERE path = '/c.md'");
    cr_assert(kid && kid[0], "no conflict record");
    return kid;
}

/* Two daemons on one cache directory (docs/operations.md allows it), each
 * mounting a store of its own: a record is restored through the daemon
 * that mounts its store, with or without --cache-dir, relative or not.
 * (Both daemons used to claim the record, and --cache-dir could not tell
 * them apart; a relative --cache-dir matched no daemon.) */
Test(mount_history_attrs, a_conflict_is_restored_when_two_daemons_share_the_cache)
{
    char *store_b = t_create_store(&E.msd, "Shared cache B");
    cr_assert_not_null(store_b);
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store_b, "b", false, "--sync-interval 3600", &out), 0, "%s", out);
    free(out);
    char *kid = conflict_on_c();
    int rc = sy_run(&out, "env -u ANTHROPIC_API_KEY $MFS conflicts restore %s", kid);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "restored conflict"), "%s", out);
    free(out);
    free(kid);
    kid = conflict_on_c();
    rc = mnt_sh(&E, &out, "cd '%s' && env -u ANTHROPIC_API_KEY $MFS conflicts restore %s "
                "--cache-dir cache", E.root, kid);
    cr_expect_eq(rc, 0, "relative --cache-dir: %s", out);
    cr_expect(strstr(out, "restored conflict"), "%s", out);
    free(out);
    free(kid);
    free(store_b);
}

/* A file the server refused (a NUL byte) whose memory then changed in
 * the store: the store wins, and the lost version is diffed like any
 * other.  Before the fix the sync left refused files out of its decisions:
 * the remote edit never reached the mount (no record, the file refused for
 * good) and every sync listed the store in full for it.  And the command
 * looked for the daemon's verdict with strrchr, which stops at the first
 * NUL: it printed bytes of the content as an error and exited 1. */
Test(mount_history_attrs, a_lost_version_with_a_nul_byte_is_diffed)
{
    char *id = sy_id("/c.md");
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "printf 'local\\000line\\nshared\\n' > c.md"), 0);
    sy_after_sync(); /* refused: a NUL byte is no memory's content */
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"remote line\\nshared\\n\"}"), 200);
    sy_after_sync();
    char *out = NULL;
    sy_run(&out, "cat c.md");
    cr_expect_str_eq(out, "remote line\nshared\n", "the store's edit did not reach the file");
    free(out);
    char *kid = mnt_q(&E, "SELECT id FROM conflicts WHERE path = '/c.md'");
    cr_assert(kid[0], "no conflict record");
    int rc = sy_run(&out, "env -u ANTHROPIC_API_KEY $MFS conflicts diff %s", kid);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, out);
    /* diff(1) takes content with a NUL byte for binary. */
    cr_expect(strstr(out, "Binary files") && strstr(out, "/c.md (conflict 1"), "%s", out);
    free(out);
    free(kid);
    free(id);
}

/* A lost version that was empty, of a file removed since: nothing to
 * compare it with.  Before the fix diff(1) found the empty record equal
 * to /dev/null and the command said the record was "the same as the
 * current content", of a file that does not exist. */
Test(mount_history_attrs, an_empty_lost_version_of_a_removed_file_says_so)
{
    char *id = sy_id("/c.md");
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, ": > c.md"), 0);
    cr_assert_eq(sy_remote_update(id, "{\"content\":\"remote line\\n\"}"), 200);
    sy_after_sync();
    char *kid = mnt_q(&E, "SELECT id FROM conflicts WHERE path = '/c.md'");
    cr_assert(kid[0], "no conflict record");
    cr_assert_eq(sy_run(NULL, "rm c.md"), 0);
    char *out = NULL;
    int rc = sy_run(&out, "env -u ANTHROPIC_API_KEY $MFS conflicts diff %s", kid);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, out);
    cr_expect(!strstr(out, "the same as the current content"), "%s", out);
    cr_expect(strstr(out, "is empty") && strstr(out, "no file"), "%s", out);
    free(out);
    free(kid);
    free(id);
}
