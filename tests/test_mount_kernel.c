/* test_mount_kernel.c - what the kernel asks a mount, counted by the
 * daemon (status --json: kernel.requests, fs/fuseio.c): fewer round trips
 * for the same work, as issue 12 asks, checked as counts (never times).
 *   - writes after an inode's first ask for no privilege check
 *     (FUSE_HANDLE_KILLPRIV_V2): 20 writes cost at most one GETXATTR,
 *     where the kernel asked security.capability before each (20);
 *   - a namespace the mount keeps nothing in (security.*, trusted.*, the
 *     POSIX ACLs) is ENOTSUP, which ls takes as "not on this device": a
 *     second ls -l of 20 files asks 22 GETXATTRs at most (it asked 42:
 *     each file's ACL and labels), a second ls -lR of 41 files in three
 *     directories 4 at most, where asking security.selinux of each file
 *     made it 46 (ENODATA);
 *   - a private mount leaves the kernel's mode checks out (fs/fsmount.c):
 *     20 files made in a directory ask its attributes (GETATTR) once at
 *     most, not once each, and access(2) is answered from the modes;
 *   - and what stays true: no ACL, no set-ID bit and no capability can be
 *     set, so nothing ever needs dropping; --no-xattrs asks nothing.
 * Each count failed before: no kernel object in status, 20 GETXATTRs for
 * 20 writes, two per file for each ls -l.  And the request loop polls the
 * device only while the kernel's wake_here is clear (kernel.polls). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "test_mount_sync.h"

static const char *const seed[] = {"/a.md", "alpha\n", NULL};

static void setup(void)
{
    sy_start(seed);
}

static void teardown(void)
{
    sy_stop();
}

TestSuite(mount_kernel, .init = setup, .fini = teardown, .timeout = 150);

/* The count of one kind of request so far (0 when never asked). */
static long requests(const char *op)
{
    cJSON *j = sy_status_json();
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kernel");
    cr_assert_not_null(k, "status --json has no kernel object");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(k, "requests");
    cr_assert(cJSON_IsObject(r), "kernel.requests is not an object");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(r, op);
    long v = cJSON_IsNumber(n) ? (long)n->valuedouble : 0;
    cJSON_Delete(j);
    return v;
}

static bool killpriv(void)
{
    cJSON *j = sy_status_json();
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kernel");
    bool on = k && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(k, "killpriv_v2"));
    cJSON_Delete(j);
    return on;
}

static void write_chunks(const char *name, int flags, int n)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", mnt, name);
    int fd = open(p, O_WRONLY | flags, 0644);
    cr_assert(fd >= 0, "open %s: %s", p, strerror(errno));
    for (int i = 0; i < n; i++)
        cr_assert_eq(write(fd, "0123456789\n", 11), 11, "write %d: %s", i, strerror(errno));
    cr_assert_eq(close(fd), 0);
}

Test(mount_kernel, writes_after_the_first_ask_no_privilege_check)
{
    sy_mount(false, "");
    cr_expect(killpriv(), "the daemon did not take FUSE_HANDLE_KILLPRIV_V2");
    long g0 = requests("GETXATTR"), w0 = requests("WRITE");
    write_chunks("chunks.md", O_CREAT | O_EXCL, 20);
    long g1 = requests("GETXATTR"), w1 = requests("WRITE");
    cr_expect_eq(w1 - w0, 20, "the kernel sent %ld writes for 20", w1 - w0);
    cr_expect_leq(g1 - g0, 1, "20 writes to a new file asked %ld GETXATTRs", g1 - g0);
    /* An existing file, truncated and written again: no ask at all once
     * the inode was checked, and an append the same. */
    write_chunks("chunks.md", O_TRUNC, 10);
    write_chunks("chunks.md", O_APPEND, 10);
    long g2 = requests("GETXATTR");
    cr_expect_leq(g2 - g1, 1, "20 more writes to a known file asked %ld GETXATTRs", g2 - g1);
    /* The content is all there, and it syncs as any other. */
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "wc -l < chunks.md"), 0);
    cr_expect_str_eq(out, "20\n");
    free(out);
    sy_after_sync();
    char *c = sy_content("/chunks.md");
    cr_expect(c && strlen(c) == 20 * 11, "the store has %zu bytes, not 220", c ? strlen(c) : 0);
    free(c);
}

