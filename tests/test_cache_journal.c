/* test_cache_journal.c - the journal of closed files (cache/journal.c),
 * without a mount: a close's content (cache_save_closed) has no commit of
 * its own, so a process killed right after the call must find it again at
 * the next cache_open, from the journal: new files, overwrites, files in
 * directories; a record a commit already carried is not applied twice; a
 * torn record ends the replay; what a committed epoch left past the next
 * epoch's records (the file is written over from offset 0, not emptied)
 * is never replayed, even bytes that make a whole record of that epoch;
 * a record that has no place any more (its
 * store became read-only) is kept as a conflict record; a live process's
 * journal is left alone; a clean close leaves no journal behind; and
 * when a commit fails (here SQLite's commit hook turns it into a
 * rollback), the closes it carried come back from the journal before the
 * next change, or on their own a second later; so they do when SQLite
 * rolls the lazy transaction back itself outside any part.
 *
 * Each crash is a forked child that saves and then _exits at once, its
 * saver held (saver_held), so that no commit of the saver's comes between
 * its closes however slowly it runs (a sanitizer build on a loaded
 * machine took more than the saver's 5 ms between two closes). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cache.h"
#include "db_internal.h" /* the connection, to make one commit fail */
#include "failcommit.h"

static char dir[64], sub[96];
#define ST "memstore_j"

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mfs-cj-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/cache", dir);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(cache_journal, .init = setup, .fini = teardown, .timeout = 30);

static struct cache *open_store(uint64_t *root, bool read_only)
{
    struct cache *c = NULL;
    cr_assert_eq(cache_open(sub, &c), 0);
    cr_assert_eq(cache_store_attach(c, ST, read_only, root), 0);
    return c;
}

/* Runs body in a child that dies right after it (no cache_close). */
static void crash_after(void (*body)(struct cache *c, uint64_t root))
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct cache *k = NULL;
        uint64_t r = 0;
        if (cache_open(sub, &k) || cache_store_attach(k, ST, false, &r))
            _exit(2);
        /* What is in the database at the kill is what the closes put
         * there, not what the saver had time to commit on a slow run. */
        db_lock(k);
        k->saver_held = true;
        db_unlock(k);
        body(k, r);
        _exit(0);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed: %d", status);
}

/* The content of path (below root, one level of directory at most). */
static char *content(struct cache *c, uint64_t root, const char *d, const char *name)
{
    struct cnode n, p;
    uint64_t parent = root;
    if (d) {
        if (cache_lookup(c, root, d, &p) != 0)
            return NULL;
        parent = p.ino;
        cnode_clear(&p);
    }
    if (cache_lookup(c, parent, name, &n) != 0)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc = cache_blob_get(c, n.sha, &buf, &len);
    cnode_clear(&n);
    if (rc)
        return NULL;
    char *s = strndup(buf, len);
    free(buf);
    return s;
}

static void expect_content(struct cache *c, uint64_t root, const char *d, const char *name,
                           const char *want)
{
    char *got = content(c, root, d, name);
    cr_expect(got && strcmp(got, want) == 0, "%s: '%s', not '%s'", name, got ? got : "(none)",
              want);
    free(got);
}

static size_t n_conflicts(struct cache *c)
{
    struct cache_conflict *v = NULL;
    size_t n = 0;
    cr_assert_eq(cache_conflicts(c, ST, &v, &n), 0);
    cache_conflicts_free(v, n);
    return n;
}

/* The journal files in the cache directory; the first one's path. */
static int journals(char *first, size_t len)
{
    DIR *d = opendir(sub);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "journal-", 8) == 0 && n++ == 0 && first)
            (void)!snprintf(first, len, "%.100s/%.255s", sub, e->d_name);
    closedir(d);
    return n;
}

static uint64_t new_file(struct cache *k, uint64_t parent, const char *name, const char *body,
                         char sha[SHA256_HEX_LEN + 1])
{
    struct cnode f;
    if (cache_create_open(k, parent, name, 1, &f) ||
        cache_save_closed(k, f.ino, body, strlen(body), 5, f.sha, sha))
        _exit(3);
    uint64_t ino = f.ino;
    cnode_clear(&f);
    return ino;
}

