/* saved.c - the "saved" mark of a file whose last writer closed it (held
 * -> saved, enum cache_saved; the state model is in cache/write.c), as a
 * group commit: the mark costs no transaction of its own in a burst.
 *
 * cache_mark_saved notes the row in memory (c->saved) and returns.  The
 * marks are written, all together, by whichever comes first:
 *   - the next write transaction (db_begin writes them before its own
 *     work, so a mark never lands after a later change of its row);
 *   - the sync's read of what it may push (cache/pending.c);
 *   - the saver thread, SAVE_DELAY_MS after the first mark of a group,
 *     so that the database shows a closed file as saved a few
 *     milliseconds after its release even when nothing else happens.
 * In a burst of creates the next create's transaction carries the marks
 * and the saver finds nothing to do: a create is two transactions
 * (create, save at close), not three.
 *
 * A mark written by a transaction part that is then rolled back (its
 * change failed: a name taken, a directory not empty) waits again, in its
 * place (db_marks_undone): the part never happened, so the next
 * transaction writing it first keeps the order.  Lost with the part, it
 * left a closed file held, which no sync but the final one pushes.  So
 * does a whole transaction rolled back (its commit failed: a full disk):
 * the marks of all its lazy parts wait again (db_marks_lost), written
 * once the journal's records of the same closes are back in the database
 * (a record of a file replaces the marks of that file written before it:
 * db_marks_superseded, so a close by a writer still holding the file is
 * held again, as it was).
 *
 * What it does not change: content is durable when close(2) returns (the
 * FLUSH commits it before replying; the mark only says the writer is
 * done).  A mark lost to a crash is made at the next attach, which saves
 * all held content (no writer of a past session can come back).
 *
 * The lazy transaction is the same idea for three writes a crash may lose
 * without losing anything closed or fsynced (an open's new file, a first
 * write's dirty mark, an eviction stamp; docs/architecture.md, "The
 * cache"), and for a close's content, which a crash may not lose: each
 * has its record in the journal of closed files (cache/journal.c), which
 * the saver also applies again RETRY_MS after a failed commit left them
 * out of the database: db_commit_lazy leaves the transaction open (c->lazy) and the
 * next lazy part joins it as the savepoint lazy_part.  It is committed by
 * the next db_commit, by db_unlock when any other write went into it
 * (sqlite3_total_changes64 moved past c->lazy_mark), by db_settle before
 * a checkpoint, by the saver LAZY_DELAY_MS after it opened, and at
 * cache_close.  Without a saver (it could not start, or it is stopping)
 * db_commit_lazy commits at once.
 *
 * Threads: the saver is started at the first deferred mark and stopped by
 * db_saver_stop (cache_close).  It waits on c->saved_cond with c->lock,
 * the cache's one lock; c->saved, n_saved and the saver fields are
 * guarded by it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db_internal.h"
#include "log.h"

#define SAVE_DELAY_MS 5
/* A lazy transaction is committed at most this long after it opened. */
#define LAZY_DELAY_MS 5
/* After a failed write, the saver tries again this much later. */
#define RETRY_MS J_RETRY_MS /* db_internal.h: the read paths retry no more often */

