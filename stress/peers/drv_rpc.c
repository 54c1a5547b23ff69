/* SPDX-License-Identifier: MIT */
/*
 * drv_rpc.c - the RPC shape of the existing KV-cache pools, client side
 * (the server is rpc_server.c, the protocol rpc_proto.h).
 *
 *   rpc    a batch of gets is one request and one reply over AF_UNIX
 *          (N keys per request: the batch size); the server copies each
 *          value into the worker's registered buffer (a memfd sent once
 *          with SCM_RIGHTS); puts are copied out of that buffer.  The
 *          prefix probe is one request of 2,000 keys.
 *   rpc1   the same server, protocol and connection, but one request
 *          and one reply per key: the shape of engines that call
 *          get(key) per page, so every value pays a whole round trip.
 *          Not run in the prefix section (that would be 2,000 round
 *          trips per batch; the rtt section gives the cost of one).
 */
#include <sys/socket.h>
#include <sys/un.h>

#include "stress/peers/rpc_proto.h"

struct kvpb_rpc {
	int fd;
	/* registered: [0, half) lands gets, [half, 2 half) puts */
	unsigned char *buf;
	uint64_t bufsz, half;
	unsigned char *req, *rep; /* messages: header, then ops / statuses */
	struct kvpb_rpc_op *ops;  /* in req */
	int64_t *st;              /* in rep */
};

static struct kvpb_rpc kvpb_prpc; /* the parent's: fills and deletes */
static struct kvpb_rpc kvpb_wrpc; /* a worker's (rpc and rpc1 share it) */
static bool kvpb_wrpc_up;

/* Connect to the server and register a buffer of 2 half bytes; its put
 * half is filled with copies of the putlen bytes at putsrc. */
static int
kvpb_rpc_connect(struct kvpb_rpc *r, uint64_t half, const unsigned char *putsrc,
		 uint64_t putlen)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov;
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cm.b,
			     .msg_controllen = sizeof(cm.b) };
	struct cmsghdr *c;
	uint64_t k;
	char ok;
	int mfd;

	memset(r, 0, sizeof(*r));
	r->half = half;
	r->bufsz = 2 * half;
	r->req = malloc(sizeof(struct kvpb_rpc_hdr) +
			KVPB_RPC_MAXN * sizeof(*r->ops));
	r->rep = malloc(sizeof(struct kvpb_rpc_hdr) +
			KVPB_RPC_MAXN * sizeof(*r->st));
	mfd = memfd_create("kvpb-rpc", MFD_CLOEXEC);
	if (!r->req || !r->rep || mfd < 0 || ftruncate(mfd, (off_t)r->bufsz))
		goto err;
	r->ops = (struct kvpb_rpc_op *)(void *)(r->req +
						sizeof(struct kvpb_rpc_hdr));
	r->st = (int64_t *)(void *)(r->rep + sizeof(struct kvpb_rpc_hdr));
	r->buf = mmap(NULL, r->bufsz, PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_POPULATE, mfd, 0);
	if (r->buf == MAP_FAILED)
		goto err;
	memset(r->buf, 0, r->half);
	/* the put half holds the pages a worker stores (the same value as
	 * the other systems' put source) */
	for (k = 0; putlen && k + putlen <= r->half; k += putlen)
		memcpy(r->buf + r->half + k, putsrc, putlen);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", kvpb_ctl->rpc_sock);
	if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&a, sizeof(a)))
		goto err;
	iov.iov_base = &r->bufsz;
	iov.iov_len = sizeof(r->bufsz);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &mfd, sizeof(int));
	if (sendmsg(r->fd, &mh, 0) != (ssize_t)sizeof(r->bufsz) ||
	    kvpb_read_full(r->fd, &ok, 1))
		goto err;
	close(mfd);
	return 0;
err:
	kvpb_log("bench_peers: rpc connect: %s\n", strerror(errno));
	if (mfd >= 0)
		close(mfd);
	return -EIO;
}

/* One round trip: the n ops in r->ops go out in one write, the reply
 * (statuses in r->st; RPC_EXISTS: *prefix) comes back.  0 or -EIO. */
