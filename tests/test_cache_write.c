/* test_cache_write.c - the cache's local-change API (cache/write.c) and
 * what the sync push reads from it (cache/pending.c), without a mount:
 * the state model, identity through renames, tombstones, name rules,
 * EFBIG, read-only stores, and that all of it survives cache_open. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "rules.h"

static char dir[64];
static struct cache *C;
static uint64_t root, ro_root;
#define ST "memstore_w"
#define RO "memstore_ro"

/* Remote memories present at the start (synced: memory ids, baselines). */
static char sha_a[65], sha_b[65];
static struct cache_remote remote[3];
/* updated_at of mem_a as the listing gives it: 2026-11-29T20:29:27.045Z */
#define UPDATED_A (1795984167045LL * 1000000LL)

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mfs-cw-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(cache_open(dir, &C), 0);
    cr_assert_eq(cache_store_attach(C, ST, false, &root), 0);
    cr_assert_eq(cache_store_attach(C, RO, true, &ro_root), 0);
    sha256_hex("aaa", 3, sha_a);
    sha256_hex("bb", 2, sha_b);
    cr_assert_eq(cache_blob_put(C, sha_a, "aaa", 3), 0);
    cr_assert_eq(cache_blob_put(C, sha_b, "bb", 2), 0);
    remote[0] = (struct cache_remote){"/a.md", "mem_a", sha_a, 3, UPDATED_A};
    remote[1] = (struct cache_remote){"/d/b.md", "mem_b", sha_b, 2, UPDATED_A + 1000};
    remote[2] = (struct cache_remote){"/d/e/c.md", "mem_c", sha_b, 2, 0};
    cr_assert_eq(cache_apply_remote(C, ST, remote, 3, NULL), 0);
    cr_assert_eq(cache_apply_remote(C, RO, remote, 1, NULL), 0);
}

