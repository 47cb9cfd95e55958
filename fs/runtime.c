/* runtime.c - lock files and socket paths in the runtime directory.
 *
 * A store's lock file is store-<id>.lock, flock'd (LOCK_EX) by the daemon
 * that mounts it for as long as the mount lives; its text (key=value
 * lines) names the daemon's pid, the mount path and the directories the
 * mount created, so a second mount can name the first, and `unmount` can
 * find the daemon or clean up after a dead one.  A lock file that nobody
 * holds is stale: its daemon died. */
#include "runtime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "private.h"

/* The reason of the last refusal (rt_error); main thread only. */
static char last_why[1024];

const char *rt_error(void)
{
    return last_why;
}

int rt_dir_name(char *buf, size_t len)
{
    const char *env = getenv("MEMSTOREFS_RUNTIME_DIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (env && *env)
        n = snprintf(buf, len, "%s", env);
    else if (geteuid() == 0)
        n = snprintf(buf, len, "/run/memstorefs");
    else if (xdg && *xdg)
        n = snprintf(buf, len, "%s/memstorefs", xdg);
    else
        n = snprintf(buf, len, "/tmp/memstorefs-%u", (unsigned)geteuid());
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

int rt_dir(char *buf, size_t len)
{
    last_why[0] = '\0';
    int rc = rt_dir_name(buf, len);
    if (rc)
        return rc;
    char why[900];
    rc = priv_dir(buf, PRIV_REFUSE, why, sizeof(why));
    if (rc < 0) {
        snprintf(last_why, sizeof(last_why), "the runtime directory is not safe to use: %s",
                 why);
        return rc;
    }
    return 0;
}

static int lock_path(const char *store_id, char *buf, size_t len)
{
    char dir[4096];
    int rc = rt_dir(dir, sizeof(dir));
    if (rc)
        return rc;
    /* Store ids are [A-Za-z0-9_]; anything else is replaced so a hostile
     * id cannot leave the directory. */
    char safe[128];
    size_t i = 0;
    for (; store_id[i] && i < sizeof(safe) - 1; i++) {
        char ch = store_id[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        safe[i] = ok ? ch : '_';
    }
    safe[i] = '\0';
    int n = snprintf(buf, len, "%s/store-%s.lock", dir, safe);
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

/* A decimal id of n characters at v, or 0 (not known) when it is not one. */
static uint64_t parse_id(const char *v, size_t n)
{
    char buf[24], *end;
    if (n == 0 || n >= sizeof(buf) || v[0] < '0' || v[0] > '9')
        return 0;
    memcpy(buf, v, n);
    buf[n] = '\0';
    errno = 0;
    unsigned long long id = strtoull(buf, &end, 10);
    return *end || errno ? 0 : (uint64_t)id;
}

static void parse_info(const char *text, struct rt_lockinfo *info)
{
    memset(info, 0, sizeof(*info));
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (eq) {
            size_t kn = (size_t)(eq - p), vn = n - kn - 1;
            const char *v = eq + 1;
            if (kn == 3 && !memcmp(p, "pid", 3))
                info->pid = (pid_t)strtol(v, NULL, 10);
            else if (kn == 8 && !memcmp(p, "store_id", 8))
                snprintf(info->store_id, sizeof(info->store_id), "%.*s", (int)vn, v);
            else if (kn == 10 && !memcmp(p, "mount_path", 10))
                snprintf(info->mount_path, sizeof(info->mount_path), "%.*s", (int)vn, v);
            else if (kn == 9 && !memcmp(p, "cache_dir", 9))
                snprintf(info->cache_dir, sizeof(info->cache_dir), "%.*s", (int)vn, v);
            else if (kn == 10 && !memcmp(p, "mounted_at", 10))
                snprintf(info->mounted_at, sizeof(info->mounted_at), "%.*s", (int)vn, v);
            else if (kn == 7 && !memcmp(p, "boot_id", 7))
                snprintf(info->boot_id, sizeof(info->boot_id), "%.*s", (int)vn, v);
            else if (kn == 8 && !memcmp(p, "mount_id", 8))
                info->mount_id = parse_id(v, vn);
            else if (kn == 7 && !memcmp(p, "created", 7) && info->n_created < 8)
                snprintf(info->created[info->n_created++], sizeof(info->created[0]), "%.*s",
                         (int)vn, v);
        }
        p += n + (nl ? 1 : 0);
    }
}

static int read_info(int fd, struct rt_lockinfo *info)
{
    char buf[11 * 4096 + 8192];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    parse_info(buf, info);
    return 0;
}

int rt_lock_update(int fd, const struct rt_lockinfo *info)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return -ENOMEM;
    fprintf(m, "pid=%d\nstore_id=%s\nmount_path=%s\n", (int)info->pid, info->store_id,
            info->mount_path);
    if (info->cache_dir[0])
        fprintf(m, "cache_dir=%s\n", info->cache_dir);
    if (info->mounted_at[0])
        fprintf(m, "mounted_at=%s\n", info->mounted_at);
    if (info->boot_id[0])
        fprintf(m, "boot_id=%s\n", info->boot_id);
    if (info->mount_id)
        fprintf(m, "mount_id=%llu\n", (unsigned long long)info->mount_id);
    for (int i = 0; i < info->n_created; i++)
        fprintf(m, "created=%s\n", info->created[i]);
    fclose(m);
    /* Written over, then cut to its length: a reader never finds it
     * empty (rt_each_lock skips a file with no pid yet). */
    int rc = 0;
    if (pwrite(fd, text, len, 0) != (ssize_t)len || ftruncate(fd, (off_t)len) != 0)
        rc = -errno;
    free(text);
    return rc;
}

void rt_boot_id(char out[40])
{
    out[0] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f)
        return;
    if (!fgets(out, 40, f))
        out[0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

int rt_lock_read(int fd, struct rt_lockinfo *info)
{
    return read_info(fd, info);
}

/* True when path still names the file open as fd. */
static bool same_file(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

const char *rt_mount_point(const struct rt_lockinfo *info)
{
    return info->mounted_at[0] ? info->mounted_at : info->mount_path;
}

int rt_lock_store(const struct rt_lockinfo *info, int *fd, char **file, struct rt_lockinfo *other,
                  rt_keep_fn keep, void *arg)
{
    char path[4200];
    *fd = -1;
    *file = NULL;
    int rc = lock_path(info->store_id, path, sizeof(path));
    if (rc)
        return rc;
    char why[900];
    int f = -1;
    for (int attempt = 0, waited_ms = 0;;) {
        f = priv_open(path, O_RDWR | O_CREAT | O_EXCL, why, sizeof(why));
        if (f == -EEXIST)
            f = priv_open(path, O_RDWR, why, sizeof(why));
        if (f < 0) {
            snprintf(last_why, sizeof(last_why), "the lock file is not safe to use: %s", why);
            return f == -ELOOP ? -EPERM : f;
        }
        if (flock(f, LOCK_EX | LOCK_NB) != 0) {
            rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
            struct rt_lockinfo held;
            read_info(f, &held);
            close(f);
            /* Held, but by no daemon: a command looking at the locks
             * (status, sync, unmount --all take each one shared for a
             * moment to see whether a daemon is behind it) or a daemon
             * that has just made the file and not written it yet. */
            if (rc == -EBUSY && waited_ms < 2000 &&
                (held.pid <= 0 || (kill(held.pid, 0) != 0 && errno == ESRCH))) {
                usleep(20 * 1000);
                waited_ms += 20;
                continue;
            }
            if (other)
                *other = held;
            return rc;
        }
        /* The daemon that held it may have removed it meanwhile: a lock on
         * a file that no longer has the name locks nothing. */
        if (same_file(f, path) || ++attempt == 4)
            break;
        close(f);
    }
    if (keep) {
        struct rt_lockinfo prev;
        read_info(f, &prev);
        if (keep(&prev, arg)) {
            if (other)
                *other = prev;
            close(f); /* (the record stays; the lock goes with the fd) */
            return -ENOTCONN;
        }
    }
    rc = rt_lock_update(f, info);
    if (rc || !(*file = strdup(path))) {
        priv_unlink(path, S_IFREG);
        close(f);
        return rc ? rc : -ENOMEM;
    }
    *fd = f;
    return 0;
}

void rt_unlock_store(int fd, const char *file)
{
    if (fd < 0)
        return;
    if (file && same_file(fd, file))
        priv_unlink(file, S_IFREG);
    close(fd);
}

int rt_each_lock(rt_lock_fn fn, void *arg)
{
    char dir[4096];
    int rc = rt_dir(dir, sizeof(dir));
    if (rc)
        return rc;
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (strncmp(de->d_name, "store-", 6) != 0 || n < 11 || strcmp(de->d_name + n - 5, ".lock"))
            continue;
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        /* Only regular files of ours: O_NONBLOCK so that a FIFO cannot
         * hang the open, O_NOFOLLOW so that a link is never read. */
        int f = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (f < 0)
            continue;
        struct stat st;
        if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
            close(f);
            continue;
        }
        struct rt_lockinfo info;
        read_info(f, &info);
        /* No pid yet: a daemon between the file's creation and its first
         * write (or one that died there).  Nothing to show or ask; it is
         * never probed, so its lock stays free for that daemon. */
        if (info.pid <= 0) {
            close(f);
            continue;
        }
        bool alive = flock(f, LOCK_SH | LOCK_NB) != 0;
        rc = fn(arg, path, &info, alive);
        close(f);
    }
    closedir(d);
    return rc;
}

int rt_sock_path(pid_t pid, char *buf, size_t len)
{
    char dir[4096];
    int rc = rt_dir(dir, sizeof(dir));
    if (rc)
        return rc;
    int n = snprintf(buf, len, "%s/daemon-%d.sock", dir, (int)pid);
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

/* daemon-PID.mounting: a daemon setting up its mount (its control socket
 * not open yet). */
static int mounting_path(pid_t pid, char *buf, size_t len)
{
    char dir[4096];
    int rc = rt_dir(dir, sizeof(dir));
    if (rc)
        return rc;
    int n = snprintf(buf, len, "%s/daemon-%d.mounting", dir, (int)pid);
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

int rt_mounting(bool on)
{
    char path[4200], why[900];
    int rc = mounting_path(getpid(), path, sizeof(path));
    if (rc)
        return rc;
    if (!on)
        return priv_unlink(path, S_IFREG);
    priv_unlink(path, S_IFREG); /* a dead daemon's of our pid */
    int fd = priv_open(path, O_RDWR | O_CREAT | O_EXCL, why, sizeof(why));
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

bool rt_is_mounting(pid_t pid)
{
    char path[4200];
    struct stat st;
    return pid > 0 && mounting_path(pid, path, sizeof(path)) == 0 && lstat(path, &st) == 0 &&
           S_ISREG(st.st_mode) && st.st_uid == geteuid();
}

struct dead_ctx {
    const char *path;
    bool dead;
};

static int match_dead(void *arg, const char *file, const struct rt_lockinfo *info, bool alive)
{
    struct dead_ctx *d = arg;
    if (!alive && strcmp(info->mount_path, d->path) == 0)
        d->dead = true;
    return 0;
}

/* Length of mp when abs is mp or a path under it, else 0. */
static size_t under(const char *abs, const char *mp)
{
    size_t ml = strlen(mp);
    if (ml < 2 || strncmp(abs, mp, ml) != 0 || (abs[ml] != '\0' && abs[ml] != '/'))
        return 0;
    return ml;
}

size_t rt_mount_prefix(const struct rt_lockinfo *info, const char *abs)
{
    size_t n = under(abs, info->mount_path);
    const char *slash = strrchr(info->mount_path, '/');
    if (n || !slash || !slash[1])
        return n;
    /* Where the kernel mounted it, as recorded then: nothing is looked
     * up (a parent on a hung network or FUSE file system would hold the
     * command), and a link re-pointed since changes nothing. */
    if (info->mounted_at[0])
        return under(abs, info->mounted_at);
    /* An older daemon's record: the parent resolved now; never the mount
     * point itself, which would ask its daemon (and wait for it when it
     * does not answer). */
    char parent[4096], real[PATH_MAX], full[PATH_MAX + 256];
    snprintf(parent, sizeof(parent), "%.*s", (int)(slash - info->mount_path), info->mount_path);
    if (!realpath(parent[0] ? parent : "/", real))
        return 0;
    if ((size_t)snprintf(full, sizeof(full), "%s%s", strcmp(real, "/") ? real : "", slash) >=
        sizeof(full))
        return 0;
    return under(abs, full);
}

bool rt_is_dead_mount(const char *mount_path)
{
    struct dead_ctx d = {mount_path, false};
    rt_each_lock(match_dead, &d);
    return d.dead;
}
