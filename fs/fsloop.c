/* fsloop.c - the loop that reads a mounted store's FUSE requests and
 * runs them: one leader at a time, which briefly polls for the next
 * request before it sleeps, and more threads only for requests that
 * wait on the network.
 *
 * Why not libfuse's multi-threaded loop: it keeps idle threads asleep in
 * read(2) on the device, so every request wakes one of them (a wake-up
 * and two context switches, often across CPUs) and its reply wakes the
 * caller again.  On a small virtual machine that wake-up, not the work,
 * is most of a request's cost (docs/architecture.md, "Local
 * operations").  Here the thread that answered a request is the one that
 * reads the next, and it polls the device for FSLOOP_SPIN_US before it
 * sleeps: the next request of a burst (a create is seven) usually
 * arrives within that window and is taken without any thread waking.
 * It polls only after the kinds of request that a next one followed
 * within the window lately (spinhint.h): after a reader's RELEASE or an
 * editor's last RENAME the poll would only burn CPU.  It never polls
 * while the kernel wakes the daemon where the request was made
 * (kwake.c): the poll would then only keep the CPU from the caller.
 *
 * Leader and followers: exactly one thread (the leader) reads the device;
 * the others (followers) wait on a condition variable, never on the
 * device, so the kernel has no sleeper to wake.  The leader runs the
 * request it read itself, then leads again.  A request that is about to
 * wait on the network (a download: ops_load) calls fsloop_blocking()
 * first, which hands the lead to a follower (or a new thread, up to
 * FSLOOP_MAX_THREADS): the other files stay served while it waits.  The
 * cap is well above the downloads run at once (syncer_fetch's slots,
 * FETCH_SLOTS in sync/engine.c): requests past those wait for a slot in
 * their own thread, so a burst of opens of files not in the cache never
 * leaves the device unread (with the cap at 16, sixteen downloads froze
 * every other request of the mount until one ended).  A follower that
 * finds FSLOOP_MAX_IDLE others already waiting ends, so a burst's threads
 * do not stay.
 *
 * Invariants: `leader` and the counters change only under `lock`; a
 * thread reads the device only while it is the leader; each thread has
 * its own request buffer, so a request keeps its buffer while it runs,
 * whoever leads meanwhile.  The loop ends when the device reports the
 * session over (unmounted, aborted) or fuse_session_exit() is called;
 * fsloop_run returns after every thread has finished its request. */
#include "fsloop.h"

#include <errno.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "kwake.h"
#include "log.h"
#include "spinhint.h"

#define FSLOOP_SPIN_US 50
#define FSLOOP_MAX_THREADS 128
#define FSLOOP_MAX_IDLE 4

struct worker;

struct fsloop {
    struct fuse_session *se;
    int fd;
    pthread_mutex_t lock;
    pthread_cond_t lead;     /* followers: the lead is free */
    pthread_cond_t finished; /* fsloop_run: a thread ended */
    struct worker *leader;   /* the thread reading the device, or NULL */
    unsigned threads;        /* alive, leader included */
    unsigned idle;           /* followers waiting for the lead */
    bool done;
    int err;              /* the receive error that ended the loop (0: unmounted or exited) */
    struct spinhint hint; /* after which requests the device is polled */
    uint64_t *polls;      /* polls started (relaxed atomic; the store's status) */
    bool starved;         /* the lead could not be handed on (said once) */
};

struct worker {
    struct fsloop *l;
    struct fuse_buf buf;
};

static __thread struct worker *self;

static int64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* Polls the device without sleeping for up to FSLOOP_SPIN_US: a request
 * that arrives meanwhile is read without a wake-up. */
static void spin(struct fsloop *l)
{
    int64_t until = now_us() + FSLOOP_SPIN_US;
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    do {
        if (poll(&p, 1, 0) != 0 || fuse_session_exited(l->se))
            return;
    } while (now_us() < until);
}

/* The opcode of the request in buf (res bytes read), or UINT32_MAX. */
static uint32_t opcode_of(const struct fuse_buf *buf, int res)
{
    if (res < (int)sizeof(struct fuse_in_header) || (buf->flags & FUSE_BUF_IS_FD))
        return UINT32_MAX;
    return ((const struct fuse_in_header *)buf->mem)->opcode;
}

