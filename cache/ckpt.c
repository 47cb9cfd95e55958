/* ckpt.c - the cache's checkpoints, taken off the request path.
 *
 * SQLite checkpoints a WAL database from the connection that commits, in
 * the commit that takes the log past 1,000 pages: the copy of those pages
 * into the database and two syncs landed in whichever FUSE request made
 * that commit (a rename every 70 or so, each time a few milliseconds:
 * a rename's mean time was twice its median).  Here the cache's connection
 * never checkpoints on its own; its WAL hook wakes a thread of this file,
 * which checkpoints PASSIVE through a second connection of its own: it
 * never waits for the cache lock, and the cache's commits never wait for
 * it (WAL mode lets one writer and a checkpointer work at once).  A pass
 * runs each time the log has grown by 1,000 pages past what the last one
 * copied.  The log starts again from its beginning at the first write
 * after a checkpoint that copied all of it (SQLite's own rule): after a
 * pause in the writes, as a rule.  Under a steady stream of commits a pass
 * never ends with all of it copied (commits came meanwhile), so a commit
 * that takes the log past CKPT_INLINE pages (16 MiB) checkpoints in its
 * hook as SQLite would have: the pages the last pass left (1,000 at most)
 * and two syncs, once every 4,000 pages instead of once every 1,000, and
 * the log starts again.
 *
 * Invariants:
 *   - the WAL hook runs with the cache lock held, from a commit: below
 *     CKPT_INLINE pages it only sets a flag under this file's own mutex
 *     and signals; the thread never takes the cache lock;
 *   - a log past CKPT_INLINE pages is checkpointed in the hook, after
 *     the pass under way if there is one (it would make it busy), so the
 *     log never grows past that bound and one commit, however slow the
 *     thread's syncs;
 *   - without the thread (it or its connection could not start) SQLite's
 *     own checkpoint at 1,000 pages stays, as it was;
 *   - the collector's TRUNCATE checkpoints (gc.c) hold the passes off
 *     while they run (db_ckpt_pause), which would make them busy;
 *   - db_ckpt_stop closes the second connection before the cache's own
 *     (the last connection to close deletes the WAL file).
 * Durability is that of WAL with synchronous=NORMAL either way: a commit
 * is in the log before it returns; a checkpoint only moves pages. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "db_internal.h"
#include "log.h"

/* The log's size at which the thread is woken (SQLite's default). */
#define CKPT_PAGES 1000
/* The log's size past which the committing connection checkpoints itself. */
#define CKPT_INLINE DB_WAL_BOUND_PAGES /* 16 MiB of 4 KiB pages */

struct db_ckpt {
    sqlite3 *db;          /* the thread's own connection */
    pthread_t thr;
    pthread_mutex_t mu;   /* guards wanted, stop, running, paused and the counts */
    pthread_cond_t cond;  /* wakes the thread, and db_ckpt_pause's wait */
    bool wanted, stop;
    bool running;         /* a pass is under way */
    unsigned paused;      /* db_ckpt_pause calls not yet resumed */
    int copied_to;        /* the log's size the last pass copied up to */
    bool failed;          /* a checkpoint error was logged */
    unsigned long passes, inline_passes; /* for tests */
};

static void *ckpt_main(void *arg)
{
    struct db_ckpt *k = arg;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        while ((!k->wanted || k->paused) && !k->stop)
            pthread_cond_wait(&k->cond, &k->mu);
        if (k->stop)
            break;
        k->wanted = false;
        k->running = true;
        pthread_mutex_unlock(&k->mu);
        int log_frames = 0, copied = 0;
        int rc = sqlite3_wal_checkpoint_v2(k->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log_frames,
                                           &copied);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY && !k->failed) {
            k->failed = true; /* the hook's own checkpoint bounds the log meanwhile */
            log_warn("cannot checkpoint the cache's write-ahead log in the background; "
                     "commits take it over past its limit", "error", sqlite3_errstr(rc));
        } else if (rc == SQLITE_OK) {
            k->failed = false;
        }
        pthread_mutex_lock(&k->mu);
        k->passes++;
        if (rc == SQLITE_OK && copied > 0)
            k->copied_to = copied;
        k->running = false;
        pthread_cond_broadcast(&k->cond);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* Waits for a pass under way and holds off the next until resume. */
