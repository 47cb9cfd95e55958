/* test_cache_sent.c - the cache side of issue 8, without a mount: uploads
 * in flight and their answers (cache/sent.c) follow the file through an
 * atomic save, become a deletion when the file went, are refused when they
 * name another file's memory; content is pushed only once a writer
 * finished it (enum cache_saved); a deletion keeps its mode and one made
 * under log_only or disabled ends with the session. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cache.h"
#include "failcommit.h" /* hold_saver */

static char dir[64];
static struct cache *C;
static uint64_t root;
#define ST "memstore_s"

static char sha_a[65], sha_b[65];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mfs-cs-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(cache_open(dir, &C), 0);
    cr_assert_eq(cache_store_attach(C, ST, false, &root), 0);
    sha256_hex("aaa", 3, sha_a);
    sha256_hex("bb", 2, sha_b);
    cr_assert_eq(cache_blob_put(C, sha_a, "aaa", 3), 0);
    cr_assert_eq(cache_blob_put(C, sha_b, "bb", 2), 0);
    struct cache_remote r[2] = {{"/a.md", "mem_a", sha_a, 3, 0}, {"/b.md", "mem_b", sha_b, 2, 0}};
    cr_assert_eq(cache_apply_remote(C, ST, r, 2, NULL), 0);
}