static void many_closes(struct cache *k, uint64_t r)
{
    struct cnode d, old;
    char sha[SHA256_HEX_LEN + 1], old_sha[SHA256_HEX_LEN + 1];
    /* committed before: a directory, and a file with content */
    if (cache_create(k, r, "sub", true, 1, &d) || cache_create(k, r, "old.md", false, 1, &old) ||
        cache_set_content(k, old.ino, "old", 3, 2, old_sha))
        _exit(4);
    new_file(k, r, "new.md", "new\n", NULL);
    new_file(k, d.ino, "deep.md", "deep\n", NULL);
    uint64_t twice = new_file(k, r, "twice.md", "first\n", sha);
    if (cache_save_closed(k, twice, "second\n", 7, 6, sha, NULL) ||
        cache_save_closed(k, old.ino, "old and edited\n", 15, 7, old_sha, NULL))
        _exit(5);
    cnode_clear(&d);
    cnode_clear(&old);
}

Test(cache_journal, a_crash_right_after_closes_loses_none_of_them)
{
    crash_after(many_closes);
    uint64_t root;
    struct cache *c = open_store(&root, false);
    expect_content(c, root, NULL, "new.md", "new\n");
    expect_content(c, root, "sub", "deep.md", "deep\n");
    expect_content(c, root, NULL, "twice.md", "second\n");
    expect_content(c, root, NULL, "old.md", "old and edited\n");
    struct cnode n;
    cr_assert_eq(cache_lookup(c, root, "new.md", &n), 0);
    cr_expect_eq(n.unsaved, CACHE_SAVED, "held content not saved at the attach");
    cr_expect_eq(n.state, CNODE_DIRTY, "a recovered file is not dirty");
    cnode_clear(&n);
    cr_expect_eq(n_conflicts(c), 0, "a replayed close became a conflict record");
    cr_expect_eq(journals(NULL, 0), 0, "the replayed journal was not removed");
    cache_close(&c);
}

/* Another process opens the cache (a second daemon starting, memstorefs
 * flush) right as this one makes its journal, before its lock: it finds
 * an empty journal no one holds, takes it for a dead daemon's and removes
 * it (cache/journal.c, replay_dead: lock, nothing to apply, unlink).  The
 * closes after that must not go into the removed file. */
static bool raced;

static void removed_by_another(struct cache *k, const char *path)
{
    (void)k;
    if (raced)
        return;
    raced = true;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0 || unlink(path) != 0)
        _exit(10);
    close(fd);
}

static void closes_after_a_racing_open(struct cache *k, uint64_t r)
{
    struct cnode old;
    char old_sha[SHA256_HEX_LEN + 1];
    /* Committed, so the first journaled close below makes the journal. */
    if (cache_create(k, r, "old.md", false, 1, &old) ||
        cache_set_content(k, old.ino, "old", 3, 2, old_sha))
        _exit(4);
    k->journal_made = removed_by_another;
    if (cache_save_closed(k, old.ino, "old and edited\n", 15, 7, old_sha, NULL))
        _exit(5);
    new_file(k, r, "new.md", "new\n", NULL);
    cnode_clear(&old);
}

Test(cache_journal, a_journal_another_process_removed_before_its_lock_is_not_used)
{
    crash_after(closes_after_a_racing_open);
    uint64_t root;
    struct cache *c = open_store(&root, false);
    expect_content(c, root, NULL, "old.md", "old and edited\n");
    expect_content(c, root, NULL, "new.md", "new\n");
    cr_expect_eq(journals(NULL, 0), 0, "the replayed journal was not removed");
    cache_close(&c);
}

static char saved_journal[4096];
static ssize_t saved_len;

static void close_then_commit(struct cache *k, uint64_t r)
{
    char sha[SHA256_HEX_LEN + 1], path[512];
    uint64_t ino = new_file(k, r, "a.md", "one\n", sha);
    /* What the journal holds now, as a crash between the commit and the
     * journal's emptying would leave it. */
    if (journals(path, sizeof(path)) != 1)
        _exit(6);
    int fd = open(path, O_RDONLY);
    saved_len = fd >= 0 ? read(fd, saved_journal, sizeof(saved_journal)) : -1;
    if (fd < 0 || saved_len <= 0)
        _exit(7);
    close(fd);
    /* A commit of its own (not a close): it carries the record's epoch. */
    if (cache_set_content(k, ino, "two\n", 4, 9, NULL))
        _exit(8);
    fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, saved_journal, (size_t)saved_len, 0) != saved_len)
        _exit(9);
    close(fd);
}

Test(cache_journal, records_a_commit_carried_are_not_applied_again)
{
    crash_after(close_then_commit);
    uint64_t root;
    struct cache *c = open_store(&root, false);
    expect_content(c, root, NULL, "a.md", "two\n");
    cr_expect_eq(n_conflicts(c), 0, "a committed record was applied again");
    cache_close(&c);
}

