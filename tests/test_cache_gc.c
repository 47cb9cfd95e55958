/* test_cache_gc.c - the cache stays bounded (cache/gc.c): content is freed
 * in the transaction that drops its last reference, while a baseline, a
 * conflict record, an upload in flight or an unlinked node still needing
 * it keeps it; conflict records are pruned by count and age and dropped by
 * hand; --cache-max-size evicts clean content only; a cache made before
 * all this is compacted when it is opened; directories get their times
 * and subdirectory counts.  No mount needed.
 * Before issue 9 rewrites_keep_one_copy kept every version (1,000 blobs),
 * and an_old_cache_is_compacted_at_open reclaimed nothing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "rules.h"

static char tmp[64];
static struct cache *C;
static uint64_t root;
#define ST "memstore_gc"
#define ST2 "memstore_gc2"

static char sha_a[65], sha_b[65];

static void setup(void)
{
    snprintf(tmp, sizeof(tmp), "/tmp/mfs-gc-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
    cr_assert_eq(cache_open(tmp, &C), 0);
    cr_assert_eq(cache_store_attach(C, ST, false, &root), 0);
    sha256_hex("aaa", 3, sha_a);
    sha256_hex("bbbb", 4, sha_b);
    cr_assert_eq(cache_blob_put(C, sha_a, "aaa", 3), 0);
    cr_assert_eq(cache_blob_put(C, sha_b, "bbbb", 4), 0);
    struct cache_remote r[] = {
        {"/a.md", "mem_a", sha_a, 3, 0},
        {"/d/b.md", "mem_b", sha_b, 4, 0},
    };
    cr_assert_eq(cache_apply_remote(C, ST, r, 2, NULL), 0);
}

static void teardown(void)
{
    cache_close(&C);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    (void)!system(cmd);
}

TestSuite(cache_gc, .init = setup, .fini = teardown, .timeout = 60);

static uint64_t child(uint64_t parent, const char *name)
{
    struct cnode n;
    cr_assert_eq(cache_lookup(C, parent, name, &n), 0, "no %s", name);
    uint64_t ino = n.ino;
    cnode_clear(&n);
    return ino;
}

static bool has(const char *content)
{
    char sha[65];
    sha256_hex(content, strlen(content), sha);
    return cache_blob_has(C, sha);
}

static uint64_t nblobs(void)
{
    struct cache_usage u;
    cr_assert_eq(cache_usage(C, &u), 0);
    return u.blobs;
}

static void set(uint64_t ino, const char *content)
{
    cr_assert_eq(cache_set_content(C, ino, content, strlen(content), 1, NULL), 0);
}

/* An upload of content to mem_a (/a.md, file ino) recorded as sent. */
static struct cache_sent send_a(uint64_t ino, const char *content)
{
    struct cache_sent up = {.ino = ino, .path = (char *)"/a.md"};
    snprintf(up.memory_id, sizeof(up.memory_id), "mem_a");
    snprintf(up.node_id, sizeof(up.node_id), "mem_a");
    sha256_hex(content, strlen(content), up.sha);
    cr_assert_eq(cache_sent_add(C, ST, &up, 1), 0);
    return up;
}

Test(cache_gc, rewrites_keep_one_copy)
{
    struct cnode n;
    cr_assert_eq(cache_create(C, root, "note.md", false, 1, &n), 0);
    uint64_t ino = n.ino;
    cnode_clear(&n);
    uint64_t before = nblobs();
    static char buf[10 * 1024 + 32];
    for (int i = 0; i < 1000; i++) {
        memset(buf, 'a' + i % 26, 10 * 1024);
        int k = snprintf(buf + 10 * 1024, 32, "%d\n", i);
        cr_assert_eq(cache_set_content(C, ino, buf, 10 * 1024 + (size_t)k, 1, NULL), 0);
    }
    /* the two synced files' content, the empty blob (kept for good) and
     * the note's last version */
    cr_expect_leq(nblobs(), before + 1, "%llu blobs after 1,000 rewrites (%llu before)",
                  (unsigned long long)nblobs(), (unsigned long long)before);
    struct cache_usage u;
    cr_assert_eq(cache_housekeep(C, &(struct cache_policy){0}, NULL, NULL, NULL), 0);
    cr_assert_eq(cache_usage(C, &u), 0);
    cr_expect_lt(u.content_bytes, 11 * 1024 + 100);
    cr_expect_lt(u.db_bytes + u.wal_bytes, 1024 * 1024,
                 "%llu bytes on disk for ~10 KiB of content",
                 (unsigned long long)(u.db_bytes + u.wal_bytes));
}

