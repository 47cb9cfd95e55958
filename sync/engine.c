/* engine.c - the sync engine's frame: the stores it syncs, the sync
 * thread, applying a listing to the cache (pull), kernel notifications,
 * and content downloads (on demand for an open, in the background for the
 * rest).  The listing itself is listing.c; one full sync of a store (push
 * included) is cycle.c.
 *
 * Threads: one background thread (syncer_start) prefetches, syncs every
 * store at once, then every interval (or when kicked); FUSE threads call
 * syncer_fetch when an open needs bytes the cache lacks (never a sync or a
 * kernel notification: a changed memory kicks the sync thread instead);
 * the daemon's main thread runs the final sync (syncer_sync) at unmount.
 * Syncs of one store are serialised by its cycle_lock; the syncer's own
 * lock guards the status fields, the stop and kick flags.  Only the
 * cycle_lock is held during HTTP, and FUSE threads never take it. */
#include "engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "cache.h"
#include "log.h"
#include "rules.h"

#include "engine_int.h"

#define MSG_BLOCKED "a remote memory lies below a local file; leaving it out until the sync " \
                    "resolves it"

struct syncer *syncer_new(struct cache *c, struct http_client *h, const struct syncer_opts *o)
{
    struct syncer *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->c = c;
    s->h = h;
    s->o = *o;
    if (s->o.interval_s <= 0)
        s->o.interval_s = 15;
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_cond_init(&s->fetch_free, &ca); /* (syncer_fetch's deadline) */
    pthread_condattr_destroy(&ca);
    return s;
}

void syncer_free(struct syncer **sp)
{
    struct syncer *s = sp ? *sp : NULL;
    if (!s)
        return;
    syncer_stop(s);
    if (s->running)
        return; /* the thread would not stop: leave it, the process is exiting */
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].id);
        free(s->v[i].said);
        feed_free(&s->v[i].feed);
        pthread_mutex_destroy(&s->v[i].cycle_lock);
        pthread_mutex_destroy(&s->v[i].said_lock);
    }
    free(s->v);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    pthread_cond_destroy(&s->fetch_free);
    free(s);
    *sp = NULL;
}

