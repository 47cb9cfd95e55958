/* cli.c - parsing of the `memstorefs mount` command line into struct
 * mount_opts: the stores (a session file or repeated --store), the sync
 * and flush settings, the cache directory, ownership, logging and extra
 * FUSE options.  Every bad argument gets a clear message and exit 2. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "log.h"
#include "session.h"

#define MAX_STORES 8

void mount_opts_free(struct mount_opts *o)
{
    session_stores_free(o->stores, o->n_stores);
    free(o->deletions);
    free(o->cache_dir);
    free(o->log_file);
    free(o->log_level);
    free(o->fuse_opts);
    free(o->credentials);
    memset(o, 0, sizeof(*o));
}

char *cli_abs_path(const char *p)
{
    if (p[0] == '/')
        return strdup(p);
    char cwd[PATH_MAX], *out = NULL;
    if (!getcwd(cwd, sizeof(cwd)))
        return NULL;
    return asprintf(&out, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, p) < 0 ? NULL : out;
}

char *cli_default_cache_dir(void)
{
    const char *env = getenv("MEMSTOREFS_CACHE_DIR");
    char *out = NULL;
    if (env && *env) {
        char *p = cli_abs_path(env);
        if (!p && env[0] != '/')
            fprintf(stderr, "memstorefs: MEMSTOREFS_CACHE_DIR '%s': the working directory cannot "
                            "be read to make it absolute\n", env);
        return p;
    }
    if (geteuid() == 0)
        return strdup("/var/lib/memstorefs");
    const char *state = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    if (state && *state) {
        if (asprintf(&out, "%s/memstorefs", state) < 0)
            out = NULL;
    } else if (home && *home) {
        if (asprintf(&out, "%s/.local/state/memstorefs", home) < 0)
            out = NULL;
    } else if (asprintf(&out, "/tmp/memstorefs-cache-%u", (unsigned)geteuid()) < 0) {
        out = NULL;
    }
    return out;
}

static int usage_error(const char *fmt, const char *arg) __attribute__((format(printf, 1, 0)));
static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "memstorefs mount: ");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    fprintf(stderr, fmt, arg);
#pragma GCC diagnostic pop
    fprintf(stderr, "\nTry 'memstorefs --help'.\n");
    return 2;
}

int cli_parse_int(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && strcmp(end, "iB") == 0)
        end += 2;
    else if (strcmp(end, "B") == 0)
        end++;
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

/* --store ID:MOUNT_PATH[:ro|:rw] */
static int add_store(struct mount_opts *o, const char *arg)
{
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg || !colon[1])
        return usage_error("--store wants ID:MOUNT_PATH[:ro], got '%s'", arg);
    if (o->n_stores >= MAX_STORES)
        return usage_error("at most 8 memory stores can be mounted by one session (%s)", arg);
    char *path = strdup(colon + 1);
    char *id = strndup(arg, (size_t)(colon - arg));
    if (!path || !id) {
        free(path);
        free(id);
        return usage_error("%s", "out of memory");
    }
    for (const char *c = id; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-')) {
            free(path);
            int rc = usage_error("--store: '%s' is not a memory store id (letters, digits, '_' "
                                 "and '-' only)", id);
            free(id);
            return rc;
        }
    }
    bool ro = false;
    size_t n = strlen(path);
    if (n > 3 && (strcmp(path + n - 3, ":ro") == 0 || strcmp(path + n - 3, ":rw") == 0)) {
        ro = path[n - 2] == 'r' && path[n - 1] == 'o';
        path[n - 3] = '\0';
    }
    struct session_store *v = realloc(o->stores, (o->n_stores + 1) * sizeof(*v));
    if (!v) {
        free(path);
        free(id);
        return usage_error("%s", "out of memory");
    }
    o->stores = v;
    memset(&v[o->n_stores], 0, sizeof(v[0]));
    v[o->n_stores].id = id;
    v[o->n_stores].mount_path = path;
    v[o->n_stores].read_only = ro;
    o->n_stores++;
    return 0;
}

static int load_session(struct mount_opts *o, const char *file)
{
    FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "memstorefs mount: cannot read the session file %s: %s\n", file,
                strerror(errno));
        return 2;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = cap > (16u << 20) ? NULL : realloc(buf, cap);
            if (!nb) {
                free(buf);
                if (f != stdin)
                    fclose(f);
                fprintf(stderr, "memstorefs mount: the session file %s is too large\n", file);
                return 2;
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0)
            break;
    }
    if (f != stdin)
        fclose(f);
    char why[512] = "";
    struct session_store *st = NULL;
    size_t n = 0;
    int rc = session_parse(buf, len, &st, &n, why, sizeof(why));
    free(buf);
    if (rc) {
        fprintf(stderr, "memstorefs mount: the session file %s is not usable: %s\n", file, why);
        return 2;
    }
    if (o->n_stores + n > MAX_STORES) {
        session_stores_free(st, n);
        fprintf(stderr, "memstorefs mount: at most 8 memory stores can be mounted by one "
                        "session; %s lists %zu\n", file, o->n_stores + n);
        return 2;
    }
    struct session_store *v = realloc(o->stores, (o->n_stores + n) * sizeof(*v));
    if (!v) {
        session_stores_free(st, n);
        return usage_error("%s", "out of memory");
    }
    memcpy(v + o->n_stores, st, n * sizeof(*st));
    free(st);
    o->stores = v;
    o->n_stores += n;
    return 0;
}

