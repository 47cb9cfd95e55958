/* test_mount_read.c - a mounted store reads exactly like the store: ls -R,
 * find, stat, cat, grep -r; the marker; read-only stores; many stores. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mnt.h"
#include "rules.h"

static struct mnt_env E;

static void setup(void)
{
    cr_assert_eq(mnt_setup(&E, NULL), 0, "cannot start memstored");
}

static void teardown(void)
{
    mnt_teardown(&E);
}

TestSuite(mount_read, .init = setup, .fini = teardown, .timeout = 120);

struct mem {
    const char *path;
    const char *content;
};

static const struct mem tree[] = {
    {"/notes/todo.md", "buy milk\n"},
    {"/notes/deep/a/b/c.md", "deep content\nsecond line\n"},
    {"/prefs.md", "dark mode: on\n"},
    {"/with space.md", "spaces are fine\n"},
    {"/caf\xc3\xa9/na\xc3\xafve.md", "unicode names\n"},
    {"/empty.md", ""},
    {"/notes/quoted \"name\".md", "quotes\n"},
};
#define NTREE (sizeof(tree) / sizeof(tree[0]))

static char *make_store(const char *name)
{
    char *id = t_create_store(&E.msd, name);
    cr_assert_not_null(id, "cannot create a store");
    for (size_t i = 0; i < NTREE; i++) {
        char *m = t_create_memory(&E.msd, id, tree[i].path, tree[i].content);
        cr_assert_not_null(m, "cannot create %s", tree[i].path);
        free(m);
    }
    return id;
}

Test(mount_read, tree_reads_like_the_store)
{
    char *id = make_store("Read Test");
    char *out = NULL;
    int rc = mnt_mount(&E, id, "read", false, "", &out);
    cr_assert_eq(rc, 0, "mount failed: %s", out);
    free(out);
    char root[400];
    snprintf(root, sizeof(root), "%s/read", E.mnt);
    cr_assert(mnt_is_mounted(root), "%s is not a mount point", root);

    /* Every memory: cat gives the exact bytes, stat the exact size. */
    for (size_t i = 0; i < NTREE; i++) {
        char file[1200];
        snprintf(file, sizeof(file), "%s%s", root, tree[i].path);
        size_t len = 0;
        char *got = mnt_read(file, &len);
        cr_assert_not_null(got, "cannot read %s", file);
        cr_expect_eq(len, strlen(tree[i].content), "size of %s", tree[i].path);
        cr_expect_str_eq(got, tree[i].content, "content of %s", tree[i].path);
        free(got);
        struct stat st;
        cr_assert_eq(stat(file, &st), 0);
        cr_expect_eq((size_t)st.st_size, strlen(tree[i].content), "stat size of %s",
                     tree[i].path);
        cr_expect(S_ISREG(st.st_mode));
        cr_expect_eq(st.st_mode & 0777, 0644);
    }

    /* find lists exactly the files (plus the marker) and directories. */
    rc = mnt_sh(&E, &out, "cd '%s' && find . -type f | LC_ALL=C sort", root);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out, "./.anthropic-memory-store\n"
                          "./caf\xc3\xa9/na\xc3\xafve.md\n"
                          "./empty.md\n"
                          "./notes/deep/a/b/c.md\n"
                          "./notes/quoted \"name\".md\n"
                          "./notes/todo.md\n"
                          "./prefs.md\n"
                          "./with space.md\n");
    free(out);
    rc = mnt_sh(&E, &out, "cd '%s' && find . -type d | LC_ALL=C sort", root);
    cr_expect_str_eq(out, ".\n./caf\xc3\xa9\n./notes\n./notes/deep\n./notes/deep/a\n"
                          "./notes/deep/a/b\n");
    free(out);

    /* ls -R walks the same tree; grep -r finds content. */
    rc = mnt_sh(&E, &out, "cd '%s' && ls -R | grep -c '\\.md$'", root);
    cr_expect_str_eq(out, "7\n");
    free(out);
    rc = mnt_sh(&E, &out, "cd '%s' && grep -r -l 'line' . | LC_ALL=C sort", root);
    cr_expect_eq(rc, 0);
    cr_expect_str_eq(out, "./notes/deep/a/b/c.md\n");
    free(out);

    /* The marker: exact bytes, immutable, even for root. */
    char marker[600];
    snprintf(marker, sizeof(marker), "%s/.anthropic-memory-store", root);
    char *m = mnt_read(marker, NULL);
    char *want = rules_marker_content(id);
    cr_assert_not_null(m);
    cr_expect_str_eq(m, want);
    free(m);
    free(want);
    rc = mnt_sh(&E, &out, "echo x > '%s'", marker);
    cr_expect_neq(rc, 0, "writing the marker succeeded");
    free(out);
    rc = mnt_sh(&E, &out, "rm -f '%s'", marker);
    cr_expect_neq(rc, 0, "removing the marker succeeded");
    free(out);
    cr_expect_eq(access(marker, F_OK), 0);

    /* Directory listing of a missing name is ENOENT. */
    struct stat st;
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/nope.md", root);
    cr_expect_eq(stat(missing, &st), -1);
    free(id);
}

