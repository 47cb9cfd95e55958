/* test_mount_sync_cmd.c - memstorefs sync [PATH... | --all] [--wait]
 * (issue 11): with --wait it returns only once the server has the edit,
 * and exits 3 listing what it could not push; its count of what it
 * pushed includes a round it waited for; without it, it returns at
 * once and the sync follows; a path inside a mount names that mount; bad
 * usage and paths that are no mount get clear errors.  And the final sync
 * at unmount costs requests in proportion to what is dirty, not to the
 * store's size (no listing). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_mount_sync.h"

static void setup(void)
{
    const char *seed[] = {"/notes/a.md", "a one\n", "/b.md", "b one\n", NULL};
    sy_start(seed);
}

/* A test's background writers (a shell, or mnt_hold_open's children),
 * stopped by their PIDs; 0 once ended and reaped. */
static pid_t writer, writer2;

static void stop_writer(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0); /* a child of the test's: reaped (else ECHILD at once) */
    }
    *pid = 0;
}

static void teardown(void)
{
    stop_writer(&writer);
    stop_writer(&writer2);
    sy_stop();
}

/* How many times needle is in hay. */
static int occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

TestSuite(mount_sync_cmd, .init = setup, .fini = teardown, .timeout = 180);

static long total(void)
{
    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "GET", "/admin/stats", NULL, &r), 0);
    long n = (long)tj_num(r.json, "total");
    tresp_free(&r);
    return n;
}

/* The mount, once its first round (by hand) is over: a test's edit is
 * then pushed by the command the test runs, not by a round of the sync
 * thread's (wait_counts_what_a_round_it_waited_for_pushed has one). */
static void mount_after_first_round(void)
{
    sy_mount(false, "--sync-interval 3600");
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "$MFS sync --all --wait"), 0, "%s", out);
    free(out);
}

Test(mount_sync_cmd, wait_returns_once_the_server_has_the_edit)
{
    mount_after_first_round();
    char *out = NULL;
    cr_assert_eq(sy_run(NULL, "echo a two > notes/a.md"), 0);
    int rc = sy_run(&out, "$MFS sync \"$PWD\" --wait");
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "synced; pushed 1,"), "%s", out);
    free(out);
    /* No polling: it is there the moment the command returned. */
    char *c = sy_content("/notes/a.md");
    cr_expect_str_eq(c, "a two\n");
    free(c);

    /* A path inside the mount, relative, from a directory of it. */
    cr_assert_eq(sy_run(NULL, "echo b two > b.md"), 0);
    rc = sy_run(&out, "cd notes && $MFS sync . --wait");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    c = sy_content("/b.md");
    cr_expect_str_eq(c, "b two\n");
    free(c);
}

/* A round of the sync thread's runs when `sync --wait` is asked for, and
 * pushes the edit; the command's own round then finds nothing left.  Its
 * report counts what that round pushed: it said "pushed 0" for the edit
 * made just before it, which was in the store when it returned. */
Test(mount_sync_cmd, wait_counts_what_a_round_it_waited_for_pushed)
{
    mount_after_first_round();
    /* The next write takes 2 s at the server: the sync thread's round
     * that sends it is still running when the command below asks. */
    sy_fault("{\"action\":\"latency\",\"latency_ms\":2000,\"count\":1,\"method\":\"POST\"}");
    cr_assert_eq(sy_run(NULL, "echo new > new.md && $MFS sync --all"), 0);
    cr_assert(mnt_wait_sh(&E, 10, "$MFS status --json | grep -q '\"running\":true'"),
              "the kicked sync never ran: the test proves nothing");
    char *out = NULL;
    int rc = sy_run(&out, "$MFS sync --all --wait");
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(out && strstr(out, "synced; pushed 1, deleted 0, conflicts 0, refused 0, pending 0"),
              "%s", out);
    free(out);
    char *c = sy_content("/new.md");
    cr_expect_str_eq(c ? c : "", "new\n");
    free(c);
}

Test(mount_sync_cmd, wait_exits_3_listing_what_was_not_pushed)
{
    sy_mount(false, "--sync-interval 3600");
    /* A NUL byte: the server cannot take it; the file stays local. */
    cr_assert_eq(sy_run(NULL, "printf 'x\\0y' > bin.md"), 0);
    char *out = NULL;
    /* Whichever sync refused it (the mount's first round may), every sync
     * --wait after says it is not in the store. */
    for (int i = 0; i < 2; i++) {
        int rc = sy_run(&out, "$MFS sync --all --wait");
        cr_expect_eq(rc, 3, "sync %d: %s", i, out);
        cr_expect(strstr(out, "not pushed") && strstr(out, "bin.md") && strstr(out, "refused 1"),
                  "sync %d: %s", i, out);
        free(out);
    }
    int rc;
    char *c = sy_content("/bin.md");
    cr_expect_null(c, "a refused file reached the server");
    free(c);
    /* Once fixed, the next sync pushes it and says all is well. */
    cr_assert_eq(sy_run(NULL, "echo fine > bin.md"), 0);
    rc = sy_run(&out, "$MFS sync --all --wait");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    c = sy_content("/bin.md");
    cr_expect_str_eq(c, "fine\n");
    free(c);
}

