/* warm.c - the set of cache rows whose content a read-only open may take
 * as present without asking the cache (ops.c op_open): a row enters when
 * a load found its bytes, and leaves when the sync engine changes its
 * content or removes it (notify.c, before the kernel is told).  Local
 * writes keep a row warm: the bytes they save are in the cache.
 *
 * Being wrong costs no correctness, only a later download: an open that
 * skipped the load gets an unloaded open file, and its first read loads
 * (and, if the bytes went, downloads) them (op_read).  So the set needs no
 * transaction with the cache, only its own lock.
 *
 * An open-addressing table of row numbers (0 never is a row: empty;
 * UINT64_MAX: a removed slot), at most half full counting removed slots,
 * rebuilt when it passes that. */
#include "warm.h"

#include <pthread.h>
#include <stdlib.h>

#define EMPTY 0
#define GONE UINT64_MAX

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *slot;
static size_t cap, used; /* used counts live and removed slots */

static size_t hash(uint64_t row)
{
    row ^= row >> 33;
    row *= 0xff51afd7ed558ccdULL;
    row ^= row >> 33;
    return (size_t)row;
}

/* The slot holding row, or SIZE_MAX. */
static size_t find(uint64_t row)
{
    if (!cap)
        return SIZE_MAX;
    for (size_t i = hash(row) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (slot[i] == row)
            return i;
        if (slot[i] == EMPTY)
            return SIZE_MAX;
    }
}

static bool grow(void)
{
    size_t live = 0;
    for (size_t i = 0; i < cap; i++)
        live += slot[i] != EMPTY && slot[i] != GONE;
    size_t ncap = cap ? cap : 256;
    while (4 * (live + 1) > ncap)
        ncap *= 2;
    uint64_t *v = calloc(ncap, sizeof(*v));
    if (!v)
        return false;
    for (size_t i = 0; i < cap; i++) {
        if (slot[i] == EMPTY || slot[i] == GONE)
            continue;
        size_t j = hash(slot[i]) & (ncap - 1);
        while (v[j] != EMPTY)
            j = (j + 1) & (ncap - 1);
        v[j] = slot[i];
    }
    free(slot);
    slot = v;
    cap = ncap;
    used = live;
    return true;
}

bool warm_has(uint64_t row)
{
    pthread_mutex_lock(&lock);
    bool has = row != EMPTY && row != GONE && find(row) != SIZE_MAX;
    pthread_mutex_unlock(&lock);
    return has;
}

void warm_add(uint64_t row)
{
    if (row == EMPTY || row == GONE)
        return;
    pthread_mutex_lock(&lock);
    if (find(row) == SIZE_MAX && (2 * (used + 1) <= cap || grow())) {
        size_t i = hash(row) & (cap - 1);
        while (slot[i] != EMPTY && slot[i] != GONE)
            i = (i + 1) & (cap - 1);
        if (slot[i] == EMPTY)
            used++;
        slot[i] = row;
    }
    pthread_mutex_unlock(&lock);
}

void warm_drop(uint64_t row)
{
    pthread_mutex_lock(&lock);
    size_t i = row == EMPTY || row == GONE ? SIZE_MAX : find(row);
    if (i != SIZE_MAX)
        slot[i] = GONE;
    pthread_mutex_unlock(&lock);
}
