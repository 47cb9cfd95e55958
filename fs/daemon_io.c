/* daemon_io.c - the daemon's output around the mount: its log target
 * (--log-file: a file, syslog or stderr; opened before the mount commits,
 * so a target that cannot be opened refuses the mount), stdio once it runs
 * in the background, the listing progress line shown on a terminal
 * while a big store is listed at mount, and the list of what a sync left
 * unpushed.  Main thread only (the progress callback runs on it too,
 * from syncer_refresh), but for that list, which the threads answering
 * `sync --wait` (syncctl.c) make too: it reads the cache and the table of
 * open files, each under its own locks. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "cli.h"
#include "daemon.h"
#include "log.h"
#include "openfile.h"

/* Opens the log target of the mount: --log-file, else (background mode)
 * CACHE_DIR/memstorefs.log; nothing in foreground mode without
 * --log-file (stderr it is).  Prints the reason when it cannot. */
int daemon_open_log(const struct mount_opts *o)
{
    char *spec = o->log_file ? strdup(o->log_file) : NULL;
    if (!spec && !o->foreground && asprintf(&spec, "%s/memstorefs.log", o->cache_dir) < 0)
        spec = NULL;
    if (!spec)
        return o->foreground && !o->log_file ? 0 : -ENOMEM;
    char why[4200];
    int rc = log_target_open(spec, "memstorefs", why, sizeof(why));
    if (rc)
        fprintf(stderr, "memstorefs: %s; the daemon's log would be lost, so nothing was "
                        "mounted (give --log-file another file, syslog or -)\n", why);
    free(spec);
    return rc;
}

/* Background mode: after the mount succeeded, the daemon's stdin and
 * stdout go to /dev/null, and stderr too unless the log goes there
 * (--log-file -). */
void daemon_detach_stdio(void)
{
    /* Keep no directory of the caller busy. */
    if (chdir("/") != 0)
        log_warn("cannot change to /", "error", strerror(errno));
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (!log_target_is_stderr())
            dup2(null, 2);
        if (null > 2)
            close(null);
    }
}

/* A progress line on a terminal while a big store is listed at mount. */
void daemon_list_progress(void *arg, const char *store_id, size_t listed, bool last)
{
    bool *shown = arg;
    if (!isatty(STDERR_FILENO) || (!*shown && last))
        return; /* not a terminal, or one page: nothing worth a line */
    fprintf(stderr, "\rmemstorefs: listing memory store %s: %zu memories%s", store_id, listed,
            last ? "\n" : "...");
    fflush(stderr);
    *shown = !last;
}

#define UNPUSHED_SHOWN 50

/* A changed file of the list, named once the cache's walk is over (the
 * open-file table is asked about it then, without the cache's lock). */
struct dirty_file {
    uint64_t ino;
    char *path;
    bool synced; /* it has a memory: changed, not new */
    bool held;   /* saved while a writer held it open (CACHE_HELD) */
};

struct unpushed_ctx {
    struct cache *c;
    const char *store_id;
    FILE *out;
    const char *mount_path;
    bool final; /* the final sync's: held files were pushed too */
    unsigned shown, more;
    struct dirty_file dirty[UNPUSHED_SHOWN]; /* the first changed files */
    size_t ndirty;
    uint64_t *named; /* the files the cache's lists named (sorted at the end) */
    size_t nnamed, capnamed;
    const struct cache_jfile *jf; /* only in the journal, sorted by ino */
    size_t njf;
};

static int cmp_jfile(const void *key, const void *item)
{
    uint64_t k = *(const uint64_t *)key, i = ((const struct cache_jfile *)item)->ino;
    return k < i ? -1 : k > i;
}

static void one_unpushed(struct unpushed_ctx *u, const char *path, const char *what)
{
    if (u->shown >= UNPUSHED_SHOWN) {
        u->more++;
        return;
    }
    /* The memory path below the mount point: what the user sees. */
    fprintf(u->out, "  not pushed: %s%s (%s)\n", u->mount_path, path, what);
    u->shown++;
}

