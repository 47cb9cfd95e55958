/* memint.h - what memories.c shares with memlist.c: the column list and
 * JSON form of a memory row, and a loaded row. */
#ifndef MSD_MEMINT_H
#define MSD_MEMINT_H

#include "msd.h"

/* Column order mem_json() reads. */
#define MEM_COLS                                                                   \
    "id, store_id, path, content, sha, size, version_id, created_at, updated_at"

/* A memory loaded for a write.  path/content are malloc'd (mem_row_release). */
struct mem_row {
    char id[MSD_ID_MAX];
    char sha[72];
    char *path;
    char *content;
    size_t content_len;
};

/* The memory object of a row selected with MEM_COLS (content null unless
 * full).  Caller deletes; NULL on ENOMEM. */
cJSON *mem_json(sqlite3_stmt *st, bool full);
void mem_row_release(struct mem_row *m);

#endif
