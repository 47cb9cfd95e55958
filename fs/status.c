/* status.c - what `memstorefs status` shows of each mounted store: counts
 * from the cache, the last sync's time, result and report, whether syncs
 * keep up (a sync running, or failing, for longer than the sync interval:
 * since when and why), how big the cache is, the files the server refused
 * (with its reason), how much content is cached (the prefetch's progress:
 * cached / total) and the conflicts the store won (with how to read the
 * lost local version back).  Human text, or one JSON object per store per
 * line (--json), written with the one JSON string writer (cache/jbuf.h);
 * and whether the daemon's request budget holds requests back (a 429's
 * pause, --max-requests-per-minute).
 * Runs on the daemon's main thread; reads the cache through its API. */
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
#include "jbuf.h"
#include "kwake.h"

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

/* "312 KiB" and the like. */
static void fmt_size(uint64_t n, char *buf, size_t len)
{
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu bytes", (unsigned long long)n);
    else
        snprintf(buf, len, "%.*f %s", v < 10 ? 1 : 0, v, unit[u]);
}

/* Whether the store's syncs keep up. */
struct health {
    const char *state;  /* ok, failed, failing, stuck */
    int64_t since;      /* stuck: the sync's start; failing/failed: the first failure */
    int64_t secs;       /* how long since then */
    struct syncer_health h;
};

static void health_of(struct daemon *d, struct fs_store *s, struct health *o)
{
    memset(o, 0, sizeof(*o));
    syncer_health(d->sync, s->sync_idx, &o->h);
    int64_t now = (int64_t)time(NULL);
    o->state = "ok";
    if (o->h.running_since && now - o->h.running_since > o->h.interval_s) {
        o->state = "stuck";
        o->since = o->h.running_since;
    } else if (o->h.failing_since) {
        o->state = now - o->h.failing_since > o->h.interval_s ? "failing" : "failed";
        o->since = o->h.failing_since;
    }
    if (o->since)
        o->secs = now - o->since;
}

/* The kernel's requests to this mount since it was mounted, by opcode
 * (fuseio.c), whether writes skip the privilege check, the kernel's
 * wake_here (kwake.c; null: this kernel has none) and how often the
 * request loop polled (fsloop.c). */
