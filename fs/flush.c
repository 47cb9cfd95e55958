/* flush.c - `memstorefs flush`: pushes what a cache directory holds that
 * never reached its store, typically after a daemon was killed (kill -9,
 * a crash, a power loss) and no later mount of the store followed.  Each
 * store is synced exactly as a mounted one would be (sync/cycle.c), under
 * the store's host lock, so it never races a daemon that has the store
 * mounted; such a store is skipped (its daemon pushes its changes), or,
 * when that daemon runs with another cache directory (its lock file says
 * which), named as not pushed, and the flush fails.
 *   memstorefs flush [--cache-dir DIR] [--store ID]... [--sync-deletions M] */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "cli.h"
#include "engine.h"
#include "http.h"
#include "runtime.h"
#include "session.h"

static bool wanted(char **ids, size_t n, const char *id)
{
    if (!n)
        return true;
    for (size_t i = 0; i < n; i++)
        if (strcmp(ids[i], id) == 0)
            return true;
    return false;
}

/* Why deletions were left on the server: the mode they were made under
 * (recorded) or this flush's own. */
static const char *kept_why(enum syncer_deletions del, bool all_recorded)
{
    if (all_recorded)
        return "the files were removed under --sync-deletions log_only or disabled, so their "
               "memories are never deleted";
    if (del == SYNCER_DEL_LOG_ONLY)
        return "this flush runs with --sync-deletions log_only (logged only; run it with "
               "enabled to delete them)";
    return "this flush runs with --sync-deletions disabled (run it with enabled to delete them)";
}

/* Whether two paths name one directory (a relative path, a link on the
 * way, a trailing slash: the same cache). */
static bool same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0)
        return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* rt_keep_fn: a record a daemon that died holding the store's lock left
 * (decided under the lock, so that no daemon dying meanwhile has its
 * record taken over): status and unmount find the dead mount by it. */
static bool keep_dead_mount(const struct rt_lockinfo *prev, void *arg)
{
    (void)arg;
    return prev->pid > 0 && prev->mount_path[0] == '/';
}

static int flush_store(struct cache *c, struct http_client *h, const char *dir,
                       const struct cache_store *cs, enum syncer_deletions del)
{
    struct cache_store_stats st;
    /* Deletions made under log_only or disabled are never sent, nor any
     * when this flush runs under one of those modes. */
    if (cache_store_stats(c, cs->id, &st) != 0) {
        fprintf(stderr, "memstorefs flush: %s: cannot read the cache\n", cs->id);
        return -EIO;
    }
    uint64_t sendable = del == SYNCER_DEL_ENABLED ? st.tombstones - st.kept_deletions : 0;
    if (!st.dirty && !sendable) {
        printf("%s: nothing to push\n", cs->id);
        if (st.tombstones)
            printf("%s: not deleted %llu: %s\n", cs->id, (unsigned long long)st.tombstones,
                   kept_why(del, st.kept_deletions == st.tombstones));
        return 0;
    }
    struct rt_lockinfo info = {0}, other = {0};
    info.pid = getpid();
    snprintf(info.store_id, sizeof(info.store_id), "%s", cs->id);
    snprintf(info.mount_path, sizeof(info.mount_path), "(memstorefs flush)");
    int lock_fd = -1;
    char *lock_file = NULL;
    int rc = rt_lock_store(&info, &lock_fd, &lock_file, &other, keep_dead_mount, NULL);
    if (rc == -ENOTCONN) {
        printf("%s: its mount at %s died with its daemon; run 'memstorefs unmount %s' first\n",
               cs->id, other.mount_path, other.mount_path);
        return -EBUSY;
    }
    if (rc == -EBUSY && other.cache_dir[0] && !same_dir(dir, other.cache_dir)) {
        /* That daemon pushes from its own cache, never from this one. */
        unsigned long long n = st.dirty + sendable;
        fprintf(stderr, "memstorefs flush: %s: mounted at %s by memstorefs pid %d with another "
                "cache directory (%s); the %llu change%s this cache holds %s not pushed: "
                "unmount it, then run this flush again\n", cs->id, other.mount_path,
                (int)other.pid, other.cache_dir, n, n == 1 ? "" : "s", n == 1 ? "is" : "are");
        return -EBUSY;
    }
    if (rc == -EBUSY) {
        printf("%s: mounted at %s by memstorefs pid %d; that daemon pushes its changes\n",
               cs->id, other.mount_path, (int)other.pid);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "memstorefs flush: cannot lock memory store %s: %s\n", cs->id,
                rt_error()[0] ? rt_error() : strerror(-rc));
        return rc;
    }
    struct syncer_opts so = {.interval_s = 3600, .deletions = del};
    struct syncer *sy = syncer_new(c, h, &so);
    int idx = sy ? syncer_add(sy, cs->id, cs->read_only, NULL) : -ENOMEM;
    char why[512] = "";
    struct syncer_report rep = {0};
    /* Out of room to record what it sends: with the reserve's blocks (a
     * flush is the last sync of what it pushes), freed before the sync or,
     * found out of room only by it, for a second one (a record it cannot
     * write does not fail a sync: sync/push.c). */
    uint64_t freed = 0;
    if (idx >= 0 && cache_lacks_room(c))
        (void)cache_reserve_release(c, &freed);
    rc = idx < 0 ? idx : syncer_sync(sy, idx, why, sizeof(why), &rep);
    if (idx >= 0 && !freed && cache_lacks_room(c) && cache_reserve_release(c, &freed) == 0 &&
        freed) {
        struct syncer_report first = rep;
        rc = syncer_sync(sy, idx, why, sizeof(why), &rep);
        rep.pushed += first.pushed; /* what the first sync did counts too */
        rep.deleted += first.deleted;
        rep.conflicts += first.conflicts;
    }
    if (rc)
        fprintf(stderr, "memstorefs flush: %s: %s\n", cs->id, why[0] ? why : strerror(-rc));
    else
        printf("%s: pushed %u, deleted %u, conflicts %u, refused %u, still pending %u\n", cs->id,
               rep.pushed, rep.deleted, rep.conflicts, rep.refused, rep.pending);
    if (!rc && rep.kept_deletions) {
        struct cache_store_stats after;
        bool all_recorded = cache_store_stats(c, cs->id, &after) == 0 &&
                            after.kept_deletions == after.tombstones;
        printf("%s: not deleted %u: %s\n", cs->id, rep.kept_deletions, kept_why(del, all_recorded));
    }
    if (!rc && rep.unsaved)
        printf("%s: not pushed %u: new files no writer ever closed (their content was never "
               "saved)\n", cs->id, rep.unsaved);
    syncer_free(&sy);
    rt_unlock_store(lock_fd, lock_file);
    free(lock_file);
    return rc ? rc : (rep.pending ? -EAGAIN : 0);
}

