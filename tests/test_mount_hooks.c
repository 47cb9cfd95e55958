/* test_mount_hooks.c - the worker hooks of contrib/sandbox end to end
 * against memstored, as a worker runs them: session-start with the
 * session file the API returns (stores mounted, or the session failed with
 * nothing left mounted), the agent's edits, session-end (final sync,
 * unmount, and what was not pushed). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnt.h"

static struct mnt_env E;
static char *notes, *prefs;

#define HOOKS MFS_SOURCE_DIR "/contrib/sandbox"

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    notes = t_create_store(&E.msd, "Project Notes");
    prefs = t_create_store(&E.msd, "User Preferences");
    cr_assert(notes && prefs);
    free(t_create_memory(&E.msd, notes, "/todo.md", "- one\n"));
    free(t_create_memory(&E.msd, prefs, "/style.md", "terse\n"));
}

static void teardown(void)
{
    mnt_teardown(&E);
    free(notes);
    free(prefs);
    notes = prefs = NULL;
}

TestSuite(mount_hooks, .init = setup, .fini = teardown, .timeout = 150);

/* The session object as GET /v1/sessions/{id} returns it (shape). */
static void write_session(const char *file, const char *first_store)
{
    cr_assert_eq(mnt_sh(&E, NULL,
                        "cat > %s/%s <<EOF\n"
                        "{\"id\": \"sesn_1\", \"type\": \"session\", \"resources\": [\n"
                        " {\"type\": \"memory_store\", \"id\": \"sesrsc_1\", \"memory_store_id\": "
                        "\"%s\", \"name\": \"Project Notes\", \"access\": \"read_write\", "
                        "\"mount_path\": \"$MNT/memory/notes\"},\n"
                        " {\"type\": \"memory_store\", \"id\": \"sesrsc_2\", \"memory_store_id\": "
                        "\"%s\", \"name\": \"User Preferences\", \"access\": \"read_only\", "
                        "\"mount_path\": \"$MNT/memory/prefs\"},\n"
                        " {\"type\": \"file\", \"file_id\": \"file_1\"}]}\n"
                        "EOF\n",
                        E.root, file, first_store, prefs),
                 0);
}

/* Runs a hook with this build's memstorefs and the test's cache. */
static int hook(char **out, const char *fmt, const char *arg)
{
    return mnt_sh(&E, out, "MEMSTOREFS=$MFS MEMSTOREFS_MOUNT_OPTS=\"--cache-dir $CACHE "
                           "--sync-interval 5\" %s/%s%s%s",
                  HOOKS, fmt, arg ? " " : "", arg ? arg : "");
}

Test(mount_hooks, start_edit_end_pushes_everything)
{
    write_session("session.json", notes);
    char file[400], *out = NULL;
    snprintf(file, sizeof(file), "%s/session.json", E.root);
    int rc = hook(&out, "session-start", file);
    cr_assert_eq(rc, 0, "session-start failed: %s", out);
    free(out);
    cr_expect_eq(mnt_sh(&E, &out, "cat $MNT/memory/notes/todo.md $MNT/memory/prefs/style.md"), 0);
    cr_expect_str_eq(out, "- one\nterse\n");
    free(out);
    cr_expect_neq(mnt_sh(&E, NULL, "echo x > $MNT/memory/prefs/new.md"), 0,
                  "the read-only store took a write");
    cr_assert_eq(mnt_sh(&E, NULL, "echo '- two' >> $MNT/memory/notes/todo.md"), 0);

    rc = hook(&out, "session-end", NULL);
    cr_expect_eq(rc, 0, "session-end: %s", out);
    cr_expect(strstr(out, "every change was pushed"), "%s", out);
    free(out);
    cr_expect_eq(mnt_sh(&E, &out, "ls -A $MNT"), 0);
    cr_expect_str_eq(out, "", "left behind after session-end: %s", out);
    free(out);
    struct tresp r;
    cr_assert_eq(t_req(&E.msd, "GET", NULL, &r, "/v1/memory_stores/%s/memories?view=full&limit=20",
                       notes), 200);
    cr_expect(strstr(r.body, "- one\\n- two\\n"), "the edit did not reach the store: %s", r.body);
    tresp_free(&r);
}

Test(mount_hooks, a_store_that_cannot_be_mounted_fails_the_session)
{
    write_session("bad.json", "memstore_doesnotexist");
    char file[400], *out = NULL;
    snprintf(file, sizeof(file), "%s/bad.json", E.root);
    int rc = hook(&out, "session-start", file);
    cr_expect_neq(rc, 0, "session-start succeeded: %s", out);
    cr_expect(strstr(out, "unknown memory store memstore_doesnotexist"), "%s", out);
    cr_expect(strstr(out, "failing the session"), "%s", out);
    free(out);
    cr_expect_eq(mnt_sh(&E, &out, "ls -A $MNT; grep -c ' %s' /proc/self/mountinfo", E.root), 1);
    cr_expect_str_eq(out, "0\n", "something was left mounted or created: %s", out);
    free(out);
}

Test(mount_hooks, session_end_reports_what_was_not_pushed)
{
    write_session("session.json", notes);
    char file[400], *out = NULL;
    snprintf(file, sizeof(file), "%s/session.json", E.root);
    cr_assert_eq(hook(&out, "session-start", file), 0, "%s", out);
    free(out);
    mnt_hold_writes(&E);
    cr_assert_eq(mnt_sh(&E, NULL, "echo draft > $MNT/memory/notes/draft.md"), 0);
    int rc = hook(&out, "session-end", NULL);
    cr_expect_eq(rc, 3, "session-end: %s", out);
    cr_expect(strstr(out, "memory/notes/draft.md (new file)"), "%s", out);
    cr_expect(strstr(out, "were NOT pushed"), "%s", out);
    free(out);
    cr_expect_eq(mnt_sh(&E, &out, "ls -A $MNT"), 0);
    cr_expect_str_eq(out, "", "%s", out);
    free(out);
}

Test(mount_hooks, resources_page_and_no_memory_stores)
{
    /* A page of GET /v1/sessions/{id}/resources, from stdin. */
    char *out = NULL;
    int rc = mnt_sh(&E, &out,
                    "printf '{\"data\": [{\"type\": \"memory_store\", \"memory_store_id\": \"%s\", "
                    "\"mount_path\": \"%%s/memory/notes\"}], \"next_page\": null}' \"$MNT\" | "
                    "MEMSTOREFS=$MFS MEMSTOREFS_MOUNT_OPTS=\"--cache-dir $CACHE\" "
                    "%s/session-start -",
                    notes, HOOKS);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    cr_expect_eq(mnt_sh(&E, NULL, "test -f $MNT/memory/notes/todo.md"), 0);
    cr_expect_eq(hook(&out, "session-end", NULL), 0, "%s", out);
    free(out);
    /* A session without memory stores: nothing to do, and no failure. */
    rc = mnt_sh(&E, &out, "echo '{\"id\": \"sesn_2\", \"resources\": []}' > %s/none.json && "
                          "MEMSTOREFS=$MFS %s/session-start %s/none.json",
                E.root, HOOKS, E.root);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "no memory stores"), "%s", out);
    free(out);
}
