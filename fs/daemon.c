/* daemon.c - the `memstorefs mount` command: from validated options to
 * mounted stores, the daemon's main loop, and a clean teardown.
 *
 * Order of work, each step undone on failure by teardown_all():
 *   1. credentials, mount-path checks (clean, absolute, absent: lstat)
 *   2. fork (unless --foreground); the parent waits on a pipe for one
 *      status byte and exits with it, so `mount` returns only when every
 *      store is mounted and listed, or has failed and left nothing
 *   3. per store: the host lock, the directories (created ones recorded)
 *   4. cache, HTTP client, syncer; per store: retrieve the store, attach
 *      it in the cache, list it (the tree is in the cache now)
 *   5. per store: a FUSE session mounted at its path, with its loop thread
 *   6. ready: the sync thread starts, stdio is detached (background mode),
 *      the log goes to its target, systemd hears READY=1 (sdnotify.c)
 *   7. main loop: signals (signalfd; SIGHUP reopens the log), the control
 *      socket and its clients (ctlserve.c: never waits for a client), loop
 *      threads ending (a store unmounted from outside); until no store is
 *      left.  STOPPING=1 goes to systemd when the final sync before the
 *      exit begins.
 * The log target (--log-file: a file, syslog or -) is opened before the
 * mount commits to anything, so one that cannot be opened refuses the
 * mount with the reason; the default file, CACHE_DIR/memstorefs.log, once
 * the cache directory exists.
 * Who may use a mount: its owner only, unless --uid/--gid name another
 * user or group than root's own for a root mount, or -o allow_other is
 * given (start_session); the kernel then applies the modes
 * (default_permissions), 0644/0755 less --umask.
 * All signals the daemon handles are blocked in every thread (set before
 * any thread exists) and read from the signalfd by the main thread only.
 * fs_store fields after `se` are owned by the main thread. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "cache.h"
#include "cli.h"
#include "daemon.h"
#include "engine.h"
#include "fs.h"
#include "fsloop.h"
#include "history.h"
#include "housekeep.h"
#include "http.h"
#include "log.h"
#include "mountdir.h"
#include "openfile.h"
#include "private.h"
#include "rules.h"
#include "runtime.h"
#include "sdnotify.h"
#include "session.h"

static struct daemon D;

/* libfuse's own messages go through the same sink. */
static void fuse_log_sink(enum fuse_log_level level, const char *fmt, va_list ap)
{
    enum log_level lvl = level <= FUSE_LOG_ERR       ? LOG_LVL_ERROR
                         : level <= FUSE_LOG_WARNING ? LOG_LVL_WARN
                         : level <= FUSE_LOG_INFO    ? LOG_LVL_INFO
                                                     : LOG_LVL_DEBUG;
    if (!log_enabled(lvl))
        return;
    char msg[1024];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral" /* libfuse's own format */
    vsnprintf(msg, sizeof(msg), fmt, ap);
#pragma GCC diagnostic pop
    size_t n = strlen(msg);
    if (n && msg[n - 1] == '\n')
        msg[n - 1] = '\0';
    log_event(lvl, msg, "source", "libfuse", NULL);
}

