/* fuseio.h - the daemon's reads and writes on /dev/fuse: request counts
 * by opcode, and FUSE_HANDLE_KILLPRIV_V2 (fuseio.c). */
#ifndef MFS_FUSEIO_H
#define MFS_FUSEIO_H

#include <stdbool.h>
#include <stdint.h>

/* Opcodes counted one by one; anything above lands in the last slot. */
#define FUSEIO_OPS 64

struct fuseio {
    int fd;                     /* the loop's own descriptor of the device, a
                                 * dup of the session's (-1 before attach):
                                 * libfuse closes the session's at unmount,
                                 * while loop threads may still read or
                                 * answer, and its number may then be reused
                                 * by any file; this one is closed only after
                                 * the loop is joined (fuseio_detach) */
    uint64_t count[FUSEIO_OPS]; /* requests read, by opcode (relaxed atomics) */
    uint64_t polls;             /* polls of the device after an answer
                                 * (fsloop.c; relaxed atomic) */
    uint64_t init_unique;       /* the INIT request awaiting its reply, or 0 */
    bool init_offered;          /* the kernel offered FUSE_HANDLE_KILLPRIV_V2 */
    bool killpriv;              /* accepted: later writes skip the GETXATTR */
};

struct fs_store;

/* Installs the hooks on the store's mounted session (s->se), which read
 * and write s->fio.fd. 0 or -errno. */
int fuseio_attach(struct fs_store *s);
/* Closes s->fio.fd: once nothing reads or answers on it (the loop joined). */
void fuseio_detach(struct fs_store *s);
/* A copy of the store's request counts. */
void fuseio_counts(const struct fs_store *s, uint64_t out[FUSEIO_OPS]);
/* "LOOKUP", "WRITE", ... for an opcode, NULL for one without a name. */
const char *fuseio_op_name(unsigned op);

#endif
