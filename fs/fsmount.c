/* fsmount.c - the FUSE side of one store's mount: its session (the mount
 * options, who may use it), the mount itself, the loop thread that serves
 * it, and its teardown (unmount, abort of a connection that open files
 * keep alive, the detaching of a mount whose connection was aborted from
 * outside, the directories made for it, the store lock).  The stores of
 * one unmount are torn down together: one wait for the files held open
 * in any of them, not one a store.
 *
 * Invariants: a store is mounted (s->mounted) from a successful
 * fuse_session_mount until its teardown or an unmount from outside; the
 * loop thread sets s->loop_done and writes the daemon's wake eventfd
 * (s->wake_fd) as it ends, so the main loop notices a store unmounted from
 * outside.  Everything here runs on the daemon's main thread, but the loop
 * thread itself; s->mounted changes under s->se_lock (notify.c reads it).
 * libfuse's own messages go to the daemon's log (fsmount_log_init). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cli.h"
#include "daemon.h"
#include "engine.h"
#include "fs.h"
#include "fsloop.h"
#include "kwake.h"
#include "log.h"
#include "mountdir.h"
#include "runtime.h"

/* libfuse's own messages go through the daemon's log. */
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
    int rc = fsloop_run(s->se, s->fio.fd, &s->fio.polls);
    if (rc < 0)
        log_error("cannot read the mount's requests; the mount stops", "memory_store_id", s->id,
                  "path", s->mount_path, "error", strerror(-rc));
    __atomic_store_n(&s->loop_done, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    (void)!write(s->wake_fd, &one, sizeof(one));
    return NULL;
}

/* Whether a root mount is opened to other accounts without -o allow_other:
 * when its files are given to another user or group. */
static bool shared_by_owner(const struct mount_opts *o)
{
    return geteuid() == 0 && (o->uid != 0 || o->gid != 0);
}

