/* test_package.c - the Debian package as an operator builds and installs
 * it: cpack -G DEB from this build, its runtime dependencies, its files
 * unpacked into a scratch root (dpkg-deb -x), the installed binaries run
 * from there, the man pages render, the example units parse, and an fstab
 * line mounts a store read-only through the package's own
 * /usr/sbin/mount.fuse.memstorefs and /usr/bin/memstorefs (overlaid on
 * the host's directories in a private mount namespace, so the host stays
 * untouched), served by the package's memstored. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnt.h"

static struct mnt_env E;
static char deb[600];

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "cd %s && cpack -G DEB -B %s/pkg --config %s/CPackConfig.cmake "
                              ">%s/cpack.log 2>&1 && ls %s/pkg/memstorefs_*.deb",
                    E.root, E.root, MFS_BUILD_DIR, E.root, E.root);
    char *log = NULL;
    if (rc) {
        char p[400];
        snprintf(p, sizeof(p), "%s/cpack.log", E.root);
        log = mnt_read(p, NULL);
    }
    cr_assert_eq(rc, 0, "cpack failed: %s %s", out, log ? log : "");
    free(log);
    out[strcspn(out, "\n")] = '\0';
    snprintf(deb, sizeof(deb), "%s", out);
    free(out);
    cr_assert_eq(mnt_sh(&E, &out, "dpkg-deb -x %s %s/fs", deb, E.root), 0, "%s", out);
    free(out);
}

static void teardown(void)
{
    /* The package's memstored, if a test started one (by its pid). */
    if (E.root[0])
        mnt_sh(&E, NULL, "test -f %s/pkgmsd.pid && kill $(cat %s/pkgmsd.pid) 2>/dev/null",
               E.root, E.root);
    mnt_teardown(&E);
}

TestSuite(package, .init = setup, .fini = teardown, .timeout = 240);

Test(package, runtime_dependencies)
{
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "dpkg-deb -f %s Package Version Architecture Depends", deb), 0);
    const char *want[] = {"Package: memstorefs", "Version: 0.1.0", "fuse3", "libfuse3-3",
                          "libcurl4", "libsqlite3-0", "libcjson1", "libmicrohttpd12", "libc6"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_expect(strstr(out, want[i]), "'%s' missing from the control fields: %s", want[i], out);
    free(out);
}

Test(package, installed_files_and_binaries)
{
    const char *files[] = {
        "usr/bin/memstorefs", "usr/bin/memstored", "usr/sbin/mount.fuse.memstorefs",
        "usr/share/man/man1/memstorefs.1", "usr/share/man/man1/memstored.1",
        "usr/libexec/memstorefs/session-start", "usr/libexec/memstorefs/session-end",
        "usr/share/doc/memstorefs/operations.md", "usr/share/doc/memstorefs/README.md",
        "usr/share/doc/memstorefs/examples/systemd/memstorefs@.service",
        "usr/share/doc/memstorefs/examples/systemd/memstored.service",
        "usr/share/doc/memstorefs/examples/sandbox/Dockerfile"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        cr_expect_eq(mnt_sh(&E, NULL, "test -e %s/fs/%s", E.root, files[i]), 0, "%s is missing",
                     files[i]);
    char *out = NULL;
    cr_expect_eq(mnt_sh(&E, &out, "readlink %s/fs/usr/sbin/mount.fuse.memstorefs", E.root), 0);
    cr_expect_str_eq(out, "../bin/memstorefs\n");
    free(out);
    cr_expect_eq(mnt_sh(&E, &out, "%s/fs/usr/bin/memstorefs --version", E.root), 0);
    cr_expect_str_eq(out, "memstorefs 0.1.0\n");
    free(out);
    cr_expect_eq(mnt_sh(&E, &out, "%s/fs/usr/bin/memstorefs mount --help", E.root), 0, "%s", out);
    free(out);
    cr_expect_eq(mnt_sh(&E, &out, "%s/fs/usr/bin/memstored --help", E.root), 0, "%s", out);
    free(out);
    cr_expect_eq(mnt_sh(&E, NULL, "test -x %s/fs/usr/libexec/memstorefs/session-start && "
                                  "test -x %s/fs/usr/libexec/memstorefs/session-end",
                        E.root, E.root), 0);
}

Test(package, man_pages_render)
{
    const char *pages[] = {"memstorefs", "memstored"};
    for (size_t i = 0; i < 2; i++) {
        char *out = NULL;
        int rc = mnt_sh(&E, &out, "MANWIDTH=80 man -l %s/fs/usr/share/man/man1/%s.1 2>&1 | "
                                  "col -b", E.root, pages[i]);
        cr_expect_eq(rc, 0);
        char head[64];
        snprintf(head, sizeof(head), "%s(1)", pages[i]);
        cr_expect(strstr(out, head) && strstr(out, "NAME") && strstr(out, "SYNOPSIS") &&
                  strstr(out, "EXIT STATUS"), "%s did not render: %s", pages[i], out);
        cr_expect_null(strstr(out, "warning:"), "%s", out);
        free(out);
    }
}

Test(package, example_units_parse)
{
    char *out = NULL;
    /* systemd-analyze verify checks the units and that their commands
     * exist: the package's /usr/bin is overlaid for it. */
    int rc = mnt_sh(&E, &out,
                    "R=%s; export R; cp $R/fs/usr/share/doc/memstorefs/examples/systemd/memstorefs@.service "
                    "$R/memstorefs@s1.service && unshare -m --propagation private sh -ec '"
                    "mount -t overlay overlay -o lowerdir=$R/fs/usr/bin:/usr/bin /usr/bin; "
                    "systemd-analyze verify "
                    "$R/fs/usr/share/doc/memstorefs/examples/systemd/memstored.service "
                    "$R/memstorefs@s1.service'",
                    E.root);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out, "", "systemd-analyze complained: %s", out);
    free(out);
}

