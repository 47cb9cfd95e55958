/* history.c - the commands of memory history and recovery (client side):
 *   memstorefs log [--json] PATH            versions of the file's memory
 *   memstorefs log --deleted [--json] DIR   memories deleted under DIR
 *   memstorefs show PATH --version ID       one version's bytes
 *   memstorefs restore PATH --version ID [--to PATH]
 * Each finds the mount that holds PATH (the store lock files of this
 * host's runtime directory, as `memstorefs sync PATH` does; PATH need not
 * exist: a deleted file's path is a path inside the mount) and asks its
 * daemon through the control socket (histserve.c), which makes the
 * requests with its own credential: the caller needs none.
 * Exit status: 0 done, 1 failure (the reason on stderr), 2 bad usage. */
#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "history.h"
#include "runtime.h"

/* PATH as an absolute path with no ".", ".." or empty segment, its
 * existing part resolved (symbolic links, as the kernel would). */
static int absolute(const char *arg, char *out, size_t len)
{
    char buf[PATH_MAX * 2], cwd[PATH_MAX];
    if (arg[0] != '/' && !getcwd(cwd, sizeof(cwd)))
        return -errno;
    if ((size_t)snprintf(buf, sizeof(buf), "%s/%s", arg[0] == '/' ? "" : cwd, arg) >=
        sizeof(buf))
        return -ENAMETOOLONG;
    /* Lexically first: "a/../b" is b even when a is gone. */
    char norm[PATH_MAX * 2] = "";
    size_t n = 0;
    for (char *save = NULL, *seg = strtok_r(buf, "/", &save); seg;
         seg = strtok_r(NULL, "/", &save)) {
        if (strcmp(seg, ".") == 0)
            continue;
        if (strcmp(seg, "..") == 0) {
            while (n && norm[n - 1] != '/')
                n--;
            if (n)
                n--;
            norm[n] = '\0';
            continue;
        }
        n += (size_t)snprintf(norm + n, sizeof(norm) - n, "/%s", seg);
        if (n >= sizeof(norm))
            return -ENAMETOOLONG;
    }
    if (!n)
        snprintf(norm, sizeof(norm), "/");
    /* Then the longest part that exists, resolved. */
    size_t keep = strlen(norm);
    while (keep > 1) {
        char head[PATH_MAX * 2], real[PATH_MAX];
        snprintf(head, sizeof(head), "%.*s", (int)keep, norm);
        if (realpath(head, real)) {
            const char *rest = norm + keep;
            bool root = strcmp(real, "/") == 0;
            if ((size_t)snprintf(out, len, "%s%s", root && *rest ? "" : real, rest) >= len)
                return -ENAMETOOLONG;
            return 0;
        }
        while (keep > 0 && norm[keep - 1] != '/')
            keep--;
        keep = keep ? keep - 1 : 0; /* without that '/' */
    }
    if ((size_t)snprintf(out, len, "%s", norm) >= len)
        return -ENAMETOOLONG;
    return 0;
}

struct find_ctx {
    const char *abs;
    struct hist_target *t;
    size_t best;
    bool alive;
};

static int find_mount(void *arg, const char *file, const struct rt_lockinfo *info, bool alive)
{
    struct find_ctx *c = arg;
    size_t ml = rt_mount_prefix(info, c->abs);
    if (ml <= c->best)
        return 0;
    c->best = ml;
    c->alive = alive;
    c->t->pid = info->pid;
    snprintf(c->t->store_id, sizeof(c->t->store_id), "%s", info->store_id);
    snprintf(c->t->mount_path, sizeof(c->t->mount_path), "%s", info->mount_path);
    return 0;
}

