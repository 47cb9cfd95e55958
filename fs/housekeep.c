/* housekeep.c - the daemon's cache collector: a thread that runs one round
 * of cache_housekeep (cache/gc.c) when the daemon is ready and then every
 * sync interval (at least once a minute): conflict records past the
 * policy are pruned, content nothing needs is freed, --cache-max-size
 * evicts clean content that no file open here holds, the database gives
 * free pages back and its write-ahead log is trimmed.  Content is freed as it stops being needed
 * (in the transaction that drops its last reference); this thread does
 * what cannot be done there.
 *
 * Threads: its own, started by housekeep_start after the stores are
 * mounted and stopped by housekeep_stop (bounded by the round in
 * progress, which holds the cache lock for a few milliseconds per
 * megabyte it frees).  The open-file table (openfile.c) tells which files
 * are open; its lock is a leaf, taken inside the cache lock. */
#include "housekeep.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "log.h"
#include "openfile.h"

static struct {
    struct cache *c;
    struct cache_policy p;
    int interval_s;
    pthread_t thr;
    bool running;
    pthread_mutex_t lock; /* guards stop */
    pthread_cond_t cond;
    bool stop;
    bool said_over;       /* the over-the-limit warning was logged */
} H = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool is_open(void *arg, uint64_t ino)
{
    (void)arg;
    return ofile_is_open(ino);
}

static void round_once(void)
{
    struct cache_gc_report r;
    int rc = cache_housekeep(H.c, &H.p, is_open, NULL, &r);
    if (rc) {
        log_warn("cache housekeeping failed; retried at the next interval", "error",
                 strerror(-rc));
        return;
    }
    char a[32], b[32], d[32];
    if (r.conflicts_pruned) {
        snprintf(a, sizeof(a), "%llu", (unsigned long long)r.conflicts_pruned);
        log_info("pruned conflict records past the policy", "count", a);
    }
    if (r.evicted) {
        snprintf(a, sizeof(a), "%llu", (unsigned long long)r.evicted);
        snprintf(b, sizeof(b), "%llu", (unsigned long long)r.evicted_bytes);
        log_info("evicted cached content over --cache-max-size; it is fetched again when "
                 "opened", "files", a, "bytes", b);
    }
    if (r.over_limit && !H.said_over) {
        snprintf(d, sizeof(d), "%llu", (unsigned long long)H.p.max_bytes);
        log_warn("the cache holds more than --cache-max-size: the rest is content that may "
                 "not be evicted (unpushed edits, conflict records, open files)",
                 "cache_max_size", d);
    }
    H.said_over = r.over_limit;
}

static void *run(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&H.lock);
    while (!H.stop) {
        pthread_mutex_unlock(&H.lock);
        round_once();
        pthread_mutex_lock(&H.lock);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += H.interval_s;
        while (!H.stop && pthread_cond_timedwait(&H.cond, &H.lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&H.lock);
    return NULL;
}

int housekeep_start(struct cache *c, const struct cache_policy *p, int interval_s)
{
    H.c = c;
    H.p = *p;
    H.interval_s = interval_s > 0 ? interval_s : 15;
    H.stop = false;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&H.cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&H.thr, NULL, run, NULL);
    if (rc) {
        pthread_cond_destroy(&H.cond);
        return -rc;
    }
    H.running = true;
    return 0;
}

void housekeep_stop(void)
{
    if (!H.running)
        return;
    pthread_mutex_lock(&H.lock);
    H.stop = true;
    pthread_cond_broadcast(&H.cond);
    pthread_mutex_unlock(&H.lock);
    pthread_join(H.thr, NULL);
    pthread_cond_destroy(&H.cond);
    H.running = false;
}
