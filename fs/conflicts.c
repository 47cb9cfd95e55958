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

static int drop(struct cache *c, const char *dir, const struct drop_what *w)
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
    printf("dropped %llu conflict record%s\n", (unsigned long long)n, n == 1 ? "" : "s");
    return 0;
}

/* show ID, drop ID: in the one cache that holds the record. */
static int on_record(char **v, size_t n, bool is_drop, const struct drop_what *w)
{
    struct cache *c = NULL;
    const char *dir = NULL;
    int rc = conflict_holder(v, n, w->id, is_drop, &c, &dir);
    if (rc == -ENOENT)
        fprintf(stderr, "memstorefs conflicts: no conflict %lld\n", w->id);
    if (rc)
        return 1;
    int status = is_drop ? drop(c, dir, w) : show(c, w->id);
    cache_close(&c);
    return status;
}

/* drop --all / --older-than: in one cache only, the one given or the
 * only one read that holds records (a user may not know of the others:
 * several holding records is refused).  One that cannot be read is
 * refused too: it may hold records. */
static int drop_many(char **v, size_t n, const struct drop_what *w)
{
    size_t holders = 0, at = 0;
    char names[4096] = "";
    struct cache *keep = NULL; /* v[at]'s: the first cache, then the first holder */
    for (size_t i = 0; i < n; i++) {
        struct cache *c = NULL;
        struct cache_conflict *k = NULL;
        size_t nk = 0;
        int rc = conflict_open(v[i], &c);
        if (!rc && (rc = cache_conflicts(c, NULL, &k, &nk)))
            fprintf(stderr, "memstorefs conflicts: cannot read the conflicts in %s: %s\n", v[i],
                    strerror(-rc));
        cache_conflicts_free(k, nk);
        if (rc) {
            cache_close(&c);
            cache_close(&keep);
            return 1;
        }
        if (nk) {
            size_t h = strlen(names);
            snprintf(names + h, sizeof(names) - h, "%s%s", h ? ", " : "", v[i]);
        }
        if (nk ? ++holders == 1 : i == 0) {
            cache_close(&keep);
            keep = c;
            c = NULL;
            at = i;
        }
        cache_close(&c);
    }
    int status = 1;
    if (holders > 1)
        fprintf(stderr, "memstorefs conflicts: %zu caches hold conflict records (%s); give "
                        "--cache-dir to say whose to drop\n", holders, names);
    else
        status = drop(keep, v[at], w);
    cache_close(&keep);
    return status;
}

/* The list: every cache, in turn; one that cannot be read is said and
 * left out (exit 1). */
static int list_all(char **v, size_t n, bool json)
{
    int status = 0;
    long listed = 0;
    for (size_t i = 0; i < n; i++) {
        struct cache *c = NULL;
        long k = conflict_open(v[i], &c) ? -1 : list(c, v[i], json, n > 1);
        cache_close(&c);
        if (k < 0)
            status = 1;
        else
            listed += k;
    }
    if (!json && !listed && !status)
        printf("no conflicts\n");
    return status;
}

static int usage(void)
{
    fprintf(stderr, "usage: memstorefs conflicts [show ID | restore ID | diff ID | drop ID | "
                    "drop --all | drop --older-than DAYS] [--cache-dir DIR] [--json]\n");
    return 2;
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
        } else if (ch == 'o' && conflict_parse_id(optarg, 0, &w.days)) {
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
    if (ok && (is_drop || is_show) && extra == 1 && !conflict_parse_id(argv[optind + 1], 1, &w.id)) {
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
    free(dir);
    if (rc)
        return 1;
    int status = extra == 1 ? on_record(v, n, is_drop, &w)
                 : is_drop  ? drop_many(v, n, &w)
                            : list_all(v, n, json);
    conflict_caches_free(v, n);
    return status;
}
