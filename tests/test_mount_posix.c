/* test_mount_posix.c - POSIX details of a writable mount, each compared
 * with a plain local directory holding the same tree, as the write tests
 * do: NAME_MAX (statfs and ENAMETOOLONG from every operation on a longer
 * name), access times stored apart from modification times (32- and
 * 64-bit values, before 1970 and after 2038), directory times and link
 * counts, and ctime right after ftruncate.  Each failed before issue 9:
 * f_namemax was 1023, rmdir/unlink/rename/truncate of a long name said
 * ENOENT, the atime was the mtime, a directory's mtime never moved, its
 * link count was always 2, and ftruncate left ctime stale. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mnt.h"
#include "rules.h"

static struct mnt_env E;
static char *store;
static char mnt[400], ref[400];

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Posix Test");
    cr_assert_not_null(store);
    char *id = t_create_memory(&E.msd, store, "/d/f.md", "text\n");
    cr_assert_not_null(id);
    free(id);
    snprintf(ref, sizeof(ref), "%s/ref", E.root);
    char *out = NULL;
    cr_assert_eq(mnt_sh(&E, &out, "mkdir -p '%s/d' && printf 'text\\n' > '%s/d/f.md'", ref, ref),
                 0, "%s", out);
    free(out);
    cr_assert_eq(mnt_mount(&E, store, "p", false, "", &out), 0, "mount failed: %s", out);
    free(out);
    snprintf(mnt, sizeof(mnt), "%s/p", E.mnt);
}

static void teardown(void)
{
    mnt_teardown(&E);
    free(store);
}

TestSuite(mount_posix, .init = setup, .fini = teardown, .timeout = 120);

/* Runs script in the mount and in the local directory: same exit status
 * and same output; the mount's output is returned (malloc'd). */
static char *same_out(const char *script)
{
    char *out_m = NULL, *out_r = NULL;
    int rc_m = mnt_sh(&E, &out_m, "cd '%s' && { %s\n} 2>&1", mnt, script);
    int rc_r = mnt_sh(&E, &out_r, "cd '%s' && { %s\n} 2>&1", ref, script);
    cr_expect_eq(rc_m, rc_r, "`%s`: exit %d in the mount, %d locally", script, rc_m, rc_r);
    cr_expect_str_eq(out_m, out_r, "`%s`: output differs\n--- mount\n%s--- local\n%s", script,
                     out_m, out_r);
    free(out_r);
    return out_m;
}

static void same(const char *script)
{
    free(same_out(script));
}

Test(mount_posix, names_longer_than_name_max_are_too_long_everywhere)
{
    same("stat -f -c %l .");
    /* 256 bytes: every operation says ENAMETOOLONG, at the root and below */
    const char *ops[] = {
        "touch $L", "mkdir $L", "rmdir $L", "rm $L", "rm -r $L", "mv d/f.md $L",
        "mv $L x", "truncate -s 0 $L", "cat $L", "ls $L", "echo x > $L", "ln -s d $L",
        "touch d/$L", "mkdir d/$L", "rmdir d/$L", "rm d/$L", "mv d/f.md d/$L",
        "truncate -s 1 d/$L", "stat -c %n d/$L",
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        char script[300];
        snprintf(script, sizeof(script), "L=$(printf 'n%%.0s' $(seq 256)); %s; echo $?", ops[i]);
        same(script);
    }
    /* 255 bytes work at the root and below (1,024 bytes in all: the path limit) */
    char *out = same_out("L=$(printf 'n%.0s' $(seq 255)); touch $L d/$L && echo text > d/$L && "
                         "cat d/$L && ls d | wc -l && rm d/$L && ls d | wc -l && rm $L && echo ok");
    cr_expect_str_eq(out, "text\n2\n1\nok\n");
    free(out);
}

static void stat_same(const char *what, const char *setup_script, const char *format)
{
    char script[1200];
    snprintf(script, sizeof(script), "%s && stat -c '%s' f", setup_script, format);
    same(script);
    (void)what;
}

