/* fsops.c - the file workloads of contrib/bench.sh, in one process so
 * that what is timed is the file system, not fork and exec:
 *
 *   fsops create DIR N SIZE     N new files DIR/c<i>.md of SIZE bytes
 *                               (open O_CREAT|O_EXCL, write, close)
 *   fsops overwrite DIR N SIZE  the same files again (O_TRUNC, write, close)
 *   fsops read LIST             open, read to the end and close every file
 *                               named in LIST (one path a line)
 *
 * Prints the elapsed seconds and the operations per second on one line
 * ("secs=0.123 per_s=8130"); exits 1 at the first error (with its path). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv)
{
    long n = 0;
    int rc;
    double t0 = now();
    if (argc == 5 && strcmp(argv[1], "create") == 0) {
        n = atol(argv[3]);
        rc = writes(argv[2], n, atol(argv[4]), O_CREAT | O_EXCL);
    } else if (argc == 5 && strcmp(argv[1], "overwrite") == 0) {
        n = atol(argv[3]);
        rc = writes(argv[2], n, atol(argv[4]), O_TRUNC);
    } else if (argc == 3 && strcmp(argv[1], "read") == 0) {
        rc = reads(argv[2], &n);
    } else {
        fprintf(stderr, "usage: fsops create|overwrite DIR N SIZE | fsops read LIST\n");
        return 2;
    }
    double secs = now() - t0;
    if (rc)
        return rc;
    printf("secs=%.4f per_s=%.0f\n", secs, secs > 0 ? (double)n / secs : 0.0);
    return 0;
}
