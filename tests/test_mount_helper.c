/* test_mount_helper.c - `mount -t fuse.memstorefs` and fstab lines, with
 * the real mount(8), against memstored.
 *
 * mount(8) looks for its helpers in /sbin and runs them with a fixed PATH,
 * so the test gives it this build's memstorefs in a private mount
 * namespace (unshare -m), where read-only overlays put it in
 * /usr/local/bin (the mount.fuse3 route: mount.fuse -> mount.fuse3 ->
 * `memstorefs STORE MOUNTPOINT -o OPTS`) or in /usr/sbin as
 * mount.fuse.memstorefs (the direct route).  The host's directories are
 * untouched, and the mounts live in that namespace only: each test's
 * script checks them from inside.  The daemon's lock file is in the
 * test's runtime dir, so the teardown finds and stops it as usual; the
 * namespace goes with its last process. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnt.h"

static struct mnt_env E;
static char *store;

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Helper");
    cr_assert_not_null(store);
    free(t_create_memory(&E.msd, store, "/notes/todo.md", "- buy milk\n"));
    /* The overlay layers: bin/ for /usr/local/bin, sbin/ for /usr/sbin. */
    cr_assert_eq(mnt_sh(&E, NULL, "mkdir -p %s/bin %s/sbin %s/mp && cp $MFS %s/bin/memstorefs && "
                                  "ln -s %s/bin/memstorefs %s/sbin/mount.fuse.memstorefs",
                        E.root, E.root, E.root, E.root, E.root, E.root), 0);
}

static void teardown(void)
{
    mnt_teardown(&E);
    free(store);
    store = NULL;
}

TestSuite(mount_helper, .init = setup, .fini = teardown, .timeout = 150);

/* Runs script in a private mount namespace where /usr/local/bin holds
 * this memstorefs and, when direct, /usr/sbin its mount.fuse.memstorefs
 * link.  A whiteout hides any mount.fuse.memstorefs of the host in the
 * mount.fuse3 case.  R is the test's root dir. */
static int in_ns(bool direct, char **out, const char *script)
{
    return mnt_sh(&E, out,
                  "R=%s; export R; unshare -m --propagation private sh -ec '"
                  "mount -t overlay overlay -o lowerdir=$R/bin:/usr/local/bin /usr/local/bin; "
                  "%s"
                  "%s'",
                  E.root,
                  direct ? "mount -t overlay overlay -o lowerdir=$R/sbin:/usr/sbin /usr/sbin; "
                         : "mkdir -p $R/wh && { test -e $R/wh/mount.fuse.memstorefs || "
                           "mknod $R/wh/mount.fuse.memstorefs c 0 0; } && "
                           "mount -t overlay overlay -o lowerdir=$R/wh:/usr/sbin /usr/sbin; ",
                  script);
}

Test(mount_helper, mount_t_fuse_memstorefs_through_mount_fuse3)
{
    char *out = NULL, script[2000];
    snprintf(script, sizeof(script),
             "test ! -e /usr/sbin/mount.fuse.memstorefs; "
             "mount -t fuse.memstorefs %s $R/mp -o ro,sync_interval=15,cache_dir=$CACHE; "
             "grep \" $R/mp fuse.memstorefs \" /proc/self/mounts; "
             "cat $R/mp/notes/todo.md; "
             "if sh -c \"echo x > $R/mp/notes/new.md\" 2>$R/err; then echo WRITABLE; fi; "
             "cat $R/err; "
             "memstorefs unmount $R/mp; "
             "grep -c \" $R/mp \" /proc/self/mounts || true",
             store);
    int rc = in_ns(false, &out, script);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "fuse.memstorefs ro,nosuid,nodev"), "not mounted ro: %s", out);
    cr_expect(strstr(out, "- buy milk"), "%s", out);
    cr_expect(strstr(out, "Read-only file system"), "%s", out);
    cr_expect_null(strstr(out, "WRITABLE"), "%s", out);
    cr_expect(strstr(out, "unmounted "), "%s", out);
    cr_expect_eq(mnt_sh(&E, NULL, "test -d %s/mp", E.root), 0,
                 "the existing mount point was removed");
    free(out);
}

