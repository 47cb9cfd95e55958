/* test_reconcile.c - table-driven tests of sync/reconcile.h: one row per
 * case of DESIGN.md (Sync) and memory-store-api.md D.5-D.8 (per-path
 * decisions, deletion modes, upload errors, read-only stores), renames,
 * lost uploads and refusals, each with its read-only variant; an
 * exhaustive sweep of small inputs checking the invariants (read-only
 * never writes, no local content is dropped, deletes only as asked); the
 * write-result classifier; the delete cap.  Every row is checked with
 * cr_expect and names itself in the message.  Pure: no server needed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "reconcile.h"

#define SB "sha-base"
#define SL "sha-local"
#define SR "sha-remote"
#define SS "sha-sent"
#define PA "/a.md" /* the baseline path */
#define PB "/b.md" /* where the file was renamed locally */
#define PR "/r.md" /* where the memory was renamed remotely */
#define PN "/n.md" /* a path never synced */
#define ID "mem_1"
#define ID2 "mem_2"

#define BASE .memory_id = ID, .base_sha = SB, .base_path = PA
#define LFILE(s, p) .local = REC_L_FILE, .sha = s, .path = p
#define TOMB(p) .local = REC_L_DELETED, .path = p
#define REM(id, s, p) .remote = true, .remote_id = id, .remote_sha = s, .remote_path = p
#define DIRTY .dirty = true
#define RO .access = REC_READ_ONLY
#define LOGONLY .deletions = REC_DEL_LOG_ONLY
#define NODEL .deletions = REC_DEL_DISABLED

/* Expected flags of struct rec_out: a row states all of them. */
enum {
    F_SEND_C = 1 << 0, F_SEND_P = 1 << 1, F_NEED = 1 << 2, F_KEEP = 1 << 3,
    F_FORGET = 1 << 4, F_SENT = 1 << 5, F_STAND = 1 << 6, F_CAP = 1 << 7,
};

struct drow {
    const char *name;
    struct rec_in in;
    enum rec_action want;
    const char *msg;      /* exact message, NULL for none */
    enum log_level lvl;   /* checked when msg is set */
    unsigned flags;
    const char *expect;   /* expect_sha, NULL for none */
    const char *base_id;  /* checked when set */
};

#define W LOG_LVL_WARN
#define I LOG_LVL_INFO
#define D LOG_LVL_DEBUG