Test(mount_read, large_file_reads_whole)
{
    char *id = t_create_store(&E.msd, "Large");
    cr_assert_not_null(id);
    /* 102,400 bytes: the largest memory, multi-byte characters included. */
    char *big = malloc(MEM_CONTENT_MAX_BYTES + 1);
    for (size_t i = 0; i < MEM_CONTENT_MAX_BYTES; i++)
        big[i] = (char)('a' + i % 26);
    memcpy(big + 1000, "\xc3\xa9", 2);
    big[MEM_CONTENT_MAX_BYTES] = '\0';
    char *mid = t_create_memory(&E.msd, id, "/big.txt", big);
    cr_assert_not_null(mid);
    char *out = NULL;
    cr_assert_eq(mnt_mount(&E, id, "large", false, "", &out), 0, "%s", out);
    free(out);
    char file[400];
    snprintf(file, sizeof(file), "%s/large/big.txt", E.mnt);
    size_t len = 0;
    char *got = mnt_read(file, &len);
    cr_assert_eq(len, (size_t)MEM_CONTENT_MAX_BYTES);
    cr_expect(memcmp(got, big, len) == 0);
    free(got);
    free(big);
    free(mid);
    free(id);
}

Test(mount_read, eight_stores_one_read_only)
{
    char *ids[8];
    char cmd[8192] = "$MFS mount --cache-dir \"$CACHE\" --sync-interval 5";
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof(name), "Store %d", i);
        ids[i] = t_create_store(&E.msd, name);
        cr_assert_not_null(ids[i]);
        char *m = t_create_memory(&E.msd, ids[i], "/id.txt", ids[i]);
        free(m);
        size_t n = strlen(cmd);
        snprintf(cmd + n, sizeof(cmd) - n, " --store %s:%s/s%d%s", ids[i], E.mnt, i,
                 i == 7 ? ":ro" : "");
    }
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "%s", cmd);
    cr_assert_eq(rc, 0, "mount of 8 stores failed: %s", out);
    free(out);
    for (int i = 0; i < 8; i++) {
        char file[400];
        snprintf(file, sizeof(file), "%s/s%d/id.txt", E.mnt, i);
        char *got = mnt_read(file, NULL);
        cr_assert_not_null(got, "cannot read %s", file);
        cr_expect_str_eq(got, ids[i]);
        free(got);
    }
    /* The read-only one: kernel ro flag, modes without write bits, and
     * every writer (root included) gets EROFS. */
    rc = mnt_sh(&E, &out, "grep ' %s/s7 ' /proc/self/mountinfo", E.mnt);
    cr_expect_eq(rc, 0);
    cr_expect(strstr(out, " ro,") || strstr(out, " ro "), "no ro flag: %s", out);
    free(out);
    rc = mnt_sh(&E, &out, "echo x >> %s/s7/id.txt", E.mnt);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "Read-only file system"), "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "touch %s/s7/new.txt", E.mnt);
    cr_expect(strstr(out, "Read-only file system"), "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "stat -c %%a %s/s7/id.txt", E.mnt);
    cr_expect_str_eq(out, "444\n");
    free(out);

    /* A ninth store is refused before anything is mounted. */
    size_t n = strlen(cmd);
    snprintf(cmd + n, sizeof(cmd) - n, " --store memstore_ninth:%s/s8", E.mnt);
    rc = mnt_sh(&E, &out, "%s", cmd);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "at most 8"), "%s", out);
    free(out);
    /* The eight stay mounted, and nothing more. */
    rc = mnt_sh(&E, &out, "grep -c ' %s/s[0-9] ' /proc/self/mountinfo", E.mnt);
    cr_expect_str_eq(out, "8\n", "mounts below %s after the refusal", E.mnt);
    free(out);
    char s8[400];
    snprintf(s8, sizeof(s8), "%s/s8", E.mnt);
    cr_expect_neq(access(s8, F_OK), 0, "the ninth mount path was created");
    for (int i = 0; i < 8; i++)
        free(ids[i]);
}

