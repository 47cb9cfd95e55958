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
 * given (fsmount_start, fsmount.c); the kernel then applies the modes
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
#include "history.h"
#include "housekeep.h"
#include "http.h"
#include "log.h"
#include "mountdir.h"
#include "ops.h"
#include "private.h"
#include "rules.h"
#include "runtime.h"
#include "sdnotify.h"
#include "session.h"
#include "setupwatch.h"

static struct daemon D;

/* The collector's stores (cache_policy.stores), D.stores[i].id at i; a
 * store torn down is taken out (NULL, atomically: the collector's thread
 * reads them), since another daemon sharing the cache directory may mount
 * it then, whose open files this one does not know. */
static const char *store_ids[16];

static void forget_policy_store(const struct fs_store *s)
{
    size_t i = (size_t)(s - D.stores);
    if (i < sizeof(store_ids) / sizeof(store_ids[0]))
        __atomic_store_n(&store_ids[i], NULL, __ATOMIC_RELEASE);
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
    bool last = n >= live_stores();
    if (n && last)
        sdnotify("STOPPING=1\nSTATUS=final sync of the memory stores, then exit");
    daemon_final_sync(&D, v, n, last);
    struct fs_store *live[16];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i]->gone)
            forget_policy_store(v[i]);
        else if (k < 16)
            live[k++] = v[i];
    daemon_teardown_stores(live, k, forget_policy_store);
    return daemon_final_report(&D, v, n, report);
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
        daemon_final_sync(&D, v, n, true);
        /* From now on no request may hold up the exit: an open that is
         * downloading content ends at once (its loop thread is joined
         * below). */
        http_client_cancel(D.http, true);
    }
    daemon_teardown_stores(v, n, forget_policy_store);
    if (flush)
        daemon_final_report(&D, v, n, NULL);
}

