/* setupwatch.c - SIGTERM and SIGINT while the daemon sets up its stores
 * (looks them up, lists them, mounts them): that can take minutes with a
 * slow server, and the main loop that serves signals has not started.  A
 * thread of its own waits for them on a signalfd of those two signals
 * only (SIGHUP stays pending for the main loop's), and cancels the HTTP
 * requests in flight; setup_stores sees setupwatch_fired between its
 * steps and fails, and nothing stays mounted.
 *
 * Threads: the watcher, from setupwatch_start to setupwatch_stop (both on
 * the main thread).  The signals are blocked in every thread already
 * (daemon.c), so only the signalfds see them.  The client pointer is read
 * with an atomic load: the main thread creates the client meanwhile. */
#include "setupwatch.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "http.h"
#include "log.h"

static struct {
    int sig_fd, stop_fd;
    struct http_client **http;
    int fired; /* the signal taken, atomic */
    pthread_t thr;
    bool running;
} W = {.sig_fd = -1, .stop_fd = -1};

static void *watch(void *arg)
{
    (void)arg;
    struct pollfd p[2] = {{W.sig_fd, POLLIN, 0}, {W.stop_fd, POLLIN, 0}};
    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        if (p[1].revents)
            return NULL;
        struct signalfd_siginfo si;
        if ((p[0].revents & POLLIN) && read(W.sig_fd, &si, sizeof(si)) == sizeof(si)) {
            __atomic_store_n(&W.fired, (int)si.ssi_signo, __ATOMIC_RELEASE);
            log_info("signal received while the stores are set up; stopping", "signal",
                     si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
            struct http_client *c = __atomic_load_n(W.http, __ATOMIC_ACQUIRE);
            if (c)
                http_client_cancel(c, true);
            return NULL;
        }
    }
}

int setupwatch_start(struct http_client **http)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    W.http = http;
    W.fired = 0;
    W.sig_fd = signalfd(-1, &set, SFD_CLOEXEC);
    W.stop_fd = eventfd(0, EFD_CLOEXEC);
    int rc = W.sig_fd < 0 || W.stop_fd < 0 ? -errno : -pthread_create(&W.thr, NULL, watch, NULL);
    if (rc) {
        setupwatch_stop();
        return rc;
    }
    W.running = true;
    return 0;
}

bool setupwatch_fired(void)
{
    return __atomic_load_n(&W.fired, __ATOMIC_ACQUIRE) != 0;
}

int setupwatch_stop(void)
{
    if (W.running) {
        uint64_t one = 1;
        (void)!write(W.stop_fd, &one, sizeof(one));
        pthread_join(W.thr, NULL);
        W.running = false;
    }
    if (W.sig_fd >= 0)
        close(W.sig_fd);
    if (W.stop_fd >= 0)
        close(W.stop_fd);
    W.sig_fd = W.stop_fd = -1;
    return __atomic_load_n(&W.fired, __ATOMIC_ACQUIRE);
}