Test(package, fstab_mount_with_the_installed_helper)
{
    /* The package's memstored serves a store seeded from a folder. */
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, NULL, "mkdir -p %s/seed/notes && echo '- from the package' > "
                                  "%s/seed/notes/todo.md", E.root, E.root), 0);
    int rc = mnt_sh(&E, &out,
                    "%s/fs/usr/bin/memstored --listen 127.0.0.1:0 --db %s/pkg.db --api-key pk "
                    "--seed 'Pkg=%s/seed' > %s/pkgmsd.out 2>%s/pkgmsd.log & echo $! > %s/pkgmsd.pid; "
                    "for i in $(seq 100); do grep -q listening %s/pkgmsd.out && break; sleep 0.1; done; "
                    "cat %s/pkgmsd.out",
                    E.root, E.root, E.root, E.root, E.root, E.root, E.root, E.root);
    cr_assert_eq(rc, 0, "%s", out);
    char id[128] = "", url[128] = "";
    char *p = strstr(out, " id=");
    cr_assert_not_null(p, "%s", out);
    sscanf(p + 4, "%127s", id);
    p = strstr(out, "listening url=");
    cr_assert_not_null(p, "%s", out);
    sscanf(p + 14, "%127s", url);
    free(out);

    cr_assert_eq(mnt_sh(&E, NULL, "mkdir -p %s/mp && printf '%%s\\n' 'ANTHROPIC_API_KEY=pk' "
                                  "'ANTHROPIC_BASE_URL=%s' > %s/cred && chmod 600 %s/cred && "
                                  "printf '%%s\\n' '%s %s/mp fuse.memstorefs ro,_netdev,"
                                  "credentials=%s/cred,cache_dir=%s 0 0' > %s/fstab",
                        E.root, url, E.root, E.root, id, E.root, E.root, E.cache, E.root), 0);
    rc = mnt_sh(&E, &out,
                "R=%s; export R; unshare -m --propagation private sh -ec '"
                "mount -t overlay overlay -o lowerdir=$R/fs/usr/bin:/usr/bin /usr/bin; "
                "mount -t overlay overlay -o lowerdir=$R/fs/usr/sbin:/usr/sbin /usr/sbin; "
                "mount -T $R/fstab $R/mp; "
                "grep \" $R/mp fuse.memstorefs \" /proc/self/mounts; "
                "cat $R/mp/notes/todo.md; "
                "/usr/bin/memstorefs status | grep \"content cached\"; "
                "/usr/bin/memstorefs unmount $R/mp'; "
                "kill $(cat $R/pkgmsd.pid)",
                E.root);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "fuse.memstorefs ro,"), "%s", out);
    cr_expect(strstr(out, "- from the package"), "%s", out);
    cr_expect(strstr(out, "unmounted "), "%s", out);
    free(out);
}