static void teardown(void)
{
    cache_close(&C);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(cache_sent, .init = setup, .fini = teardown, .timeout = 30);

static uint64_t ino_at(const char *name)
{
    struct cnode n;
    cr_assert_eq(cache_lookup(C, root, name, &n), 0, "%s is missing", name);
    uint64_t ino = n.ino;
    cnode_clear(&n);
    return ino;
}

static struct cnode node(uint64_t ino)
{
    struct cnode n;
    cr_assert_eq(cache_getattr(C, ino, &n), 0);
    return n;
}

static size_t n_tombstones(const char *memory_id, int *mode, char *base_sha)
{
    struct cache_tombstone *t;
    size_t k, hits = 0;
    cr_assert_eq(cache_tombstones(C, ST, &t, &k), 0);
    for (size_t i = 0; i < k; i++)
        if (!memory_id || strcmp(t[i].memory_id, memory_id) == 0) {
            hits++;
            if (mode)
                *mode = t[i].mode;
            if (base_sha)
                snprintf(base_sha, 65, "%s", t[i].base_sha);
        }
    cache_tombstones_free(t, k);
    return hits;
}

/* Records an upload of ino as the push does. */
static int64_t sent(uint64_t ino, const char *memory_id, const char *path, const char *sha)
{
    struct cache_sent v = {.ino = ino, .path = (char *)path};
    snprintf(v.memory_id, sizeof(v.memory_id), "%s", memory_id);
    snprintf(v.node_id, sizeof(v.node_id), "%s", memory_id);
    snprintf(v.sha, sizeof(v.sha), "%s", sha);
    cr_assert_eq(cache_sent_add(C, ST, &v, 1), 0);
    cr_assert_gt(v.id, 0);
    return v.id;
}

/* The answer to upload id of ino: memory mem_id holds sha at path. */
static struct cache_answer_result answered(int64_t id, uint64_t ino, const char *mem_id,
                                           const char *sha, const char *path)
{
    struct cache_answer ans = {.sent_id = id, .ino = ino, .written_id = mem_id,
                               .node_id = mem_id, .memory_id = mem_id, .sha = sha,
                               .path = path};
    struct cache_answer_result res;
    cr_assert_eq(cache_push_answered(C, ST, &ans, &res), 0);
    return res;
}

/* An upload planned for a file that was replaced before it went out is
 * not recorded (so not sent). */
Test(cache_sent, an_upload_of_a_replaced_file_is_not_recorded)
{
    uint64_t a = ino_at("a.md");
    struct cnode tmp;
    cr_assert_eq(cache_create(C, root, "t", false, 1, &tmp), 0);
    cr_assert_eq(cache_rename(C, root, "t", root, "a.md", 0), 0);
    char p[] = "/a.md";
    struct cache_sent v = {.ino = a, .path = p};
    snprintf(v.memory_id, sizeof(v.memory_id), "mem_a");
    snprintf(v.node_id, sizeof(v.node_id), "mem_a");
    snprintf(v.sha, sizeof(v.sha), "%s", sha_a);
    cr_assert_eq(cache_sent_add(C, ST, &v, 1), 0);
    cr_expect_eq(v.id, -1, "an upload of a replaced file was recorded");
    cnode_clear(&tmp);
}

/* sed -i while the update of a.md (v2) is out: the answer lands on the
 * file that replaced it, never a deletion. */
Test(cache_sent, an_answer_follows_an_atomic_save)
{
    uint64_t a = ino_at("a.md");
    char v2[65];
    cr_assert_eq(cache_set_content(C, a, "v2", 2, 1, v2), 0);
    int64_t id = sent(a, "mem_a", "/a.md", v2);
    struct cnode tmp;
    cr_assert_eq(cache_create(C, root, "sedXYZ", false, 2, &tmp), 0);
    cr_assert_eq(cache_set_content(C, tmp.ino, "v3", 2, 2, NULL), 0);
    cr_assert_eq(cache_rename(C, root, "sedXYZ", root, "a.md", 0), 0);
    cr_expect_eq(cache_sent_owner(C, id), tmp.ino, "the upload did not move to the new file");
    struct cache_answer_result res = answered(id, a, "mem_a", v2, "/a.md");
    cr_expect_eq(res.outcome, CACHE_ANS_APPLIED);
    cr_expect_eq(res.ino, tmp.ino);
    struct cnode n = node(tmp.ino);
    cr_expect_str_eq(n.memory_id, "mem_a");
    cr_expect_str_eq(n.base_sha, v2, "the answer is not the new file's baseline");
    cr_expect_eq(n.state, CNODE_DIRTY, "v3 must still be pushed on top");
    cnode_clear(&n);
    cnode_clear(&tmp);
    cr_expect_eq(n_tombstones(NULL, NULL, NULL), 0, "the answer became a deletion");
    cr_expect_eq(cache_sent_owner(C, id), 0, "the settled upload is still recorded");
}

/* The file is edited back to its baseline while the update is out (an
 * undo, a revert): it is clean then, but once the answer makes the upload
 * the baseline it differs from it again, and must be pushed; a clean file
 * would be brought to the store's version (the upload) at the next sync,
 * and the revert lost.  So for a rename undone while it is out. */
Test(cache_sent, an_edit_back_to_the_baseline_while_the_upload_is_out_is_pushed)
{
    uint64_t a = ino_at("a.md");
    char v2[65];
    cr_assert_eq(cache_set_content(C, a, "v2", 2, 1, v2), 0);
    int64_t id = sent(a, "mem_a", "/a.md", v2);
    cr_assert_eq(cache_set_content(C, a, "aaa", 3, 2, NULL), 0);
    struct cnode n = node(a);
    cr_assert_eq(n.state, CNODE_CLEAN, "the revert to the baseline is not clean");
    cnode_clear(&n);
    cr_expect_eq(answered(id, a, "mem_a", v2, "/a.md").outcome, CACHE_ANS_APPLIED);
    n = node(a);
    cr_expect_str_eq(n.base_sha, v2);
    cr_expect_str_eq(n.sha, sha_a);
    cr_expect_eq(n.state, CNODE_DIRTY, "the revert is clean against the upload: never pushed");
    cnode_clear(&n);

    uint64_t b = ino_at("b.md");
    cr_assert_eq(cache_rename(C, root, "b.md", root, "c.md", 0), 0);
    id = sent(b, "mem_b", "/c.md", sha_b);
    cr_assert_eq(cache_rename(C, root, "c.md", root, "b.md", 0), 0);
    (void)answered(id, b, "mem_b", sha_b, "/c.md");
    n = node(b);
    cr_expect_str_eq(n.base_path, "/c.md");
    cr_expect_eq(n.state, CNODE_DIRTY, "the rename undone is clean against the upload");
    cnode_clear(&n);
}

/* The same with the update's answer lost (the store committed it): the
 * next listing shows the upload, and the file, edited back to the old
 * baseline since, is clean.  The upload becomes its baseline and it is
 * pushed, never brought to the upload; so for a rename undone. */
Test(cache_sent, an_edit_back_after_a_lost_answer_is_not_undone_by_the_listing)
{
    uint64_t a = ino_at("a.md"), b = ino_at("b.md");
    char v2[65];
    cr_assert_eq(cache_set_content(C, a, "v2", 2, 1, v2), 0);
    int64_t ida = sent(a, "mem_a", "/a.md", v2);
    cr_assert_eq(cache_set_content(C, a, "aaa", 3, 2, NULL), 0);
    cr_assert_eq(cache_rename(C, root, "b.md", root, "c.md", 0), 0);
    int64_t idb = sent(b, "mem_b", "/c.md", sha_b);
    cr_assert_eq(cache_rename(C, root, "c.md", root, "b.md", 0), 0);
    struct cnode n = node(a);
    cr_assert_eq(n.state, CNODE_CLEAN);
    cnode_clear(&n);
    struct cache_remote r[2] = {{"/a.md", "mem_a", v2, 2, 0}, {"/c.md", "mem_b", sha_b, 2, 0}};
    cr_assert_eq(cache_apply_remote(C, ST, r, 2, NULL), 0);
    n = node(a);
    cr_expect_str_eq(n.sha, sha_a, "the listing brought the file to the upload over the revert");
    cr_expect_str_eq(n.base_sha, v2, "the upload is not the baseline");
    cr_expect_eq(n.state, CNODE_DIRTY, "the revert is not pushed");
    cnode_clear(&n);
    n = node(b);
    cr_expect_str_eq(n.path, "/b.md", "the listing moved the file back to the upload's path");
    cr_expect_str_eq(n.base_path, "/c.md");
    cr_expect_eq(n.state, CNODE_DIRTY, "the rename undone is not pushed");
    cnode_clear(&n);
    cr_expect_eq(cache_sent_owner(C, ida), 0, "the settled update is still recorded");
    cr_expect_eq(cache_sent_owner(C, idb), 0, "the settled rename is still recorded");
    char *body = NULL;
    size_t len = 0;
    cr_expect_eq(cache_blob_get(C, v2, &body, &len), 0, "the baseline's content is gone");
    free(body);
}

/* A file removed while its create was out: the memory it made is a
 * deletion, recorded with the mode of the store's mount. */
Test(cache_sent, an_answer_for_a_removed_file_is_a_deletion_with_the_mode)
{
    cr_assert_eq(cache_store_set_mode(C, ST, CACHE_DEL_LOG_ONLY), 0);
    struct cnode f;
    cr_assert_eq(cache_create(C, root, "n.md", false, 1, &f), 0);
    char sha[65];
    cr_assert_eq(cache_set_content(C, f.ino, "n", 1, 1, sha), 0);
    int64_t id = sent(f.ino, "", "/n.md", sha);
    cr_assert_eq(cache_unlink(C, root, "n.md", false, NULL), 0);
    struct cache_answer ans = {.sent_id = id, .ino = f.ino, .written_id = "", .node_id = "",
                               .memory_id = "mem_n", .sha = sha, .path = "/n.md"};
    struct cache_answer_result res;
    cr_assert_eq(cache_push_answered(C, ST, &ans, &res), 0);
    cr_expect_eq(res.outcome, CACHE_ANS_ORPHANED);
    int mode = -1;
    char base[65] = "";
    cr_expect_eq(n_tombstones("mem_n", &mode, base), 1);
    cr_expect_eq(mode, CACHE_DEL_LOG_ONLY);
    cr_expect_str_eq(base, sha);
    cnode_clear(&f);
}

/* A file removed after the sync read it adopts no memory: given to the
 * removed node, the memory kept no file and no deletion, and the next
 * listing brought it back into the mount. */
Test(cache_sent, a_removed_file_adopts_no_memory)
{
    struct cnode f;
    cr_assert_eq(cache_create(C, root, "n.md", false, 1, &f), 0);
    char sha[65];
    cr_assert_eq(cache_set_content(C, f.ino, "n", 1, 1, sha), 0);
    cr_assert_eq(cache_unlink(C, root, "n.md", false, NULL), 0);
    cr_expect_eq(cache_mark_synced(C, f.ino, "mem_n", sha, "/n.md"), -ENOENT);
    struct cnode g = node(f.ino);
    cr_expect_str_eq(g.memory_id, "", "the removed file took memory %s", g.memory_id);
    cnode_clear(&g);
    cnode_clear(&f);
    /* A live one does. */
    uint64_t b = ino_at("b.md");
    cr_expect_eq(cache_mark_synced(C, b, "mem_b", sha_b, "/b.md"), 0);
}

/* A create answered with the id another file has is refused. */
Test(cache_sent, an_answer_naming_another_files_memory_is_refused)
{
    struct cnode f;
    cr_assert_eq(cache_create(C, root, "n.md", false, 1, &f), 0);
    char sha[65];
    cr_assert_eq(cache_set_content(C, f.ino, "n", 1, 1, sha), 0);
    int64_t id = sent(f.ino, "", "/n.md", sha);
    struct cache_answer ans = {.sent_id = id, .ino = f.ino, .written_id = "", .node_id = "",
                               .memory_id = "mem_b", .sha = sha, .path = "/n.md"};
    struct cache_answer_result res;
    cr_assert_eq(cache_push_answered(C, ST, &ans, &res), 0);
    cr_expect_eq(res.outcome, CACHE_ANS_FOREIGN);
    struct cnode n = node(f.ino);
    cr_expect_str_eq(n.memory_id, "", "the file took another file's memory");
    cr_expect_eq(n.state, CNODE_DIRTY);
    cnode_clear(&n);
    n = node(ino_at("b.md"));
    cr_expect_str_eq(n.memory_id, "mem_b");
    cnode_clear(&n);
    /* An update answered about another memory than the one updated. */
    uint64_t a = ino_at("a.md");
    ans = (struct cache_answer){.ino = a, .written_id = "mem_a", .node_id = "mem_a",
                                .memory_id = "mem_other", .sha = sha, .path = "/a.md"};
    cr_assert_eq(cache_push_answered(C, ST, &ans, &res), 0);
    cr_expect_eq(res.outcome, CACHE_ANS_FOREIGN);
    cnode_clear(&f);
}

/* Only content a writer finished is pushed by a periodic sync. */
static int count_fn(void *arg, const struct cnode *n)
{
    (void)n;
    (*(int *)arg)++;
    return 0;
}

static int dirty(bool final)
{
    int k = 0;
    cr_assert_eq(cache_dirty_files(C, ST, final, count_fn, &k), 0);
    return k;
}

/* cache_store_pending agrees with the same fields of cache_store_stats. */
static void expect_pending_agrees(void)
{
    struct cache_store_stats a, b;
    cr_assert_eq(cache_store_stats(C, ST, &a), 0);
    cr_assert_eq(cache_store_pending(C, ST, &b), 0);
    cr_expect_eq(a.dirty, b.dirty);
    cr_expect_eq(a.refused, b.refused);
    cr_expect_eq(a.unsaved, b.unsaved);
    cr_expect_eq(a.tombstones, b.tombstones);
    cr_expect_eq(a.kept_deletions, b.kept_deletions);
}

/* n new files PREFIX0.md... made by opens, each closed by a writer that
 * may still hold it: their content held, not yet pushable. */
static void held_files(const char *prefix, int n, struct cnode *out)
{
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "%s%d.md", prefix, i);
        cr_assert_eq(cache_create_open(C, root, name, 1, &out[i]), 0);
        cr_assert_eq(cache_set_content_if(C, out[i].ino, "x", 1, 2, out[i].sha, true, NULL), 0);
    }
}

