/* mountdir.c - the directories memstorefs mounts on: the checks before a
 * session mounts anything (each mount_path clean, absolute, not nested in
 * another, and absent: lstat, so a symlink counts), creating them with
 * their missing parents (recording what was created) part by part through
 * descriptors, so that no symbolic link another account could place or
 * swap in is ever gone through (a root daemon's mkdir, chown and mount
 * would otherwise land where that account chose), and removing exactly
 * what was created at unmount (in the mount(8) helper form an existing
 * empty directory is accepted too, and left).  A parent shared by several
 * mount paths (e.g. /mnt/memory) goes when the last store below it goes;
 * what is mounted at a path now, as /proc/self/mountinfo says
 * (mountdir_mounted); and the detaching of a dead mount of a store
 * (mountdir_detach).  Main thread only. */
#include "mountdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "log.h"
#include "runtime.h"
#include "session.h"

/* A mount path must be absolute and clean: no empty, "." or ".." part and
 * no trailing slash (the root itself is refused too). */
static bool clean_absolute(const char *p)
{
    if (!p || p[0] != '/' || !p[1])
        return false;
    for (const char *s = p + 1;;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        if (!e)
            return true;
        s = e + 1;
    }
}

static bool empty_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return false;
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d)))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

/* Whether the directory opened (O_PATH) as fd is empty. */
static bool empty_at(int fd)
{
    int d = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dp = d < 0 ? NULL : fdopendir(d);
    if (!dp) {
        if (d >= 0)
            close(d);
        return false;
    }
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(dp)))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(dp);
    return empty;
}

static bool nested(const char *a, const char *b)
{
    size_t n = strlen(a);
    return strncmp(a, b, n) == 0 && (b[n] == '/' || b[n] == '\0');
}

/* Whether p holds a control character (a line break would forge lines
 * of the store's lock file, which the dead-mount cleanup acts on). */
static bool has_control(const char *p)
{
    for (; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return true;
    return false;
}

/* What a mount at path would hide: the daemon's own files below it. */
static int hides_own_files(const struct mount_opts *o, const struct session_store *s)
{
    char rt[4096];
    const char *what = NULL, *where = NULL;
    if (o->cache_dir && nested(s->mount_path, o->cache_dir))
        what = "the cache directory", where = o->cache_dir;
    else if (rt_dir_name(rt, sizeof(rt)) == 0 && rt[0] == '/' && nested(s->mount_path, rt))
        what = "the runtime directory", where = rt;
    else if (o->log_file && o->log_file[0] == '/' && nested(s->mount_path, o->log_file))
        what = "the log file", where = o->log_file;
    if (!what)
        return 0;
    fprintf(stderr, "memstorefs: the memory store's path %s (memory_store_id=%s) would hide %s "
                    "%s; mount it elsewhere\n", s->mount_path, s->id, what, where);
    return -EINVAL;
}

int mountdir_check(const struct mount_opts *o)
{
    /* The cache directory is a line of every store's lock file too, and a
     * name cut to fit it would point other commands at another directory. */
    if (o->cache_dir && (has_control(o->cache_dir) || strlen(o->cache_dir) >= PATH_MAX)) {
        fprintf(stderr, "memstorefs: the cache directory's path holds a control character or "
                        "is longer than %d bytes: \"%.200s\"\n", PATH_MAX - 1, o->cache_dir);
        return -EINVAL;
    }
    for (size_t i = 0; i < o->n_stores; i++) {
        const struct session_store *s = &o->stores[i];
        if (!clean_absolute(s->mount_path) || has_control(s->mount_path)) {
            fprintf(stderr, "memstorefs: memory store mount_path is not a clean absolute path: "
                            "\"%s\" (memory_store_id=%s)\n", s->mount_path, s->id);
            return -EINVAL;
        }
        if (strlen(s->id) > MOUNTDIR_ID_MAX) {
            fprintf(stderr, "memstorefs: memory store id too long (%zu characters, at most %d): "
                            "%.40s...\n", strlen(s->id), MOUNTDIR_ID_MAX, s->id);
            return -EINVAL;
        }
        int hrc = hides_own_files(o, s);
        if (hrc)
            return hrc;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(o->stores[j].id, s->id) == 0) {
                fprintf(stderr, "memstorefs: memory store %s is listed twice\n", s->id);
                return -EINVAL;
            }
            if (nested(o->stores[j].mount_path, s->mount_path) ||
                nested(s->mount_path, o->stores[j].mount_path)) {
                fprintf(stderr, "memstorefs: the mount paths %s (memory_store_id=%s) and %s "
                                "(memory_store_id=%s) overlap\n", o->stores[j].mount_path,
                        o->stores[j].id, s->mount_path, s->id);
                return -EINVAL;
            }
        }
    }
    for (size_t i = 0; i < o->n_stores; i++) {
        const struct session_store *s = &o->stores[i];
        struct stat st;
        int err = lstat(s->mount_path, &st) == 0 ? 0 : errno;
        if (err == ENOENT || err == ENOTDIR)
            continue; /* mkdir says more when a file is in the way */
        if (err == 0 && o->dir_may_exist && S_ISDIR(st.st_mode) && empty_dir(s->mount_path))
            continue; /* mount(8) form: an empty mount point made beforehand */
        if (err == 0 || err == ENOTCONN) {
            fprintf(stderr, "memstorefs: something already exists at the memory store's path: "
                            "%s (memory_store_id=%s); it must not exist when the session "
                            "starts%s\n", s->mount_path, s->id,
                    err == ENOTCONN || (err == 0 && rt_is_dead_mount(s->mount_path))
                        ? " (a dead mount left by a killed memstorefs: run 'memstorefs unmount "
                          "PATH' to clean it up)"
                        : "");
            return -EEXIST;
        }
        fprintf(stderr, "memstorefs: cannot check the memory store's path %s "
                        "(memory_store_id=%s): %s\n", s->mount_path, s->id, strerror(err));
        return -err;
    }
    return 0;
}