static int add_fuse_opt(struct mount_opts *o, const char *opt)
{
    char *joined = NULL;
    if (asprintf(&joined, "%s%s%s", o->fuse_opts ? o->fuse_opts : "", o->fuse_opts ? "," : "",
                 opt) < 0)
        return usage_error("%s", "out of memory");
    free(o->fuse_opts);
    o->fuse_opts = joined;
    return 0;
}

/* uid or user name. */
static int parse_uid(const char *s, uid_t *out)
{
    long v;
    if (cli_parse_int(s, 0, INT_MAX, &v) == 0) {
        *out = (uid_t)v;
        return 0;
    }
    struct passwd *pw = getpwnam(s);
    if (!pw)
        return -EINVAL;
    *out = pw->pw_uid;
    return 0;
}

int cli_parse_mount(int argc, char **argv, struct mount_opts *o)
{
    enum { O_SESSION = 256, O_STORE, O_INTERVAL, O_FLUSH, O_DELETIONS, O_CACHE, O_UID, O_GID,
           O_LEVEL, O_LOGFILE, O_CRED, O_RESYNC, O_RPM, O_UMASK, O_MAXSIZE, O_CKEEP, O_CAGE, O_NOXATTR,
           O_FETCH, O_RESERVE };
    static const struct option longopts[] = {
        {"session", required_argument, NULL, O_SESSION},
        {"store", required_argument, NULL, O_STORE},
        {"sync-interval", required_argument, NULL, O_INTERVAL},
        {"flush-timeout", required_argument, NULL, O_FLUSH},
        {"fetch-timeout", required_argument, NULL, O_FETCH},
        {"full-resync", required_argument, NULL, O_RESYNC},
        {"max-requests-per-minute", required_argument, NULL, O_RPM},
        {"sync-deletions", required_argument, NULL, O_DELETIONS},
        {"cache-dir", required_argument, NULL, O_CACHE},
        {"uid", required_argument, NULL, O_UID},
        {"gid", required_argument, NULL, O_GID},
        {"umask", required_argument, NULL, O_UMASK},
        {"no-xattrs", no_argument, NULL, O_NOXATTR},
        {"foreground", no_argument, NULL, 'f'},
        {"log-level", required_argument, NULL, O_LEVEL},
        {"log-file", required_argument, NULL, O_LOGFILE},
        {"credentials", required_argument, NULL, O_CRED},
        {"cache-max-size", required_argument, NULL, O_MAXSIZE},
        {"cache-reserve", required_argument, NULL, O_RESERVE},
        {"conflicts-keep", required_argument, NULL, O_CKEEP},
        {"conflicts-max-age", required_argument, NULL, O_CAGE},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof(*o));
    o->sync_interval = 15;
    o->flush_timeout = 30;
    o->fetch_timeout = 60;
    o->full_resync = 300;
    o->conflicts_keep = 100;
    o->conflicts_max_age = 30;
    o->cache_reserve = CACHE_RESERVE_DEFAULT;
    o->uid = getuid();
    o->gid = getgid();
    int c, rc = 0;
    long v;
    optind = 1;
    while (!rc && (c = getopt_long(argc, argv, "fo:", longopts, NULL)) != -1) {
        switch (c) {
        case O_SESSION:
            rc = load_session(o, optarg);
            break;
        case O_STORE:
            rc = add_store(o, optarg);
            break;
        case O_INTERVAL:
            if (cli_parse_int(optarg, 5, 86400, &v))
                rc = usage_error("--sync-interval must be a number of seconds from 5 to 86400, "
                                 "got '%s'", optarg);
            else
                o->sync_interval = (int)v;
            break;
        case O_FLUSH:
            if (cli_parse_int(optarg, 1, 3600, &v))
                rc = usage_error("--flush-timeout must be a number of seconds from 1 to 3600, "
                                 "got '%s'", optarg);
            else
                o->flush_timeout = (int)v;
            break;
        case O_FETCH:
            if (cli_parse_int(optarg, 1, 3600, &v))
                rc = usage_error("--fetch-timeout must be a number of seconds from 1 to 3600, "
                                 "got '%s'", optarg);
            else
                o->fetch_timeout = (int)v;
            break;
        case O_RESYNC:
            if (cli_parse_int(optarg, 0, 86400, &v) || (v > 0 && v < 30))
                rc = usage_error("--full-resync must be 0 (only when the version feed cannot be "
                                 "used) or a number of seconds from 30 to 86400, got '%s'",
                                 optarg);
            else
                o->full_resync = (int)v;
            break;
        case O_RPM:
            if (cli_parse_int(optarg, 0, 1000000, &v) || (v > 0 && v < 6))
                rc = usage_error("--max-requests-per-minute must be 0 (no cap) or a number from "
                                 "6 to 1000000, got '%s'", optarg);
            else
                o->max_rpm = (int)v;
            break;
        case O_DELETIONS:
            if (strcmp(optarg, "enabled") && strcmp(optarg, "log_only") &&
                strcmp(optarg, "disabled"))
                rc = usage_error("--sync-deletions must be enabled, log_only or disabled, got "
                                 "'%s'", optarg);
            else if (!(o->deletions = strdup(optarg)))
                rc = usage_error("%s", "out of memory");
            break;
        case O_CACHE:
            free(o->cache_dir);
            /* Absolute: the daemon leaves its working directory, and other
             * commands compare it with theirs. */
            if (!*optarg)
                rc = usage_error("--cache-dir needs a directory%s", "");
            else if (!(o->cache_dir = cli_abs_path(optarg)))
                rc = usage_error("--cache-dir '%s': the working directory cannot be read to "
                                 "make it absolute", optarg);
            break;
        case O_UID:
            if (parse_uid(optarg, &o->uid))
                rc = usage_error("--uid: no such user '%s'", optarg);
            break;
        case O_GID:
            if (cli_parse_int(optarg, 0, INT_MAX, &v))
                rc = usage_error("--gid must be a numeric group id, got '%s'", optarg);
            else
                o->gid = (gid_t)v;
            break;
        case O_UMASK: {
            char *end;
            errno = 0;
            unsigned long m = strtoul(optarg, &end, 8);
            if (errno || end == optarg || *end || optarg[0] == '-' || m > 0777)
                rc = usage_error("--umask must be an octal mode from 000 to 777, got '%s'",
                                 optarg);
            else
                o->umask = (mode_t)m;
            break;
        }
        case O_NOXATTR:
            o->no_xattrs = true;
            break;
        case 'f':
            o->foreground = true;
            break;
        case O_LEVEL: {
            enum log_level lvl;
            if (log_parse_level(optarg, &lvl))
                rc = usage_error("--log-level must be error, warn, info or debug, got '%s'",
                                 optarg);
            else if (!(o->log_level = strdup(optarg)))
                rc = usage_error("%s", "out of memory");
            break;
        }
        case O_LOGFILE:
            free(o->log_file);
            if (!*optarg)
                rc = usage_error("%s", "--log-file wants a file, syslog or -");
            /* Absolute: the daemon in the background runs from "/", and
             * opens the file again at SIGHUP (a rotation). */
            else if (!(o->log_file = strcmp(optarg, "syslog") == 0 || strcmp(optarg, "-") == 0
                                         ? strdup(optarg)
                                         : cli_abs_path(optarg)))
                rc = usage_error("%s", "out of memory, or the working directory cannot be read");
            break;
        case O_CRED:
            free(o->credentials);
            if (!(o->credentials = strdup(optarg)))
                rc = usage_error("%s", "out of memory");
            break;
        case O_MAXSIZE:
            if (cli_parse_size(optarg, &o->cache_max_size))
                rc = usage_error("--cache-max-size must be a size such as 500M, 2G or 0 (no "
                                 "limit), got '%s'", optarg);
            break;
        case O_RESERVE:
            if (cli_parse_size(optarg, &o->cache_reserve) || o->cache_reserve > ((uint64_t)1 << 30))
                rc = usage_error("--cache-reserve must be a size from 0 (none) to 1G such as 16M, "
                                 "got '%s'", optarg);
            break;
        case O_CKEEP:
            if (cli_parse_int(optarg, 0, 1000000, &v))
                rc = usage_error("--conflicts-keep must be a number of records from 0 (no "
                                 "limit) to 1000000, got '%s'", optarg);
            else
                o->conflicts_keep = (int)v;
            break;
        case O_CAGE:
            if (cli_parse_int(optarg, 0, 36500, &v))
                rc = usage_error("--conflicts-max-age must be a number of days from 0 (no "
                                 "limit) to 36500, got '%s'", optarg);
            else
                o->conflicts_max_age = (int)v;
            break;
        case 'o':
            rc = add_fuse_opt(o, optarg);
            break;
        default:
            rc = 2;
            fprintf(stderr, "Try 'memstorefs --help'.\n");
            break;
        }
    }
    if (!rc && optind < argc)
        rc = usage_error("unexpected argument '%s'", argv[optind]);
    if (!rc && o->n_stores == 0)
        rc = usage_error("%s", "no memory store given: use --session FILE or --store "
                               "ID:MOUNT_PATH[:ro]");
    if (!rc && !o->deletions && !(o->deletions = strdup("enabled")))
        rc = usage_error("%s", "out of memory");
    if (!rc && !o->cache_dir && !(o->cache_dir = cli_default_cache_dir())) {
        const char *env = getenv("MEMSTOREFS_CACHE_DIR");
        rc = usage_error("%s", env && *env && env[0] != '/' ? "no cache directory (above)"
                                                             : "out of memory");
    }
    if (rc)
        mount_opts_free(o);
    return rc;
}
