/* test_cache_history.c - what the cache knows for history and recovery
 * (cache/history.c), without a mount: the version a file's baseline is
 * (newest note wins, a note for other content says nothing about the
 * file), the state attribute (clean, dirty, refused, conflict), lookups
 * by path and by memory, pending deletions, conflict records by id and
 * their removal, and the pruning of versions no file has any more. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"

static char dir[64];
static struct cache *C;
static uint64_t root;
static char sha_a[65], sha_b[65];
#define ST "memstore_h"
#define T0 (1795984167045LL * 1000000LL)

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mfs-ch-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(cache_open(dir, &C), 0);
    cr_assert_eq(cache_store_attach(C, ST, false, &root), 0);
    sha256_hex("aaa", 3, sha_a);
    sha256_hex("bb", 2, sha_b);
    cr_assert_eq(cache_blob_put(C, sha_a, "aaa", 3), 0);
    cr_assert_eq(cache_blob_put(C, sha_b, "bb", 2), 0);
    struct cache_remote r[2] = {
        {"/a.md", "mem_a", sha_a, 3, T0},
        {"/d/b.md", "mem_b", sha_b, 2, T0},
    };
    cr_assert_eq(cache_apply_remote(C, ST, r, 2, NULL), 0);
}

static void teardown(void)
{
    cache_close(&C);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(cache_history, .init = setup, .fini = teardown, .timeout = 30);

static uint64_t ino_at(const char *path)
{
    struct cnode n;
    cr_assert_eq(cache_node_at(C, ST, path, &n), 0, "%s is missing", path);
    uint64_t ino = n.ino;
    cnode_clear(&n);
    return ino;
}

Test(cache_history, the_version_of_a_file_is_the_note_for_its_baseline)
{
    uint64_t a = ino_at("/a.md");
    struct cache_file_history h;
    cr_assert_eq(cache_file_history(C, a, &h), 0);
    cr_expect_str_eq(h.memory_id, "mem_a");
    cr_expect_str_eq(h.version_id, "", "no version seen yet");
    cr_expect_eq(h.updated_ns, 0);
    cr_expect_str_eq(h.sha, sha_a);
    cr_expect_eq(h.state, CACHE_XSTATE_CLEAN);

    struct cache_vnote v[3] = {
        {"mem_a", sha_a, "memver_2", T0 + 2000},
        {"mem_a", sha_b, "memver_1", T0 + 1000}, /* older: ignored */
        {"mem_b", sha_b, "", T0},                /* no id: skipped */
    };
    cr_assert_eq(cache_versions_note(C, ST, v, 3), 0);
    cr_assert_eq(cache_file_history(C, a, &h), 0);
    cr_expect_str_eq(h.version_id, "memver_2");
    cr_expect_eq(h.updated_ns, T0 + 2000);
    cr_assert_eq(cache_file_history(C, ino_at("/d/b.md"), &h), 0);
    cr_expect_str_eq(h.version_id, "");

    /* The store moved on to other content: nothing about this file. */
    struct cache_vnote later = {"mem_a", sha_b, "memver_3", T0 + 3000};
    cr_assert_eq(cache_versions_note(C, ST, &later, 1), 0);
    cr_assert_eq(cache_file_history(C, a, &h), 0);
    cr_expect_str_eq(h.version_id, "", "a version of other content was given to the file");

    /* A directory has none; an unknown node is -ENOENT. */
    cr_expect_eq(cache_file_history(C, ino_at("/d"), &h), -EISDIR);
    cr_expect_eq(cache_file_history(C, 999999, &h), -ENOENT);
}

Test(cache_history, the_state_is_dirty_refused_or_conflict)
{
    uint64_t a = ino_at("/a.md");
    struct cache_file_history h;
    cr_assert_eq(cache_set_content(C, a, "local", 5, T0, NULL), 0);
    cr_assert_eq(cache_file_history(C, a, &h), 0);
    cr_expect_eq(h.state, CACHE_XSTATE_DIRTY);
    cr_expect_str_eq(cache_state_name(h.state), "dirty");
    char sha[65];
    sha256_hex("local", 5, sha);
    cr_expect_str_eq(h.sha, sha);
    cr_assert_eq(cache_mark_refused(C, a, sha, "nope"), 0);
    cr_assert_eq(cache_file_history(C, a, &h), 0);
    cr_expect_eq(h.state, CACHE_XSTATE_REFUSED);
    /* A record for its memory (even at another path) wins. */
    cr_assert_eq(cache_conflict_add(C, ST, "/elsewhere.md", "mem_a", sha, sha_a), 0);
    cr_assert_eq(cache_file_history(C, a, &h), 0);
    cr_expect_eq(h.state, CACHE_XSTATE_CONFLICT);
    cr_expect_str_eq(cache_state_name(h.state), "conflict");
    /* And one at its path, for a file never synced. */
    struct cnode n;
    cr_assert_eq(cache_create(C, root, "new.md", false, T0, &n), 0);
    cr_assert_eq(cache_file_history(C, n.ino, &h), 0);
    cr_expect_eq(h.state, CACHE_XSTATE_DIRTY);
    cr_expect_str_eq(h.memory_id, "");
    cr_assert_eq(cache_conflict_add(C, ST, "/new.md", NULL, sha, NULL), 0);
    cr_assert_eq(cache_file_history(C, n.ino, &h), 0);
    cr_expect_eq(h.state, CACHE_XSTATE_CONFLICT);
    cnode_clear(&n);
    /* No record over bytes the cache no longer has (a decision taken from
     * a file saved again since). */
    struct cache_conflict *v = NULL;
    size_t nv = 0, before;
    cr_assert_eq(cache_conflicts(C, ST, &v, &before), 0);
    cache_conflicts_free(v, before);
    char gone[65];
    sha256_hex("never stored", 12, gone);
    cr_expect_eq(cache_conflict_add(C, ST, "/a.md", "mem_a", gone, sha_a), -EAGAIN);
    cr_assert_eq(cache_conflicts(C, ST, &v, &nv), 0);
    cache_conflicts_free(v, nv);
    cr_expect_eq(nv, before, "a record over bytes the cache does not have");
}