static const struct drow rows[] = {
    /* DESIGN.md, Sync, step 2 (each with its read-only variant). */
    {"design/D.5: remote changed, local clean -> pull", {BASE, LFILE(SB, PA), REM(ID, SR, PA)},
     REC_PULL, NULL, D, F_NEED, NULL, NULL},
    {"design/D.5 [ro]: remote changed, local clean -> pull", {BASE, LFILE(SB, PA), REM(ID, SR, PA), RO},
     REC_PULL, NULL, D, F_NEED, NULL, NULL},
    {"design/D.5: remote and local changed -> store wins, local kept as conflict",
     {BASE, LFILE(SL, PA), DIRTY, REM(ID, SR, PA)}, REC_CONFLICT_PULL, REC_MSG_BOTH_CHANGED, W,
     F_NEED | F_KEEP, NULL, NULL},
    {"design/D.8 [ro]: remote and local changed -> store wins, warned like rw",
     {BASE, LFILE(SL, PA), DIRTY, REM(ID, SR, PA), RO}, REC_CONFLICT_PULL, REC_MSG_BOTH_CHANGED, W,
     F_NEED | F_KEEP, NULL, NULL},
    {"design/D.5: remote unchanged, local changed -> update, precondition baseline",
     {BASE, LFILE(SL, PA), DIRTY, REM(ID, SB, PA)}, REC_UPDATE, NULL, D, F_SEND_C, SB, NULL},
    {"design/D.8 [ro]: remote unchanged, local changed -> keep unsynced",
     {BASE, LFILE(SL, PA), DIRTY, REM(ID, SB, PA), RO}, REC_KEEP_UNSYNCED, REC_MSG_RO_EDIT, W,
     F_STAND, NULL, NULL},
    {"design/D.5: new local path -> create", {LFILE(SL, PN), DIRTY}, REC_CREATE, NULL, D, 0, NULL, NULL},
    {"design/D.8 [ro]: new local path -> keep unsynced", {LFILE(SL, PN), DIRTY, RO},
     REC_KEEP_UNSYNCED, REC_MSG_RO_NEW, W, F_STAND, NULL, NULL},
    {"design: local rename -> update of path, same id, with precondition",
     {BASE, LFILE(SB, PB), DIRTY, REM(ID, SB, PA)}, REC_UPDATE, NULL, D, F_SEND_P, SB, NULL},
    {"design [ro]: local rename -> keep unsynced", {BASE, LFILE(SB, PB), DIRTY, REM(ID, SB, PA), RO},
     REC_KEEP_UNSYNCED, REC_MSG_RO_EDIT, W, F_STAND, NULL, NULL},
    {"design/D.5/D.6: local deleted, enabled -> delete expecting baseline",
     {BASE, TOMB(PA), REM(ID, SB, PA)}, REC_DELETE, NULL, D, F_CAP, SB, NULL},
    {"design/D.6: local deleted, log_only -> log what would be deleted",
     {BASE, TOMB(PA), REM(ID, SB, PA), LOGONLY}, REC_LOG_DELETE, REC_MSG_LOG_ONLY, I,
     F_CAP | F_STAND, SB, NULL},
    {"design/D.6: local deleted, disabled -> keep on server, file stays gone this session",
     {BASE, TOMB(PA), REM(ID, SB, PA), NODEL}, REC_HOLD_DELETE, REC_MSG_DEL_DISABLED, D, F_STAND,
     NULL, NULL},
    {"D.5/D.8 [ro]: local deleted, enabled -> never delete, restore",
     {BASE, TOMB(PA), REM(ID, SB, PA), RO}, REC_KEEP_REMOTE, REC_MSG_RO_DELETE, W, F_NEED, NULL, NULL},
    {"D.8 [ro]: local deleted, log_only -> never delete, restore",
     {BASE, TOMB(PA), REM(ID, SB, PA), RO, LOGONLY}, REC_KEEP_REMOTE, REC_MSG_RO_DELETE, W, F_NEED,
     NULL, NULL},
    {"D.8 [ro]: local deleted, disabled -> never delete, restore",
     {BASE, TOMB(PA), REM(ID, SB, PA), RO, NODEL}, REC_KEEP_REMOTE, REC_MSG_RO_DELETE, W, F_NEED,
     NULL, NULL},
    {"design/D.5: remote deleted, local clean -> remove local file", {BASE, LFILE(SB, PA)},
     REC_REMOVE_LOCAL, REC_MSG_REMOVE_LOCAL, I, 0, NULL, NULL},
    {"design/D.5 [ro]: remote deleted, local clean -> remove local file", {BASE, LFILE(SB, PA), RO},
     REC_REMOVE_LOCAL, REC_MSG_REMOVE_LOCAL, I, 0, NULL, NULL},
    {"design/D.5: remote deleted, local changed, writable -> re-create",
     {BASE, LFILE(SL, PA), DIRTY}, REC_RECREATE, REC_MSG_RECREATE, I, 0, NULL, NULL},
    {"design/D.5 [ro]: remote deleted, local changed -> keep unsynced, forget baseline",
     {BASE, LFILE(SL, PA), DIRTY, RO}, REC_KEEP_UNSYNCED, REC_MSG_RO_REMOTE_DELETED, W, F_FORGET,
     NULL, NULL},
    {"design/D.7: lost upload recognised by its hash -> adopt, no conflict",
     {BASE, LFILE(SS, PA), DIRTY, .sent_sha = SS, REM(ID, SS, PA)}, REC_ADOPT, REC_MSG_ADOPT_SENT,
     D, F_SENT, NULL, ID},
    {"design/D.7 [ro]: remote equals a sent hash -> adopt",
     {BASE, LFILE(SS, PA), DIRTY, .sent_sha = SS, REM(ID, SS, PA), RO}, REC_ADOPT,
     REC_MSG_ADOPT_SENT, D, F_SENT, NULL, ID},

    /* memory-store-api.md D.5, the remaining rows and notes. */
    {"D.5: R absent, L absent (tombstone) -> forget", {BASE, TOMB(PA)}, REC_FORGET, NULL, D, 0, NULL, NULL},
    {"D.5 [ro]: R absent, L absent (tombstone) -> forget", {BASE, TOMB(PA), RO}, REC_FORGET, NULL, D, 0,
     NULL, NULL},
    {"D.5/D.6: R absent, L absent, log_only -> forget", {BASE, TOMB(PA), LOGONLY}, REC_FORGET, NULL, D, 0,
     NULL, NULL},
    {"D.5: R absent, no file and no tombstone -> forget", {BASE}, REC_FORGET, NULL, D, 0, NULL, NULL},
    {"D.5: R absent, B unset, refused sha unchanged -> skip", {LFILE(SL, PN), .refused_sha = SL},
     REC_SKIP_REFUSED, REC_MSG_SKIP_REFUSED, D, F_STAND, NULL, NULL},
    {"D.5: R absent, B unset, refused sha changed since -> create", {LFILE(SL, PN), .refused_sha = SB},
     REC_CREATE, NULL, D, 0, NULL, NULL},
    {"D.5 [ro]: R absent, B unset, refused -> keep unsynced", {LFILE(SL, PN), .refused_sha = SL, RO},
     REC_KEEP_UNSYNCED, REC_MSG_RO_NEW, W, F_STAND, NULL, NULL},
    {"D.5/D.6: local deleted, remote changed -> restore remote version",
     {BASE, TOMB(PA), REM(ID, SR, PA)}, REC_RESTORE, REC_MSG_RESTORE, W, F_NEED, NULL, NULL},
    {"D.5 [ro]: local deleted, remote changed -> restore", {BASE, TOMB(PA), REM(ID, SR, PA), RO},
     REC_RESTORE, REC_MSG_RESTORE, W, F_NEED, NULL, NULL},
    {"D.6: local deleted, remote changed, log_only -> restore", {BASE, TOMB(PA), REM(ID, SR, PA), LOGONLY},
     REC_RESTORE, REC_MSG_RESTORE, W, F_NEED, NULL, NULL},
    {"D.6: local deleted, remote changed, disabled -> restore", {BASE, TOMB(PA), REM(ID, SR, PA), NODEL},
     REC_RESTORE, REC_MSG_RESTORE, W, F_NEED, NULL, NULL},
    {"D.5: R != B and L == R -> adopt", {BASE, LFILE(SR, PA), DIRTY, REM(ID, SR, PA)}, REC_ADOPT, NULL,
     D, 0, NULL, ID},
    {"D.5 [ro]: R != B and L == R -> adopt", {BASE, LFILE(SR, PA), DIRTY, REM(ID, SR, PA), RO}, REC_ADOPT,
     NULL, D, 0, NULL, ID},
    {"D.5/D.7: R == B, L != B, refused sha unchanged -> skip",
     {BASE, LFILE(SL, PA), DIRTY, .refused_sha = SL, REM(ID, SB, PA)}, REC_SKIP_REFUSED,
     REC_MSG_SKIP_REFUSED, D, F_STAND, NULL, NULL},
    {"D.5/D.7: R == B, refused sha changed since -> update",
     {BASE, LFILE(SL, PA), DIRTY, .refused_sha = "sha-old", REM(ID, SB, PA)}, REC_UPDATE, NULL, D,
     F_SEND_C, SB, NULL},
    {"D.5 [ro]: refused edit -> keep unsynced (read-only first)",
     {BASE, LFILE(SL, PA), DIRTY, .refused_sha = SL, REM(ID, SB, PA), RO}, REC_KEEP_UNSYNCED,
     REC_MSG_RO_EDIT, W, F_STAND, NULL, NULL},
    {"D.5: otherwise (all equal, clean) -> nothing", {BASE, LFILE(SB, PA), REM(ID, SB, PA)}, REC_NOTHING,
     NULL, D, 0, NULL, NULL},
    {"D.5 [ro]: otherwise -> nothing", {BASE, LFILE(SB, PA), REM(ID, SB, PA), RO}, REC_NOTHING, NULL, D, 0,
     NULL, NULL},
    {"D.5 note: brand-new remote memory -> pull", {REM(ID2, SR, PN)}, REC_PULL, NULL, D, F_NEED, NULL, NULL},
    {"D.5 note [ro]: brand-new remote memory -> pull", {REM(ID2, SR, PN), RO}, REC_PULL, NULL, D, F_NEED,
     NULL, NULL},
    {"D.5 note: unsynced file, other memory at its path -> store wins",
     {LFILE(SL, PA), DIRTY, REM(ID2, SR, PA)}, REC_CONFLICT_PULL, REC_MSG_BOTH_CHANGED, W,
     F_NEED | F_KEEP, NULL, ID2},
    {"D.5 note [ro]: unsynced file, other memory at its path -> store wins",
     {LFILE(SL, PA), DIRTY, REM(ID2, SR, PA), RO}, REC_CONFLICT_PULL, REC_MSG_BOTH_CHANGED, W,
     F_NEED | F_KEEP, NULL, ID2},
    {"unsynced file, memory at its path holds the same bytes -> adopt",
     {LFILE(SR, PA), DIRTY, REM(ID2, SR, PA)}, REC_ADOPT, NULL, D, 0, NULL, ID2},

    /* D.6: deletions after renames, remote renames. */
    {"D.6: renamed then deleted locally, remote unchanged -> delete", {BASE, TOMB(PB), REM(ID, SB, PA)},
     REC_DELETE, NULL, D, F_CAP, SB, NULL},
    {"D.6: local deleted, remote renamed -> restore", {BASE, TOMB(PA), REM(ID, SB, PR)}, REC_RESTORE,
     REC_MSG_RESTORE, W, F_NEED, NULL, NULL},

    /* D.7: lost uploads (sent_sha). */
    {"D.7: lost update landed, then edited again -> update on top of it",
     {BASE, LFILE(SL, PA), DIRTY, .sent_sha = SS, REM(ID, SS, PA)}, REC_UPDATE, REC_MSG_ADOPT_SENT, D,
     F_SENT | F_SEND_C, SS, ID},
    {"D.7 [ro]: remote equals a sent hash, edited again -> keep unsynced",
     {BASE, LFILE(SL, PA), DIRTY, .sent_sha = SS, REM(ID, SS, PA), RO}, REC_KEEP_UNSYNCED,
     REC_MSG_RO_EDIT, W, F_SENT | F_STAND, NULL, ID},
    {"D.7: lost create adopted by its hash", {LFILE(SS, PN), DIRTY, .sent_sha = SS, REM(ID2, SS, PN)},
     REC_ADOPT, REC_MSG_ADOPT_SENT, D, F_SENT, NULL, ID2},
    {"D.7: lost create, edited again -> update", {LFILE(SL, PN), .sent_sha = SS, REM(ID2, SS, PN)},
     REC_UPDATE, REC_MSG_ADOPT_SENT, D, F_SENT | F_SEND_C, SS, ID2},
    {"D.7: lost create, then deleted locally -> delete our memory",
     {TOMB(PN), .sent_sha = SS, REM(ID2, SS, PN)}, REC_DELETE, REC_MSG_ADOPT_SENT, D, F_SENT | F_CAP, SS,
     ID2},
    {"D.7: lost create never arrived -> create again", {LFILE(SS, PN), .sent_sha = SS}, REC_CREATE, NULL, D,
     0, NULL, NULL},
    {"D.7: lost update never arrived (R still B) -> update again",
     {BASE, LFILE(SS, PA), DIRTY, .sent_sha = SS, REM(ID, SB, PA)}, REC_UPDATE, NULL, D, F_SEND_C, SB, ID},
    {"D.7: sent hash, but someone else changed R -> store wins",
     {BASE, LFILE(SS, PA), DIRTY, .sent_sha = SS, REM(ID, SR, PA)}, REC_CONFLICT_PULL,
     REC_MSG_BOTH_CHANGED, W, F_NEED | F_KEEP, NULL, ID},
    {"D.7: lost update landed, then deleted locally -> delete",
     {BASE, TOMB(PA), .sent_sha = SS, REM(ID, SS, PA)}, REC_DELETE, REC_MSG_ADOPT_SENT, D, F_SENT | F_CAP,
     SS, ID},
    {"D.7: lost rename landed (R == L) -> adopt", {BASE, LFILE(SB, PB), DIRTY, .sent_sha = SB,
     REM(ID, SB, PB)}, REC_ADOPT, NULL, D, 0, NULL, ID},
    {"D.7: lost rename landed, then edited -> content update only",
     {BASE, LFILE(SL, PB), DIRTY, .sent_sha = SB, REM(ID, SB, PB)}, REC_UPDATE, NULL, D, F_SEND_C, SB, ID},
    {"D.7: lost rename landed, then renamed again -> path update, not a conflict",
     {BASE, LFILE(SB, PN), DIRTY, .sent_sha = SB, .sent_path = PB, REM(ID, SB, PB)}, REC_UPDATE,
     REC_MSG_ADOPT_SENT, D, F_SENT | F_SEND_P, SB, ID},
    {"D.7: a rename sent, the store still at the baseline -> nothing adopted",
     {BASE, LFILE(SB, PN), DIRTY, .sent_sha = SB, .sent_path = PB, REM(ID, SB, PA)}, REC_UPDATE,
     NULL, D, F_SEND_P, SB, ID},
    {"D.7: lost update landed, then renamed -> path update",
     {BASE, LFILE(SS, PB), DIRTY, .sent_sha = SS, REM(ID, SS, PA)}, REC_UPDATE, REC_MSG_ADOPT_SENT, D,
     F_SENT | F_SEND_P, SS, ID},

    /* Refusals keyed by path too. */
    {"refused at another path, renamed since -> update content and path",
     {BASE, LFILE(SL, PB), DIRTY, .refused_sha = SL, .refused_path = "/bad.md", REM(ID, SB, PA)},
     REC_UPDATE, NULL, D, F_SEND_C | F_SEND_P, SB, NULL},
    {"refused at this very path -> skip",
     {BASE, LFILE(SL, PB), DIRTY, .refused_sha = SL, .refused_path = PB, REM(ID, SB, PA)},
     REC_SKIP_REFUSED, REC_MSG_SKIP_REFUSED, D, F_STAND, NULL, NULL},
    {"refused, remote deleted -> skip and forget baseline", {BASE, LFILE(SL, PA), DIRTY, .refused_sha = SL},
     REC_SKIP_REFUSED, REC_MSG_SKIP_REFUSED, D, F_FORGET | F_STAND, NULL, NULL},
    {"refused, remote deleted, sha changed since -> re-create",
     {BASE, LFILE(SL, PA), DIRTY, .refused_sha = SS}, REC_RECREATE, REC_MSG_RECREATE, I, 0, NULL, NULL},
    {"refused, remote changed -> store wins anyway",
     {BASE, LFILE(SL, PA), DIRTY, .refused_sha = SL, REM(ID, SR, PA)}, REC_CONFLICT_PULL,
     REC_MSG_BOTH_CHANGED, W, F_NEED | F_KEEP, NULL, NULL},

    /* Renames. */
    {"rename + edit -> one update of content and path", {BASE, LFILE(SL, PB), DIRTY, REM(ID, SB, PA)},
     REC_UPDATE, NULL, D, F_SEND_C | F_SEND_P, SB, NULL},
    {"rename + edit [ro] -> keep unsynced", {BASE, LFILE(SL, PB), DIRTY, REM(ID, SB, PA), RO},
     REC_KEEP_UNSYNCED, REC_MSG_RO_EDIT, W, F_STAND, NULL, NULL},
    {"renamed onto a path another memory holds and keeps -> store wins, nothing kept",
     {BASE, LFILE(SB, PB), DIRTY, REM(ID, SB, PA), .path_held = true}, REC_CONFLICT_PULL,
     REC_MSG_PATH_HELD, W, 0, NULL, NULL},
    {"renamed and edited onto a held path -> store wins, the edit kept",
     {BASE, LFILE(SL, PB), DIRTY, REM(ID, SB, PA), .path_held = true}, REC_CONFLICT_PULL,
     REC_MSG_PATH_HELD, W, F_NEED | F_KEEP, NULL, NULL},
    {"renamed onto a held path [ro] -> keep unsynced",
     {BASE, LFILE(SB, PB), DIRTY, REM(ID, SB, PA), RO, .path_held = true}, REC_KEEP_UNSYNCED,
     REC_MSG_RO_EDIT, W, F_STAND, NULL, NULL},
    {"edited in place, path held flag set -> update (only a move loses)",
     {BASE, LFILE(SL, PA), DIRTY, REM(ID, SB, PA), .path_held = true}, REC_UPDATE, NULL, D,
     F_SEND_C, SB, NULL},
    {"renamed to where the remote moved it too -> adopt", {BASE, LFILE(SB, PR), DIRTY, REM(ID, SB, PR)},
     REC_ADOPT, NULL, D, 0, NULL, NULL},
    {"remote renamed, local clean -> pull without content", {BASE, LFILE(SB, PA), REM(ID, SB, PR)},
     REC_PULL, NULL, D, 0, NULL, NULL},
    {"remote renamed [ro] -> pull without content", {BASE, LFILE(SB, PA), REM(ID, SB, PR), RO}, REC_PULL,
     NULL, D, 0, NULL, NULL},
    {"remote renamed and edited, local clean -> pull", {BASE, LFILE(SB, PA), REM(ID, SR, PR)}, REC_PULL,
     NULL, D, F_NEED, NULL, NULL},
    {"both renamed apart -> store wins, no content to keep", {BASE, LFILE(SB, PB), DIRTY, REM(ID, SB, PR)},
     REC_CONFLICT_PULL, REC_MSG_BOTH_CHANGED, W, 0, NULL, NULL},
    {"local edit vs remote rename -> store wins, edit kept",
     {BASE, LFILE(SL, PA), DIRTY, REM(ID, SB, PR)}, REC_CONFLICT_PULL, REC_MSG_BOTH_CHANGED, W,
     F_NEED | F_KEEP, NULL, NULL},
    {"local rename vs remote edit -> store wins", {BASE, LFILE(SB, PB), DIRTY, REM(ID, SR, PA)},
     REC_CONFLICT_PULL, REC_MSG_BOTH_CHANGED, W, F_NEED, NULL, NULL},
    {"local rename vs remote edit [ro] -> store wins", {BASE, LFILE(SB, PB), DIRTY, REM(ID, SR, PA), RO},
     REC_CONFLICT_PULL, REC_MSG_BOTH_CHANGED, W, F_NEED, NULL, NULL},
    {"rename + edit, remote made the same edit -> rename only",
     {BASE, LFILE(SR, PB), DIRTY, REM(ID, SR, PA)}, REC_UPDATE, NULL, D, F_SEND_P, SR, NULL},
    {"remote deleted, local renamed only -> re-create at the new path", {BASE, LFILE(SB, PB), DIRTY},
     REC_RECREATE, REC_MSG_RECREATE, I, 0, NULL, NULL},
    {"remote deleted, local renamed [ro] -> keep unsynced", {BASE, LFILE(SB, PB), DIRTY, RO},
     REC_KEEP_UNSYNCED, REC_MSG_RO_REMOTE_DELETED, W, F_FORGET, NULL, NULL},

    /* The local model's edges. */
    {"dirty flag, content and path back at baseline -> adopt (clears it)",
     {BASE, LFILE(SB, PA), DIRTY, REM(ID, SB, PA)}, REC_ADOPT, NULL, D, 0, NULL, ID},
    {"clean flag but hash differs -> still uploaded", {BASE, LFILE(SL, PA), REM(ID, SB, PA)}, REC_UPDATE,
     NULL, D, F_SEND_C, SB, NULL},
    {"no local hash (bytes never changed) -> nothing", {BASE, LFILE(NULL, PA), REM(ID, SB, PA)},
     REC_NOTHING, NULL, D, 0, NULL, NULL},
    {"no local hash, remote changed -> pull", {BASE, LFILE(NULL, PA), REM(ID, SR, PA)}, REC_PULL, NULL, D,
     F_NEED, NULL, NULL},
    {"node missing, baseline and remote -> pull", {BASE, REM(ID, SB, PA)}, REC_PULL, NULL, D, F_NEED, NULL,
     NULL},
    {"tombstone of unsynced file, other memory now at its path -> pull", {TOMB(PN), REM(ID2, SR, PN)},
     REC_PULL, NULL, D, F_NEED, NULL, NULL},
    {"tombstone of unsynced file, nothing remote -> forget", {TOMB(PN)}, REC_FORGET, NULL, D, 0, NULL, NULL},
};