Test(cache_gc, what_is_still_needed_keeps_its_content)
{
    uint64_t a = child(root, "a.md");
    /* a dirty file keeps its baseline (the store's version it reverts to) */
    set(a, "x1");
    cr_expect(has("aaa"), "the baseline of a dirty file was freed");
    set(a, "x2");
    cr_expect(!has("x1"), "replaced content was kept");
    /* a conflict record keeps the lost version until it is dropped */
    char sha[65];
    sha256_hex("x2", 2, sha);
    cr_assert_eq(cache_conflict_add(C, ST, "/a.md", "mem_a", sha, sha_a), 0);
    set(a, "x3");
    cr_expect(has("x2"), "a conflict record's content was freed");
    struct cache_conflict *cf = NULL;
    size_t ncf = 0;
    cr_assert_eq(cache_conflicts(C, ST, &cf, &ncf), 0);
    cr_assert_eq(ncf, 1);
    cr_assert_eq(cache_conflicts_drop(C, cf[0].id, 0, NULL), 0);
    cr_expect_eq(cache_conflicts_drop(C, cf[0].id, 0, NULL), -ENOENT);
    cache_conflicts_free(cf, ncf);
    cr_expect(!has("x2"), "a dropped conflict record's content was kept");
    /* an upload in flight keeps what it sent (its answer makes it the baseline) */
    struct cache_sent up = send_a(a, "x3");
    cr_assert_gt(up.id, 0);
    set(a, "x4");
    cr_expect(has("x3"), "the content of an upload in flight was freed");
    cr_assert_eq(cache_sent_drop(C, up.id), 0);
    cr_expect(!has("x3"), "a settled upload's content was kept");
    /* the store wins: back to the baseline, the local version goes */
    sha256_hex("x4", 2, sha);
    cr_assert_eq(cache_revert_if(C, a, sha, "/a.md"), 0);
    cr_expect(!has("x4"));
    cr_expect(has("aaa"));
}

Test(cache_gc, an_unlinked_file_keeps_its_content_until_the_next_attach)
{
    uint64_t d = child(root, "d");
    uint64_t b = child(d, "b.md");
    set(b, "open and removed");
    cr_assert_eq(cache_unlink(C, d, "b.md", false, NULL), 0);
    struct cnode n;
    cr_assert_eq(cache_getattr(C, b, &n), 0);
    cr_expect(n.unlinked);
    cr_expect(n.has_content, "a file the kernel may still read lost its content");
    cnode_clear(&n);
    uint64_t r2;
    cr_assert_eq(cache_store_attach(C, ST, false, &r2), 0);
    cr_expect(!has("open and removed"));
    cr_expect(has("aaa"), "another file's content went too");
}

Test(cache_gc, conflict_records_are_pruned_by_count_and_age)
{
    uint64_t r2;
    cr_assert_eq(cache_store_attach(C, ST2, false, &r2), 0);
    for (int i = 0; i < 5; i++) {
        char body[16], sha[65];
        snprintf(body, sizeof(body), "lost %d", i);
        sha256_hex(body, strlen(body), sha);
        cr_assert_eq(cache_blob_put(C, sha, body, strlen(body)), 0);
        cr_assert_eq(cache_conflict_add(C, ST, "/a.md", "mem_a", sha, sha_a), 0);
        cr_assert_eq(cache_conflict_add(C, ST2, "/a.md", "mem_x", sha, sha_a), 0);
    }
    struct cache_gc_report r;
    struct cache_policy p = {.conflicts_keep = 2};
    cr_assert_eq(cache_housekeep(C, &p, NULL, NULL, &r), 0);
    cr_expect_eq(r.conflicts_pruned, 6, "3 of 5 in each store");
    struct cache_conflict *cf = NULL;
    size_t n = 0;
    cr_assert_eq(cache_conflicts(C, ST, &cf, &n), 0);
    cr_expect_eq(n, 2);
    char sha4[65];
    sha256_hex("lost 4", 6, sha4);
    cr_expect(n == 2 && strcmp(cf[0].local_sha, sha4) == 0, "the newest records stay");
    cache_conflicts_free(cf, n);
    cr_expect(!has("lost 0") && !has("lost 2") && has("lost 3") && has("lost 4"));
    /* age: everything made before now is older than 1 ns */
    usleep(2000);
    p = (struct cache_policy){.conflicts_max_age_ns = 1};
    cr_assert_eq(cache_housekeep(C, &p, NULL, NULL, &r), 0);
    cr_expect_eq(r.conflicts_pruned, 4);
    cr_assert_eq(cache_conflicts(C, NULL, &cf, &n), 0);
    cr_expect_eq(n, 0);
    cache_conflicts_free(cf, n);
    cr_expect(!has("lost 4"));
    /* by hand: --older-than and --all */
    char sha[65];
    sha256_hex("x", 1, sha);
    cr_assert_eq(cache_blob_put(C, sha, "x", 1), 0);
    cr_assert_eq(cache_conflict_add(C, ST, "/a.md", "mem_a", sha, sha_a), 0);
    uint64_t dropped = 9;
    cr_assert_eq(cache_conflicts_drop(C, 0, 1, &dropped), 0);
    cr_expect_eq(dropped, 0, "a record made now is not older than 1970");
    cr_assert_eq(cache_conflicts_drop(C, 0, INT64_MAX, &dropped), 0);
    cr_expect_eq(dropped, 1);
    cr_expect(!has("x"));
}

