/* push.c - step 5 of a sync (cycle.c): the planned writes go out with many
 * in flight (api_memories_write), those that free a path (deletes,
 * renames) in a first batch so that a create or rename onto a path freed
 * in the same sync finds it free, and each result is recorded
 * (rec_classify): the new baseline, a dropped tombstone, a refusal kept
 * until the content changes, or nothing (the next sync retries).
 *
 * Every upload is recorded in the cache (cache_sent_add) before it goes
 * out, and its answer is applied through that record (cache_push_answered):
 * so an answer finds the file that owns the memory by then (after an
 * atomic save, a rename, a removal), and an upload whose answer is lost
 * (even one libcurl resent by itself: api_write.attempts counts every
 * request that reached the wire) is recognised by the next listing.  An
 * answer that names a memory another file has is refused.  Runs under the
 * store's cycle_lock, like the rest of the sync. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "cycle_int.h"
#include "log.h"

#define MSG_FOREIGN_ANSWER                                                                         \
    "the server answered an upload with a memory another file has; the answer is refused and "   \
    "the file kept"

/* Writes that free a path go out before the rest: the deletes first,
 * then the renames, then everything else, so a rename or create onto a
 * path freed in the same sync does not meet the old memory still there
 * (a 409 path conflict, retried a sync later: `rm a; mv b a` met it
 * whenever the rename overtook the delete). */
#define PHASES 3
static int phase_of(const struct job *j)
{
    if (j->action == REC_DELETE)
        return 0;
    return j->action == REC_UPDATE && j->path ? 1 : 2;
}

/* Records the uploads of the batch before they are sent. */
static void record_sent(struct cycle *cy, const struct job **jv, size_t n)
{
    struct cache_sent *v = calloc(n ? n : 1, sizeof(*v));
    size_t k = 0;
    for (size_t i = 0; v && i < n; i++) {
        const struct job *j = jv[i];
        if (!j->ino)
            continue;
        v[k].ino = j->ino;
        snprintf(v[k].memory_id, sizeof(v[k].memory_id), "%s",
                 j->action == REC_UPDATE ? j->memory_id : "");
        v[k].path = j->path ? j->path : j->where;
        snprintf(v[k].sha, sizeof(v[k].sha), "%s", j->sha);
        snprintf(v[k].node_id, sizeof(v[k].node_id), "%s", j->node_id);
        v[k].content = j->content;
        v[k].content_len = j->content_len;
        k++;
    }
    /* Without the records only the recognition of lost answers is missed:
     * the next listing decides as if none was lost (logged). */
    if (!v || cache_sent_add(cy->s->c, cy->st->id, v, k) != 0) {
        log_warn("cannot record the uploads going out; a lost answer may show as a conflict",
                 "memory_store_id", cy->st->id);
    } else {
        k = 0;
        for (size_t i = 0; i < n; i++)
            if (jv[i]->ino) {
                ((struct job *)jv[i])->resent = v[k].resent;
                ((struct job *)jv[i])->sent_id = v[k++].id;
            }
    }
    free(v);
}

/* Applies an upload's answer (memory m) to whichever file has it now;
 * whether m belongs to no file any more (recorded as a deletion). */
static bool answered(struct cycle *cy, const struct job *j, const char *memory_id,
                     const char *sha, const char *path)
{
    struct cache_answer a = {
        .sent_id = j->sent_id, .ino = j->ino,
        .written_id = j->action == REC_UPDATE ? j->memory_id : "", .node_id = j->node_id,
        .memory_id = memory_id, .sha = sha, .path = path,
    };
    struct cache_answer_result res;
    if (cache_push_answered(cy->s->c, cy->st->id, &a, &res) != 0)
        return false; /* the cache logged it; the next listing settles it */
    if (res.outcome == CACHE_ANS_FOREIGN)
        log_warn(MSG_FOREIGN_ANSWER, "memory_store_id", cy->st->id, "path", j->where,
                 "memory_id", memory_id);
    else if (res.outcome == CACHE_ANS_ORPHANED)
        log_debug("the file of an upload went while it was out; its memory is deleted",
                  "memory_store_id", cy->st->id, "path", j->where, "memory_id", memory_id);
    return res.outcome == CACHE_ANS_ORPHANED;
}

