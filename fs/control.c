/* control.c - the commands that talk to running daemons through their
 * control sockets (the protocol and the daemon's side: ctlserve.c):
 * `memstorefs unmount` and `memstorefs status`.
 *
 * Both find the daemons through the store lock files (runtime.c).  A lock
 * file whose daemon is dead marks a dead mount: unmount detaches it, but
 * only when what is mounted at its path is still that store's
 * fuse.memstorefs mount (something mounted there since is left alone),
 * and removes the directories that mount created and the files of the
 * dead daemon that are ours.  A live daemon that does not answer is
 * reported, never taken for "nothing mounted".  The `sync` command is
 * syncctl.c. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "cli.h"
#include "daemon.h"
#include "engine.h"
#include "jbuf.h"
#include "log.h"
#include "mountdir.h"
#include "private.h"
#include "runtime.h"

/* Sends cmd to daemon pid and copies its answer lines (but the final one)
 * to out.  Returns 0 on "ok", 1 on "ok unpushed", -EIO with the reason
 * printed otherwise. */
int control_ask(pid_t pid, const char *cmd, FILE *out, int timeout_s)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char path[4200];
    int rc = rt_sock_path(pid, path, sizeof(path));
    if (rc || strlen(path) >= sizeof(a.sun_path))
        return rc ? rc : -ENAMETOOLONG;
    memcpy(a.sun_path, path, strlen(path) + 1);
    /* connect() follows links: only a socket of ours is spoken to. */
    struct stat st;
    if (lstat(path, &st) != 0)
        return -errno;
    if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid())
        return -EPERM;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    (void)!send(fd, cmd, strlen(cmd), MSG_NOSIGNAL);
    (void)!send(fd, "\n", 1, MSG_NOSIGNAL);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    struct pollfd p = {fd, POLLIN, 0};
    for (;;) {
        if (poll(&p, 1, timeout_s * 1000) != 1) {
            rc = -ETIMEDOUT;
            break;
        }
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (!buf)
        return rc ? rc : -EIO;
    buf[len] = '\0';
    /* The last line is the verdict. */
    while (len && buf[len - 1] == '\n')
        buf[--len] = '\0';
    /* memrchr: an answer may carry bytes with NUL among them (a diff of
     * a file the server refused for one). */
    char *last = memrchr(buf, '\n', len);
    char *verdict = last ? last + 1 : buf;
    if (last && out)
        fwrite(buf, 1, (size_t)(last - buf) + 1, out);
    if (!rc && !*verdict) {
        fprintf(stderr, "memstorefs: the daemon (pid %d) closed the connection without an "
                        "answer\n", (int)pid);
        rc = -EIO;
    } else if (!rc && strcmp(verdict, "ok unpushed") == 0) {
        rc = 1;
    } else if (!rc && strcmp(verdict, "ok") != 0) {
        fprintf(stderr, "memstorefs: %s\n", strncmp(verdict, "error ", 6) == 0 ? verdict + 6
                                                                              : verdict);
        rc = -EIO;
    }
    free(buf);
    return rc;
}

/* Whether a process accepts connections on the socket at path. */
static bool sock_listened(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a.sun_path))
        return false;
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true; /* not known: kept */
    bool up = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno != ECONNREFUSED;
    close(fd);
    return up;
}

/* Detaches a dead mount (its daemon was killed) and removes what it made;
 * only a fuse.memstorefs mount of the store the lock names is detached. */