static void *worker_main(void *arg);

/* A new thread, which becomes a follower; called with lock held. */
static bool spawn(struct fsloop *l)
{
    struct worker *w = calloc(1, sizeof(*w));
    if (!w)
        return false;
    w->l = l;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &a, worker_main, w);
    pthread_attr_destroy(&a);
    if (rc != 0) {
        free(w);
        return false;
    }
    l->threads++;
    return true;
}

/* Lock held: ends the loop for every thread. */
static void finish(struct fsloop *l, int err)
{
    if (!l->done) {
        l->done = true;
        l->err = err;
    }
    pthread_cond_broadcast(&l->lead);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct fsloop *l = w->l;
    self = w;
    bool hot = false;        /* answered a request since it last waited */
    uint32_t last = 0;       /* the opcode of that request */
    int64_t answered_us = 0; /* when it was answered */
    pthread_mutex_lock(&l->lock);
    for (;;) {
        bool spare = false;
        while (l->leader && !l->done && !(spare = l->idle >= FSLOOP_MAX_IDLE)) {
            l->idle++;
            pthread_cond_wait(&l->lead, &l->lock);
            l->idle--;
            hot = false;
        }
        if (spare)
            break; /* enough followers wait already */
        if (l->done || fuse_session_exited(l->se)) {
            finish(l, 0);
            break;
        }
        l->leader = w;
        pthread_mutex_unlock(&l->lock);
        bool polled = hot && !kwake_here(answered_us) && spinhint_poll(&l->hint, last);
        if (polled) {
            __atomic_fetch_add(l->polls, 1, __ATOMIC_RELAXED);
            spin(l);
        }
        int res = fuse_session_receive_buf(l->se, &w->buf);
        if (hot && res > 0)
            spinhint_learn(&l->hint, last, now_us() - answered_us, polled, FSLOOP_SPIN_US);
        if (res > 0) {
            last = opcode_of(&w->buf, res);
            fuse_session_process_buf(l->se, &w->buf);
            answered_us = now_us();
        }
        hot = res > 0;
        pthread_mutex_lock(&l->lock);
        if (l->leader == w)
            l->leader = NULL; /* it leads again at once: nobody to wake */
        if (res == 0 || (res < 0 && res != -EINTR && res != -EAGAIN)) {
            finish(l, res); /* 0: the session is over (unmounted, exited) */
            break;
        }
    }
    /* l lives in fsloop_run's frame: not touched once unlocked. */
    l->threads--;
    pthread_cond_signal(&l->finished);
    pthread_mutex_unlock(&l->lock);
    self = NULL;
    free(w->buf.mem);
    free(w);
    return NULL;
}

void fsloop_blocking(void)
{
    struct worker *w = self;
    if (!w)
        return;
    struct fsloop *l = w->l;
    pthread_mutex_lock(&l->lock);
    if (l->leader == w && !l->done) {
        l->leader = NULL;
        if (l->idle) {
            pthread_cond_signal(&l->lead);
        } else if (l->threads >= FSLOOP_MAX_THREADS || !spawn(l)) {
            /* Once a burst: the mount's other requests wait until a
             * download ends. */
            if (!l->starved)
                log_warn("cannot start a thread for the other requests of the mount; they wait "
                         "for a download");
            l->starved = true;
        } else {
            l->starved = false;
        }
    }
    pthread_mutex_unlock(&l->lock);
}

int fsloop_run(struct fuse_session *se, int fd, uint64_t *polls)
{
    struct fsloop l = {.se = se, .fd = fd, .threads = 1, .polls = polls};
    struct worker *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->l = &l;
    spinhint_init(&l.hint);
    pthread_mutex_init(&l.lock, NULL);
    pthread_cond_init(&l.lead, NULL);
    pthread_cond_init(&l.finished, NULL);
    worker_main(w); /* this thread is the first leader */
    pthread_mutex_lock(&l.lock);
    while (l.threads)
        pthread_cond_wait(&l.finished, &l.lock);
    pthread_mutex_unlock(&l.lock);
    pthread_cond_destroy(&l.finished);
    pthread_cond_destroy(&l.lead);
    pthread_mutex_destroy(&l.lock);
    fuse_session_reset(se);
    return l.err;
}
