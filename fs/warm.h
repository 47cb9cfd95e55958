/* warm.h - the files whose content is known to be in the cache, so that a
 * read-only open needs no cache lookup (warm.c). */
#ifndef MFS_WARM_H
#define MFS_WARM_H

#include <stdbool.h>
#include <stdint.h>

/* Whether row's current content was found in the cache (by a load) and
 * nothing changed it remotely since. */
bool warm_has(uint64_t row);
/* After a load of row's content from the cache. */
void warm_add(uint64_t row);
/* Its content changed remotely (or it is gone): the next open looks. */
void warm_drop(uint64_t row);

#endif
