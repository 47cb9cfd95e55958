/* status.c - what `memstorefs status` shows of each mounted store: counts
 * from the cache, the last sync's time, result and report, the files the
 * server refused (with its reason), how much content is cached (the
 * prefetch's progress: cached / total) and the conflicts the store won (with
 * how to read the lost local version back).  Human text, or one JSON
 * object per store per line (--json).  Runs on the daemon's main thread;
 * reads the cache through its API. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "daemon.h"
#include "engine.h"
#include "http.h"

/* The client's request budget (shared by every store): when a 429's pause
 * ends (wall clock, 0: no pause), calls held now, the cap. */
struct budget {
    int64_t until_s;
    int waiting, per_minute;
};

static void read_budget(struct daemon *d, struct budget *b)
{
    int64_t until_ms = 0;
    memset(b, 0, sizeof(*b));
    if (!d->http)
        return;
    http_client_budget(d->http, &until_ms, &b->waiting, &b->per_minute);
    if (until_ms)
        b->until_s = (int64_t)time(NULL) + (until_ms - http_now_ms() + 999) / 1000;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void fmt_time(int64_t secs, char *buf, size_t len)
{
    if (!secs) {
        snprintf(buf, len, "never");
        return;
    }
    struct tm tm;
    time_t t = (time_t)secs;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void one_store(struct daemon *d, struct fs_store *s, FILE *f, bool json)
{
    struct cache_store_stats st;
    if (cache_store_stats(d->cache, s->id, &st) != 0)
        memset(&st, 0, sizeof(st));
    int64_t when = 0;
    char result[512] = "", when_s[64];
    struct syncer_report rep;
    syncer_last(d->sync, s->sync_idx, &when, result, sizeof(result));
    syncer_last_report(d->sync, s->sync_idx, &rep);
    fmt_time(when, when_s, sizeof(when_s));
    struct cache_refused *rf = NULL;
    size_t n_rf = 0;
    struct cache_conflict *cf = NULL;
    size_t n_cf = 0;
    cache_refused_files(d->cache, s->id, &rf, &n_rf);
    cache_conflicts(d->cache, s->id, &cf, &n_cf);
    struct budget b;
    read_budget(d, &b);
    char until_s[64];
    fmt_time(b.until_s, until_s, sizeof(until_s));

    if (json) {
        fprintf(f, "{\"memory_store_id\":");
        json_str(f, s->id);
        fprintf(f, ",\"mount_path\":");
        json_str(f, s->mount_path);
        fprintf(f, ",\"access\":\"%s\",\"pid\":%d,\"cache_dir\":",
                s->read_only ? "read_only" : "read_write", (int)getpid());
        json_str(f, d->cache_dir);
        fprintf(f, ",\"memories\":%llu,\"directories\":%llu,\"bytes\":%llu,\"dirty\":%llu,"
                   "\"pending_deletes\":%llu,\"kept_deletes\":%llu,\"unsaved\":%llu,"
                   "\"refused\":%llu,\"conflicts\":%llu,\"content_missing\":%llu,"
                   "\"content_cached\":%llu,\"content_total\":%llu,\"last_sync\":",
                (unsigned long long)st.files, (unsigned long long)st.dirs,
                (unsigned long long)st.bytes, (unsigned long long)st.dirty,
                (unsigned long long)(st.tombstones - st.kept_deletions),
                (unsigned long long)st.kept_deletions, (unsigned long long)st.unsaved,
                (unsigned long long)st.refused,
                (unsigned long long)st.conflicts, (unsigned long long)st.missing_content,
                (unsigned long long)(st.files - st.missing_content),
                (unsigned long long)st.files);
        if (when)
            json_str(f, when_s);
        else
            fprintf(f, "null");
        fprintf(f, ",\"last_result\":");
        json_str(f, result);
        fprintf(f, ",\"last_report\":{\"pushed\":%u,\"deleted\":%u,\"conflicts\":%u,"
                   "\"refused\":%u,\"held\":%u,\"failed\":%u,\"pending\":%u}",
                rep.pushed, rep.deleted, rep.conflicts, rep.refused, rep.held, rep.failed,
                rep.pending);
        fprintf(f, ",\"throttled_until\":");
        if (b.until_s)
            json_str(f, until_s);
        else
            fprintf(f, "null");
        fprintf(f, ",\"requests_waiting\":%d,\"max_requests_per_minute\":%d", b.waiting,
                b.per_minute);
        fprintf(f, ",\"refused_files\":[");
        for (size_t i = 0; i < n_rf; i++) {
            fprintf(f, "%s{\"path\":", i ? "," : "");
            json_str(f, rf[i].path);
            fprintf(f, ",\"reason\":");
            json_str(f, rf[i].why);
            fputc('}', f);
        }
        fprintf(f, "],\"conflict_records\":[");
        for (size_t i = 0; i < n_cf; i++) {
            char at[64];
            fmt_time(cf[i].at_ns / 1000000000LL, at, sizeof(at));
            fprintf(f, "%s{\"id\":%lld,\"kind\":\"%s\",\"path\":", i ? "," : "",
                    (long long)cf[i].id,
                    cf[i].kind == CACHE_CONFLICT_UNSAVED ? "unsaved_at_unmount" : "store_won");
            json_str(f, cf[i].path);
            fprintf(f, ",\"memory_id\":");
            json_str(f, cf[i].memory_id);
            fprintf(f, ",\"at\":\"%s\"}", at);
        }
        fprintf(f, "]}\n");
    } else {
        fprintf(f, "%s\n  mounted at      %s (%s, pid %d)\n"
                   "  memories        %llu in %llu directories, %llu bytes\n"
                   "  local changes   %llu dirty, %llu deletes pending\n"
                   "  last sync       %s: %s\n",
                s->id, s->mount_path, s->read_only ? "read-only" : "read-write", (int)getpid(),
                (unsigned long long)st.files, (unsigned long long)st.dirs,
                (unsigned long long)st.bytes, (unsigned long long)st.dirty,
                (unsigned long long)(st.tombstones - st.kept_deletions), when_s,
                result[0] ? result : "-");
        if (st.kept_deletions)
            fprintf(f, "  kept deletions  %llu: removed under --sync-deletions log_only or "
                       "disabled; gone in the mount for this session, never deleted remotely\n",
                    (unsigned long long)st.kept_deletions);
        if (st.unsaved)
            fprintf(f, "  not closed yet  %llu new file%s: pushed once a writer closes or fsyncs "
                       "them\n", (unsigned long long)st.unsaved, st.unsaved == 1 ? "" : "s");
        if (when)
            fprintf(f, "                  pushed %u, deleted %u, conflicts %u, refused %u, "
                       "held %u, failed %u\n",
                    rep.pushed, rep.deleted, rep.conflicts, rep.refused, rep.held, rep.failed);
        if (b.until_s)
            fprintf(f, "  throttled       the server limits the rate (429): every request "
                       "waits until %s (%d waiting)\n", until_s, b.waiting);
        else if (b.per_minute && b.waiting)
            fprintf(f, "  request cap     %d per minute (%d waiting)\n", b.per_minute,
                    b.waiting);
        fprintf(f, "  content cached  %llu / %llu%s\n",
                (unsigned long long)(st.files - st.missing_content),
                (unsigned long long)st.files, st.missing_content ? " (fetching the rest)" : "");
        for (size_t i = 0; i < n_rf; i++)
            fprintf(f, "  refused         %s (%s); kept locally, retried once it changes\n",
                    rf[i].path, rf[i].why);
        for (size_t i = 0; i < n_cf; i++) {
            char at[64];
            fmt_time(cf[i].at_ns / 1000000000LL, at, sizeof(at));
            fprintf(f, "  conflict %-6lld %s at %s: %s; print the local one with: memstorefs "
                       "conflicts show %lld --cache-dir %s\n",
                    (long long)cf[i].id, cf[i].path, at,
                    cf[i].kind == CACHE_CONFLICT_UNSAVED
                        ? "an edit not saved when the store was unmounted, never pushed"
                        : "the store's version won",
                    (long long)cf[i].id, d->cache_dir);
        }
    }
    cache_refused_free(rf, n_rf);
    cache_conflicts_free(cf, n_cf);
}

void status_serve(struct daemon *d, FILE *out, bool json)
{
    for (size_t i = 0; i < d->n; i++)
        if (!d->stores[i].gone)
            one_store(d, &d->stores[i], out, json);
    fputs("ok\n", out);
}
