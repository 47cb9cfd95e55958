/* sdnotify.c - readiness notification to systemd (Type=notify units).
 *
 * The protocol is systemd's documented and stable one (sd_notify(3)): a
 * datagram of "KEY=VALUE" lines sent to the Unix socket named by
 * $NOTIFY_SOCKET (a path, or an abstract name written with a leading '@').
 * It is spoken here directly rather than through libsystemd, so the
 * daemon has no dependency on systemd and behaves exactly the same when
 * no service manager started it: without $NOTIFY_SOCKET every call is a
 * no-op.  The variable is read once and removed from the environment, so
 * the programs the daemon runs (fusermount3) never see it.
 *
 * Messages: READY=1 once every store is mounted and listed, STOPPING=1
 * when the final sync before the daemon's exit begins, STATUS=... with
 * each.  Main thread only. */
#include "sdnotify.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

static struct sockaddr_un addr;
static socklen_t addr_len;

void sdnotify_init(void)
{
    const char *p = getenv("NOTIFY_SOCKET");
    addr_len = 0;
    if (!p || !*p)
        return;
    size_t n = strlen(p);
    if ((p[0] != '/' && p[0] != '@') || n >= sizeof(addr.sun_path)) {
        log_warn("NOTIFY_SOCKET is not a socket path; systemd will not hear that the daemon "
                 "is ready", "notify_socket", p);
    } else {
        memset(&addr, 0, sizeof(addr));
        addr.sun_family = AF_UNIX;
        memcpy(addr.sun_path, p, n);
        if (p[0] == '@')
            addr.sun_path[0] = '\0'; /* abstract namespace */
        addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    }
    unsetenv("NOTIFY_SOCKET");
}

void sdnotify(const char *state)
{
    if (!addr_len)
        return;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&addr,
                         addr_len) < 0)
        log_warn("cannot notify systemd", "state", state, "error", strerror(errno));
    if (fd >= 0)
        close(fd);
}
