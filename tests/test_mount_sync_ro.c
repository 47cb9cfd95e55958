/* test_mount_sync_ro.c - a read-only store never sends a write (no POST or
 * DELETE from the daemon, at any sync nor at unmount), whatever happens in
 * the mount, and still receives every kind of remote change. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {
    "/a.md", "alpha\n",
    "/b.md", "beta\n",
    "/dir/c.md", "gamma\n",
    NULL,
};

static void setup(void)
{
    sy_start(seed);
    sy_mount(true, "");
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_sync_ro, .init = setup, .fini = teardown, .timeout = 90);

Test(mount_sync_ro, never_writes_and_still_receives_remote_changes)
{
    char *id_a = sy_id("/a.md"), *id_b = sy_id("/b.md"), *id_c = sy_id("/dir/c.md");
    cr_assert(id_a && id_b && id_c);
    sy_reset_stats();
    /* Every local change is refused. */
    char *out = NULL;
    int rc = sy_run(&out, "echo x > a.md || echo x > new.md || rm b.md || mv a.md z.md || "
                          "mkdir d");
    cr_expect_neq(rc, 0, "a write succeeded in a read-only store: %s", out);
    free(out);

    /* Remote changes of every kind: the test's own 4 writes. */
    cr_assert_eq(sy_remote_update(id_a, "{\"content\":\"alpha, remote\\n\"}"), 200);
    cr_assert_eq(sy_remote_update(id_c, "{\"path\":\"/moved/c.md\"}"), 200);
    cr_assert_eq(sy_remote_delete(id_b), 200);
    free(t_create_memory(&E.msd, store, "/fresh/new.md", "new remotely\n"));
    cr_assert_eq(sy_writes(), 4);

    cr_assert(mnt_wait_sh(&E, WITHIN, "cd '%s' && test \"$(cat a.md)\" = 'alpha, remote' && "
                                      "test \"$(cat moved/c.md)\" = gamma && ! test -e b.md && "
                                      "! test -e dir/c.md && "
                                      "test \"$(cat fresh/new.md)\" = 'new remotely'", mnt),
              "the remote changes did not reach the read-only mount");
    sy_after_sync();
    cr_expect_eq(sy_writes(), 4, "the daemon sent a write");
    cr_expect_eq(sy_pending(), 0, "a read-only store has pending changes");

    /* Nor at unmount. */
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount '%s'", mnt), 0, "%s", out);
    free(out);
    cr_expect_eq(sy_writes(), 4, "the final sync sent a write");
    cr_expect_eq(t_route_count(&E.msd, "DELETE /v1/memory_stores/{id}/memories/{id}"), 1);
    free(id_a);
    free(id_b);
    free(id_c);
}

/* Changes left in the cache by a writable mount of the same store are not
 * pushed by a later read-only mount of it. */
Test(mount_sync_ro, a_read_only_mount_never_pushes_what_a_writable_one_left)
{
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount '%s'", mnt), 0, "%s", out);
    free(out);
    mnt_hold_writes(&E); /* every memory write answers 409 */
    sy_mount(false, "--flush-timeout 3");
    cr_assert_eq(sy_run(NULL, "echo local > a.md && echo new > new.md && rm b.md"), 0);
    /* 3: unmounted, with changes left unpushed. */
    cr_assert_eq(mnt_sh(&E, &out, "$MFS unmount '%s'", mnt), 3, "%s", out);
    free(out);
    cr_assert_eq(sy_pending(), 3, "the writable mount did not leave 3 changes");
    sy_clear_faults();
    sy_reset_stats();

    sy_mount(true, "");
    sy_after_sync();
    sy_after_sync();
    cr_expect_eq(sy_writes(), 0, "the read-only mount pushed what the writable one left");
    char *last = NULL;
    cr_expect(sy_wait_server(seed, 0, &last), "the store changed: %s", last);
    free(last);
}