static void teardown(void)
{
    cache_close(&C);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(cache_write, .init = setup, .fini = teardown, .timeout = 30);

/* The node at a path ("/x/y"), walking from root; -ENOENT if absent. */
static int at(uint64_t top, const char *path, struct cnode *out)
{
    char *copy = strdup(path), *save = NULL;
    uint64_t cur = top;
    int rc = cache_getattr(C, top, out);
    for (char *seg = strtok_r(copy, "/", &save); !rc && seg; seg = strtok_r(NULL, "/", &save)) {
        cnode_clear(out);
        rc = cache_lookup(C, cur, seg, out);
        cur = out->ino;
    }
    free(copy);
    return rc;
}

static uint64_t ino_of(const char *path)
{
    struct cnode n;
    cr_assert_eq(at(root, path, &n), 0, "%s is missing", path);
    uint64_t ino = n.ino;
    cnode_clear(&n);
    return ino;
}

static int count_fn(void *arg, const struct cnode *n)
{
    (void)n;
    (*(int *)arg)++;
    return 0;
}

static int dirty_count(void)
{
    int k = 0;
    cr_assert_eq(cache_dirty_files(C, ST, false, count_fn, &k), 0);
    return k;
}

Test(cache_write, create_file_and_dir)
{
    struct cnode n;
    cr_assert_eq(cache_create(C, root, "new.md", false, 42, &n), 0);
    cr_expect_eq(n.state, CNODE_DIRTY);
    cr_expect_str_eq(n.memory_id, "");
    cr_expect_str_eq(n.path, "/new.md");
    cr_expect_eq(n.size, 0);
    cr_expect_eq(n.mtime_ns, 42);
    char empty[65];
    sha256_hex("", 0, empty);
    cr_expect_str_eq(n.sha, empty);
    cr_expect(n.has_content, "the empty blob was not stored");
    cnode_clear(&n);
    cr_assert_eq(cache_create(C, ino_of("/d"), "sub", true, 1, &n), 0);
    cr_expect(n.is_dir);
    cr_expect_eq(n.state, 1, "a mkdir directory is state 1");
    cr_expect_str_eq(n.path, "/d/sub");
    cnode_clear(&n);
    cr_expect_eq(cache_create(C, root, "new.md", false, 1, NULL), -EEXIST);
    cr_expect_eq(cache_create(C, ino_of("/a.md"), "x", false, 1, NULL), -ENOTDIR);
    cr_expect_eq(dirty_count(), 1, "only the new file is dirty");
}

Test(cache_write, names_are_checked)
{
    cr_expect_eq(cache_create(C, root, "bad\x01name", false, 1, NULL), -EINVAL);
    cr_expect_eq(cache_create(C, root, "cafe\xcc\x81.md", false, 1, NULL), -EINVAL,
                 "a non-NFC name was accepted");
    cr_expect_eq(cache_create(C, root, "..", true, 1, NULL), -EINVAL);
    cr_expect_eq(cache_create(C, root, MEM_MARKER_NAME, false, 1, NULL), -EPERM);
    cr_expect_eq(cache_create(C, root, MEM_MARKER_NAME, true, 1, NULL), -EPERM);
    /* the marker name below the root is an ordinary name */
    cr_expect_eq(cache_create(C, ino_of("/d"), MEM_MARKER_NAME, false, 1, NULL), 0);
    char longname[1100];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    cr_expect_eq(cache_create(C, root, longname, false, 1, NULL), -ENAMETOOLONG);
    longname[1023] = '\0'; /* "/" + 1023 bytes: a memory path, but no file name */
    cr_expect_eq(cache_create(C, root, longname, false, 1, NULL), -ENAMETOOLONG);
    longname[256] = '\0'; /* one byte past NAME_MAX */
    cr_expect_eq(cache_create(C, root, longname, false, 1, NULL), -ENAMETOOLONG);
    cr_expect_eq(cache_create(C, root, longname, true, 1, NULL), -ENAMETOOLONG);
    cr_expect_eq(cache_rename(C, ino_of("/d"), MEM_MARKER_NAME, root, longname, 0),
                 -ENAMETOOLONG);
    longname[255] = '\0'; /* NAME_MAX */
    cr_expect_eq(cache_create(C, root, longname, false, 1, NULL), 0);
    /* 1,024 bytes in names of at most 255 */
    char seg[256], path_dir[8];
    memset(seg, 'y', 250);
    seg[250] = '\0';
    uint64_t deep = root;
    for (int i = 0; i < 3; i++) { /* "/y{250}" x 3 = 753 bytes */
        struct cnode n;
        snprintf(path_dir, sizeof(path_dir), "%d", i);
        seg[0] = path_dir[0];
        cr_assert_eq(cache_create(C, deep, seg, true, 1, &n), 0, "level %d", i);
        deep = n.ino;
        cnode_clear(&n);
    }
    char name[300];
    memset(name, 'z', 270);
    name[270] = '\0'; /* "/" + 270 bytes would fit the path, but not NAME_MAX */
    cr_expect_eq(cache_create(C, deep, name, false, 1, NULL), -ENAMETOOLONG);
    name[255] = '\0';
    cr_expect_eq(cache_create(C, deep, name, false, 1, NULL), 0, "1,009 bytes in all");
    /* 20 segments for a file; a directory must leave room for one more */
    uint64_t cur = root;
    for (int i = 0; i < 19; i++) {
        struct cnode n;
        cr_assert_eq(cache_create(C, cur, "s", true, 1, &n), 0, "depth %d", i + 1);
        cur = n.ino;
        cnode_clear(&n);
    }
    cr_expect_eq(cache_create(C, cur, "s", true, 1, NULL), -EINVAL);
    cr_expect_eq(cache_create(C, cur, "f.md", false, 1, NULL), 0);
}

Test(cache_write, content_and_efbig)
{
    uint64_t a = ino_of("/a.md");
    char sha[65];
    cr_assert_eq(cache_set_content(C, a, "new", 3, 7, sha), 0);
    struct cnode n;
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.state, CNODE_DIRTY);
    cr_expect_eq(n.size, 3);
    cr_expect_eq(n.mtime_ns, 7);
    cr_expect_str_eq(n.sha, sha);
    cr_expect_str_eq(n.memory_id, "mem_a", "a write changed the identity");
    cr_expect_str_eq(n.base_sha, sha_a, "a write changed the baseline");
    cnode_clear(&n);
    char *big = calloc(1, MEM_CONTENT_MAX_BYTES + 1);
    cr_expect_eq(cache_set_content(C, a, big, MEM_CONTENT_MAX_BYTES + 1, 8, NULL), -EFBIG);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.size, 3, "EFBIG changed the file");
    cr_expect_str_eq(n.sha, sha);
    cnode_clear(&n);
    cr_expect_eq(cache_set_content(C, a, big, MEM_CONTENT_MAX_BYTES, 8, NULL), 0);
    free(big);
    char *buf = NULL;
    size_t len = 0;
    /* back to the baseline content: clean again */
    cr_assert_eq(cache_set_content(C, a, "aaa", 3, 9, NULL), 0);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.state, CNODE_CLEAN);
    cr_assert_eq(cache_blob_get(C, n.sha, &buf, &len), 0);
    cr_expect_eq(len, 3);
    free(buf);
    cnode_clear(&n);
    cr_expect_eq(cache_set_content(C, ino_of("/d"), "x", 1, 1, NULL), -EISDIR);
    cr_assert_eq(cache_mark_dirty(C, a), 0);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.state, CNODE_DIRTY);
    cnode_clear(&n);
    int64_t m = 12345, t = 2208988800LL * 1000000000LL; /* 2040-01-01 */
    cr_assert_eq(cache_set_times(C, a, NULL, &m), 0);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.mtime_ns, 12345);
    int64_t atime_before = n.atime_ns;
    cnode_clear(&n);
    cr_assert_eq(cache_set_times(C, a, &t, NULL), 0);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.mtime_ns, 12345, "setting the atime left the mtime alone");
    cr_expect_eq(n.atime_ns, t, "the atime is stored apart from the mtime");
    cr_expect_neq(atime_before, t);
    cnode_clear(&n);
}

