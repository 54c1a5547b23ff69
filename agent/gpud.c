/* SPDX-License-Identifier: MIT */
/*
 * gpud.c - kvpool-gpud: the helper that owns one GPU's HBM pool for the
 * agent (docs/design.md, "The HBM tier").  The agent starts one per
 * --hbm-gpu and supervises it; its life is tied to the agent's (it dies
 * with it: PR_SET_PDEATHSIG, and the end of its control socket), never to
 * a worker's, so a worker's crash loses nothing of the tier.
 *
 * It creates a CUDA memory pool whose allocations can be exported as
 * POSIX file descriptors, allocates one block of --bytes from it, and
 *  - tells the agent it is ready (struct kvp_hbm_msg on the control
 *    socket, fd 3), or why not (hm_status: -ENOTSUP no runtime, -ENODEV no
 *    device or driver, -ENOMEM, -EIO);
 *  - serves the pool to workers on the abstract socket named for the pool,
 *    the GPU slot, its generation and a nonce it draws (getrandom; the
 *    agent publishes it, so no one can bind the name first,
 *    tiers/kvp_hbm.h): one message and
 *    the pool's descriptor (SCM_RIGHTS), to peers of the segment owner's
 *    uid, root, or the segment's group when the segment is group-shared;
 *  - copies values into the block when the agent asks (struct
 *    kvp_hbm_req: a slot, the state word it read, an offset): as a client
 *    of the pool, it holds the slot at that generation (or answers
 *    -ENOENT: it moved on), DMAs it from the DRAM tier (registered in this
 *    process, shm/client_dev_int.h) and answers when the copy is done, so
 *    the agent publishes only bytes that are in place.
 * It exits when the control socket ends (the agent stopped or died).
 *
 * Usage: kvpool-gpud --pool NAME --slot K --device N --bytes B --gen G
 */
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "kvpool.h"
#include "tiers/kvp_hbm.h"

#define CTL_FD 3

static int
tell_agent(const struct kvp_hbm_msg *m)
{
	return send(CTL_FD, m, sizeof(*m), MSG_NOSIGNAL) ==
			       (ssize_t)sizeof(*m) ?
		       0 :
		       -1;
}

static void
fail(struct kvp_hbm_msg *m, int status, const char *what, unsigned err)
{
	struct kvp_cuda *cu = kvp_cuda();

	m->hm_status = status;
	/* no runtime, device or driver: the agent says so, once */
	if (status != -ENOTSUP && status != -ENODEV)
		kvp_log(KVP_LOG_WARN, "gpud", "%s: %s (%s)", what,
			kvp_strerror(status),
			err && cu->GetErrorString ? cu->GetErrorString(err) :
						    "-");
	tell_agent(m);
	exit(1);
}

/* May peer (a connected socket) have the pool?  The segment's owner, root,
 * or its group when the segment is group-shared (--group). */
static bool
peer_ok(int s, const struct stat *seg)
{
	struct ucred uc;
	socklen_t l = sizeof(uc);

	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0)
		return false;
	return uc.uid == 0 || uc.uid == seg->st_uid ||
	       ((seg->st_mode & 0060) == 0060 && uc.gid == seg->st_gid);
}