static void *loop_main(void *arg)
{
    struct fs_store *s = arg;
    int rc = fsloop_run(s->se);
    if (rc < 0)
        log_error("cannot read the mount's requests; the mount stops", "memory_store_id", s->id,
                  "path", s->mount_path, "error", strerror(-rc));
    __atomic_store_n(&s->loop_done, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    (void)!write(D.wake_fd, &one, sizeof(one));
    return NULL;
}

/* Whether a root mount is opened to other accounts without -o allow_other:
 * when its files are given to another user or group. */
static bool shared_by_owner(const struct mount_opts *o)
{
    return geteuid() == 0 && (o->uid != 0 || o->gid != 0);
}

static int start_session(struct fs_store *s, const struct mount_opts *o)
{
    char opts[2048];
    snprintf(opts, sizeof(opts), "fsname=memstorefs:%s,subtype=memstorefs,default_permissions%s%s%s%s",
             s->id, shared_by_owner(o) ? ",allow_other" : "", s->read_only ? ",ro" : "",
             o->fuse_opts ? "," : "", o->fuse_opts ? o->fuse_opts : "");
    char prog[] = "memstorefs", dash_o[] = "-o";
    char *argv[] = {prog, dash_o, opts, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, argv);
    s->se = fuse_session_new(&args, &fs_ops, sizeof(fs_ops), s);
    fuse_opt_free_args(&args);
    if (!s->se) {
        fprintf(stderr, "memstorefs: cannot create the FUSE session for %s (memory_store_id=%s); "
                        "check the -o options\n", s->mount_path, s->id);
        return -EINVAL;
    }
    if (fuse_session_mount(s->se, s->mount_path) != 0) {
        fprintf(stderr, "memstorefs: cannot mount %s (memory_store_id=%s); is /dev/fuse "
                        "available and fusermount3 installed?\n", s->mount_path, s->id);
        fuse_session_destroy(s->se);
        s->se = NULL;
        return -EIO;
    }
    s->mounted = true;
    int rc = fuseio_attach(s);
    if (rc) {
        fprintf(stderr, "memstorefs: cannot set up the FUSE device of %s: %s\n", s->mount_path,
                strerror(-rc));
        fuse_session_unmount(s->se);
        s->mounted = false;
        return rc;
    }
    rc = pthread_create(&s->loop, NULL, loop_main, s);
    if (rc) {
        fuse_session_unmount(s->se);
        s->mounted = false;
        return -rc;
    }
    s->loop_running = true;
    return 0;
}

/* Aborts the FUSE connection with device number dev through fusectl
 * (mounting it when it is not, as root): a process that still holds a
 * file of a lazily unmounted store would otherwise keep the connection,
 * the loop threads and so the daemon alive after the session ended.  Such
 * a process then gets ENOTCONN. */
static void abort_connection(const struct fs_store *s, dev_t dev)
{
    char p[128];
    snprintf(p, sizeof(p), "/sys/fs/fuse/connections/%u/abort", minor(dev));
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && geteuid() == 0 &&
        mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, NULL) == 0)
        fd = open(p, O_WRONLY | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    if (!err && write(fd, "1", 1) != 1)
        err = errno ? errno : EIO;
    if (err)
        log_warn("files of the store are still open; the daemon waits until they are closed",
                 "memory_store_id", s->id, "path", s->mount_path, "error", strerror(err));
    else
        log_info("files of the store were still open; their connection was aborted",
                 "memory_store_id", s->id, "path", s->mount_path);
    if (fd >= 0)
        close(fd);
}

void daemon_teardown_store(struct fs_store *s)
{
    if (s->se) {
        bool ended = __atomic_load_n(&s->loop_done, __ATOMIC_ACQUIRE);
        pthread_mutex_lock(&s->se_lock);
        bool was_mounted = s->mounted;
        s->mounted = false;
        pthread_mutex_unlock(&s->se_lock);
        if (was_mounted && !ended) {
            struct stat st;
            bool have_dev = stat(s->mount_path, &st) == 0; /* served by the loop */
            fuse_session_exit(s->se);
            fuse_session_unmount(s->se); /* lazy: busy files keep the connection */
            for (int i = 0; i < 40 && !__atomic_load_n(&s->loop_done, __ATOMIC_ACQUIRE); i++)
                usleep(50 * 1000);
            if (!__atomic_load_n(&s->loop_done, __ATOMIC_ACQUIRE) && have_dev)
                abort_connection(s, st.st_dev);
        } else if (was_mounted) {
            /* Unmounted from outside: libfuse sees the device report an
             * error and unmounts nothing more, but frees what the mount
             * holds (its mount point). */
            fuse_session_unmount(s->se);
        }
        if (s->loop_running)
            pthread_join(s->loop, NULL);
        s->loop_running = false;
        fuse_session_destroy(s->se);
        s->se = NULL;
        log_info("unmounted memory store", "memory_store_id", s->id, "path", s->mount_path);
    }
    mountdir_remove(s);
    syncer_disable(s->sync, s->sync_idx); /* before the lock goes */
    rt_unlock_store(s->lock_fd, s->lock_file);
    s->lock_fd = -1;
    free(s->lock_file);
    s->lock_file = NULL;
    s->gone = true;
}

