/* conflicts.c - `memstorefs conflicts`: the local versions that lost to
 * the store (DESIGN.md, Sync: the store wins), read straight from the
 * cache directories, so they can be listed, printed and removed whether
 * or not a daemon is running.  Without --cache-dir, the caches are those
 * of the mounts of the runtime directory (their lock files name them) and
 * the default one: a mount made with its own --cache-dir is found without
 * it.  Record ids are per cache: an id two of them hold needs --cache-dir.
 *   memstorefs conflicts [--cache-dir DIR] [--json]     list them
 *   memstorefs conflicts show ID [--cache-dir DIR]      print one's bytes
 *   memstorefs conflicts drop ID | --all | --older-than DAYS [--cache-dir DIR]
 *                                                      remove records (their
 *                                                      content is freed)
 * A mount also prunes them by its policy (--conflicts-keep, --conflicts-max-age:
 * cache/gc.c).  `conflicts restore ID` and `conflicts diff ID` go to
 * conflicts_act.c. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache.h"
#include "cli.h"
#include "history.h"
#include "jbuf.h"
#include "runtime.h"

struct caches {
    char **v;
    size_t n;
    dev_t dev[64];
    ino_t ino[64];
};

/* Adds dir when it holds a cache not in c yet (the same cache.db by
 * another path counts once). */
static int add_cache(struct caches *c, const char *dir)
{
    char db[4200];
    struct stat sb;
    snprintf(db, sizeof(db), "%s/cache.db", dir);
    if (!dir[0] || stat(db, &sb) != 0 || !S_ISREG(sb.st_mode) || c->n >= 64)
        return 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->dev[i] == sb.st_dev && c->ino[i] == sb.st_ino)
            return 0;
    char **v = realloc(c->v, (c->n + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    c->v = v;
    if (!(v[c->n] = strdup(dir)))
        return -ENOMEM;
    c->dev[c->n] = sb.st_dev;
    c->ino[c->n++] = sb.st_ino;
    return 0;
}

static int add_mount_cache(void *arg, const char *file, const struct rt_lockinfo *info,
                           bool alive)
{
    (void)file;
    (void)alive;
    return add_cache(arg, info->cache_dir);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void conflict_caches_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int conflict_caches(const char *dir, char ***v, size_t *n)
{
    struct caches c = {0};
    int rc = 0;
    if (dir) {
        rc = add_cache(&c, dir);
    } else {
        rt_each_lock(add_mount_cache, &c);
        char *def = cli_default_cache_dir();
        rc = def ? add_cache(&c, def) : 0;
        free(def);
    }
    if (!rc && !c.n)
        rc = -ENOENT;
    if (!rc && c.n > 1) /* the lock files come in no order: listed by path */
        qsort(c.v, c.n, sizeof(*c.v), cmp_str);
    if (rc) {
        conflict_caches_free(c.v, c.n);
        c.v = NULL;
        c.n = 0;
    }
    *v = c.v;
    *n = c.n;
    return rc;
}

void conflict_no_cache(const char *dir)
{
    char *def = dir ? NULL : cli_default_cache_dir();
    if (dir)
        fprintf(stderr, "memstorefs conflicts: no cache at %s (give the mount's --cache-dir)\n",
                dir);
    else
        fprintf(stderr, "memstorefs conflicts: no cache at %s, and no mount of the runtime "
                        "directory names another (give the mount's --cache-dir)\n",
                def ? def : "?");
    free(def);
}

static int open_cache(const char *dir, struct cache **c)
{
    int rc = cache_open(dir, c);
    if (rc)
        fprintf(stderr, "memstorefs conflicts: cannot open the cache in %s: %s\n", dir,
                strerror(-rc));
    return rc;
}

int conflict_holder(char **v, size_t n, long long id, struct cache **out, const char **dir)
{
    *out = NULL;
    *dir = NULL;
    char several[2048] = "";
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        struct cache *c = NULL;
        if (open_cache(v[i], &c))
            return -EIO;
        char store[CACHE_ID_MAX];
        struct cache_conflict k = {0};
        int rc = cache_conflict_get(c, id, store, &k);
        free(k.path);
        if (rc == -ENOENT) {
            cache_close(&c);
            continue;
        }
        if (rc) {
            fprintf(stderr, "memstorefs conflicts: cannot read the conflicts in %s: %s\n", v[i],
                    strerror(-rc));
            cache_close(&c);
            cache_close(out);
            return rc;
        }
        size_t h = strlen(several);
        snprintf(several + h, sizeof(several) - h, "%s%s", h ? ", " : "", v[i]);
        if (found++) {
            cache_close(&c);
            continue;
        }
        *out = c;
        *dir = v[i];
    }
    if (found > 1) {
        fprintf(stderr, "memstorefs conflicts: conflict %lld is in several caches (%s); give "
                        "--cache-dir to say which\n", id, several);
        cache_close(out);
        *dir = NULL;
        return -EEXIST;
    }
    return found ? 0 : -ENOENT;
}

/* The records of one cache; with a header (several caches) its
 * directory first.  The number listed, or -1. */
static long list(struct cache *c, const char *dir, bool json, bool header)
{
    struct cache_conflict *v = NULL;
    size_t n = 0;
    int rc = cache_conflicts(c, NULL, &v, &n);
    if (rc) {
        fprintf(stderr, "memstorefs conflicts: cannot read the conflicts in %s: %s\n", dir,
                strerror(-rc));
        return -1;
    }
    if (n && header && !json)
        printf("in %s:\n", dir);
    for (size_t i = 0; i < n; i++) {
        char at[64];
        struct tm tm;
        time_t t = (time_t)(v[i].at_ns / 1000000000LL);
        gmtime_r(&t, &tm);
        strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
        const char *kind = cache_conflict_kind_name(v[i].kind);
        if (json) {
            struct jbuf b = {0};
            jbuf_addf(&b, "{\"id\":%lld,\"kind\":\"%s\",\"cache_dir\":", (long long)v[i].id,
                      kind);
            jbuf_add_json_cstr(&b, dir);
            jbuf_adds(&b, ",\"path\":");
            jbuf_add_json_cstr(&b, v[i].path);
            jbuf_adds(&b, ",\"memory_id\":");
            jbuf_add_json_cstr(&b, v[i].memory_id);
            jbuf_adds(&b, ",\"local_sha256\":");
            jbuf_add_json_cstr(&b, v[i].local_sha);
            jbuf_adds(&b, ",\"remote_sha256\":");
            jbuf_add_json_cstr(&b, v[i].remote_sha);
            jbuf_adds(&b, ",\"at\":");
            jbuf_add_json_cstr(&b, at);
            jbuf_adds(&b, "}\n");
            if (!b.oom)
                fputs(b.p, stdout);
            jbuf_release(&b);
        } else
            printf("%-6lld %s  %s  %s%s\n", (long long)v[i].id, at, v[i].path,
                   v[i].memory_id[0] ? v[i].memory_id : "(new file)",
                   v[i].kind == CACHE_CONFLICT_UNSAVED ? "  (unsaved at unmount)"
                   : v[i].kind == CACHE_CONFLICT_CUT   ? "  (cut short at the size limit)"
                                                       : "");
    }
    cache_conflicts_free(v, n);
    return (long)n;
}

static int show(struct cache *c, long long id)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = cache_conflict_content(c, id, &buf, &len);
    if (rc) {
        fprintf(stderr, "memstorefs conflicts: no conflict %lld%s\n", id,
                rc == -ENOENT ? "" : " could be read");
        return 1;
    }
    fwrite(buf, 1, len, stdout);
    free(buf);
    return 0;
}