/* The file an upload belongs to now (its record follows atomic saves). */
static uint64_t owner(struct cycle *cy, const struct job *j)
{
    uint64_t ino = j->sent_id > 0 ? cache_sent_owner(cy->s->c, j->sent_id) : 0;
    return ino ? ino : j->ino;
}

static void settle(struct cycle *cy, const struct job *j)
{
    if (j->sent_id > 0)
        cache_sent_drop(cy->s->c, j->sent_id);
}

static void to_api(const struct job *j, struct api_write *w)
{
    switch (j->action) {
    case REC_DELETE:
        *w = (struct api_write){.op = API_WRITE_DELETE, .memory_id = j->memory_id, .sha = j->sha};
        break;
    case REC_UPDATE:
        *w = (struct api_write){.op = API_WRITE_UPDATE, .memory_id = j->memory_id,
                                .path = j->path, .content = j->content,
                                .content_len = j->content_len, .sha = j->expect};
        break;
    default:
        *w = (struct api_write){.op = API_WRITE_CREATE, .path = j->path,
                                .content = j->content ? j->content : "",
                                .content_len = j->content_len};
        break;
    }
}

/* One write's result, classified and recorded. */
static void record_result(struct cycle *cy, const struct job *j, struct api_write *w)
{
    struct syncer *s = cy->s;
    struct sstore *st = cy->st;
    struct syncer_report *rep = &cy->rep;
    const struct cache_remote *named =
        w->err == -EEXIST ? remote_find_id(&cy->r, w->e.conflicting_memory_id) : NULL;
    /* The same upload sent by an earlier round whose answers were all lost
     * counts as an earlier attempt: a round going on with a backlog
     * decides against the cache, where what it made does not show, and
     * sends it again (taken for another client's, its record went, and
     * an edit made before the next read lost to the store). */
    int attempts = w->attempts + (j->resent ? 1 : 0);
    /* A create whose first request applied but whose answer was lost meets,
     * on its retry, the memory it made itself: newer than the listing, so
     * ask for it, to recognise our own bytes instead of a conflict. */
    struct api_fetch own = {0};
    if (w->err == -EEXIST && !named && attempts > 1 && w->e.conflicting_memory_id[0] &&
        j->action != REC_UPDATE) {
        own.memory_id = w->e.conflicting_memory_id;
        api_memories_fetch(s->h, st->id, &own, 1);
    }
    struct cache_remote fetched = {0};
    if (own.memory_id && !own.err && own.mem.path) {
        fetched = (struct cache_remote){own.mem.path, own.mem.id, own.mem.sha,
                                        (uint64_t)own.mem.size, own.mem.updated_ns};
        named = &fetched;
    }
    struct rec_write rw = {
        .action = j->action, .err = w->err, .attempts = attempts, .path = j->path,
        .sha = j->sha,
        .conflict_path = named ? named->path : w->e.conflicting_path,
        .conflict_sha = named ? named->sha : NULL,
    };
    struct rec_result res;
    rec_classify(&rw, &res);
    /* A resent update refused on its precondition met our own lost one,
     * or another client's edit: the next read lists in full, as for the
     * store winning (the feed may have named that edit already). */
    if (j->resent && w->err == -ESTALE)
        st->feed.want_full = true;
    const char *path = j->where ? j->where : j->path ? j->path : "";
    /* A path the server's memories keep in conflict is tried at every
     * sync: said once per mount for the same file and content. */
    bool again = res.msg && strcmp(res.msg, REC_MSG_PATH_CONFLICT) == 0 &&
                 !cycle_first_time(st, res.msg, path, j->sha);
    if (res.msg && !again) {
        char status[16];
        snprintf(status, sizeof(status), "%ld", w->e.status);
        log_event(res.level, res.msg, "memory_store_id", st->id, "path", path, "status",
                  w->e.status ? status : NULL, "error_type", w->e.type[0] ? w->e.type : NULL,
                  "error", w->err ? strerror(-w->err) : NULL,
                  "detail", w->e.message[0] ? w->e.message : NULL, NULL);
    }
    switch (res.fu) {
    case REC_FU_DONE:
        if (j->action == REC_DELETE) {
            cache_tombstone_drop(s->c, st->id, j->memory_id);
            rep->deleted++;
        } else {
            /* An update of the content alone sent no path: the answer's
             * is the memory's now, which another client may have moved
             * after the listing.  The file's baseline keeps the path
             * this sync saw, so the next one finds that move and follows
             * it (the answer's path as baseline made the file look moved
             * here, and the next sync moved the memory back). */
            const char *base_path = j->action == REC_UPDATE && !j->path && j->where ? j->where
                                                                                : w->mem.path;
            bool orphaned = answered(cy, j, w->mem.id, w->mem.sha, base_path);
            /* The version this push made (user.memstore.version_id). */
            struct cache_vnote v = {w->mem.id, w->mem.sha, w->mem.version_id,
                                    w->mem.updated_ns};
            cache_versions_note(s->c, st->id, &v, 1);
            /* The memory it took over is this one now, unless the file
             * went while the upload was out: then the answer recorded that
             * very memory as a deletion, which stays. */
            if (j->tomb_id[0] && !(orphaned && strcmp(j->tomb_id, w->mem.id) == 0))
                cache_tombstone_drop(s->c, st->id, j->tomb_id);
            rep->pushed++;
        }
        break;
    case REC_FU_ADOPT:
        if (j->ino && named)
            answered(cy, j, named->memory_id, named->sha, named->path);
        break;
    case REC_FU_GONE:
        cache_tombstone_drop(s->c, st->id, j->memory_id);
        break;
    case REC_FU_STORE_WINS:
        /* The next listing shows the remote change and pulls it; a refused
         * delete brings the memory back.  A full one: the version the
         * upload met may be one the feed named already, while the file was
         * held or refused, and will not name again. */
        if (j->action == REC_DELETE)
            cache_tombstone_drop(s->c, st->id, j->memory_id);
        st->feed.want_full = true;
        settle(cy, j);
        rep->conflicts++;
        break;
    case REC_FU_RECREATE:
        /* Only while the file still has the memory it had when planned:
         * moved over a synced file meanwhile, it has that one's, which is
         * not gone. */
        cache_forget_base(s->c, owner(cy, j),
                          j->node_id[0] ? j->node_id : j->memory_id[0] ? j->memory_id : NULL);
        if (j->tomb_id[0]) /* its memory is gone remotely */
            cache_tombstone_drop(s->c, st->id, j->tomb_id);
        settle(cy, j);
        rep->failed++;
        break;
    case REC_FU_REFUSED: {
        char why[400];
        snprintf(why, sizeof(why), "%s%s%s", w->e.type[0] ? w->e.type : strerror(-w->err),
                 w->e.message[0] ? ": " : "", w->e.message);
        cache_mark_refused(s->c, owner(cy, j), j->sha, why);
        settle(cy, j);
        rep->refused++;
        break;
    }
    default:
        if (!res.keep_sent)
            settle(cy, j);
        rep->failed++;
        break;
    }
    api_memory_clear(&own.mem);
    api_error_clear(&own.e);
}