int hist_resolve(const char *cmd, const char *arg, struct hist_target *t)
{
    memset(t, 0, sizeof(*t));
    int rc = absolute(arg, t->abs, sizeof(t->abs));
    if (rc) {
        fprintf(stderr, "memstorefs %s: %s: %s\n", cmd, arg, strerror(-rc));
        return 1;
    }
    struct find_ctx c = {t->abs, t, 0, false};
    rt_each_lock(find_mount, &c);
    if (!c.best) {
        fprintf(stderr, "memstorefs %s: %s is not inside a memstorefs mount on this host\n", cmd,
                t->abs);
        return 1;
    }
    if (!c.alive) {
        fprintf(stderr, "memstorefs %s: the daemon (pid %d) of %s is gone; run 'memstorefs "
                        "unmount %s', then mount the store again\n", cmd, (int)t->pid,
                t->mount_path, t->mount_path);
        return 1;
    }
    const char *rel = t->abs + c.best;
    snprintf(t->rel, sizeof(t->rel), "%s", *rel ? rel : "/");
    for (const char *p = t->rel; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            fprintf(stderr, "memstorefs %s: %s holds a control character, which no memory "
                            "path may\n", cmd, t->abs);
            return 1;
        }
    }
    return 0;
}

int hist_ask(const char *cmd, pid_t pid, const char *line, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    FILE *m = open_memstream(out, len);
    if (!m) {
        fprintf(stderr, "memstorefs %s: out of memory\n", cmd);
        return 1;
    }
    /* The daemon's requests are bounded by its retries (a few minutes at
     * worst); the wait here is longer than that. */
    int rc = control_ask(pid, line, m, 900);
    fclose(m);
    if (rc == 0)
        return 0;
    if (rc != -EIO)
        fprintf(stderr, "memstorefs %s: cannot reach the daemon (pid %d): %s\n", cmd, (int)pid,
                strerror(-rc));
    free(*out);
    *out = NULL;
    *len = 0;
    return 1;
}

int hist_take_data(const char **p, const char *end, const char **bytes, size_t *n)
{
    const char *s = *p;
    if (end - s < 6 || strncmp(s, "data ", 5) != 0)
        return -EPROTO;
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s + 5, &e, 10);
    /* v bytes, then the closing newline, all before end. */
    if (errno || e == s + 5 || e >= end || *e != '\n' || v >= (unsigned long long)(end - e - 1) ||
        e[1 + v] != '\n')
        return -EPROTO;
    *bytes = e + 1;
    *n = (size_t)v;
    *p = e + 2 + v;
    return 0;
}

/* A control line into buf; false (said on stderr) when it does not fit. */
static bool __attribute__((format(printf, 4, 5)))
cmd_line(const char *cmd, char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < len)
        return true;
    fprintf(stderr, "memstorefs %s: the path is too long\n", cmd);
    return false;
}

/* A version id as the API makes them: letters, digits, '_' and '-'. */
static bool version_ok(const char *v)
{
    size_t n = strlen(v);
    if (!n || n > 127)
        return false;
    for (; *v; v++)
        if (!((*v >= 'a' && *v <= 'z') || (*v >= 'A' && *v <= 'Z') ||
              (*v >= '0' && *v <= '9') || *v == '_' || *v == '-'))
            return false;
    return true;
}

static const char log_usage[] =
    "usage: memstorefs log [--json] PATH\n"
    "       memstorefs log --deleted [--json] DIR\n";

int history_log_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"deleted", no_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    bool json = false, deleted = false;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (ch == 'j')
            json = true;
        else if (ch == 'd')
            deleted = true;
        else {
            fputs(log_usage, stderr);
            return 2;
        }
    }
    if (optind + 1 != argc) {
        fputs(log_usage, stderr);
        return 2;
    }
    struct hist_target t;
    if (hist_resolve("log", argv[optind], &t))
        return 1;
    char line[CTL_LINE_MAX - 1], *out;
    size_t len;
    if (!cmd_line("log", line, sizeof(line), "%s\t%s\t%s\t%d",
                  deleted ? "hist-deleted" : "hist-log", t.mount_path, t.rel, json) ||
        hist_ask("log", t.pid, line, &out, &len))
        return 1;
    fwrite(out, 1, len, stdout);
    free(out);
    return fflush(stdout) == 0 ? 0 : 1;
}