Test(cache_write, rename_file_keeps_identity)
{
    uint64_t a = ino_of("/a.md");
    uint64_t d = ino_of("/d");
    cr_assert_eq(cache_rename(C, root, "a.md", d, "moved.md", 0), 0);
    struct cnode n;
    cr_assert_eq(at(root, "/d/moved.md", &n), 0);
    cr_expect_eq(n.ino, a, "a rename changed the inode");
    cr_expect_str_eq(n.memory_id, "mem_a");
    cr_expect_str_eq(n.base_path, "/a.md");
    cr_expect_eq(n.state, CNODE_DIRTY);
    cnode_clear(&n);
    cr_expect_eq(at(root, "/a.md", &n), -ENOENT);
    /* and back: at its baseline again, so clean */
    cr_assert_eq(cache_rename(C, d, "moved.md", root, "a.md", 0), 0);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.state, CNODE_CLEAN);
    cnode_clear(&n);
    cr_expect_eq(cache_rename(C, root, "a.md", d, "b.md", CACHE_RENAME_NOREPLACE), -EEXIST);
    cr_expect_eq(cache_rename(C, root, "a.md", root, "d", 0), -EISDIR);
    cr_expect_eq(cache_rename(C, root, "d", root, "a.md", 0), -ENOTDIR);
    cr_expect_eq(cache_rename(C, root, "a.md", root, MEM_MARKER_NAME, 0), -EPERM);
    cr_expect_eq(cache_rename(C, root, "a.md", root, "x\x7f", 0), -EINVAL);
    cr_expect_eq(cache_rename(C, root, "nope", root, "x", 0), -ENOENT);
    cr_expect_eq(cache_rename(C, root, "a.md", root, "x", 4), -EINVAL);
    cr_expect_eq(cache_rename(C, root, "a.md", root, "a.md", 0), 0);
}