static const char *nz(const char *s)
{
    return s ? s : "(null)";
}

static bool str_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static unsigned flags_of(const struct rec_out *o)
{
    return (o->send_content ? F_SEND_C : 0) | (o->send_path ? F_SEND_P : 0) |
           (o->need_content ? F_NEED : 0) | (o->keep_local ? F_KEEP : 0) |
           (o->forget_base ? F_FORGET : 0) | (o->adopted_sent ? F_SENT : 0) |
           (o->standing ? F_STAND : 0) | (o->counts_cap ? F_CAP : 0);
}

Test(reconcile, decision_table)
{
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct drow *r = &rows[i];
        struct rec_out o;
        int rc = rec_decide(&r->in, &o);
        cr_expect_eq(rc, 0, "[%s] rec_decide -> %d", r->name, rc);
        cr_expect_eq(o.action, r->want, "[%s] action %s, want %s", r->name, rec_action_name(o.action),
                     rec_action_name(r->want));
        cr_expect(str_same(o.msg, r->msg), "[%s] msg \"%s\", want \"%s\"", r->name, nz(o.msg),
                  nz(r->msg));
        if (r->msg)
            cr_expect_eq(o.level, r->lvl, "[%s] level %d, want %d", r->name, o.level, r->lvl);
        cr_expect_eq(flags_of(&o), r->flags, "[%s] flags 0x%x, want 0x%x", r->name, flags_of(&o),
                     r->flags);
        cr_expect(str_same(o.expect_sha, r->expect), "[%s] expect_sha %s, want %s", r->name,
                  nz(o.expect_sha), nz(r->expect));
        if (r->base_id)
            cr_expect(str_same(o.base_id, r->base_id), "[%s] base_id %s, want %s", r->name,
                      nz(o.base_id), r->base_id);
    }
}