static void two_closes(struct cache *k, uint64_t r)
{
    new_file(k, r, "whole.md", "whole\n", NULL);
    new_file(k, r, "torn.md", "torn record\n", NULL);
}

Test(cache_journal, a_torn_record_ends_the_replay)
{
    crash_after(two_closes);
    char path[512];
    cr_assert_eq(journals(path, sizeof(path)), 1);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(truncate(path, sb.st_size - 3), 0); /* killed while writing the last */
    uint64_t root;
    struct cache *c = open_store(&root, false);
    expect_content(c, root, NULL, "whole.md", "whole\n");
    struct cnode n;
    cr_expect_neq(cache_lookup(c, root, "torn.md", &n), 0, "a torn record was applied");
    cache_close(&c);
}

/* The bytes of one journal record, as the daemon wrote it: a close of
 * evil.md in the second epoch of a journal, taken from a cache of its own
 * (so that it is never replayed there), for the next test to hide in a
 * file's content. */
static char evil_rec[1024];
static size_t evil_len;

static size_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

/* The committed first epoch: a close of `first` (content body), then a
 * commit of its own; the second epoch's first close follows. */
static struct cnode epoch_one(struct cache *k, uint64_t r, const char *first, const char *body,
                              size_t len, size_t *size_after)
{
    struct cnode o, f;
    char path[512];
    if (cache_create(k, r, "other.md", false, 1, &o) ||
        cache_create_open(k, r, first, 1, &f) ||
        cache_save_closed(k, f.ino, body, len, 2, f.sha, NULL) ||
        journals(path, sizeof(path)) != 1)
        _exit(10);
    *size_after = file_size(path);
    if (cache_set_content(k, o.ino, "x", 1, 3, NULL)) /* commits: the epoch ends */
        _exit(11);
    cnode_clear(&f);
    return o;
}

static void record_evil(struct cache *k, uint64_t r)
{
    char pad[100], path[512];
    memset(pad, 'p', sizeof(pad));
    size_t size = 0;
    struct cnode o = epoch_one(k, r, "pad.md", pad, sizeof(pad), &size);
    cnode_clear(&o);
    /* The header, the store id and the path, as pad.md's record had them. */
    size_t head = size - strlen("pad.md") - sizeof(pad);
    new_file(k, r, "evil.md", "evil\n", NULL);
    evil_len = head + strlen("evil.md") + 5;
    int fd = journals(path, sizeof(path)) == 1 ? open(path, O_RDONLY) : -1;
    if (fd < 0 || evil_len > sizeof(evil_rec) || pread(fd, evil_rec, evil_len, 0) != (ssize_t)evil_len)
        _exit(12);
    close(fd);
    char out[128];
    snprintf(out, sizeof(out), "%s/evil.rec", dir);
    fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, evil_rec, evil_len) != (ssize_t)evil_len)
        _exit(13);
    close(fd);
}

static char big[2048];
static size_t big_len;

/* big.md's content hides evil.md's record exactly where small.md's record,
 * the second epoch's first, ends: a replay that read past small.md's
 * record would take it for the next record of the open epoch. */
static void hide_then_close(struct cache *k, uint64_t r)
{
    size_t size = 0;
    struct cnode o = epoch_one(k, r, "big.md", big, big_len, &size);
    cnode_clear(&o);
    new_file(k, r, "small.md", "small\n", NULL);
}

Test(cache_journal, what_a_committed_epoch_left_past_the_records_is_never_replayed)
{
    char tmpl[96];
    snprintf(tmpl, sizeof(tmpl), "%s", sub);
    snprintf(sub, sizeof(sub), "%s/tmpl", dir);
    crash_after(record_evil);
    snprintf(sub, sizeof(sub), "%s", tmpl);
    char in[128];
    snprintf(in, sizeof(in), "%s/evil.rec", dir);
    int fd = open(in, O_RDONLY);
    cr_assert_geq(fd, 0);
    ssize_t n = read(fd, evil_rec, sizeof(evil_rec));
    close(fd);
    cr_assert_gt(n, 0);
    evil_len = (size_t)n;
    /* small.md's record is 8 bytes longer than the header and path of
     * big.md's ("small.md" is 2 longer than "big.md", "small\n" is 6). */
    memset(big, 'b', 8);
    memcpy(big + 8, evil_rec, evil_len);
    memcpy(big + 8 + evil_len, "tail\n", 5);
    big_len = 8 + evil_len + 5;
    crash_after(hide_then_close);
    uint64_t root;
    struct cache *c = open_store(&root, false);
    expect_content(c, root, NULL, "small.md", "small\n");
    struct cnode e;
    bool replayed = cache_lookup(c, root, "evil.md", &e) == 0;
    cr_expect_not(replayed, "a committed epoch's bytes were replayed");
    if (replayed)
        cnode_clear(&e);
    struct cnode b;
    cr_assert_eq(cache_lookup(c, root, "big.md", &b), 0);
    char *buf = NULL;
    size_t len = 0;
    cr_assert_eq(cache_blob_get(c, b.sha, &buf, &len), 0);
    cr_expect(len == big_len && memcmp(buf, big, big_len) == 0, "big.md changed");
    free(buf);
    cnode_clear(&b);
    char *got = content(c, root, NULL, "other.md");
    cr_expect(got && strcmp(got, "x") == 0, "other.md: '%s'", got ? got : "(none)");
    free(got);
    cr_expect_eq(n_conflicts(c), 0, "a committed epoch's bytes became a conflict record");
    cache_close(&c);
}