Test(cache_write, rename_over_target_takes_its_memory)
{
    /* An editor's save: a new temp file renamed over the memory. */
    struct cnode tmp, n;
    uint64_t d = ino_of("/d");
    uint64_t old_b = ino_of("/d/b.md");
    cr_assert_eq(cache_create(C, d, ".b.md.swp", false, 1, &tmp), 0);
    cr_assert_eq(cache_set_content(C, tmp.ino, "saved", 5, 2, NULL), 0);
    cr_assert_eq(cache_rename(C, d, ".b.md.swp", d, "b.md", 0), 0);
    cr_assert_eq(at(root, "/d/b.md", &n), 0);
    cr_expect_eq(n.ino, tmp.ino);
    cr_expect_str_eq(n.memory_id, "mem_b", "the save did not keep the memory");
    cr_expect_str_eq(n.base_sha, sha_b);
    cr_expect_str_eq(n.base_path, "/d/b.md");
    cr_expect_eq(n.state, CNODE_DIRTY);
    cr_expect_eq(n.size, 5);
    cnode_clear(&n);
    cnode_clear(&tmp);
    cr_assert_eq(cache_getattr(C, old_b, &n), 0, "the replaced inode must stay readable");
    cr_expect(n.unlinked);
    cr_expect_str_eq(n.memory_id, "");
    cnode_clear(&n);
    struct cache_tombstone *t;
    size_t k;
    cr_assert_eq(cache_tombstones(C, ST, &t, &k), 0);
    cr_expect_eq(k, 0, "a save left a tombstone");
    cache_tombstones_free(t, k);

    /* mv of one memory over another: the moved one's memory is deleted. */
    cr_assert_eq(cache_rename(C, root, "a.md", d, "b.md", 0), 0);
    cr_assert_eq(at(root, "/d/b.md", &n), 0);
    cr_expect_str_eq(n.memory_id, "mem_b");
    cnode_clear(&n);
    cr_assert_eq(cache_tombstones(C, ST, &t, &k), 0);
    cr_assert_eq(k, 1);
    cr_expect_str_eq(t[0].memory_id, "mem_a");
    cr_expect_str_eq(t[0].base_sha, sha_a);
    cr_expect_str_eq(t[0].base_path, "/a.md");
    cache_tombstones_free(t, k);
}

Test(cache_write, rename_directory_moves_subtree)
{
    uint64_t c = ino_of("/d/e/c.md");
    cr_assert_eq(cache_rename(C, root, "d", root, "z", 0), 0);
    struct cnode n;
    cr_assert_eq(at(root, "/z/e/c.md", &n), 0);
    cr_expect_eq(n.ino, c);
    cr_expect_str_eq(n.path, "/z/e/c.md");
    cr_expect_str_eq(n.memory_id, "mem_c");
    cr_expect_eq(n.state, CNODE_DIRTY);
    cnode_clear(&n);
    cr_assert_eq(at(root, "/z/e", &n), 0);
    cr_expect_str_eq(n.path, "/z/e");
    cnode_clear(&n);
    cr_expect_eq(dirty_count(), 2);
    cr_expect_eq(cache_rename(C, root, "z", ino_of("/z/e"), "loop", 0), -EINVAL);
    cr_expect_eq(cache_rename(C, root, "z", ino_of("/z"), "loop", 0), -EINVAL);
    /* over a non-empty directory: ENOTEMPTY; over an empty one: replaces it */
    cr_assert_eq(cache_create(C, root, "full", true, 1, NULL), 0);
    cr_assert_eq(cache_create(C, ino_of("/full"), "f", false, 1, NULL), 0);
    cr_expect_eq(cache_rename(C, root, "z", root, "full", 0), -ENOTEMPTY);
    cr_assert_eq(cache_create(C, root, "empty", true, 1, NULL), 0);
    cr_expect_eq(cache_rename(C, root, "z", root, "empty", 0), 0);
    cr_expect_eq(at(root, "/empty/e/c.md", &n), 0);
    cnode_clear(&n);
    /* a subtree that would get too deep is refused as a whole */
    uint64_t cur = root;
    for (int i = 0; i < 18; i++) {
        cr_assert_eq(cache_create(C, cur, "q", true, 1, &n), 0);
        cur = n.ino;
        cnode_clear(&n);
    }
    cr_expect_eq(cache_rename(C, root, "empty", cur, "e", 0), -EINVAL);
    cr_expect_eq(at(root, "/empty/e/c.md", &n), 0, "a refused rename moved something");
    cnode_clear(&n);
    /* a directory below must keep room for one file: an empty one at 19
     * segments may not go one deeper (it would hold nothing) */
    cr_assert_eq(cache_create(C, root, "holder", true, 1, &n), 0);
    uint64_t h = n.ino;
    cnode_clear(&n);
    cr_assert_eq(cache_create(C, h, "w", true, 1, NULL), 0); /* /holder/w: 2 segments */
    cr_expect_eq(cache_rename(C, root, "holder", cur, "h", 0), -EINVAL,
                 "/q x18/h/w would be a directory of 20 segments");
    cr_expect_eq(at(root, "/holder/w", &n), 0);
    cnode_clear(&n);
}