/* Whether the -o options hold opt (a whole option). */
static bool has_opt(const char *opts, const char *opt)
{
    size_t n = strlen(opt);
    for (const char *p = opts; p && *p;) {
        if (strncmp(p, opt, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return true;
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return false;
}

/* Whether the kernel must check the modes (default_permissions) for the
 * processes it lets into the mount.  Not when all of them are the files'
 * owner and the owner's bits grant everything (rw- for files, rwx for
 * directories, so --umask leaves 0700 alone): the checks would then refuse
 * nothing but exec of a file, which the kernel refuses by itself (no x
 * bit), and access(2) and chdir, which the daemon answers from the same
 * modes (ops.c, op_access).  Without -o allow_other or allow_root, and the
 * files given to the daemon's own user, the kernel lets in only processes
 * whose user and group are all the mounter's (and, with the fuse module's
 * allow_sys_admin_access set, any process holding CAP_SYS_ADMIN: the checks
 * stay then).  Left out, they spare a round trip: the kernel asks the
 * directory's attributes again (GETATTR) at the next path walk after each
 * entry made or removed in it, to check them (docs/architecture.md,
 * "Performance").  An explicit -o default_permissions keeps them. */
static bool needs_mode_checks(const struct mount_opts *o)
{
    if (shared_by_owner(o) || o->uid != geteuid() || o->uid != getuid() || (o->umask & 0700) ||
        has_opt(o->fuse_opts, "allow_other") || has_opt(o->fuse_opts, "allow_root") ||
        has_opt(o->fuse_opts, "default_permissions"))
        return true;
    return kwake_fuse_param("allow_sys_admin_access") == 1;
}

/* What libfuse is given to mount on.  As root, the directory mountdir_make
 * opened (/proc/self/fd/N): a part of the path swapped for a link since
 * cannot move the mount (a user's fusermount3 makes that check itself).
 * Not when libfuse would hand that name to another process, which has no
 * such descriptor: fusermount3 (auto_unmount), or mount(8) and umount(8)
 * keeping a regular /etc/mtab; nor without /proc. */
static const char *mount_target(const struct fs_store *s, const struct mount_opts *o)
{
    struct stat st;
    bool mtab_file = lstat("/etc/mtab", &st) == 0 && !S_ISLNK(st.st_mode);
    if (geteuid() != 0 || s->dir_fd < 0 || has_opt(o->fuse_opts, "auto_unmount") ||
        mtab_file || access(s->dir_ref, F_OK) != 0)
        return s->mount_path;
    return s->dir_ref;
}

int fsmount_start(struct fs_store *s, const struct mount_opts *o)
{
    char opts[2048];
    /* The caller's -o options first: the daemon's own come after and win
     * (a later "rw" cleared the kernel's read-only flag of a read-only
     * store; an "fsname=" hid the mount from the dead-mount cleanup). */
    int n = snprintf(opts, sizeof(opts), "%s%sfsname=memstorefs:%s,subtype=memstorefs%s%s%s",
                     o->fuse_opts ? o->fuse_opts : "", o->fuse_opts ? "," : "", s->id,
                     needs_mode_checks(o) ? ",default_permissions" : "",
                     shared_by_owner(o) ? ",allow_other" : "", s->read_only ? ",ro" : "");
    if (n < 0 || (size_t)n >= sizeof(opts)) {
        fprintf(stderr, "memstorefs: the -o options are too long (memory_store_id=%s)\n", s->id);
        return -EINVAL;
    }
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
    const char *at = mount_target(s, o);
    int mrc = fuse_session_mount(s->se, at);
    if (mrc != 0 && at != s->mount_path) /* root without the right to mount (a user
                                            * namespace): libfuse went to fusermount3 */
        mrc = fuse_session_mount(s->se, s->mount_path);
    if (mrc != 0) {
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
        fuseio_detach(s);
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
        log_info("files of the store are still open, and their connection cannot be aborted",
                 "memory_store_id", s->id, "path", s->mount_path, "error", strerror(err));
    else
        log_info("files of the store were still open; their connection was aborted",
                 "memory_store_id", s->id, "path", s->mount_path);
    if (fd >= 0)
        close(fd);
}

bool fsmount_in_place(const struct fs_store *s, char *at, size_t len)
{
    struct rt_lockinfo *info = malloc(sizeof(*info)); /* 45 KiB */
    struct mountdir_entry m;
    if (!info || rt_lock_read(s->lock_fd, info) != 0) {
        free(info);
        return false;
    }
    const char *p = rt_mount_point(info);
    bool in_place = mountdir_mounted(p, &m) == 1 && mountdir_is_record(p, &m, info) == 1;
    if (at && (size_t)snprintf(at, len, "%s", p) >= len)
        in_place = false; /* (no path the kernel takes is that long) */
    free(info);
    return in_place;
}

/* After the loop ended by itself.  An unmount from outside took the mount
 * away; an abort of the connection (fusectl's abort file, the way out of
 * a hung FUSE mount) ends the loop the same way but leaves the mount in
 * place, every access to it failing with ENOTCONN, and libfuse's unmount
 * skips a connection that reports an error.  Such a mount is detached
 * when it is still this store's own (the mount id its lock file records),
 * so that the store mounts there again and the directories made for it
 * can go. */
static void detach_aborted(const struct fs_store *s)
{
    char at[PATH_MAX];
    if (!fsmount_in_place(s, at, sizeof(at)))
        return;
    int rc = mountdir_detach(at);
    if (rc)
        log_warn("the store's connection was aborted and its mount cannot be detached; "
                 "detach it with fusermount3 -u -z",
                 "memory_store_id", s->id, "path", at, "error", strerror(-rc));
    else
        log_warn("the store's connection was aborted from outside; its mount was detached",
                 "memory_store_id", s->id, "path", at);
}

/* The loop thread has ended (or never ran): joined, its descriptor and
 * the session go. */
static void end_session(struct fs_store *s)
{
    if (s->loop_running)
        pthread_join(s->loop, NULL);
    s->loop_running = s->loop_left = false;
    fuseio_detach(s);
    fuse_session_destroy(s->se);
    s->se = NULL;
}

static void unlock_store(struct fs_store *s)
{
    rt_unlock_store(s->lock_fd, s->lock_file);
    s->lock_fd = -1;
    free(s->lock_file);
    s->lock_file = NULL;
}

static bool loop_ended(const struct fs_store *s)
{
    return __atomic_load_n(&s->loop_done, __ATOMIC_ACQUIRE);
}

/* One store's teardown: whether the next wait is for its loop (first:
 * the loop still served the mount, so that files held open are served
 * through the wait), and the connection's device to abort it by. */
struct teardown {
    bool wait, have_dev;
    dev_t dev;
};

/* Waits up to ms for the loops of v[0..n) whose t[i].wait is set to end. */
static void wait_loops(struct fs_store **v, const struct teardown *t, size_t n, int ms)
{
    for (int waited = 0; waited < ms; waited += 50) {
        bool running = false;
        for (size_t i = 0; i < n && !running; i++)
            running = t[i].wait && !loop_ended(v[i]);
        if (!running)
            return;
        usleep(50 * 1000);
    }
}

/* Takes the mount away: lazily when the loop still serves it (files open
 * keep the connection, and the loop serves them), else what an unmount or
 * an abort from outside left behind. */
static struct teardown unmount_store(struct fs_store *s)
{
    struct teardown t = {0};
    bool ended = loop_ended(s);
    pthread_mutex_lock(&s->se_lock);
    bool was_mounted = s->mounted;
    s->mounted = false;
    pthread_mutex_unlock(&s->se_lock);
    if (was_mounted && !ended) {
        struct stat st; /* served by the loop; looked up from the parent held open */
        const char *name = strrchr(s->mount_path, '/') + 1;
        t.have_dev = s->parent_fd >= 0
                         ? fstatat(s->parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0
                         : stat(s->mount_path, &st) == 0;
        t.dev = t.have_dev ? st.st_dev : 0;
        t.wait = true;
        fuse_session_unmount(s->se);
    } else if (was_mounted) {
        /* Unmounted from outside: libfuse sees the device report an
         * error and unmounts nothing more, but frees what the mount holds
         * (its mount point).  Or the connection was aborted, which leaves
         * the mount in place. */
        fuse_session_unmount(s->se);
        detach_aborted(s);
    }
    return t;
}

/* After the waits: the loop joined (or left to end by itself), the
 * directories made for the store, its sync and its lock; then torn(s). */
static void finish_store(struct fs_store *s, void (*torn)(const struct fs_store *))
{
    if (s->se) {
        if (s->loop_running && !loop_ended(s)) {
            log_warn("files of the store are still open; their connection ends at their next "
                     "request (ENOTCONN), or when the daemon exits", "memory_store_id", s->id,
                     "path", s->mount_path);
            s->loop_left = true;
        } else {
            end_session(s);
        }
        log_info("unmounted memory store", "memory_store_id", s->id, "path", s->mount_path);
    }
    if (s->dir_fd >= 0)
        close(s->dir_fd);
    if (s->parent_fd >= 0)
        close(s->parent_fd);
    s->dir_fd = s->parent_fd = -1;
    mountdir_remove(s);
    syncer_disable(s->sync, s->sync_idx); /* before the lock goes */
    if (!s->loop_left) /* (else once its requests in flight are done: reaped) */
        unlock_store(s);
    __atomic_store_n(&s->gone, true, __ATOMIC_RELEASE); /* histserve.c reads it on its threads */
    if (torn)
        torn(s);
}

void daemon_teardown_stores(struct fs_store **v, size_t n, void (*torn)(const struct fs_store *))
{
    struct teardown t[16] = {{0}};
    if (n > 16)
        n = 16; /* (a daemon mounts at most 8 stores) */
    for (size_t i = 0; i < n; i++)
        if (v[i]->se)
            t[i] = unmount_store(v[i]);
    /* Every store at once: the loops serve the files still held open for
     * up to 2 s in all (not 2 s a store, which held the session's end up
     * 16 s for 8 stores); the last file of a store closed ends its
     * connection, and so its loop.  Each session is told to exit only
     * then: libfuse drops a request it reads after that, so a close in
     * the wait failed (ENOTCONN), and a loop between two requests as the
     * exit came ended at once. */
    wait_loops(v, t, n, 2000);
    for (size_t i = 0; i < n; i++)
        if (t[i].wait) {
            fuse_session_exit(v[i]->se);
            if (!loop_ended(v[i]) && t[i].have_dev)
                abort_connection(v[i], t[i].dev);
        }
    /* Files still open keep a detached mount and its connection when the
     * abort could not end it, and the loop sees that the session exited
     * only at the next request: nothing says when that comes.  Such a
     * store is torn down around its loop, whose thread is joined once it
     * ends (daemon_reap_loops; closing the loop's descriptor, fuseio.c,
     * then ends the connection), or ends with the process, whose exit
     * closes the device. */
    for (size_t i = 0; i < n; i++)
        t[i].wait = v[i]->se && v[i]->loop_running;
    wait_loops(v, t, n, 1000);
    for (size_t i = 0; i < n; i++)
        finish_store(v[i], torn);
}

size_t daemon_reap_loops(struct fs_store *v, size_t n)
{
    size_t left = 0;
    for (size_t i = 0; i < n; i++) {
        struct fs_store *s = &v[i];
        if (!s->loop_left)
            continue;
        if (!__atomic_load_n(&s->loop_done, __ATOMIC_ACQUIRE)) {
            left++;
            continue;
        }
        end_session(s);
        unlock_store(s);
        log_info("the last files held open in an unmounted store were closed",
                 "memory_store_id", s->id, "path", s->mount_path);
    }
    return left;
}

void fsmount_log_init(void)
{
    fuse_set_log_func(fuse_log_sink);
}