/* Files removed while open, then written and closed (the rm commits at
 * once; the closes' records wait for the saver): a new file, and one with
 * committed content. */
static void closes_after_rm(struct cache *k, uint64_t r)
{
    struct cnode f, o;
    char old_sha[SHA256_HEX_LEN + 1];
    uint64_t ino = 0;
    if (cache_create(k, r, "old.md", false, 1, &o) ||
        cache_set_content(k, o.ino, "old\n", 4, 2, old_sha) ||
        cache_create_open(k, r, "ghost.md", 3, &f) ||
        cache_unlink(k, r, "ghost.md", false, &ino) || cache_unlink(k, r, "old.md", false, &ino) ||
        cache_save_closed(k, f.ino, "ghost\n", 6, 4, f.sha, NULL) ||
        cache_save_closed(k, o.ino, "old, edited\n", 12, 5, old_sha, NULL))
        _exit(6);
    cnode_clear(&f);
    cnode_clear(&o);
}

Test(cache_journal, a_file_removed_while_open_does_not_come_back)
{
    crash_after(closes_after_rm);
    uint64_t root;
    struct cache *c = open_store(&root, false);
    struct cnode n;
    bool back = cache_lookup(c, root, "ghost.md", &n) == 0;
    cr_expect_not(back, "a file removed while open came back after the crash");
    if (back)
        cnode_clear(&n);
    back = cache_lookup(c, root, "old.md", &n) == 0;
    cr_expect_not(back, "a file with content removed while open came back after the crash");
    if (back)
        cnode_clear(&n);
    cr_expect_eq(n_conflicts(c), 0, "a removed file's close became a conflict record");
    cache_close(&c);
}

/* A file never synced that the sync dropped (the store won at its path)
 * while its writer still had it open: the writer's close is a conflict
 * record live, and after a crash too. */
static void close_after_drop(struct cache *k, uint64_t r)
{
    struct cnode f;
    char sha[SHA256_HEX_LEN + 1];
    uint64_t parent = 0;
    if (cache_create(k, r, "mine.md", false, 1, &f) ||
        cache_set_content(k, f.ino, "mine\n", 5, 2, sha))
        _exit(7);
    if (cache_drop_if(k, f.ino, sha, "/mine.md", &parent, NULL))
        _exit(8);
    /* -ESTALE: the close lost to the store, its bytes kept (live, a
     * conflict record in the lazy transaction; the journal has them) */
    if (cache_save_closed(k, f.ino, "mine, more\n", 11, 3, sha, NULL) != -ESTALE)
        _exit(9);
    cnode_clear(&f);
}

Test(cache_journal, a_close_of_a_file_the_sync_dropped_is_kept_after_a_crash)
{
    crash_after(close_after_drop);
    struct cache *c = NULL;
    cr_assert_eq(cache_open(sub, &c), 0);
    struct cache_conflict *v = NULL;
    size_t n = 0;
    cr_assert_eq(cache_conflicts(c, ST, &v, &n), 0);
    cr_expect_eq(n, 1, "the close was lost: %zu conflict records", n);
    if (n == 1) {
        char *buf = NULL;
        size_t len = 0;
        cr_assert_eq(cache_conflict_content(c, v[0].id, &buf, &len), 0);
        cr_expect(len == 11 && memcmp(buf, "mine, more\n", 11) == 0);
        free(buf);
    }
    cache_conflicts_free(v, n);
    cache_close(&c);
}