static int clean_dead(const char *file, const struct rt_lockinfo *info)
{
    int rc = 0;
    struct mountdir_entry e;
    /* Where the mount table has it (a symbolic link on the way resolved
     * when it was made): looked up, and detached, there. */
    const char *at = rt_mount_point(info);
    int m = mountdir_mounted(at, &e);
    if (m < 0) {
        fprintf(stderr, "memstorefs: cannot read the mount table: %s\n", strerror(-m));
        return m;
    }
    int rec = m == 1 ? mountdir_is_record(at, &e, info) : 0;
    if (rec < 0) {
        /* A mount of the store whose id cannot be read (another account's
         * FUSE mount refuses even that): it may be the live mount of
         * another daemon, so nothing is detached, and the record stays. */
        fprintf(stderr, "memstorefs: a mount of memory store %s is at %s, and whether it is "
                        "the dead one cannot be told (%s); left as it is: detach it with "
                        "'fusermount3 -u -z %s' if it is\n", info->store_id, at,
                strerror(-rec), at);
        return rec;
    }
    bool ours = rec == 1;
    if (m == 1 && !ours) {
        /* The dead mount is gone (detached by hand) and something else is
         * mounted there now (another file system, or another daemon's
         * mount of the store): not ours to detach, nor its directories to
         * remove.  The lock only records what is gone. */
        priv_unlink(file, S_IFREG);
        fprintf(stderr, "memstorefs: the dead mount of memory store %s at %s is gone already; "
                        "%s (%s) is mounted there now and was left alone\n", info->store_id,
                info->mount_path, e.source, e.fstype);
        return 0;
    }
    if (ours)
        rc = mountdir_detach(at);
    if (!rc) {
        for (int i = info->n_created; i-- > 0;)
            mountdir_rmdir(info->created[i]);
        priv_unlink(file, S_IFREG);
        char sock[4200];
        /* The dead daemon's control socket, unless a live daemon that got
         * its pid since listens there. */
        if (info->pid > 0 && rt_sock_path(info->pid, sock, sizeof(sock)) == 0 &&
            !sock_listened(sock))
            priv_unlink(sock, S_IFSOCK);
    }
    if (rc)
        fprintf(stderr, "memstorefs: cannot detach the dead mount at %s\n", info->mount_path);
    else
        fprintf(stderr, "memstorefs: cleaned up the dead mount of memory store %s at %s; "
                        "its unsynced edits stay in the cache\n", info->store_id,
                info->mount_path);
    return rc;
}

/* After control_ask said -ENOENT: a live daemon without its control
 * socket yet is setting up its mount (the lock is taken before the
 * listing of a large store, or a slow server, which can take minutes;
 * the socket opens after).  Waits (at most timeout_s) for the socket:
 * true once it is there; false when the daemon is gone (its mount
 * failed), past its set-up without a socket, or the time ran out. */
static bool setting_up(pid_t pid, int timeout_s)
{
    char path[4200];
    if (rt_sock_path(pid, path, sizeof(path)) != 0)
        return false;
    struct stat st;
    for (int64_t i = 0; i < (int64_t)timeout_s * 10; i++) {
        if (lstat(path, &st) == 0)
            return true;
        /* Gone (its mount failed), or past its set-up without a socket. */
        if ((kill(pid, 0) != 0 && errno == ESRCH) || !rt_is_mounting(pid))
            return lstat(path, &st) == 0;
        if (i == 10)
            fprintf(stderr, "memstorefs: the daemon (pid %d) is still setting up its mount; "
                            "waiting for it\n", (int)pid);
        usleep(100 * 1000);
    }
    return false;
}

/* The contract: daemon.h. */
int control_ask_mount(const struct rt_lockinfo *info, const char *cmd, FILE *out, int timeout_s)
{
    int rc = control_ask(info->pid, cmd, out, timeout_s);
    if (rc == -ENOENT && setting_up(info->pid, timeout_s))
        rc = control_ask(info->pid, cmd, out, timeout_s);
    if (rc == -ENOENT && kill(info->pid, 0) != 0)
        fprintf(stderr, "memstorefs: the daemon (pid %d) of %s exited before its mount was "
                        "done\n", (int)info->pid, info->mount_path);
    else if (rc < 0 && rc != -EIO) /* -EIO: it answered with an error, already printed */
        fprintf(stderr, "memstorefs: cannot reach the daemon (pid %d) of %s: %s\n",
                (int)info->pid, info->mount_path, strerror(-rc));
    return rc;
}

struct unmount_ctx {
    const char *path; /* NULL: all */
    int found, failed, unpushed;
    pid_t asked[64];
    int n_asked;
    struct {
        pid_t pid;
        int fd; /* its pidfd, -1 for none */
    } waits[64]; /* the daemons asked, to wait for once they end */
    int n_waits;
};

/* Whether daemon pid still holds the lock of a store (its mounts left). */
static int holds_fn(void *arg, const char *file, const struct rt_lockinfo *info, bool alive)
{
    (void)file;
    return alive && info->pid == *(pid_t *)arg;
}

/* Whether process pid has ended: gone, or a zombie not reaped yet. */
static bool ended(pid_t pid)
{
    char f[64], st[512] = "";
    snprintf(f, sizeof(f), "/proc/%d/stat", (int)pid);
    FILE *p = fopen(f, "r");
    if (!p)
        return kill(pid, 0) != 0 && errno == ESRCH;
    size_t n = fread(st, 1, sizeof(st) - 1, p);
    fclose(p);
    st[n] = '\0';
    const char *e = strrchr(st, ')'); /* the name may hold anything */
    return e && e[1] == ' ' && e[2] == 'Z';
}