Test(cache_history, lookups_deletions_and_conflict_records)
{
    struct cnode n;
    cr_assert_eq(cache_file_of_memory(C, ST, "mem_b", &n), 0);
    cr_expect_str_eq(n.path, "/d/b.md");
    cnode_clear(&n);
    cr_expect_eq(cache_file_of_memory(C, ST, "mem_zz", &n), -ENOENT);
    cr_assert_eq(cache_node_at(C, ST, "/", &n), 0);
    cr_expect(n.is_dir);
    cr_expect_eq(n.ino, root);
    cnode_clear(&n);
    cr_expect_eq(cache_node_at(C, ST, "/nope", &n), -ENOENT);
    cr_expect_eq(cache_node_at(C, "memstore_other", "/a.md", &n), -ENOENT);

    /* A removed synced file: its deletion is pending at its path. */
    char mem[CACHE_ID_MAX];
    cr_assert_eq(cache_unlink(C, ino_at("/d"), "b.md", false, NULL), 0);
    cr_assert_eq(cache_deletion_at(C, ST, "/d/b.md", mem), 0);
    cr_expect_str_eq(mem, "mem_b");
    cr_expect_eq(cache_file_of_memory(C, ST, "mem_b", &n), -ENOENT);
    cr_expect_eq(cache_node_at(C, ST, "/d/b.md", &n), -ENOENT);
    cr_expect_eq(cache_deletion_at(C, ST, "/a.md", mem), -ENOENT);

    /* Conflict records by id, and their removal once restored. */
    cr_assert_eq(cache_conflict_add(C, ST, "/a.md", "mem_a", sha_b, sha_a), 0);
    struct cache_conflict *v;
    size_t nv;
    cr_assert_eq(cache_conflicts(C, ST, &v, &nv), 0);
    cr_assert_eq(nv, 1);
    int64_t id = v[0].id;
    cache_conflicts_free(v, nv);
    struct cache_conflict k;
    char store[CACHE_ID_MAX];
    cr_assert_eq(cache_conflict_get(C, id, store, &k), 0);
    cr_expect_str_eq(store, ST);
    cr_expect_str_eq(k.path, "/a.md");
    cr_expect_str_eq(k.memory_id, "mem_a");
    cr_expect_str_eq(k.local_sha, sha_b);
    free(k.path);
    cr_assert_eq(cache_conflict_restored(C, id), 0);
    cr_expect_eq(cache_conflict_get(C, id, store, &k), -ENOENT);
    cr_expect_eq(cache_conflict_restored(C, id), -ENOENT);
}

/* The version a memory's file shows once a listing brings it (back). */
static void expect_version_after_listing(const char *id, const char *want)
{
    struct cache_remote all[3] = {
        {"/a.md", "mem_a", sha_a, 3, T0},
        {"/d/b.md", "mem_b", sha_b, 2, T0},
        {"/g.md", "mem_gone", sha_b, 2, T0},
    };
    cr_assert_eq(cache_apply_remote(C, ST, all, 3, NULL), 0);
    struct cnode n;
    cr_assert_eq(cache_file_of_memory(C, ST, id, &n), 0);
    struct cache_file_history h;
    cr_assert_eq(cache_file_history(C, n.ino, &h), 0);
    cr_expect_str_eq(h.version_id, want, "%s", id);
    cnode_clear(&n);
}

Test(cache_history, versions_of_memories_no_file_has_are_pruned)
{
    struct cache_vnote v[3] = {
        {"mem_a", sha_a, "memver_a", T0},
        {"mem_b", sha_b, "memver_b", T0},
        {"mem_gone", sha_b, "memver_g", T0},
    };
    cr_assert_eq(cache_versions_note(C, ST, v, 3), 0);
    /* mem_b is removed locally, its deletion pending: its row stays;
     * mem_gone has neither a file nor a deletion: its row goes. */
    cr_assert_eq(cache_unlink(C, ino_at("/d"), "b.md", false, NULL), 0);
    cr_assert_eq(cache_versions_prune(C, ST), 0);
    cr_assert_eq(cache_tombstone_drop(C, ST, "mem_b"), 0);
    expect_version_after_listing("mem_a", "memver_a");
    expect_version_after_listing("mem_b", "memver_b");
    expect_version_after_listing("mem_gone", "");
    /* Gone for good: pruned too. */
    cr_assert_eq(cache_unlink(C, ino_at("/d"), "b.md", false, NULL), 0);
    cr_assert_eq(cache_tombstone_drop(C, ST, "mem_b"), 0);
    cr_assert_eq(cache_versions_prune(C, ST), 0);
    expect_version_after_listing("mem_b", "");
}