Test(cache_journal, a_record_with_no_place_is_kept_as_a_conflict)
{
    crash_after(two_closes);
    /* The store became read-only before the next start. */
    char db[200];
    snprintf(db, sizeof(db), "%s/cache.db", sub);
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, "UPDATE stores SET read_only = 1", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    struct cache *c = NULL;
    cr_assert_eq(cache_open(sub, &c), 0);
    struct cache_conflict *v = NULL;
    size_t n = 0;
    cr_assert_eq(cache_conflicts(c, ST, &v, &n), 0);
    cr_expect_eq(n, 2, "records lost: %zu conflict records, not 2", n);
    for (size_t i = 0; i < n; i++) {
        char *buf = NULL;
        size_t len = 0;
        cr_assert_eq(cache_conflict_content(c, v[i].id, &buf, &len), 0);
        bool whole = strcmp(v[i].path, "/whole.md") == 0;
        cr_expect(whole || strcmp(v[i].path, "/torn.md") == 0, "%s", v[i].path);
        const char *want = whole ? "whole\n" : "torn record\n";
        cr_expect(len == strlen(want) && memcmp(buf, want, len) == 0);
        free(buf);
    }
    cache_conflicts_free(v, n);
    cache_close(&c);
}

Test(cache_journal, a_live_journal_is_left_alone_and_a_clean_close_removes_it)
{
    uint64_t root;
    struct cache *c = open_store(&root, false);
    struct cnode f;
    cr_assert_eq(cache_create_open(c, root, "live.md", 1, &f), 0);
    cr_assert_eq(cache_save_closed(c, f.ino, "live\n", 5, 2, f.sha, NULL), 0);
    cnode_clear(&f);
    cr_assert_eq(journals(NULL, 0), 1);
    /* Another process (here another open of the same directory) starts. */
    struct cache *other = NULL;
    cr_assert_eq(cache_open(sub, &other), 0);
    cr_expect_eq(journals(NULL, 0), 1, "a live journal was taken");
    cr_expect_eq(n_conflicts(other), 0);
    cache_close(&other);
    expect_content(c, root, NULL, "live.md", "live\n");
    cache_close(&c);
    cr_expect_eq(journals(NULL, 0), 0, "a clean close left its journal");
    c = open_store(&root, false);
    expect_content(c, root, NULL, "live.md", "live\n");
    cache_close(&c);
}

/* A file closed into the lazy transaction, which a failed commit then
 * rolls back: the file's node and content are gone from the database. */
static void close_then_fail_commit(struct cache *c, uint64_t root)
{
    struct cnode f, g;
    hold_saver(c, true);
    cr_assert_eq(cache_create_open(c, root, "lost.md", 1, &f), 0);
    cr_assert_eq(cache_create(c, root, "other.md", false, 1, &g), 0);
    fail_next_commits(c->db, 1);
    cr_assert_eq(cache_save_closed(c, f.ino, "closed\n", 7, 2, f.sha, NULL), 0);
    int64_t t = 5;
    (void)cache_set_times(c, g.ino, NULL, &t); /* its commit carries the close */
    cr_assert_eq(fail_commits, 0, "no commit came");
    hold_saver(c, false);
    cnode_clear(&f);
    cnode_clear(&g);
}

/* The next change (a directory made) applies the stuck journal first:
 * name has body then, with no conflict, and again after a restart.  Closes
 * the cache. */
static void back_at_the_next_change(struct cache *c, uint64_t root, const char *name,
                                    const char *body)
{
    struct cnode d;
    cr_assert_eq(cache_create(c, root, "next", true, 3, &d), 0, "the next change failed");
    cnode_clear(&d);
    expect_content(c, root, NULL, name, body);
    cr_expect_eq(n_conflicts(c), 0);
    cache_close(&c);
    c = open_store(&root, false);
    expect_content(c, root, NULL, name, body);
    cache_close(&c);
}

Test(cache_journal, closes_a_failed_commit_dropped_come_back_before_the_next_change)
{
    uint64_t root;
    struct cache *c = open_store(&root, false);
    close_then_fail_commit(c, root);
    back_at_the_next_change(c, root, "lost.md", "closed\n");
}

Test(cache_journal, closes_a_failed_commit_dropped_come_back_on_their_own)
{
    uint64_t root;
    struct cache *c = open_store(&root, false);
    close_then_fail_commit(c, root);
    char *got = content(c, root, NULL, "lost.md");
    cr_expect(!got || strcmp(got, "closed\n") != 0, "the failed commit kept the close");
    for (int i = 0; i < 300 && (!got || strcmp(got, "closed\n") != 0); i++) {
        free(got);
        usleep(10 * 1000);
        got = content(c, root, NULL, "lost.md");
    }
    cr_expect(got && strcmp(got, "closed\n") == 0, "not back within 3 s: '%s'",
              got ? got : "(none)");
    free(got);
    cache_close(&c);
}

