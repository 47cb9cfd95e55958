/* test_mount_write.c - a writable mount behaves like a local filesystem:
 * each scenario of ordinary tools runs in the mount and in a plain local
 * directory holding the same tree, and the two must end up identical
 * (names, sizes, contents, the tools' output and exit status), also after
 * a remote listing has been applied.  Editors' saves (sed -i, write temp +
 * fsync + rename) keep the memory's identity in the cache. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mnt.h"
#include "rules.h"

static struct mnt_env E;
static char *store;
static char mnt[400], ref[400];

struct mem {
    const char *path;
    const char *content;
};
static const struct mem tree[] = {
    {"/notes/todo.md", "buy milk\n"},
    {"/notes/deep/a.md", "deep\n"},
    {"/prefs.md", "dark mode: on\n"},
    {"/doc.md", "one\ntwo\nthree\n"},
};
#define NTREE (sizeof(tree) / sizeof(tree[0]))
static char *ids[NTREE];

/* The reference directory gets the same tree, marker included. */
static void write_ref(const char *path, const char *content)
{
    char file[1200];
    snprintf(file, sizeof(file), "%s%s", ref, path);
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "mkdir -p \"$(dirname '%s')\"", file) > 0);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f, "%s", file);
    fputs(content, f);
    fclose(f);
}

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
    store = t_create_store(&E.msd, "Write Test");
    cr_assert_not_null(store);
    snprintf(ref, sizeof(ref), "%s/ref", E.root);
    cr_assert_eq(mkdir(ref, 0755), 0);
    for (size_t i = 0; i < NTREE; i++) {
        ids[i] = t_create_memory(&E.msd, store, tree[i].path, tree[i].content);
        cr_assert_not_null(ids[i], "cannot create %s", tree[i].path);
        write_ref(tree[i].path, tree[i].content);
    }
    char *marker = rules_marker_content(store);
    write_ref("/" MEM_MARKER_NAME, marker);
    free(marker);
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, store, "w", false, "", &out), 0, "mount failed: %s", out);
    free(out);
    snprintf(mnt, sizeof(mnt), "%s/w", E.mnt);
}

static void teardown(void)
{
    mnt_teardown(&E);
    free(store);
    for (size_t i = 0; i < NTREE; i++)
        free(ids[i]);
}

TestSuite(mount_write, .init = setup, .fini = teardown, .timeout = 120);

/* One string per directory: every name, every size, every content hash. */
static char *snapshot(const char *dir)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "cd '%s' && find . | LC_ALL=C sort && "
                              "find . -type f -printf '%%s %%p\\n' | LC_ALL=C sort && "
                              "find . -type f -exec sha256sum {} + | LC_ALL=C sort", dir);
    cr_assert_eq(rc, 0, "snapshot of %s failed: %s", dir, out);
    return out;
}

static void expect_same_trees(const char *when)
{
    char *a = snapshot(mnt), *b = snapshot(ref);
    cr_expect_str_eq(a, b, "%s: the mount differs from a local directory:\n--- mount\n%s"
                           "--- local\n%s", when, a, b);
    free(a);
    free(b);
}

/* Runs script in both directories: same exit status, same output, same
 * resulting tree. */
static void same(const char *script)
{
    char *out_m = NULL, *out_r = NULL;
    int rc_m = mnt_sh(&E, &out_m, "cd '%s' && { %s\n}", mnt, script);
    int rc_r = mnt_sh(&E, &out_r, "cd '%s' && { %s\n}", ref, script);
    cr_expect_eq(rc_m, rc_r, "`%s`: exit %d in the mount, %d locally (%s / %s)", script, rc_m,
                 rc_r, out_m, out_r);
    cr_expect_str_eq(out_m, out_r, "`%s`: output differs", script);
    free(out_m);
    free(out_r);
    expect_same_trees(script);
}

/* One sync of every store run to its end: 0, or 3 when it left something
 * unpushed (the server's writes held). */