static uint64_t busy_ino;
static bool busy(void *arg, uint64_t ino)
{
    (void)arg;
    return ino == busy_ino;
}

Test(cache_gc, eviction_drops_clean_content_only)
{
    /* clean: a.md, b.md, c.md (open); dirty: n.md (new) and d/b2 (edited,
     * baseline shared with nobody); a conflict record */
    char sha_c[65];
    sha256_hex("cccccc", 6, sha_c);
    cr_assert_eq(cache_blob_put(C, sha_c, "cccccc", 6), 0);
    char sha_e[65];
    sha256_hex("eeeee", 5, sha_e);
    cr_assert_eq(cache_blob_put(C, sha_e, "eeeee", 5), 0);
    struct cache_remote r[] = {
        {"/a.md", "mem_a", sha_a, 3, 0},
        {"/c.md", "mem_c", sha_c, 6, 0},
        {"/d/b.md", "mem_b", sha_b, 4, 0},
        {"/d/e.md", "mem_e", sha_e, 5, 0},
    };
    cr_assert_eq(cache_apply_remote(C, ST, r, 4, NULL), 0);
    uint64_t d = child(root, "d");
    busy_ino = child(root, "c.md");
    set(child(d, "e.md"), "edited e");
    struct cnode n;
    cr_assert_eq(cache_create(C, root, "n.md", false, 1, &n), 0);
    uint64_t nm = n.ino;
    cnode_clear(&n);
    set(nm, "brand new");
    char sha[65];
    sha256_hex("lost", 4, sha);
    cr_assert_eq(cache_blob_put(C, sha, "lost", 4), 0);
    cr_assert_eq(cache_conflict_add(C, ST, "/a.md", "mem_a", sha, sha_a), 0);

    struct cache_gc_report rep;
    struct cache_policy p = {.max_bytes = 1};
    cr_assert_eq(cache_housekeep(C, &p, busy, NULL, &rep), 0);
    cr_expect_eq(rep.evicted, 2, "a.md and b.md, %llu", (unsigned long long)rep.evicted);
    cr_expect(rep.over_limit);
    cr_expect(!has("aaa") && !has("bbbb"), "clean closed content stays");
    cr_expect(has("cccccc"), "the content of an open file was evicted");
    cr_expect(has("edited e") && has("eeeee"), "a dirty file or its baseline was evicted");
    cr_expect(has("brand new"), "a new file's content was evicted");
    cr_expect(has("lost"), "a conflict record's content was evicted");
    /* evicted content is not prefetched, but is known to be evicted */
    struct cache_missing *miss = NULL;
    size_t nmiss = 0;
    cr_assert_eq(cache_missing_content(C, ST, &miss, &nmiss), 0);
    cr_expect_eq(nmiss, 0, "evicted content would be downloaded again by the prefetch");
    free(miss);
    struct cache_store_stats st;
    cr_assert_eq(cache_store_stats(C, ST, &st), 0);
    cr_expect_eq(st.evicted, 2);
    cr_expect_eq(st.missing_content, 0);
    cr_assert_eq(cache_getattr(C, child(root, "a.md"), &n), 0);
    cr_expect(n.evicted && !n.has_content && n.state == CNODE_CLEAN);
    cnode_clear(&n);
    /* fetched again on open: an ordinary cached file */
    cr_assert_eq(cache_blob_put(C, sha_a, "aaa", 3), 0);
    cr_assert_eq(cache_store_stats(C, ST, &st), 0);
    cr_expect_eq(st.evicted, 1);
    /* a remote change is prefetched as usual */
    char sha_b2[65];
    sha256_hex("b2", 2, sha_b2);
    r[2].sha = sha_b2;
    r[2].size = 2;
    cr_assert_eq(cache_apply_remote(C, ST, r, 4, NULL), 0);
    cr_assert_eq(cache_missing_content(C, ST, &miss, &nmiss), 0);
    cr_expect(nmiss == 1 && strcmp(miss[0].memory_id, "mem_b") == 0);
    free(miss);
    /* under the limit, nothing goes */
    p.max_bytes = 1 << 20;
    cr_assert_eq(cache_housekeep(C, &p, busy, NULL, &rep), 0);
    cr_expect_eq(rep.evicted, 0);
    cr_expect(!rep.over_limit);
}

