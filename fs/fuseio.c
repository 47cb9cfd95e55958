/* fuseio.c - the daemon's own reads and writes on /dev/fuse (libfuse's
 * custom I/O hooks): it counts the kernel's requests by opcode for
 * `status`, and it accepts FUSE_HANDLE_KILLPRIV_V2, which libfuse 3.14
 * cannot negotiate.
 *
 * Why KILLPRIV_V2: without it the kernel asks the daemon for the file's
 * `security.capability` attribute (a GETXATTR round trip) before every
 * write(2), because only the attribute tells it whether privileges must
 * be dropped.  With it, the file system promises to drop set-user-ID,
 * set-group-ID and capabilities itself, and the kernel marks an inode
 * S_NOSEC after its first check, so later writes ask nothing.  memstorefs
 * keeps that promise trivially: its modes never carry set-ID bits (a
 * chmod that changes the mode is EPERM, fs/ops_write.c) and no attribute
 * can be set (fs/xattr.c), so there is never anything to drop.
 *
 * How: the reply to FUSE_INIT is the first write on the device.  read()
 * notes the INIT request's unique id and whether the kernel offered the
 * flag; writev() adds the flag to the reply with that id, in a copy of
 * libfuse's buffer (a reply larger than this kernel header's
 * fuse_init_out goes as it is).  Nothing else is changed; every other request and
 * reply passes through as it is.
 *
 * Invariants: the counters are relaxed atomics (statistics only); the
 * INIT bookkeeping is written by the one thread that reads INIT, before
 * any other request can arrive (the kernel sends nothing else until INIT
 * is answered). */
#include "fuseio.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs.h"

static const char *const op_names[FUSEIO_OPS] = {
    [FUSE_LOOKUP] = "LOOKUP",       [FUSE_FORGET] = "FORGET",     [FUSE_GETATTR] = "GETATTR",
    [FUSE_SETATTR] = "SETATTR",     [FUSE_MKDIR] = "MKDIR",       [FUSE_UNLINK] = "UNLINK",
    [FUSE_RMDIR] = "RMDIR",         [FUSE_RENAME] = "RENAME",     [FUSE_OPEN] = "OPEN",
    [FUSE_READ] = "READ",           [FUSE_WRITE] = "WRITE",       [FUSE_STATFS] = "STATFS",
    [FUSE_RELEASE] = "RELEASE",     [FUSE_FSYNC] = "FSYNC",       [FUSE_SETXATTR] = "SETXATTR",
    [FUSE_GETXATTR] = "GETXATTR",   [FUSE_LISTXATTR] = "LISTXATTR",
    [FUSE_REMOVEXATTR] = "REMOVEXATTR", [FUSE_FLUSH] = "FLUSH",  [FUSE_INIT] = "INIT",
    [FUSE_OPENDIR] = "OPENDIR",     [FUSE_READDIR] = "READDIR",   [FUSE_RELEASEDIR] = "RELEASEDIR",
    [FUSE_FSYNCDIR] = "FSYNCDIR",   [FUSE_ACCESS] = "ACCESS",     [FUSE_CREATE] = "CREATE",
    [FUSE_INTERRUPT] = "INTERRUPT", [FUSE_DESTROY] = "DESTROY",   [FUSE_BATCH_FORGET] = "BATCH_FORGET",
    [FUSE_FALLOCATE] = "FALLOCATE", [FUSE_READDIRPLUS] = "READDIRPLUS", [FUSE_RENAME2] = "RENAME2",
    [FUSE_LSEEK] = "LSEEK",         [FUSE_MKNOD] = "MKNOD",       [FUSE_SYMLINK] = "SYMLINK",
    [FUSE_LINK] = "LINK",           [FUSE_READLINK] = "READLINK", [FUSE_IOCTL] = "IOCTL",
    [FUSE_POLL] = "POLL",           [FUSE_COPY_FILE_RANGE] = "COPY_FILE_RANGE",
};