Test(cache_sent, only_finished_content_is_pushed)
{
    struct cnode f;
    cr_assert_eq(cache_create_open(C, root, "open.md", 1, &f), 0);
    cr_expect_eq(f.unsaved, CACHE_NEW);
    cr_expect_eq(dirty(false), 0, "a new file no writer saved is pushable");
    cr_expect_eq(dirty(true), 0, "a new file never flushed is pushable at the end");
    /* A close of one descriptor: held until the writer finishes. */
    cr_assert_eq(cache_set_content_if(C, f.ino, "part", 4, 2, f.sha, true, NULL), 0);
    cr_expect_eq(dirty(false), 0, "held content is pushed by a periodic sync");
    cr_expect_eq(dirty(true), 1, "held content is not pushed by the final sync");
    expect_pending_agrees();
    cr_assert_eq(cache_mark_saved(C, f.ino), 0);
    cr_expect_eq(dirty(false), 1, "saved content is not pushed");
    struct cache_store_stats st;
    cr_assert_eq(cache_store_stats(C, ST, &st), 0);
    cr_expect_eq(st.unsaved, 0);
    /* A restart: held content becomes saved (no writer survives it). */
    struct cnode g;
    cr_assert_eq(cache_create_open(C, root, "g.md", 1, &g), 0);
    cr_assert_eq(cache_set_content_if(C, g.ino, "g", 1, 2, g.sha, true, NULL), 0);
    struct cnode h;
    cr_assert_eq(cache_create_open(C, root, "h.md", 1, &h), 0);
    cr_assert_eq(cache_store_stats(C, ST, &st), 0);
    cr_expect_eq(st.unsaved, 1);
    uint64_t again;
    cr_assert_eq(cache_store_attach(C, ST, false, &again), 0);
    cr_expect_eq(dirty(false), 2, "held content was not saved by the next attach");
    cr_assert_eq(cache_store_stats(C, ST, &st), 0);
    cr_expect_eq(st.unsaved, 1, "a file never flushed became pushable");
    expect_pending_agrees();
    /* Deletions (one leaves a tombstone), counted alike. */
    cr_assert_eq(cache_unlink(C, root, "open.md", false, NULL), 0);
    cr_assert_eq(cache_unlink(C, root, "a.md", false, NULL), 0);
    struct cache_store_stats p;
    cr_assert_eq(cache_store_pending(C, ST, &p), 0);
    cr_expect_eq(p.tombstones, 1);
    expect_pending_agrees();
    cnode_clear(&f);
    cnode_clear(&g);
    cnode_clear(&h);
}

