/* credfile.c - credentials from a file named on the command line
 * (`--credentials FILE`, or `credentials=FILE` in an fstab line), for
 * mounts started by mount(8) or systemd, whose environment an operator
 * does not control as easily as a worker's.
 *
 * The file holds KEY=VALUE lines, as a systemd EnvironmentFile does:
 * blank lines and lines starting with '#' are skipped, an "export " prefix
 * is allowed, a value may be wrapped in single or double quotes.  Only
 * the four variables the environment would give are read
 * (ANTHROPIC_WORK_SECRET, ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN,
 * ANTHROPIC_BASE_URL); a value from the file wins over the environment's,
 * and when the file holds a credential, the environment's are not used.
 * The file must be a regular file of the caller (or root) that neither
 * its group nor others may read or write: a credential readable by other
 * users is refused rather than used.  The bytes read are wiped before
 * they are freed.  No state; thread-safe. */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CRED_FILE_MAX (64 * 1024)

static const char *const keys[] = {"ANTHROPIC_WORK_SECRET", "ANTHROPIC_API_KEY",
                                   "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"};
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

/* Reads the whole file after checking who may read it. */
static int read_checked(const char *path, char **buf, size_t *len, char *why, size_t whylen)
{
    /* O_NONBLOCK: a FIFO put at the path would otherwise hang the mount
     * until somebody writes to it (it is then refused: not a regular file). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int err = errno;
        snprintf(why, whylen, "cannot read the credentials file %s: %s", path, strerror(err));
        return -err;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(why, whylen, "cannot read the credentials file %s: %s", path, strerror(-rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(why, whylen, "the credentials file %s is not a regular file", path);
    } else if (st.st_mode & 0066) {
        rc = -EPERM;
        snprintf(why, whylen, "the credentials file %s may be read or written by other users "
                 "(mode %04o); make it private: chmod 600 %s", path,
                 (unsigned)(st.st_mode & 07777), path);
    } else if (st.st_uid != geteuid() && st.st_uid != 0) {
        rc = -EPERM;
        snprintf(why, whylen, "the credentials file %s belongs to uid %u, not to this user "
                 "(uid %u) or root", path, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if (st.st_size > CRED_FILE_MAX) {
        rc = -EFBIG;
        snprintf(why, whylen, "the credentials file %s is too large (over 64 KiB)", path);
    }
    char *b = rc ? NULL : calloc(1, (size_t)st.st_size + 1);
    if (!rc && !b) {
        rc = -ENOMEM;
        snprintf(why, whylen, "out of memory while reading the credentials");
    }
    size_t n = 0;
    while (!rc && n < (size_t)st.st_size) {
        ssize_t r = read(fd, b + n, (size_t)st.st_size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            snprintf(why, whylen, "cannot read the credentials file %s: %s", path,
                     strerror(-rc));
        }
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (rc) {
        if (b)
            explicit_bzero(b, (size_t)st.st_size);
        free(b);
        return rc;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Splits buf into lines in place; vals[k] points into buf. */
static int parse(char *buf, const char *path, const char *vals[N_KEYS], char *why,
                 size_t whylen)
{
    unsigned lineno = 0;
    for (char *line = buf, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        if (strncmp(s, "export ", 7) == 0)
            s = trim(s + 7);
        char *eq = strchr(s, '=');
        if (!eq || eq == s) {
            snprintf(why, whylen, "the credentials file %s: line %u is not KEY=VALUE", path,
                     lineno);
            return -EINVAL;
        }
        *eq = '\0';
        char *k = trim(s), *v = trim(eq + 1);
        size_t vn = strlen(v);
        if (vn >= 2 && (v[0] == '"' || v[0] == '\'') && v[vn - 1] == v[0]) {
            v[vn - 1] = '\0';
            v++;
        }
        for (size_t i = 0; i < N_KEYS; i++)
            if (strcmp(k, keys[i]) == 0)
                vals[i] = v;
    }
    return 0;
}

int cred_from_file(const char *path, struct mfs_cred *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof(*out));
    char *buf = NULL;
    size_t len = 0;
    int rc = read_checked(path, &buf, &len, why, whylen);
    if (rc)
        return rc;
    const char *vals[N_KEYS] = {NULL};
    rc = parse(buf, path, vals, why, whylen);
    if (!rc) {
        /* A credential from the file is the one used: the environment's
         * (keys 0 to 2) are not read then, so that a secret left in the
         * environment cannot win over the file's by the precedence of
         * its kind.  The endpoint still comes from either. */
        bool file_cred = false;
        for (size_t i = 0; i < 3; i++)
            file_cred = file_cred || (vals[i] && *vals[i]);
        for (size_t i = 0; i < N_KEYS; i++)
            if ((!vals[i] || !*vals[i]) && !(file_cred && i < 3))
                vals[i] = getenv(keys[i]);
        rc = cred_resolve(vals[0], vals[1], vals[2], vals[3], out, why, whylen);
    }
    explicit_bzero(buf, len);
    free(buf);
    return rc;
}