static void free_all(void)
{
    housekeep_stop();
    mountdir_finish();
    /* Clients waiting for a sync (memstorefs sync --wait) use the syncer:
     * their requests end at once (cancelled), then they answer. */
    http_client_cancel(D.http, true);
    bool idle = syncctl_drain(10);
    idle = hist_drain(10) && idle;
    /* A loop thread still serving files held open in a store torn down
     * uses the syncer, the cache and the stores: the process exits with it
     * alive (the exit closes the device, which ends the connection). */
    if (D.stores && daemon_reap_loops(D.stores, D.n))
        idle = false;
    if (idle)
        syncer_free(&D.sync);
    /* A thread that would not stop (the syncer's, or a client's that still
     * runs): nothing it may use is freed; the process exits with it alive. */
    if (!idle || D.sync)
        return;
    http_client_free(&D.http);
    cache_close(&D.cache);
    for (size_t i = 0; i < D.n; i++) {
        struct fs_store *s = &D.stores[i];
        free(s->marker);
        free(s->own_name);
        free(s->final_report);
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

/* rt_keep_fn of a mount: whether dead (the record a daemon that died
 * holding the store's lock left in it) is a mount at another path, still
 * there (looked up where the mount table has it; the very mount the
 * record names, mountdir_is_record, or one that cannot be told from it).
 * Taking the lock over would drop the only record of it, and status and
 * unmount would no longer see the dead mount.  When it was detached since,
 * the record is all that is left: taken over, also when a mount of the
 * store made there since by another daemon (of another runtime directory)
 * sits in its place.  (A mount at the same path meets the dead mount
 * itself first.) */
static bool keep_dead_elsewhere(const struct rt_lockinfo *dead, void *arg)
{
    const struct fs_store *s = arg;
    if (dead->pid <= 0 || dead->mount_path[0] != '/' ||
        strcmp(dead->mount_path, s->mount_path) == 0 || strcmp(dead->store_id, s->id) != 0)
        return false;
    struct mountdir_entry m;
    const char *at = rt_mount_point(dead);
    return mountdir_mounted(at, &m) == 1 && mountdir_is_record(at, &m, dead) != 0;
}

/* Notes the unique id of s's new mount in its lock file: a dead mount
 * is then told from a mount of the same store another daemon made at that
 * path since (keep_dead_elsewhere, unmount's cleanup).  Without it (a
 * kernel before 6.8) the record matches any mount of the store there, as
 * an older daemon's does. */
static void note_mount(struct fs_store *s)
{
    struct rt_lockinfo *info = malloc(sizeof(*info)); /* 45 KiB */
    struct mountdir_entry m;
    uint64_t id;
    if (info && rt_lock_read(s->lock_fd, info) == 0 && info->mounted_at[0] &&
        mountdir_mounted(info->mounted_at, &m) == 1 &&
        mountdir_is_store(m.fstype, m.source, s->id) &&
        mountdir_mount_id(info->mounted_at, &id) == 0) {
        info->mount_id = id;
        rt_lock_update(s->lock_fd, info);
    }
    free(info);
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
        snprintf(info.cache_dir, sizeof(info.cache_dir), "%s", o->cache_dir);
        rt_boot_id(info.boot_id);
        int rc = rt_lock_store(&info, &s->lock_fd, &s->lock_file, &other, keep_dead_elsewhere,
                               s);
        if (rc == -ENOTCONN) {
            fprintf(stderr, "memstorefs: memory store %s: its mount at %s died with its daemon; "
                            "run 'memstorefs unmount %s' first\n", s->id, other.mount_path,
                    other.mount_path);
            return -EBUSY;
        }
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
        /* Where the mount table will name it: what a dead mount is looked
         * up by (a symbolic link on the way, re-pointed since, changes
         * nothing). */
        ssize_t n = readlink(s->dir_ref, info.mounted_at, sizeof(info.mounted_at) - 1);
        info.mounted_at[n > 0 && info.mounted_at[0] == '/' ? n : 0] = '\0';
        rt_lock_update(s->lock_fd, &info);
    }

    int rc = cache_open(o->cache_dir, &D.cache);
    if (rc) {
        fprintf(stderr, "memstorefs: cannot open the cache in %s: %s\n", o->cache_dir,
                strerror(-rc));
        return rc;
    }
    cache_on_replay(D.cache, fs_notify_replayed, &D);
    if (!o->log_file && (rc = daemon_open_log(o)))
        return rc;
    /* Room for the last sync of a session that ends on a full disk
     * (finalsync.c); no room for it is logged, and the mount goes on. */
    (void)cache_reserve_keep(D.cache, o->cache_reserve);
    /* The crash tests' switch (tests/test_mount_write_durable.c): closes
     * stay in the journal alone until something else commits, so a kill
     * -9 right after them proves the journal's replay whatever the speed
     * of the run.  Said in the log: it only delays commits. */
    const char *hold = getenv("MEMSTOREFS_TEST_HOLD_SAVER");
    if (hold && strcmp(hold, "1") == 0) {
        cache_hold_saver(D.cache, true);
        log_warn("MEMSTOREFS_TEST_HOLD_SAVER=1: the cache commits recent closes only with "
                 "other writes (a switch for crash tests; closes stay durable in the journal)",
                 NULL, NULL);
    }
    /* The race tests' switch (tests/test_mount_cache.c): an open's thread
     * waits after its answer, so that the opener's close runs first on
     * another thread.  Said in the log: it slows every open. */
    const char *pause = getenv("MEMSTOREFS_TEST_PAUSE_OPEN_MS");
    if (pause) {
        long ms;
        if (cli_parse_int(pause, 1, 10000, &ms)) {
            log_warn("MEMSTOREFS_TEST_PAUSE_OPEN_MS is not a number of milliseconds from 1 to "
                     "10000; ignored", "value", pause);
        } else {
            ops_pause_open_ms = (unsigned)ms;
            log_warn("MEMSTOREFS_TEST_PAUSE_OPEN_MS is set: every open of a file waits that "
                     "long after its answer (a switch for race tests)", "value", pause);
        }
    }
    struct http_opts ho = {.base_url = D.cred.base_url, .api_key = D.cred.api_key,
                           .bearer = D.cred.bearer, .max_in_flight = 16, .max_retries = -1,
                           .max_per_minute = o->max_rpm};
    __atomic_store_n(&D.http, http_client_new(&ho), __ATOMIC_RELEASE); /* setupwatch.c */
    if (!D.http) {
        int err = errno;
        fprintf(stderr, "memstorefs: cannot use the API endpoint '%s': %s\n", D.cred.base_url,
                strerror(err));
        return -err;
    }
    static bool progress_shown;
    struct syncer_opts so = {.interval_s = o->sync_interval, .full_resync_s = o->full_resync,
                             .fetch_timeout_s = o->fetch_timeout,
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
        if (setupwatch_fired())
            return -ECANCELED;
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
    for (size_t i = 0; i < D.n; i++) {
        D.stores[i].wake_fd = D.wake_fd;
        if (setupwatch_fired())
            return -ECANCELED;
        if ((rc = fsmount_start(&D.stores[i], o)))
            return rc;
        note_mount(&D.stores[i]);
    }
    return 0;
}

/* The control socket's path, for the largest pid, must fit a socket
 * address: checked before anything is mounted, else the stores would be
 * mounted with no way for `memstorefs unmount` to reach the daemon. */
static int control_path_check(void)
{
    char p[4200];
    struct sockaddr_un a;
    int rc = rt_sock_path(4194304 /* PID_MAX_LIMIT */, p, sizeof(p));
    if ((rc == 0 && strlen(p) < sizeof(a.sun_path)) || (rc && rc != -ENAMETOOLONG))
        return 0; /* (a runtime directory not fit for use is reported as the store locks) */
    fprintf(stderr, "memstorefs: the runtime directory's path is too long for the control "
                    "socket (at most %zu bytes for %s); set MEMSTOREFS_RUNTIME_DIR to a "
                    "shorter directory\n", sizeof(a.sun_path) - 1, rc == 0 ? p : "it");
    return -ENAMETOOLONG;
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
            log_error("poll failed; final sync, then unmount", "error", strerror(errno));
            teardown_all(true);
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
            daemon_reap_loops(D.stores, D.n);
            for (size_t i = 0; i < D.n; i++) {
                struct fs_store *s = &D.stores[i];
                if (!s->gone && __atomic_load_n(&s->loop_done, __ATOMIC_ACQUIRE)) {
                    if (fsmount_in_place(s, NULL, 0))
                        log_info("memory store's connection ended from outside with its mount "
                                 "in place; final sync, then cleaning up",
                                 "memory_store_id", s->id, "path", s->mount_path);
                    else
                        log_info("memory store was unmounted from outside; final sync, then "
                                 "cleaning up", "memory_store_id", s->id, "path", s->mount_path);
                    daemon_unmount(&s, 1, NULL);
                }
            }
        }
        control_handle(&D, p + 2, nc);
    }
}