/* What `drop` removes: one id, every record, or those older than days. */
struct drop_what {
    long long id;      /* > 0: that record */
    bool all;
    long long days;    /* >= 0 with older: records older than that */
    bool older;
};

/* In cache c (of dir, named in the report when several are read). */
static int drop(struct cache *c, const char *dir, bool named, const struct drop_what *w)
{
    uint64_t n = 0;
    int64_t before = INT64_MAX;
    if (w->older) {
        /* Nanoseconds since 1970 in 64 bits span 292 years: a longer age
         * reaches before any record. */
        long long days = w->days < 100000 ? w->days : 100000;
        before = (int64_t)time(NULL) * 1000000000LL - (int64_t)days * 86400LL * 1000000000LL;
    }
    int rc = cache_conflicts_drop(c, w->id > 0 ? w->id : 0, before, &n);
    if (rc == -ENOENT) {
        fprintf(stderr, "memstorefs conflicts: no conflict %lld\n", w->id);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "memstorefs conflicts: cannot drop the conflict records in %s: %s\n",
                dir, strerror(-rc));
        return 1;
    }
    printf("dropped %llu conflict record%s%s%s\n", (unsigned long long)n, n == 1 ? "" : "s",
           named ? " in " : "", named ? dir : "");
    return 0;
}

