/* SPDX-License-Identifier: MIT */
/*
 * rpc_server.c - the server of the RPC shape: the shape of the existing
 * KV-cache pools, where one server process owns the DRAM tier.
 *
 * A hash table of malloc'd values under a rwlock (a get holds it shared
 * while it copies; writers are preferred), a thread per connection.  A
 * get copies the value into the client's registered buffer (a memfd the
 * client sent once, see rpc_proto.h); a put copies it out of that
 * buffer, outside the lock.  A forked child of bench_peers' parent,
 * unpinned, started before any kvpool pool so that it inherits nothing
 * of one; it dies with the parent.
 */
#include <malloc.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "stress/peers/rpc_proto.h"

struct kvpb_rnode {
	struct kvpb_rnode *next;
	uint64_t hash, len;
	unsigned char *val;
	uint32_t klen;
	unsigned char key[KVPB_RPC_KMAX];
};

static struct {
	pthread_rwlock_t lock; /* a get holds it shared while it copies */
	struct kvpb_rnode **b;
	uint64_t mask;
} kvpb_rt;

static pid_t kvpb_rpc_pid = -1; /* the parent's: the server process */

static struct kvpb_rnode **
kvpb_rt_find_locked(uint64_t h, const unsigned char *key, uint32_t klen)
{
	struct kvpb_rnode **pp = &kvpb_rt.b[h & kvpb_rt.mask];

	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->hash == h && (*pp)->klen == klen &&
		    !memcmp((*pp)->key, key, klen))
			return pp;
	return pp;
}

/* One get, put or delete against the registered buffer buf. */
static int64_t
kvpb_rt_op(const struct kvpb_rpc_op *op, unsigned char *buf, uint64_t bufsz)
{
	uint64_t h = kvp_hash(7, op->ro_key, op->ro_klen);
	struct kvpb_rnode **pp, *n;
	int64_t st;

	if (op->ro_klen == 0 || op->ro_klen > KVPB_RPC_KMAX ||
	    op->ro_off > bufsz || op->ro_len > bufsz - op->ro_off)
		return -EINVAL;
	switch (op->ro_op) {
	case RPC_GET:
		pthread_rwlock_rdlock(&kvpb_rt.lock);
		n = *kvpb_rt_find_locked(h, op->ro_key, op->ro_klen);
		if (!n)
			st = -ENOENT;
		else if (n->len > op->ro_len)
			st = -EMSGSIZE;
		else {
			memcpy(buf + op->ro_off, n->val, n->len);
			st = (int64_t)n->len;
		}
		pthread_rwlock_unlock(&kvpb_rt.lock);
		return st;
	case RPC_PUT:
		n = malloc(sizeof(*n));
		if (!n)
			return -ENOMEM;
		n->val = malloc(op->ro_len ? op->ro_len : 1);
		if (!n->val) {
			free(n);
			return -ENOMEM;
		}
		/* outside the lock */
		memcpy(n->val, buf + op->ro_off, op->ro_len);
		n->len = op->ro_len;
		n->hash = h;
		n->klen = op->ro_klen;
		memcpy(n->key, op->ro_key, op->ro_klen);
		pthread_rwlock_wrlock(&kvpb_rt.lock);
		pp = kvpb_rt_find_locked(h, op->ro_key, op->ro_klen);
		if (*pp) {
			st = -EEXIST;
		} else {
			n->next = NULL;
			*pp = n;
			n = NULL;
			st = 0;
		}
		pthread_rwlock_unlock(&kvpb_rt.lock);
		if (n) {
			free(n->val);
			free(n);
		}
		return st;
	case RPC_DEL:
		pthread_rwlock_wrlock(&kvpb_rt.lock);
		pp = kvpb_rt_find_locked(h, op->ro_key, op->ro_klen);
		n = *pp;
		if (n)
			*pp = n->next;
		pthread_rwlock_unlock(&kvpb_rt.lock);
		if (!n)
			return -ENOENT;
		free(n->val);
		free(n);
		return 0;
	default:
		return -EINVAL;
	}
}

/* One connection: receive the worker's buffer (memfd + size), then serve
 * requests until it hangs up. */
