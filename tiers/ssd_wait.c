/* SPDX-License-Identifier: MIT */
/*
 * ssd_wait.c - the tier thread's sleep (kvp_wait.h).
 *
 * Why no wake is lost: the caller loads the word (val) before it looks
 * for work, and reaps completions before it sleeps.  A client that posts
 * later bumps the word and then calls FUTEX_WAKE: a FUTEX_WAIT armed
 * before the bump fails at once (-EAGAIN: the word is not val) or is
 * queued and woken; one armed earlier (still pending from an earlier
 * call) is queued since then and woken too.  A completion after the reap
 * signals the eventfd: its counter stays nonzero until read, so a poll
 * armed later fires at once, one armed earlier fires then.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <liburing.h>
#include <linux/futex.h>

#include "shm/kvp_env.h"
#include "tiers/kvp_wait.h"

/* Linux 6.7 (liburing 2.5 names them; Debian 12 has 2.3) */
#define KVP_IORING_OP_FUTEX_WAIT 51
#define KVP_FUTEX2_SIZE_U32 0x02 /* shared: no FUTEX2_PRIVATE */

enum {
	KVP_WAIT_FUTEX = 1,
	KVP_WAIT_POLL = 2
};

struct kvp_wait {
	struct io_uring ring;
	int efd;
	bool futex_armed, poll_armed;
	bool no_futex; /* the kernel has no FUTEX_WAIT: 1 ms slices */
};

int
kvp_wait_open_agent(int efd, struct kvp_wait **out)
{
	struct kvp_wait *w = calloc(1, sizeof(*w));
	int rc;

	if (!w)
		return -ENOMEM;
	rc = io_uring_queue_init(4, &w->ring, 0);
	if (rc) {
		free(w);
		return rc;
	}
	w->efd = efd;
	*out = w;
	return 0;
}

void
kvp_wait_close_agent(struct kvp_wait *w)
{
	if (!w)
		return;
	io_uring_queue_exit(&w->ring);
	free(w);
}

static void
kvp_wait_reap(struct kvp_wait *w, struct io_uring_cqe *cqe, int *woken)
{
	uint64_t v;

	switch (io_uring_cqe_get_data64(cqe)) {
	case KVP_WAIT_FUTEX:
		w->futex_armed = false;
		if (cqe->res == -EINVAL || cqe->res == -EOPNOTSUPP) {
			kvp_log(KVP_LOG_INFO, "ssd",
				"io_uring has no FUTEX_WAIT (%s): the tier "
				"thread looks at the request rings every 1 ms "
				"while I/O is in flight",
				strerror(-cqe->res));
			w->no_futex = true;
		}
		*woken = 1;
		break;
	case KVP_WAIT_POLL:
		w->poll_armed = false;
		/* reset the counter: the next poll waits for new ones */
		if (read(w->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			v = 0;
		*woken = 1;
		break;
	default:
		break;
	}
}

int
kvp_wait_agent(struct kvp_wait *w, const volatile unsigned int *word,
	       unsigned int val, int timeout_ms)
{
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	int woken = 0, rc;

	if (word && w->no_futex && timeout_ms > 1)
		timeout_ms = 1;
	if (word && !w->no_futex && !w->futex_armed &&
	    (sqe = io_uring_get_sqe(&w->ring))) {
		/* FUTEX_WAIT: fd = futex2 flags, addr = the word, off = the
		 * value expected, addr3 = the wake mask */
		io_uring_prep_rw(KVP_IORING_OP_FUTEX_WAIT, sqe,
				 KVP_FUTEX2_SIZE_U32,
				 (const void *)(uintptr_t)word, 0, val);
		sqe->rw_flags = 0;
		sqe->addr3 = FUTEX_BITSET_MATCH_ANY;
		io_uring_sqe_set_data64(sqe, KVP_WAIT_FUTEX);
		w->futex_armed = true;
	}
	if (!w->poll_armed && (sqe = io_uring_get_sqe(&w->ring))) {
		io_uring_prep_poll_add(sqe, w->efd, POLLIN);
		io_uring_sqe_set_data64(sqe, KVP_WAIT_POLL);
		w->poll_armed = true;
	}
	ts.tv_sec = timeout_ms / 1000;
	ts.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
	rc = io_uring_submit_and_wait_timeout(
		&w->ring, &cqe, 1, timeout_ms > 0 ? &ts : NULL, NULL);
	if (rc < 0 && rc != -ETIME && rc != -EINTR)
		return rc;
	while (io_uring_peek_cqe(&w->ring, &cqe) == 0) {
		kvp_wait_reap(w, cqe, &woken);
		io_uring_cqe_seen(&w->ring, cqe);
	}
	return woken;
}
