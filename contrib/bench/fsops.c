/* fsops.c - the file workloads of contrib/bench.sh, in one process so
 * that what is timed is the file system, not fork and exec:
 *
 *   fsops create DIR N SIZE     N new files DIR/c<i>.md of SIZE bytes
 *                               (open O_CREAT|O_EXCL, write, close)
 *   fsops overwrite DIR N SIZE  the same files again (O_TRUNC, write, close)
 *   fsops read LIST [PASSES]    open, read to the end and close every file
 *                               named in LIST (one path a line); PASSES
 *                               times over (odd, default 1), the time the
 *                               median pass: a pass over a warm tree takes
 *                               some 50 ms, which one stall of the machine
 *                               can double
 *   fsops save LIST             what `sed -i` asks of the file system, for
 *                               every file in LIST: open it, fstat, create
 *                               a temporary file beside it (O_EXCL, 0600),
 *                               read, fchown, fgetxattr of its ACL, fchmod,
 *                               close it, write the new content, close,
 *                               rename over it (without starting a process
 *                               a file, which dominates sed -i's own time)
 *   fsops rt PATH N             N getxattr(2) of a name in the security.*
 *                               namespace on PATH: on a mount, one round
 *                               trip each that the daemon answers at once
 *                               (ENOTSUP, without the cache), the least a
 *                               request costs on this machine; on tmpfs,
 *                               the system call alone
 *
 * Prints the elapsed seconds and the operations per second on one line
 * ("secs=0.123 per_s=8130"); save adds a line with the mean time of each
 * of its system calls in microseconds ("calls open=31.0 ..."); exits 1 at
 * the first error (with its path). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fail(const char *what, const char *path)
{
    fprintf(stderr, "fsops: %s %s: %s\n", what, path, strerror(errno));
    return 1;
}

static int write_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

static int writes(const char *dir, long n, long size, int flags)
{
    char *buf = malloc((size_t)size + 1);
    if (!buf)
        return 1;
    for (long i = 0; i < size; i++)
        buf[i] = (char)('a' + i % 26);
    if (size)
        buf[size - 1] = '\n';
    char path[4096];
    for (long i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/c%ld.md", dir, i);
        int fd = open(path, O_WRONLY | flags, 0644);
        if (fd < 0)
            return fail("open", path);
        if (write_all(fd, buf, (size_t)size) != 0)
            return fail("write", path);
        if (close(fd) != 0)
            return fail("close", path);
    }
    free(buf);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int reads(const char *list, long *count)
{
    FILE *f = fopen(list, "r");
    if (!f)
        return fail("open", list);
    char path[4096], buf[65536];
    *count = 0;
    while (fgets(path, sizeof(path), f)) {
        path[strcspn(path, "\n")] = '\0';
        if (!path[0])
            continue;
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            return fail("open", path);
        ssize_t r;
        while ((r = read(fd, buf, sizeof(buf))) > 0)
            ;
        if (r < 0)
            return fail("read", path);
        if (close(fd) != 0)
            return fail("close", path);
        (*count)++;
    }
    fclose(f);
    return 0;
}

enum { S_OPEN, S_FSTAT, S_CREATE, S_READ, S_FCHOWN, S_ACL, S_FCHMOD, S_CLOSE_IN, S_WRITE,
       S_CLOSE_OUT, S_RENAME, S_N };
static const char *const save_name[S_N] = {"open", "fstat", "create", "read", "fchown", "acl",
                                           "fchmod", "close_in", "write", "close_out", "rename"};

/* One sed -i of path: its content with the case of its first byte
 * changed; t[] gets each call's seconds added. */
static int save_one(const char *path, double t[S_N])
{
    static char buf[128 * 1024];
    char tmp[4200], acl[256];
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path) : 1;
    snprintf(tmp, sizeof(tmp), "%.*s/sedfsops%ld", dl, slash ? path : ".", (long)getpid());
    struct stat st;
    double a = now(), b;