/* Daemons that answered the unmount of their last store end then: waited
 * for together (30 s at most; their end lets go of what they held, and a
 * start that finds a journal of closed files still held leaves it to a
 * later start), so that a mount or `flush` run right after `unmount`
 * returns finds them gone.  A daemon still serving other stores is not
 * waited for.  Each pidfd was opened before its unmount was asked (-1:
 * none, pidfd_open missing: its /proc entry is polled instead). */
static void wait_ends(struct unmount_ctx *u)
{
    struct pollfd p[64];
    pid_t pid[64];
    int n = 0;
    for (int i = 0; i < u->n_waits; i++) {
        if (rt_each_lock(holds_fn, &u->waits[i].pid) != 0) {
            if (u->waits[i].fd >= 0)
                close(u->waits[i].fd);
            continue;
        }
        p[n] = (struct pollfd){u->waits[i].fd, POLLIN, 0};
        pid[n++] = u->waits[i].pid;
    }
    u->n_waits = 0;
    struct timespec now, end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += 30;
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++) {
            if (p[i].fd >= 0 ? (p[i].revents & (POLLIN | POLLHUP)) != 0 : ended(pid[i])) {
                if (p[i].fd >= 0)
                    close(p[i].fd);
                p[i].fd = -2; /* done (poll skips a negative fd) */
                pid[i] = 0;
            }
            left += pid[i] != 0;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (long)(end.tv_sec - now.tv_sec) * 1000 + (end.tv_nsec - now.tv_nsec) / 1000000;
        if (!left || ms <= 0)
            break;
        /* Without a pidfd: looked at again every 100 ms. */
        bool polled = false;
        for (int i = 0; i < n; i++)
            polled = polled || (pid[i] && p[i].fd == -1);
        (void)poll(p, (nfds_t)n, polled && ms > 100 ? 100 : (int)ms);
    }
    for (int i = 0; i < n; i++)
        if (pid[i]) {
            fprintf(stderr, "memstorefs: the daemon (pid %d) was still ending 30 s after its "
                            "unmount\n", (int)pid[i]);
            if (p[i].fd >= 0)
                close(p[i].fd);
        }
}

static int unmount_one(void *arg, const char *file, const struct rt_lockinfo *info, bool alive)
{
    struct unmount_ctx *u = arg;
    /* The mount point as the session named it, or its parent resolved. */
    size_t k = u->path ? rt_mount_prefix(info, u->path) : 0;
    if (u->path && (!k || k != strlen(u->path)))
        return 0;
    u->found++;
    if (!alive) {
        if (clean_dead(file, info))
            u->failed++;
        return 0;
    }
    if (!u->path) {
        for (int i = 0; i < u->n_asked; i++)
            if (u->asked[i] == info->pid)
                return 0;
        if (u->n_asked < 64)
            u->asked[u->n_asked++] = info->pid;
    }
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), u->path ? "unmount %s" : "unmount-all", info->mount_path);
    /* The daemon bounds its final sync by its --flush-timeout (at most an
     * hour), after a grace of a tenth of it for files still open with
     * unsaved edits, then tears the stores down (2 s each at most when a
     * file is held): 4,100 s covers the longest.  Its answer lines (what
     * it unmounted, what it could not push) go to stderr. */
    int pidfd = -1, perr = ENOSYS;
#ifdef SYS_pidfd_open
    pidfd = (int)syscall(SYS_pidfd_open, info->pid, 0);
    perr = pidfd < 0 ? errno : 0;
#endif
    int rc = control_ask_mount(info, cmd, stderr, 4100);
    if (rc == 1)
        u->unpushed++;
    else if (rc)
        u->failed++;
    if (u->n_waits < 64 && perr != ESRCH) { /* ESRCH: gone already */
        u->waits[u->n_waits].pid = info->pid;
        u->waits[u->n_waits++].fd = pidfd;
    } else if (pidfd >= 0) {
        close(pidfd);
    }
    return 0;
}

