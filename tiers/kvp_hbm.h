/* SPDX-License-Identifier: MIT */
/*
 * kvp_hbm.h - the HBM tier's wire: how a worker gets a GPU's pool from its
 * helper (kvpool-gpud, agent/gpud.c), and the agent's requests to the
 * helper (docs/design.md, "The HBM tier").
 *
 * A helper owns one CUDA memory pool (POSIX file-descriptor handles) per
 * GPU and one block of it; it serves the pool on an abstract Unix socket
 * named for the pool, the GPU slot, the slot's generation and a 64-bit
 * nonce the helper draws at start (getrandom) and the agent publishes in
 * the segment (gs_nonce), so a worker never gets another generation's
 * pool.  Abstract names have no owner or mode: anyone may bind any name
 * first.  The nonce makes the name unguessable before the helper binds it
 * (a squatter cannot keep the tier down), and a worker takes the pool
 * only from the process the segment names (gs_pid: SO_PEERCRED of the
 * server, and its uid the segment owner's), never from whoever holds the
 * name.  The answer is one message, struct kvp_hbm_msg, with the pool's
 * descriptor attached (SCM_RIGHTS); the worker imports the pool
 * (cudaMemPoolImportFromShareableHandle) and the block
 * (cudaMemPoolImportPointer) once, and caches them per process.
 */
#ifndef KVP_HBM_H
#define KVP_HBM_H

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tiers/kvp_cuda.h"

#define KVP_HBM_MSG_MAGIC 0x314d4248504b564bull /* "KVPKHBM1" */

/* What a helper tells a worker (and the agent, when it is ready). */
struct kvp_hbm_msg {
	uint64_t hm_magic;
	uint64_t hm_gen;   /* the GPU slot's generation it serves */
	uint64_t hm_bytes; /* the block's size */
	uint64_t hm_nonce; /* its socket name's unguessable part (never 0) */
	int32_t hm_device; /* CUDA device ordinal of the pool */
	int32_t hm_status; /* to the agent at start: 0 or why not */
	struct kvp_cu_ptr_export hm_export; /* the block */
};

/* The agent's request to its helper (ctl socket), and the answer. */
struct kvp_hbm_req {
	uint64_t hq_slot; /* index slot */
	uint64_t hq_word; /* its state word (READY, the generation read) */
	uint64_t hq_len;  /* bytes */
	uint64_t hq_off;  /* byte offset in the block */
	uint64_t hq_tag;  /* echoed */
};

struct kvp_hbm_rep {
	uint64_t hr_tag;
	int64_t hr_status; /* 0 copied; -ENOENT moved on; -EIO ... */
};

/* The socket's abstract name (no file: it goes with the helper):
 * "kvpool.<pool>.gpu<k>.<gen>.<nonce>", generation and nonce in hex (a
 * 63-byte pool name fits: 105 bytes at most). */
static inline socklen_t
kvp_hbm_addr(struct sockaddr_un *sa, const char *pool, unsigned gpu,
	     uint64_t gen, uint64_t nonce)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1,
		     "kvpool.%s.gpu%u.%llx.%016llx", pool, gpu,
		     (unsigned long long)gen, (unsigned long long)nonce);
	if (n < 0 || (size_t)n >= sizeof(sa->sun_path) - 1)
		return 0;
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			   (size_t)n);
}

/* Ask the helper of (pool, gpu, gen, nonce) for its pool, and take it
 * only if the socket's server is that helper: process pid, of user uid
 * (the segment's record of it, and the segment's owner).  0 with *m and
 * *fd (the pool's descriptor: the caller closes it), or -ENOTCONN (no
 * such helper now), -EPERM (another process serves the name: nothing is
 * read from it), -EPROTO (a bad answer), -errno.  Waits 2 s at most. */
static inline int
kvp_hbm_fetch(const char *pool, unsigned gpu, uint64_t gen, uint64_t nonce,
	      pid_t pid, uid_t uid, struct kvp_hbm_msg *m, int *fd)
{
	struct sockaddr_un sa;
	socklen_t sl = kvp_hbm_addr(&sa, pool, gpu, gen, nonce);
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { m, sizeof(*m) };
	struct ucred uc;
	socklen_t ul = sizeof(uc);
	struct msghdr mh;
	struct cmsghdr *cm;
	struct pollfd pf;
	ssize_t r;
	int s, rc = -EPROTO;

	*fd = -1;
	if (!sl || pid <= 0 || !nonce)
		return -EINVAL;
	/* non-blocking: a server that never accepts costs -ENOTCONN, not a
	 * worker stuck in connect */
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&sa, sl) < 0) {
		close(s);
		return -ENOTCONN;
	}
	/* the server's credentials, as the kernel recorded them when it
	 * listened: a squatter of the name is not the helper */
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &uc, &ul) < 0 ||
	    ul != sizeof(uc) || uc.pid != pid || uc.uid != uid) {
		close(s);
		return -EPERM;
	}
	pf.fd = s;
	pf.events = POLLIN;
	if (poll(&pf, 1, 2000) != 1) {
		close(s);
		return -ENOTCONN;
	}
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cbuf;
	mh.msg_controllen = sizeof(cbuf);
	r = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
	close(s);
	cm = r > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
	    cm->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(fd, CMSG_DATA(cm), sizeof(int));
	if (r == (ssize_t)sizeof(*m) && *fd >= 0 &&
	    m->hm_magic == KVP_HBM_MSG_MAGIC && m->hm_gen == gen &&
	    m->hm_nonce == nonce && m->hm_status == 0)
		return 0;
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
	return r < 0 ? -ENOTCONN : rc;
}

#endif /* KVP_HBM_H */