static const char show_usage[] = "usage: memstorefs show PATH --version ID\n";
static const char restore_usage[] = "usage: memstorefs restore PATH --version ID [--to PATH]\n";

/* PATH --version ID [--to PATH] (to: NULL when not allowed). */
static int parse_version_args(int argc, char **argv, const char *usage, const char **path,
                              const char **version, const char **to)
{
    static const struct option longopts[] = {
        {"version", required_argument, NULL, 'v'},
        {"to", required_argument, NULL, 't'},
        {NULL, 0, NULL, 0},
    };
    *path = *version = NULL;
    if (to)
        *to = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (ch == 'v') {
            *version = optarg;
        } else if (ch == 't' && to) {
            *to = optarg;
        } else {
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind + 1 != argc || !*version) {
        fputs(usage, stderr);
        return 2;
    }
    *path = argv[optind];
    if (!version_ok(*version)) {
        fprintf(stderr, "memstorefs %s: '%s' is not a version id (memstorefs log PATH lists "
                        "them)\n", argv[0], *version);
        return 2;
    }
    return 0;
}

/* True (after saying so) when t is the mount point, which no version is
 * of. */
static bool mount_point(const char *cmd, const struct hist_target *t)
{
    if (strcmp(t->rel, "/") != 0)
        return false;
    fprintf(stderr, "memstorefs %s: %s is the mount point of memory store %s, not a file in "
                    "it\n", cmd, t->abs, t->store_id);
    return true;
}

int history_show_main(int argc, char **argv)
{
    const char *path, *version;
    int rc = parse_version_args(argc, argv, show_usage, &path, &version, NULL);
    if (rc)
        return rc;
    struct hist_target t;
    if (hist_resolve("show", path, &t))
        return 1;
    if (mount_point("show", &t))
        return 2;
    char line[CTL_LINE_MAX - 1], *out;
    size_t len;
    if (!cmd_line("show", line, sizeof(line), "hist-show\t%s\t%s\t%s", t.mount_path, t.rel,
                  version) ||
        hist_ask("show", t.pid, line, &out, &len))
        return 1;
    const char *p = out, *bytes;
    size_t n;
    rc = hist_take_data(&p, out + len, &bytes, &n);
    if (rc)
        fprintf(stderr, "memstorefs show: the daemon's answer is malformed\n");
    else
        fwrite(bytes, 1, n, stdout);
    free(out);
    return rc || fflush(stdout) != 0 ? 1 : 0;
}

int history_restore_main(int argc, char **argv)
{
    const char *path, *version, *to;
    int rc = parse_version_args(argc, argv, restore_usage, &path, &version, &to);
    if (rc)
        return rc;
    struct hist_target t, tt;
    if (hist_resolve("restore", path, &t) || (to && hist_resolve("restore", to, &tt)))
        return 1;
    if (mount_point("restore", &t))
        return 2;
    if (to && (strcmp(t.mount_path, tt.mount_path) != 0 || strcmp(tt.rel, "/") == 0)) {
        fprintf(stderr, "memstorefs restore: --to %s must name a file in the same mount as %s "
                        "(%s)\n", tt.abs, t.abs, t.mount_path);
        return 2;
    }
    char line[CTL_LINE_MAX - 1], *out;
    size_t len;
    if (!cmd_line("restore", line, sizeof(line), "hist-restore\t%s\t%s\t%s\t%s", t.mount_path,
                  t.rel, version, to ? tt.rel : "") ||
        hist_ask("restore", t.pid, line, &out, &len))
        return 1;
    fwrite(out, 1, len, stdout);
    free(out);
    return fflush(stdout) == 0 ? 0 : 1;
}