static int
kvpb_rpc_call(struct kvpb_rpc *r, uint32_t n, uint32_t *prefix)
{
	struct kvpb_rpc_hdr h = { n, 0 };

	memcpy(r->req, &h, sizeof(h));
	if (kvpb_write_full(r->fd, r->req, sizeof(h) + n * sizeof(*r->ops)) ||
	    kvpb_rpc_read_msg(r->fd, r->rep,
			      sizeof(h) + KVPB_RPC_MAXN * sizeof(*r->st),
			      sizeof(*r->st)))
		return -EIO;
	memcpy(&h, r->rep, sizeof(h));
	if (prefix)
		*prefix = h.rh_prefix;
	return 0;
}

static void
kvpb_rpc_setop(struct kvpb_rpc_op *op, unsigned kind, const unsigned char *key,
	       uint64_t off, uint64_t len)
{
	op->ro_op = (uint8_t)kind;
	op->ro_klen = KVPB_KLEN;
	op->ro_off = off;
	op->ro_len = len;
	memcpy(op->ro_key, key, KVPB_KLEN);
}

/* ---- the parent: the server and the fill ---- */

/* Parent: RPC ops of kind (put, delete) on n keys, 1,024 per request;
 * a put's value sits at [half, half + len) of the registered buffer.
 * Returns how many failed. */
static uint64_t
kvpb_rpc_fill(const unsigned char *keys, uint64_t n, uint64_t len,
	      unsigned kind)
{
	uint64_t k = 0, bad = 0;

	while (k < n) {
		uint32_t m = n - k < 1024 ? (uint32_t)(n - k) : 1024, i;

		for (i = 0; i < m; i++)
			kvpb_rpc_setop(&kvpb_prpc.ops[i], kind,
				       keys + (k + i) * KVPB_KLEN,
				       kvpb_prpc.half, len);
		if (kvpb_rpc_call(&kvpb_prpc, m, NULL))
			return bad + n - k;
		for (i = 0; i < m; i++)
			bad += kvpb_prpc.st[i] < 0;
		k += m;
	}
	return bad;
}

static int
kvpb_rpc_start(void)
{
	int rc = kvpb_rpc_server_start();

	return rc ? rc :
		    kvpb_rpc_connect(&kvpb_prpc, kvpb_max_value(), NULL, 0);
}

static uint64_t
kvpb_rpc_fill_value(const struct kvpb_vset *v, uint64_t i, const void *val)
{
	memcpy(kvpb_prpc.buf + kvpb_prpc.half, val, v->size);
	return kvpb_rpc_fill(v->keys + i * KVPB_KLEN, 1, v->size, RPC_PUT);
}

static uint64_t
kvpb_rpc_fill_index(const unsigned char *keys, uint64_t n)
{
	kvpb_prpc.buf[kvpb_prpc.half] = 1;
	return kvpb_rpc_fill(keys, n, 1, RPC_PUT);
}

/* A worker's keys at a time. */
static void
kvpb_rpc_mixed_undo(const unsigned char *keys, uint64_t nput, unsigned procs)
{
	unsigned w;

	for (w = 0; w < procs; w++)
		kvpb_rpc_fill(keys + w * nput * KVPB_KLEN, nput, 0, RPC_DEL);
}

static void
kvpb_rpc_stop(void)
{
	if (kvpb_prpc.fd > 0)
		close(kvpb_prpc.fd);
	kvpb_rpc_server_stop();
}

/* ---- a worker ---- */

static int
kvpb_rpc_open(struct kvpb_worker *W, unsigned pool)
{
	int rc = 0;

	(void)pool;
	if (!kvpb_wrpc_up) {
		rc = kvpb_rpc_connect(&kvpb_wrpc, W->maxbb, W->src,
				      kvpb_cfg.sizes[0]);
		kvpb_wrpc_up = rc == 0;
	}
	return rc;
}

/*
 * Get the m values v->keys[idx[k]], per keys to a request (rpc: all m,
 * one round trip; rpc1: 1, get(key) per page, a round trip per value),
 * each landing in the registered buffer where the batched request puts
 * it.  Failures; a failed round trip fails the rest.
 */