/* A clean file made here from nothing by cache_create and a save, then
 * pushed (cache_mark_synced): path "/NAME", memory "mem_NAME". */
static uint64_t made_here(const char *name, const char *content, int64_t now)
{
    struct cnode n;
    cr_assert_eq(cache_create(C, root, name, false, now, &n), 0);
    uint64_t ino = n.ino;
    cnode_clear(&n);
    cr_assert_eq(cache_getattr(C, ino, &n), 0);
    cr_expect_eq(n.used_ns, now, "a file made here is not stamped used at its creation");
    cnode_clear(&n);
    char sha[65], path[64], mem[64];
    cr_assert_eq(cache_set_content(C, ino, content, strlen(content), now, sha), 0);
    snprintf(path, sizeof(path), "/%s", name);
    snprintf(mem, sizeof(mem), "mem_%s", name);
    cr_assert_eq(cache_mark_synced(C, ino, mem, sha, path), 0);
    return ino;
}

/* --cache-max-size evicts the least recently used first, and a file
 * created or saved here is used then, not only when it is opened: before
 * 8 December 2026 only an open stamped it, so a note written here and
 * never opened again went before files last opened hours ago. */
Test(cache_gc, eviction_takes_the_least_recently_used_first)
{
    const int64_t hour = 3600LL * 1000000000LL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    const char *body[] = {"never-open", "opened-2h-", "opened-now", "edit-3h-ag"};
    char sha[4][65];
    for (int i = 0; i < 4; i++) {
        sha256_hex(body[i], strlen(body[i]), sha[i]);
        cr_assert_eq(cache_blob_put(C, sha[i], body[i], strlen(body[i])), 0);
    }
    struct cache_remote r[] = {
        {"/a.md", "mem_a", sha_a, 3, 0},
        {"/d/b.md", "mem_b", sha_b, 4, 0},
        {"/never.md", "mem_never", sha[0], 10, 0},
        {"/old.md", "mem_old", sha[1], 10, 0},
        {"/recent.md", "mem_recent", sha[2], 10, 0},
        {"/edited.md", "mem_edited.md", sha[3], 10, 0},
    };
    cr_assert_eq(cache_apply_remote(C, ST, r, 6, NULL), 0);
    cr_assert_eq(cache_mark_used(C, child(root, "a.md"), now), 0);
    cr_assert_eq(cache_mark_used(C, child(child(root, "d"), "b.md"), now), 0);
    cr_assert_eq(cache_mark_used(C, child(root, "old.md"), now - 2 * hour), 0);
    cr_assert_eq(cache_mark_used(C, child(root, "recent.md"), now), 0);
    uint64_t edited = child(root, "edited.md");
    cr_assert_eq(cache_mark_used(C, edited, now - 3 * hour), 0);
    /* edited.md: saved here now, then pushed; mine.md: made here now */
    char sha_e[65];
    cr_assert_eq(cache_set_content(C, edited, "EDITED-NOW", 10, now, sha_e), 0);
    cr_assert_eq(cache_mark_synced(C, edited, "mem_edited.md", sha_e, "/edited.md"), 0);
    uint64_t mine = made_here("mine.md", "made-here!", now);
    struct cnode n;
    cr_assert_eq(cache_getattr(C, mine, &n), 0);
    cr_expect_geq(n.used_ns, now, "a save here does not stamp the file used");
    cr_expect_eq(n.state, CNODE_CLEAN);
    cnode_clear(&n);
    cr_assert_eq(cache_getattr(C, edited, &n), 0);
    cr_expect_geq(n.used_ns, now, "a save here does not stamp the file used");
    cr_expect_eq(n.state, CNODE_CLEAN);
    cnode_clear(&n);

    /* 7 bytes (a.md, d/b.md) + 5 files of 10: 57; 37 keeps three of the five */
    struct cache_gc_report rep;
    struct cache_policy p = {.max_bytes = 37};
    cr_assert_eq(cache_housekeep(C, &p, NULL, NULL, &rep), 0);
    cr_expect_eq(rep.evicted, 2, "%llu evicted", (unsigned long long)rep.evicted);
    cr_expect(!has("never-open"), "a file never opened was kept");
    cr_expect(!has("opened-2h-"), "the file opened 2 h ago was kept");
    cr_expect(has("opened-now"), "the file opened now was evicted");
    cr_expect(has("made-here!"), "a file made here now was evicted before files opened hours ago");
    cr_expect(has("EDITED-NOW"), "a file saved here now was evicted as if last used 3 h ago");
    cr_expect(has("aaa") && has("bbbb"));
}

