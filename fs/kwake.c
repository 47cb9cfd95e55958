/* kwake.c - whether the kernel wakes the daemon where the request was
 * made, as some kernels' fuse module offers (its `wake_here` parameter,
 * /sys/module/fuse/parameters/wake_here, a host setting only root
 * changes; what we know of it is its measured effect).  Also the reader
 * of the fuse module's other boolean parameters (kwake_fuse_param: the
 * mount reads allow_sys_admin_access, fsmount.c).
 *
 * Why the daemon cares: the request loop (fsloop.c) polls the device for
 * a short window after each answer, so that the next request of a burst
 * is read without a wake-up.  That pays while a wake-up is dear (10-20
 * us on a small virtual machine, as without `wake_here`: the poll was
 * measured to pay there).  With `wake_here` set, a round trip costs
 * about 4 us instead of 17, and a poll only keeps the CPU from the
 * caller whose next request it waits for: measured, creates, overwrites,
 * reads and `sed -i` are all faster without it (docs/architecture.md,
 * "Performance").
 *
 * The parameter can change while the daemon runs, so it is read again at
 * most once a second, by whichever thread asks first after that (a
 * request loop's leader, or `status`).  On a kernel without it (no such
 * file: the fuse module, loaded since a store is mounted, has no such
 * parameter) the loop polls as before and the file is never looked for
 * again; a file that cannot be read counts as N.
 *
 * Invariants: `state` and `read_at` are process-wide relaxed atomics;
 * one thread at a time reads the file (it wins the exchange of
 * `read_at`), the others keep the value read before. */
#include "kwake.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define KWAKE_EVERY_US 1000000

static int state = -2;              /* -2: never read */
static int64_t read_at = INT64_MIN; /* when it was last read (us) */

int kwake_fuse_param(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "/sys/module/fuse/parameters/%s", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? -1 : 0;
    char c = 0;
    ssize_t n = read(fd, &c, 1);
    close(fd);
    return n == 1 && (c == 'Y' || c == 'y' || c == '1') ? 1 : 0;
}

int kwake_state(int64_t now_us)
{
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (s == -1)
        return -1;
    int64_t at = __atomic_load_n(&read_at, __ATOMIC_RELAXED);
    if (s != -2 && now_us - at < KWAKE_EVERY_US)
        return s;
    if (!__atomic_compare_exchange_n(&read_at, &at, now_us, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return s == -2 ? 0 : s; /* another thread reads it */
    s = kwake_fuse_param("wake_here");
    __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    return s;
}
