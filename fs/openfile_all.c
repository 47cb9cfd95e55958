/* openfile_all.c - the open-file table walked whole, for the stores being
 * unmounted, synced by hand or synced (finalsync.c, daemon_io.c,
 * notify.c): the edits no flush saved yet, counted (the unmount's grace),
 * listed (`sync --wait`) or kept as records (the unmount), and the files
 * writers hold open (a sync's mapped pages), each open file under its own
 * lock.
 *
 * Invariants: an entry's lock comes before the cache's, never after the
 * table's: ofile_take_all takes references under the table lock, and the
 * work is done without it, an entry at a time; every reference taken is
 * given back (ofile_put). */
#include "openfile.h"

#include <stdlib.h>
#include <string.h>

#include "cache.h"

/* An edit no flush saved, in one of mine's files, not kept yet. */
static bool unsaved_locked(struct ofile *f, ofile_mine_fn mine, void *arg)
{
    return f->loaded && f->dirty && !f->kept && mine(arg, f->row);
}

size_t ofile_unsaved_count(ofile_mine_fn mine, void *arg)
{
    size_t n = 0, k = 0;
    struct ofile **v = ofile_take_all(&n);
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&v[i]->lock);
        k += unsaved_locked(v[i], mine, arg);
        pthread_mutex_unlock(&v[i]->lock);
        ofile_put(v[i]);
    }
    free(v);
    return k;
}

size_t ofile_unsaved_rows(ofile_mine_fn mine, void *arg, struct ofile_unsaved **rows, size_t max)
{
    size_t n = 0, k = 0;
    struct ofile **v = ofile_take_all(&n);
    *rows = max && n ? malloc((n < max ? n : max) * sizeof(**rows)) : NULL;
    for (size_t i = 0; i < n; i++) {
        struct ofile *f = v[i];
        pthread_mutex_lock(&f->lock);
        if (ofile_live_writers_locked(f) && !f->lost && !f->cut && unsaved_locked(f, mine, arg)) {
            if (*rows && k < max) {
                (*rows)[k].row = f->row;
                memcpy((*rows)[k].from, f->sha, sizeof((*rows)[k].from)); /* loaded */
            }
            k++;
        }
        pthread_mutex_unlock(&f->lock);
        ofile_put(f);
    }
    free(v);
    return k;
}

size_t ofile_writing_rows(ofile_mine_fn mine, void *arg, uint64_t **rows)
{
    size_t n = 0, k = 0;
    struct ofile **v = ofile_take_all(&n);
    *rows = n ? malloc(n * sizeof(**rows)) : NULL;
    for (size_t i = 0; i < n; i++) {
        struct ofile *f = v[i];
        pthread_mutex_lock(&f->lock);
        if (*rows && f->writers && mine(arg, f->row))
            (*rows)[k++] = f->row;
        pthread_mutex_unlock(&f->lock);
        ofile_put(f);
    }
    free(v);
    if (!k) {
        free(*rows);
        *rows = NULL;
    }
    return k;
}

size_t ofile_keep_unsaved_all(struct cache *c, ofile_mine_fn mine, ofile_lost_fn lost,
                              void *arg)
{
    /* An entry's lock comes before the cache's, never after the table's:
     * references are taken under the table lock, the work done without it. */
    size_t n = 0, kept = 0;
    struct ofile **v = ofile_take_all(&n);
    for (size_t i = 0; i < n; i++) {
        struct ofile *f = v[i];
        pthread_mutex_lock(&f->lock);
        if (unsaved_locked(f, mine, arg)) {
            int rc = cache_keep_unsaved(c, f->row, f->buf ? f->buf : "", f->len,
                                        CACHE_CONFLICT_UNSAVED);
            if (rc == 0) {
                kept++;
                f->kept = true;
            } else {
                lost(arg, f->row, rc);
            }
        }
        pthread_mutex_unlock(&f->lock);
        ofile_put(f);
    }
    free(v);
    return kept;
}
