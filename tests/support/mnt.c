/* mnt.c - real-mount test support (see mnt.h).
 *
 * Everything a test starts lives below one mkdtemp directory, and the
 * runtime directory (MEMSTOREFS_RUNTIME_DIR) is private too, so a test's
 * teardown can find every daemon it started through their lock files and
 * stop them by PID, and never touches another test's mounts. */
#include "mnt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <sqlite3.h>

const char *mnt_bin(void)
{
    const char *env = getenv("MEMSTOREFS_BIN");
    return env && *env ? env : MEMSTOREFS_BIN;
}

int mnt_setup(struct mnt_env *e, const char *const *msd_args)
{
    memset(e, 0, sizeof(*e));
    struct stat st;
    cr_assert(stat("/dev/fuse", &st) == 0 && S_ISCHR(st.st_mode),
              "/dev/fuse is missing: the mount tests must mount for real");
    snprintf(e->root, sizeof(e->root), "/tmp/mfs-mnt-XXXXXX");
    if (!mkdtemp(e->root))
        return -errno;
    snprintf(e->mnt, sizeof(e->mnt), "%s/mnt", e->root);
    snprintf(e->cache, sizeof(e->cache), "%s/cache", e->root);
    snprintf(e->run, sizeof(e->run), "%s/run", e->root);
    if (mkdir(e->mnt, 0755) || mkdir(e->run, 0700))
        return -errno;
    return msd_start(&e->msd, msd_args);
}

static int vsh(const struct mnt_env *e, char **out, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static int vsh(const struct mnt_env *e, char **out, const char *fmt, va_list ap)
{
    char *cmd = NULL;
    if (vasprintf(&cmd, fmt, ap) < 0)
        return -1;
    char *full = NULL;
    int n = asprintf(&full,
                     "export ANTHROPIC_API_KEY=test-key ANTHROPIC_BASE_URL='%s' "
                     "MEMSTOREFS_RUNTIME_DIR='%s' MFS='%s' MNT='%s' CACHE='%s'; "
                     "unset ANTHROPIC_AUTH_TOKEN ANTHROPIC_WORK_SECRET; (%s) 2>&1",
                     e->msd.url, e->run, mnt_bin(), e->mnt, e->cache, cmd);
    free(cmd);
    if (n < 0)
        return -1;
    FILE *p = popen(full, "r");
    free(full);
    if (!p)
        return -1;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t r;
    while ((r = fread(chunk, 1, sizeof(chunk), p)) > 0)
        if (m)
            fwrite(chunk, 1, r, m);
    if (m)
        fclose(m);
    int st = pclose(p);
    if (out)
        *out = buf ? buf : strdup("");
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int mnt_sh(const struct mnt_env *e, char **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vsh(e, out, fmt, ap);
    va_end(ap);
    return rc;
}

bool mnt_wait_sh(const struct mnt_env *e, int timeout_s, const char *fmt, ...)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int rc = vsh(e, NULL, fmt, ap);
        va_end(ap);
        if (rc == 0)
            return true;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= timeout_s)
            return false;
        usleep(200 * 1000);
    }
}

int mnt_mount(const struct mnt_env *e, const char *store, const char *name, bool ro,
              const char *extra, char **out)
{
    return mnt_sh(e, out, "$MFS mount --store '%s:%s/%s%s' --cache-dir \"$CACHE\" "
                          "--sync-interval 5 --log-level debug %s",
                  store, e->mnt, name, ro ? ":ro" : "", extra ? extra : "");
}

void mnt_hold_writes(const struct mnt_env *e)
{
    static const char *const methods[] = {"POST", "DELETE"};
    for (int i = 0; i < 2; i++) {
        char body[300];
        snprintf(body, sizeof(body),
                 "{\"action\":\"status\",\"status\":409,\"count\":0,\"method\":\"%s\","
                 "\"path\":\"/v1/memory_stores/*/memories*\"}", methods[i]);
        struct tresp r;
        cr_assert_eq(t_admin(&e->msd, "POST", "/admin/faults", body, &r), 0);
        cr_assert_eq(r.status, 200, "cannot hold writes: %s", r.body);
        tresp_free(&r);
    }
}

bool mnt_is_mounted(const char *path)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f)
        return false;
    char line[8192];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        /* id parent major:minor root mountpoint ... */
        char mp[4096];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strcmp(mp, path) == 0)
            found = true;
    }
    fclose(f);
    return found;
}

bool mnt_has_option(const char *path, const char *opt)
{
    FILE *f = fopen("/proc/self/mounts", "r");
    cr_assert_not_null(f, "cannot read /proc/self/mounts");
    char line[8192], mp[4096], opts[4096];
    bool found = false, has = false;
    while (!found && fgets(line, sizeof(line), f)) {
        /* source mountpoint type options 0 0 */
        if (sscanf(line, "%*s %4095s %*s %4095s", mp, opts) == 2 && strcmp(mp, path) == 0) {
            found = true;
            size_t n = strlen(opt);
            for (const char *p = opts; p; p = strchr(p, ','), p = p ? p + 1 : NULL)
                if (strncmp(p, opt, n) == 0 && (p[n] == ',' || p[n] == '\0'))
                    has = true;
        }
    }
    fclose(f);
    cr_assert(found, "%s is not mounted", path);
    return has;
}