static const char *user_name(uid_t uid)
{
    struct passwd *pw = getpwuid(uid);
    return pw ? pw->pw_name : "?";
}

/* Whether the symbolic link described by lst, found in the directory dir,
 * may be followed on the way to a mount path: only when no other account
 * could have put it there or could swap it, i.e. it and its directory
 * belong to root or to the daemon's user and the directory is writable by
 * nobody else (/var/run -> /run passes; a link in an agent's home, in /tmp
 * or in any directory another account may write does not).  Such a link
 * could otherwise turn a root daemon's mkdir, chown and mount (--uid) onto
 * a place that account chose.  Only a root daemon is that careful. */
static bool trusted_link(int dir, const struct stat *lst)
{
    struct stat d;
    uid_t me = geteuid();
    if (me != 0)
        return true; /* an account's daemon can do nothing the account cannot;
                      * its mount goes through fusermount3, which checks */
    return fstat(dir, &d) == 0 && (d.st_uid == 0 || d.st_uid == me) &&
           !(d.st_mode & (S_IWGRP | S_IWOTH)) && (lst->st_uid == 0 || lst->st_uid == me);
}

struct walk {
    struct fs_store *s;     /* NULL inside a link's target: nothing is made there */
    const char *shown;      /* the path the messages name; NULL: no message */
    struct rt_lockinfo *info;
    int parent;             /* the top walk's last directory before its last part */
    int links;              /* links followed so far (40 at most: ELOOP) */
    bool said;              /* a failure's reason was printed */
    bool made_last;         /* the top walk created the last part */
};

