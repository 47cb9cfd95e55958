/* failcommit.h - makes the next commits of a cache's SQLite connection
 * fail, as a full disk would: SQLite's commit hook turns each into a
 * rollback.  For the cache tests that need a failed commit without a
 * mount (a full tmpfs is test_mount_sync_full.c's way). */
#ifndef MFS_TEST_FAILCOMMIT_H
#define MFS_TEST_FAILCOMMIT_H

#include <sqlite3.h>
#include <stdbool.h>

#include "db_internal.h"

/* Commits still to fail: 0 once they all came. */
static int fail_commits;

static int fail_commit_hook(void *arg)
{
    (void)arg;
    if (fail_commits > 0) {
        fail_commits--;
        return 1; /* this COMMIT becomes a ROLLBACK */
    }
    return 0;
}

/* The next n commits on db fail. */
static inline void fail_next_commits(sqlite3 *db, int n)
{
    sqlite3_commit_hook(db, fail_commit_hook, NULL);
    fail_commits = n;
}

/* Holds the cache's saver thread (held: it commits nothing of its own, so
 * none of its commits takes a failure meant for the test's, or commits the
 * lazy work before it, however slowly the test runs: a sanitizer build on
 * a loaded machine passes the saver's 5 ms between two steps), or lets it
 * go again. */
static inline void hold_saver(struct cache *c, bool held)
{
    cache_hold_saver(c, held);
}

#endif