#define LAP(step) (b = now(), t[step] += b - a, a = b)
    int in = open(path, O_RDONLY);
    LAP(S_OPEN);
    if (in < 0)
        return fail("open", path);
    if (fstat(in, &st) != 0)
        return fail("fstat", path);
    LAP(S_FSTAT);
    mode_t um = umask(077);
    int out = open(tmp, O_RDWR | O_CREAT | O_EXCL, 0600);
    umask(um);
    LAP(S_CREATE);
    if (out < 0)
        return fail("create", tmp);
    size_t len = 0;
    ssize_t r;
    while (len < sizeof(buf) && (r = read(in, buf + len, sizeof(buf) - len)) > 0)
        len += (size_t)r;
    LAP(S_READ);
    if (fchown(out, st.st_uid, st.st_gid) != 0)
        return fail("fchown", tmp);
    LAP(S_FCHOWN);
    (void)fgetxattr(in, "system.posix_acl_access", acl, sizeof(acl)); /* none: ENODATA */
    LAP(S_ACL);
    if (fchmod(out, st.st_mode & 07777) != 0)
        return fail("fchmod", tmp);
    LAP(S_FCHMOD);
    if (close(in) != 0)
        return fail("close", path);
    LAP(S_CLOSE_IN);
    if (len)
        buf[0] = (char)(buf[0] ^ 0x20);
    if (write_all(out, buf, len) != 0)
        return fail("write", tmp);
    LAP(S_WRITE);
    if (close(out) != 0)
        return fail("close", tmp);
    LAP(S_CLOSE_OUT);
    if (rename(tmp, path) != 0)
        return fail("rename", tmp);
    LAP(S_RENAME);
#undef LAP
    return 0;
}

static int saves(const char *list, long *count, double t[S_N])
{
    FILE *f = fopen(list, "r");
    if (!f)
        return fail("open", list);
    char path[4096];
    *count = 0;
    while (fgets(path, sizeof(path), f)) {
        path[strcspn(path, "\n")] = '\0';
        if (!path[0])
            continue;
        if (save_one(path, t) != 0)
            return 1;
        (*count)++;
    }
    fclose(f);
    return 0;
}

/* n getxattr of an attribute nobody sets; any answer but a failure to
 * reach the file (ENODATA, ENOTSUP) is the expected one. */
static int round_trips(const char *path, long n)
{
    char v[64];
    for (long i = 0; i < n; i++)
        if (getxattr(path, "security.memstorefs_bench", v, sizeof(v)) < 0 && errno != ENODATA &&
            errno != ENOTSUP)
            return fail("getxattr", path);
    return 0;
}

int main(int argc, char **argv)
{
    long n = 0;
    int rc;
    double calls[S_N] = {0};
    double t0 = now(), secs = -1; /* (read sets secs: its median pass) */
    if (argc == 5 && strcmp(argv[1], "create") == 0) {
        n = atol(argv[3]);
        rc = writes(argv[2], n, atol(argv[4]), O_CREAT | O_EXCL);
    } else if (argc == 5 && strcmp(argv[1], "overwrite") == 0) {
        n = atol(argv[3]);
        rc = writes(argv[2], n, atol(argv[4]), O_TRUNC);
    } else if ((argc == 3 || argc == 4) && strcmp(argv[1], "read") == 0) {
        char *end = NULL;
        long passes = argc == 4 ? strtol(argv[3], &end, 10) : 1;
        if (argc == 4 && (!*argv[3] || *end || passes < 1 || passes > 999 || passes % 2 == 0)) {
            fprintf(stderr, "fsops: PASSES must be odd, 1 to 999 (a median), got '%s'\n",
                    argv[3]);
            return 2;
        }
        double *took = calloc((size_t)passes, sizeof(*took));
        if (!took)
            return 1;
        rc = 0;
        for (long i = 0; i < passes && !rc; i++) {
            double p0 = now();
            rc = reads(argv[2], &n);
            took[i] = now() - p0;
        }
        qsort(took, (size_t)passes, sizeof(*took), cmp_double);
        secs = took[passes / 2];
        free(took);
    } else if (argc == 3 && strcmp(argv[1], "save") == 0) {
        rc = saves(argv[2], &n, calls);
    } else if (argc == 4 && strcmp(argv[1], "rt") == 0) {
        n = atol(argv[3]);
        rc = round_trips(argv[2], n);
    } else {
        fprintf(stderr,
                "usage: fsops create|overwrite DIR N SIZE | fsops read LIST [PASSES] | "
                "fsops save LIST | fsops rt PATH N\n");
        return 2;
    }
    if (secs < 0)
        secs = now() - t0;
    if (rc)
        return rc;
    printf("secs=%.4f per_s=%.0f\n", secs, secs > 0 ? (double)n / secs : 0.0);
    if (strcmp(argv[1], "rt") == 0 && n > 0)
        printf("us_each=%.2f\n", secs * 1e6 / (double)n);
    if (strcmp(argv[1], "save") == 0 && n > 0) {
        printf("calls");
        for (int i = 0; i < S_N; i++)
            printf(" %s=%.1f", save_name[i], calls[i] * 1e6 / (double)n);
        printf("\n");
    }
    return 0;
}