static uint64_t
kvpb_rpc_get_by(const struct kvpb_vset *v, const uint64_t *idx, unsigned m,
		unsigned per, const unsigned char **first)
{
	uint64_t sz = v->size, bad = 0;
	unsigned k, i, n;

	for (k = 0; k < m; k += n) {
		n = m - k < per ? m - k : per;
		for (i = 0; i < n; i++)
			kvpb_rpc_setop(&kvpb_wrpc.ops[i], RPC_GET,
				       v->keys + idx[k + i] * KVPB_KLEN,
				       (k + i) * sz, sz);
		if (kvpb_rpc_call(&kvpb_wrpc, n, NULL))
			return bad + m - k;
		for (i = 0; i < n; i++)
			bad += kvpb_wrpc.st[i] != (int64_t)sz;
	}
	*first = kvpb_wrpc.buf; /* gets land in the registered buffer */
	return bad;
}

/* Put the m keys, per keys to a request, each value taken from the put
 * half of the registered buffer.  Failures. */
static uint64_t
kvpb_rpc_put_by(const unsigned char *keys, unsigned m, unsigned per,
		uint64_t sz)
{
	uint64_t bad = 0;
	unsigned k, i, n;

	for (k = 0; k < m; k += n) {
		n = m - k < per ? m - k : per;
		for (i = 0; i < n; i++)
			kvpb_rpc_setop(&kvpb_wrpc.ops[i], RPC_PUT,
				       keys + (k + i) * KVPB_KLEN,
				       kvpb_wrpc.half +
					       ((k + i) *
						sz) % (kvpb_wrpc.half - sz + 1),
				       sz);
		if (kvpb_rpc_call(&kvpb_wrpc, n, NULL))
			return bad + m - k;
		for (i = 0; i < n; i++)
			bad += kvpb_wrpc.st[i] != 0;
	}
	return bad;
}

static uint64_t
kvpb_rpc_get(struct kvpb_worker *W, const struct kvpb_vset *v,
	     const uint64_t *idx, unsigned m, const unsigned char **first)
{
	(void)W;
	return kvpb_rpc_get_by(v, idx, m, m, first);
}

static uint64_t
kvpb_rpc1_get(struct kvpb_worker *W, const struct kvpb_vset *v,
	      const uint64_t *idx, unsigned m, const unsigned char **first)
{
	(void)W;
	return kvpb_rpc_get_by(v, idx, m, 1, first);
}

static uint64_t
kvpb_rpc_put(struct kvpb_worker *W, const unsigned char *keys, unsigned m,
	     uint64_t sz, uint64_t slot)
{
	(void)W;
	(void)slot;
	return kvpb_rpc_put_by(keys, m, m, sz);
}

static uint64_t
kvpb_rpc1_put(struct kvpb_worker *W, const unsigned char *keys, unsigned m,
	      uint64_t sz, uint64_t slot)
{
	(void)W;
	(void)slot;
	return kvpb_rpc_put_by(keys, m, 1, sz);
}

static uint64_t
kvpb_rpc_prefix(struct kvpb_worker *W, unsigned ix, const unsigned char *keys,
		uint64_t first)
{
	uint32_t prefix = 0;
	unsigned k;

	(void)W;
	(void)ix;
	(void)first;
	for (k = 0; k < KVPB_PREFIX; k++)
		kvpb_rpc_setop(&kvpb_wrpc.ops[k], RPC_EXISTS,
			       keys + k * KVPB_KLEN, 0, 0);
	if (kvpb_rpc_call(&kvpb_wrpc, KVPB_PREFIX, &prefix))
		return 0;
	return prefix;
}

const struct kvpb_driver kvpb_drv_rpc = {
	.name = "rpc",
	.start = kvpb_rpc_start,
	.fill_value = kvpb_rpc_fill_value,
	.fill_index = kvpb_rpc_fill_index,
	.mixed_undo = kvpb_rpc_mixed_undo,
	.stop = kvpb_rpc_stop,
	.open = kvpb_rpc_open,
	.get = kvpb_rpc_get,
	.put = kvpb_rpc_put,
	.prefix = kvpb_rpc_prefix,
};

const struct kvpb_driver kvpb_drv_rpc1 = {
	.name = "rpc1",
	.shares = &kvpb_drv_rpc,
	.per_key = true,
	.rtt = true,
	.open = kvpb_rpc_open,
	.get = kvpb_rpc1_get,
	.put = kvpb_rpc1_put,
};