Test(cache_write, unlink_and_rmdir)
{
    uint64_t a = ino_of("/a.md");
    cr_assert_eq(cache_create(C, root, "local.md", false, 1, NULL), 0);
    uint64_t ino = 0;
    cr_expect_eq(cache_unlink(C, root, "d", false, NULL), -EISDIR);
    cr_expect_eq(cache_unlink(C, root, "a.md", true, NULL), -ENOTDIR);
    cr_expect_eq(cache_unlink(C, root, "d", true, NULL), -ENOTEMPTY);
    cr_expect_eq(cache_unlink(C, root, MEM_MARKER_NAME, false, NULL), -EPERM);
    cr_assert_eq(cache_unlink(C, root, "a.md", false, &ino), 0);
    cr_expect_eq(ino, a);
    cr_assert_eq(cache_unlink(C, root, "local.md", false, NULL), 0);
    struct cnode n;
    cr_assert_eq(cache_getattr(C, a, &n), 0, "an unlinked inode must stay readable");
    cr_expect(n.unlinked);
    cnode_clear(&n);
    cr_expect_eq(cache_lookup(C, root, "a.md", &n), -ENOENT);
    struct cache_tombstone *t;
    size_t k;
    cr_assert_eq(cache_tombstones(C, ST, &t, &k), 0);
    cr_assert_eq(k, 1, "only the synced file leaves a tombstone");
    cr_expect_str_eq(t[0].memory_id, "mem_a");
    cache_tombstones_free(t, k);
    /* /d/e emptied by an rm stays, as on a local filesystem, even after the
     * remote listing (which still has the deleted memory) is applied */
    uint64_t e = ino_of("/d/e");
    cr_assert_eq(cache_unlink(C, e, "c.md", false, NULL), 0);
    cr_assert_eq(cache_apply_remote(C, ST, remote, 3, NULL), 0);
    cr_assert_eq(at(root, "/d/e", &n), 0, "an emptied directory disappeared");
    cnode_clear(&n);
    cr_expect_eq(at(root, "/a.md", &n), -ENOENT, "a deleted memory was resurrected");
    cr_expect_eq(at(root, "/d/e/c.md", &n), -ENOENT, "a deleted memory was resurrected");
    cr_assert_eq(cache_unlink(C, ino_of("/d"), "e", true, NULL), 0);
    cr_expect_eq(at(root, "/d/e", &n), -ENOENT);
}

Test(cache_write, remote_listing_leaves_local_changes)
{
    uint64_t a = ino_of("/a.md");
    cr_assert_eq(cache_set_content(C, a, "mine", 4, 1, NULL), 0);
    cr_assert_eq(cache_rename(C, root, "d", root, "dd", 0), 0);
    char sha_new[65];
    sha256_hex("theirs", 6, sha_new);
    struct cache_remote r2[3] = {remote[0], remote[1], remote[2]};
    r2[0].sha = sha_new;
    cr_assert_eq(cache_apply_remote(C, ST, r2, 3, NULL), 0);
    struct cnode n;
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.size, 4, "a remote listing overwrote a dirty file");
    cnode_clear(&n);
    cr_expect_eq(at(root, "/d/b.md", &n), -ENOENT, "a moved memory came back at its old path");
    cr_expect_eq(at(root, "/dd/b.md", &n), 0);
    cnode_clear(&n);
}

