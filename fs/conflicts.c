/* conflicts.c - `memstorefs conflicts`: the local versions that lost to
 * the store (DESIGN.md, Sync: the store wins), read straight from a cache
 * directory, so they can be listed, printed and removed whether or not a
 * daemon is running.
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

static int list(struct cache *c, bool json)
{
    struct cache_conflict *v = NULL;
    size_t n = 0;
    int rc = cache_conflicts(c, NULL, &v, &n);
    if (rc) {
        fprintf(stderr, "memstorefs conflicts: cannot read the conflicts: %s\n", strerror(-rc));
        return 1;
    }
    if (!n && !json)
        printf("no conflicts\n");
    for (size_t i = 0; i < n; i++) {
        char at[64];
        struct tm tm;
        time_t t = (time_t)(v[i].at_ns / 1000000000LL);
        gmtime_r(&t, &tm);
        strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
        const char *kind = cache_conflict_kind_name(v[i].kind);
        if (json) {
            struct jbuf b = {0};
            jbuf_addf(&b, "{\"id\":%lld,\"kind\":\"%s\",\"path\":", (long long)v[i].id, kind);
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
    return 0;
}

static int show(struct cache *c, const char *arg)
{
    char *end;
    errno = 0;
    long long id = strtoll(arg, &end, 10);
    if (errno || end == arg || *end || id <= 0) {
        fprintf(stderr, "memstorefs conflicts: '%s' is not a conflict id\n", arg);
        return 2;
    }
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

static int drop(struct cache *c, const struct drop_what *w)
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
        fprintf(stderr, "memstorefs conflicts: cannot drop the conflict records: %s\n",
                strerror(-rc));
        return 1;
    }
    printf("dropped %llu conflict record%s\n", (unsigned long long)n, n == 1 ? "" : "s");
    return 0;
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
    bool ok = !cmd ? !w.all && !w.older
              : strcmp(cmd, "show") == 0 ? extra == 1 && !w.all && !w.older
              : is_drop ? (extra == 1 && !w.all && !w.older) ||
                              (extra == 0 && (w.all != w.older))
                        : false;
    if (ok && is_drop && extra == 1 && !parse_num(argv[optind + 1], 1, &w.id)) {
        fprintf(stderr, "memstorefs conflicts: '%s' is not a conflict id\n", argv[optind + 1]);
        free(dir);
        return 2;
    }
    if (!ok) {
        free(dir);
        return usage();
    }
    if (!dir)
        dir = cli_default_cache_dir();
    char db[4200];
    struct stat sb;
    snprintf(db, sizeof(db), "%s/cache.db", dir ? dir : "");
    if (!dir || stat(db, &sb) != 0) {
        fprintf(stderr, "memstorefs conflicts: no cache at %s (give the mount's --cache-dir)\n",
                dir ? dir : "?");
        free(dir);
        return 1;
    }
    struct cache *c = NULL;
    int rc = cache_open(dir, &c);
    free(dir);
    if (rc) {
        fprintf(stderr, "memstorefs conflicts: cannot open the cache: %s\n", strerror(-rc));
        return 1;
    }
    int status = is_drop ? drop(c, &w) : cmd ? show(c, argv[optind + 1]) : list(c, json);
    cache_close(&c);
    return status;
}
