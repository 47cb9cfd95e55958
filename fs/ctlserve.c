/* ctlserve.c - the daemon's side of the control socket (the commands'
 * side is control.c).
 *
 * Protocol: the client sends one line; the daemon answers with lines and a
 * final "ok" or "error <reason>":
 *   unmount <path>   tear down the store mounted at path
 *   unmount-all      tear down every store (the daemon then exits)
 *   status           a human description of each store, then ok
 *   status-json      one JSON object per store (a line each), then ok
 *   sync..., sync-wait...  a sync now (syncctl.c; a waiting client is
 *                    handed to a thread of its own)
 *   hist-...         memory history and recovery (histserve.c: a thread of
 *                    its own each)
 *
 * The main loop polls the listening socket and each client with the
 * signalfd, so nothing a client does (connect and stay silent, trickle a
 * byte a second, never read its answer) delays a signal or another
 * client.  Each client is a small state machine in a struct ctl_client:
 *   READING  --(a whole line)--> the command runs --> WRITING
 *   READING  --(CTL_READ_MS from accept, EOF, line too long)--> closed
 * (the time a command held the main thread does not count against the
 * other clients' CTL_READ_MS and CTL_WRITE_MS)
 *   WRITING  --(answer sent)--> closed
 *   WRITING  --(CTL_WRITE_MS without taking it)--> closed
 * Client sockets are non-blocking.  At most CTL_CLIENTS at once: one more
 * takes the place of the client that has been silent longest (or, when
 * every slot is answering, is closed at once).  A command runs on the main thread (an
 * unmount's final sync is bounded by --flush-timeout). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "history.h"
#include "log.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ctl_send_all(int fd, const char *s, size_t n, int64_t *deadline_ms)
{
    if (!*deadline_ms)
        *deadline_ms = now_ms() + CTL_SEND_MS;
    while (n && now_ms() < *deadline_ms) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* gone, or too slow to read: nothing more to send */
        s += w;
        n -= (size_t)w;
    }
}

static void drop(struct ctl_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->out);
    c->fd = -1;
    c->out = NULL;
    c->n = c->out_len = c->out_off = 0;
}

void control_init(struct daemon *d)
{
    for (int i = 0; i < CTL_CLIENTS; i++) {
        d->ctl[i].fd = -1;
        d->ctl[i].out = NULL;
    }
}

/* Runs the command in line; its answer goes to out. */
static void run_command(struct daemon *d, const char *line, FILE *out)
{
    if (strcmp(line, "status") == 0 || strcmp(line, "status-json") == 0) {
        status_serve(d, out, strcmp(line, "status-json") == 0);
        return;
    }
    if (strcmp(line, "unmount-all") != 0 && strncmp(line, "unmount ", 8) != 0) {
        fputs("error unknown command\n", out);
        return;
    }
    bool all = line[7] != ' ';
    struct fs_store *v[16];
    size_t nv = 0;
    for (size_t i = 0; i < d->n && nv < 16; i++) {
        struct fs_store *s = &d->stores[i];
        if (!s->gone && (all || strcmp(s->mount_path, line + 8) == 0))
            v[nv++] = s;
    }
    if (!nv) {
        /* Unmounted by another unmount (or a signal) while this one
         * waited for the daemon: its answer, as that one got it. */
        bool left = false, any = false;
        for (size_t i = 0; i < d->n; i++) {
            struct fs_store *s = &d->stores[i];
            if (!s->gone || !s->final_report || (!all && strcmp(s->mount_path, line + 8)))
                continue;
            fprintf(out, "unmounted %s\n", s->mount_path);
            any = true;
            left |= s->final_left;
        }
        for (size_t i = 0; i < d->n && any; i++) {
            struct fs_store *s = &d->stores[i];
            if (s->gone && s->final_report && (all || !strcmp(s->mount_path, line + 8)))
                fputs(s->final_report, out);
        }
        if (any || all)
            fputs(left ? "ok unpushed\n" : "ok\n", out);
        else
            fprintf(out, "error no memory store of this daemon is mounted at %s\n", line + 8);
        return;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *report = open_memstream(&text, &len);
    size_t left = daemon_unmount(v, nv, report);
    if (report)
        fclose(report);
    for (size_t i = 0; i < nv; i++)
        fprintf(out, "unmounted %s\n", v[i]->mount_path);
    if (text && len)
        fputs(text, out);
    free(text);
    fputs(left ? "ok unpushed\n" : "ok\n", out);
}

/* Sends what the socket takes now; true when the answer is all out. */
static bool flush_out(struct ctl_client *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        if (w <= 0)
            return true; /* the client went away: nothing more to send */
        c->out_off += (size_t)w;
    }
    return true;
}