static void pause_passes(struct db_ckpt *k)
{
    pthread_mutex_lock(&k->mu);
    k->paused++;
    while (k->running)
        pthread_cond_wait(&k->cond, &k->mu);
    pthread_mutex_unlock(&k->mu);
}

static void resume_passes(struct db_ckpt *k)
{
    pthread_mutex_lock(&k->mu);
    if (k->paused && --k->paused == 0 && k->wanted)
        pthread_cond_broadcast(&k->cond);
    pthread_mutex_unlock(&k->mu);
}

/* SQLite's WAL hook of the cache's connection, called after each commit
 * with the cache lock held and the log's size in pages. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    struct db_ckpt *k = arg;
    if (pages < CKPT_PAGES)
        return SQLITE_OK;
    pthread_mutex_lock(&k->mu);
    if (pages < k->copied_to)
        k->copied_to = 0; /* the log started again */
    bool here = pages >= CKPT_INLINE;
    if (here) {
        k->inline_passes++;
    } else if (!k->wanted && !k->running && pages >= k->copied_to + CKPT_PAGES) {
        k->wanted = true;
        pthread_cond_signal(&k->cond);
    }
    pthread_mutex_unlock(&k->mu);
    if (here) { /* after the pass under way, if any, which would make it busy */
        pause_passes(k);
        (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        resume_passes(k);
    }
    return SQLITE_OK;
}

int db_ckpt_start(struct cache *c, const char *file)
{
    struct db_ckpt *k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    int src = sqlite3_open_v2(file, &k->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                              db_vfs());
    if (src != SQLITE_OK) {
        sqlite3_close_v2(k->db);
        free(k);
        return db_errno(src);
    }
    /* A connection knows its database is in WAL mode (and checkpoints it)
     * only once it has read it. */
    sqlite3_busy_timeout(k->db, 10000);
    src = sqlite3_exec(k->db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
    if (src != SQLITE_OK) {
        sqlite3_close_v2(k->db);
        free(k);
        return db_errno(src);
    }
    /* Never waits for the cache's connection: a busy lock skips a pass. */
    sqlite3_busy_timeout(k->db, 0);
    sqlite3_wal_autocheckpoint(k->db, 0);
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cond, NULL);
    if (pthread_create(&k->thr, NULL, ckpt_main, k) != 0) {
        pthread_cond_destroy(&k->cond);
        pthread_mutex_destroy(&k->mu);
        sqlite3_close_v2(k->db);
        free(k);
        return -EAGAIN;
    }
    c->ckpt = k;
    sqlite3_wal_hook(c->db, wal_hook, k); /* replaces SQLite's own checkpoint */
    return 0;
}

void db_ckpt_stop(struct cache *c)
{
    struct db_ckpt *k = c->ckpt;
    if (!k)
        return;
    sqlite3_wal_autocheckpoint(c->db, CKPT_PAGES); /* SQLite's own again */
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_cond_signal(&k->cond);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thr, NULL);
    pthread_cond_destroy(&k->cond);
    pthread_mutex_destroy(&k->mu);
    sqlite3_close_v2(k->db);
    free(k);
    c->ckpt = NULL;
}

void db_ckpt_pause(struct cache *c)
{
    if (c->ckpt)
        pause_passes(c->ckpt);
}

void db_ckpt_resume(struct cache *c)
{
    if (c->ckpt)
        resume_passes(c->ckpt);
}

void db_ckpt_counts(struct cache *c, unsigned long *passes, unsigned long *inline_passes)
{
    struct db_ckpt *k = c->ckpt;
    *passes = *inline_passes = 0;
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    *passes = k->passes;
    *inline_passes = k->inline_passes;
    pthread_mutex_unlock(&k->mu);
}