Test(mount_posix, access_times_are_stored_and_returned)
{
    same("touch f && touch -a -d '2040-01-01 00:00:00Z' f && stat -c '%x' f");
    /* the atime stays its own when the mtime changes, and the reverse */
    stat_same("mtime", "touch -m -d '2039-06-01 12:00:00.25Z' f", "%x | %y");
    stat_same("atime", "touch -a -d '2001-02-03 04:05:06.123456789Z' f", "%x | %y");
    /* 32-bit limits and past them, before 1970 too */
    const char *times[] = {"@2147483647", "@2147483648", "@4294967296", "@-1",
                           "1960-07-01 01:02:03.5Z", "2262-01-01 00:00:00Z", "@0"};
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        char s[200];
        snprintf(s, sizeof(s), "touch -a -d '%s' f && touch -m -d '%s' f", times[i], times[i]);
        stat_same(times[i], s, "%X %Y | %x | %y");
    }
    /* reading a file does not change its atime here (documented: reads
     * never write to the cache); a future atime stays on a local relatime
     * filesystem too */
    stat_same("read", "touch -a -d '2040-01-01 00:00:00Z' f && cat f", "%x");
    /* a directory's times */
    same("mkdir -p td && touch -a -d '2050-05-05 05:05:05Z' td && "
         "touch -m -d '1999-09-09 09:09:09Z' td && stat -c '%x | %y' td");
}

Test(mount_posix, directories_count_their_subdirectories_and_date_their_changes)
{
    same("mkdir a && stat -c %h a && mkdir a/s1 && stat -c %h a && mkdir a/s2 a/s3 && "
         "stat -c %h a && rmdir a/s2 && stat -c %h a && mv a/s3 d/ && stat -c %h a d && "
         "touch a/file && stat -c %h a && stat -c %h .");
    /* each entry change moves the directory's mtime and ctime forward */
    const char *changes[] = {
        "touch d/new", "mkdir d/sub", "mv d/new d/new2", "mv x d/", "mv d/x .",
        "rm d/new2",   "rmdir d/sub", "echo y > d/y",
    };
    same("touch x");
    for (size_t i = 0; i < sizeof(changes) / sizeof(changes[0]); i++) {
        /* The ctime in nanoseconds, 20 ms on (past a coarse clock's
         * tick): later, not only as late (in whole seconds, as until 6
         * December 2026, a ctime that never moved passed). */
        char s[700];
        snprintf(s, sizeof(s), "touch -d '2000-01-01 00:00:00Z' d && c0=$(stat -c %%.9Z d) && "
                               "sleep 0.02 && %s && [ \"$(stat -c %%Y d)\" -gt 946684800 ] && "
                               "echo mtime moved && c1=$(stat -c %%.9Z d) && [ \"$c1\" != \"$c0\" ] "
                               "&& [ \"$(printf '%%s\\n' \"$c0\" \"$c1\" | sort | tail -1)\" = \"$c1\" ] "
                               "&& echo ctime kept up", changes[i]);
        char *out = same_out(s);
        cr_expect_str_eq(out, "mtime moved\nctime kept up\n", "`%s`", changes[i]);
        free(out);
    }
}

/* ctime of an open file after ftruncate, read at once with fstat. */
static void ftruncate_ctime(const char *dir, struct timespec *before, struct timespec *after)
{
    char path[500];
    snprintf(path, sizeof(path), "%s/t.md", dir);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, "0123456789", 10), 10);
    cr_assert_eq(fsync(fd), 0);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    *before = st.st_ctim;
    usleep(50 * 1000);
    cr_assert_eq(ftruncate(fd, 3), 0);
    cr_assert_eq(fstat(fd, &st), 0);
    *after = st.st_ctim;
    cr_expect_eq(st.st_size, 3);
    close(fd);
}

Test(mount_posix, ftruncate_updates_ctime_at_once)
{
    struct timespec b_m, a_m, b_r, a_r;
    ftruncate_ctime(ref, &b_r, &a_r);
    cr_assert(a_r.tv_sec > b_r.tv_sec || a_r.tv_nsec > b_r.tv_nsec,
              "the local directory does not move ctime: the test cannot tell");
    ftruncate_ctime(mnt, &b_m, &a_m);
    cr_expect(a_m.tv_sec > b_m.tv_sec || (a_m.tv_sec == b_m.tv_sec && a_m.tv_nsec > b_m.tv_nsec),
              "ctime after ftruncate is the old one (%lld.%09ld)", (long long)a_m.tv_sec,
              a_m.tv_nsec);
}