static size_t ntombstones(void)
{
    struct cache_tombstone *t = NULL;
    size_t n = 0;
    cr_assert_eq(cache_tombstones(C, ST, &t, &n), 0);
    cache_tombstones_free(t, n);
    return n;
}

/* Renamed over a synced file, a file takes that file's memory and its own
 * is deleted remotely: bytes the collector had evicted could then be
 * fetched from nowhere (the push skipped the file at every sync and an
 * open failed with EIO).  Before the fix the rename succeeded without the
 * content. */
Test(cache_gc, a_file_without_its_content_is_renamed_only_once_it_is_fetched)
{
    struct cache_gc_report rep;
    struct cache_policy p = {.max_bytes = 1};
    cr_assert_eq(cache_housekeep(C, &p, NULL, NULL, &rep), 0);
    cr_assert(!has("aaa") && !has("bbbb"), "nothing was evicted");
    /* a directory moves without the content of the files below */
    cr_expect_eq(cache_rename(C, root, "d", root, "e", 0), 0);
    uint64_t d = child(root, "e"), a = child(root, "a.md");
    cr_expect_eq(cache_rename(C, root, "a.md", d, "b.md", 0), -ENODATA,
                 "an evicted file took over another file's memory");
    cr_expect_eq(ntombstones(), 0, "a refused rename left a deletion");
    cr_expect_eq(child(root, "a.md"), a, "a refused rename moved the file");
    /* the other refusals come first */
    cr_expect_eq(cache_rename(C, root, "a.md", d, "b.md", CACHE_RENAME_NOREPLACE), -EEXIST);
    cr_expect_eq(cache_rename(C, root, "a.md", root, "e", 0), -EISDIR);
    /* a move that keeps its memory needs no content (offline too) */
    cr_assert_eq(cache_rename(C, root, "a.md", root, "c.md", 0), 0);
    cr_assert_eq(cache_rename(C, root, "c.md", root, "a.md", 0), 0);
    cr_expect_eq(ntombstones(), 0);
    /* fetched (as an open would), it moves */
    cr_assert_eq(cache_blob_put(C, sha_a, "aaa", 3), 0);
    cr_assert_eq(cache_rename(C, root, "a.md", d, "b.md", 0), 0);
    struct cnode n;
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect(n.has_content && strcmp(n.sha, sha_a) == 0 && strcmp(n.memory_id, "mem_b") == 0);
    cnode_clear(&n);
    cr_expect_eq(ntombstones(), 1);
}

/* An upload in flight keeps the file's content evictable no more: reverted
 * to its baseline meanwhile, the file is clean, and the upload's answer
 * then makes it dirty with that content again.  Before the fix the
 * collector evicted it, and the answer left a dirty file whose content was
 * nowhere. */
