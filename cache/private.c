/* private.c - private files and directories (contract: private.h).
 *
 * The threat: another account on the same host that creates a path we
 * are about to use (a directory it can write, a symbolic link to one of
 * our files, a hard link), or that reads what we left readable.  The
 * rules, applied to every runtime file, cache file and log:
 *   - nothing is opened through a symbolic link (O_NOFOLLOW on the last
 *     component; a directory is opened with O_DIRECTORY|O_NOFOLLOW);
 *   - what was opened is checked with fstat, never with a separate stat
 *     of the path (no window between the check and the use);
 *   - it must belong to the effective uid; a directory must give nothing
 *     to group or others (refused, or fixed when the caller allows);
 *   - files are created 0600 and directories 0700 whatever the umask
 *     (the umask can only take bits away from these).
 * No state, no locks; thread-safe. */
#include "private.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t whylen, const char *fmt, ...)
{
    if (!why || !whylen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

/* "uid 1002 (mallory)" into buf. */
static const char *who(uid_t uid, char *buf, size_t len)
{
    struct passwd pw, *res = NULL;
    char tmp[1024];
    if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &res) == 0 && res)
        snprintf(buf, len, "uid %u (%s)", (unsigned)uid, res->pw_name);
    else
        snprintf(buf, len, "uid %u", (unsigned)uid);
    return buf;
}

/* The checks on an open directory; see priv_dir. */
static int check_dir_fd(int fd, const char *dir, enum priv_fix fix, char *why, size_t whylen)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        say(why, whylen, "cannot check %s: %s", dir, strerror(e));
        return -e;
    }
    uid_t me = geteuid();
    if (st.st_uid != me) {
        char a[128], b[128];
        say(why, whylen, "%s belongs to %s, not to %s; it may hold files another account "
            "planted: remove it, or use another directory", dir, who(st.st_uid, a, sizeof(a)),
            who(me, b, sizeof(b)));
        return -EPERM;
    }
    if (!(st.st_mode & 077))
        return 0;
    if (fix == PRIV_REFUSE) {
        say(why, whylen, "%s has mode %04o: other accounts can %s it; it must be 0700 "
            "(chmod 700 %s)", dir, (unsigned)(st.st_mode & 07777),
            (st.st_mode & 022) ? "write to" : "read", dir);
        return -EPERM;
    }
    if (fchmod(fd, 0700) != 0) {
        int e = errno;
        say(why, whylen, "cannot make %s private (mode %04o): %s", dir,
            (unsigned)(st.st_mode & 07777), strerror(e));
        return -e;
    }
    say(why, whylen, "%s had mode %04o; it is now 0700", dir, (unsigned)(st.st_mode & 07777));
    return 2;
}

int priv_dir(const char *dir, enum priv_fix fix, char *why, size_t whylen)
{
    int made = 0;
    if (mkdir(dir, 0700) == 0)
        made = 1;
    else if (errno != EEXIST) {
        int e = errno;
        say(why, whylen, "cannot create the directory %s: %s", dir, strerror(e));
        return -e;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP || e == ENOTDIR) {
            struct stat st;
            bool link = lstat(dir, &st) == 0 && S_ISLNK(st.st_mode);
            say(why, whylen, "%s is %s, not a directory of its own; remove it", dir,
                link ? "a symbolic link" : "not a directory");
            return link ? -ELOOP : -ENOTDIR;
        }
        say(why, whylen, "cannot open the directory %s: %s", dir, strerror(e));
        return -e;
    }
    int rc = check_dir_fd(fd, dir, fix, why, whylen);
    close(fd);
    return rc < 0 ? rc : (made ? 1 : rc);
}

int priv_dir_p(const char *dir, enum priv_fix fix, char *why, size_t whylen)
{
    char *p = strdup(dir);
    if (!p) {
        say(why, whylen, "out of memory");
        return -ENOMEM;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            int e = errno;
            say(why, whylen, "cannot create the directory %s: %s", p, strerror(e));
            free(p);
            return -e;
        }
        *s = '/';
    }
    free(p);
    return priv_dir(dir, fix, why, whylen);
}

/* The checks on an open file; see priv_open. */
static int check_file_fd(int fd, const char *path, char *why, size_t whylen)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        say(why, whylen, "cannot check %s: %s", path, strerror(e));
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        say(why, whylen, "%s is not a regular file; remove it", path);
        return -EPERM;
    }
    if (st.st_uid != geteuid()) {
        char a[128], b[128];
        say(why, whylen, "%s belongs to %s, not to %s; remove it", path,
            who(st.st_uid, a, sizeof(a)), who(geteuid(), b, sizeof(b)));
        return -EPERM;
    }
    if (st.st_nlink != 1) {
        say(why, whylen, "%s has %lu hard links (another name may point at it); remove it",
            path, (unsigned long)st.st_nlink);
        return -EPERM;
    }
    if ((st.st_mode & 077) && fchmod(fd, st.st_mode & 0700) != 0) {
        int e = errno;
        say(why, whylen, "cannot make %s private: %s", path, strerror(e));
        return -e;
    }
    return 0;
}

int priv_open(const char *path, int flags, char *why, size_t whylen)
{
    int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            say(why, whylen, "%s is a symbolic link; it is not followed: remove it", path);
        else
            say(why, whylen, "cannot open %s: %s", path, strerror(e));
        return -e;
    }
    int rc = check_file_fd(fd, path, why, whylen);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int priv_fix_file(const char *path, char *why, size_t whylen)
{
    /* O_NONBLOCK: a FIFO planted at path must not hang the open. */
    int fd = priv_open(path, O_RDONLY | O_NONBLOCK, why, whylen);
    if (fd == -ENOENT)
        return 0;
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

bool priv_owned(const char *path, mode_t type)
{
    struct stat st;
    return lstat(path, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & S_IFMT) == type;
}

int priv_unlink(const char *path, mode_t type)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return -errno;
    if (st.st_uid != geteuid() || (st.st_mode & S_IFMT) != type)
        return -EPERM;
    return unlink(path) == 0 ? 0 : -errno;
}