/* show ID, drop ID: in the one cache that holds the record. */
static int on_record(char **v, size_t n, const char *cmd, const struct drop_what *w)
{
    struct cache *c = NULL;
    const char *dir = NULL;
    int rc = conflict_holder(v, n, w->id, &c, &dir);
    if (rc == -ENOENT)
        fprintf(stderr, "memstorefs conflicts: no conflict %lld\n", w->id);
    if (rc)
        return 1;
    int status = strcmp(cmd, "show") == 0 ? show(c, w->id) : drop(c, dir, false, w);
    cache_close(&c);
    return status;
}

/* The list, or drop --all / --older-than: every cache, in turn. */
static int on_each(char **v, size_t n, bool is_drop, bool json, const struct drop_what *w)
{
    int status = 0;
    long listed = 0;
    for (size_t i = 0; i < n; i++) {
        struct cache *c = NULL;
        if (open_cache(v[i], &c)) {
            status = 1;
            continue;
        }
        if (is_drop) {
            if (drop(c, v[i], n > 1, w))
                status = 1;
        } else {
            long k = list(c, v[i], json, n > 1);
            if (k < 0)
                status = 1;
            else
                listed += k;
        }
        cache_close(&c);
    }
    if (!is_drop && !json && !listed && !status)
        printf("no conflicts\n");
    return status;
}

static int usage(void)
{
    fprintf(stderr, "usage: memstorefs conflicts [show ID | restore ID | diff ID | drop ID | "
                    "drop --all | drop --older-than DAYS] [--cache-dir DIR] [--json]\n");
    return 2;
}

/* A positive number (an id) or a number of days (min 0). */
static bool parse_num(const char *arg, long long min, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (errno || end == arg || *end || v < min)
        return false;
    *out = v;
    return true;
}

int conflicts_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"cache-dir", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"all", no_argument, NULL, 'a'},
        {"older-than", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0},
    };
    char *dir = NULL;
    bool json = false;
    struct drop_what w = {0};
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (ch == 'c') {
            free(dir);
            if (!*optarg) {
                fprintf(stderr, "memstorefs conflicts: --cache-dir needs a directory\n");
                return 2;
            }
            if (!(dir = cli_abs_path(optarg))) { /* a daemon compares it with its own */
                fprintf(stderr, "memstorefs conflicts: --cache-dir '%s': %s\n", optarg,
                        strerror(errno));
                return 2;
            }
        } else if (ch == 'j') {
            json = true;
        } else if (ch == 'a') {
            w.all = true;
        } else if (ch == 'o' && parse_num(optarg, 0, &w.days)) {
            w.older = true;
        } else {
            if (ch == 'o')
                fprintf(stderr, "memstorefs conflicts: --older-than wants a number of days, "
                                "got '%s'\n", optarg);
            free(dir);
            return usage();
        }
    }
    const char *cmd = optind < argc ? argv[optind] : NULL;
    if (cmd && (strcmp(cmd, "restore") == 0 || strcmp(cmd, "diff") == 0) &&
        optind + 2 == argc && !json && !w.all && !w.older) {
        /* Acting on a record: conflicts_act.c. */
        int status = conflicts_act(cmd, argv[optind + 1], dir);
        free(dir);
        return status;
    }
    bool is_drop = cmd && strcmp(cmd, "drop") == 0;
    int extra = argc - optind - 1; /* arguments after the command */
    bool is_show = cmd && strcmp(cmd, "show") == 0;
    bool ok = !cmd ? !w.all && !w.older
              : is_show ? extra == 1 && !w.all && !w.older
              : is_drop ? (extra == 1 && !w.all && !w.older) ||
                              (extra == 0 && (w.all != w.older))
                        : false;
    if (ok && (is_drop || is_show) && extra == 1 && !parse_num(argv[optind + 1], 1, &w.id)) {
        fprintf(stderr, "memstorefs conflicts: '%s' is not a conflict id\n", argv[optind + 1]);
        free(dir);
        return 2;
    }
    if (!ok) {
        free(dir);
        return usage();
    }
    char **v = NULL;
    size_t n = 0;
    int rc = conflict_caches(dir, &v, &n);
    if (rc == -ENOENT)
        conflict_no_cache(dir);
    else if (rc)
        fprintf(stderr, "memstorefs conflicts: %s\n", strerror(-rc));
    free(dir);
    if (rc)
        return 1;
    int status = extra == 1 ? on_record(v, n, cmd, &w) : on_each(v, n, is_drop, json, &w);
    conflict_caches_free(v, n);
    return status;
}