int syncer_add(struct syncer *s, const char *store_id, bool read_only, const struct sync_notify *n)
{
    struct sstore *v = realloc(s->v, (s->n + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    s->v = v;
    struct sstore *st = &v[s->n];
    memset(st, 0, sizeof(*st));
    st->id = strdup(store_id);
    if (!st->id)
        return -ENOMEM;
    st->read_only = read_only;
    pthread_mutex_init(&st->cycle_lock, NULL);
    pthread_mutex_init(&st->said_lock, NULL);
    if (n)
        st->n = *n;
    return (int)s->n++;
}

bool engine_first_time(struct sstore *st, const char *msg, const char *key, const char *key2)
{
    uint64_t h = 1469598103934665603ULL;
    const char *parts[3] = {msg, key ? key : "", key2 ? key2 : ""};
    for (int k = 0; k < 3; k++) {
        for (const char *p = parts[k]; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        h = (h ^ 0xffu) * 1099511628211ULL; /* ("ab","c") differs from ("a","bc") */
    }
    pthread_mutex_lock(&st->said_lock);
    bool first = true;
    for (size_t i = 0; first && i < st->n_said; i++)
        first = st->said[i] != h;
    if (first) {
        if (st->n_said >= 4096)
            st->n_said = 0;
        uint64_t *v = realloc(st->said, (st->n_said + 1) * sizeof(*v));
        if (v) {
            st->said = v;
            v[st->n_said++] = h;
        }
    }
    pthread_mutex_unlock(&st->said_lock);
    return first;
}

void engine_set_result(struct syncer *s, struct sstore *st, const char *result,
                       const struct syncer_report *rep)
{
    pthread_mutex_lock(&s->lock);
    st->last = (int64_t)time(NULL);
    snprintf(st->result, sizeof(st->result), "%s", result);
    if (rep) {
        st->rep = *rep;
        st->done.pushed += rep->pushed;
        st->done.deleted += rep->deleted;
        st->done.conflicts += rep->conflicts;
    }
    if (strcmp(result, "ok") == 0) {
        st->last_ok = st->last;
        st->failing_since = 0;
        st->last_error[0] = '\0';
    } else {
        if (!st->failing_since)
            st->failing_since = st->last;
        snprintf(st->last_error, sizeof(st->last_error), "%s", result);
    }
    pthread_mutex_unlock(&s->lock);
}

/* A sync of st begins (running) or has ended, for syncer_health. */
static void set_running(struct syncer *s, struct sstore *st, bool running)
{
    pthread_mutex_lock(&s->lock);
    st->running_since = running ? (int64_t)time(NULL) : 0;
    pthread_mutex_unlock(&s->lock);
}

/* cycle_run with its time recorded, for syncer_health. */
static int timed_cycle(struct syncer *s, int idx, bool final, char *why, size_t whylen,
                       struct syncer_report *own)
{
    set_running(s, &s->v[idx], true);
    http_thread_cancel(final ? &s->v[idx].final_cancel : &s->v[idx].cancel);
    int rc = cycle_run(s, idx, final, why, whylen, own);
    http_thread_cancel(NULL);
    set_running(s, &s->v[idx], false);
    return rc;
}

void syncer_health(struct syncer *s, int idx, struct syncer_health *h)
{
    memset(h, 0, sizeof(*h));
    pthread_mutex_lock(&s->lock);
    const struct sstore *st = &s->v[idx];
    h->running_since = st->running_since;
    h->failing_since = st->failing_since;
    h->last_ok = st->last_ok;
    snprintf(h->last_error, sizeof(h->last_error), "%s", st->last_error);
    h->interval_s = s->o.interval_s;
    pthread_mutex_unlock(&s->lock);
}

static void set_result(struct syncer *s, struct sstore *st, const char *result)
{
    engine_set_result(s, st, result, NULL);
}

void syncer_last(struct syncer *s, int idx, int64_t *when, char *result, size_t len)
{
    pthread_mutex_lock(&s->lock);
    *when = s->v[idx].last;
    snprintf(result, len, "%s", s->v[idx].result);
    pthread_mutex_unlock(&s->lock);
}

void engine_notify(struct sstore *st, const struct cache_changes *ch)
{
    for (size_t i = 0; i < ch->n; i++) {
        const struct cache_change *x = &ch->v[i];
        switch (x->kind) {
        case CACHE_CH_NEW:
            if (st->n.entry_new)
                st->n.entry_new(st->n.arg, x->parent, x->name);
            break;
        case CACHE_CH_CONTENT:
            if (st->n.inval_inode)
                st->n.inval_inode(st->n.arg, x->ino);
            break;
        case CACHE_CH_GONE:
            if (st->n.entry_gone)
                st->n.entry_gone(st->n.arg, x->parent, x->ino, x->name);
            break;
        case CACHE_CH_BLOCKED:
            /* Said once per mount: the same listing comes at every sync. */
            if (engine_first_time(st, MSG_BLOCKED, x->name, NULL))
                log_warn(MSG_BLOCKED, "memory_store_id", st->id, "path", x->name);
            break;
        }
    }
}

int engine_apply(struct syncer *s, struct sstore *st, const struct cache_remote *r, size_t n,
                 char *why, size_t whylen)
{
    struct cache_changes ch = {0};
    int rc = cache_apply_remote(s->c, st->id, r, n, &ch);
    if (rc) {
        snprintf(why, whylen, "cannot update the cache of memory store %s: %s", st->id,
                 strerror(-rc));
        cache_changes_free(&ch);
        return rc;
    }
    if (ch.n) {
        log_debug("remote changes applied", "memory_store_id", st->id);
        st->content_missing = true; /* new or changed memories: bytes to fetch */
    }
    engine_notify(st, &ch);
    cache_changes_free(&ch);
    return 0;
}

int syncer_refresh(struct syncer *s, int idx, char *why, size_t whylen)
{
    struct sstore *st = &s->v[idx];
    pthread_mutex_lock(&st->cycle_lock);
    struct api_list list = {0};
    struct cache_remote *r = NULL;
    size_t n = 0;
    char local_why[512];
    if (!why) {
        why = local_why;
        whylen = sizeof(local_why);
    }
    st->progress = true; /* before syncer_start: no other thread uses st */
    /* The feed's head first: the syncs that follow read what was written
     * from then on (feed.c), instead of listing the store again. */
    struct feed_read head;
    if (feed_head(s, st, &head) != 0)
        memset(&head, 0, sizeof(head));
    /* A store the cache holds nothing of is listed by directory: a listing
     * that missed a memory there could not remove or re-create anything
     * local, and every later listing is the plain one. */
    bool empty = false;
    cache_store_empty(s->c, st->id, &empty);
    int rc = engine_list(s, st, empty, &list, &r, &n, why, whylen);
    st->progress = false;
    if (!rc)
        rc = engine_apply(s, st, r, n, why, whylen);
    if (!rc)
        cache_versions_prune(s->c, st->id);
    if (!rc && head.ok) {
        /* As after any full listing (cycle.c): what the apply could not
         * place is offered again, and a file it left alone (an unpushed
         * edit or rename from an earlier session) whose memory changed
         * meanwhile makes the next sync list the store in full; read from
         * the feed, which names nothing before this head, that sync would
         * decide the file against its old baseline and push over the
         * other client's change. */
        feed_keep_listed_unplaced(s, st, r, n);
        feed_commit(st, &head);
        st->feed.ready = true;
        st->feed.want_full = cycle_listing_missed(s, st, r, n);
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        st->feed.last_full_s = (int64_t)t.tv_sec;
        st->known = n;
    }
    feed_read_free(&head);
    free(r);
    api_list_free(&list);
    pthread_mutex_unlock(&st->cycle_lock);
    set_result(s, st, rc ? why : "ok");
    return rc;
}

/* Stores fetched bytes; -ESTALE when they are not the bytes of want_sha
 * (the memory changed again since it was listed). */
int engine_keep_fetched(struct syncer *s, const struct api_memory *m, const char *want_sha)
{
    char sha[SHA256_HEX_LEN + 1];
    sha256_hex(m->content, m->content_len, sha);
    int rc = cache_blob_put(s->c, sha, m->content, m->content_len);
    if (rc)
        return rc;
    return (want_sha && strcmp(sha, want_sha) != 0) ? -ESTALE : 0;
}

/* Downloads run at once for the opens of all stores: the ones past it
 * wait for a slot in their own FUSE thread (fs/fsloop.c has room for
 * many more threads than this), and the server sees a bounded burst. */
#define FETCH_SLOTS 16

int64_t syncer_fetch_deadline(const struct syncer *s)
{
    return s && s->o.fetch_timeout_s > 0 ? http_now_ms() + (int64_t)s->o.fetch_timeout_s * 1000
                                         : 0;
}

bool syncer_past(int64_t deadline_ms)
{
    return deadline_ms && http_now_ms() >= deadline_ms;
}

int syncer_fetch(struct syncer *s, int idx, const char *memory_id, const char *sha, bool queue,
                 int64_t deadline)
{
    struct sstore *st = &s->v[idx];
    struct api_fetch f = {.memory_id = memory_id};
    /* One deadline on both clocks: the slot's wait (fetch_free is on
     * CLOCK_MONOTONIC) and http_run's (http_now_ms, the same clock). */
    if (syncer_past(deadline))
        return -ETIMEDOUT;
    struct timespec until = {.tv_sec = (time_t)(deadline / 1000),
                             .tv_nsec = (long)(deadline % 1000) * 1000000L};
    pthread_mutex_lock(&s->lock);
    while (queue && s->fetching >= FETCH_SLOTS) {
        if (!deadline) {
            pthread_cond_wait(&s->fetch_free, &s->lock);
        } else if (pthread_cond_timedwait(&s->fetch_free, &s->lock, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&s->lock);
            return -ETIMEDOUT;
        }
    }
    s->fetching++;
    pthread_mutex_unlock(&s->lock);
    int rc = api_memories_fetch_until(s->h, st->id, &f, 1, deadline);
    pthread_mutex_lock(&s->lock);
    s->fetching--;
    pthread_cond_signal(&s->fetch_free);
    pthread_mutex_unlock(&s->lock);
    if (!rc)
        rc = engine_keep_fetched(s, &f.mem, sha);
    if (rc == -ESTALE) {
        /* The memory changed again since it was listed: the sync thread
         * brings the node to it at once (never from this FUSE thread,
         * which must not send kernel notifications). */
        syncer_kick(s);
    }
    api_memory_clear(&f.mem);
    api_error_clear(&f.e);
    return rc;
}

void syncer_disable(struct syncer *s, int idx)
{
    if (!s || idx < 0 || (size_t)idx >= s->n)
        return;
    pthread_mutex_lock(&s->v[idx].cycle_lock);
    s->v[idx].disabled = true;
    pthread_mutex_unlock(&s->v[idx].cycle_lock);
}

bool syncer_hold(struct syncer *s, int idx)
{
    if (!s || idx < 0 || (size_t)idx >= s->n)
        return true; /* no syncer (tests): nothing to keep out */
    pthread_mutex_lock(&s->v[idx].cycle_lock);
    if (!s->v[idx].disabled)
        return true;
    pthread_mutex_unlock(&s->v[idx].cycle_lock);
    return false;
}

void syncer_release(struct syncer *s, int idx)
{
    if (s && idx >= 0 && (size_t)idx < s->n)
        pthread_mutex_unlock(&s->v[idx].cycle_lock);
}

void syncer_kick(struct syncer *s)
{
    pthread_mutex_lock(&s->lock);
    s->kick = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static bool stopping(struct syncer *s)
{
    pthread_mutex_lock(&s->lock);
    bool stop = s->stop;
    pthread_mutex_unlock(&s->lock);
    return stop;
}

/* Waits one interval (or a kick); false when asked to stop. */
static bool wait_interval(struct syncer *s)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += s->o.interval_s;
    pthread_mutex_lock(&s->lock);
    while (!s->stop && !s->kick) {
        /* A sync asked for by hand moves the next periodic one an
         * interval after it. */
        if (s->deferred.tv_sec > until.tv_sec)
            until = s->deferred;
        if (pthread_cond_timedwait(&s->cond, &s->lock, &until) == ETIMEDOUT) {
            if (s->deferred.tv_sec > until.tv_sec)
                continue;
            break;
        }
    }
    s->kick = false;
    bool stop = s->stop;
    pthread_mutex_unlock(&s->lock);
    return !stop;
}

int syncer_sync_now(struct syncer *s, int idx, char *why, size_t whylen,
                    struct syncer_report *rep)
{
    char local_why[512];
    if (!why) {
        why = local_why;
        whylen = sizeof(local_why);
    }
    /* This sync's own report: a periodic one may end right after it. */
    struct syncer_report own = {0};
    pthread_mutex_lock(&s->lock);
    const struct syncer_report before = s->v[idx].done;
    pthread_mutex_unlock(&s->lock);
    int rc = timed_cycle(s, idx, false, why, whylen, &own);
    pthread_mutex_lock(&s->lock);
    clock_gettime(CLOCK_MONOTONIC, &s->deferred);
    s->deferred.tv_sec += s->o.interval_s;
    /* What reached the store while it waited counts too: a round of the
     * sync thread's that was running when this sync was asked for (the
     * mount's first, a periodic one) ended first, and pushed what this
     * one then found done; its own count alone said "pushed 0" for an
     * edit made just before.  What is left (pending, refused...) is this
     * round's, the later. */
    const struct syncer_report *done = &s->v[idx].done;
    own.pushed = done->pushed - before.pushed;
    own.deleted = done->deleted - before.deleted;
    own.conflicts = done->conflicts - before.conflicts;
    pthread_mutex_unlock(&s->lock);
    if (rep)
        *rep = own;
    return rc;
}

int syncer_sync(struct syncer *s, int idx, char *why, size_t whylen, struct syncer_report *rep)
{
    char local_why[512];
    if (!why) {
        why = local_why;
        whylen = sizeof(local_why);
    }
    struct syncer_report own = {0};
    /* The store's other rounds give way: their requests end (nothing is
     * lost: what they did not push stays dirty, what they did not
     * download is downloaded later), and the sync thread takes up no new
     * round of the store, so that the unmount's sync does not wait for a
     * cold mount's download to end. */
    __atomic_or_fetch(&s->v[idx].cancel, CANCEL_FINAL, __ATOMIC_SEQ_CST);
    int rc = timed_cycle(s, idx, true, why, whylen, &own);
    __atomic_and_fetch(&s->v[idx].cancel, ~CANCEL_FINAL, __ATOMIC_SEQ_CST);
    if (rep)
        *rep = own;
    return rc;
}

void syncer_cancel(struct syncer *s, int idx, bool on)
{
    struct sstore *st = &s->v[idx];
    if (on)
        __atomic_or_fetch(&st->cancel, CANCEL_OFF, __ATOMIC_SEQ_CST);
    else
        __atomic_and_fetch(&st->cancel, ~CANCEL_OFF, __ATOMIC_SEQ_CST);
    __atomic_store_n(&st->final_cancel, on ? 1 : 0, __ATOMIC_SEQ_CST);
}

/* A final sync waits for (or runs on) store idx: no round of the sync
 * thread takes it up meanwhile. */
static bool gives_way(struct syncer *s, int idx)
{
    return __atomic_load_n(&s->v[idx].cancel, __ATOMIC_SEQ_CST) & CANCEL_FINAL;
}

bool syncer_backlog(struct syncer *s, int idx)
{
    pthread_mutex_lock(&s->v[idx].cycle_lock);
    bool b = s->v[idx].backlog && !s->v[idx].disabled;
    pthread_mutex_unlock(&s->v[idx].cycle_lock);
    return b && !stopping(s);
}

void syncer_last_report(struct syncer *s, int idx, struct syncer_report *rep)
{
    pthread_mutex_lock(&s->lock);
    *rep = s->v[idx].rep;
    pthread_mutex_unlock(&s->lock);
}

/* Content first (reads are waiting for it), a slice of each store; the
 * rest comes with the rounds that follow at once (cycle_run prefetches a
 * slice each, and a backlog makes the next round start without waiting),
 * so that edits are pushed and remote changes read between slices while
 * a big store comes down. */
static void prefetch_all(struct syncer *s)
{
    for (size_t i = 0; i < s->n && !stopping(s); i++) {
        struct sstore *st = &s->v[i];
        if (gives_way(s, (int)i))
            continue;
        pthread_mutex_lock(&st->cycle_lock);
        if (!st->disabled) {
            http_thread_cancel(&st->cancel);
            engine_prefetch(s, (int)i, ENGINE_FETCH_SLICE);
            http_thread_cancel(NULL);
        }
        pthread_mutex_unlock(&st->cycle_lock);
    }
}

static void *run(void *arg)
{
    struct syncer *s = arg;
    /* Then a full sync at once: a cache directory may hold changes an
     * earlier session never pushed. */
    prefetch_all(s);
    do {
        /* Each store's sync takes a slice of its backlog (cycle_run); the
         * rounds go on at once, store after store, until none is left. */
        bool more = true;
        while (more) {
            more = false;
            for (size_t i = 0; i < s->n; i++) {
                if (stopping(s))
                    return NULL;
                if (gives_way(s, (int)i))
                    continue; /* its final sync runs; then it is unmounted */
                char why[512];
                int rc = timed_cycle(s, (int)i, false, why, sizeof(why), NULL);
                /* ESHUTDOWN: unmounted, nothing to do; a round cut short
                 * for a final sync failed at nothing. */
                if (rc && rc != -ESHUTDOWN && !(rc == -ECANCELED && gives_way(s, (int)i)))
                    log_warn("memory sync failed", "memory_store_id", s->v[i].id, "error",
                             why);
                more |= !rc && s->v[i].backlog;
            }
        }
    } while (wait_interval(s));
    return NULL;
}

int syncer_start(struct syncer *s)
{
    if (s->running)
        return 0;
    s->stop = false;
    int rc = pthread_create(&s->thr, NULL, run, s);
    if (rc)
        return -rc;
    s->running = true;
    return 0;
}

void syncer_stop(struct syncer *s)
{
    if (!s || !s->running)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    /* A step in flight may be waiting on a server that does not answer:
     * cancel its requests (nothing is lost: what was not pushed stays
     * dirty), wait for the thread, then let requests run again. */
    http_client_cancel(s->h, true);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += 10;
    if (pthread_clockjoin_np(s->thr, NULL, CLOCK_MONOTONIC, &until) == 0)
        s->running = false;
    else
        log_event(LOG_LVL_WARN, "the sync thread did not stop in time; leaving it", NULL);
    http_client_cancel(s->h, false);
}