/* A file's mtime is its memory's updated_at when the cache takes the
 * remote version, and the local write time once edited. */
Test(cache_write, mtime_is_the_memory_updated_at)
{
    struct cnode n;
    cr_assert_eq(at(root, "/a.md", &n), 0);
    cr_expect_eq(n.mtime_ns, UPDATED_A, "mtime %lld is not the memory's updated_at",
                 (long long)n.mtime_ns);
    uint64_t a = n.ino;
    cnode_clear(&n);
    cr_assert_eq(at(root, "/d/b.md", &n), 0);
    cr_expect_eq(n.mtime_ns, UPDATED_A + 1000);
    cnode_clear(&n);

    /* The memory changed remotely: its new updated_at. */
    char sha_new[65];
    sha256_hex("theirs", 6, sha_new);
    struct cache_remote r2[3] = {remote[0], remote[1], remote[2]};
    r2[0].sha = sha_new;
    r2[0].size = 6;
    r2[0].mtime_ns = UPDATED_A + 5000000000LL;
    cr_assert_eq(cache_apply_remote(C, ST, r2, 3, NULL), 0);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.mtime_ns, UPDATED_A + 5000000000LL);
    cnode_clear(&n);

    /* The same listing again changes nothing. */
    cr_assert_eq(cache_apply_remote(C, ST, r2, 3, NULL), 0);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.mtime_ns, UPDATED_A + 5000000000LL);
    cnode_clear(&n);

    /* Edited locally: the write time, which a listing leaves alone. */
    cr_assert_eq(cache_set_content(C, a, "mine", 4, 42, NULL), 0);
    cr_assert_eq(cache_apply_remote(C, ST, r2, 3, NULL), 0);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.mtime_ns, 42);
    cnode_clear(&n);
}

Test(cache_write, read_only_store_refuses_everything)
{
    struct cnode n;
    cr_assert_eq(at(ro_root, "/a.md", &n), 0);
    uint64_t a = n.ino;
    cnode_clear(&n);
    cr_expect_eq(cache_create(C, ro_root, "x", false, 1, NULL), -EROFS);
    cr_expect_eq(cache_create(C, ro_root, "x", true, 1, NULL), -EROFS);
    cr_expect_eq(cache_set_content(C, a, "x", 1, 1, NULL), -EROFS);
    int64_t one = 1;
    cr_expect_eq(cache_set_times(C, a, &one, &one), -EROFS);
    cr_expect_eq(cache_mark_dirty(C, a), -EROFS);
    cr_expect_eq(cache_rename(C, ro_root, "a.md", ro_root, "b.md", 0), -EROFS);
    cr_expect_eq(cache_unlink(C, ro_root, "a.md", false, NULL), -EROFS);
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect_eq(n.state, CNODE_CLEAN);
    cr_expect_eq(n.size, 3);
    cnode_clear(&n);
    int k = 0;
    cr_assert_eq(cache_dirty_files(C, RO, false, count_fn, &k), 0);
    cr_expect_eq(k, 0);
    /* and across stores: EXDEV */
    cr_expect_eq(cache_rename(C, root, "a.md", ro_root, "a2.md", 0), -EROFS);
}

static int first_dirty(void *arg, const struct cnode *n)
{
    struct cnode *out = arg;
    out->ino = n->ino;
    snprintf(out->sha, sizeof(out->sha), "%s", n->sha);
    snprintf(out->memory_id, sizeof(out->memory_id), "%s", n->memory_id);
    out->path = strdup(n->path);
    out->base_path = strdup(n->base_path);
    return 1;
}

