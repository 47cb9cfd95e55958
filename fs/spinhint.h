/* spinhint.h - whether the request loop should poll the device after
 * answering a request of a given kind (fs/fsloop.c).
 *
 * The loop polls the device for a short window after each answer, so
 * that the next request of a burst is taken without a wake-up.  That
 * poll pays after a LOOKUP (a CREATE follows at once) and is wasted
 * after the last request of an operation (a reader's RELEASE when the
 * next file is opened 70 us later, an editor's RENAME before its process
 * exits), and on a small machine it takes a CPU that the caller's
 * processes could use (measured in docs/architecture.md).
 *
 * A 2-bit saturating counter per opcode of the request just answered, as
 * a branch predictor keeps per branch: it counts up when the next request
 * came within the window and down when it did not, and the loop polls
 * while it is 2 or more.  Every counter starts at 3 (poll), so a burst
 * behaves as without the hint; two misses in a row stop the polls after
 * that kind of request, two hits bring them back.  When the loop did not
 * poll it still learns, from the time the next request took to be read;
 * that time includes the thread's wake-up, so the window is doubled for
 * it (SPINHINT_SLEPT_FACTOR).
 *
 * Invariants: counters stay in 0..3; any opcode maps to a slot (those
 * past SPINHINT_OPS share the last one).  Updates are relaxed atomics:
 * the leader changes threads, and a lost update only delays learning. */
#ifndef MEMSTOREFS_SPINHINT_H
#define MEMSTOREFS_SPINHINT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SPINHINT_OPS 64
#define SPINHINT_SLEPT_FACTOR 2

struct spinhint {
    _Atomic uint8_t c[SPINHINT_OPS];
};

static inline unsigned spinhint_slot(uint32_t opcode)
{
    return opcode < SPINHINT_OPS ? opcode : SPINHINT_OPS - 1;
}

static inline void spinhint_init(struct spinhint *h)
{
    for (unsigned i = 0; i < SPINHINT_OPS; i++)
        atomic_store_explicit(&h->c[i], 3, memory_order_relaxed);
}

/* Whether to poll after answering a request of this opcode. */
static inline bool spinhint_poll(const struct spinhint *h, uint32_t opcode)
{
    return atomic_load_explicit(&h->c[spinhint_slot(opcode)], memory_order_relaxed) >= 2;
}

/* After answering a request of this opcode, the next one was read gap_us
 * later; polled: whether the loop polled for window_us meanwhile. */
static inline void spinhint_learn(struct spinhint *h, uint32_t opcode, int64_t gap_us,
                                  bool polled, int64_t window_us)
{
    int64_t limit = polled ? window_us : window_us * SPINHINT_SLEPT_FACTOR;
    _Atomic uint8_t *c = &h->c[spinhint_slot(opcode)];
    uint8_t v = atomic_load_explicit(c, memory_order_relaxed);
    if (gap_us <= limit)
        v = v < 3 ? v + 1 : 3;
    else
        v = v > 0 ? v - 1 : 0;
    atomic_store_explicit(c, v, memory_order_relaxed);
}

#endif