static int mark_saved_now(struct cache *c, uint64_t ino)
{
    sqlite3_stmt *st;
    int rc = db_cached(c, DB_ST_MARK_SAVED,
                       "UPDATE nodes SET unsaved = 0 WHERE ino = ? AND unsaved = 2", &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    rc = sqlite3_step(st);
    db_done(st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, "mark saved");
}

int db_apply_saved(struct cache *c)
{
    if (c->n_saved == c->n_applied)
        return 0;
    if (sqlite3_get_autocommit(c->db)) {
        /* Outside a transaction: db_begin writes them, in one of their own. */
        int rc = db_begin(c);
        if (!rc && (rc = db_commit(c)) != 0)
            db_rollback(c);
        return rc;
    }
    int rc = 0;
    for (size_t i = c->n_applied; !rc && i < c->n_saved; i++)
        rc = mark_saved_now(c, c->saved[i]);
    if (!rc)
        c->n_applied = c->n_saved; /* gone at the part's end, unless undone */
    return rc;
}

void db_marks_kept(struct cache *c)
{
    c->n_part = 0;
    if (!c->n_applied)
        return;
    memmove(c->saved, c->saved + c->n_applied, (c->n_saved - c->n_applied) * sizeof(*c->saved));
    c->n_saved -= c->n_applied;
    c->n_applied = 0;
}

void db_marks_carried(struct cache *c)
{
    c->n_part = c->n_applied;
}

static void wake_for_marks(struct cache *c)
{
    if (c->n_saved && c->saver_running && c->saver_idle)
        pthread_cond_signal(&c->saved_cond);
}

/* The marks written by a part rolled back wait again, in their place
 * before any that came later: the next transaction writes them first, as
 * if the part had never run, and the saver wakes for them. */
void db_marks_undone(struct cache *c, uint64_t except)
{
    if (c->n_applied == c->n_part)
        return;
    size_t k = c->n_part;
    for (size_t i = c->n_part; i < c->n_saved; i++)
        if (i >= c->n_applied || c->saved[i] != except)
            c->saved[k++] = c->saved[i];
    c->n_saved = k;
    c->n_applied = c->n_part;
    wake_for_marks(c);
}

/* The whole transaction is gone (its commit failed): every mark it carried
 * waits again, the earlier lazy parts' too.  They are written after the
 * journal's records are applied again (db_begin replays first), so the
 * file a writer closed is saved again, as it was. */
void db_marks_lost(struct cache *c)
{
    c->n_applied = c->n_part = 0;
    wake_for_marks(c);
}

void db_marks_superseded(struct cache *c, uint64_t ino)
{
    size_t k = 0, part = c->n_part;
    for (size_t i = 0; i < c->n_saved; i++) {
        if (i < c->n_applied && c->saved[i] == ino) {
            if (i < c->n_part)
                part--;
            continue;
        }
        c->saved[k++] = c->saved[i];
    }
    c->n_applied -= c->n_saved - k;
    c->n_saved = k;
    c->n_part = part;
}

static void add_ms(struct timespec *t, long ms)
{
    t->tv_sec += ms / 1000;
    t->tv_nsec += (ms % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

static bool before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Keeps in *until the earlier of it and since + ms (*any: it holds one). */
static void earliest(struct timespec *until, bool *any, struct timespec since, long ms)
{
    add_ms(&since, ms);
    if (!*any || before(&since, until))
        *until = since;
    *any = true;
}

/* The time the saver must act at: the marks' group deadline, the lazy
 * transaction's and a stuck journal's retry, whichever is first.  False
 * when none waits. */
static bool next_deadline(struct cache *c, struct timespec *until)
{
    bool any = false;
    if (c->saver_held)
        return false;
    if (c->n_saved > c->n_applied) /* those written wait for the lazy commit */
        earliest(until, &any, c->saved_since, c->saver_retry ? RETRY_MS : SAVE_DELAY_MS);
    if (c->lazy)
        earliest(until, &any, c->lazy_since, LAZY_DELAY_MS);
    if (c->jstuck)
        earliest(until, &any, c->jstuck_since, RETRY_MS);
    return any;
}

static int cmp_ino(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Hands the nodes a replay of the journal changed to the hook, without
 * the lock: the kernel's invalidation may wait for a request in flight,
 * which may wait for the lock.  The caller holds it; it is held again on
 * return. */
static void tell_replayed(struct cache *c)
{
    uint64_t *v = c->replayed;
    size_t n = 0;
    /* Once each: a file closed several times has a record for each close. */
    qsort(v, c->n_replayed, sizeof(*v), cmp_ino);
    for (size_t i = 0; i < c->n_replayed; i++)
        if (!n || v[i] != v[n - 1])
            v[n++] = v[i];
    void (*fn)(void *, const uint64_t *, size_t) = c->replay_hook;
    void *arg = c->replay_arg;
    c->replayed = NULL;
    c->n_replayed = c->cap_replayed = 0;
    db_unlock(c);
    if (fn)
        fn(arg, v, n);
    free(v);
    db_lock(c);
}

/* Sleeps untimed only when nothing waits (and is then woken by the first
 * mark of a group or the start of a lazy transaction); otherwise wakes at
 * the first deadline, so a burst that keeps carrying the marks and the
 * lazy work costs it one wake-up each few milliseconds, not one a file. */
static void *saver(void *arg)
{
    struct cache *c = arg;
    db_lock(c);
    while (!c->saver_stop) {
        struct timespec until, now;
        if (c->n_replayed) {
            tell_replayed(c);
            continue;
        }
        if (!next_deadline(c, &until)) {
            c->saver_idle = true;
            pthread_cond_wait(&c->saved_cond, &c->lock);
            c->saver_idle = false;
            (void)db_io_errno_take(); /* the lock taken again: as db_lock */
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (before(&now, &until)) {
            pthread_cond_timedwait(&c->saved_cond, &c->lock, &until);
            (void)db_io_errno_take(); /* the lock taken again: as db_lock */
            continue; /* look again: the group may be gone or be a new one */
        }
        if (c->lazy && db_settle(c) != 0)
            log_error("cannot commit the cache's recent changes", "error", sqlite3_errmsg(c->db));
        if (c->jstuck && !c->lazy)
            (void)db_journal_retry(c); /* on failure, again RETRY_MS later */
        if (c->n_saved > c->n_applied) {
            c->saver_retry = db_apply_saved(c) != 0;
            if (c->saver_retry)
                clock_gettime(CLOCK_MONOTONIC, &c->saved_since);
        }
    }
    db_unlock(c);
    return NULL;
}

/* Starts the saver; the caller holds c->lock.  False when it cannot run. */
static bool saver_start(struct cache *c)
{
    if (c->saver_running)
        return true;
    if (c->saver_failed)
        return false;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&c->saved_cond, &ca);
    pthread_condattr_destroy(&ca);
    if (!rc && (rc = pthread_create(&c->saver_thr, NULL, saver, c)) != 0)
        pthread_cond_destroy(&c->saved_cond);
    c->saver_running = rc == 0;
    c->saver_failed = rc != 0;
    return c->saver_running;
}

void db_saver_stop(struct cache *c)
{
    db_lock(c);
    bool running = c->saver_running;
    c->saver_stop = true;
    if (running)
        pthread_cond_broadcast(&c->saved_cond);
    db_unlock(c);
    if (!running)
        return;
    pthread_join(c->saver_thr, NULL);
    pthread_cond_destroy(&c->saved_cond);
    c->saver_running = false;
    db_lock(c);
    (void)db_apply_saved(c); /* what is left (a failure: the next attach) */
    db_unlock(c);
}

int cache_settle(struct cache *c)
{
    db_lock(c);
    db_lazy_check(c);
    int rc = db_settle(c);
    if (!rc)
        rc = db_journal_retry(c);
    return db_unlock_rc(c, rc);
}

int cache_mark_saved(struct cache *c, uint64_t ino)
{
    db_lock(c);
    int rc = 0;
    if (c->n_saved == c->cap_saved) {
        size_t cap = c->cap_saved ? 2 * c->cap_saved : 64;
        uint64_t *v = realloc(c->saved, cap * sizeof(*v));
        if (v) {
            c->saved = v;
            c->cap_saved = cap;
        }
    }
    if (c->n_saved < c->cap_saved && !c->saver_stop && saver_start(c)) {
        if (!c->n_saved) {
            clock_gettime(CLOCK_MONOTONIC, &c->saved_since);
            c->saver_retry = false;
            if (c->saver_idle)
                pthread_cond_signal(&c->saved_cond);
        }
        c->saved[c->n_saved++] = ino;
    } else {
        /* No room or no saver: now, after the closes a failed commit left
         * to the journal (the mark must not come before their record). */
        rc = db_journal_retry(c);
        if (!rc)
            rc = mark_saved_now(c, ino);
    }
    db_unlock(c);
    return rc;
}

bool db_lazy_possible(struct cache *c)
{
    return c->lazy || (!c->saver_stop && saver_start(c));
}

int db_commit_lazy(struct cache *c)
{
    if (c->lazy) {
        sqlite3_stmt *st;
        int rc = db_cached(c, DB_ST_RELEASE, "RELEASE lazy_part", &st);
        if (rc)
            return rc;
        rc = sqlite3_step(st);
        db_done(st);
        if (rc != SQLITE_DONE)
            return db_fail(c, rc, "RELEASE lazy_part");
    } else if (c->saver_stop || !saver_start(c)) {
        return db_commit(c); /* nobody would commit it later: now */
    } else {
        c->lazy = true;
        clock_gettime(CLOCK_MONOTONIC, &c->lazy_since);
        if (c->saver_idle)
            pthread_cond_signal(&c->saved_cond);
    }
    c->lazy_mark = sqlite3_total_changes64(c->db);
    db_marks_carried(c); /* in the database once the transaction commits */
    return 0;
}

void cache_hold_saver(struct cache *c, bool held)
{
    db_lock(c);
    c->saver_held = held;
    if (!held && c->saver_running)
        pthread_cond_signal(&c->saved_cond); /* its deadlines count again */
    db_unlock(c);
}

void cache_on_replay(struct cache *c, void (*fn)(void *arg, const uint64_t *inos, size_t n),
                     void *arg)
{
    db_lock(c);
    c->replay_hook = fn;
    c->replay_arg = arg;
    db_unlock(c);
}