static void after_a_sync(void)
{
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS sync --all --wait");
    cr_assert(rc == 0 || rc == 3, "sync --wait exited %d: %s", rc, out);
    free(out);
}

Test(mount_write, tools_behave_like_a_local_filesystem)
{
    expect_same_trees("before anything");
    same("echo hello > new.txt");
    same("echo more >> new.txt; echo again >> notes/todo.md; cat new.txt notes/todo.md");
    same("printf 'a\\nb\\n' | tee -a new.txt notes/todo.md");
    same("cp prefs.md copy.md && cp notes/todo.md notes/todo2.md && cp prefs.md notes/");
    same("cp -r notes notes-copy && ls -R notes-copy");
    same("cat > cat.txt <<'EOF'\nline 1\nline 2\nEOF\ncat cat.txt");
    same("truncate -s 5 new.txt && truncate -s 20 copy.md && truncate -s 0 cat.txt && "
         "truncate -s 3 fresh-by-truncate.txt && wc -c new.txt copy.md cat.txt");
    same("mkdir -p a/b/c && mkdir -p a/b/d && mkdir -p a/b/c && echo x > a/b/c/x.txt");
    same("mv new.txt a/moved.txt && mv notes-copy a/b/nc && mv a/b/c top && ls -R a top");
    same("echo z > z.txt && mv z.txt prefs.md && cat prefs.md");
    same("mv notes/deep notes/deeper && mv top notes/deeper/");
    same("rm copy.md && rm notes/todo2.md && ls notes");
    same("rm -r a/b/nc && rm -rf notes/deeper/top && ls -R a notes");
    same("touch -d '2020-01-02 03:04:05' doc.md && touch fresh.txt notes && "
         "stat -c '%Y %s %F' doc.md fresh.txt | cut -d' ' -f2-; stat -c %Y doc.md");
    /* what fails fails the same way */
    same("mkdir notes");
    same("rmdir notes");
    same("rm a");
    same("mv doc.md nowhere/doc.md");
    same("cat missing.md");
    same("mkdir empty && rmdir empty && ls");
    same("echo one > f1 && mv -n f1 doc.md; cat doc.md f1");
    /* a sync (a remote listing or the feed) must not undo any of it: one
     * run to its end (a sleep past the interval did not show that one ran) */
    after_a_sync();
    expect_same_trees("after a remote refresh");
}


static void expect_memory(const char *path, const char *want_id, const char *content)
{
    char file[600];
    snprintf(file, sizeof(file), "%s%s", mnt, path);
    char *got = mnt_read(file, NULL);
    cr_expect_str_eq(got ? got : "(unreadable)", content, "content of %s", path);
    free(got);
    char *id = mnt_q(&E, "SELECT memory_id FROM nodes WHERE path = '%s' AND unlinked = 0", path);
    cr_expect_str_eq(id, want_id, "%s is recorded as another memory", path);
    free(id);
    char *state = mnt_q(&E, "SELECT state FROM nodes WHERE path = '%s' AND unlinked = 0", path);
    cr_expect_str_eq(state, "1", "%s is not dirty", path);
    free(state);
    char *n = mnt_q(&E, "SELECT count(*) FROM nodes WHERE unlinked = 0 AND path LIKE '%s%%'", path);
    cr_expect_str_eq(n, "1", "%s: a second file was left", path);
    free(n);
    char *t = mnt_q(&E, "SELECT count(*) FROM tombstones WHERE memory_id = '%s'", want_id);
    cr_expect_str_eq(t, "0", "%s: its memory was recorded as deleted", path);
    free(t);
}