static int opendir_at(int dir, const char *name)
{
    int fd = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int record_made(struct walk *w, const char *made)
{
    struct fs_store *s = w->s;
    char **v = realloc(s->created_dirs, (s->n_created + 1) * sizeof(*v));
    char *dup = strdup(made);
    if (!v || !dup) {
        free(dup);
        if (v)
            s->created_dirs = v;
        return -ENOMEM;
    }
    s->created_dirs = v;
    s->created_dirs[s->n_created++] = dup;
    if (w->info->n_created < 8)
        snprintf(w->info->created[w->info->n_created++], sizeof(w->info->created[0]), "%s",
                 made);
    return 0;
}

/* Opens the directory named by path (from start when relative, from / when
 * absolute) as an O_PATH descriptor, part by part with O_NOFOLLOW, so that
 * a part swapped for a link between the session's checks and now is never
 * gone through; links are followed only where trusted_link allows.  The
 * top walk (w->s set) creates the parts missing (mkdir -p, each recorded)
 * and never follows a link as its last part.  A negative errno on failure,
 * with the reason on stderr. */
static int walk_at(int start, const char *path, struct walk *w)
{
    const struct fs_store *s = w->s;
    char *p = strdup(path);
    int dir = p ? (p[0] == '/' ? open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)
                               : fcntl(start, F_DUPFD_CLOEXEC, 0))
                : -1;
    if (dir < 0) {
        int rc = p ? -errno : -ENOMEM;
        free(p);
        return rc;
    }
    for (char *c = p;;) {
        while (*c == '/')
            c++;
        char *e = c + strcspn(c, "/");
        bool last = *e == '\0' || e[strspn(e, "/")] == '\0';
        char save = *e;
        *e = '\0';
        if (!*c) { /* the path ends with a slash */
            free(p);
            return dir;
        }
        int next;
        struct stat st;
        int st_err = fstatat(dir, c, &st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
        if (strcmp(c, ".") == 0) {
            next = fcntl(dir, F_DUPFD_CLOEXEC, 0);
            next = next < 0 ? -errno : next;
        } else if (!st_err && S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlinkat(dir, c, target, sizeof(target) - 1);
            if ((s && last) || !trusted_link(dir, &st)) {
                w->said = w->shown != NULL;
                if (w->shown)
                    fprintf(stderr, "memstorefs: the path of the memory store %s goes through "
                                    "the symbolic link %s, which %s; give the path it leads to "
                                    "instead\n", w->shown, p,
                            s && last ? "must not be the mount point itself"
                                      : "an account other than root or the daemon's user could "
                                        "change");
                next = -ELOOP;
            } else if (n < 0 || ++w->links > 40) {
                next = n < 0 ? -errno : -ELOOP;
                w->said = w->shown != NULL;
                if (w->shown)
                    fprintf(stderr, "memstorefs: cannot follow the symbolic link %s: %s\n", p,
                            strerror(-next));
            } else {
                target[n] = '\0';
                struct fs_store *top = w->s;
                w->s = NULL;
                next = walk_at(dir, target, w);
                w->s = top;
                if (next < 0 && !w->said && w->shown) {
                    /* Nothing is made beyond a link: what it leads to must be there. */
                    fprintf(stderr, "memstorefs: the path of the memory store %s goes through "
                                    "the symbolic link %s to %s, which cannot be opened: %s\n",
                            w->shown, p, target, strerror(-next));
                    w->said = true;
                }
            }
        } else if (s && st_err == ENOENT && mkdirat(dir, c, 0755) == 0) {
            /* 0755 whatever the umask (a root worker's 077 would shut the
             * --uid user out of its own mount); not through a link, and
             * without /proc (fchmodat's AT_SYMLINK_NOFOLLOW may need it). */
            int d = openat(dir, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            int rc = d >= 0 && fchmod(d, 0755) == 0 ? 0 : -errno;
            if (d >= 0)
                close(d);
            if (rc) {
                w->said = true;
                fprintf(stderr, "memstorefs: cannot set the mode of the folder %s made for the "
                                "memory store %s: %s\n", p, s->id, strerror(-rc));
            }
            rc = rc ? rc : record_made(w, p);
            next = rc ? rc : opendir_at(dir, c);
            w->made_last = last;
            if (rc)
                unlinkat(dir, c, AT_REMOVEDIR);
        } else if (s && ((st_err == ENOENT && errno != EEXIST) ||
                         (!st_err && !S_ISDIR(st.st_mode)))) {
            next = st_err ? -errno : -ENOTDIR;
            /* The reason is taken before getpwuid (in user_name), which may
             * change errno: the arguments are evaluated in no set order. */
            const char *reason = strerror(-next), *user = user_name(geteuid());
            w->said = true;
            fprintf(stderr, "memstorefs: cannot create the memory store's folder: %s "
                            "(memory_store_id=%s): %s; the parent directory must be writable "
                            "by user %s (uid %u)\n", s->mount_path, s->id, reason, user,
                    (unsigned)geteuid());
        } else {
            next = opendir_at(dir, c);
            w->said = next < 0 && s;
            if (next < 0 && s)
                fprintf(stderr, "memstorefs: cannot open the memory store's folder %s "
                                "(memory_store_id=%s) at %s: %s\n", s->mount_path, s->id, p,
                        strerror(-next));
        }
        if (next < 0 || !last || !s)
            close(dir);
        else
            w->parent = dir;
        if (next < 0) {
            free(p);
            return next;
        }
        dir = next;
        *e = save;
        if (last) {
            free(p);
            return dir;
        }
        c = e;
    }
}

/* mkdir -p of s->mount_path, recording each directory created (parents
 * first); then the mount directory is held open (s->dir_fd, with its parent
 * s->parent_fd) and every later use by a root daemon goes through it: the
 * chown for --uid and the mount itself (s->dir_ref, /proc/self/fd/N), so
 * nothing an account does to the path's parts afterwards can move them. */
int mountdir_make(struct fs_store *s, struct rt_lockinfo *info)
{
    struct walk w = {.s = s, .shown = s->mount_path, .info = info, .parent = -1};
    int fd = walk_at(-1, s->mount_path, &w);
    if (fd < 0) {
        if (w.parent >= 0)
            close(w.parent);
        return fd;
    }
    s->dir_fd = fd;
    s->parent_fd = w.parent;
    snprintf(s->dir_ref, sizeof(s->dir_ref), "/proc/self/fd/%d", fd);
    /* Given to --uid: a folder made here, or an empty one (the mount(8)
     * form's); never a folder with content moved onto the path meanwhile. */
    if (s->uid != geteuid() && (w.made_last || empty_at(fd)) &&
        fchownat(fd, "", s->uid, s->gid, AT_EMPTY_PATH) != 0)
        log_warn("cannot give the memory store's folder to its user", "memory_store_id", s->id,
                 "path", s->mount_path, "error", strerror(errno));
    return 0;
}

/* The contract: mountdir.h. */
int mountdir_rmdir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : NULL;
    if (!dir) {
        errno = slash ? ENOMEM : EINVAL;
        return -1;
    }
    struct walk w = {.parent = -1};
    int fd = walk_at(-1, dir, &w);
    free(dir);
    if (fd < 0) {
        errno = -fd;
        return -1;
    }
    int rc = unlinkat(fd, slash + 1, AT_REMOVEDIR);
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* Directories a gone store created that still held another store's mount
 * (a shared parent such as /mnt/memory); retried after each teardown. */
static char *leftover[64];
static size_t n_leftover;

static void retry_leftovers(void)
{
    /* Deepest first: a longer path cannot be an ancestor of a shorter one. */
    for (bool progress = true; progress;) {
        progress = false;
        for (size_t i = 0; i < n_leftover; i++) {
            if (mountdir_rmdir(leftover[i]) == 0 || errno == ENOENT) {
                free(leftover[i]);
                leftover[i] = leftover[--n_leftover];
                progress = true;
                break;
            }
        }
    }
}

void mountdir_remove(struct fs_store *s)
{
    bool failed = false;
    for (size_t i = s->n_created; i-- > 0;) {
        if (mountdir_rmdir(s->created_dirs[i]) == 0 || errno == ENOENT) {
            free(s->created_dirs[i]);
        } else if (errno == ENOTEMPTY && n_leftover < 64) {
            leftover[n_leftover++] = s->created_dirs[i];
        } else {
            int err = errno;
            failed = true;
            log_warn("failed to remove the memory store folder", "memory_store_id", s->id,
                     "path", s->created_dirs[i], "error", strerror(err));
            free(s->created_dirs[i]);
        }
    }
    if (s->n_created && !failed)
        log_info("removed memory store dir", "memory_store_id", s->id, "path", s->mount_path);
    free(s->created_dirs);
    s->created_dirs = NULL;
    s->n_created = 0;
    retry_leftovers();
}

/* The contract: mountdir.h. */
int mountdir_detach(const char *at)
{
    if (umount2(at, MNT_DETACH | UMOUNT_NOFOLLOW) == 0 || errno == EINVAL || errno == ENOENT)
        return 0;
    /* Not root: fusermount3 can detach a FUSE mount of the caller's own.
     * Spawned, not forked: the daemon has threads. */
    extern char **environ;
    char prog[] = "fusermount3", u[] = "-u", z[] = "-z", q[] = "-q";
    char *path = strdup(at);
    if (!path)
        return -ENOMEM;
    char *argv[] = {prog, u, z, q, path, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, prog, NULL, NULL, argv, environ);
    free(path);
    if (rc)
        return -rc;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EPERM;
}

void mountdir_finish(void)
{
    for (size_t i = 0; i < n_leftover; i++) {
        if (mountdir_rmdir(leftover[i]) != 0)
            log_warn("failed to remove the memory store folder", "path", leftover[i], "error",
                     strerror(errno));
        free(leftover[i]);
    }
    n_leftover = 0;
}

/* Undoes mountinfo's octal escapes (\040 for a space...) in place. */
static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

bool mountdir_is_store(const char *fstype, const char *source, const char *store_id)
{
    return strcmp(fstype, "fuse.memstorefs") == 0 && strncmp(source, "memstorefs:", 11) == 0 &&
           strcmp(source + 11, store_id) == 0;
}

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x00004000U /* Linux 6.8 */
#endif

int mountdir_mount_id(const char *path, uint64_t *id)
{
    struct statx sx;
    *id = 0;
    /* Only the mount id asked: FUSE then asks its daemon nothing. */
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC,
              STATX_MNT_ID_UNIQUE, &sx) != 0)
        return -errno;
    if (!(sx.stx_mask & STATX_MNT_ID_UNIQUE))
        return -ENOTSUP;
    *id = sx.stx_mnt_id;
    return 0;
}

