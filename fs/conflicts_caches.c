/* conflicts_caches.c - which cache directories the conflicts commands
 * read, and which of them holds a record.  With --cache-dir: that one.
 * Without: the cache of each mount of the runtime directory (live or
 * dead: its lock file names it) and the default one, each that holds a
 * cache, once (the same cache.db by two paths counts once), in the order
 * of their paths.  Record ids are numbers of one cache: an id is acted on
 * in the one cache that holds it, and two holding it is an error.  A
 * cache named only by a lock file that cannot be opened is said and left
 * out; one given with --cache-dir is an error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache.h"
#include "cli.h"
#include "history.h"
#include "runtime.h"

struct caches {
    char **v;
    struct stat *st; /* of each one's cache.db */
    size_t n;
};

/* Adds dir when it holds a cache not in c yet. */
static int add_cache(struct caches *c, const char *dir)
{
    char db[4200];
    struct stat sb;
    if (!dir[0] || (size_t)snprintf(db, sizeof(db), "%s/cache.db", dir) >= sizeof(db) ||
        stat(db, &sb) != 0 || !S_ISREG(sb.st_mode))
        return 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->st[i].st_dev == sb.st_dev && c->st[i].st_ino == sb.st_ino)
            return 0;
    char **v = realloc(c->v, (c->n + 1) * sizeof(*v));
    if (v)
        c->v = v;
    struct stat *st = v ? realloc(c->st, (c->n + 1) * sizeof(*st)) : NULL;
    if (st)
        c->st = st;
    if (!v || !st || !(v[c->n] = strdup(dir)))
        return -ENOMEM;
    st[c->n++] = sb;
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

/* The message when there is no cache: at dir (--cache-dir), else at def
 * (the default one) nor at any mount's. */
static void conflict_no_cache(const char *dir, const char *def)
{
    if (dir)
        fprintf(stderr, "memstorefs conflicts: no cache at %s (give the mount's --cache-dir)\n",
                dir);
    else
        fprintf(stderr, "memstorefs conflicts: no cache at %s, and no mount of the runtime "
                        "directory names another (give the mount's --cache-dir)\n",
                def ? def : "?");
}

int conflict_caches(const char *dir, char ***v, size_t *n)
{
    struct caches c = {0};
    char *def = NULL;
    int rc;
    if (dir) {
        rc = add_cache(&c, dir);
    } else {
        rc = rt_each_lock(add_mount_cache, &c);
        if (rc && rc != -ENOENT && rc != -ENOMEM) /* -ENOENT: no runtime directory, no mount */
            fprintf(stderr, "memstorefs conflicts: the mounts' caches are left out: %s\n",
                    rt_error()[0] ? rt_error() : strerror(-rc));
        if (rc != -ENOMEM)
            rc = 0;
        if (!rc && (def = cli_default_cache_dir()))
            rc = add_cache(&c, def);
    }
    if (!rc && !c.n)
        rc = -ENOENT;
    if (rc == -ENOENT)
        conflict_no_cache(dir, def);
    else if (rc)
        fprintf(stderr, "memstorefs conflicts: cannot find the caches: %s\n", strerror(-rc));
    free(def);
    free(c.st);
    if (rc) {
        conflict_caches_free(c.v, c.n);
        c.v = NULL;
        c.n = 0;
    } else if (c.n > 1) {
        qsort(c.v, c.n, sizeof(*c.v), cmp_str);
    }
    *v = c.v;
    *n = c.n;
    return rc;
}

int conflict_open(const char *dir, struct cache **c)
{
    int rc = cache_open_reader(dir, c);
    if (rc)
        fprintf(stderr, "memstorefs conflicts: cannot open the cache in %s: %s\n", dir,
                strerror(-rc));
    return rc;
}

int conflict_holder(char **v, size_t n, long long id, bool sure, struct cache **out,
                    const char **dir)
{
    const char *unused;
    if (!dir)
        dir = &unused;
    *out = NULL;
    *dir = NULL;
    char several[2048] = "", unread[2048] = "";
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        struct cache *c = NULL;
        char store[CACHE_ID_MAX];
        struct cache_conflict k = {0};
        /* An open that fails is a cache not read, whatever its errno. */
        int rc = conflict_open(v[i], &c) ? -EIO : cache_conflict_get(c, id, store, &k);
        free(k.path);
        if (rc && rc != -ENOENT && c)
            fprintf(stderr, "memstorefs conflicts: cannot read the conflicts in %s: %s\n", v[i],
                    strerror(-rc));
        char *list = rc == 0 ? several : rc == -ENOENT ? NULL : unread;
        if (list) {
            size_t h = strlen(list);
            snprintf(list + h, 2048 - h, "%s%s", h ? ", " : "", v[i]);
        }
        if (rc == 0 && !found++) {
            *out = c;
            *dir = v[i];
            continue;
        }
        cache_close(&c);
    }
    if (found > 1) {
        fprintf(stderr, "memstorefs conflicts: conflict %lld is in several caches (%s); give "
                        "--cache-dir to say which\n", id, several);
        cache_close(out);
        *dir = NULL;
        return -EEXIST;
    }
    if (unread[0] && (!found || sure)) {
        /* One cache only (--cache-dir): what could not be read is said. */
        if (n > 1)
            fprintf(stderr, "memstorefs conflicts: conflict %lld %s, and %s could not be read; "
                            "give --cache-dir to say which cache\n", id,
                    found ? "is in one cache" : "is not in the caches read", unread);
        cache_close(out);
        *dir = NULL;
        return -EIO;
    }
    return found ? 0 : -ENOENT;
}

bool conflict_parse_id(const char *arg, long long min, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (errno || end == arg || *end || v < min)
        return false;
    *out = v;
    return true;
}
