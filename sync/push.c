/* push.c - step 5 of a sync (cycle.c): the planned writes go out with many
 * in flight (api_memories_write), those that free a path (deletes,
 * renames) in a first batch so that a create or rename onto a path freed
 * in the same sync finds it free, and each result is recorded
 * (rec_classify): the new baseline, a dropped tombstone, a refusal kept
 * until the content changes, or nothing (the next sync retries).  Runs
 * under the store's cycle_lock, like the rest of the sync. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "cycle_int.h"
#include "log.h"

/* Writes that free a path (deletes, renames) go out before the rest, so
 * a create or rename onto a path freed in the same sync does not meet the
 * old memory still there (a 409 path conflict, retried a sync later). */
static bool frees_path(const struct job *j)
{
    return j->action == REC_DELETE || (j->action == REC_UPDATE && j->path);
}

/* Step 5: send the planned writes of one phase (0: those that free paths,
 * 1: the rest) and record each result. */
static void send_phase(struct syncer *s, struct sstore *st, const struct remote *r,
                       struct plan *p, struct syncer_report *rep, int phase)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        n += frees_path(&p->v[i]) == (phase == 0);
    if (!n)
        return;
    struct api_write *w = calloc(n, sizeof(*w));
    const struct job **jv = calloc(n, sizeof(*jv));
    if (!w || !jv) {
        free(w);
        free(jv);
        rep->failed += (unsigned)n;
        return;
    }
    for (size_t i = 0, k = 0; i < p->n; i++)
        if (frees_path(&p->v[i]) == (phase == 0))
            jv[k++] = &p->v[i];
    for (size_t i = 0; i < n; i++) {
        const struct job *j = jv[i];
        switch (j->action) {
        case REC_DELETE:
            w[i] = (struct api_write){.op = API_WRITE_DELETE, .memory_id = j->memory_id,
                                      .sha = j->sha};
            break;
        case REC_UPDATE:
            w[i] = (struct api_write){.op = API_WRITE_UPDATE, .memory_id = j->memory_id,
                                      .path = j->path, .content = j->content,
                                      .content_len = j->content_len, .sha = j->expect};
            break;
        default:
            w[i] = (struct api_write){.op = API_WRITE_CREATE, .path = j->path,
                                      .content = j->content ? j->content : "",
                                      .content_len = j->content_len};
            break;
        }
        if (j->ino)
            cycle_sent_set(st, j->ino, j->sha); /* settled below, or by the next listing */
    }
    api_memories_write(s->h, st->id, w, n);

    for (size_t i = 0; i < n; i++) {
        const struct job *j = jv[i];
        const struct cache_remote *named =
            w[i].err == -EEXIST ? remote_find_id(r, w[i].e.conflicting_memory_id) : NULL;
        /* A create whose first answer was lost meets, on its retry, the
         * memory it made itself: that memory is newer than the listing, so
         * ask for it, to recognise our own bytes instead of a conflict. */
        struct api_fetch own = {0};
        if (w[i].err == -EEXIST && !named && w[i].attempts > 1 &&
            w[i].e.conflicting_memory_id[0] && j->action != REC_UPDATE) {
            own.memory_id = w[i].e.conflicting_memory_id;
            api_memories_fetch(s->h, st->id, &own, 1);
        }
        struct cache_remote fetched = {0};
        if (own.memory_id && !own.err && own.mem.path) {
            fetched = (struct cache_remote){own.mem.path, own.mem.id, own.mem.sha,
                                            (uint64_t)own.mem.size, own.mem.updated_ns};
            named = &fetched;
        }
        struct rec_write rw = {
            .action = j->action, .err = w[i].err, .attempts = w[i].attempts, .path = j->path,
            .sha = j->sha,
            .conflict_path = named ? named->path : w[i].e.conflicting_path,
            .conflict_sha = named ? named->sha : NULL,
        };
        struct rec_result res;
        rec_classify(&rw, &res);
        const char *path = j->where ? j->where : j->path ? j->path : "";
        if (res.msg) {
            char status[16];
            snprintf(status, sizeof(status), "%ld", w[i].e.status);
            log_event(res.level, res.msg, "memory_store_id", st->id, "path", path, "status",
                      w[i].e.status ? status : NULL,
                      "error_type", w[i].e.type[0] ? w[i].e.type : NULL,
                      "error", w[i].err ? strerror(-w[i].err) : NULL,
                      "detail", w[i].e.message[0] ? w[i].e.message : NULL, NULL);
        }
        if (j->ino && !res.keep_sent)
            cycle_sent_set(st, j->ino, NULL);
        switch (res.fu) {
        case REC_FU_DONE:
            if (j->action == REC_DELETE) {
                cache_tombstone_drop(s->c, st->id, j->memory_id);
                rep->deleted++;
            } else {
                cache_mark_synced_if(s->c, j->ino, j->node_id, w[i].mem.id, w[i].mem.sha,
                                     w[i].mem.path);
                if (j->tomb_id[0]) /* the memory it took over is this one now */
                    cache_tombstone_drop(s->c, st->id, j->tomb_id);
                rep->pushed++;
            }
            break;
        case REC_FU_ADOPT:
            if (j->ino && named)
                cache_mark_synced_if(s->c, j->ino, j->node_id, named->memory_id, named->sha,
                                     named->path);
            break;
        case REC_FU_GONE:
            cache_tombstone_drop(s->c, st->id, j->memory_id);
            break;
        case REC_FU_STORE_WINS:
            /* The next listing shows the remote change and pulls it; a
             * refused delete brings the memory back. */
            if (j->action == REC_DELETE)
                cache_tombstone_drop(s->c, st->id, j->memory_id);
            rep->conflicts++;
            break;
        case REC_FU_RECREATE:
            cache_forget_base(s->c, j->ino);
            if (j->tomb_id[0]) /* its memory is gone remotely */
                cache_tombstone_drop(s->c, st->id, j->tomb_id);
            rep->failed++;
            break;
        case REC_FU_REFUSED: {
            char why[400];
            snprintf(why, sizeof(why), "%s%s%s", w[i].e.type[0] ? w[i].e.type : strerror(-w[i].err),
                     w[i].e.message[0] ? ": " : "", w[i].e.message);
            cache_mark_refused(s->c, j->ino, j->sha, why);
            rep->refused++;
            break;
        }
        default:
            rep->failed++;
            break;
        }
        api_memory_clear(&own.mem);
        api_error_clear(&own.e);
    }
    for (size_t i = 0; i < n; i++)
        api_write_clear(&w[i]);
    free(w);
    free(jv);
}

void push_writes(struct syncer *s, struct sstore *st, const struct remote *r,
                        struct plan *p, struct syncer_report *rep)
{
    send_phase(s, st, r, p, rep, 0);
    send_phase(s, st, r, p, rep, 1);
}