int mountdir_is_record(const char *path, const struct mountdir_entry *m,
                       const struct rt_lockinfo *rec)
{
    if (!mountdir_is_store(m->fstype, m->source, rec->store_id))
        return 0;
    char boot[40];
    rt_boot_id(boot);
    if (rec->boot_id[0] && boot[0] && strcmp(boot, rec->boot_id) != 0)
        return 0; /* its mount ended with that boot; ids start again at each.
                   * (A container with a boot id of its own, sharing the
                   * runtime directory with the host, would see the host's
                   * records as of another boot: not a setup memstorefs
                   * makes.) */
    if (!rec->mount_id)
        return 1; /* recorded by a daemon that could not tell */
    uint64_t id;
    int rc = mountdir_mount_id(path, &id);
    return rc ? rc : id == rec->mount_id;
}

int mountdir_mounted(const char *path, struct mountdir_entry *m)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    int found = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        /* id parent major:minor root mountpoint options... - fstype source superopts */
        char *save = NULL, *mp = NULL;
        char *tok = strtok_r(line, " ", &save);
        for (int i = 0; tok && i < 4; i++) {
            tok = strtok_r(NULL, " ", &save);
            if (i == 3)
                mp = tok;
        }
        if (!mp)
            continue;
        unescape(mp);
        if (strcmp(mp, path) != 0)
            continue;
        while ((tok = strtok_r(NULL, " ", &save)) && strcmp(tok, "-") != 0)
            ;
        char *type = strtok_r(NULL, " ", &save);
        char *src = strtok_r(NULL, " ", &save);
        if (!type || !src)
            continue;
        unescape(type);
        unescape(src);
        /* The last entry for a mount point is the one on top. */
        snprintf(m->fstype, sizeof(m->fstype), "%s", type);
        snprintf(m->source, sizeof(m->source), "%s", src);
        found = 1;
    }
    free(line);
    fclose(f);
    return found;
}