Test(mount_kernel, nothing_can_need_dropping)
{
    sy_mount(false, "");
    char p[512];
    snprintf(p, sizeof(p), "%s/a.md", mnt);
    /* No set-ID bit: a chmod that changes the mode is refused. */
    cr_expect_eq(chmod(p, 04644), -1);
    cr_expect_eq(errno, EPERM);
    /* No capability and no ACL can be set (ENOTSUP, as any attribute). */
    static const char cap[20] = {0, 0, 0, 2};
    cr_expect_eq(setxattr(p, "security.capability", cap, sizeof(cap), 0), -1);
    cr_expect_eq(errno, ENOTSUP);
    static const char acl[] = {2, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff,
                               4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, 0x20, 0, 4, 0,
                               0xff, 0xff, 0xff, 0xff};
    cr_expect_eq(setxattr(p, "system.posix_acl_access", acl, sizeof(acl), 0), -1);
    cr_expect(errno == ENOTSUP || errno == EOPNOTSUPP, "setting an ACL: %s", strerror(errno));
    cr_expect_eq(getxattr(p, "system.posix_acl_access", NULL, 0), -1);
    cr_expect_eq(errno, ENOTSUP);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_expect_eq(st.st_mode & 07777, 0644);
}

/* Setting or removing an attribute fails ENOTSUP, and after the first
 * refusal of each the kernel answers by itself (it asked 20 of each). */
Test(mount_kernel, attributes_are_refused_without_asking_each_time)
{
    sy_mount(false, "");
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "for i in $(seq 20); do echo $i > f$i.md; done"), 0, "%s", out);
    free(out);
    long s0 = requests("SETXATTR"), r0 = requests("REMOVEXATTR");
    for (int i = 1; i <= 20; i++) {
        char p[512];
        snprintf(p, sizeof(p), "%s/f%d.md", mnt, i);
        cr_expect_eq(setxattr(p, i % 2 ? "user.note" : "user.memstore.state", "x", 1, 0), -1);
        cr_expect_eq(errno, ENOTSUP, "setxattr %d: %s", i, strerror(errno));
        cr_expect_eq(removexattr(p, "user.note"), -1);
        cr_expect_eq(errno, ENOTSUP, "removexattr %d: %s", i, strerror(errno));
    }
    long s1 = requests("SETXATTR"), r1 = requests("REMOVEXATTR");
    cr_expect_leq(s1 - s0, 1, "20 setxattr asked the daemon %ld times", s1 - s0);
    cr_expect_leq(r1 - r0, 1, "20 removexattr asked the daemon %ld times", r1 - r0);
    /* Reading them still works: the history attributes are there. */
    char p[512], v[256];
    snprintf(p, sizeof(p), "%s/a.md", mnt);
    cr_expect_gt(getxattr(p, "user.memstore.state", v, sizeof(v)), 0, "%s", strerror(errno));
}

Test(mount_kernel, an_inode_acl_is_asked_once)
{
    sy_mount(false, "");
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "mkdir d && for i in $(seq 20); do echo $i > d/f$i.md; done"), 0,
                 "%s", out);
    free(out);
    cr_assert_eq(sy_run(&out, "ls -l d > /dev/null"), 0, "%s", out);
    free(out);
    long g0 = requests("GETXATTR");
    cr_assert_eq(sy_run(&out, "ls -l d > /dev/null"), 0, "%s", out);
    free(out);
    long g1 = requests("GETXATTR");
    /* 22 at most, where asking each file's ACL and labels made it 42 (ls
     * stops asking both at the first ENOTSUP). */
    cr_expect_leq(g1 - g0, 22, "a second ls -l of 20 files asked %ld GETXATTRs", g1 - g0);
    /* The user.memstore.* attributes are still asked and answered. */
    cr_assert_eq(sy_run(&out, "getfattr -n user.memstore.state --only-values d/f1.md"), 0, "%s",
                 out);
    cr_expect(strcmp(out, "dirty") == 0 || strcmp(out, "clean") == 0, "state %s", out);
    free(out);
}

