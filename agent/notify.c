/* SPDX-License-Identifier: MIT */
/*
 * notify.c - the service manager's readiness protocol (sd_notify(3)),
 * without libsystemd: when systemd starts the agent as a Type=notify
 * service (agent/kvpoold@.service.in), it sets NOTIFY_SOCKET to an
 * AF_UNIX datagram socket; each message is one datagram of "KEY=VALUE"
 * lines.  The agent sends
 *   READY=1      once it serves: the moment a daemonizing kvpoold tells
 *                its waiting parent (kvpoold.c), recovery done;
 *   STATUS=...   a line for 'systemctl status' (serving, the populate's
 *                progress every 25%, stopping);
 *   STOPPING=1   when a SIGTERM or SIGINT starts the clean stop (the
 *                flush of DRAM-only values to SSD may take minutes).
 * NOTIFY_SOCKET is a path ("/run/systemd/notify") or, starting with '@',
 * an abstract name ('@' stands for the leading NUL).  Without it nothing
 * is sent.  A failure is logged once and never stops the agent: a service
 * manager that misses READY=1 fails the start itself, on its own timeout.
 *
 * Threads: main (ready, stopping) and the tier thread (populate
 * progress); a mutex orders them (a few messages per run).  Each message
 * opens its own socket: nothing is kept open across a fork or an exec.
 */
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "agent/agent_int.h"

static pthread_mutex_t kvp_notify_lock = PTHREAD_MUTEX_INITIALIZER;
static bool kvp_notify_logged; /* under kvp_notify_lock */

/* Send one datagram to NOTIFY_SOCKET: 0 or -errno. */
static int
kvp_notify_send(const char *where, const char *msg)
{
	struct sockaddr_un sa;
	size_t len = strlen(where);
	socklen_t salen;
	int fd, rc = 0;

	if ((where[0] != '/' && where[0] != '@') || len < 2 ||
	    len >= sizeof(sa.sun_path))
		return -EAFNOSUPPORT;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, where, len);
	/* an abstract name: '@' is its leading NUL, and its length is
	 * exact (no terminating NUL); a path's length counts its NUL */
	if (where[0] == '@')
		sa.sun_path[0] = '\0';
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
			    (where[0] == '/'));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* never block the agent on a receiver that does not read: a full
	 * queue loses the message (EAGAIN, logged) */
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT,
		   (const struct sockaddr *)&sa, salen) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

void
kvp_notify_agent(const char *fmt, ...)
{
	const char *where = getenv("NOTIFY_SOCKET");
	char msg[512];
	va_list ap;
	int rc;

	if (!where || !where[0])
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&kvp_notify_lock);
	rc = kvp_notify_send(where, msg);
	if (rc && !kvp_notify_logged) {
		kvp_notify_logged = true;
		kvp_log(KVP_LOG_WARN, "notify",
			"cannot notify the service manager at NOTIFY_SOCKET=%s: "
			"%s (the agent serves; further failures are not logged)",
			where, strerror(-rc));
	}
	pthread_mutex_unlock(&kvp_notify_lock);
}
