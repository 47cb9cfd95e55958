/* users.c - second local users for the security tests (see users.h).
 *
 * State: TU_DIR, TU_BIN, the users created and /dev/fuse's mode before
 * the grant; one suite at a time (the tests run with -j1). */
#include "users.h"

#include <dirent.h>
#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

char TU_DIR[256];
char TU_BIN[300];

static struct tuser made[8]; /* copies: the caller's struct may be gone by teardown */
static int n_made;
static mode_t fuse_mode;
#define FUSE_MODE_FILE "/run/mfs-tests-dev-fuse.mode"
static bool fuse_granted;

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&cmd, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    int st = system(cmd);
    free(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void tu_setup(void)
{
    snprintf(TU_DIR, sizeof(TU_DIR), "/tmp/mfs-users-XXXXXX");
    cr_assert_not_null(mkdtemp(TU_DIR));
    cr_assert_eq(chmod(TU_DIR, 0755), 0);
    snprintf(TU_BIN, sizeof(TU_BIN), "%s/memstorefs", TU_DIR);
    cr_assert_eq(run("cp '%s' '%s' && chmod 0755 '%s'", mnt_bin(), TU_BIN, TU_BIN), 0,
                 "cannot copy the memstorefs binary");
    struct stat st;
    cr_assert(stat("/dev/fuse", &st) == 0 && S_ISCHR(st.st_mode),
              "/dev/fuse is missing: the mount tests must mount for real");
    /* The mode to restore is kept in a file until it is restored, so that
     * a run that crashed before its teardown does not make 0666 the mode
     * the next run puts back. */
    fuse_mode = st.st_mode & 07777;
    FILE *f = fopen(FUSE_MODE_FILE, "r");
    unsigned saved;
    if (f && fscanf(f, "%o", &saved) == 1)
        fuse_mode = saved & 07777;
    if (f)
        fclose(f);
    else if ((f = fopen(FUSE_MODE_FILE, "w"))) {
        fprintf(f, "%o\n", (unsigned)fuse_mode);
        fclose(f);
    }
    cr_assert_eq(chmod("/dev/fuse", 0666), 0, "cannot open /dev/fuse to other users");
    fuse_granted = true;
}

void tu_runtime_dir(const struct tuser *u, char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/memstorefs-%u", (unsigned)u->uid);
}

/* Calls fn with the pid of each lock file in u's runtime dir. */
static pid_t each_pid(const struct tuser *u, bool kill_them)
{
    char dir[64];
    tu_runtime_dir(u, dir, sizeof(dir));
    DIR *d = opendir(dir);
    pid_t first = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "store-", 6) != 0)
            continue;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        char *text = mnt_read(path, NULL);
        char *p = text ? strstr(text, "pid=") : NULL;
        pid_t pid = p ? (pid_t)strtol(p + 4, NULL, 10) : 0;
        free(text);
        if (pid > 1 && !first)
            first = pid;
        if (kill_them && pid > 1 && kill(pid, 0) == 0) {
            kill(pid, SIGKILL);
            for (int i = 0; i < 50 && kill(pid, 0) == 0; i++)
                usleep(100 * 1000);
        }
    }
    if (d)
        closedir(d);
    return first;
}

pid_t tu_daemon_pid(const struct tuser *u)
{
    return each_pid(u, false);
}

/* Lazily detaches every mount below TU_DIR. */
static void detach_all(void)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f)
        return;
    char line[8192];
    size_t rl = strlen(TU_DIR);
    while (fgets(line, sizeof(line), f)) {
        char mp[4096];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strncmp(mp, TU_DIR, rl) == 0)
            run("fusermount3 -u -z '%s' 2>/dev/null || umount -l '%s'", mp, mp);
    }
    fclose(f);
}

void tu_teardown(void)
{
    if (fuse_granted) {
        chmod("/dev/fuse", fuse_mode);
        unlink(FUSE_MODE_FILE);
        fuse_granted = false;
    }
    for (int i = 0; i < n_made; i++)
        each_pid(&made[i], true);
    if (TU_DIR[0])
        detach_all();
    for (int i = 0; i < n_made; i++) {
        char dir[64];
        tu_runtime_dir(&made[i], dir, sizeof(dir));
        run("rm -rf '%s'", dir);
        run("userdel '%s' >/dev/null 2>&1", made[i].name);
    }
    n_made = 0;
    if (TU_DIR[0])
        run("rm -rf '%s'", TU_DIR);
    TU_DIR[0] = '\0';
}

void tu_create(struct tuser *u, const char *name)
{
    memset(u, 0, sizeof(*u));
    snprintf(u->name, sizeof(u->name), "%s", name);
    snprintf(u->home, sizeof(u->home), "%s/home-%s", TU_DIR, name);
    run("userdel '%s' >/dev/null 2>&1", name); /* left by a crashed run */
    cr_assert_eq(run("useradd -M -d '%s' -s /bin/sh '%s'", u->home, name), 0,
                 "useradd %s failed", name);
    struct passwd *pw = getpwnam(name);
    cr_assert_not_null(pw, "no user %s after useradd", name);
    u->uid = pw->pw_uid;
    u->gid = pw->pw_gid;
    cr_assert(n_made < 8);
    made[n_made++] = *u;
    cr_assert_eq(mkdir(u->home, 0700), 0);
    cr_assert_eq(chown(u->home, u->uid, u->gid), 0);
    char dir[64];
    tu_runtime_dir(u, dir, sizeof(dir));
    run("rm -rf '%s'", dir); /* a uid reused from a crashed run */
}

int tu_sh(const struct mnt_env *e, const struct tuser *u, char **out, const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&cmd, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    /* The command travels in the environment: no quoting to get wrong. */
    setenv("TU_CMD", cmd, 1);
    free(cmd);
    static const char *const pass[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
    char san[2048] = "";
    for (size_t i = 0; i < 3; i++) {
        const char *v = getenv(pass[i]);
        if (v)
            snprintf(san + strlen(san), sizeof(san) - strlen(san), " %s='%s'", pass[i], v);
    }
    char *full = NULL;
    n = asprintf(&full,
                 "cd / && setpriv --reuid=%u --regid=%u --init-groups env -i HOME='%s' "
                 "HOME_DIR='%s' USER='%s' LOGNAME='%s' PATH=/usr/sbin:/usr/bin:/sbin:/bin "
                 "ANTHROPIC_API_KEY=test-key ANTHROPIC_BASE_URL='%s' MFS='%s'%s "
                 "TU_CMD=\"$TU_CMD\" sh -c 'eval \"$TU_CMD\"' 2>&1",
                 (unsigned)u->uid, (unsigned)u->gid, u->home, u->home, u->name, u->name,
                 e->msd.url, TU_BIN, san);
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
    unsetenv("TU_CMD");
    if (out)
        *out = buf ? buf : strdup("");
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
