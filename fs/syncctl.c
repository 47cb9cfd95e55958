/* syncctl.c - `memstorefs sync [PATH... | --all] [--wait]`: a sync now.
 *
 * Control socket commands (control.c dispatches them here):
 *   sync <path> | sync-all             kick the sync thread; answer ok at once
 *   sync-wait <path> | sync-wait-all   run a sync of those stores (pull and
 *                                      push, as a periodic one) and answer
 *                                      when it is done: a line per store,
 *                                      the files left unpushed, then "ok",
 *                                      "ok unpushed" or "error <reason>"
 * A waiting client is served by a detached thread of its own (at most
 * MAX_WAITERS at once; ctlserve.c hands its socket over), so the daemon's
 * main loop, its signals and its other clients never wait for a sync.  The threads are counted
 * (waiters); syncctl_drain waits for them before the daemon frees what
 * they use.  The syncs themselves are serialised with the sync thread's
 * by each store's cycle_lock (engine.c). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "cli.h"
#include "daemon.h"
#include "engine.h"
#include "runtime.h"

#define MAX_WAITERS 16

static int waiters; /* atomic */

struct waiter {
    struct daemon *d;
    int fd;
    struct fs_store *v[16];
    size_t n;
};

/* Sends all of s, or as much as the client takes before a send times out. */
/* One answer, whole (ctl_send_all: bounded however slowly it is read). */
static void put(int fd, const char *s)
{
    int64_t deadline = 0;
    ctl_send_all(fd, s, strlen(s), &deadline);
}

/* Adds a round's report to the ones before it: counts add up, what is
 * left is the last round's. */
static void add_report(struct syncer_report *sum, const struct syncer_report *r)
{
    sum->pushed += r->pushed;
    sum->deleted += r->deleted;
    sum->conflicts += r->conflicts;
    sum->failed += r->failed;
    sum->refused = r->refused;
    sum->held = r->held;
    sum->pending = r->pending;
    sum->kept_deletions = r->kept_deletions;
    sum->unsaved = r->unsaved;
}