/* Sends the planned writes of one phase (phase_of) and records each
 * result. */
static void send_phase(struct cycle *cy, int phase)
{
    struct plan *p = &cy->plan;
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        n += phase_of(&p->v[i]) == phase;
    if (!n)
        return;
    struct api_write *w = calloc(n, sizeof(*w));
    const struct job **jv = calloc(n, sizeof(*jv));
    if (!w || !jv) {
        free(w);
        free(jv);
        cy->rep.failed += (unsigned)n;
        return;
    }
    for (size_t i = 0, k = 0; i < p->n; i++)
        if (phase_of(&p->v[i]) == phase)
            jv[k++] = &p->v[i];
    record_sent(cy, jv, n);
    /* An upload whose file was replaced or removed since it was planned is
     * not sent: the next sync decides about the file that is there now. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (jv[i]->sent_id >= 0)
            jv[m++] = jv[i];
    for (size_t i = 0; i < m; i++)
        to_api(jv[i], &w[i]);
    api_memories_write(cy->s->h, cy->st->id, w, m);
    for (size_t i = 0; i < m; i++)
        record_result(cy, jv[i], &w[i]);
    for (size_t i = 0; i < n; i++)
        api_write_clear(&w[i]);
    free(w);
    free(jv);
}

void push_writes(struct cycle *cy)
{
    for (int phase = 0; phase < PHASES; phase++)
        send_phase(cy, phase);
}