/* A sync --wait that exits 0 (its output without absent, unless NULL),
 * after which the store has the held tests' two edits. */
static void sync_pushes_both(const char *absent)
{
    char *out = NULL;
    int rc = sy_run(&out, "$MFS sync --all --wait");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(!absent || !strstr(out, absent), "%s", out);
    free(out);
    char *c = sy_content("/notes/a.md");
    cr_expect_str_eq(c, "a one\na two\n");
    free(c);
    c = sy_content("/fresh.md");
    cr_expect_str_eq(c, "fresh\n");
    free(c);
}

/* A file a writer still holds open, with an edit saved by the close of
 * another of its descriptors (a shell's redirection opens, then closes the
 * descriptor it copied), is not pushed by a sync (a writer may still be
 * half-way): --wait names it as open for writing, not merely changed, and
 * the sync after its writer closed it pushes it. */
Test(mount_sync_cmd, wait_names_the_files_a_writer_holds_open)
{
    mount_after_first_round();
    char *out = NULL;
    /* The writer: both files open, its edits saved held, then it waits
     * for the test's word (at most 60 s, and not past the test's end) and
     * closes them. */
    cr_assert_eq(sy_run(&out, "( exec 3>>notes/a.md 4>fresh.md; printf 'a two\\n' >&3; "
                              "exec 3>>notes/a.md; printf 'fresh\\n' >&4; exec 4>>fresh.md; "
                              ": > \"$CACHE/../written\"; "
                              "for i in $(seq 600); do [ -e \"$CACHE/../go\" ] && break; "
                              "[ -d \"$CACHE\" ] || break; sleep 0.1; done; exec 3>&- 4>&-; "
                              ": > \"$CACHE/../closed\" ) >/dev/null 2>&1 & echo $!"), 0);
    writer = atoi(out);
    free(out);
    cr_assert_gt(writer, 0);
    cr_assert(mnt_wait_sh(&E, 30, "test -e \"$CACHE/../written\""), "the writer never wrote");
    cr_assert_eq(sy_run(NULL, "echo b two > b.md"), 0);
    int rc = sy_run(&out, "$MFS sync --all --wait");
    cr_expect_eq(rc, 3, "%s", out);
    char want[800];
    snprintf(want, sizeof(want), "not pushed: %s/notes/a.md (changed locally, open for writing: "
                                 "pushed once its writer closes it)", mnt);
    cr_expect(strstr(out, want), "no '%s' in: %s", want, out);
    snprintf(want, sizeof(want), "not pushed: %s/fresh.md (new file, open for writing: pushed "
                                 "once its writer closes it)", mnt);
    cr_expect(strstr(out, want), "no '%s' in: %s", want, out);
    cr_expect(strstr(out, "pushed 1,") && !strstr(out, "b.md"), "b.md was not pushed: %s", out);
    free(out);
    char *c = sy_content("/notes/a.md");
    cr_expect_str_eq(c, "a one\n", "an edit its writer holds was pushed");
    free(c);
    /* The writer closes both; the next sync pushes them. */
    cr_assert_eq(sy_run(NULL, ": > \"$CACHE/../go\""), 0);
    cr_assert(mnt_wait_sh(&E, 30, "test -e \"$CACHE/../closed\""), "the writer never closed");
    for (int i = 0; i < 100 && kill(writer, 0) == 0; i++)
        usleep(50 * 1000);
    writer = 0; /* ended (or ending: its PID is not signalled later) */
    sync_pushes_both(NULL);
}

/* An edit a writer still holds in its buffer, which no close or fsync of
 * any of its descriptors saved, is in none of the cache's lists, yet not in
 * the store: --wait names it and exits 3 (it said all was synced, 0), and
 * a new file so held is named once; a file removed meanwhile, never. */