Test(cache_write, sync_side_api)
{
    struct cnode f;
    cr_assert_eq(cache_create(C, root, "new.md", false, 1, &f), 0);
    cr_assert_eq(cache_set_content(C, f.ino, "hi", 2, 1, NULL), 0);
    cnode_clear(&f);
    struct cnode got = {0};
    cr_assert_eq(cache_dirty_files(C, ST, false, first_dirty, &got), 1);
    cr_expect_str_eq(got.path, "/new.md");
    cr_expect_str_eq(got.memory_id, "");
    cr_expect_str_eq(got.base_path, "");
    /* pushed as a new memory: clean with its new baseline */
    cr_assert_eq(cache_mark_synced(C, got.ino, "mem_new", got.sha, got.path), 0);
    struct cnode n;
    cr_assert_eq(cache_getattr(C, got.ino, &n), 0);
    cr_expect_eq(n.state, CNODE_CLEAN);
    cr_expect_str_eq(n.memory_id, "mem_new");
    cr_expect_str_eq(n.base_sha, got.sha);
    cr_expect_str_eq(n.base_path, "/new.md");
    cnode_clear(&n);
    /* a write that landed while the push was in flight keeps it dirty */
    char old_sha[65];
    snprintf(old_sha, sizeof(old_sha), "%s", got.sha);
    cr_assert_eq(cache_set_content(C, got.ino, "later", 5, 2, NULL), 0);
    cr_assert_eq(cache_mark_synced(C, got.ino, "mem_new", old_sha, "/new.md"), 0);
    cr_assert_eq(cache_getattr(C, got.ino, &n), 0);
    cr_expect_eq(n.state, CNODE_DIRTY);
    cr_expect_str_eq(n.base_sha, old_sha);
    cnode_clear(&n);
    cnode_clear(&got);
    cr_expect_eq(cache_mark_synced(C, 999999, "m", old_sha, "/x"), -ENOENT);
    /* tombstones: listed, then dropped */
    cr_assert_eq(cache_unlink(C, root, "a.md", false, NULL), 0);
    struct cache_tombstone *t;
    size_t k;
    cr_assert_eq(cache_tombstones(C, ST, &t, &k), 0);
    cr_assert_eq(k, 1);
    cache_tombstones_free(t, k);
    cr_assert_eq(cache_tombstone_drop(C, ST, "mem_a"), 0);
    cr_assert_eq(cache_tombstones(C, ST, &t, &k), 0);
    cr_expect_eq(k, 0);
    cache_tombstones_free(t, k);
}

Test(cache_write, changes_survive_reopen)
{
    struct cnode f;
    cr_assert_eq(cache_create(C, root, "kept.md", false, 1, &f), 0);
    cr_assert_eq(cache_set_content(C, f.ino, "durable", 7, 5, NULL), 0);
    uint64_t a = ino_of("/a.md");
    cr_assert_eq(cache_unlink(C, root, "a.md", false, NULL), 0);
    cache_close(&C);
    cr_assert_eq(cache_open(dir, &C), 0);
    /* The next mount of the store attaches it again. */
    uint64_t again = 0;
    cr_assert_eq(cache_store_attach(C, ST, false, &again), 0);
    cr_expect_eq(again, root);
    struct cnode n;
    cr_assert_eq(at(root, "/kept.md", &n), 0);
    cr_expect_eq(n.ino, f.ino);
    cr_expect_eq(n.state, CNODE_DIRTY);
    char *buf;
    size_t len;
    cr_assert_eq(cache_blob_get(C, n.sha, &buf, &len), 0);
    cr_expect_eq(len, 7);
    cr_expect(memcmp(buf, "durable", 7) == 0);
    free(buf);
    cnode_clear(&n);
    cnode_clear(&f);
    cr_expect_eq(cache_getattr(C, a, &n), -ENOENT, "unlinked nodes outlived the store's next attach");
    struct cache_tombstone *t;
    size_t k;
    cr_assert_eq(cache_tombstones(C, ST, &t, &k), 0);
    cr_expect_eq(k, 1, "a tombstone was lost");
    cache_tombstones_free(t, k);
}