struct final_job {
    struct fs_store **v;
    size_t n;
};

static void *final_main(void *arg)
{
    struct final_job *j = arg;
    for (size_t i = 0; i < j->n; i++) {
        char why[512];
        if (syncer_sync(D.sync, j->v[i]->sync_idx, why, sizeof(why), NULL) != 0)
            log_warn("memory flush failed", "memory_store_id", j->v[i]->id, "error", why);
    }
    return NULL;
}

/* The final sync of v[0..n) at unmount, bounded by the flush timeout:
 * past it, requests in flight are cancelled and what they carried stays
 * dirty in the cache for the next mount.  Writes one line per store with
 * something left unpushed to report (may be NULL) and to the log, then
 * (to report) the files concerned.  Returns how many stores left some. */
static size_t final_sync(struct fs_store **v, size_t n, FILE *report)
{
    size_t stores_left = 0;
    if (!D.sync || !n)
        return 0;
    /* Only content a writer closed or fsynced is pushed.  Files still open
     * with unsaved edits get a short grace to be closed (a tenth of the
     * flush timeout); past it, their edits are kept as records (memstorefs
     * conflicts) and the final sync pushes their last saved state. */
    int64_t grace_ms = (int64_t)D.flush_timeout * 100;
    for (int64_t waited = 0; waited < grace_ms && ofile_unsaved_count() > 0; waited += 100)
        usleep(100 * 1000);
    size_t failed = 0, kept = ofile_keep_unsaved_all(D.cache, &failed);
    if (kept) {
        char nk[32];
        snprintf(nk, sizeof(nk), "%zu", kept);
        log_warn("files were still open with unsaved edits at unmount; their last saved state "
                 "is pushed and the edits are kept in the cache (memstorefs conflicts)",
                 "files", nk, "cache_dir", D.cache_dir);
    }
    if (failed)
        log_error("cannot keep the unsaved edits of a file still open at unmount", "cache_dir",
                  D.cache_dir);
    struct final_job j = {v, n};
    pthread_t t;
    if (pthread_create(&t, NULL, final_main, &j) != 0) {
        final_main(&j);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += D.flush_timeout;
        if (pthread_timedjoin_np(t, NULL, &until) != 0) {
            char secs[32];
            snprintf(secs, sizeof(secs), "%d", D.flush_timeout);
            log_warn("final memory sync cut off at the flush timeout; what it had not pushed "
                     "stays in the cache for the next mount", "flush_timeout_s", secs);
            http_client_cancel(D.http, true);
            pthread_join(t, NULL);
            http_client_cancel(D.http, false);
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct cache_store_stats st;
        if (cache_store_stats(D.cache, v[i]->id, &st) != 0)
            continue;
        unsigned long long left = st.dirty + st.tombstones - st.kept_deletions,
                           refused = st.refused, unsaved = st.unsaved;
        if (!left && !refused && !unsaved)
            continue;
        /* What happens to each kind, exactly: changes are pushed by the
         * next mount or `flush`; a refused file only once its content
         * changes; a file never closed only once a writer closes it. */
        char msg[1400], parts[1000] = "";
        size_t k = 0;
        if (left)
            k += (size_t)snprintf(parts + k, sizeof(parts) - k, "%llu local change%s not "
                                  "pushed (the next mount of this store with the same "
                                  "--cache-dir, or memstorefs flush, pushes %s)", left,
                                  left == 1 ? "" : "s", left == 1 ? "it" : "them");
        if (refused)
            k += (size_t)snprintf(parts + k, sizeof(parts) - k, "%s%llu file%s refused by the "
                                  "server (retried only once %s content changes)",
                                  k ? "; " : "", refused, refused == 1 ? "" : "s",
                                  refused == 1 ? "its" : "their");
        if (unsaved)
            snprintf(parts + k, sizeof(parts) - k, "%s%llu new file%s never closed by a writer "
                     "(pushed only once a writer closes or fsyncs %s)", k ? "; " : "", unsaved,
                     unsaved == 1 ? "" : "s", unsaved == 1 ? "it" : "them");
        snprintf(msg, sizeof(msg), "memory store %s: %s; they stay in the cache (%s)", v[i]->id,
                 parts, D.cache_dir);
        log_warn("memory flush left changes unpushed", "memory_store_id", v[i]->id, "path",
                 v[i]->mount_path, "unpushed", msg);
        stores_left++;
        if (report) {
            fprintf(report, "%s\n", msg);
            daemon_list_unpushed(D.cache, v[i]->id, v[i]->mount_path, report);
        }
    }
    return stores_left;
}

static size_t live_stores(void)
{
    size_t n = 0;
    for (size_t i = 0; i < D.n; i++)
        n += !D.stores[i].gone;
    return n;
}

size_t daemon_unmount(struct fs_store **v, size_t n, FILE *report)
{
    if (n && n >= live_stores())
        sdnotify("STOPPING=1\nSTATUS=final sync of the memory stores, then exit");
    size_t left = final_sync(v, n, report);
    for (size_t i = 0; i < n; i++)
        if (!v[i]->gone)
            daemon_teardown_store(v[i]);
    return left;
}

static void teardown_all(bool flush)
{
    struct fs_store *v[16];
    size_t n = 0;
    for (size_t i = 0; i < D.n && n < 16; i++)
        if (!D.stores[i].gone)
            v[n++] = &D.stores[i];
    if (flush) {
        sdnotify("STOPPING=1\nSTATUS=final sync of the memory stores, then exit");
        syncer_stop(D.sync);
        final_sync(v, n, NULL);
        /* From now on no request may hold up the exit: an open that is
         * downloading content ends at once (its loop thread is joined
         * below). */
        http_client_cancel(D.http, true);
    }
    for (size_t i = 0; i < n; i++)
        daemon_teardown_store(v[i]);
}

static void free_all(void)
{
    housekeep_stop();
    mountdir_finish();
    /* Clients waiting for a sync (memstorefs sync --wait) use the syncer:
     * their requests end at once (cancelled), then they answer. */
    http_client_cancel(D.http, true);
    syncctl_drain(10);
    hist_drain(10);
    syncer_free(&D.sync);
    if (D.sync)
        return; /* its thread would not stop: the process exits with it alive */
    http_client_free(&D.http);
    cache_close(&D.cache);
    for (size_t i = 0; i < D.n; i++) {
        struct fs_store *s = &D.stores[i];
        free(s->marker);
        free(s->own_name);
    }
    free(D.stores);
    D.stores = NULL;
    control_finish(&D);
    if (D.ctl_fd >= 0) {
        close(D.ctl_fd);
        priv_unlink(D.ctl_path, S_IFSOCK);
    }
}

/* Describes an API failure during set-up in terms a user can act on. */
static void explain_api(const struct fs_store *s, int rc, const struct api_error *e)
{
    if (rc == -ENOENT)
        fprintf(stderr, "memstorefs: unknown memory store %s (the API answered 404%s%s)\n", s->id,
                e->message[0] ? ": " : "", e->message);
    else if (rc == -EACCES || rc == -EPERM)
        fprintf(stderr, "memstorefs: the credential from %s was refused for memory store %s "
                        "(HTTP %ld%s%s)\n", D.cred.source ? D.cred.source : "the environment",
                s->id, e->status, e->message[0] ? ": " : "", e->message);
    else if (e->status)
        fprintf(stderr, "memstorefs: memory store %s could not be read: HTTP %ld %s%s%s\n", s->id,
                e->status, e->type, e->message[0] ? ": " : "", e->message);
    else
        fprintf(stderr, "memstorefs: cannot reach the Memory Stores API at %s for memory store "
                        "%s: %s\n", D.cred.base_url, s->id, strerror(-rc));
}

static int setup_stores(struct mount_opts *o)
{
    char why[1024];
    for (size_t i = 0; i < D.n; i++) {
        struct fs_store *s = &D.stores[i];
        struct rt_lockinfo info = {0}, other = {0};
        info.pid = getpid();
        snprintf(info.store_id, sizeof(info.store_id), "%s", s->id);
        snprintf(info.mount_path, sizeof(info.mount_path), "%s", s->mount_path);
        int rc = rt_lock_store(&info, &s->lock_fd, &s->lock_file, &other);
        if (rc == -EBUSY) {
            fprintf(stderr, "memstorefs: memory store %s is already mounted on this host at %s "
                            "(memstorefs pid %d); unmount it first\n", s->id,
                    other.mount_path[0] ? other.mount_path : "?", (int)other.pid);
            return rc;
        }
        if (rc) {
            fprintf(stderr, "memstorefs: cannot take the lock of memory store %s: %s\n", s->id,
                    rt_error()[0] ? rt_error() : strerror(-rc));
            return rc;
        }
        if ((rc = mountdir_make(s, &info)))
            return rc;
        rt_lock_update(s->lock_fd, &info);
    }

    int rc = cache_open(o->cache_dir, &D.cache);
    if (rc) {
        fprintf(stderr, "memstorefs: cannot open the cache in %s: %s\n", o->cache_dir,
                strerror(-rc));
        return rc;
    }
    if (!o->log_file && (rc = daemon_open_log(o)))
        return rc;
    struct http_opts ho = {.base_url = D.cred.base_url, .api_key = D.cred.api_key,
                           .bearer = D.cred.bearer, .max_in_flight = 16, .max_retries = -1,
                           .max_per_minute = o->max_rpm};
    D.http = http_client_new(&ho);
    if (!D.http) {
        int err = errno;
        fprintf(stderr, "memstorefs: cannot use the API endpoint '%s': %s\n", D.cred.base_url,
                strerror(err));
        return -err;
    }
    static bool progress_shown;
    struct syncer_opts so = {.interval_s = o->sync_interval, .full_resync_s = o->full_resync,
                             .progress = daemon_list_progress, .progress_arg = &progress_shown};
    if (strcmp(o->deletions, "log_only") == 0)
        so.deletions = SYNCER_DEL_LOG_ONLY;
    else if (strcmp(o->deletions, "disabled") == 0)
        so.deletions = SYNCER_DEL_DISABLED;
    D.sync = syncer_new(D.cache, D.http, &so);
    if (!D.sync)
        return -ENOMEM;

    for (size_t i = 0; i < D.n; i++) {
        struct fs_store *s = &D.stores[i];
        struct api_store as = {0};
        struct api_error e = {0};
        rc = api_store_get(D.http, s->id, &as, &e);
        if (rc) {
            explain_api(s, rc, &e);
            api_error_clear(&e);
            return rc;
        }
        if (as.archived && !s->read_only)
            log_warn("the memory store is archived; the server will refuse writes to it",
                     "memory_store_id", s->id);
        if (!s->name && as.name)
            s->name = s->own_name = strdup(as.name);
        api_store_clear(&as);
        if ((rc = cache_store_attach(D.cache, s->id, s->read_only, &s->root))) {
            fprintf(stderr, "memstorefs: cannot record memory store %s in the cache: %s\n", s->id,
                    strerror(-rc));
            return rc;
        }
        enum cache_del_mode mode = so.deletions == SYNCER_DEL_LOG_ONLY  ? CACHE_DEL_LOG_ONLY
                                   : so.deletions == SYNCER_DEL_DISABLED ? CACHE_DEL_DISABLED
                                                                         : CACHE_DEL_ENABLED;
        if ((rc = cache_store_set_mode(D.cache, s->id, mode))) {
            fprintf(stderr, "memstorefs: cannot record memory store %s in the cache: %s\n", s->id,
                    strerror(-rc));
            return rc;
        }
        s->cache = D.cache;
        s->sync = D.sync;
        struct sync_notify n;
        fs_notify_init(s, &n);
        s->sync_idx = syncer_add(D.sync, s->id, s->read_only, &n);
        if (s->sync_idx < 0)
            return s->sync_idx;
        if ((rc = syncer_refresh(D.sync, s->sync_idx, why, sizeof(why)))) {
            fprintf(stderr, "memstorefs: %s\n", why);
            return rc;
        }
    }
    for (size_t i = 0; i < D.n; i++)
        if ((rc = start_session(&D.stores[i], o)))
            return rc;
    return 0;
}

static int open_control(void)
{
    D.ctl_fd = -1;
    int rc = rt_sock_path(getpid(), D.ctl_path, sizeof(D.ctl_path));
    if (rc)
        return rc;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(D.ctl_path) >= sizeof(a.sun_path))
        return -ENAMETOOLONG;
    memcpy(a.sun_path, D.ctl_path, strlen(D.ctl_path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* A socket left by a dead daemon of ours with our pid goes; anything
     * else at the path makes bind fail.  The socket is created 0600 (the
     * umask is set around bind: no other thread creates files now). */
    priv_unlink(D.ctl_path, S_IFSOCK);
    mode_t old = umask(0177);
    rc = bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 8) != 0 ? -errno : 0;
    umask(old);
    if (rc) {
        close(fd);
        return rc;
    }
    D.ctl_fd = fd;
    return 0;
}

static void main_loop(int sig_fd)
{
    while (live_stores() > 0) {
        struct pollfd p[2 + 1 + CTL_CLIENTS] = {{sig_fd, POLLIN, 0}, {D.wake_fd, POLLIN, 0}};
        int timeout = -1;
        int nc = control_pollfds(&D, p + 2, &timeout);
        if (poll(p, (nfds_t)(2 + nc), timeout) < 0) {
            if (errno == EINTR)
                continue;
            log_error("poll failed", "error", strerror(errno));
            break;
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sig_fd, &si, sizeof(si)) == sizeof(si)) {
                const char *name = si.ssi_signo == SIGTERM ? "SIGTERM"
                                   : si.ssi_signo == SIGINT ? "SIGINT" : "SIGHUP";
                if (si.ssi_signo == SIGHUP) {
                    char why[512];
                    if (log_target_reopen(why, sizeof(why)) != 0)
                        log_warn("cannot reopen the log; logging on to the old one", "error",
                                 why);
                    else
                        log_info("SIGHUP: log reopened; send SIGTERM or run 'memstorefs "
                                 "unmount' to stop", NULL, NULL);
                    continue;
                }
                log_info("signal received; final sync, then unmount", "signal", name);
                teardown_all(true);
                break;
            }
        }
        if (p[1].revents & POLLIN) {
            uint64_t v;
            (void)!read(D.wake_fd, &v, sizeof(v));
            for (size_t i = 0; i < D.n; i++) {
                struct fs_store *s = &D.stores[i];
                if (!s->gone && __atomic_load_n(&s->loop_done, __ATOMIC_ACQUIRE)) {
                    log_info("memory store was unmounted from outside; final sync, then "
                             "cleaning up", "memory_store_id", s->id, "path", s->mount_path);
                    daemon_unmount(&s, 1, NULL);
                }
            }
        }
        control_handle(&D, p + 2, nc);
    }
}