char *mnt_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    char chunk[4096];
    size_t r;
    while ((r = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, r, m);
    fclose(f);
    fclose(m);
    if (len)
        *len = n;
    return buf;
}

int mnt_write(const char *path, const char *body)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -errno;
    size_t len = strlen(body);
    int rc = write(fd, body, len) == (ssize_t)len ? 0 : -(errno ? errno : EIO);
    if (close(fd) != 0 && !rc)
        rc = -errno;
    return rc;
}

pid_t mnt_hold_open(const char *const *paths, size_t n, int flags, const char *text)
{
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(ready[0]);
        size_t len = text ? strlen(text) : 0;
        for (size_t i = 0; i < n; i++) {
            int w = open(paths[i], flags, 0644);
            if (w < 0 || (text && write(w, text, len) != (ssize_t)len))
                _exit(1);
        }
        (void)!write(ready[1], "y", 1);
        for (;;)
            pause();
    }
    close(ready[1]);
    char y = 0;
    ssize_t got = read(ready[0], &y, 1);
    close(ready[0]);
    if (got != 1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        cr_assert_fail("the holder could not open or write %s", n ? paths[0] : "(none)");
    }
    return pid;
}

char *mnt_q(const struct mnt_env *e, const char *fmt, ...)
{
    char db[400], *sql = NULL;
    snprintf(db, sizeof(db), "%s/cache.db", e->cache);
    va_list ap;
    va_start(ap, fmt);
    cr_assert(vasprintf(&sql, fmt, ap) > 0);
    va_end(ap);
    sqlite3 *h = NULL;
    int orc = sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL);
    cr_assert_eq(orc, SQLITE_OK, "%s: %s (%s)", db, sqlite3_errstr(orc),
                 h ? sqlite3_errmsg(h) : "no handle");
    sqlite3_busy_timeout(h, 5000);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(h));
    char *res = NULL;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        res = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
    free(sql);
    return res ? res : strdup("");
}

void mnt_mount_dead(const struct mnt_env *e, const char *store, const char *name)
{
    char *out = NULL;
    int rc = mnt_mount(e, store, name, false, "", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    pid_t pid = mnt_daemon_pid(e);
    cr_assert_gt(pid, 1);
    kill(pid, SIGKILL);
    for (int i = 0; i < 50 && kill(pid, 0) == 0; i++)
        usleep(100 * 1000);
    cr_assert_neq(kill(pid, 0), 0, "the daemon (pid %d) did not die", (int)pid);
}

pid_t mnt_daemon_pid(const struct mnt_env *e)
{
    DIR *d = opendir(e->run);
    pid_t pid = 0;
    struct dirent *de;
    while (d && !pid && (de = readdir(d))) {
        if (strncmp(de->d_name, "store-", 6) != 0)
            continue;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", e->run, de->d_name);
        char *text = mnt_read(path, NULL);
        char *p = text ? strstr(text, "pid=") : NULL;
        if (p)
            pid = (pid_t)strtol(p + 4, NULL, 10);
        free(text);
    }
    if (d)
        closedir(d);
    return pid;
}

/* Kills every daemon named by a lock file in the private runtime dir. */
static void kill_daemons(const struct mnt_env *e)
{
    DIR *d = opendir(e->run);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "store-", 6) != 0)
            continue;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", e->run, de->d_name);
        char *text = mnt_read(path, NULL);
        if (!text)
            continue;
        char *p = strstr(text, "pid=");
        pid_t pid = p ? (pid_t)strtol(p + 4, NULL, 10) : 0;
        free(text);
        if (pid > 1 && kill(pid, 0) == 0) {
            kill(pid, SIGKILL);
            for (int i = 0; i < 50 && kill(pid, 0) == 0; i++)
                usleep(100 * 1000);
        }
    }
    closedir(d);
}

/* Lazily detaches every mount below root (dead ones included). */
static void detach_all(const struct mnt_env *e)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f)
        return;
    char line[8192];
    size_t rl = strlen(e->root);
    while (fgets(line, sizeof(line), f)) {
        char mp[4096];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strncmp(mp, e->root, rl) == 0) {
            char cmd[8400];
            snprintf(cmd, sizeof(cmd), "fusermount3 -u -z '%s' 2>/dev/null || umount -l '%s'",
                     mp, mp);
            (void)!system(cmd);
        }
    }
    fclose(f);
}

void mnt_stop_daemons(const struct mnt_env *e)
{
    mnt_sh(e, NULL, "timeout 60 $MFS unmount --all >/dev/null 2>&1");
    kill_daemons(e);
}

void mnt_teardown(struct mnt_env *e)
{
    if (!e->root[0])
        return;
    mnt_stop_daemons(e);
    detach_all(e);
    msd_stop(&e->msd);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->root);
    if (getenv("MNT_KEEP")) /* a post-mortem: the cache, the log, the runtime dir */
        fprintf(stderr, "mnt: kept %s\n", e->root);
    else
        (void)!system(cmd);
    e->root[0] = '\0';
}