Test(mount_write, editor_saves_keep_the_memory)
{
    /* The cache's record of the edits is checked before any push. */
    mnt_hold_writes(&E);
    const char *doc_id = ids[3], *prefs_id = ids[2];
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "cd '%s' && sed -i 's/two/2/' doc.md && ls -A", mnt);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out, ".anthropic-memory-store\ndoc.md\nnotes\nprefs.md\n");
    free(out);
    expect_memory("/doc.md", doc_id, "one\n2\nthree\n");

    /* vim-style: write a temp file, fsync it, rename it over the target */
    char tmp[600], target[600];
    snprintf(tmp, sizeof(tmp), "%s/.prefs.md.swp", mnt);
    snprintf(target, sizeof(target), "%s/prefs.md", mnt);
    int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY, 0644);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    cr_assert_eq(write(fd, "dark mode: off\n", 15), 15);
    cr_assert_eq(fsync(fd), 0);
    cr_assert_eq(close(fd), 0);
    cr_assert_eq(rename(tmp, target), 0, "%s", strerror(errno));
    expect_memory("/prefs.md", prefs_id, "dark mode: off\n");
    cr_expect_neq(access(tmp, F_OK), 0);

    /* the identity survives a remote listing, which still has old content */
    after_a_sync();
    expect_memory("/doc.md", doc_id, "one\n2\nthree\n");
    expect_memory("/prefs.md", prefs_id, "dark mode: off\n");
}

Test(mount_write, limits_and_refusals)
{
    char *out = NULL;
    int rc;
    /* EFBIG at 102,401 bytes; the file is unchanged */
    rc = mnt_sh(&E, &out, "cd '%s' && head -c 102400 /dev/zero | tr '\\0' a > big && "
                          "wc -c < big && dd if=/dev/zero of=doc.md bs=102401 count=1 "
                          "conv=notrunc status=none", mnt);
    cr_expect_neq(rc, 0, "a 102,401-byte write succeeded");
    cr_expect(strstr(out, "102400\n") && strstr(out, "File too large"), "%s", out);
    free(out);
    const char *efbig[] = {"head -c 1 /dev/zero >> big", "truncate -s 102401 doc.md",
                           "dd if=/dev/zero of=doc.md bs=1 seek=102400 count=1 conv=notrunc"};
    for (size_t i = 0; i < sizeof(efbig) / sizeof(efbig[0]); i++) {
        rc = mnt_sh(&E, &out, "cd '%s' && %s", mnt, efbig[i]);
        cr_expect(rc != 0 && strstr(out, "File too large"), "`%s`: %d %s", efbig[i], rc, out);
        free(out);
    }
    rc = mnt_sh(&E, &out, "cd '%s' && wc -c < big && cat doc.md", mnt);
    cr_expect_str_eq(out, "102400\none\ntwo\nthree\n", "a refused write changed a file");
    free(out);

    /* names no memory path may have */
    rc = mnt_sh(&E, &out, "cd '%s' && touch \"$(printf 'ctl\\001.md')\"", mnt);
    cr_expect(rc != 0 && strstr(out, "Invalid argument"), "control character: %s", out);
    free(out);
    rc = mnt_sh(&E, &out, "cd '%s' && touch \"$(printf 'cafe\\314\\201.md')\"", mnt);
    cr_expect(rc != 0 && strstr(out, "Invalid argument"), "non-NFC: %s", out);
    free(out);
    rc = mnt_sh(&E, &out, "cd '%s' && mkdir \"$(printf 'dir\\033')\"", mnt);
    cr_expect(rc != 0 && strstr(out, "Invalid argument"), "mkdir: %s", out);
    free(out);
    char from[600], to[600];
    snprintf(from, sizeof(from), "%s/prefs.md", mnt);
    snprintf(to, sizeof(to), "%s/p\177", mnt);
    cr_expect_eq(rename(from, to), -1);
    cr_expect_eq(errno, EINVAL, "rename to a name with DEL: %s", strerror(errno));
    rc = mnt_sh(&E, &out, "cd '%s' && d=$(printf 'd%%.0s' $(seq 200)) && "
                          "mkdir -p $d/$d/$d/$d/$d && touch $d/$d/$d/$d/$d/this-name-takes-the-path-past-1024.md",
                mnt);
    cr_expect(rc != 0 && strstr(out, "File name too long"), "long path: %s", out);
    free(out);
    mnt_sh(&E, NULL, "cd '%s' && rm -r dd*", mnt);

    /* EPERM: links, modes, owners, special files, the marker */
    const char *eperm[] = {
        "ln -s doc.md link", "ln doc.md hard", "chmod 600 doc.md", "chmod 700 notes",
        "chown 12345 doc.md", "mkfifo fifo", "echo x > " MEM_MARKER_NAME,
        "echo x >> " MEM_MARKER_NAME, "truncate -s 0 " MEM_MARKER_NAME,
        "rm -f " MEM_MARKER_NAME, "mv " MEM_MARKER_NAME " m", "mv doc.md " MEM_MARKER_NAME,
        "touch " MEM_MARKER_NAME,
    };
    for (size_t i = 0; i < sizeof(eperm) / sizeof(eperm[0]); i++) {
        rc = mnt_sh(&E, &out, "cd '%s' && %s", mnt, eperm[i]);
        cr_expect(rc != 0 && strstr(out, "Operation not permitted"), "`%s`: %d %s", eperm[i],
                  rc, out);
        free(out);
    }
    rc = mnt_sh(&E, &out, "cd '%s' && setfattr -n user.x -v 1 doc.md", mnt);
    cr_expect(rc != 0 && strstr(out, "Operation not supported"), "setfattr: %s", out);
    free(out);
    /* asking for the modes and owner a file already has is fine (sed -i, cp -p) */
    rc = mnt_sh(&E, &out, "cd '%s' && chmod 644 doc.md && chmod 755 notes && "
                          "chown $(id -u):$(id -g) doc.md && cp -p doc.md doc2.md && "
                          "getfattr -n user.x doc.md 2>/dev/null; "
                          "stat -c '%%a' doc.md doc2.md notes", mnt);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out, "644\n644\n755\n");
    free(out);
    /* everything refused left no trace */
    rc = mnt_sh(&E, &out, "cd '%s' && ls -A && cat doc.md " MEM_MARKER_NAME, mnt);
    char *want = NULL;
    cr_assert(asprintf(&want, ".anthropic-memory-store\nbig\ndoc.md\ndoc2.md\nnotes\nprefs.md\n"
                              "one\ntwo\nthree\nversion 1\n%s", store) > 0);
    cr_expect_str_eq(out, want);
    free(want);
    free(out);
}