Test(mount_kernel, ls_asks_for_labels_once_a_run)
{
    sy_mount(false, "");
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "mkdir d e && for i in $(seq 20); do echo $i > d/f$i.md; "
                              "echo $i > e/g$i.md; done && ls -lR . > /dev/null"),
                 0, "%s", out);
    free(out);
    long g0 = requests("GETXATTR");
    cr_assert_eq(sy_run(&out, "ls -lR . | grep -c '\\.md$'"), 0, "%s", out);
    cr_expect_str_eq(out, "41\n", "ls -lR listed %s files", out); /* a.md, d/ and e/ */
    free(out);
    long g1 = requests("GETXATTR");
    /* One for the labels, and at most one a directory (its default ACL,
     * which the kernel may ask again): 4, where it was 46. */
    cr_expect_leq(g1 - g0, 4, "a second ls -lR of 41 files asked %ld GETXATTRs", g1 - g0);

    /* What each namespace answers, straight from the daemon. */
    char p[512];
    snprintf(p, sizeof(p), "%s/d/f1.md", mnt);
    const char *unkept[] = {"security.selinux", "security.capability", "trusted.x",
                            "system.nfs4_acl", "system.posix_acl_access",
                            "system.posix_acl_default"};
    for (size_t i = 0; i < sizeof(unkept) / sizeof(unkept[0]); i++) {
        errno = 0;
        cr_expect_eq(getxattr(p, unkept[i], NULL, 0), -1, "%s", unkept[i]);
        cr_expect_eq(errno, ENOTSUP, "%s: %s", unkept[i], strerror(errno));
    }
    const char *kept[] = {"user.other", "user.memstore.nothing"};
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
        errno = 0;
        cr_expect_eq(getxattr(p, kept[i], NULL, 0), -1, "%s", kept[i]);
        cr_expect_eq(errno, ENODATA, "%s: %s", kept[i], strerror(errno));
    }
    cr_expect_gt(getxattr(p, "user.memstore.sha256", NULL, 0), 0);
}

Test(mount_kernel, no_xattrs_asks_nothing)
{
    sy_mount(false, "--no-xattrs");
    long g0 = requests("GETXATTR");
    write_chunks("n.md", O_CREAT | O_EXCL, 5);
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "ls -l . > /dev/null; ls -l . > /dev/null"), 0, "%s", out);
    free(out);
    cr_expect_leq(requests("GETXATTR") - g0, 1, "--no-xattrs still asks the daemon");
}

/* A private mount (root's own, no allow_other) has no kernel mode checks:
 * every process the kernel lets in owns the files, whose modes grant it
 * everything (fs/fsmount.c).  Without them the kernel does not ask a
 * directory's attributes again at the next path walk after each file made
 * in it; access(2) and chdir are answered by the daemon (FUSE_ACCESS) as
 * the checks would answer them.  Failed before: default_permissions in the
 * mount's options, and 20 GETATTRs for 20 files. */
Test(mount_kernel, a_private_mount_leaves_the_mode_checks_out)
{
    sy_mount(false, "");
    cr_expect(!mnt_has_option(mnt, "default_permissions"), "a private mount checks modes");
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "mkdir d"), 0, "%s", out);
    free(out);
    long a0 = requests("GETATTR");
    for (int i = 0; i < 20; i++) {
        char name[64];
        snprintf(name, sizeof(name), "d/n%02d.md", i);
        write_chunks(name, O_CREAT | O_EXCL, 1);
    }
    long a1 = requests("GETATTR");
    cr_expect_leq(a1 - a0, 1, "20 files made in a directory asked %ld GETATTRs", a1 - a0);
    /* What access(2) says, as the modes (0644, 0755) say it for root. */
    char f[512], d[512], m[512];
    snprintf(f, sizeof(f), "%s/d/n00.md", mnt);
    snprintf(d, sizeof(d), "%s/d", mnt);
    snprintf(m, sizeof(m), "%s/.anthropic-memory-store", mnt);
    long c0 = requests("ACCESS");
    cr_expect_eq(access(f, R_OK | W_OK), 0, "%s", strerror(errno));
    errno = 0;
    cr_expect_eq(access(f, X_OK), -1, "a file of mode 0644 is executable");
    cr_expect_eq(errno, EACCES, "%s", strerror(errno));
    cr_expect_eq(access(d, R_OK | W_OK | X_OK), 0, "%s", strerror(errno));
    cr_expect_eq(access(m, R_OK), 0, "%s", strerror(errno));
    cr_expect_gt(requests("ACCESS") - c0, 0, "access(2) was not asked of the daemon");
    cr_expect_eq(access(f, F_OK), 0);
    /* exec and cd, and the shell's tests, as before. */
    cr_assert_neq(sy_run(&out, "d/n00.md"), 0, "a file of mode 0644 ran");
    cr_expect(out && strstr(out, "Permission denied"), "%s", out);
    free(out);
    cr_assert_eq(sy_run(&out, "cd d && test -r n00.md && test -w n00.md && ! test -x n00.md && "
                              "test -x . && test -w . && echo ok"), 0, "%s", out);
    cr_expect_str_eq(out, "ok\n");
    free(out);
}

