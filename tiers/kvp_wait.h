/* SPDX-License-Identifier: MIT */
/*
 * kvp_wait.h - the tier thread's sleep: until an SSD completion is ready
 * (an eventfd the stores' rings signal, kvp_ssd_set_eventfd_agent), or a
 * client moves a futex word in the segment (it posted a request), or a
 * timeout.  One private io_uring holds a POLL_ADD on the eventfd and an
 * IORING_OP_FUTEX_WAIT (Linux 6.7) on the word, so one sleep sees both;
 * a kernel without FUTEX_WAIT makes the word's wait 1 ms slices (as the
 * tier thread did before).  Agent only; one thread.
 */
#ifndef KVP_WAIT_H
#define KVP_WAIT_H

#include <stdbool.h>
#include <stdint.h>

struct kvp_wait;

/* 0, or -errno (io_uring refused: the caller waits as it did before). */
int kvp_wait_open_agent(int efd, struct kvp_wait **out);
void kvp_wait_close_agent(struct kvp_wait *w);

/*
 * Sleep until the eventfd is signalled, *word differs from val or is
 * woken (word != NULL), or timeout_ms (> 0) passes.  The waits armed stay
 * armed across calls (a wake between two calls is not lost).  1: woken,
 * 0: timed out, -errno.
 */
int kvp_wait_agent(struct kvp_wait *w, const volatile unsigned int *word,
		   unsigned int val, int timeout_ms);

#endif /* KVP_WAIT_H */