Test(reconcile, bad_input)
{
    struct rec_out o;
    struct rec_in no_path = {BASE, LFILE(SL, NULL), REM(ID, SB, PA)};
    struct rec_in new_no_sha = {LFILE(NULL, PN)};
    struct rec_in remote_no_sha = {BASE, LFILE(SB, PA), REM(ID, NULL, PA)};

    cr_expect_eq(rec_decide(NULL, &o), -EINVAL);
    cr_expect_eq(o.action, REC_NOTHING);
    cr_expect_eq(rec_decide(&no_path, NULL), -EINVAL);
    cr_expect_eq(rec_decide(&no_path, &o), -EINVAL, "file without a path");
    cr_expect_eq(rec_decide(&new_no_sha, &o), -EINVAL, "never-synced file without a hash");
    cr_expect_eq(rec_decide(&remote_no_sha, &o), -EINVAL, "listed memory without a hash");
}

/* Every combination of small inputs: the invariants hold everywhere. */
Test(reconcile, invariants_sweep)
{
    static const char *const shas[] = {SB, SL, SR, SS};
    static const char *const paths[] = {PA, PB, PR};
    static const char *const sents[] = {NULL, SS, SB};
    size_t n = 0;

    for (int lk = 0; lk < 16; lk++)           /* none, 12 files, 3 tombstones */
    for (int hb = 0; hb < 2; hb++)
    for (int rk = 0; rk < 13; rk++)           /* absent, 4 shas x 3 paths */
    for (int fl = 0; fl < 4; fl++)            /* dirty, refused */
    for (int se = 0; se < 3; se++)
    for (int ro = 0; ro < 2; ro++)
    for (int dm = 0; dm < 3; dm++)
    for (int ph = 0; ph < 2; ph++) {            /* the local path held remotely */
        struct rec_in in = {.access = ro ? REC_READ_ONLY : REC_READ_WRITE,
                            .deletions = (enum rec_deletions)dm, .dirty = fl & 1, .path_held = ph,
                            .refused_sha = (fl & 2) ? SL : NULL, .sent_sha = sents[se]};
        if (hb)
            in.memory_id = ID, in.base_sha = SB, in.base_path = PA;
        if (lk >= 1 && lk <= 12)
            in.local = REC_L_FILE, in.sha = shas[(lk - 1) / 3], in.path = paths[(lk - 1) % 3];
        else if (lk > 12)
            in.local = REC_L_DELETED, in.path = paths[lk - 13];
        if (rk > 0)
            in.remote = true, in.remote_id = hb ? ID : ID2, in.remote_sha = shas[(rk - 1) / 3],
            in.remote_path = paths[(rk - 1) % 3];
        char what[160];
        snprintf(what, sizeof what, "local=%d base=%d remote=%d flags=%d sent=%d ro=%d del=%d held=%d",
                 lk, hb, rk, fl, se, ro, dm, ph);

        struct rec_out o, again;
        cr_assert_eq(rec_decide(&in, &o), 0, "[%s] rc", what);
        rec_decide(&in, &again);
        cr_expect(memcmp(&o, &again, sizeof o) == 0, "[%s] not deterministic", what);
        const char *act = rec_action_name(o.action);

        if (ro)
            cr_expect(!rec_action_writes(o.action), "[%s] read-only store writes: %s", what, act);
        if (o.action == REC_DELETE)
            cr_expect(!ro && dm == REC_DEL_ENABLED && in.local == REC_L_DELETED,
                      "[%s] delete not asked for", what);
        if (o.action == REC_UPDATE || o.action == REC_DELETE || o.action == REC_LOG_DELETE)
            cr_expect(in.remote && str_same(o.expect_sha, in.remote_sha) && o.base_id && *o.base_id,
                      "[%s] %s without the listed sha as precondition", what, act);
        if (o.action == REC_UPDATE)
            cr_expect(o.send_content || o.send_path, "[%s] empty update", what);
        if (o.action == REC_UPDATE && ph)
            cr_expect(!o.send_path, "[%s] a move onto a held path is sent", what);
        if (o.action == REC_REMOVE_LOCAL)
            cr_expect(!in.remote && in.local == REC_L_FILE && str_same(in.sha, SB) &&
                      str_same(in.path, PA) && hb, "[%s] removes a changed file", what);
        if (o.action == REC_ADOPT)
            cr_expect(in.remote && str_same(in.sha, in.remote_sha) &&
                      str_same(in.path, in.remote_path), "[%s] adopts different bytes", what);
        if (o.action == REC_CONFLICT_PULL || o.action == REC_RESTORE)
            cr_expect(o.level == LOG_LVL_WARN && o.msg, "[%s] %s not warned", what, act);

        /* Local content found nowhere else is never dropped. */
        bool unique = in.local == REC_L_FILE && !(hb && str_same(in.sha, SB)) &&
                      !(in.remote && str_same(in.sha, in.remote_sha));
        if (unique) {
            bool kept = o.action == REC_CREATE || o.action == REC_UPDATE ||
                        o.action == REC_RECREATE || o.action == REC_KEEP_UNSYNCED ||
                        o.action == REC_SKIP_REFUSED ||
                        (o.action == REC_CONFLICT_PULL && o.keep_local);
            cr_expect(kept, "[%s] local content lost by %s", what, act);
            if (o.action == REC_UPDATE)
                cr_expect(o.send_content, "[%s] update drops the content", what);
        }
        n++;
    }
    cr_expect_eq(n, 16u * 2 * 13 * 4 * 3 * 2 * 3 * 2);
}