/* A write of one statement (touch's times) made while closes wait in the
 * lazy transaction is durable only with that transaction's commit: when
 * the commit fails, the call says so instead of reporting a change the
 * database does not hold. */
Test(cache_journal, a_write_whose_commit_fails_reports_the_failure)
{
    uint64_t root;
    struct cache *c = open_store(&root, false);
    hold_saver(c, true);
    struct cnode f, g;
    cr_assert_eq(cache_create_open(c, root, "a.md", 1, &f), 0);
    cr_assert_eq(cache_create(c, root, "b.md", false, 1, &g), 0);
    cr_assert_eq(cache_save_closed(c, f.ino, "a\n", 2, 2, f.sha, NULL), 0);
    fail_next_commits(c->db, 1);
    int64_t t = 5;
    int rc = cache_set_times(c, g.ino, NULL, &t);
    cr_assert_eq(fail_commits, 0, "no commit came");
    hold_saver(c, false);
    cr_expect_lt(rc, 0, "a failed commit reported as success");
    struct cnode got;
    cr_assert_eq(cache_getattr(c, g.ino, &got), 0);
    cr_expect_neq(got.mtime_ns, 5, "the time is there after all: then the call must succeed");
    cnode_clear(&got);
    cnode_clear(&f);
    cnode_clear(&g);
    struct cnode d;
    cr_assert_eq(cache_create(c, root, "next", true, 3, &d), 0);
    cnode_clear(&d);
    expect_content(c, root, NULL, "a.md", "a\n"); /* the close came back */
    cache_close(&c);
}

/* cache_save_closed_then: the close is told it is durable once its
 * record is written, before its content is stored.  A process that dies
 * inside that call (the FUSE answer just sent) loses nothing. */
static void die_when_told(void *arg)
{
    (void)arg;
    _exit(0);
}

static void close_and_die_when_told(struct cache *k, uint64_t r)
{
    struct cnode f, old;
    char old_sha[SHA256_HEX_LEN + 1];
    if (cache_create(k, r, "old.md", false, 1, &old) ||
        cache_set_content(k, old.ino, "old", 3, 2, old_sha))
        _exit(4);
    if (cache_create_open(k, r, "told.md", 1, &f))
        _exit(3);
    /* an earlier close of the same lazy transaction, and this one */
    if (cache_save_closed(k, old.ino, "old, edited\n", 12, 3, old_sha, NULL))
        _exit(5);
    struct cache_then then = {die_when_told, NULL};
    cache_save_closed_then(k, f.ino, "told\n", 5, 4, f.sha, &then, NULL);
    _exit(6); /* not told */
}

Test(cache_journal, a_close_told_durable_survives_a_crash_at_once)
{
    crash_after(close_and_die_when_told);
    uint64_t root;
    struct cache *c = open_store(&root, false);
    expect_content(c, root, NULL, "told.md", "told\n");
    expect_content(c, root, NULL, "old.md", "old, edited\n");
    cr_expect_eq(n_conflicts(c), 0);
    cache_close(&c);
}

static int told;

static void count_told(void *arg)
{
    (void)arg;
    told++;
}

/* The blobs' insert of one content fails (a temporary trigger of the
 * cache's own connection): the failure comes after the close's record. */
static void fail_puts_of(struct cache *c, const char *data)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "CREATE TEMP TRIGGER put_fails BEFORE INSERT ON blobs"
                               " WHEN NEW.data = CAST('%s' AS BLOB)"
                               " BEGIN SELECT RAISE(ABORT, 'injected'); END", data);
    cr_assert_eq(sqlite3_exec(c->db, sql, NULL, NULL, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(c->db));
}