static void *
kvpb_rpc_conn(void *arg)
{
	int fd = (int)(intptr_t)arg, mfd = -1;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	struct kvpb_rpc_hdr hdr;
	/* a request: header + ops; a reply: header + statuses */
	unsigned char *req = malloc(sizeof(hdr) +
				    KVPB_RPC_MAXN * sizeof(struct kvpb_rpc_op));
	unsigned char *rep =
		malloc(sizeof(hdr) + KVPB_RPC_MAXN * sizeof(int64_t));
	struct kvpb_rpc_op *ops =
		(struct kvpb_rpc_op *)(void *)(req + sizeof(hdr));
	int64_t *st = (int64_t *)(void *)(rep + sizeof(hdr));
	unsigned char *buf = MAP_FAILED;
	uint64_t bufsz = 0;
	struct iovec iov = { &bufsz, sizeof(bufsz) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cm.b,
			     .msg_controllen = sizeof(cm.b) };
	struct cmsghdr *c;
	char ok = 1;

	if (!req || !rep ||
	    recvmsg(fd, &mh, MSG_WAITALL) != (ssize_t)sizeof(bufsz))
		goto out;
	c = CMSG_FIRSTHDR(&mh);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		goto out;
	memcpy(&mfd, CMSG_DATA(c), sizeof(int));
	buf = mmap(NULL, bufsz, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_POPULATE, mfd, 0);
	if (buf == MAP_FAILED || kvpb_write_full(fd, &ok, 1))
		goto out;
	while (kvpb_rpc_read_msg(fd, req,
				 sizeof(hdr) + KVPB_RPC_MAXN * sizeof(*ops),
				 sizeof(*ops)) == 0) {
		struct kvpb_rpc_hdr rh = { 0, 0 };
		uint32_t k;

		memcpy(&hdr, req, sizeof(hdr));
		if (hdr.rh_n && ops[0].ro_op == RPC_EXISTS) {
			/* the prefix of present keys, one shared lock */
			pthread_rwlock_rdlock(&kvpb_rt.lock);
			for (k = 0; k < hdr.rh_n; k++) {
				const struct kvpb_rpc_op *op = &ops[k];
				uint64_t h =
					kvp_hash(7, op->ro_key, op->ro_klen);

				if (op->ro_klen > KVPB_RPC_KMAX ||
				    !*kvpb_rt_find_locked(h, op->ro_key,
							  op->ro_klen))
					break;
			}
			pthread_rwlock_unlock(&kvpb_rt.lock);
			rh.rh_prefix = k;
			if (kvpb_write_full(fd, &rh, sizeof(rh)))
				break;
			continue;
		}
		for (k = 0; k < hdr.rh_n; k++)
			st[k] = kvpb_rt_op(&ops[k], buf, bufsz);
		rh.rh_n = hdr.rh_n;
		/* one write: header and statuses */
		memcpy(rep, &rh, sizeof(rh));
		if (kvpb_write_full(fd, rep,
				    sizeof(rh) + hdr.rh_n * sizeof(*st)))
			break;
	}
out:
	if (buf != MAP_FAILED)
		munmap(buf, bufsz);
	if (mfd >= 0)
		close(mfd);
	close(fd);
	free(req);
	free(rep);
	return NULL;
}

static void __attribute__((noreturn)) kvpb_rpc_server(int lfd)
{
	pthread_rwlockattr_t ra;

	/* a long-lived server keeps its heap: no mmap per value, no trim */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, INT_MAX);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(
		&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&kvpb_rt.lock, &ra);
	kvpb_rt.mask = (1u << 20) - 1;
	kvpb_rt.b = calloc(kvpb_rt.mask + 1, sizeof(*kvpb_rt.b));
	if (!kvpb_rt.b)
		_exit(1);
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		if (pthread_create(&t, NULL, kvpb_rpc_conn,
				   (void *)(intptr_t)fd))
			close(fd);
		else
			pthread_detach(t);
	}
}

/* Parent: bind the socket (kvpb_ctl->rpc_sock) and fork the server.
 * 0 or -errno. */
int
kvpb_rpc_server_start(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int lfd;

	snprintf(kvpb_ctl->rpc_sock, sizeof(kvpb_ctl->rpc_sock),
		 "/tmp/kvpb-rpc.%d.sock", (int)getpid());
	unlink(kvpb_ctl->rpc_sock);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", kvpb_ctl->rpc_sock);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(lfd, 64)) {
		if (lfd >= 0)
			close(lfd);
		return -errno;
	}
	kvpb_rpc_pid = fork();
	if (kvpb_rpc_pid < 0) {
		close(lfd);
		return -errno;
	}
	if (kvpb_rpc_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		kvpb_close_fds_but(lfd);
		kvpb_rpc_server(lfd);
	}
	close(lfd);
	return 0;
}

/* Parent: kill the server (whatever it holds goes with it). */
void
kvpb_rpc_server_stop(void)
{
	if (kvpb_rpc_pid > 0) {
		kill(kvpb_rpc_pid, SIGKILL);
		waitpid(kvpb_rpc_pid, NULL, 0);
		unlink(kvpb_ctl->rpc_sock);
	}
	kvpb_rpc_pid = -1;
}