/* --- rec_classify ----------------------------------------------------- */

struct crow {
    const char *name;
    struct rec_write w;
    enum rec_followup want;
    const char *msg;
    enum log_level lvl;
    bool keep_sent;
};

#define CR(a, e, n) .action = a, .err = e, .attempts = n, .path = PN, .sha = SS

static const struct crow crows[] = {
    {"create ok -> done", {CR(REC_CREATE, 0, 1)}, REC_FU_DONE, NULL, D, false},
    {"recreate ok -> done", {CR(REC_RECREATE, 0, 1)}, REC_FU_DONE, NULL, D, false},
    {"update ok after a retry -> done", {CR(REC_UPDATE, 0, 2)}, REC_FU_DONE, NULL, D, false},
    {"update 409 precondition -> store wins at next sync", {CR(REC_UPDATE, -ESTALE, 1)},
     REC_FU_STORE_WINS, REC_MSG_UPLOAD_LOST_RACE, W, false},
    {"update 409 precondition after a lost attempt -> retry, listing settles",
     {CR(REC_UPDATE, -ESTALE, 2)}, REC_FU_RETRY, REC_MSG_ADOPT_SENT, D, true},
    {"update 404 -> recreate", {CR(REC_UPDATE, -ENOENT, 1)}, REC_FU_RECREATE, REC_MSG_RECREATE, I, false},
    {"create 400 -> refused until changed", {CR(REC_CREATE, -EINVAL, 1)}, REC_FU_REFUSED, REC_MSG_REFUSED,
     W, false},
    {"update 400 (bad path) -> refused", {CR(REC_UPDATE, -EINVAL, 1)}, REC_FU_REFUSED, REC_MSG_REFUSED, W,
     false},
    {"create 413 -> refused", {CR(REC_CREATE, -EFBIG, 1)}, REC_FU_REFUSED, REC_MSG_REFUSED, W, false},
    {"update 413 -> refused", {CR(REC_UPDATE, -EFBIG, 1)}, REC_FU_REFUSED, REC_MSG_REFUSED, W, false},
    {"recreate 413 -> refused", {CR(REC_RECREATE, -EFBIG, 1)}, REC_FU_REFUSED, REC_MSG_REFUSED, W, false},
    {"create not UTF-8 (never sent) -> refused", {CR(REC_CREATE, -EILSEQ, 0)}, REC_FU_REFUSED,
     REC_MSG_REFUSED, W, false},
    {"create 409 path conflict -> retry next sync",
     {CR(REC_CREATE, -EEXIST, 1), .conflict_path = "/n.md/x"}, REC_FU_RETRY, REC_MSG_PATH_CONFLICT, W,
     false},
    {"rename 409 path conflict -> retry next sync", {CR(REC_UPDATE, -EEXIST, 1), .conflict_path = "/n"},
     REC_FU_RETRY, REC_MSG_PATH_CONFLICT, W, false},
    {"create retried, 409 names our path with our sha -> adopt",
     {CR(REC_CREATE, -EEXIST, 2), .conflict_path = PN, .conflict_sha = SS}, REC_FU_ADOPT,
     REC_MSG_ADOPT_SENT, D, false},
    {"recreate retried, 409 names our path with our sha -> adopt",
     {CR(REC_RECREATE, -EEXIST, 3), .conflict_path = PN, .conflict_sha = SS}, REC_FU_ADOPT,
     REC_MSG_ADOPT_SENT, D, false},
    {"create retried, 409 same path, other sha -> retry",
     {CR(REC_CREATE, -EEXIST, 2), .conflict_path = PN, .conflict_sha = SR}, REC_FU_RETRY,
     REC_MSG_PATH_CONFLICT, W, true},
    {"create retried, 409 same path, sha unknown -> retry, keep sent",
     {CR(REC_CREATE, -EEXIST, 2), .conflict_path = PN}, REC_FU_RETRY, REC_MSG_PATH_CONFLICT, W, true},
    {"create retried, 409 other path with our sha -> retry",
     {CR(REC_CREATE, -EEXIST, 2), .conflict_path = "/n.md/sub", .conflict_sha = SS}, REC_FU_RETRY,
     REC_MSG_PATH_CONFLICT, W, true},
    {"create first attempt, 409 names our sha -> retry (nothing sent before)",
     {CR(REC_CREATE, -EEXIST, 1), .conflict_path = PN, .conflict_sha = SS}, REC_FU_RETRY,
     REC_MSG_PATH_CONFLICT, W, false},
    {"create connection refused -> retry", {CR(REC_CREATE, -ECONNREFUSED, 3)}, REC_FU_RETRY,
     REC_MSG_UPLOAD_FAILED, W, true},
    {"update timeout -> retry", {CR(REC_UPDATE, -ETIMEDOUT, 1)}, REC_FU_RETRY, REC_MSG_UPLOAD_FAILED, W,
     true},
    {"update 429 after retries -> retry", {CR(REC_UPDATE, -EAGAIN, 4)}, REC_FU_RETRY,
     REC_MSG_UPLOAD_FAILED, W, true},
    {"create 5xx -> retry", {CR(REC_CREATE, -EIO, 4)}, REC_FU_RETRY, REC_MSG_UPLOAD_FAILED, W, true},
    {"update dropped after commit -> retry, keep sent", {CR(REC_UPDATE, -ECONNRESET, 1)}, REC_FU_RETRY,
     REC_MSG_UPLOAD_FAILED, W, true},
    {"create malformed 2xx -> retry, keep sent", {CR(REC_CREATE, -EPROTO, 1)}, REC_FU_RETRY,
     REC_MSG_UPLOAD_FAILED, W, true},
    {"update 409 other conflict -> retry", {CR(REC_UPDATE, -EBUSY, 1)}, REC_FU_RETRY,
     REC_MSG_UPLOAD_FAILED, W, true},
    {"create 401 -> retry", {CR(REC_CREATE, -EACCES, 1)}, REC_FU_RETRY, REC_MSG_UPLOAD_FAILED, W, true},
    {"update cancelled by the daemon (an unmount's sync) -> retry, quietly, keep sent",
     {CR(REC_UPDATE, -ECANCELED, 1)}, REC_FU_RETRY, REC_MSG_UPLOAD_FAILED, D, true},
    {"create cancelled before sending -> retry, quietly, nothing sent",
     {CR(REC_CREATE, -ECANCELED, 0)}, REC_FU_RETRY, REC_MSG_UPLOAD_FAILED, D, false},
    {"update out of memory before sending -> retry, nothing sent", {CR(REC_UPDATE, -ENOMEM, 0)},
     REC_FU_RETRY, REC_MSG_UPLOAD_FAILED, W, false},
    {"delete ok -> done", {CR(REC_DELETE, 0, 1)}, REC_FU_DONE, REC_MSG_DELETED, I, false},
    {"delete 404 -> already gone", {CR(REC_DELETE, -ENOENT, 1)}, REC_FU_GONE, REC_MSG_DELETED, I, false},
    {"delete 409/412 expected sha -> store wins, restored next sync", {CR(REC_DELETE, -ESTALE, 1)},
     REC_FU_STORE_WINS, REC_MSG_DELETE_LOST_RACE, W, false},
    {"delete 5xx -> retry", {CR(REC_DELETE, -EIO, 4)}, REC_FU_RETRY, REC_MSG_DELETE_FAILED, W, false},
    {"delete 429 -> retry", {CR(REC_DELETE, -EAGAIN, 4)}, REC_FU_RETRY, REC_MSG_DELETE_FAILED, W, false},
    {"delete dropped connection -> retry", {CR(REC_DELETE, -ECONNRESET, 1)}, REC_FU_RETRY,
     REC_MSG_DELETE_FAILED, W, false},
    {"not a write (pull) -> invalid", {CR(REC_PULL, 0, 0)}, REC_FU_INVALID, NULL, LOG_LVL_ERROR, false},
};