int daemon_mount(struct mount_opts *o)
{
    int status = 1, ready_fd = -1;
    /* Free memory at the top of a thread's heap is given back to the
     * kernel only past 1 MiB.  glibc's default (128 KiB, and lower for the
     * heaps of threads) made every close give back and fault in again the
     * same pages: SQLite frees a savepoint's journal at each FLUSH, a
     * madvise(MADV_DONTNEED) and page faults a file, about a third of a
     * create's close.  At most 1 MiB more resident a heap. */
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
    memset(&D, 0, sizeof(D));
    D.ctl_fd = -1;
    D.wake_fd = -1;
    control_init(&D);
    D.flush_timeout = o->flush_timeout;
    D.cache_dir = o->cache_dir;
    D.cache_max_size = o->cache_max_size;
    if (o->log_level) {
        enum log_level lvl;
        if (log_parse_level(o->log_level, &lvl) == 0)
            log_set_level(lvl);
    }
    fuse_set_log_func(fuse_log_sink);

    sdnotify_init();
    char why[4400] = "";
    int crc = o->credentials ? cred_from_file(o->credentials, &D.cred, why, sizeof(why))
                             : cred_from_env(&D.cred, why, sizeof(why));
    if (crc != 0) {
        fprintf(stderr, "memstorefs: cannot mount the session's memory stores: %s\n", why);
        return 1;
    }
    if (mountdir_check(o) != 0)
        goto out_cred;
    if (o->log_file && daemon_open_log(o) != 0)
        goto out_cred;

    if (!o->foreground) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) {
            perror("memstorefs: pipe");
            goto out_cred;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("memstorefs: fork");
            goto out_cred;
        }
        if (pid > 0) {
            close(p[1]);
            char st = 1;
            ssize_t r;
            do
                r = read(p[0], &st, 1);
            while (r < 0 && errno == EINTR);
            close(p[0]);
            if (r != 1 || st != 0) {
                waitpid(pid, NULL, 0);
                status = 1;
            } else {
                status = 0;
            }
            goto out_cred;
        }
        close(p[0]);
        ready_fd = p[1];
        setsid();
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    sigdelset(&set, SIGPIPE);
    int sig_fd = signalfd(-1, &set, SFD_CLOEXEC);
    D.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

    D.n = o->n_stores;
    D.stores = calloc(D.n, sizeof(*D.stores));
    if (!D.stores || sig_fd < 0 || D.wake_fd < 0) {
        fprintf(stderr, "memstorefs: out of resources\n");
        goto out;
    }
    for (size_t i = 0; i < D.n; i++) {
        struct fs_store *s = &D.stores[i];
        s->id = o->stores[i].id;
        s->name = o->stores[i].name;
        s->mount_path = o->stores[i].mount_path;
        s->read_only = o->stores[i].read_only;
        s->uid = o->uid;
        s->gid = o->gid;
        s->umask = o->umask;
        s->no_xattrs = o->no_xattrs;
        s->lock_fd = -1;
        s->sync_idx = -1;
        pthread_mutex_init(&s->se_lock, NULL);
        s->marker = rules_marker_content(s->id);
        if (!s->marker)
            goto out;
        s->marker_len = strlen(s->marker);
        clock_gettime(CLOCK_REALTIME, &s->mounted_at);
    }
    if (setup_stores(o) != 0)
        goto out;
    if (open_control() != 0)
        log_warn("cannot open the control socket; 'memstorefs unmount' will not reach this "
                 "daemon, use SIGTERM", "path", D.ctl_path);
    syncer_start(D.sync);
    struct cache_policy policy = {
        .max_bytes = o->cache_max_size,
        .conflicts_keep = (unsigned)o->conflicts_keep,
        .conflicts_max_age_ns = (int64_t)o->conflicts_max_age * 86400LL * 1000000000LL,
    };
    /* Every sync interval, and at least once a minute. */
    if (housekeep_start(D.cache, &policy, o->sync_interval < 60 ? o->sync_interval : 60) != 0)
        log_warn("cannot start the cache collector; unused cache space is given back at the "
                 "next mount", NULL, NULL);
    log_target_activate(); /* from now on, lines go to --log-file */
    for (size_t i = 0; i < D.n; i++)
        log_info("mounted memory store", "memory_store_id", D.stores[i].id, "path",
                 D.stores[i].mount_path, "access", D.stores[i].read_only ? "read_only"
                                                                         : "read_write");
    for (size_t i = 0; i < D.n; i++)
        fprintf(stderr, "memstorefs: mounted %s at %s%s\n", D.stores[i].id,
                D.stores[i].mount_path, D.stores[i].read_only ? " (read-only)" : "");
    if (!o->foreground)
        fprintf(stderr, "memstorefs: running in the background (pid %d); stop with "
                        "'memstorefs unmount --all' or kill -TERM %d\n", (int)getpid(),
                (int)getpid());
    {
        char st[256];
        snprintf(st, sizeof(st), "READY=1\nSTATUS=%zu memory store%s mounted\nMAINPID=%d", D.n,
                 D.n == 1 ? "" : "s", (int)getpid());
        sdnotify(st);
    }
    if (!o->foreground) {
        daemon_detach_stdio();
        char ok = 0;
        (void)!write(ready_fd, &ok, 1);
        close(ready_fd);
        ready_fd = -1;
    }
    main_loop(sig_fd);
    status = 0;
out:
    syncer_stop(D.sync);
    teardown_all(false);
    free_all();
    if (sig_fd >= 0)
        close(sig_fd);
    if (D.wake_fd >= 0)
        close(D.wake_fd);
    if (ready_fd >= 0) {
        char bad = 1;
        (void)!write(ready_fd, &bad, 1);
        close(ready_fd);
    }
out_cred:
    log_target_close();
    cred_clear(&D.cred);
    return status;
}