static void *serve_wait(void *arg)
{
    struct waiter *w = arg;
    bool failed = false, unpushed = false;
    char last_why[600] = "";
    struct syncer_report sum[16];
    int rcs[16];
    char whys[16][512];
    bool more[16];
    memset(sum, 0, sizeof(sum));
    /* Round after round, a slice of each store's backlog in turn, until
     * none is left (the sync thread's order, engine.c). */
    for (size_t i = 0; i < w->n; i++) {
        rcs[i] = 0;
        whys[i][0] = '\0';
        more[i] = true;
    }
    for (bool any = true; any;) {
        any = false;
        for (size_t i = 0; i < w->n; i++) {
            if (!more[i])
                continue;
            struct syncer_report rep = {0};
            int idx = w->v[i]->sync_idx;
            rcs[i] = syncer_sync_now(w->d->sync, idx, whys[i], sizeof(whys[i]), &rep);
            add_report(&sum[i], &rep);
            more[i] = !rcs[i] && syncer_backlog(w->d->sync, idx);
            any |= more[i];
        }
    }
    /* The whole answer is made before any of it is sent: a send may block
     * (a client that stops reading: 20 s at most, ctl_send_all), and the
     * daemon may stop meanwhile; from the first send on, this thread
     * touches nothing of the daemon's. */
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) {
        put(w->fd, "error out of memory\n");
        close(w->fd);
        free(w);
        __atomic_sub_fetch(&waiters, 1, __ATOMIC_SEQ_CST);
        return NULL;
    }
    for (size_t i = 0; i < w->n; i++) {
        struct fs_store *s = w->v[i];
        const struct syncer_report rep = sum[i];
        int rc = rcs[i];
        const char *why = whys[i];
        if (rc) {
            failed = true;
            fprintf(m, "%s at %s: the sync failed: %s\n", s->id, s->mount_path, why);
            snprintf(last_why, sizeof(last_why), "memory store %s: %s", s->id, why);
        } else {
            /* What is not in the store after the sync, whichever sync
             * found it: a file refused by an earlier sync stays refused
             * (kept locally) until its content changes. */
            struct cache_store_stats cs;
            int prc = cache_store_pending(w->d->cache, s->id, &cs);
            if (prc != 0) {
                /* Not known to be all pushed: said, and counted as left. */
                memset(&cs, 0, sizeof(cs));
                fprintf(m, "%s at %s: cannot read what is left unpushed: %s\n", s->id,
                        s->mount_path, strerror(-prc));
                unpushed = true;
            }
            unsigned refused = rep.refused > cs.refused ? rep.refused : (unsigned)cs.refused;
            fprintf(m, "%s at %s: synced; pushed %u, deleted %u, conflicts %u, refused %u, "
                       "pending %u\n", s->id, s->mount_path, rep.pushed, rep.deleted,
                    rep.conflicts, refused, rep.pending);
            if (rep.pending || refused || rep.unsaved || cs.unsaved) {
                unpushed = true;
                daemon_list_unpushed(w->d->cache, s->id, s->mount_path, false, m);
            } else if (daemon_list_unsaved_open(w->d->cache, s->id, s->mount_path, m) > 0) {
                /* Edits writers hold unsaved are in none of those counts. */
                unpushed = true;
            }
        }
    }
    if (failed)
        fprintf(m, "error %s\n", last_why);
    else
        fputs(unpushed ? "ok unpushed\n" : "ok\n", m);
    bool whole = fflush(m) == 0 && !ferror(m);
    fclose(m);
    put(w->fd, whole && text ? text : "error out of memory\n");
    free(text);
    close(w->fd);
    free(w);
    __atomic_sub_fetch(&waiters, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

bool syncctl_serve(struct daemon *d, int fd, const char *line)
{
    /* The immediate answers below are short: a non-blocking send of them
     * goes through. */
    bool wait = strncmp(line, "sync-wait", 9) == 0;
    const char *rest = line + (wait ? 9 : 4);
    bool all = strcmp(rest, "-all") == 0;
    if (!all && rest[0] != ' ')
        return false;
    struct waiter *w = calloc(1, sizeof(*w));
    if (!w) {
        put(fd, "error out of memory\n");
        return false;
    }
    w->d = d;
    w->fd = fd;
    for (size_t i = 0; i < d->n && w->n < 16; i++) {
        struct fs_store *s = &d->stores[i];
        if (!s->gone && (all || strcmp(s->mount_path, rest + 1) == 0))
            w->v[w->n++] = s;
    }
    if (!w->n) {
        char msg[4300];
        snprintf(msg, sizeof(msg), "error no memory store of this daemon is mounted at %s\n",
                 all ? "any path" : rest + 1);
        put(fd, msg);
        free(w);
        return false;
    }
    if (!wait) {
        syncer_kick(d->sync);
        put(fd, "ok\n");
        free(w);
        return false;
    }
    /* The thread writes with blocking sends, each bounded: a client that
     * stops reading cannot hold it for long. */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    bool started = false;
    if (__atomic_add_fetch(&waiters, 1, __ATOMIC_SEQ_CST) <= MAX_WAITERS)
        started = pthread_create(&t, &a, serve_wait, w) == 0;
    pthread_attr_destroy(&a);
    if (!started) {
        __atomic_sub_fetch(&waiters, 1, __ATOMIC_SEQ_CST);
        put(fd, "error too many syncs are being waited for; try again\n");
        free(w);
        return false;
    }
    return true; /* the thread answers and closes fd */
}

bool syncctl_drain(int timeout_s)
{
    for (int i = 0; i < timeout_s * 10 && __atomic_load_n(&waiters, __ATOMIC_SEQ_CST) > 0; i++)
        usleep(100 * 1000);
    return __atomic_load_n(&waiters, __ATOMIC_SEQ_CST) == 0;
}

/* ---- the client: memstorefs sync ---- */

struct sync_ctx {
    const char *path; /* NULL: every store */
    bool wait;
    int found, failed, unpushed;
    pid_t asked[64];
    int n_asked;
};

static int sync_one(void *arg, const char *file, const struct rt_lockinfo *info, bool alive)
{
    struct sync_ctx *c = arg;
    /* The mount point, or a path inside it. */
    if (c->path && !rt_mount_prefix(info, c->path))
        return 0;
    c->found++;
    if (!alive) {
        fprintf(stderr, "memstorefs: %s: its daemon (pid %d) is gone; run 'memstorefs unmount "
                        "%s', then 'memstorefs flush'\n", info->mount_path, (int)info->pid,
                info->mount_path);
        c->failed++;
        return 0;
    }
    if (!c->path) {
        for (int i = 0; i < c->n_asked; i++)
            if (c->asked[i] == info->pid)
                return 0;
        if (c->n_asked < 64)
            c->asked[c->n_asked++] = info->pid;
    }
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "%s%s%s", c->wait ? "sync-wait" : "sync",
             c->path ? " " : "-all", c->path ? info->mount_path : "");
    int rc = control_ask_mount(info, cmd, stdout, c->wait ? 3700 : 10);
    if (rc == 1)
        c->unpushed++;
    else if (rc)
        c->failed++;
    return 0;
}

int control_sync(int argc, char **argv)
{
    bool wait = false, all = false;
    int n_paths = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--wait") == 0)
            wait = true;
        else if (strcmp(argv[i], "--all") == 0)
            all = true;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: memstorefs sync [PATH... | --all] [--wait]\n");
            return 2;
        } else
            n_paths++;
    }
    if (all && n_paths) {
        fprintf(stderr, "usage: memstorefs sync [PATH... | --all] [--wait]\n");
        return 2;
    }
    int status = 0, unpushed = 0;
    if (!n_paths) {
        struct sync_ctx c = {.wait = wait};
        if (rt_each_lock(sync_one, &c) != 0 || c.failed)
            status = 1;
        if (!c.found) {
            fprintf(stderr, "memstorefs: nothing is mounted\n");
            status = 1;
        }
        unpushed = c.unpushed;
    }
    for (int i = 1; n_paths && i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        char path[4096];
        /* A relative path (".", from inside the mount) as an absolute one. */
        if (argv[i][0] == '/' || !realpath(argv[i], path))
            snprintf(path, sizeof(path), "%s", argv[i]);
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/')
            path[--n] = '\0';
        struct sync_ctx c = {.path = path, .wait = wait};
        if (rt_each_lock(sync_one, &c) != 0 || c.failed)
            status = 1;
        if (!c.found) {
            fprintf(stderr, "memstorefs: %s is not a memstorefs mount on this host\n", path);
            status = 1;
        }
        unpushed += c.unpushed;
    }
    /* 3: the sync ran, but what is listed above is not in the store. */
    return status ? status : unpushed ? 3 : 0;
}