Test(cache_journal, a_failure_after_the_record_leaves_the_close_saved)
{
    uint64_t root;
    struct cache *c = open_store(&root, false);
    fail_puts_of(c, "late\n"); /* outside the transaction: it outlives its rollback */
    /* Another file's writer finished just before: its mark rides on the
     * failed part, and must not be lost with it. */
    struct cnode done;
    cr_assert_eq(cache_create(c, root, "done.md", false, 1, &done), 0);
    cr_assert_eq(cache_set_content_if(c, done.ino, "done\n", 5, 2, done.sha, true, NULL), 0);
    struct cnode f;
    cr_assert_eq(cache_create_open(c, root, "late.md", 1, &f), 0);
    cr_assert_eq(cache_mark_saved(c, done.ino), 0);
    told = 0;
    struct cache_then then = {count_told, NULL};
    char sha[SHA256_HEX_LEN + 1] = "";
    int rc = cache_save_closed_then(c, f.ino, "late\n", 5, 2, f.sha, &then, sha);
    cr_expect_eq(told, 1, "told %d times", told);
    cr_expect_eq(rc, 0, "a close told durable failed afterwards: %d", rc);
    cr_expect_str_neq(sha, "", "no hash for a saved close");
    /* The transaction was abandoned: the lazy create went with it, and
     * the journal holds the close until it can be applied. */
    cr_expect_neq(cache_getattr(c, f.ino, &(struct cnode){0}), 0,
                  "the failed part was committed after all");
    cr_expect_eq(journals(NULL, 0), 1);
    cr_assert_eq(sqlite3_exec(c->db, "DROP TRIGGER temp.put_fails", NULL, NULL, NULL), SQLITE_OK,
                 "%s", sqlite3_errmsg(c->db));
    cnode_clear(&f);
    struct cnode n;
    cr_assert_eq(cache_create(c, root, "after", true, 3, &n), 0);
    cnode_clear(&n);
    cr_assert_eq(cache_getattr(c, done.ino, &n), 0);
    cr_expect_eq(n.unsaved, CACHE_SAVED, "a mark written by the failed part was lost with it");
    cnode_clear(&n);
    cnode_clear(&done);
    back_at_the_next_change(c, root, "late.md", "late\n");
}

/* A failure before the record (the file is gone) is the close's error,
 * and nobody is told. */
Test(cache_journal, a_failure_before_the_record_is_the_closes_error)
{
    uint64_t root;
    struct cache *c = open_store(&root, false);
    struct cnode d;
    cr_assert_eq(cache_create(c, root, "dir", true, 1, &d), 0);
    told = 0;
    struct cache_then then = {count_told, NULL};
    cr_expect_eq(cache_save_closed_then(c, d.ino, "x\n", 2, 2, NULL, &then, NULL), -EISDIR);
    cr_expect_eq(cache_save_closed_then(c, 999999, "x\n", 2, 2, NULL, &then, NULL), -ENOENT);
    cr_expect_eq(told, 0, "told of a close that failed");
    cnode_clear(&d);
    cache_close(&c);
}

/* An open's create is told before its row is written.  When the lazy
 * transaction that holds the row then fails to commit, the row and the
 * sequence's move past its ino are undone, while the kernel still holds
 * the ino for that file: no later node may take it. */
Test(cache_journal, an_ino_told_for_a_row_a_failed_commit_undid_is_not_reused)
{
    uint64_t root;
    struct cache *c = open_store(&root, false);
    hold_saver(c, true);
    struct cnode f, g;
    told = 0;
    struct cache_then then = {count_told, NULL};
    cr_assert_eq(cache_create_open_then(c, root, "told.md", 1, &f, &then), 0);
    cr_assert_eq(told, 1);
    fail_next_commits(c->db, 1);
    cr_expect_neq(cache_create(c, root, "other.md", false, 1, &g), 0,
                  "the commit carrying the lazy create did not fail");
    cr_assert_eq(fail_commits, 0, "no commit came");
    hold_saver(c, false);
    struct cnode x;
    cr_expect_eq(cache_lookup(c, root, "told.md", &x), -ENOENT);
    cr_assert_eq(cache_create_open_then(c, root, "next.md", 1, &g, &then), 0);
    cr_expect_neq(g.ino, f.ino, "a new file took the ino told for one a failed commit undid");
    cnode_clear(&g);
    cr_assert_eq(cache_create(c, root, "dir", true, 1, &g), 0);
    cr_expect_neq(g.ino, f.ino, "a directory took the ino told for a file a failed commit undid");
    cnode_clear(&g);
    cnode_clear(&f);
    cache_close(&c);
}

/* The same, when the file was also closed: its close comes back from the
 * journal as the file the kernel holds, under the ino it was told, not as
 * a new node the kernel's entry for the name does not point to (a stat
 * of it failed, and its writer's next close with ENOENT). */