Test(reconcile, classify_table)
{
    for (size_t i = 0; i < sizeof(crows) / sizeof(crows[0]); i++) {
        const struct crow *r = &crows[i];
        struct rec_result res;
        rec_classify(&r->w, &res);
        cr_expect_eq(res.fu, r->want, "[%s] follow-up %s, want %s", r->name, rec_followup_name(res.fu),
                     rec_followup_name(r->want));
        cr_expect(str_same(res.msg, r->msg), "[%s] msg \"%s\", want \"%s\"", r->name, nz(res.msg),
                  nz(r->msg));
        if (r->msg)
            cr_expect_eq(res.level, r->lvl, "[%s] level %d, want %d", r->name, res.level, r->lvl);
        cr_expect_eq(res.keep_sent, r->keep_sent, "[%s] keep_sent %d, want %d", r->name,
                     res.keep_sent, r->keep_sent);
    }
    struct rec_result res;
    rec_classify(NULL, &res);
    cr_expect_eq(res.fu, REC_FU_INVALID, "NULL write");
    rec_classify(NULL, NULL); /* must not crash */
}

Test(reconcile, delete_cap)
{
    static const struct { size_t memories, cap; } caps[] = {
        {0, 8}, {31, 8}, {32, 8}, {36, 9}, {100, 25}, {199, 49}, {200, 50}, {203, 50}, {10000, 50},
    };
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
        cr_expect_eq(rec_delete_cap(caps[i].memories), caps[i].cap, "cap(%zu) = %zu, want %zu",
                     caps[i].memories, rec_delete_cap(caps[i].memories), caps[i].cap);
}

Test(reconcile, names)
{
    for (int a = REC_NOTHING; a <= REC_SKIP_REFUSED; a++)
        cr_expect(strcmp(rec_action_name((enum rec_action)a), "?") != 0, "action %d unnamed", a);
    for (int f = REC_FU_DONE; f <= REC_FU_INVALID; f++)
        cr_expect(strcmp(rec_followup_name((enum rec_followup)f), "?") != 0, "follow-up %d unnamed", f);
    cr_expect_str_eq(rec_action_name((enum rec_action)99), "?");
    cr_expect(rec_action_writes(REC_RECREATE) && !rec_action_writes(REC_LOG_DELETE));
}
