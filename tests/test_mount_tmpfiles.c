/* test_mount_tmpfiles.c - the cache keeps its temporary data in memory:
 * editor saves through a mount create no file in the directory SQLite
 * would put its temporary files in (SQLITE_TMPDIR, given to the daemon).
 *
 * Before `PRAGMA temp_store=MEMORY` (cache/db.c), every rename that
 * replaced a file spilled SQLite's statement journal (past 64 KiB) to a
 * new file there: created, unlinked, written and closed inside the
 * RENAME request, about 10 system calls and a file created and removed
 * on the disk for each `sed -i`.  Watched with inotify (IN_CREATE), never
 * timed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {
    "/a.md", "alpha\n", "/b.md", "beta\n", "/notes/c.md", "gamma\n", "/notes/d.md", "delta\n",
    NULL};

static char tmpdir[] = "/tmp/mfs-sqlite-tmp-XXXXXX";

static void setup(void)
{
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
    /* Inherited by the daemon through the shell that mounts (mnt_sh). */
    setenv("SQLITE_TMPDIR", tmpdir, 1);
    sy_start(seed);
}

static void teardown(void)
{
    sy_stop();
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

TestSuite(mount_tmpfiles, .init = setup, .fini = teardown, .timeout = 150);

/* The names of the files created in the watched directory since the
 * watch began (IN_CREATE), joined by spaces; their count in *n. */
static char *created(int fd, int *n)
{
    static char names[4096];
    names[0] = '\0';
    *n = 0;
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t len;
    while ((len = read(fd, buf, sizeof(buf))) > 0) {
        for (char *p = buf; p < buf + len;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            if (ev->mask & IN_CREATE) {
                (*n)++;
                if (strlen(names) + ev->len + 2 < sizeof(names)) {
                    strcat(names, ev->len ? ev->name : "?");
                    strcat(names, " ");
                }
            }
            p += sizeof(*ev) + ev->len;
        }
    }
    return names;
}

Test(mount_tmpfiles, editor_saves_create_no_temporary_file)
{
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    cr_assert(fd >= 0, "inotify_init1: %s", strerror(errno));
    cr_assert(inotify_add_watch(fd, tmpdir, IN_CREATE) >= 0, "inotify_add_watch: %s",
              strerror(errno));
    sy_mount(false, "");
    /* sed -i (a temporary file renamed over the file), a new file, and a
     * whole directory moved: 40 rounds.  The spill came once the cache held
     * some history (after about 100 saves on a fresh mount). */
    char *out = NULL;
    int rc = sy_run(&out,
                    "cd '%s' && for i in $(seq 40); do"
                    "  for f in a.md b.md notes/c.md notes/d.md; do sed -i \"s/\\$/ $i/\" $f || exit 1; done;"
                    "  echo new > notes/new$i.md && printf 'x%%.0s' $(seq 3000) > big$i.md || exit 1;"
                    "  mv notes moved && mv moved notes || exit 1;"
                    " done",
                    mnt);
    cr_assert_eq(rc, 0, "the saves failed: %s", out);
    free(out);
    size_t len = 0;
    char path[512];
    snprintf(path, sizeof(path), "%s/notes/d.md", mnt);
    char *d = mnt_read(path, &len);
    cr_assert_not_null(d);
    char want[256] = "delta";
    for (int i = 1; i <= 40; i++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), " %d", i);
    strcat(want, "\n");
    cr_expect_str_eq(d, want, "the saves did not all land: %s", d);
    free(d);
    int n = 0;
    const char *names = created(fd, &n);
    cr_expect_eq(n, 0, "the daemon created %d temporary file(s) in SQLITE_TMPDIR: %s", n, names);
    close(fd);
}
