/* msd.c - the memstored process side of the test support library: start a
 * private server in a temp dir, wait for its listening line, stop it by PID.
 *
 * Owns: the child process (m->pid) and its dir (m->dir).  Invariants: a
 * started struct msd has pid > 0, a url and a dir; after msd_stop() pid is 0
 * and dir is "" (so a second stop does nothing).  The child's stdout and
 * stderr go to <dir>/stdout.log and <dir>/stderr.log; the listening line is
 * found by polling stdout.log, which avoids a pipe that could fill up and
 * block the server later.  The child gets PR_SET_PDEATHSIG(SIGKILL) so a
 * test process that dies without its .fini still takes the server down.
 *
 * No locking: a struct msd belongs to one test, started and stopped from
 * the test's main thread.  The HTTP helpers live in msd_http.c. */
#include "msd.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MEMSTORED_BIN
#define MEMSTORED_BIN "memstored"
#endif

#define START_TIMEOUT_MS 10000
#define STOP_TIMEOUT_MS 5000
#define MAX_ARGS 64

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static const char *server_bin(void)
{
    const char *env = getenv("MEMSTORED_BIN");
    return env && *env ? env : MEMSTORED_BIN;
}

static const char *tmp_base(void)
{
    const char *env = getenv("MSD_TMPDIR");
    if (env && *env)
        return env;
    if (access("/dev/shm", W_OK | X_OK) == 0)
        return "/dev/shm";
    env = getenv("TMPDIR");
    return env && *env ? env : "/tmp";
}

/* Reads a whole small file into a malloc'd NUL-terminated buffer (caller
 * frees), or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len + 1024 + 1 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb, cap *= 2;
        }
        size_t k = fread(buf + len, 1, cap - len - 1, f);
        len += k;
        if (k == 0)
            break;
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

/* Prints the tail of the server's stderr to our stderr (start failures). */
static void dump_log(const struct msd *m, const char *why)
{
    char path[300];
    snprintf(path, sizeof path, "%s/stderr.log", m->dir);
    char *log = slurp(path);
    size_t n = log ? strlen(log) : 0;
    const char *tail = log ? log + (n > 2000 ? n - 2000 : 0) : "(no stderr.log)";
    fprintf(stderr, "msd: %s; memstored stderr (tail):\n%s\n", why, tail);
    free(log);
}

/* Parses "listening url=http://HOST:PORT" out of the stdout text. */
static int parse_listening(struct msd *m, const char *out)
{
    const char *line = strstr(out, "listening url=");
    if (!line)
        return -EAGAIN;
    const char *nl = strchr(line, '\n');
    if (!nl)
        return -EAGAIN; /* line not complete yet */
    const char *url = line + strlen("listening url=");
    size_t len = (size_t)(nl - url);
    if (len > 0 && url[len - 1] == '\r')
        len--;
    if (len == 0 || len >= sizeof m->url)
        return -EPROTO;
    memcpy(m->url, url, len);
    m->url[len] = '\0';
    const char *colon = strrchr(m->url, ':');
    if (!colon)
        return -EPROTO;
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end != '\0' || port <= 0 || port > 65535)
        return -EPROTO;
    m->port = (int)port;
    return 0;
}

static void child_exec(const char *dir, const char *const *argv, const char *const *extra_env)
{
    char path[300];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    snprintf(path, sizeof path, "%s/stdout.log", dir);
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    snprintf(path, sizeof path, "%s/stderr.log", dir);
    int err = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int null = open("/dev/null", O_RDONLY);
    if (out < 0 || err < 0 || null < 0)
        _exit(126);
    dup2(null, 0);
    dup2(out, 1);
    dup2(err, 2);
    closefrom(3);
    if (chdir(dir) < 0)
        _exit(126);
    for (size_t i = 0; extra_env && extra_env[i]; i++)
        putenv((char *)extra_env[i]);
    execv(argv[0], (char *const *)argv);
    _exit(127);
}