/* The credentials are the daemon's once read (D.cred): the variables
 * that carry one leave its environment, so that no program it runs
 * (fusermount3) inherits them, and their values are wiped where the
 * process started with them, which /proc/PID/environ shows to every
 * process of the daemon's account (the agent's tools, when the daemon
 * runs as the agent's user with a key the agent was not given). */
static void scrub_cred_env(void)
{
    static const char *const names[] = {"ANTHROPIC_WORK_SECRET", "ANTHROPIC_API_KEY",
                                        "ANTHROPIC_AUTH_TOKEN"};
    extern char **environ;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t len = strlen(names[i]);
        /* Each value's length first, while the name can be matched: the
         * variable may be given more than once. */
        for (char **e = environ; e && *e; e++)
            if (strncmp(*e, names[i], len) == 0 && (*e)[len] == '=')
                explicit_bzero(*e + len + 1, strlen(*e + len + 1));
        unsetenv(names[i]); /* takes every one out of environ */
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
    D.cache_reserve = o->cache_reserve;
    if (o->log_level) {
        enum log_level lvl;
        if (log_parse_level(o->log_level, &lvl) == 0)
            log_set_level(lvl);
    }
    fsmount_log_init();

    sdnotify_init();
    char why[4400] = "";
    int crc = o->credentials ? cred_from_file(o->credentials, &D.cred, why, sizeof(why))
                             : cred_from_env(&D.cred, why, sizeof(why));
    if (crc != 0) {
        fprintf(stderr, "memstorefs: cannot mount the session's memory stores: %s\n", why);
        return 1;
    }
    scrub_cred_env();
    if (mountdir_check(o) != 0)
        goto out_cred;
    if (control_path_check() != 0)
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

    D.stores = calloc(o->n_stores, sizeof(*D.stores));
    if (D.stores)
        D.n = o->n_stores; /* (the teardown walks D.stores[0..D.n)) */
    for (size_t i = 0; i < D.n; i++) /* before any failure: the teardown closes them */
        D.stores[i].lock_fd = D.stores[i].dir_fd = D.stores[i].parent_fd =
            D.stores[i].fio.fd = -1;
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
        s->sync_idx = -1;
        pthread_mutex_init(&s->se_lock, NULL);
        s->marker = rules_marker_content(s->id);
        if (!s->marker)
            goto out;
        s->marker_len = strlen(s->marker);
        clock_gettime(CLOCK_REALTIME, &s->mounted_at);
    }
    /* Until the control socket opens, commands that find the stores'
     * locks wait for it (control.c). */
    rt_mounting(true);
    if (setupwatch_start(&D.http) != 0)
        log_warn("cannot watch for signals during the setup; SIGTERM waits for its end", NULL,
                 NULL);
    int setup_rc = setup_stores(o);
    int sig = setupwatch_stop();
    if (sig) {
        /* The caller asked to stop: nothing stays mounted (what a process
         * wrote in the instant a store was mounted, if any, stays in the
         * cache for the next mount). */
        fprintf(stderr, "memstorefs: stopped by %s during the setup; nothing is mounted\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT");
        goto out;
    }
    if (setup_rc != 0)
        goto out;
    int ctl_rc = open_control();
    rt_mounting(false);
    if (ctl_rc != 0)
        log_warn("cannot open the control socket; 'memstorefs unmount' will not reach this "
                 "daemon, use SIGTERM", "path", D.ctl_path);
    syncer_start(D.sync);
    size_t n_ids = 0;
    for (size_t i = 0; i < D.n && n_ids < 16; i++)
        store_ids[n_ids++] = D.stores[i].id;
    struct cache_policy policy = {
        .stores = store_ids,
        .n_stores = n_ids,
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
        ssize_t w = write(ready_fd, &ok, 1); /* SIGPIPE is blocked: EPIPE */
        close(ready_fd);
        ready_fd = -1;
        if (w != 1) {
            /* Nobody waits for the answer: the caller was told the mount
             * failed, so the stores must not stay mounted behind it. */
            log_warn("the mount command ended before the stores were mounted (killed or "
                     "interrupted); unmounting them", NULL, NULL);
            sdnotify("STOPPING=1");
            goto out;
        }
    }
    main_loop(sig_fd);
    control_serve_late(&D, 2000);
    status = 0;
out:
    rt_mounting(false);
    syncer_stop(D.sync);
    teardown_all(false);
    free_all();
    if (sig_fd >= 0)
        close(sig_fd);
    if (D.wake_fd >= 0 && !D.stores) /* (a loop thread left writes it as it ends) */
        close(D.wake_fd);
    if (ready_fd >= 0) {
        char bad = 1;
        (void)!write(ready_fd, &bad, 1);
        close(ready_fd);
    }
out_cred:
    if (D.stores) {
        /* A thread that would not stop (free_all) still uses the stores,
         * the options' strings and the credential: the process ends here,
         * before the caller frees them. */
        fflush(NULL);
        _exit(status);
    }
    log_target_close();
    cred_clear(&D.cred);
    return status;
}