int control_unmount(int argc, char **argv)
{
    bool all = false;
    int first = 1;
    if (argc >= 2 && strcmp(argv[1], "--all") == 0) {
        all = true;
        first = 2;
    }
    if ((all && argc > 2) || (!all && argc < 2)) {
        fprintf(stderr, "usage: memstorefs unmount PATH... | --all\n");
        return 2;
    }
    int status = 0, unpushed = 0;
    if (all) {
        struct unmount_ctx u = {0};
        int rc = rt_each_lock(unmount_one, &u);
        wait_ends(&u);
        if (rc) {
            fprintf(stderr, "memstorefs: %s\n", rt_error()[0] ? rt_error() : strerror(-rc));
            return 1;
        }
        if (u.failed)
            status = 1;
        if (!u.found)
            fprintf(stderr, "memstorefs: nothing is mounted\n");
        return status ? status : u.unpushed ? 3 : 0;
    }
    for (int i = first; i < argc; i++) {
        char path[4096];
        if (argv[i][0] != '/') {
            /* "" (an unset variable) or a relative path names no mount. */
            fprintf(stderr, "memstorefs: '%s' is not an absolute path; give the mount path "
                            "(memstorefs status lists them)\n", argv[i]);
            status = 1;
            continue;
        }
        snprintf(path, sizeof(path), "%s", argv[i]);
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/')
            path[--n] = '\0';
        struct unmount_ctx u = {.path = path};
        int rc = rt_each_lock(unmount_one, &u);
        wait_ends(&u);
        if (rc) {
            fprintf(stderr, "memstorefs: %s\n", rt_error()[0] ? rt_error() : strerror(-rc));
            return 1;
        }
        if (u.failed)
            status = 1;
        if (!u.found) {
            fprintf(stderr, "memstorefs: %s is not a memstorefs mount on this host\n", path);
            status = 1;
        }
        unpushed += u.unpushed;
    }
    /* 3: unmounted, but what is listed above stays in the cache. */
    return status ? status : unpushed ? 3 : 0;
}

struct status_ctx {
    bool json;
    pid_t asked[64];
    int n_asked;
    int shown, failed;
};

/* The one JSON line of a store no daemon answers for: state is "dead" or
 * "mounting". */
static void print_state_json(const struct rt_lockinfo *info, const char *state)
{
    struct jbuf b = {0};
    jbuf_adds(&b, "{\"memory_store_id\":");
    jbuf_add_json_cstr(&b, info->store_id);
    jbuf_adds(&b, ",\"mount_path\":");
    jbuf_add_json_cstr(&b, info->mount_path);
    jbuf_addf(&b, ",\"state\":\"%s\",\"pid\":%d}\n", state, (int)info->pid);
    if (!b.oom)
        fputs(b.p, stdout);
    jbuf_release(&b);
}

static int status_one(void *arg, const char *file, const struct rt_lockinfo *info, bool alive)
{
    struct status_ctx *sc = arg;
    if (!alive) {
        if (sc->json)
            print_state_json(info, "dead");
        else
            printf("%s  %s  DEAD (daemon pid %d is gone; run 'memstorefs unmount %s')\n",
                   info->store_id, info->mount_path, (int)info->pid, info->mount_path);
        sc->shown++;
        return 0;
    }
    for (int i = 0; i < sc->n_asked; i++)
        if (sc->asked[i] == info->pid)
            return 0;
    if (sc->n_asked < 64)
        sc->asked[sc->n_asked++] = info->pid;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return -ENOMEM;
    int rc = control_ask(info->pid, sc->json ? "status-json" : "status", m, 10);
    fclose(m);
    if (rc == -ENOENT && kill(info->pid, 0) == 0 && rt_is_mounting(info->pid)) {
        /* Its lock is taken, its control socket not open yet. */
        if (sc->json)
            print_state_json(info, "mounting");
        else
            printf("%s  %s  MOUNTING (daemon pid %d is setting up the mount)\n", info->store_id,
                   info->mount_path, (int)info->pid);
        /* One line per store: the daemon's other stores are asked again. */
        sc->n_asked--;
        sc->shown++;
        free(text);
        return 0;
    }
    if (!rc)
        fputs(text, stdout);
    else if (rc != -EIO) /* -EIO: it answered with an error, already printed */
        fprintf(stderr, "memstorefs: memory store %s is mounted at %s, but its daemon (pid %d) "
                        "did not answer: %s\n", info->store_id, info->mount_path,
                (int)info->pid, rc == -ETIMEDOUT ? "timed out" : strerror(-rc));
    sc->shown += !rc;
    sc->failed += rc != 0;
    free(text);
    return 0;
}

int control_status(int argc, char **argv)
{
    struct status_ctx sc = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            sc.json = true;
        } else {
            fprintf(stderr, "usage: memstorefs status [--json]\n");
            return 2;
        }
    }
    int rc = rt_each_lock(status_one, &sc);
    if (rc) {
        fprintf(stderr, "memstorefs: %s\n", rt_error()[0] ? rt_error() : strerror(-rc));
        return 1;
    }
    if (!sc.shown && !sc.failed && !sc.json)
        printf("no memory store is mounted\n");
    return sc.failed ? 1 : 0;
}