Test(mount_sync_cmd, wait_names_an_edit_no_close_saved_yet)
{
    mount_after_first_round();
    char *out = NULL;
    char a[600], fresh[600], want[800];
    snprintf(a, sizeof(a), "%s/notes/a.md", mnt);
    snprintf(fresh, sizeof(fresh), "%s/fresh.md", mnt);
    snprintf(want, sizeof(want), "not pushed: %s (open for writing, its edit not saved yet: "
                                 "pushed once its writer closes or fsyncs it)", a);
    /* That edit alone: nothing else is left to push. */
    writer = mnt_hold_open((const char *const[]){a}, 1, O_WRONLY | O_APPEND, "a two\n");
    int rc = sy_run(&out, "$MFS sync --all --wait");
    cr_expect_eq(rc, 3, "%s", out);
    cr_expect(strstr(out, "pending 0") && strstr(out, want), "no '%s' in: %s", want, out);
    free(out);
    /* With a new file held too, which the list of files never closed
     * names: once. */
    writer2 = mnt_hold_open((const char *const[]){fresh}, 1, O_WRONLY | O_CREAT | O_TRUNC,
                            "fresh\n");
    rc = sy_run(&out, "$MFS sync --all --wait");
    stop_writer(&writer2); /* its close saves fresh.md */
    cr_expect_eq(rc, 3, "%s", out);
    cr_expect(strstr(out, want), "no '%s' in: %s", want, out);
    cr_expect_eq(occurrences(out, "fresh.md"), 1, "fresh.md named %d times: %s",
                 occurrences(out, "fresh.md"), out);
    cr_expect(strstr(out, "fresh.md (new file no writer ever closed)"), "%s", out);
    free(out);
    char *c = sy_content("/notes/a.md");
    cr_expect_str_eq(c, "a one\n", "an edit no close saved was pushed");
    free(c);
    /* Its writer ends: the close saves the edit, and the next sync pushes
     * it.  A file removed while its writer holds an edit is named by no
     * sync: no store can have that edit. */
    stop_writer(&writer);
    char b[600];
    snprintf(b, sizeof(b), "%s/b.md", mnt);
    writer = mnt_hold_open((const char *const[]){b}, 1, O_WRONLY | O_APPEND, "b two\n");
    cr_assert_eq(unlink(b), 0, "%s", strerror(errno));
    sync_pushes_both("not pushed");
}

Test(mount_sync_cmd, without_wait_it_returns_at_once)
{
    sy_mount(false, "--sync-interval 3600");
    /* Every write takes 3 s at the server. */
    sy_fault("{\"action\":\"latency\",\"latency_ms\":3000,\"count\":0,\"method\":\"POST\"}");
    cr_assert_eq(sy_run(NULL, "echo b three > b.md"), 0);
    char *out = NULL;
    int rc = sy_run(&out, "$MFS sync --all");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    char *c = sy_content("/b.md");
    cr_expect_str_eq(c, "b one\n", "the command waited for the write");
    free(c);
    const char *want[] = {"/notes/a.md", "a one\n", "/b.md", "b three\n", NULL};
    char *last = NULL;
    cr_expect(sy_wait_server(want, WITHIN, &last), "the kicked sync did not push: %s", last);
    free(last);
}

Test(mount_sync_cmd, bad_usage_and_paths_that_are_no_mount)
{
    sy_mount(false, "--sync-interval 3600");
    char *out = NULL;
    cr_expect_eq(sy_run(&out, "$MFS sync --all \"$PWD\""), 2, "%s", out);
    free(out);
    cr_expect_eq(sy_run(&out, "$MFS sync --bogus"), 2, "%s", out);
    free(out);
    cr_expect_eq(sy_run(&out, "$MFS sync /tmp --wait"), 1, "%s", out);
    cr_expect(strstr(out, "/tmp is not a memstorefs mount"), "%s", out);
    free(out);
    /* A name that only starts like the mount point is not inside it. */
    cr_expect_eq(sy_run(&out, "$MFS sync \"$PWD\"x --wait"), 1, "%s", out);
    free(out);
}

Test(mount_sync_cmd, the_final_sync_costs_what_is_dirty)
{
    /* A store of 400 memories: a listing is 4 pages.  Written two minutes
     * "ago" (memstored's clock), out of the feed's window. */
    struct tresp r;
    cr_assert_eq(t_admin(&E.msd, "POST", "/admin/clock", "{\"offset_ms\":-120000}", &r), 0);
    tresp_free(&r);
    for (int i = 0; i < 400; i++) {
        char p[32], body[32];
        snprintf(p, sizeof(p), "/big/m%03d.md", i);
        snprintf(body, sizeof(body), "m %d\n", i);
        char *id = t_create_memory(&E.msd, store, p, body);
        cr_assert_not_null(id);
        free(id);
    }
    cr_assert_eq(t_admin(&E.msd, "POST", "/admin/clock", "{}", &r), 0);
    tresp_free(&r);
    sy_mount(false, "--sync-interval 3600");
    sy_after_sync();
    cr_assert_eq(sy_run(NULL, "echo changed > big/m007.md && echo changed > big/m123.md"), 0);
    sy_reset_stats();
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS unmount '%s'", mnt);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* The feed (one page) and two writes; never the listing. */
    struct tresp st;
    cr_assert_eq(t_admin(&E.msd, "GET", "/admin/stats", NULL, &st), 0);
    cr_expect_eq(t_route_count(&E.msd, LIST_ROUTE), 0, "the final sync listed the store: %s", st.body);
    tresp_free(&st);
    cr_expect_leq(total(), 4, "the final sync of 2 dirty files made %ld requests", total());
    char *c = sy_content("/big/m123.md");
    cr_expect_str_eq(c, "changed\n");
    free(c);
}