static void json_kernel(const struct fs_store *s, struct jbuf *b)
{
    uint64_t n[FUSEIO_OPS];
    fuseio_counts(s, n);
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    int wake = kwake_state((int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000);
    const char *wake_s = wake < 0 ? "null" : wake ? "true" : "false";
    jbuf_addf(b, ",\"kernel\":{\"killpriv_v2\":%s,\"wake_here\":%s,\"polls\":%llu,\"requests\":{",
              __atomic_load_n(&s->fio.killpriv, __ATOMIC_RELAXED) ? "true" : "false", wake_s,
              (unsigned long long)__atomic_load_n(&s->fio.polls, __ATOMIC_RELAXED));
    bool first = true;
    for (unsigned i = 0; i < FUSEIO_OPS; i++) {
        const char *name = fuseio_op_name(i);
        if (!n[i])
            continue;
        if (name)
            jbuf_addf(b, "%s\"%s\":%llu", first ? "" : ",", name, (unsigned long long)n[i]);
        else
            jbuf_addf(b, "%s\"OP_%u\":%llu", first ? "" : ",", i, (unsigned long long)n[i]);
        first = false;
    }
    jbuf_adds(b, "}}");
}

/* st NULL: the counts could not be read (counts_rc says why). */
static void json_store(struct daemon *d, struct fs_store *s, struct jbuf *b,
                       const struct cache_store_stats *st, int counts_rc,
                       const struct cache_usage *u, const struct health *hl)
{
    int64_t when = 0;
    char result[512] = "", ts[64];
    struct syncer_report rep;
    syncer_last(d->sync, s->sync_idx, &when, result, sizeof(result));
    syncer_last_report(d->sync, s->sync_idx, &rep);
    jbuf_adds(b, "{\"memory_store_id\":");
    jbuf_add_json_cstr(b, s->id);
    jbuf_adds(b, ",\"mount_path\":");
    jbuf_add_json_cstr(b, s->mount_path);
    jbuf_addf(b, ",\"access\":\"%s\",\"pid\":%d,\"cache_dir\":",
              s->read_only ? "read_only" : "read_write", (int)getpid());
    jbuf_add_json_cstr(b, d->cache_dir);
    if (!st) {
        /* Not known: null, never a zero a worker would read as "all
         * pushed", and why. */
        jbuf_adds(b, ",\"counts_error\":");
        jbuf_add_json_cstr(b, strerror(-counts_rc));
        jbuf_adds(b, ",\"memories\":null,\"directories\":null,\"bytes\":null,\"dirty\":null,"
                     "\"pending_deletes\":null,\"kept_deletes\":null,\"unsaved\":null,"
                     "\"refused\":null,\"conflicts\":null,\"content_missing\":null,"
                     "\"content_evicted\":null,\"content_cached\":null,\"content_total\":null,");
    } else {
        jbuf_addf(b, ",\"memories\":%llu,\"directories\":%llu,\"bytes\":%llu,\"dirty\":%llu,"
                     "\"pending_deletes\":%llu,\"kept_deletes\":%llu,\"unsaved\":%llu,",
                  (unsigned long long)st->files, (unsigned long long)st->dirs,
                  (unsigned long long)st->bytes, (unsigned long long)st->dirty,
                  (unsigned long long)(st->tombstones - st->kept_deletions),
                  (unsigned long long)st->kept_deletions, (unsigned long long)st->unsaved);
        jbuf_addf(b, "\"refused\":%llu,\"conflicts\":%llu,\"content_missing\":%llu,"
                     "\"content_evicted\":%llu,\"content_cached\":%llu,\"content_total\":%llu,",
                  (unsigned long long)st->refused, (unsigned long long)st->conflicts,
                  (unsigned long long)st->missing_content, (unsigned long long)st->evicted,
                  (unsigned long long)(st->files - st->missing_content - st->evicted),
                  (unsigned long long)st->files);
    }
    fmt_time(when, ts, sizeof(ts));
    jbuf_adds(b, "\"last_sync\":");
    jbuf_add_json_cstr(b, when ? ts : NULL);
    jbuf_adds(b, ",\"last_result\":");
    jbuf_add_json_cstr(b, result);
    jbuf_addf(b, ",\"last_report\":{\"pushed\":%u,\"deleted\":%u,\"conflicts\":%u,"
                 "\"refused\":%u,\"held\":%u,\"failed\":%u,\"pending\":%u}",
              rep.pushed, rep.deleted, rep.conflicts, rep.refused, rep.held, rep.failed,
              rep.pending);
    jbuf_addf(b, ",\"sync\":{\"state\":\"%s\",\"since\":", hl->state);
    fmt_time(hl->since, ts, sizeof(ts));
    jbuf_add_json_cstr(b, hl->since ? ts : NULL);
    jbuf_addf(b, ",\"seconds\":%lld,\"interval_s\":%d,\"last_error\":", (long long)hl->secs,
              hl->h.interval_s);
    jbuf_add_json_cstr(b, hl->h.last_error[0] ? hl->h.last_error : NULL);
    fmt_time(hl->h.last_ok, ts, sizeof(ts));
    jbuf_adds(b, ",\"last_ok\":");
    jbuf_add_json_cstr(b, hl->h.last_ok ? ts : NULL);
    jbuf_addf(b, ",\"running\":%s}", hl->h.running_since ? "true" : "false");
    jbuf_addf(b, ",\"cache\":{\"disk_bytes\":%llu,\"db_bytes\":%llu,\"wal_bytes\":%llu,"
                 "\"content_bytes\":%llu,\"max_bytes\":",
              (unsigned long long)(u->db_bytes + u->wal_bytes), (unsigned long long)u->db_bytes,
              (unsigned long long)u->wal_bytes, (unsigned long long)u->content_bytes);
    if (d->cache_max_size)
        jbuf_addf(b, "%llu", (unsigned long long)d->cache_max_size);
    else
        jbuf_adds(b, "null");
    jbuf_addf(b, ",\"evicted_files\":%llu,\"reserve_bytes\":%llu,\"journal_waiting\":",
              (unsigned long long)u->evicted_files, (unsigned long long)u->reserve_bytes);
    if (st)
        jbuf_addf(b, "%llu}", (unsigned long long)st->journal_waiting);
    else
        jbuf_adds(b, "null}");
    struct budget bg;
    read_budget(d, &bg);
    fmt_time(bg.until_s, ts, sizeof(ts));
    jbuf_adds(b, ",\"throttled_until\":");
    jbuf_add_json_cstr(b, bg.until_s ? ts : NULL);
    jbuf_addf(b, ",\"requests_waiting\":%d,\"max_requests_per_minute\":%d", bg.waiting,
              bg.per_minute);
    json_kernel(s, b);

    struct cache_refused *rf = NULL;
    size_t n_rf = 0;
    cache_refused_files(d->cache, s->id, &rf, &n_rf);
    jbuf_adds(b, ",\"refused_files\":[");
    for (size_t i = 0; i < n_rf; i++) {
        jbuf_adds(b, i ? ",{\"path\":" : "{\"path\":");
        jbuf_add_json_cstr(b, rf[i].path);
        jbuf_adds(b, ",\"reason\":");
        jbuf_add_json_cstr(b, rf[i].why);
        jbuf_adds(b, "}");
    }
    cache_refused_free(rf, n_rf);
    struct cache_conflict *cf = NULL;
    size_t n_cf = 0;
    cache_conflicts(d->cache, s->id, &cf, &n_cf);
    jbuf_adds(b, "],\"conflict_records\":[");
    for (size_t i = 0; i < n_cf; i++) {
        jbuf_addf(b, "%s{\"id\":%lld,\"kind\":\"%s\",\"path\":", i ? "," : "",
                  (long long)cf[i].id,
                  cache_conflict_kind_name(cf[i].kind));
        jbuf_add_json_cstr(b, cf[i].path);
        jbuf_adds(b, ",\"memory_id\":");
        jbuf_add_json_cstr(b, cf[i].memory_id);
        fmt_time(cf[i].at_ns / 1000000000LL, ts, sizeof(ts));
        jbuf_adds(b, ",\"at\":");
        jbuf_add_json_cstr(b, ts);
        jbuf_adds(b, "}");
    }
    cache_conflicts_free(cf, n_cf);
    jbuf_adds(b, "]}\n");
}

static void text_health(FILE *f, const struct health *hl)
{
    char since[64];
    fmt_time(hl->since, since, sizeof(since));
    const char *err = hl->h.last_error[0] ? hl->h.last_error : NULL;
    if (strcmp(hl->state, "stuck") == 0)
        fprintf(f, "  sync            STUCK: a sync has been running for %lld s (since %s), "
                   "longer than the %d s sync interval; %s%s\n",
                (long long)hl->secs, since, hl->h.interval_s,
                err ? "last error: " : "no error so far: the server has not answered it",
                err ? err : "");
    else if (strcmp(hl->state, "failing") == 0)
        fprintf(f, "  sync            FAILING since %s (%lld s, longer than the %d s sync "
                   "interval): %s\n", since, (long long)hl->secs, hl->h.interval_s,
                err ? err : "-");
    else if (strcmp(hl->state, "failed") == 0)
        fprintf(f, "  sync            the last sync failed (retried every %d s): %s\n",
                hl->h.interval_s, err ? err : "-");
    else
        fprintf(f, "  sync            ok%s\n", hl->h.running_since ? ", a sync is running" : "");
}

static void text_store(struct daemon *d, struct fs_store *s, FILE *f,
                       const struct cache_store_stats *st, const struct cache_usage *u,
                       const struct health *hl)
{
    int64_t when = 0;
    char result[512] = "", when_s[64];
    struct syncer_report rep;
    syncer_last(d->sync, s->sync_idx, &when, result, sizeof(result));
    syncer_last_report(d->sync, s->sync_idx, &rep);
    fmt_time(when, when_s, sizeof(when_s));
    fprintf(f, "%s\n  mounted at      %s (%s, pid %d)\n"
               "  memories        %llu in %llu directories, %llu bytes\n"
               "  local changes   %llu dirty, %llu deletes pending\n"
               "  last sync       %s: %s\n",
            s->id, s->mount_path, s->read_only ? "read-only" : "read-write", (int)getpid(),
            (unsigned long long)st->files, (unsigned long long)st->dirs,
            (unsigned long long)st->bytes, (unsigned long long)st->dirty,
            (unsigned long long)(st->tombstones - st->kept_deletions), when_s,
            result[0] ? result : "-");
    if (st->kept_deletions)
        fprintf(f, "  kept deletions  %llu: removed under --sync-deletions log_only or "
                   "disabled; gone in the mount for this session, never deleted remotely\n",
                (unsigned long long)st->kept_deletions);
    if (st->unsaved)
        fprintf(f, "  not closed yet  %llu new file%s: pushed once a writer closes or fsyncs "
                   "them\n", (unsigned long long)st->unsaved, st->unsaved == 1 ? "" : "s");
    if (when)
        fprintf(f, "                  pushed %u, deleted %u, conflicts %u, refused %u, "
                   "held %u, failed %u\n",
                rep.pushed, rep.deleted, rep.conflicts, rep.refused, rep.held, rep.failed);
    if (st->journal_waiting)
        fprintf(f, "  disk full       %llu file%s closed since the cache's disk filled up, kept "
                   "in its journal of closed files: shown and pushed once it has room\n",
                (unsigned long long)st->journal_waiting, st->journal_waiting == 1 ? "" : "s");
    text_health(f, hl);
    struct budget bg;
    read_budget(d, &bg);
    if (bg.until_s) {
        char until[64];
        fmt_time(bg.until_s, until, sizeof(until));
        fprintf(f, "  throttled       the server limits the rate (429): every request "
                   "waits until %s (%d waiting)\n", until, bg.waiting);
    } else if (bg.per_minute && bg.waiting) {
        fprintf(f, "  request cap     %d per minute (%d waiting)\n", bg.per_minute, bg.waiting);
    }
    char disk[32], wal[32], content[32], max[32];
    fmt_size(u->db_bytes + u->wal_bytes, disk, sizeof(disk));
    fmt_size(u->wal_bytes, wal, sizeof(wal));
    fmt_size(u->content_bytes, content, sizeof(content));
    fmt_size(d->cache_max_size, max, sizeof(max));
    char reserve[32];
    fmt_size(u->reserve_bytes, reserve, sizeof(reserve));
    fprintf(f, "  cache           %s on disk in %s (content %s%s%s; write-ahead log %s; "
               "reserve %s)\n", disk, d->cache_dir, content,
            d->cache_max_size ? ", --cache-max-size " : "", d->cache_max_size ? max : "", wal,
            u->reserve_bytes ? reserve : "none");
    fprintf(f, "  content cached  %llu / %llu",
            (unsigned long long)(st->files - st->missing_content - st->evicted),
            (unsigned long long)st->files);
    if (st->evicted)
        fprintf(f, "; %llu evicted by --cache-max-size, fetched again when opened",
                (unsigned long long)st->evicted);
    fprintf(f, "%s\n", st->missing_content ? " (fetching the rest)" : "");

    struct cache_refused *rf = NULL;
    size_t n_rf = 0;
    cache_refused_files(d->cache, s->id, &rf, &n_rf);
    for (size_t i = 0; i < n_rf; i++)
        fprintf(f, "  refused         %s (%s); kept locally, retried once its content changes\n",
                rf[i].path, rf[i].why);
    cache_refused_free(rf, n_rf);
    struct cache_conflict *cf = NULL;
    size_t n_cf = 0;
    cache_conflicts(d->cache, s->id, &cf, &n_cf);
    for (size_t i = 0; i < n_cf; i++) {
        char at[64];
        fmt_time(cf[i].at_ns / 1000000000LL, at, sizeof(at));
        fprintf(f, "  conflict %-6lld %s at %s: %s; print the local one with: memstorefs "
                   "conflicts show %lld --cache-dir %s\n",
                (long long)cf[i].id, cf[i].path, at,
                cf[i].kind == CACHE_CONFLICT_UNSAVED
                    ? "an edit not saved when the store was unmounted, never pushed"
                : cf[i].kind == CACHE_CONFLICT_CUT
                    ? "an edit cut short by a write past 100 KiB, never pushed"
                    : "the store's version won",
                (long long)cf[i].id, d->cache_dir);
    }
    cache_conflicts_free(cf, n_cf);
}

static void one_store(struct daemon *d, struct fs_store *s, FILE *f, bool json)
{
    struct cache_store_stats st;
    int src = cache_store_stats(d->cache, s->id, &st);
    if (src != 0)
        memset(&st, 0, sizeof(st));
    struct cache_usage u;
    if (cache_usage(d->cache, &u) != 0)
        memset(&u, 0, sizeof(u));
    struct health hl;
    health_of(d, s, &hl);
    /* Counts that could not be read are said to be unknown, never shown
     * as zeros alone ("0 dirty": nothing left to push). */
    if (!json) {
        text_store(d, s, f, &st, &u, &hl);
        if (src)
            fprintf(f, "  cache           cannot read this store's counts (%s): the numbers "
                       "above are not known\n", strerror(-src));
        return;
    }
    struct jbuf b = {0};
    json_store(d, s, &b, src ? NULL : &st, src, &u, &hl);
    if (!b.oom)
        fputs(b.p, f);
    jbuf_release(&b);
}

void status_serve(struct daemon *d, FILE *out, bool json)
{
    /* Nothing is checkpointed here: a monitor polling status must not
     * stall file operations with a checkpoint's fsyncs under the cache
     * lock.  The log's size is shown apart instead (the collector cuts it
     * every round). */
    for (size_t i = 0; i < d->n; i++)
        if (!d->stores[i].gone)
            one_store(d, &d->stores[i], out, json);
    fputs("ok\n", out);
}