Test(mount_read, session_file_with_nine_stores_is_refused)
{
    char file[400];
    snprintf(file, sizeof(file), "%s/session.json", E.root);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"id\":\"sesn_1\",\"resources\":[");
    for (int i = 0; i < 9; i++)
        fprintf(f, "%s{\"type\":\"memory_store\",\"memory_store_id\":\"memstore_%d\","
                   "\"mount_path\":\"%s/m%d\",\"access\":\"read_write\"}",
                i ? "," : "", i, E.mnt, i);
    fprintf(f, "]}");
    fclose(f);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --session '%s' --cache-dir \"$CACHE\"", file);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "8"), "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "ls -A '%s' | wc -l", E.mnt);
    cr_expect_str_eq(out, "0\n", "something was left in the mount dir");
    free(out);
}

Test(mount_read, session_file_mounts_with_its_mount_paths)
{
    char *rw = make_store("Session RW");
    char *ro = make_store("Session RO");
    char file[400];
    snprintf(file, sizeof(file), "%s/session.json", E.root);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"id\":\"sesn_1\",\"status\":\"running\",\"resources\":["
               "{\"type\":\"memory_store\",\"memory_store_id\":\"%s\",\"access\":\"read_write\","
               "\"name\":\"Session RW\",\"mount_path\":\"%s/memory/session-rw\"},"
               "{\"type\":\"file\",\"file_id\":\"file_1\"},"
               "{\"type\":\"memory_store\",\"memory_store_id\":\"%s\",\"access\":\"read_only\","
               "\"name\":\"Session RO\",\"mount_path\":\"%s/memory/session-ro\"}]}",
            rw, E.mnt, ro, E.mnt);
    fclose(f);
    char *out = NULL;
    int rc = mnt_sh(&E, &out, "$MFS mount --session '%s' --cache-dir \"$CACHE\"", file);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "cat $MNT/memory/session-rw/prefs.md $MNT/memory/session-ro/prefs.md");
    cr_expect_str_eq(out, "dark mode: on\ndark mode: on\n");
    free(out);
    rc = mnt_sh(&E, &out, "touch $MNT/memory/session-ro/x");
    cr_expect(strstr(out, "Read-only file system"), "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "$MFS unmount --all");
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    rc = mnt_sh(&E, &out, "ls -A $MNT");
    cr_expect_str_eq(out, "", "directories left after unmount: %s", out);
    free(out);
    free(rw);
    free(ro);
}