int flush_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"cache-dir", required_argument, NULL, 'c'},
        {"store", required_argument, NULL, 's'},
        {"sync-deletions", required_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    char *dir = NULL, **ids = NULL;
    size_t n_ids = 0;
    enum syncer_deletions del = SYNCER_DEL_ENABLED;
    int ch, status = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (ch == 'c') {
            free(dir);
            dir = strdup(optarg);
        } else if (ch == 's') {
            char **v = realloc(ids, (n_ids + 1) * sizeof(*v));
            if (v) {
                ids = v;
                ids[n_ids++] = optarg;
            }
        } else if (ch == 'd' && strcmp(optarg, "enabled") == 0) {
            del = SYNCER_DEL_ENABLED;
        } else if (ch == 'd' && strcmp(optarg, "log_only") == 0) {
            del = SYNCER_DEL_LOG_ONLY;
        } else if (ch == 'd' && strcmp(optarg, "disabled") == 0) {
            del = SYNCER_DEL_DISABLED;
        } else {
            fprintf(stderr, "usage: memstorefs flush [--cache-dir DIR] [--store ID]... "
                            "[--sync-deletions enabled|log_only|disabled]\n");
            status = 2;
            goto out;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "memstorefs flush: unexpected argument '%s'\n", argv[optind]);
        status = 2;
        goto out;
    }
    if (!dir)
        dir = cli_default_cache_dir();
    struct mfs_cred cred = {0};
    char why[512] = "";
    if (cred_from_env(&cred, why, sizeof(why)) != 0) {
        fprintf(stderr, "memstorefs flush: %s\n", why);
        status = 1;
        goto out;
    }
    char db[4200];
    snprintf(db, sizeof(db), "%s/cache.db", dir ? dir : "");
    struct cache *c = NULL;
    if (!dir || access(db, R_OK) != 0) {
        fprintf(stderr, "memstorefs flush: no cache at %s (give the mount's --cache-dir)\n",
                dir ? dir : "?");
        cred_clear(&cred);
        status = 1;
        goto out;
    }
    int orc = cache_open(dir, &c);
    uint64_t freed = 0;
    /* A full disk: the journal a stopped daemon left needs room to be
     * applied, which the cache's reserve gives (cache/reserve.c). */
    if ((orc == -ENOSPC || orc == -EDQUOT) && cache_reserve_free(dir, &freed) == 0 && freed)
        orc = cache_open(dir, &c);
    if (orc) {
        fprintf(stderr, "memstorefs flush: cannot open the cache in %s: %s\n", dir,
                strerror(-orc));
        cred_clear(&cred);
        status = 1;
        goto out;
    }
    struct http_opts ho = {.base_url = cred.base_url, .api_key = cred.api_key,
                           .bearer = cred.bearer, .max_retries = -1};
    struct http_client *h = http_client_new(&ho);
    int herr = h ? 0 : errno;
    struct cache_store *v = NULL;
    size_t n = 0;
    int crc = h ? cache_stores(c, &v, &n) : 0;
    if (!h || crc) {
        /* The reason of the step that failed, never a stale errno. */
        fprintf(stderr, "memstorefs flush: cannot start: %s%s\n",
                h ? "cannot read the cache: " : "cannot use the API endpoint: ",
                strerror(h ? -crc : herr));
        status = 1;
    }
    for (size_t k = 0; h && k < n_ids; k++) {
        bool known = false;
        for (size_t i = 0; i < n; i++)
            known = known || strcmp(v[i].id, ids[k]) == 0;
        if (!known) {
            fprintf(stderr, "memstorefs flush: the cache at %s holds no memory store %s\n", dir,
                    ids[k]);
            status = 1;
        }
    }
    for (size_t i = 0; h && i < n; i++)
        if (wanted(ids, n_ids, v[i].id) && flush_store(c, h, dir, &v[i], del) != 0)
            status = 1;
    free(v);
    http_client_free(&h);
    cache_close(&c);
    cred_clear(&cred);
out:
    free(dir);
    free(ids);
    return status;
}
