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
 * An entry lasts an hour: then an open looks again, which also refreshes
 * the file's place in the eviction order of --cache-max-size (ops_load).
 *
 * An open-addressing table of row numbers (0 never is a row: empty;
 * UINT64_MAX: a removed slot) with the time each entered, at most half
 * full counting removed slots, rebuilt when it passes that. */
#include "warm.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define EMPTY 0
#define GONE UINT64_MAX
#define TTL_S 3600

struct entry {
    uint64_t row;
    int64_t at; /* CLOCK_MONOTONIC seconds it entered */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *slot;
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
        if (slot[i].row == row)
            return i;
        if (slot[i].row == EMPTY)
            return SIZE_MAX;
    }
}

static bool grow(void)
{
    size_t live = 0;
    for (size_t i = 0; i < cap; i++)
        live += slot[i].row != EMPTY && slot[i].row != GONE;
    size_t ncap = cap ? cap : 256;
    while (4 * (live + 1) > ncap)
        ncap *= 2;
    struct entry *v = calloc(ncap, sizeof(*v));
    if (!v)
        return false;
    for (size_t i = 0; i < cap; i++) {
        if (slot[i].row == EMPTY || slot[i].row == GONE)
            continue;
        size_t j = hash(slot[i].row) & (ncap - 1);
        while (v[j].row != EMPTY)
            j = (j + 1) & (ncap - 1);
        v[j] = slot[i];
    }
    free(slot);
    slot = v;
    cap = ncap;
    used = live;
    return true;
}

static int64_t now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec;
}

bool warm_has(uint64_t row)
{
    if (row == EMPTY || row == GONE)
        return false;
    int64_t now = now_s();
    pthread_mutex_lock(&lock);
    size_t i = find(row);
    bool has = i != SIZE_MAX && now - slot[i].at < TTL_S;
    pthread_mutex_unlock(&lock);
    return has;
}

void warm_add(uint64_t row)
{
    if (row == EMPTY || row == GONE)
        return;
    int64_t now = now_s();
    pthread_mutex_lock(&lock);
    size_t at = find(row);
    if (at != SIZE_MAX) {
        slot[at].at = now;
    } else if (2 * (used + 1) <= cap || grow()) {
        size_t i = hash(row) & (cap - 1);
        while (slot[i].row != EMPTY && slot[i].row != GONE)
            i = (i + 1) & (cap - 1);
        if (slot[i].row == EMPTY)
            used++;
        slot[i] = (struct entry){row, now};
    }
    pthread_mutex_unlock(&lock);
}

void warm_drop(uint64_t row)
{
    pthread_mutex_lock(&lock);
    size_t i = row == EMPTY || row == GONE ? SIZE_MAX : find(row);
    if (i != SIZE_MAX)
        slot[i].row = GONE;
    pthread_mutex_unlock(&lock);
}