/* The checks stay wherever they can refuse something: a --umask that takes
 * the owner's bits, files given to another user (test_security_files.c),
 * -o allow_other, or asked for with -o default_permissions. */
Test(mount_kernel, mode_checks_stay_where_they_can_refuse)
{
    const char *const extra[] = {"--umask 200", "-o allow_other", "-o default_permissions"};
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
        if (i == 0)
            sy_mount(false, extra[i]);
        else
            sy_remount(extra[i]);
        cr_expect(mnt_has_option(mnt, "default_permissions"), "%s: no mode checks", extra[i]);
    }
}

/* The fuse module's wake_here parameter (fs/kwake.c), as this test found
 * it: restored after the test whatever it did. */
#define WAKE_PARAM "/sys/module/fuse/parameters/wake_here"
static char wake_orig;

static bool set_wake(char c)
{
    int fd = open(WAKE_PARAM, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = write(fd, &c, 1) == 1;
    close(fd);
    return ok;
}

static void restore_wake(void)
{
    if (wake_orig)
        set_wake(wake_orig);
}

/* status --json's kernel.wake_here: 1, 0, or -1 when null; and polls. */
static int status_wake(long *polls)
{
    cJSON *j = sy_status_json();
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kernel");
    cr_assert_not_null(k, "status --json has no kernel object");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(k, "wake_here");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(k, "polls");
    cr_assert(cJSON_IsBool(w) || cJSON_IsNull(w), "kernel.wake_here is neither a boolean nor null");
    cr_assert(cJSON_IsNumber(p), "kernel.polls is not a number");
    int v = cJSON_IsNull(w) ? -1 : cJSON_IsTrue(w);
    *polls = (long)p->valuedouble;
    cJSON_Delete(j);
    return v;
}

/* Sets the parameter, then waits until the daemon reads it (at most a
 * second after it changes); the polls count then. */
static long wake_is(char c)
{
    cr_assert(set_wake(c), "cannot write %s: %s", WAKE_PARAM, strerror(errno));
    long polls = 0;
    for (int i = 0; i < 40; i++) {
        if (status_wake(&polls) == (c == 'Y'))
            return polls;
        usleep(100 * 1000);
    }
    cr_assert_fail("status --json never showed wake_here %c", c);
    return 0;
}

static void creates(const char *prefix, int n)
{
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s%02d.md", prefix, i);
        write_chunks(name, O_CREAT | O_EXCL, 1);
    }
}

/* The request loop polls the device after an answer only while the
 * kernel's wake_here is clear (fs/kwake.c): with it set, 40 creates poll
 * nothing; with it clear, they poll.  On a kernel without the parameter,
 * status says null and the loop polls.  Failed before: no wake_here in
 * status; with the loop's test of it taken out, 40 creates polled 280
 * times with wake_here set. */
Test(mount_kernel, the_loop_polls_only_while_wake_here_is_clear, .fini = restore_wake)
{
    sy_mount(false, "");
    FILE *f = fopen(WAKE_PARAM, "r");
    int c = f ? fgetc(f) : EOF;
    if (f)
        fclose(f);
    long p0 = 0, p1 = 0;
    if (c == EOF) {
        cr_assert_eq(status_wake(&p0), -1, "status shows wake_here on a kernel without it");
        creates("plain", 40);
        cr_assert_eq(status_wake(&p1), -1);
        cr_expect_gt(p1, p0, "40 creates polled the device %ld times", p1 - p0);
        return;
    }
    wake_orig = (char)c;
    if (access(WAKE_PARAM, W_OK) != 0) {
        /* Not allowed to change it: what the daemon shows is what is set. */
        cr_assert_eq(status_wake(&p0), c == 'Y');
        return;
    }
    p0 = wake_is('N');
    creates("apart", 40);
    p1 = wake_is('N');
    cr_expect_gt(p1, p0, "with wake_here clear, 40 creates polled the device %ld times", p1 - p0);
    p0 = wake_is('Y');
    creates("here", 40);
    long p2 = 0;
    cr_assert_eq(status_wake(&p2), 1);
    cr_expect_eq(p2, p0, "with wake_here set, 40 creates polled the device %ld times", p2 - p0);
    /* And the files are whole (nothing here depends on the poll). */
    char *out = NULL;
    cr_assert_eq(sy_run(&out, "cat here*.md apart*.md | wc -l"), 0);
    cr_expect_str_eq(out, "80\n");
    free(out);
}
