/* xattr.h - the extended attribute operations of a mount (xattr.c): the
 * read-only user.memstore.* attributes of every file. */
#ifndef MFS_FS_XATTR_H
#define MFS_FS_XATTR_H

#include "fs.h"

void xattr_get(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void xattr_list(fuse_req_t req, fuse_ino_t ino, size_t size);
void xattr_set(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
               int flags);
void xattr_remove(fuse_req_t req, fuse_ino_t ino, const char *name);

#endif