/* A saved mark is kept in memory until the next write transaction or the
 * sync's read (content.c); it must never land after a later change of the
 * same file: a writer that opens the file again and closes one descriptor
 * holds it again. */
Test(cache_sent, a_deferred_saved_mark_keeps_its_order)
{
    struct cnode f;
    cr_assert_eq(cache_create_open(C, root, "again.md", 1, &f), 0);
    cr_assert_eq(cache_set_content_if(C, f.ino, "one", 3, 2, f.sha, true, NULL), 0);
    char sha[SHA256_HEX_LEN + 1];
    struct cnode n;
    cr_assert_eq(cache_getattr(C, f.ino, &n), 0);
    snprintf(sha, sizeof(sha), "%s", n.sha);
    cnode_clear(&n);
    cr_assert_eq(cache_mark_saved(C, f.ino), 0);
    /* Written again, held again, before anything read the mark. */
    cr_assert_eq(cache_set_content_if(C, f.ino, "one two", 7, 3, sha, true, NULL), 0);
    cr_expect_eq(dirty(false), 0, "content held again was pushable: the old mark landed late");
    cr_expect_eq(dirty(true), 1);
    cr_assert_eq(cache_mark_saved(C, f.ino), 0);
    cr_expect_eq(dirty(false), 1, "the last writer's close did not make it pushable");
    /* Many marks at once land together, whatever comes first. */
    struct cnode m[20];
    held_files("many", 20, m);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(cache_mark_saved(C, m[i].ino), 0);
    cr_expect_eq(dirty(false), 21);
    for (int i = 0; i < 20; i++)
        cnode_clear(&m[i]);
    cnode_clear(&f);
}

