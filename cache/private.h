/* private.h - files and directories no other account can touch: the
 * runtime directory and its lock files and sockets, the cache directory,
 * the cache database, the log, memstored's database (private.c).
 *
 * Every function here opens with O_NOFOLLOW and checks what it opened with
 * fstat, so a symbolic link, a file of another owner or a directory others
 * can write is never followed, truncated or written.  Reasons for a
 * refusal are English sentences naming the path, for the user to act on. */
#ifndef MFS_PRIVATE_H
#define MFS_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* What priv_dir does with a directory that exists and is ours but that
 * others may read or enter (group or other bits set). */
enum priv_fix { PRIV_REFUSE, PRIV_FIX };

/* Makes sure dir is a directory owned by the effective uid with no group
 * or other permission bits.  A missing dir is created with mode 0700 (its
 * parent must exist).  A symbolic link, a non-directory, a directory of
 * another owner, or (with PRIV_REFUSE) one with group/other bits, is
 * refused: -EPERM (-ENOTDIR, -ELOOP) with the reason in why.  Returns 0,
 * 1 when it created the directory, 2 when it took group/other bits away
 * (PRIV_FIX; why then says what it changed), or a negative errno. */
int priv_dir(const char *dir, enum priv_fix fix, char *why, size_t whylen);

/* mkdir -p of dir: missing parents and dir itself are created 0700 (the
 * parents are only created, never checked), then priv_dir(dir, fix). */
int priv_dir_p(const char *dir, enum priv_fix fix, char *why, size_t whylen);

/* Opens a regular file for a private use: flags are open(2)'s (O_CREAT
 * creates it mode 0600, O_EXCL as usual); O_NOFOLLOW and O_CLOEXEC are
 * added.  The file must be a regular file with one link, owned by the
 * effective uid; group/other bits on it are taken away.  Returns the fd,
 * or a negative errno with the reason in why (may be NULL). */
int priv_open(const char *path, int flags, char *why, size_t whylen);

/* Makes an existing file private as priv_open does, without keeping it
 * open; a missing file is not an error (0). */
int priv_fix_file(const char *path, char *why, size_t whylen);

/* True when path (not followed) exists, is owned by the effective uid and
 * is of the type of `type` (S_IFREG, S_IFSOCK...): what may be removed by
 * its owner. */
bool priv_owned(const char *path, mode_t type);

/* Removes path when priv_owned(path, type); returns 0, -ENOENT, -EPERM
 * (exists but is not ours or not of that type) or the unlink's errno. */
int priv_unlink(const char *path, mode_t type);

#endif
