/* histlog.c - the daemon's answers to `memstorefs log PATH` and `memstorefs
 * log --deleted DIR`, from the store's version feed (contract A.4), on a
 * history thread (histserve.c).
 *
 * Which memory a path means: the memory of the file there (its identity
 * follows renames, so the versions list shows every path it had); for a
 * path with no file, the memory whose local deletion is still pending
 * there (tombstone), else the newest memory the feed shows deleted at that
 * path.  The lists are bounded (MAX_PAGES pages of 100 versions); a list
 * cut there says so.
 *
 * Output: one line per version (or deleted memory), human text or one
 * JSON object per line; the verdict line is histserve.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "daemon.h"
#include "history.h"
#include "jbuf.h"
#include "rules.h"

#define MAX_PAGES 100

/* A JSON string (or null) through the one JSON string writer. */
static void json_str(FILE *f, const char *s)
{
    struct jbuf b = {0};
    jbuf_add_json_cstr(&b, s);
    fputs(b.oom || !b.p ? "null" : b.p, f);
    jbuf_release(&b);
}

/* "api_actor apikey_..." -> "api apikey_..."; "unknown" when null. */
static void who(const struct api_version *v, char *out, size_t len)
{
    if (!v->actor_type[0]) {
        snprintf(out, len, "unknown");
        return;
    }
    size_t n = strlen(v->actor_type);
    if (n > 6 && strcmp(v->actor_type + n - 6, "_actor") == 0)
        n -= 6;
    snprintf(out, len, "%.*s%s%s", (int)n, v->actor_type, v->actor_id[0] ? " " : "",
             v->actor_id);
}

static const char *op_name(enum api_op op)
{
    return op == API_OP_CREATED ? "created" : op == API_OP_MODIFIED ? "modified" : "deleted";
}

static void json_actor(FILE *f, const struct api_version *v)
{
    if (!v->actor_type[0]) {
        fputs("null", f);
        return;
    }
    fputs("{\"type\":", f);
    json_str(f, v->actor_type);
    fputs(",\"id\":", f);
    json_str(f, v->actor_id);
    fputc('}', f);
}

static void print_version(FILE *f, const struct api_version *v, bool json, bool current)
{
    if (json) {
        fputs("{\"version_id\":", f);
        json_str(f, v->id);
        fputs(",\"memory_id\":", f);
        json_str(f, v->memory_id);
        fputs(",\"created_at\":", f);
        json_str(f, v->created_at);
        fprintf(f, ",\"operation\":\"%s\",\"created_by\":", op_name(v->op));
        json_actor(f, v);
        if (v->size >= 0)
            fprintf(f, ",\"size\":%ld", v->size);
        else
            fputs(",\"size\":null", f);
        fputs(",\"path\":", f);
        json_str(f, v->path);
        fputs(",\"content_sha256\":", f);
        json_str(f, v->sha[0] ? v->sha : NULL);
        fputs(",\"redacted_at\":", f);
        json_str(f, v->redacted ? v->redacted_at : NULL);
        fprintf(f, ",\"current\":%s}\n", current ? "true" : "false");
        return;
    }
    char by[200], size[32];
    who(v, by, sizeof(by));
    if (v->size >= 0)
        snprintf(size, sizeof(size), "%ld B", v->size);
    else
        snprintf(size, sizeof(size), "-");
    fprintf(f, "%-28s %-24s %-8s %-30s %9s  %s%s\n", v->id, v->created_at, op_name(v->op), by,
            size, v->redacted ? "(redacted)" : v->path ? v->path : "-",
            current ? "  (the file's version)" : "");
}

/* The newest memory the feed shows deleted at path; -ENOENT when none
 * (*cut: the list stopped at its bound, older deletions unread). */
static int deleted_at(struct daemon *d, struct fs_store *s, const char *path,
                      char mem[CACHE_ID_MAX], bool *cut, char *why, size_t whylen)
{
    struct api_vfilter f = {.operation = "deleted"};
    struct api_versions v;
    struct api_error e = {0};
    int rc = api_versions_list(d->http, s->id, &f, 100, MAX_PAGES, &v, &e);
    if (rc) {
        hist_api_why(d, rc, &e, "cannot read the store's deletions", why, whylen);
        api_error_clear(&e);
        return -EIO;
    }
    rc = -ENOENT;
    *cut = !v.complete;
    for (size_t i = 0; i < v.n && rc; i++) {
        if (v.items[i].path && strcmp(v.items[i].path, path) == 0) {
            snprintf(mem, CACHE_ID_MAX, "%s", v.items[i].memory_id);
            rc = 0;
        }
    }
    api_versions_free(&v);
    return rc;
}