Test(cache_sent, log_only_and_disabled_deletions_end_with_the_session)
{
    cr_assert_eq(cache_store_set_mode(C, ST, CACHE_DEL_DISABLED), 0);
    cr_assert_eq(cache_unlink(C, root, "a.md", false, NULL), 0);
    cr_assert_eq(cache_store_set_mode(C, ST, CACHE_DEL_ENABLED), 0);
    cr_assert_eq(cache_unlink(C, root, "b.md", false, NULL), 0);
    int mode = -1;
    cr_expect_eq(n_tombstones("mem_a", &mode, NULL), 1);
    cr_expect_eq(mode, CACHE_DEL_DISABLED);
    cr_expect_eq(n_tombstones("mem_b", &mode, NULL), 1);
    cr_expect_eq(mode, CACHE_DEL_ENABLED);
    struct cache_store_stats st;
    cr_assert_eq(cache_store_stats(C, ST, &st), 0);
    cr_expect_eq(st.tombstones, 2);
    cr_expect_eq(st.kept_deletions, 1);
    uint64_t again;
    cr_assert_eq(cache_store_attach(C, ST, false, &again), 0);
    cr_expect_eq(n_tombstones("mem_a", NULL, NULL), 0, "a disabled deletion outlived its session");
    cr_expect_eq(n_tombstones("mem_b", NULL, NULL), 1, "an enabled deletion was forgotten");
}

/* With nothing else happening, the saver writes a mark within a few
 * milliseconds: another reader of the database (memstorefs status of a
 * stopped daemon, a test, sqlite3) sees a closed file saved, as it did
 * when the release wrote the mark itself. */
static int unsaved_on_disk(uint64_t ino)
{
    char db[128];
    snprintf(db, sizeof(db), "%s/cache.db", dir);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 2000);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT unsaved FROM nodes WHERE ino = ?", -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    int v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

/* A mark is written by the next write transaction; when that transaction
 * fails (a name taken, a directory not empty, a read-only store) and is
 * rolled back, the mark must not go with it: the file would stay held, and
 * no periodic sync would push it (only the final one at unmount). */