Test(mount_write, unlinked_open_file_keeps_working)
{
    /* The tombstone is checked before any sync could send the delete. */
    mnt_hold_writes(&E);
    char path[600];
    snprintf(path, sizeof(path), "%s/notes/todo.md", mnt);
    int fd = open(path, O_RDWR | O_APPEND);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    cr_assert_eq(unlink(path), 0, "%s", strerror(errno));
    cr_expect_neq(access(path, F_OK), 0);
    cr_assert_eq(write(fd, "eggs\n", 5), 5);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_expect_eq(st.st_size, 14);
    cr_expect_eq(st.st_nlink, 0);
    char buf[64] = {0};
    cr_expect_eq(pread(fd, buf, sizeof(buf) - 1, 0), 14);
    cr_expect_str_eq(buf, "buy milk\neggs\n");
    cr_expect_eq(close(fd), 0);
    char *t = mnt_q(&E, "SELECT count(*) FROM tombstones WHERE memory_id = '%s'", ids[0]);
    cr_expect_str_eq(t, "1", "the deleted memory has no tombstone");
    free(t);
    /* the directory stays, as it would locally */
    char *out = NULL;
    mnt_sh(&E, &out, "cd '%s' && find notes | LC_ALL=C sort", mnt);
    cr_expect_str_eq(out, "notes\nnotes/deep\nnotes/deep/a.md\n");
    free(out);
}