static void
serve_peer(int ls, int pool_fd, const struct kvp_hbm_msg *m,
	   const struct stat *seg)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { (void *)(uintptr_t)m, sizeof(*m) };
	struct msghdr mh;
	struct cmsghdr *cm;
	int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);

	if (s < 0)
		return;
	if (!peer_ok(s, seg)) {
		kvp_log(KVP_LOG_WARN, "gpud",
			"a process of another user asked for the pool: refused");
		close(s);
		return;
	}
	memset(&mh, 0, sizeof(mh));
	memset(cbuf, 0, sizeof(cbuf));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cbuf;
	mh.msg_controllen = sizeof(cbuf);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &pool_fd, sizeof(int));
	(void)sendmsg(s, &mh, MSG_NOSIGNAL);
	close(s);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pool", required_argument, NULL, 'p' },
		{ "slot", required_argument, NULL, 's' },
		{ "device", required_argument, NULL, 'd' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "gen", required_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvp_cu_pool_props props;
	struct kvp_hbm_msg m;
	struct kvp_client *c = NULL;
	struct sockaddr_un sa;
	struct stat seg;
	struct kvp_cuda *cu;
	const char *pool = NULL;
	unsigned slot = 0;
	int device = 0, pool_fd = -1, ls, o;
	uint64_t bytes = 0, gen = 0;
	void *mp = NULL, *base = NULL, *stream = NULL;
	unsigned err;
	socklen_t sl;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'p':
			pool = optarg;
			break;
		case 's':
			slot = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'd':
			device = (int)strtol(optarg, NULL, 10);
			break;
		case 'b':
			bytes = strtoull(optarg, NULL, 10);
			break;
		case 'g':
			gen = strtoull(optarg, NULL, 10);
			break;
		default:
			return 2;
		}
	}
	/* our life is the agent's: it started us with the control socket */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1 || !pool || slot >= KVP_GPU_MAX || !bytes ||
	    fcntl(CTL_FD, F_GETFD) < 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	memset(&m, 0, sizeof(m));
	m.hm_magic = KVP_HBM_MSG_MAGIC;
	m.hm_gen = gen;
	m.hm_bytes = bytes;
	m.hm_device = device;
	cu = kvp_cuda();
	if (cu->cu_status)
		fail(&m, cu->cu_status, "no HBM tier", cu->cu_init_err);
	if (!cu->MemPoolCreate)
		fail(&m, -ENOTSUP, "the CUDA runtime has no memory pools", 0);
	if (device >= cu->cu_devices)
		fail(&m, -ENODEV, "no such device", 0);
	if ((err = cu->SetDevice(device)) != KVP_CU_OK)
		fail(&m, kvp_cuda_status(err), "cudaSetDevice", err);
	if ((err = cu->StreamCreateWithFlags(&stream,
					     KVP_CU_STREAM_NON_BLOCKING)))
		fail(&m, kvp_cuda_status(err), "cudaStreamCreate", err);
	memset(&props, 0, sizeof(props));
	props.pp_alloc_type = KVP_CU_ALLOC_PINNED;
	props.pp_handle_types = KVP_CU_HANDLE_POSIX_FD;
	props.pp_location.ml_type = KVP_CU_MEMLOC_DEVICE;
	props.pp_location.ml_id = device;
	if ((err = cu->MemPoolCreate(&mp, &props)) != KVP_CU_OK)
		fail(&m, kvp_cuda_status(err), "cudaMemPoolCreate", err);
	if ((err = cu->MallocFromPoolAsync(&base, bytes, mp, stream)) !=
		    KVP_CU_OK ||
	    (err = cu->StreamSynchronize(stream)) != KVP_CU_OK)
		fail(&m, -ENOMEM, "cudaMallocFromPoolAsync", err);
	if ((err = cu->MemPoolExportToShareableHandle(
		     &pool_fd, mp, KVP_CU_HANDLE_POSIX_FD, 0)) != KVP_CU_OK ||
	    (err = cu->MemPoolExportPointer(&m.hm_export, base)) != KVP_CU_OK)
		fail(&m, -EIO, "exporting the pool", err);
	/* a client of the pool, for the copies (its slot is reaped if we
	 * die) */
	if (kvp_open(pool, "kvpool-gpud", &c))
		fail(&m, -ENOTCONN, "kvp_open", 0);
	if (fstat(c->seg.fd, &seg) < 0)
		fail(&m, -EIO, "fstat of the segment", 0);
	/* the name's unguessable part (never 0: 0 is "none" to workers) */
	do {
		if (getrandom(&m.hm_nonce, sizeof(m.hm_nonce), 0) !=
		    (ssize_t)sizeof(m.hm_nonce))
			fail(&m, -EIO, "getrandom", 0);
	} while (!m.hm_nonce);
	ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	sl = kvp_hbm_addr(&sa, pool, slot, gen, m.hm_nonce);
	if (ls < 0 || !sl || bind(ls, (struct sockaddr *)&sa, sl) < 0 ||
	    listen(ls, 64) < 0)
		fail(&m, -EIO, "the pool's socket", 0);
	if (tell_agent(&m))
		return 1;
	kvp_log(KVP_LOG_INFO, "gpud",
		"GPU %d: %llu MiB pool served (slot %u, generation %llu)",
		device, (unsigned long long)(bytes >> 20), slot,
		(unsigned long long)gen);
	for (;;) {
		struct pollfd pf[2] = { { CTL_FD, POLLIN, 0 },
					{ ls, POLLIN, 0 } };
		struct kvp_hbm_req q;
		struct kvp_hbm_rep r;
		ssize_t n;

		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[1].revents & POLLIN)
			serve_peer(ls, pool_fd, &m, &seg);
		if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		n = recv(CTL_FD, &q, sizeof(q), 0);
		if (n <= 0)
			break; /* the agent stopped or died */
		if (n != (ssize_t)sizeof(q))
			continue;
		r.hr_tag = q.hq_tag;
		if (q.hq_off > bytes || q.hq_len > bytes - q.hq_off)
			r.hr_status = -EINVAL;
		else
			r.hr_status = kvp__dev_copy_slot(
				c, device, stream, q.hq_slot, q.hq_word,
				(unsigned char *)base + q.hq_off, q.hq_len);
		if (send(CTL_FD, &r, sizeof(r), MSG_NOSIGNAL) !=
		    (ssize_t)sizeof(r))
			break;
		/* wake the agent's tier thread for the answer */
		kvp_wake_agent(&c->seg);
	}
	kvp_close(c);
	close(ls);
	return 0;
}