/* Forks the server with argv in dir and waits for the listening line. */
static int spawn_and_wait(struct msd *m, const char *const *argv, const char *const *extra_env)
{
    char outpath[300];
    snprintf(outpath, sizeof outpath, "%s/stdout.log", m->dir);
    unlink(outpath);

    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0)
        child_exec(m->dir, argv, extra_env);
    m->pid = pid;

    long deadline = now_ms() + START_TIMEOUT_MS;
    for (;;) {
        int status;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            m->pid = 0;
            char why[96];
            snprintf(why, sizeof why, "memstored exited before listening (status 0x%x)", status);
            dump_log(m, why);
            return -ECHILD;
        }
        char *out = slurp(outpath);
        if (out) {
            int rc = parse_listening(m, out);
            if (rc == 0) {
                m->out = out;
                return 0;
            }
            free(out);
            if (rc != -EAGAIN) {
                dump_log(m, "unparsable listening line");
                return rc;
            }
        }
        if (now_ms() > deadline) {
            dump_log(m, "memstored did not print its listening line within 10 s");
            return -ETIMEDOUT;
        }
        sleep_ms(10);
    }
}

int msd_start_raw(struct msd *m, const char *dir, const char *const *args,
                  const char *const *extra_env)
{
    const char *argv[MAX_ARGS + 4];
    size_t n = 0;

    memset(m, 0, sizeof *m);
    if (dir) {
        if (strlen(dir) >= sizeof m->dir)
            return -ENAMETOOLONG;
        memcpy(m->dir, dir, strlen(dir) + 1);
    } else {
        snprintf(m->dir, sizeof m->dir, "%s/msd.XXXXXX", tmp_base());
        if (!mkdtemp(m->dir)) {
            int e = errno;
            m->dir[0] = '\0';
            return -e;
        }
    }
    argv[n++] = server_bin();
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    for (size_t i = 0; args && args[i]; i++) {
        if (n >= MAX_ARGS + 3)
            return -E2BIG;
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    int rc = spawn_and_wait(m, argv, extra_env);
    if (rc < 0)
        msd_stop(m);
    return rc;
}

int msd_start_in(struct msd *m, const char *dir, const char *const *extra_args)
{
    char db[300];
    const char *args[MAX_ARGS];
    size_t n = 0;
    char dircopy[256];

    if (dir) {
        if (strlen(dir) >= sizeof dircopy)
            return -ENAMETOOLONG;
        memcpy(dircopy, dir, strlen(dir) + 1);
    }
    /* The db path needs the dir; msd_start_raw() makes it when dir is NULL,
     * so make it here first to know the name. */
    if (!dir) {
        snprintf(dircopy, sizeof dircopy, "%s/msd.XXXXXX", tmp_base());
        if (!mkdtemp(dircopy))
            return -errno;
    }
    snprintf(db, sizeof db, "%s/memstored.db", dircopy);
    args[n++] = "--db";
    args[n++] = db;
    args[n++] = "--api-key";
    args[n++] = "test-key";
    args[n++] = "--admin-key";
    args[n++] = "admin-key";
    for (size_t i = 0; extra_args && extra_args[i]; i++) {
        if (n >= MAX_ARGS - 1)
            return -E2BIG;
        args[n++] = extra_args[i];
    }
    args[n] = NULL;
    return msd_start_raw(m, dircopy, args, NULL);
}

int msd_start(struct msd *m, const char *const *extra_args)
{
    return msd_start_in(m, NULL, extra_args);
}

int msd_terminate(struct msd *m)
{
    if (!m || m->pid <= 0)
        return -ESRCH;
    pid_t pid = m->pid;
    int status = 0;
    kill(pid, SIGTERM);
    long deadline = now_ms() + STOP_TIMEOUT_MS;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
        if (now_ms() > deadline) {
            fprintf(stderr, "msd: memstored pid %d ignored SIGTERM for 5 s; SIGKILL\n", (int)pid);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        sleep_ms(5);
    }
    m->pid = 0;
    return status;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void msd_stop_keep(struct msd *m)
{
    if (!m)
        return;
    if (m->pid > 0)
        msd_terminate(m);
    free(m->out);
    m->out = NULL;
    m->dir[0] = '\0';
}

void msd_stop(struct msd *m)
{
    if (!m)
        return;
    if (m->pid > 0)
        msd_terminate(m);
    free(m->out);
    m->out = NULL;
    if (m->dir[0]) {
        const char *keep = getenv("MSD_KEEP");
        if (keep && *keep == '1')
            fprintf(stderr, "msd: keeping %s\n", m->dir);
        else
            nftw(m->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        m->dir[0] = '\0';
    }
}
