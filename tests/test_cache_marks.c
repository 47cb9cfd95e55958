/* test_cache_marks.c - what a failed commit of the lazy transaction
 * undoes besides the closes it carried, without a mount: the "saved"
 * marks (cache/saved.c) come back once the journal's records are applied
 * again, a record replacing the marks of its file written before it; and
 * the replay names the nodes it changed to the hook (cache_on_replay),
 * from the saver thread, without the cache's lock. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cache.h"
#include "db_internal.h" /* the connection, to make one commit fail */
#include "failcommit.h"
#include "log.h"

static char dir[64];
static struct cache *C;
static uint64_t root;
#define ST "memstore_m"

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mfs-cm-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(cache_open(dir, &C), 0);
    cr_assert_eq(cache_store_attach(C, ST, false, &root), 0);
}

static void teardown(void)
{
    cache_close(&C);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(cache_marks, .init = setup, .fini = teardown, .timeout = 30);

static int unsaved_of(uint64_t ino)
{
    struct cnode n;
    int rc = cache_getattr(C, ino, &n);
    if (rc != 0)
        return rc < 0 ? rc : -1000;
    int u = n.unsaved;
    cnode_clear(&n);
    return u;
}

/* Waits (3 s at most) until ino's mark is want; the last one seen. */
static int wait_unsaved(uint64_t ino, int want)
{
    int u = unsaved_of(ino);
    for (int i = 0; i < 300 && u != want; i++) {
        usleep(10 * 1000);
        u = unsaved_of(ino);
    }
    return u;
}

/* A new file closed by its writer (held, then saved) into the lazy
 * transaction, its mark carried by a later part (another file made); then
 * the commit of the whole fails.  *f: the file. */
static void closed_then_failed_commit(struct cnode *f, bool closed_again_held)
{
    struct cnode g, h;
    char sha[SHA256_HEX_LEN + 1];
    hold_saver(C, true); /* none of its commits between the steps */
    cr_assert_eq(cache_create(C, root, "c.md", false, 1, &h), 0);
    cr_assert_eq(cache_create_open(C, root, "a.md", 1, f), 0);
    cr_assert_eq(cache_save_closed(C, f->ino, "closed\n", 7, 2, f->sha, sha), 0);
    cr_assert_eq(cache_mark_saved(C, f->ino), 0);
    /* The next lazy part writes the mark first (db_begin). */
    cr_assert_eq(cache_create_open(C, root, "b.md", 1, &g), 0);
    if (closed_again_held)
        cr_assert_eq(cache_save_closed(C, f->ino, "again\n", 6, 3, sha, NULL), 0);
    fail_next_commits(C->db, 1);
    int64_t t = 5;
    (void)cache_set_times(C, h.ino, NULL, &t); /* its commit carries the rest */
    cr_assert_eq(fail_commits, 0, "no commit came");
    cnode_clear(&g);
    cnode_clear(&h);
    hold_saver(C, false);
}

Test(cache_marks, a_mark_a_failed_commit_undid_is_written_again_after_its_close)
{
    struct cnode f;
    closed_then_failed_commit(&f, false);
    int u = wait_unsaved(f.ino, CACHE_SAVED);
    cr_expect_eq(u, CACHE_SAVED, "the closed file stayed %d (held: only the final sync pushes it)",
                 u);
    cnode_clear(&f);
}

Test(cache_marks, a_close_after_the_mark_is_held_again_as_it_was)
{
    struct cnode f;
    closed_then_failed_commit(&f, true);
    /* The second close came while a writer held the file: its record,
     * applied again, makes it held; the earlier mark does not undo it. */
    struct cnode n;
    for (int i = 0; i < 300; i++) {
        n = (struct cnode){0};
        bool back = cache_getattr(C, f.ino, &n) == 0 && n.size == 6;
        cnode_clear(&n);
        if (back)
            break;
        usleep(10 * 1000);
    }
    /* A write transaction writes the marks waiting first. */
    struct cnode d;
    cr_assert_eq(cache_create(C, root, "d.md", false, 4, &d), 0);
    cnode_clear(&d);
    cr_expect_eq(unsaved_of(f.ino), CACHE_HELD);
    cnode_clear(&f);
}

static pthread_mutex_t told_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t told[16];
static size_t n_told;

static void on_replay(void *arg, const uint64_t *inos, size_t n)
{
    struct cache *c = arg;
    /* Called without the cache's lock: this call into the cache would
     * otherwise never return (the suite's timeout). */
    struct cnode probe;
    if (cache_getattr(c, root, &probe) == 0)
        cnode_clear(&probe);
    pthread_mutex_lock(&told_lock);
    for (size_t i = 0; i < n && n_told < 16; i++)
        told[n_told++] = inos[i];
    pthread_mutex_unlock(&told_lock);
}

Test(cache_marks, the_replay_names_the_nodes_it_changed)
{
    cache_on_replay(C, on_replay, C);
    struct cnode f;
    closed_then_failed_commit(&f, false);
    bool seen = false;
    for (int i = 0; i < 300 && !seen; i++) {
        pthread_mutex_lock(&told_lock);
        for (size_t k = 0; k < n_told; k++)
            seen |= told[k] == f.ino;
        pthread_mutex_unlock(&told_lock);
        if (!seen)
            usleep(10 * 1000);
    }
    cr_expect(seen, "the hook was not told of the file the replay put back (%zu told)", n_told);
    cnode_clear(&f);
}

/* A failure that repeats (a full disk fails every retry) is logged once,
 * not at each retry, and its count when the cache closes (or an outage
 * ends, or a minute later); another failure is logged at once. */
Test(cache_marks, a_repeated_database_error_is_logged_once)
{
    FILE *log = tmpfile();
    cr_assert_not_null(log);
    log_set_stream(log);
    fail_next_commits(C->db, 5);
    for (int i = 0; i < 5; i++) {
        char name[16];
        struct cnode d;
        snprintf(name, sizeof(name), "d%d", i);
        cr_expect_neq(cache_create(C, root, name, true, 1, &d), 0, "a commit did not fail");
    }
    cr_assert_eq(fail_commits, 0);
    /* Another failure is logged at once: a statement on a table gone. */
    cr_assert_eq(sqlite3_exec(C->db, "DROP TABLE memvers", NULL, NULL, NULL), SQLITE_OK);
    cr_expect_neq(cache_versions_prune(C, ST), 0);
    /* The count of the repeats comes with the cache's close. */
    cache_close(&C);
    log_set_stream(stderr);
    rewind(log);
    char line[1024];
    int commits = 0, counted = 0, others = 0;
    while (fgets(line, sizeof(line), log)) {
        if (!strstr(line, "cache database error"))
            continue;
        if (!strstr(line, "op=COMMIT"))
            others++;
        else if (strstr(line, "repeated=4"))
            counted++;
        else
            commits++;
    }
    fclose(log);
    cr_expect_eq(commits, 1, "the same failure logged %d times", commits);
    cr_expect_eq(counted, 1, "its 4 repeats not counted at the close");
    cr_expect_eq(others, 1, "another failure right after was not logged");
}