const char *fuseio_op_name(unsigned op)
{
    return op < FUSEIO_OPS && op_names[op] ? op_names[op] : NULL;
}

/* libfuse passes the session's userdata to the hooks: the store. */
static struct fuseio *io_of(void *userdata)
{
    return &((struct fs_store *)userdata)->fio;
}

/* (fd, the session's, may be closed already: io->fd is read instead.) */
static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
    (void)fd;
    struct fuseio *io = io_of(userdata);
    ssize_t n = read(io->fd, buf, len);
    if (n < (ssize_t)sizeof(struct fuse_in_header))
        return n;
    const struct fuse_in_header *in = buf;
    unsigned op = in->opcode < FUSEIO_OPS ? in->opcode : FUSEIO_OPS - 1;
    __atomic_add_fetch(&io->count[op], 1, __ATOMIC_RELAXED);
    if (in->opcode == FUSE_INIT &&
        (size_t)n >= sizeof(*in) + offsetof(struct fuse_init_in, flags) + sizeof(uint32_t)) {
        const struct fuse_init_in *arg = (const void *)(in + 1);
        io->init_unique = in->unique;
        io->init_offered = (arg->flags & FUSE_HANDLE_KILLPRIV_V2) != 0;
    }
    return n;
}

/* Whether iov is the reply to the INIT request read, with room for flags. */
static bool is_init_reply(const struct fuseio *io, const struct iovec *iov, int count)
{
    if (!io->init_unique || count < 2 || iov[0].iov_len < sizeof(struct fuse_out_header) ||
        iov[1].iov_len < offsetof(struct fuse_init_out, flags) + sizeof(uint32_t))
        return false;
    const struct fuse_out_header *out = iov[0].iov_base;
    return out->unique == io->init_unique;
}

static ssize_t io_writev(int session_fd, struct iovec *iov, int count, void *userdata)
{
    (void)session_fd;
    struct fuseio *io = io_of(userdata);
    int fd = io->fd;
    if (!is_init_reply(io, iov, count))
        return writev(fd, iov, count);
    io->init_unique = 0;
    const struct fuse_out_header *out = iov[0].iov_base;
    /* The reply with the flag added, in a copy: libfuse's buffer stays. */
    struct fuse_init_out arg;
    if (out->error != 0 || !io->init_offered || iov[1].iov_len > sizeof(arg))
        return writev(fd, iov, count);
    memcpy(&arg, iov[1].iov_base, iov[1].iov_len);
    arg.flags |= FUSE_HANDLE_KILLPRIV_V2;
    struct iovec v[count];
    memcpy(v, iov, sizeof(v));
    v[1].iov_base = &arg;
    ssize_t n = writev(fd, v, count);
    if (n >= 0)
        __atomic_store_n(&io->killpriv, true, __ATOMIC_RELAXED);
    return n;
}

int fuseio_attach(struct fs_store *s)
{
    static const struct fuse_custom_io ops = {.read = io_read, .writev = io_writev};
    s->fio.fd = fcntl(fuse_session_fd(s->se), F_DUPFD_CLOEXEC, 3);
    if (s->fio.fd < 0)
        return -errno;
    /* The session keeps its mounted descriptor; only the hooks change. */
    int rc = fuse_session_custom_io(s->se, &ops, fuse_session_fd(s->se));
    if (rc)
        fuseio_detach(s);
    return rc;
}

void fuseio_detach(struct fs_store *s)
{
    if (s->fio.fd >= 0)
        close(s->fio.fd);
    s->fio.fd = -1;
}

void fuseio_counts(const struct fs_store *s, uint64_t out[FUSEIO_OPS])
{
    for (unsigned i = 0; i < FUSEIO_OPS; i++)
        out[i] = __atomic_load_n(&s->fio.count[i], __ATOMIC_RELAXED);
}
