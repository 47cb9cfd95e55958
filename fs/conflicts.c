/* conflicts.c - `memstorefs conflicts`: the local versions that lost to
 * the store (DESIGN.md, Sync: the store wins), read straight from a cache
 * directory, so they can be listed and printed whether or not a daemon is
 * running.
 *   memstorefs conflicts [--cache-dir DIR] [--json]     list them
 *   memstorefs conflicts show ID [--cache-dir DIR]      print one's bytes
 * and hands `conflicts restore ID` and `conflicts diff ID` to
 * conflicts_act.c. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache.h"
#include "cli.h"
#include "history.h"

static const char usage[] =
    "usage: memstorefs conflicts [show ID | restore ID | diff ID] [--cache-dir DIR] [--json]\n";

static void json_str(const char *s)
{
    putchar('"');
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

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
        const char *kind = v[i].kind == CACHE_CONFLICT_UNSAVED ? "unsaved_at_unmount"
                                                                : "store_won";
        if (json) {
            printf("{\"id\":%lld,\"kind\":\"%s\",\"path\":", (long long)v[i].id, kind);
            json_str(v[i].path);
            printf(",\"memory_id\":\"%s\",\"local_sha256\":\"%s\",\"remote_sha256\":\"%s\","
                   "\"at\":\"%s\"}\n", v[i].memory_id, v[i].local_sha, v[i].remote_sha, at);
        } else
            printf("%-6lld %s  %s  %s%s\n", (long long)v[i].id, at, v[i].path,
                   v[i].memory_id[0] ? v[i].memory_id : "(new file)",
                   v[i].kind == CACHE_CONFLICT_UNSAVED ? "  (unsaved at unmount)" : "");
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

int conflicts_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"cache-dir", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    char *dir = NULL;
    bool json = false;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (ch == 'c') {
            free(dir);
            dir = strdup(optarg);
        } else if (ch == 'j') {
            json = true;
        } else {
            fputs(usage, stderr);
            free(dir);
            return 2;
        }
    }
    const char *cmd = optind < argc ? argv[optind] : NULL;
    if (cmd && (strcmp(cmd, "restore") == 0 || strcmp(cmd, "diff") == 0) &&
        optind + 2 == argc && !json) {
        /* Acting on a record: conflicts_act.c. */
        int status = conflicts_act(cmd, argv[optind + 1], dir);
        free(dir);
        return status;
    }
    if ((cmd && strcmp(cmd, "show") != 0) || (cmd && optind + 2 != argc)) {
        fputs(usage, stderr);
        free(dir);
        return 2;
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
    int status = cmd ? show(c, argv[optind + 1]) : list(c, json);
    cache_close(&c);
    return status;
}