Test(cache_sent, a_saved_mark_outlives_a_change_that_failed)
{
    struct cnode d, x;
    cr_assert_eq(cache_create(C, root, "full", true, 1, &d), 0);
    cr_assert_eq(cache_create(C, d.ino, "inside.md", false, 1, &x), 0);
    struct cnode f[4];
    held_files("closed", 4, f);
    int before = dirty(false);
    /* Each failure right after a close's mark, before the saver's delay
     * (held: a slow run would let it write the marks first, and the
     * failures would roll back none). */
    hold_saver(C, true);
    cr_assert_eq(cache_mark_saved(C, f[0].ino), 0);
    cr_assert_eq(cache_unlink(C, root, "full", true, NULL), -ENOTEMPTY);
    cr_assert_eq(cache_mark_saved(C, f[1].ino), 0);
    struct cnode y = {0};
    cr_assert_eq(cache_create_open(C, d.ino, "inside.md", 1, &y), -EEXIST);
    cr_assert_eq(cache_mark_saved(C, f[2].ino), 0);
    cr_assert_eq(cache_create(C, root, "full", true, 1, &y), -EEXIST);
    cr_assert_eq(cache_mark_saved(C, f[3].ino), 0);
    cr_assert_eq(cache_rename(C, root, "closed0.md", d.ino, "inside.md",
                              CACHE_RENAME_NOREPLACE),
                 -EEXIST);
    cr_expect_eq(dirty(false), before + 4, "a close's mark was lost with a change that failed");
    hold_saver(C, false);
    for (int i = 0; i < 4; i++)
        cnode_clear(&f[i]);
    cnode_clear(&d);
    cnode_clear(&x);
}

Test(cache_sent, a_deferred_saved_mark_lands_on_its_own)
{
    struct cnode f;
    cr_assert_eq(cache_create_open(C, root, "alone.md", 1, &f), 0);
    cr_assert_eq(cache_set_content_if(C, f.ino, "done", 4, 2, f.sha, true, NULL), 0);
    cr_expect_eq(unsaved_on_disk(f.ino), CACHE_HELD);
    cr_assert_eq(cache_mark_saved(C, f.ino), 0);
    int v = -1;
    for (int i = 0; i < 200 && (v = unsaved_on_disk(f.ino)) != CACHE_SAVED; i++)
        usleep(10 * 1000);
    cr_expect_eq(v, CACHE_SAVED, "the mark was not written within 2 s");
    /* And a mark made just before the cache closes is not lost. */
    struct cnode g;
    cr_assert_eq(cache_create_open(C, root, "last.md", 1, &g), 0);
    cr_assert_eq(cache_set_content_if(C, g.ino, "end", 3, 2, g.sha, true, NULL), 0);
    cr_assert_eq(cache_mark_saved(C, g.ino), 0);
    cache_close(&C);
    cr_expect_eq(unsaved_on_disk(g.ino), CACHE_SAVED, "a mark made before close was lost");
    cr_assert_eq(cache_open(dir, &C), 0);
    cnode_clear(&f);
    cnode_clear(&g);
}

/* The sync's read of what it may push writes the marks waiting first,
 * into the lazy transaction when one is open (an open's create), outside
 * any part: its commit must count them written, or the saver, seeing them
 * still waiting, loops holding the cache's lock and every later call
 * hangs (a session's end once did, with writes refused by the server). */
Test(cache_sent, marks_the_sync_read_wrote_leave_the_cache_usable)
{
    struct cnode f, g;
    held_files("read", 1, &f);
    /* The sync's read finds the mark waiting and the lazy transaction
     * open, however slow the run. */
    hold_saver(C, true);
    cr_assert_eq(cache_create_open(C, root, "lazy.md", 1, &g), 0); /* the lazy transaction */
    cr_assert_eq(cache_mark_saved(C, f.ino), 0);
    cr_expect_eq(dirty(false) > 0, true);
    hold_saver(C, false);
    /* Past the saver's delay and the lazy commit's: waited for (a loaded
     * machine can wake the saver late), not slept. */
    int v = -1;
    for (int i = 0; i < 200 && (v = unsaved_on_disk(f.ino)) != CACHE_SAVED; i++)
        usleep(10 * 1000);
    struct cnode n;
    cr_assert_eq(cache_getattr(C, f.ino, &n), 0, "the cache was left unusable");
    cr_expect_eq(n.unsaved, CACHE_SAVED);
    cnode_clear(&n);
    cr_expect_eq(v, CACHE_SAVED, "the mark never reached the disk (within 2 s)");
    cnode_clear(&f);
    cnode_clear(&g);
}