Test(cache_gc, a_file_reverted_while_its_upload_is_out_keeps_its_content)
{
    uint64_t a = child(root, "a.md");
    set(a, "yy");
    struct cache_sent up = send_a(a, "yy");
    set(a, "aaa"); /* back to the baseline: clean */
    struct cache_gc_report rep;
    struct cache_policy p = {.max_bytes = 1};
    cr_assert_eq(cache_housekeep(C, &p, NULL, NULL, &rep), 0);
    cr_expect(!has("bbbb"), "nothing was evicted");
    cr_expect(has("aaa"), "the content of a file whose upload is out was evicted");
    struct cache_answer ans = {.sent_id = up.id, .ino = a, .written_id = "mem_a",
                               .node_id = "mem_a", .memory_id = "mem_a", .sha = up.sha,
                               .path = "/a.md"};
    struct cache_answer_result res;
    cr_assert_eq(cache_push_answered(C, ST, &ans, &res), 0);
    struct cnode n;
    cr_assert_eq(cache_getattr(C, a, &n), 0);
    cr_expect(n.has_content && n.state != CNODE_CLEAN, "the reverted file: content %d, state %d",
              n.has_content, n.state);
    cnode_clear(&n);
}

Test(cache_gc, an_old_cache_is_compacted_at_open)
{
    cache_close(&C);
    /* What an older build left: auto_vacuum off, 300 copies nothing needs. */
    char db[128];
    snprintf(db, sizeof(db), "%s/cache.db", tmp);
    sqlite3 *s;
    cr_assert_eq(sqlite3_open(db, &s), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(s, "PRAGMA auto_vacuum=NONE; VACUUM;", NULL, NULL, NULL), SQLITE_OK);
    static char big[50000];
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(s, "INSERT INTO blobs(sha, data) VALUES (?, ?)", -1, &st,
                                    NULL), SQLITE_OK);
    sqlite3_exec(s, "BEGIN", NULL, NULL, NULL);
    for (int i = 0; i < 300; i++) {
        char key[32];
        snprintf(key, sizeof(key), "old-%d", i);
        memset(big, 'a' + i % 26, sizeof(big));
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
        sqlite3_bind_blob(st, 2, big, sizeof(big), SQLITE_STATIC);
        cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
    }
    sqlite3_exec(s, "COMMIT", NULL, NULL, NULL);
    sqlite3_finalize(st);
    cr_assert_eq(sqlite3_exec(s, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(s);
    struct stat sb;
    cr_assert_eq(stat(db, &sb), 0);
    cr_assert_gt(sb.st_size, 10 * 1000 * 1000);

    cr_assert_eq(cache_open(tmp, &C), 0);
    struct cache_usage u;
    cr_assert_eq(cache_usage(C, &u), 0);
    cr_expect_lt(u.db_bytes + u.wal_bytes, 1024 * 1024, "%llu bytes on disk after the open",
                 (unsigned long long)(u.db_bytes + u.wal_bytes));
    cr_expect(has("aaa") && has("bbbb"), "content still needed was freed");
    cr_expect_eq(u.blobs, 2, "the 300 old copies are still there");
    cr_assert_eq(sqlite3_open(db, &s), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(s, "PRAGMA auto_vacuum", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_eq(sqlite3_column_int(st, 0), 2, "incremental vacuum is not on");
    sqlite3_finalize(st);
    sqlite3_close(s);
}

Test(cache_gc, directories_get_times_and_subdirectory_counts)
{
    uint64_t d = child(root, "d");
    int64_t old = 1000;
    cr_assert_eq(cache_set_times(C, d, &old, &old), 0);
    struct cnode n;
    cr_assert_eq(cache_create(C, d, "sub", true, 5000, NULL), 0);
    cr_assert_eq(cache_getattr(C, d, &n), 0);
    cr_expect_eq(n.subdirs, 1);
    cr_expect_eq(n.mtime_ns, 5000, "mkdir did not set its directory's mtime");
    cr_expect_eq(n.ctime_ns, 5000);
    cr_expect_eq(n.atime_ns, old, "mkdir changed its directory's atime");
    cnode_clear(&n);
    cr_assert_eq(cache_getattr(C, root, &n), 0);
    cr_expect_eq(n.subdirs, 1, "the root has one subdirectory, d");
    cnode_clear(&n);
    /* each change below sets the mtime of the directories it touches */
    cr_assert_eq(cache_set_times(C, d, NULL, &old), 0);
    cr_assert_eq(cache_set_times(C, root, NULL, &old), 0);
    cr_assert_eq(cache_rename(C, d, "b.md", root, "b.md", 0), 0);
    cr_assert_eq(cache_getattr(C, d, &n), 0);
    cr_expect_gt(n.mtime_ns, old, "rename left its source directory's mtime");
    cnode_clear(&n);
    cr_assert_eq(cache_getattr(C, root, &n), 0);
    cr_expect_gt(n.mtime_ns, old, "rename left its target directory's mtime");
    cnode_clear(&n);
    cr_assert_eq(cache_set_times(C, d, NULL, &old), 0);
    cr_assert_eq(cache_unlink(C, d, "sub", true, NULL), 0);
    cr_assert_eq(cache_getattr(C, d, &n), 0);
    cr_expect_gt(n.mtime_ns, old, "rmdir left its directory's mtime");
    cr_expect_eq(n.subdirs, 0);
    cnode_clear(&n);
    /* a memory that appears remotely changes its directory too */
    cr_assert_eq(cache_set_times(C, d, NULL, &old), 0);
    struct cache_remote r[] = {
        {"/a.md", "mem_a", sha_a, 3, 0},
        {"/d/new.md", "mem_n", sha_a, 3, 0},
    };
    cr_assert_eq(cache_apply_remote(C, ST, r, 2, NULL), 0);
    cr_assert_eq(cache_getattr(C, d, &n), 0);
    cr_expect_gt(n.mtime_ns, old, "a remote arrival left its directory's mtime");
    cnode_clear(&n);
}

/* How many OpenEphemeral (a temporary table SQLite builds while the
 * statement runs) the program of sql, triggers included, has. */
static int ephemeral_tables(sqlite3 *s, const char *sql)
{
    char explain[256];
    snprintf(explain, sizeof(explain), "EXPLAIN %s", sql);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(s, explain, -1, &st, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(s));
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW)
        n += strcmp((const char *)sqlite3_column_text(st, 1), "OpenEphemeral") == 0;
    sqlite3_finalize(st);
    return n;
}

static int triggers_named(sqlite3 *s, const char *name)
{
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(s, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"
                                       " AND name = ?", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* The condition under which those triggers freed a blob. */
#define OLD_UNNEEDED                                                                               \
    "blobs.sha != 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'"            \
    " AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.sha = blobs.sha)"                             \
    " AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.base_sha = blobs.sha)"                        \
    " AND NOT EXISTS (SELECT 1 FROM conflicts k WHERE k.local_sha = blobs.sha)"                   \
    " AND NOT EXISTS (SELECT 1 FROM sent x WHERE x.sha = blobs.sha)"

Test(cache_gc, freeing_a_nodes_content_builds_no_temporary_table)
{
    uint64_t a = child(root, "a.md");
    cache_close(&C);
    /* What an older build left: the triggers that freed both hashes of a
     * node with "sha IN (OLD.sha, OLD.base_sha)". */
    char db[128];
    snprintf(db, sizeof(db), "%s/cache.db", tmp);
    sqlite3 *s;
    cr_assert_eq(sqlite3_open(db, &s), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(s,
                              "DROP TRIGGER IF EXISTS blobs_free_node_change;"
                              "DROP TRIGGER IF EXISTS blobs_free_node_gone;"
                              "DROP TRIGGER IF EXISTS blobs_free_node_update;"
                              "DROP TRIGGER IF EXISTS blobs_free_node_delete;"
                              "CREATE TRIGGER blobs_free_node_update AFTER UPDATE OF sha, base_sha"
                              " ON nodes WHEN OLD.sha IS NOT NEW.sha OR OLD.base_sha IS NOT"
                              " NEW.base_sha BEGIN DELETE FROM blobs WHERE sha IN (OLD.sha,"
                              " OLD.base_sha) AND " OLD_UNNEEDED "; END;"
                              "CREATE TRIGGER blobs_free_node_delete AFTER DELETE ON nodes BEGIN"
                              " DELETE FROM blobs WHERE sha IN (OLD.sha, OLD.base_sha) AND "
                              OLD_UNNEEDED "; END;",
                              NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(s));
    cr_assert_gt(ephemeral_tables(s, "UPDATE nodes SET sha = 'x' WHERE ino = 3"), 0,
                 "the old trigger was expected to build a temporary table");
    sqlite3_close(s);

    cr_assert_eq(cache_open(tmp, &C), 0);
    cr_assert_eq(sqlite3_open(db, &s), SQLITE_OK);
    cr_expect_eq(triggers_named(s, "blobs_free_node_update"), 0, "the old update trigger stayed");
    cr_expect_eq(triggers_named(s, "blobs_free_node_delete"), 0, "the old delete trigger stayed");
    cr_expect_eq(ephemeral_tables(s, "UPDATE nodes SET sha = 'x', base_sha = 'y' WHERE ino = 3"),
                 0, "a content or baseline replaced builds a temporary table");
    cr_expect_eq(ephemeral_tables(s, "DELETE FROM nodes WHERE ino = 3"), 0,
                 "a node deleted builds a temporary table");
    sqlite3_close(s);

    /* What the triggers free, after the open replaced them: a synced
     * file's content stays while its baseline names it; rewritten twice,
     * the first rewrite is freed and the baseline kept. */
    set(a, "first rewrite");
    cr_expect(has("aaa"), "the baseline's content was freed");
    set(a, "second rewrite");
    cr_expect_not(has("first rewrite"), "a replaced content was kept");
    cr_expect(has("aaa") && has("second rewrite"));
    /* an unlinked file's node goes at the next attach, with both hashes */
    cr_assert_eq(cache_unlink(C, root, "a.md", false, NULL), 0);
    cr_assert_eq(cache_store_attach(C, ST, false, &root), 0);
    cr_expect_not(has("second rewrite"), "a deleted node's content was kept");
}

/* The content of removed files goes at the next round, but a removed
 * file still open here keeps it, and another store's removed files (a
 * daemon sharing the cache directory knows their open files) are left
 * alone.  Before, a removed file, or every version an editor's save
 * replaced, kept its content until the store's next attach: 200 `sed -i`
 * of a 67 KB file held 13 MB. */
Test(cache_gc, removed_files_free_their_content_unless_open)
{
    uint64_t r2;
    cr_assert_eq(cache_store_attach(C, ST2, false, &r2), 0);
    struct cnode n;
    uint64_t ino[3];
    const char *names[] = {"x.md", "open.md", "y.md"};
    const char *body[] = {"removed x", "removed but open", "removed in another store"};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(cache_create(C, i == 2 ? r2 : root, names[i], false, 1, &n), 0);
        ino[i] = n.ino;
        cnode_clear(&n);
        set(ino[i], body[i]);
        cr_assert_eq(cache_unlink(C, i == 2 ? r2 : root, names[i], false, NULL), 0);
    }
    /* a.md replaced by a rename, as an editor saves */
    uint64_t a = child(root, "a.md");
    cr_assert_eq(cache_create(C, root, "a.md.tmp", false, 1, &n), 0);
    uint64_t tmpf = n.ino;
    cnode_clear(&n);
    set(tmpf, "saved a");
    set(a, "edited a, not pushed");
    cr_assert_eq(cache_rename(C, root, "a.md.tmp", root, "a.md", 0), 0);
    busy_ino = ino[1];
    const char *stores[] = {ST};
    struct cache_policy p = {.stores = stores, .n_stores = 1};
    struct cache_gc_report rep;
    cr_assert_eq(cache_housekeep(C, &p, busy, NULL, &rep), 0);
    cr_expect_eq(rep.unlinked_freed, 2, "%llu", (unsigned long long)rep.unlinked_freed);
    cr_expect(!has("removed x"), "a removed file kept its content");
    cr_expect(!has("edited a, not pushed"), "the version a rename replaced kept its content");
    cr_expect(has("removed but open"), "an open removed file lost its content");
    cr_expect(has("removed in another store"), "another store's removed file lost its content");
    cr_expect(has("saved a") && has("aaa"), "the file and its baseline must stay");
    /* the open one, once closed */
    busy_ino = 0;
    cr_assert_eq(cache_housekeep(C, &p, busy, NULL, &rep), 0);
    cr_expect_eq(rep.unlinked_freed, 1);
    cr_expect(!has("removed but open"));
    cr_assert_eq(cache_getattr(C, ino[1], &n), 0, "the node itself must stay");
    cnode_clear(&n);
    /* a store taken out of the list (unmounted: another daemon may mount
     * it now) is left alone */
    cr_assert_eq(cache_create(C, root, "z.md", false, 1, &n), 0);
    uint64_t z = n.ino;
    cnode_clear(&n);
    set(z, "removed after the unmount");
    cr_assert_eq(cache_unlink(C, root, "z.md", false, NULL), 0);
    stores[0] = NULL;
    cr_assert_eq(cache_housekeep(C, &p, busy, NULL, &rep), 0);
    cr_expect_eq(rep.unlinked_freed, 0);
    cr_expect(has("removed after the unmount"));
}