/* A whole line arrived: run it and start answering. */
static void answer(struct daemon *d, struct ctl_client *c)
{
    char *nl = memchr(c->line, '\n', c->n);
    *nl = '\0';
    if (nl > c->line && nl[-1] == '\r')
        nl[-1] = '\0';
    if (strncmp(c->line, "hist-", 5) == 0) {
        /* History and recovery (histserve.c): a thread of its own each. */
        if (hist_serve(d, c->fd, c->line))
            c->fd = -1;
        drop(c);
        return;
    }
    if (strncmp(c->line, "sync", 4) == 0) {
        /* A sync answers on its own thread when asked to wait for it
         * (syncctl.c): the slot lets go of the client then. */
        if (syncctl_serve(d, c->fd, c->line))
            c->fd = -1;
        drop(c);
        return;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (!out) {
        drop(c);
        return;
    }
    int64_t t0 = now_ms();
    run_command(d, c->line, out);
    fclose(out);
    /* A command may hold this thread for long (an unmount: its final
     * sync): the others' time to send their line or take their answer
     * does not run meanwhile.  Dropped at their old deadlines, clients
     * that sent a command within their time were closed unanswered. */
    int64_t spent = now_ms() - t0;
    for (int i = 0; spent > 0 && i < CTL_CLIENTS; i++)
        if (d->ctl[i].fd >= 0 && &d->ctl[i] != c)
            d->ctl[i].deadline_ms += spent;
    c->out = text;
    c->out_len = len;
    c->out_off = 0;
    c->deadline_ms = now_ms() + CTL_WRITE_MS;
    if (flush_out(c))
        drop(c);
}

static void accept_one(struct daemon *d)
{
    int fd = accept4(d->ctl_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    /* A free slot, else the slot of the client that has waited longest
     * without sending its line: silent clients cannot keep others out. */
    struct ctl_client *slot = NULL, *oldest = NULL;
    for (int i = 0; i < CTL_CLIENTS && !slot; i++) {
        struct ctl_client *c = &d->ctl[i];
        if (c->fd < 0)
            slot = c;
        else if (!c->out && (!oldest || c->deadline_ms < oldest->deadline_ms))
            oldest = c;
    }
    if (!slot && oldest) {
        char max[16];
        snprintf(max, sizeof(max), "%d", CTL_CLIENTS);
        log_warn("too many control connections at once; the one silent longest was closed",
                 "max", max);
        drop(oldest);
        slot = oldest;
    }
    if (!slot) {
        close(fd); /* every slot is busy answering */
        return;
    }
    slot->fd = fd;
    slot->n = 0;
    slot->deadline_ms = now_ms() + CTL_READ_MS;
}

static void read_some(struct daemon *d, struct ctl_client *c)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->line + c->n, sizeof(c->line) - 1 - c->n, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0) {
            drop(c);
            return;
        }
        size_t before = c->n;
        c->n += (size_t)r;
        if (memchr(c->line + before, '\n', (size_t)r)) {
            answer(d, c);
            return;
        }
        if (c->n >= sizeof(c->line) - 1) {
            (void)!send(c->fd, "error command too long\n", 23, MSG_NOSIGNAL | MSG_DONTWAIT);
            drop(c);
            return;
        }
    }
}

int control_pollfds(struct daemon *d, struct pollfd *p, int *timeout_ms)
{
    int n = 0;
    *timeout_ms = -1;
    if (d->ctl_fd < 0)
        return 0;
    p[n++] = (struct pollfd){d->ctl_fd, POLLIN, 0};
    int64_t now = now_ms();
    for (int i = 0; i < CTL_CLIENTS; i++) {
        struct ctl_client *c = &d->ctl[i];
        if (c->fd < 0)
            continue;
        if (c->deadline_ms <= now) {
            drop(c); /* too slow to send its line or to take its answer */
            continue;
        }
        int left = (int)(c->deadline_ms - now);
        if (*timeout_ms < 0 || left < *timeout_ms)
            *timeout_ms = left;
        p[n++] = (struct pollfd){c->fd, c->out ? POLLOUT : POLLIN, 0};
    }
    return n;
}

static struct ctl_client *client_of(struct daemon *d, int fd)
{
    for (int i = 0; i < CTL_CLIENTS; i++)
        if (d->ctl[i].fd == fd)
            return &d->ctl[i];
    return NULL;
}

void control_handle(struct daemon *d, const struct pollfd *p, int n)
{
    for (int i = 1; i < n; i++) {
        struct ctl_client *c = client_of(d, p[i].fd);
        if (!c || !p[i].revents)
            continue;
        if (c->out) {
            if ((p[i].revents & (POLLERR | POLLHUP)) || flush_out(c))
                drop(c);
        } else {
            read_some(d, c);
        }
    }
    /* New clients last: a command above may have ended the daemon's last
     * store, and then nobody is left to answer them. */
    if (n > 0 && (p[0].revents & POLLIN))
        accept_one(d);
}

void control_serve_late(struct daemon *d, int ms)
{
    /* A client whose connection waited while the last store went (a
     * second unmount, an unmount during SIGTERM's final sync) is in the
     * listening socket's backlog, or sent its line already: answered
     * here, with what the stores' unmount reported, instead of being
     * reset when the daemon exits. */
    int64_t until = now_ms() + ms;
    while (now_ms() < until) {
        struct pollfd p[1 + CTL_CLIENTS];
        int timeout = -1;
        int n = control_pollfds(d, p, &timeout);
        if (!n)
            return;
        int left = (int)(until - now_ms());
        if (timeout < 0 || timeout > left)
            timeout = left;
        if (timeout > 100)
            timeout = 100;
        int r = poll(p, (nfds_t)n, timeout < 0 ? 0 : timeout);
        bool busy = false;
        for (int i = 0; i < CTL_CLIENTS; i++)
            busy |= d->ctl[i].fd >= 0;
        if (r <= 0 && !busy)
            return; /* nobody waiting */
        if (r > 0)
            control_handle(d, p, n);
    }
}

void control_finish(struct daemon *d)
{
    int64_t until = now_ms() + 2000;
    for (int i = 0; i < CTL_CLIENTS; i++) {
        struct ctl_client *c = &d->ctl[i];
        while (c->fd >= 0 && c->out && !flush_out(c)) {
            int left = (int)(until - now_ms());
            struct pollfd pf = {c->fd, POLLOUT, 0};
            if (left <= 0 || poll(&pf, 1, left) <= 0)
                break;
        }
        drop(c);
    }
}