/* Records that a list of the cache names ino (a file with an edit not
 * saved yet is named by the open files' list only when none did). */
static void note_named(struct unpushed_ctx *u, uint64_t ino)
{
    if (u->nnamed == u->capnamed) {
        size_t cap = u->capnamed ? 2 * u->capnamed : 64;
        uint64_t *v = realloc(u->named, cap * sizeof(*v));
        if (!v)
            return; /* at worst named twice */
        u->named = v;
        u->capnamed = cap;
    }
    u->named[u->nnamed++] = ino;
}

static int cmp_ino(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether ino is one of the files only the journal holds (u->jf). */
static bool in_journal(const struct unpushed_ctx *u, uint64_t ino)
{
    return u->njf && bsearch(&ino, u->jf, u->njf, sizeof(*u->jf), cmp_jfile);
}

static int dirty_fn(void *arg, const struct cnode *n)
{
    struct unpushed_ctx *u = arg;
    /* One the journal was applied to since it was read: listed with
     * those, below. */
    if (in_journal(u, n->ino))
        return 0;
    note_named(u, n->ino);
    char *path = u->ndirty < UNPUSHED_SHOWN ? strdup(n->path) : NULL;
    if (!path) {
        u->more++; /* past the 50 shown (or no memory to name it) */
        return 0;
    }
    u->dirty[u->ndirty++] = (struct dirty_file){n->ino, path, n->memory_id[0] != '\0',
                                                n->unsaved == CACHE_HELD};
    return 0;
}

/* The changed files, each with why it is not in the store.  One whose
 * edit was saved while a writer held it (CACHE_HELD: a close of another
 * of its descriptors) is pushed only once the writer closes it, but at
 * the final sync; the row alone does not say the writer is still there
 * (a close's mark may wait in memory), so the open files are asked. */
static void name_dirty(struct unpushed_ctx *u)
{
    for (size_t i = 0; i < u->ndirty; i++) {
        const struct dirty_file *f = &u->dirty[i];
        if (f->held && !u->final && ofile_has_writers(f->ino))
            one_unpushed(u, f->path, f->synced ? "changed locally, open for writing: pushed "
                                                 "once its writer closes it"
                                               : "new file, open for writing: pushed once "
                                                 "its writer closes it");
        else
            one_unpushed(u, f->path, f->synced ? "changed locally" : "new file");
        free(f->path);
    }
    u->ndirty = 0;
}

static int never_closed_fn(void *arg, const struct cnode *n)
{
    struct unpushed_ctx *u = arg;
    /* A writer did close one the journal holds: listed with those. */
    if (n->unsaved == CACHE_NEW && !in_journal(u, n->ino)) {
        note_named(u, n->ino);
        one_unpushed(u, n->path, "new file no writer ever closed");
    }
    return 0;
}

/* Whether row is a file of the store being listed (called with an open
 * file's lock held: the cache's comes after it). */
static bool of_store(void *arg, uint64_t row)
{
    const struct unpushed_ctx *u = arg;
    char id[CACHE_ID_MAX];
    return cache_store_of(u->c, row, id) == 0 && strcmp(id, u->store_id) == 0;
}

/* Names the files of the store a writer holds open with an edit no close
 * or fsync has saved yet (ofile_unsaved_rows): nothing of such an edit is
 * in the cache's lists (only saved content is pushed), yet it is not in
 * the store.  Not one removed since (no store can have its edit), nor one
 * a list of the cache names (the journal's and the refused list too: a
 * refused file's new edit is refused content until saved otherwise).  Returns how many it
 * named or counted. */
static size_t name_unsaved_open(struct unpushed_ctx *u)
{
    enum { ROWS_MAX = 4096 };
    struct ofile_unsaved *rows = NULL;
    size_t n = ofile_unsaved_rows(of_store, u, &rows, ROWS_MAX), k = 0;
    if (u->nnamed)
        qsort(u->named, u->nnamed, sizeof(*u->named), cmp_ino);
    for (size_t i = 0; i < n; i++) {
        if (!rows || i >= ROWS_MAX) {
            u->more++; /* counted, not named */
            k++;
            continue;
        }
        uint64_t row = rows[i].row;
        if (in_journal(u, row) ||
            (u->nnamed && bsearch(&row, u->named, u->nnamed, sizeof(*u->named), cmp_ino)))
            continue;
        struct cnode node = {0};
        int rc = cache_getattr(u->c, row, &node);
        if (rc == 0 && !node.unlinked && node.state != CNODE_REFUSED) {
            /* A sync brought the store's version under the edit: its save
             * will find the cache moved (openfile.c ofile_flush). */
            bool moved = rows[i].from[0] && strcmp(rows[i].from, node.sha) != 0;
            one_unpushed(u, node.path,
                         moved ? "open for writing, its edit not saved yet and the store's "
                                 "version came since: the store wins, and its writer's close "
                                 "or fsync keeps the edit as a conflict record"
                               : "open for writing, its edit not saved yet: pushed once "
                                 "its writer closes or fsyncs it");
            k++;
        } else if (rc != 0) {
            u->more++; /* not known to be gone */
            k++;
        }
        cnode_clear(&node);
    }
    free(rows);
    return k;
}

size_t daemon_list_unsaved_open(struct cache *c, const char *store_id, const char *mount_path,
                                FILE *out)
{
    struct unpushed_ctx u = {.c = c, .store_id = store_id, .out = out, .mount_path = mount_path};
    size_t k = name_unsaved_open(&u);
    if (u.more)
        fprintf(out, "  not pushed: %u more\n", u.more);
    return k;
}

void daemon_list_unpushed(struct cache *c, const char *store_id, const char *mount_path,
                          bool final, FILE *out)
{
    /* The journal first: the saver may apply it again meanwhile (room came
     * back), and its files are then rows too, which the row lists skip,
     * so each file is named once. */
    struct cache_jfile *jf = NULL;
    size_t njf = 0;
    if (cache_journal_files(c, store_id, &jf, &njf) != 0)
        njf = 0; /* counted in the report's line still */
    struct unpushed_ctx u = {.c = c, .store_id = store_id, .out = out, .mount_path = mount_path,
                             .final = final, .jf = jf, .njf = njf};
    cache_unpushed_files(c, store_id, dirty_fn, &u);
    name_dirty(&u);
    cache_store_files(c, store_id, never_closed_fn, &u);
    /* The final sync kept such edits as records (finalsync.c logs them). */
    if (!final)
        (void)name_unsaved_open(&u);
    free(u.named);
    for (size_t i = 0; i < njf; i++)
        one_unpushed(&u, jf[i].path, "closed while the cache's disk was full, in its journal of "
                     "closed files");
    cache_jfiles_free(jf, njf);
    struct cache_tombstone *t = NULL;
    size_t nt = 0;
    if (cache_tombstones(c, store_id, &t, &nt) == 0) {
        for (size_t i = 0; i < nt; i++)
            if (t[i].mode == CACHE_DEL_ENABLED) /* the others are never sent, by design */
                one_unpushed(&u, t[i].base_path ? t[i].base_path : t[i].memory_id,
                             "removed locally, not yet deleted in the store");
        cache_tombstones_free(t, nt);
    }
    struct cache_refused *rf = NULL;
    size_t nr = 0;
    if (cache_refused_files(c, store_id, &rf, &nr) == 0) {
        for (size_t i = 0; i < nr; i++) {
            char why[600];
            snprintf(why, sizeof(why), "refused by the server: %s", rf[i].why ? rf[i].why : "?");
            one_unpushed(&u, rf[i].path, why);
        }
        cache_refused_free(rf, nr);
    }
    if (u.more)
        fprintf(out, "  not pushed: %u more\n", u.more);
}