Test(cache_journal, a_told_file_a_failed_commit_undid_comes_back_under_its_ino)
{
    uint64_t root;
    struct cache *c = open_store(&root, false);
    hold_saver(c, true);
    struct cnode f, g;
    told = 0;
    struct cache_then then = {count_told, NULL};
    cr_assert_eq(cache_create_open_then(c, root, "told.md", 1, &f, &then), 0);
    cr_assert_eq(told, 1);
    cr_assert_eq(cache_save_closed(c, f.ino, "closed\n", 7, 2, f.sha, NULL), 0);
    fail_next_commits(c->db, 1);
    cr_expect_neq(cache_create(c, root, "other.md", false, 1, &g), 0,
                  "the commit carrying the lazy create did not fail");
    cr_assert_eq(fail_commits, 0, "no commit came");
    hold_saver(c, false);
    cr_assert_eq(cache_create(c, root, "next", true, 3, &g), 0, "the next change failed");
    cnode_clear(&g);
    struct cnode x;
    cr_assert_eq(cache_lookup(c, root, "told.md", &x), 0, "the close did not come back");
    cr_expect_eq(x.ino, f.ino, "it came back as another inode (%llu, told %llu)",
                 (unsigned long long)x.ino, (unsigned long long)f.ino);
    cnode_clear(&x);
    expect_content(c, root, NULL, "told.md", "closed\n");
    cnode_clear(&f);
    cache_close(&c);
}

/* SQLite may roll the whole transaction back on its own (SQLITE_FULL,
 * IOERR, NOMEM), here made by a trigger's RAISE(ROLLBACK), in a statement
 * that runs inside the lazy transaction but outside any part: the sync's
 * read of what it may push writes the saved marks waiting first.  The
 * lazy work is then gone: the next change must not take it for still
 * open, and no node may take the ino told for the create it undid. */
Test(cache_journal, a_rollback_outside_a_part_ends_the_lazy_transaction)
{
    uint64_t root;
    struct cache *c = open_store(&root, false);
    struct cnode h, f, g;
    told = 0;
    struct cache_then then = {count_told, NULL};
    bool hit = false;
    /* The saver writes the mark itself a few milliseconds after it is
     * made: tried again until the sync's read was first. */
    for (int attempt = 0; attempt < 20 && !hit; attempt++) {
        char name[32];
        snprintf(name, sizeof(name), "held%d.md", attempt);
        cr_assert_eq(cache_create_open(c, root, name, 1, &h), 0);
        cr_assert_eq(cache_set_content_if(c, h.ino, "x", 1, 2, h.sha, true, NULL), 0);
        char sql[256];
        snprintf(sql, sizeof(sql),
                 "DROP TRIGGER IF EXISTS temp.undo_all; CREATE TEMP TRIGGER undo_all AFTER UPDATE"
                 " OF unsaved ON main.nodes WHEN NEW.ino = %llu AND NEW.unsaved = 0"
                 " BEGIN SELECT RAISE(ROLLBACK, 'undone'); END",
                 (unsigned long long)h.ino);
        cr_assert_eq(sqlite3_exec(c->db, sql, NULL, NULL, NULL), SQLITE_OK);
        snprintf(name, sizeof(name), "told%d.md", attempt);
        cr_assert_eq(cache_create_open_then(c, root, name, 1, &f, &then), 0); /* lazy */
        cr_assert_eq(cache_mark_saved(c, h.ino), 0);
        bool work = false;
        hit = cache_store_has_local_work(c, ST, false, &work) != 0;
        if (!hit) {
            cnode_clear(&f);
            cnode_clear(&h);
        }
    }
    cr_assert(hit, "the saver wrote the mark first every time");
    cr_assert_eq(sqlite3_exec(c->db, "DROP TRIGGER temp.undo_all", NULL, NULL, NULL), SQLITE_OK);
    cr_assert_eq(cache_create_open_then(c, root, "next.md", 1, &g, &then), 0);
    cr_expect_neq(g.ino, f.ino, "a new file took the ino told for one SQLite's rollback undid");
    cnode_clear(&g);
    /* Past the saver's delays: waited for (a loaded machine can wake the
     * saver late), 2 s at most. */
    for (int i = 0; i < 200 && !sqlite3_get_autocommit(c->db); i++)
        usleep(10 * 1000);
    struct cnode x;
    cr_expect_eq(cache_lookup(c, root, "next.md", &x), 0, "the next create was lost");
    cnode_clear(&x);
    cr_expect_eq(sqlite3_get_autocommit(c->db), 1, "a transaction was left open (2 s on)");
    cr_assert_eq(cache_getattr(c, h.ino, &x), 0);
    cr_expect_eq(x.unsaved, CACHE_SAVED, "the held file's mark was lost");
    cnode_clear(&x);
    cnode_clear(&f);
    cnode_clear(&h);
    cache_close(&c);
}