Test(mount_helper, fstab_line_through_mount_fuse_memstorefs)
{
    char *out = NULL, script[2000];
    /* A private fstab (mount -T) with the line an operator writes. */
    cr_assert_eq(mnt_sh(&E, NULL, "printf '%%s\\n' '# memory' '%s %s/mp fuse.memstorefs "
                                  "noauto,_netdev,x-systemd.automount,sync_interval=15,"
                                  "cache_dir=%s,log_file=%s/fstab.log 0 0' > %s/fstab",
                        store, E.root, E.cache, E.root, E.root), 0);
    snprintf(script, sizeof(script),
             "test -L /usr/sbin/mount.fuse.memstorefs; "
             "mount -T $R/fstab $R/mp; "
             "grep \" $R/mp fuse.memstorefs \" /proc/self/mounts; "
             "echo written > $R/mp/notes/new.md; "
             "memstorefs unmount $R/mp");
    int rc = in_ns(true, &out, script);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "fuse.memstorefs rw,nosuid,nodev"), "%s", out);
    cr_expect(strstr(out, "unmounted "), "%s", out);
    free(out);
    /* The write reached the store; the log went where the line said. */
    struct tresp r;
    cr_assert_eq(t_req(&E.msd, "GET", NULL, &r,
                       "/v1/memory_stores/%s/memories?path_prefix=/notes/", store), 200);
    cr_expect(strstr(r.body, "\"/notes/new.md\""), "%s", r.body);
    tresp_free(&r);
    cr_expect_eq(mnt_sh(&E, NULL, "grep -q 'mounted memory store' %s/fstab.log", E.root), 0);
}

Test(mount_helper, credentials_file_is_used_and_must_be_private)
{
    char *out = NULL, script[2000];
    cr_assert_eq(mnt_sh(&E, NULL, "printf '# for memstorefs\\nexport ANTHROPIC_API_KEY=\"test-key\""
                                  "\\nANTHROPIC_BASE_URL=%s\\n' > %s/cred && chmod 644 %s/cred",
                        E.msd.url, E.root, E.root), 0);
    /* No credential in the environment: only the file has one. */
    snprintf(script, sizeof(script),
             "unset ANTHROPIC_API_KEY ANTHROPIC_BASE_URL; "
             "if mount -t fuse.memstorefs %s $R/mp -o credentials=$R/cred,cache_dir=$CACHE "
             "  2>$R/err; then echo MOUNTED-OPEN; fi; cat $R/err; "
             "chmod 600 $R/cred; "
             "mount -t fuse.memstorefs %s $R/mp -o credentials=$R/cred,cache_dir=$CACHE; "
             "cat $R/mp/notes/todo.md; "
             "memstorefs unmount $R/mp",
             store, store);
    int rc = in_ns(true, &out, script);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_null(strstr(out, "MOUNTED-OPEN"), "a credentials file others may read was used: %s",
                   out);
    cr_expect(strstr(out, "may be read or written by other users (mode 0644)"), "%s", out);
    cr_expect(strstr(out, "- buy milk"), "the private credentials file was not used: %s", out);
    free(out);
}

Test(mount_helper, unknown_option_fails_clearly_and_leaves_nothing)
{
    char *out = NULL, script[1000];
    snprintf(script, sizeof(script),
             "if mount -t fuse.memstorefs %s $R/mp -o no_such_option=1,cache_dir=$CACHE; "
             "then echo MOUNTED; fi; grep -c \" $R/mp \" /proc/self/mounts || true",
             store);
    in_ns(true, &out, script);
    cr_expect_null(strstr(out, "MOUNTED"), "%s", out);
    cr_expect(strstr(out, "check the -o options"), "%s", out);
    size_t n = strlen(out);
    cr_expect(n >= 2 && strcmp(out + n - 2, "0\n") == 0 && (n == 2 || out[n - 3] == '\n'),
              "a mount at $R/mp is left: %s", out);
    free(out);
}