int hist_log(struct daemon *d, struct fs_store *s, const char *rel, bool json, FILE *out,
             char *why, size_t whylen)
{
    char mem[CACHE_ID_MAX] = "", current[CACHE_ID_MAX] = "", note[300] = "";
    if (strcmp(rel, MEM_MARKER_PATH) == 0) {
        snprintf(why, whylen, "%s%s is the mount's marker, not a memory: it has no history",
                 s->mount_path, rel);
        return -EINVAL;
    }
    struct cnode n;
    int rc = cache_node_at(d->cache, s->id, rel, &n);
    if (!rc) {
        bool dir = n.is_dir;
        snprintf(mem, sizeof(mem), "%s", n.memory_id);
        struct cache_file_history h;
        if (!dir && cache_file_history(d->cache, n.ino, &h) == 0)
            snprintf(current, sizeof(current), "%s", h.version_id);
        cnode_clear(&n);
        if (dir) {
            snprintf(why, whylen, "%s%s is a directory; 'memstorefs log --deleted DIR' lists "
                     "the memories deleted under one", s->mount_path, rel);
            return -EISDIR;
        }
        /* A new file where a synced one was removed takes its memory over
         * at the next sync (plan.c): that memory's history is its own. */
        if (!mem[0] && cache_deletion_at(d->cache, s->id, rel, mem) == 0)
            snprintf(note, sizeof(note), " (a new file here takes it over at the next sync)");
        if (!mem[0]) {
            snprintf(why, whylen, "%s%s has no history yet: it was never synced to the store "
                     "('memstorefs sync --wait' pushes it)", s->mount_path, rel);
            return -ENOENT;
        }
    } else if (rc == -ENOENT) {
        if (cache_deletion_at(d->cache, s->id, rel, mem) == 0) {
            snprintf(note, sizeof(note), " (removed here; the deletion is not pushed yet)");
        } else {
            bool cut = false;
            rc = deleted_at(d, s, rel, mem, &cut, why, whylen);
            if (rc == -ENOENT && cut)
                snprintf(why, whylen, "no file at %s%s, and the store's history shows no "
                         "memory deleted at that path among its %d newest deletions (older "
                         "ones were not read)", s->mount_path, rel, MAX_PAGES * 100);
            else if (rc == -ENOENT)
                snprintf(why, whylen, "no file at %s%s, and the store's history shows no "
                         "memory deleted at that path", s->mount_path, rel);
            if (rc)
                return rc;
            snprintf(note, sizeof(note), " (deleted)");
        }
    } else {
        snprintf(why, whylen, "cannot read the cache: %s", strerror(-rc));
        return rc;
    }
    struct api_vfilter f = {.memory_id = mem};
    struct api_versions v;
    struct api_error e = {0};
    rc = api_versions_list(d->http, s->id, &f, 100, MAX_PAGES, &v, &e);
    if (rc) {
        hist_api_why(d, rc, &e, "cannot read the memory's versions", why, whylen);
        api_error_clear(&e);
        return rc;
    }
    if (!json)
        fprintf(out, "%s%s: memory %s of memory store %s%s, %zu version%s, newest first\n",
                s->mount_path, rel, mem, s->id, note, v.n, v.n == 1 ? "" : "s");
    for (size_t i = 0; i < v.n; i++)
        print_version(out, &v.items[i], json, current[0] && strcmp(current, v.items[i].id) == 0);
    if (!json && !v.complete)
        fprintf(out, "(only the newest %zu versions are listed)\n", v.n);
    if (!json && v.n_bad)
        fprintf(out, "(%zu malformed versions from the server are left out)\n", v.n_bad);
    api_versions_free(&v);
    return 0;
}

int hist_deleted(struct daemon *d, struct fs_store *s, const char *rel, bool json, FILE *out,
                 char *why, size_t whylen)
{
    struct cnode n;
    int rc = cache_node_at(d->cache, s->id, rel, &n);
    if (!rc) {
        bool dir = n.is_dir;
        cnode_clear(&n);
        if (!dir) {
            snprintf(why, whylen, "%s%s is a file; 'memstorefs log --deleted' takes a directory "
                     "('memstorefs log FILE' shows a file's versions)", s->mount_path, rel);
            return -ENOTDIR;
        }
    }
    /* A directory removed with what was in it is gone from the cache too:
     * its path is still a prefix to look for. */
    char prefix[4300];
    snprintf(prefix, sizeof(prefix), "%s%s", rel, strcmp(rel, "/") == 0 ? "" : "/");
    struct api_vfilter f = {.operation = "deleted"};
    struct api_versions v;
    struct api_error e = {0};
    rc = api_versions_list(d->http, s->id, &f, 100, MAX_PAGES, &v, &e);
    if (rc) {
        hist_api_why(d, rc, &e, "cannot read the store's deletions", why, whylen);
        api_error_clear(&e);
        return rc;
    }
    size_t shown = 0;
    bool root = strcmp(rel, "/") == 0;
    for (size_t i = 0; i < v.n; i++) {
        const struct api_version *x = &v.items[i];
        if (x->path ? strncmp(x->path, prefix, strlen(prefix)) != 0 : !root)
            continue;
        bool dup = false; /* a memory is deleted once; the feed may repeat it */
        for (size_t k = 0; k < i && !dup; k++)
            dup = strcmp(v.items[k].memory_id, x->memory_id) == 0;
        if (dup)
            continue;
        if (!shown++ && !json)
            fprintf(out, "memories deleted under %s%s, newest first:\n", s->mount_path, rel);
        if (json) {
            fputs("{\"memory_id\":", out);
            json_str(out, x->memory_id);
            fputs(",\"path\":", out);
            json_str(out, x->path);
            fputs(",\"deleted_at\":", out);
            json_str(out, x->created_at);
            fputs(",\"deleted_by\":", out);
            json_actor(out, x);
            fputs(",\"version_id\":", out);
            json_str(out, x->id);
            fputs("}\n", out);
        } else {
            char by[200];
            who(x, by, sizeof(by));
            fprintf(out, "%-24s %-28s %-30s %s%s\n", x->created_at, x->memory_id, by,
                     x->path ? s->mount_path : "", x->path ? x->path : "(path redacted)");
        }
    }
    if (!json && !shown)
        fprintf(out, "no memory deleted under %s%s in the store's history\n", s->mount_path,
                rel);
    else if (!json)
        fprintf(out, "('memstorefs log PATH' lists one's versions; 'memstorefs restore PATH "
                     "--version ID' brings one back)\n");
    if (!json && !v.complete)
        fprintf(out, "(only the newest %zu deletions were read)\n", v.n);
    api_versions_free(&v);
    return 0;
}
