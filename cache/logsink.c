/* logsink.c - where the daemon's log lines go once it runs on its own: a
 * file (appended, reopened on SIGHUP for logrotate), syslog, or stderr.
 *
 * Owns the target chosen with log_target_open() and its descriptor.  The
 * target is opened (and so checked) before the daemon commits to a mount,
 * and only used once log_target_activate() is called; until then lines go
 * to log.c's stream (stderr).  log.c calls logsink_write() under its
 * out_lock, so every function here that touches the descriptor runs under
 * that lock (log_lock()/log_unlock() from log.c).
 *
 * Syslog is spoken directly on the local syslog socket (a Unix datagram
 * socket, /dev/log unless MEMSTOREFS_SYSLOG_SOCKET names another): the
 * same datagrams syslog(3) sends ("<PRI>Mmm dd hh:mm:ss ident[pid]: msg"),
 * which journald and rsyslog read; unlike syslog(3), the socket path can
 * be pointed elsewhere (a container whose log socket is bind-mounted at
 * another path, and the tests, which listen on a socket of their own) and
 * a missing socket is an error the mount can report instead of silence.
 * Facility: daemon. */
#include "log.h"
#include "private.h"
#include "log_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SYSLOG_DEFAULT_SOCKET "/dev/log"
#define FACILITY_DAEMON (3 << 3)

enum kind { K_NONE, K_STDERR, K_FILE, K_SYSLOG };

static struct {
    enum kind kind;
    bool active;
    int fd;
    char path[4096];     /* the file, or the syslog socket */
    char ident[64];
} T = {.fd = -1};

static void why_set(char *why, size_t len, const char *what, const char *path, int err)
{
    if (why && len)
        snprintf(why, len, "%s %s: %s", what, path, strerror(err));
}

/* The log file: created 0600 whatever the umask, never through a link
 * another account could plant, and only a file of ours (private.c). */
static int open_file(const char *path, int *fd)
{
    *fd = priv_open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOCTTY, NULL, 0);
    return *fd < 0 ? *fd : 0;
}

static int open_syslog(const char *path, int *fd)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a.sun_path))
        return -ENAMETOOLONG;
    memcpy(a.sun_path, path, strlen(path) + 1);
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0) {
        int rc = -errno;
        close(s);
        return rc;
    }
    *fd = s;
    return 0;
}

const char *log_syslog_socket(void)
{
    const char *p = getenv("MEMSTOREFS_SYSLOG_SOCKET");
    return p && *p ? p : SYSLOG_DEFAULT_SOCKET;
}

int log_target_open(const char *spec, const char *ident, char *why, size_t whylen)
{
    int fd = -1, rc = 0;
    enum kind k;
    const char *path = spec;
    if (strcmp(spec, "-") == 0) {
        k = K_STDERR;
    } else if (strcmp(spec, "syslog") == 0) {
        k = K_SYSLOG;
        path = log_syslog_socket();
        if ((rc = open_syslog(path, &fd)))
            why_set(why, whylen, "cannot reach the syslog socket", path, -rc);
    } else {
        k = K_FILE;
        if ((rc = open_file(path, &fd)))
            why_set(why, whylen, "cannot open the log file", path, -rc);
    }
    if (rc)
        return rc;
    log_lock();
    if (T.fd >= 0)
        close(T.fd);
    T.kind = k;
    T.fd = fd;
    T.active = false;
    snprintf(T.path, sizeof(T.path), "%s", k == K_STDERR ? "" : path);
    snprintf(T.ident, sizeof(T.ident), "%s", ident ? ident : "memstorefs");
    log_unlock();
    return 0;
}

void log_target_activate(void)
{
    log_lock();
    T.active = T.kind != K_NONE;
    log_unlock();
}

bool log_target_is_stderr(void)
{
    return T.kind == K_STDERR;
}

int log_target_reopen(char *why, size_t whylen)
{
    int rc = 0, fd = -1;
    log_lock();
    if (T.kind == K_FILE || T.kind == K_SYSLOG) {
        rc = T.kind == K_FILE ? open_file(T.path, &fd) : open_syslog(T.path, &fd);
        if (rc) {
            why_set(why, whylen, T.kind == K_FILE ? "cannot reopen the log file"
                                                  : "cannot reach the syslog socket",
                    T.path, -rc);
        } else {
            close(T.fd);
            T.fd = fd;
        }
    }
    log_unlock();
    return rc;
}

void log_target_close(void)
{
    log_lock();
    if (T.fd >= 0)
        close(T.fd);
    T.fd = -1;
    T.kind = K_NONE;
    T.active = false;
    log_unlock();
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        buf += w;
        len -= (size_t)w;
    }
}

/* One datagram as syslog(3) sends it; body is the line without its
 * timestamp (the receiver stamps it) and without the newline. */
static void send_syslog(enum log_level lvl, const char *body, size_t len)
{
    static const int prio[] = {3, 4, 6, 7}; /* err, warning, info, debug */
    char head[128], ts[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(ts, sizeof(ts), "%b %e %H:%M:%S", &tm);
    int n = snprintf(head, sizeof(head), "<%d>%s %s[%d]: ", FACILITY_DAEMON | prio[lvl], ts,
                     T.ident, (int)getpid());
    if (n < 0 || (size_t)n >= sizeof(head))
        return;
    char dgram[4096 + sizeof(head)];
    memcpy(dgram, head, (size_t)n);
    memcpy(dgram + n, body, len);
    for (int tries = 0; tries < 2; tries++) {
        if (send(T.fd, dgram, (size_t)n + len, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0)
            return;
        if (errno != ECONNREFUSED && errno != ENOTCONN)
            return; /* full or gone: the line is dropped, as syslog(3) does */
        /* The syslog daemon restarted: its socket is a new one. */
        int fd;
        if (open_syslog(T.path, &fd) != 0)
            return;
        close(T.fd);
        T.fd = fd;
    }
}

bool logsink_write(enum log_level lvl, const char *line, size_t len, size_t body_off)
{
    if (!T.active)
        return false;
    switch (T.kind) {
    case K_STDERR:
        write_all(2, line, len);
        return true;
    case K_FILE:
        write_all(T.fd, line, len);
        return true;
    case K_SYSLOG:
        send_syslog(lvl, line + body_off, len - body_off - 1);
        return true;
    default:
        return false;
    }
}
