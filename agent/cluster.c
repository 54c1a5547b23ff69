/* SPDX-License-Identifier: MIT */
/*
 * cluster.c - the remote tier: pages shared between nodes (kvpoold
 * --cluster redis://HOST:PORT --node NAME).
 *
 * Built on two existing components, no protocol of our own on the wire
 * beyond three message layouts: Redis is the directory, UCX moves the
 * bytes (active messages for the lease handshake, one-sided gets for the
 * pages; UCX picks the transport: TCP here, RDMA where the node has it).
 * One thread (this file's) does all of it; clients never leave shared
 * memory: they post a mailbox (struct kvp_rbox, shm/kvp_shm.h) and sleep.
 *
 * The directory (Redis), per node N:
 *   kvpool:members          set of node names
 *   kvpool:node:N           hash: UCX worker address, the packed rkeys
 *                           and base addresses of N's arena and bounce
 *                           buffer, N's secret, pool, capacity,
 *                           incarnation; PEXPIRE ttl, refreshed every
 *                           ttl/3 (a dead agent's entry is gone within ttl)
 *   kvpool:dir:N            hash: field = namespace id (8 bytes) + key
 *                           hash (8 bytes), value = the value's length;
 *                           the keys N's index holds; PEXPIRE ttl with the
 *                           node entry (a dead node's keys leave with it)
 * A full key directory, not ownership by rendezvous hashing: a page stays
 * on the node that computed it (no transfer at put), and a lookup of a
 * batch is one pipelined HMGET per live peer (one round trip).  Memory:
 * ~100 B per page in Redis (16-byte field, a short value, the hash entry;
 * measured), ~100 MB per million pages; traffic: one HSET field per put, one HDEL
 * per eviction or delete, batched every --cluster-publish-ms.
 * (docs/design.md, "The remote tier", has the comparison.)
 *
 * Publishing: every --cluster-publish-ms the thread walks the index's
 * state words and compares each READY slot's generation with what it
 * published last (a private array, 24 bytes per slot); changes go out as
 * one pipelined HSET + HDEL.  A page put here is in the directory at
 * most one interval + one pass + one round trip later (cl_pub_lag_ns
 * measures it); a page that left is unpublished as late.  Readers see a
 * stale entry as a MISS (the owner answers -ENOENT), never as bytes.
 *
 * A FETCH (a client's mailbox): the directory names an owner per key;
 * per owner LEASE messages (the namespace and up to 128 keys each, two
 * outstanding per owner: kvp_cl_wave); the owner
 * takes a timed lease per key (kvp_lease_acquire, the leases that exist
 * for remote readers) through a client handle of its own for that
 * namespace, and answers GRANT: for a value in DRAM in one run, its
 * address in the owner's registered arena; for any other (SSD-resident,
 * or in several runs) the owner reads it into its registered bounce
 * buffer first (through its own agent: staged) and grants that.  The
 * requester gets the bytes one-sided (ucp_get_nbx, 4 in flight, starting
 * as each GRANT arrives) into its receive buffer, puts each page into
 * this pool as it lands (kvp_put through its own handle: the fetched page
 * is kept, as an ordinary entry) and answers it in the client's mailbox
 * at once, then sends RELEASE.  A get completed after the lease's
 * deadline as the requester counts it (from before it asked for that
 * chunk, minus a quarter of the lease for clock rates) is discarded
 * (-EIO): the owner may have reused the bytes.  Waves: as many keys as
 * the receive buffer holds; larger batches take several waves (rule 5).
 *
 * Failure: every wait is bounded (--remote-timeout-ms without progress:
 * no GRANT, no get completed; the lease bounds the bytes); a peer whose
 * endpoint fails (UCX error handling PEER) fails its keys (-EIO) and is
 * dropped until the directory names it again; Redis down: lookups answer
 * MISS at once (state DOWN, clients do not even ask), publishing resumes
 * from scratch on reconnect.  Local service never waits on this thread.
 *
 * Trust: a LEASE is served only to a node that is a live member of the
 * directory and that presents the owner's secret (published in the
 * owner's node entry: only readers of the directory know it); GRANTs go
 * to the registered address of the named node, never to whoever asked;
 * the owner serves exactly the namespace named, and the requester's
 * agent names only the namespace of the client that asked.  What an
 * attacker on the network can do: see the traffic (TCP is not
 * encrypted), and, having seen a secret or read the directory, read the
 * arena with one-sided gets (an rkey covers the whole arena).  Run the
 * cluster on a trusted network (docs/design.md).
 */
#include <ctype.h>
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>
#include <ucp/api/ucp.h>

#include "agent/agent_int.h"

/* UCX, loaded when the agent runs a cluster (never linked: a node without
 * --cluster loads none of it, its constructors and memory hooks
 * included); the types and macros are the headers' (libucx-dev). */
static struct {
	__typeof__(&ucp_am_send_nbx) am_send_nbx;
	__typeof__(&ucp_cleanup) cleanup;
	__typeof__(&ucp_config_read) config_read;
	__typeof__(&ucp_config_release) config_release;
	__typeof__(&ucp_ep_close_nbx) ep_close_nbx;
	__typeof__(&ucp_ep_create) ep_create;
	__typeof__(&ucp_ep_rkey_unpack) ep_rkey_unpack;
	__typeof__(&ucp_get_nbx) get_nbx;
	__typeof__(&ucp_mem_map) mem_map;
	__typeof__(&ucp_mem_unmap) mem_unmap;
	__typeof__(&ucp_request_cancel) request_cancel;
	__typeof__(&ucp_request_check_status) request_check_status;
	__typeof__(&ucp_request_free) request_free;
	__typeof__(&ucp_rkey_buffer_release) rkey_buffer_release;
	__typeof__(&ucp_rkey_destroy) rkey_destroy;
	__typeof__(&ucp_rkey_pack) rkey_pack;
	__typeof__(&ucp_worker_arm) worker_arm;
	__typeof__(&ucp_worker_create) worker_create;
	__typeof__(&ucp_worker_destroy) worker_destroy;
	__typeof__(&ucp_worker_get_address) worker_get_address;
	__typeof__(&ucp_worker_get_efd) worker_get_efd;
	__typeof__(&ucp_worker_progress) worker_progress;
	__typeof__(&ucp_worker_release_address) worker_release_address;
	__typeof__(&ucp_worker_set_am_recv_handler) worker_set_am_recv_handler;
	__typeof__(&ucs_status_string) status_string;
	__typeof__(&ucp_init_version) init_version;
} U;

/* libucp.so.0 (and libucs.so.0, which it needs) into U; 0 or -1 (logged) */
static int
kvp_cl_load_ucx(void)
{
	static const struct {
		const char *name;
		size_t off;
		bool ucs;
	} syms[] = {
#define KVP_UCX_SYM(f, field, ucs) { #f, offsetof(__typeof__(U), field), ucs },
		KVP_UCX_SYM(ucp_am_send_nbx, am_send_nbx, false) KVP_UCX_SYM(
			ucp_cleanup, cleanup,
			false) KVP_UCX_SYM(ucp_config_read, config_read,
					   false) KVP_UCX_SYM(ucp_config_release,
							      config_release,
							      false) KVP_UCX_SYM(ucp_ep_close_nbx,
										 ep_close_nbx,
										 false)
			KVP_UCX_SYM(ucp_ep_create, ep_create, false) KVP_UCX_SYM(
				ucp_ep_rkey_unpack, ep_rkey_unpack,
				false) KVP_UCX_SYM(ucp_get_nbx, get_nbx,
						   false) KVP_UCX_SYM(ucp_mem_map,
								      mem_map,
								      false) KVP_UCX_SYM(ucp_mem_unmap,
											 mem_unmap,
											 false)
				KVP_UCX_SYM(ucp_request_cancel, request_cancel, false) KVP_UCX_SYM(
					ucp_request_check_status,
					request_check_status,
					false) KVP_UCX_SYM(ucp_request_free,
							   request_free,
							   false) KVP_UCX_SYM(ucp_rkey_buffer_release,
									      rkey_buffer_release,
									      false)
					KVP_UCX_SYM(ucp_rkey_destroy, rkey_destroy, false) KVP_UCX_SYM(
						ucp_rkey_pack, rkey_pack,
						false) KVP_UCX_SYM(ucp_worker_arm,
								   worker_arm,
								   false) KVP_UCX_SYM(ucp_worker_create,
										      worker_create,
										      false)
						KVP_UCX_SYM(ucp_worker_destroy, worker_destroy, false) KVP_UCX_SYM(
							ucp_worker_get_address,
							worker_get_address,
							false) KVP_UCX_SYM(ucp_worker_get_efd,
									   worker_get_efd,
									   false)
							KVP_UCX_SYM(
								ucp_worker_progress,
								worker_progress,
								false) KVP_UCX_SYM(ucp_worker_release_address,
										   worker_release_address,
										   false)
								KVP_UCX_SYM(
									ucp_worker_set_am_recv_handler,
									worker_set_am_recv_handler,
									false)
									KVP_UCX_SYM(
										ucs_status_string,
										status_string,
										true)
										KVP_UCX_SYM(
											ucp_init_version,
											init_version,
											false)
#undef KVP_UCX_SYM
	};
	void *ucp, *ucs;
	size_t k;

	if (U.init_version)
		return 0;
	ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
	ucp = ucs ? dlopen("libucp.so.0", RTLD_NOW | RTLD_GLOBAL) : NULL;
	if (!ucp) {
		kvp_log(KVP_LOG_ERROR, "cluster",
			"cannot load UCX (libucp.so.0: %s): install libucx0",
			dlerror());
		return -1;
	}
	for (k = 0; k < sizeof(syms) / sizeof(syms[0]); k++) {
		void *fn = dlsym(syms[k].ucs ? ucs : ucp, syms[k].name);

		if (!fn) {
			kvp_log(KVP_LOG_ERROR, "cluster",
				"UCX has no %s: a newer libucx0 (1.12 or later) is needed",
				syms[k].name);
			memset(&U, 0, sizeof(U));
			return -1;
		}
		memcpy((char *)&U + syms[k].off, &fn, sizeof(fn));
	}
	return 0;
}

#define KVP_WIRE_MAGIC 0x31306c63706b766bull /* "kvpkcl01" */
#define KVP_AM_LEASE 21u
#define KVP_AM_GRANT 22u
#define KVP_AM_RELEASE 23u
#define KVP_CL_MAX_PEERS 64u
#define KVP_CL_MAX_NS 32u
#define KVP_CL_GRANTS 16384u
#define KVP_BOUNCE_UNIT (64u << 10)
#define KVP_WAVE_KEYS 4096u
#define KVP_LEASE_CHUNK 128u /* keys per LEASE */

/* Every message: this header, then its payload (all in the AM data). */
struct kvp_wire_hdr {
	uint64_t magic;
	uint64_t req;       /* the requester's request id */
	uint8_t secret[16]; /* the receiver's secret (from the directory) */
	char from[64];      /* the sender's node name, NUL terminated */
	uint32_t n;         /* entries in the payload */
	uint32_t bytes;     /* payload bytes */
	uint32_t lease_ms;  /* GRANT: how long the owner's leases last */
	uint32_t pad;
};
/* GRANT payload: n of these, in the order of the LEASE's keys */
struct kvp_wire_grant {
	int32_t status;  /* 0, -ENOENT, -EBUSY, -EIO, -E2BIG */
	uint32_t region; /* 0: the arena, 1: the bounce buffer */
	uint64_t len;
	uint64_t addr;  /* in the owner's address space */
	uint64_t grant; /* for RELEASE */
};
/* RELEASE payload: n grant ids (uint64_t) */

struct kvp_peer {
	char name[64];
	bool live;    /* in the directory at the last refresh */
	uint64_t inc; /* its incarnation: a change means a new agent */
	uint8_t secret[16];
	ucp_ep_h ep; /* NULL: none (never made, or failed and closed) */
	bool failed; /* its endpoint reported an error */
	ucp_rkey_h rkey[2];
	uint64_t base[2], len[2]; /* its arena, its bounce buffer */
	uint64_t seen_ns;         /* last seen live in the directory */
	bool said_gone;           /* its absence was logged */
	uint64_t warned_inc; /* a bad entry of this incarnation was logged */
};

struct kvp_nsh { /* a client handle of ours per namespace */
	char ns[KVP_NS_NAME_MAX + 1];
	struct kvp_client *c;
};

struct kvp_grant {
	uint64_t id;   /* gen << 16 | index; 0: free */
	unsigned kind; /* 1: a lease, 2: bounce space */
	struct kvp_lease l;
	struct kvp_client *c;
	uint64_t boff, blen;
	uint64_t expiry;
	unsigned peer;
	uint64_t req; /* the LEASE it answers */
};

/* A LEASE or RELEASE received, queued by the AM handler. */
struct kvp_inmsg {
	struct kvp_inmsg *next;
	unsigned id;
	size_t len;
	unsigned char data[];
};

/* Published state of one index slot. */
struct kvp_pub {
	uint32_t gen1; /* generation + 1 of what is published; 0: nothing */
	uint32_t pad;
	uint64_t ns, hash;
};

struct kvp_cl_key;

/* One LEASE of a wave in flight: its owner, its request id, its keys (a
 * run of the wave's positions), the GRANT once it arrived. */
struct kvp_cl_lreq {
	unsigned peer;
	uint64_t req, t_send;
	uint32_t first, cnt;
	unsigned char *msg; /* the LEASE (kept until its send completed) */
	void *sent;
	unsigned char *reply; /* the GRANT (the AM handler stores it) */
	size_t reply_len;
	bool out;  /* sent, its GRANT not handled yet */
	bool done; /* answered, or given up */
};

struct kvp_cl {
	struct kvp_agent *a;
	kvp_aword_t stop; /* set by the stop (release), read by the threads */
	struct kvp_cluster *shm; /* NULL: the segment has no mailboxes */
	pthread_t thr, waker;
	bool thr_up, waker_up;
	int evfd;
	/* the directory */
	char host[256], pw[256];
	int port;
	redisContext *rc;
	uint64_t rc_retry_ns;
	bool republish; /* publish everything again (new connection) */
	uint64_t next_member_ns, next_pub_ns, prev_pass_ns, last_member_ns;
	uint32_t inc;
	uint8_t secret[16];
	char secret_hex[33];
	/* UCX */
	ucp_context_h ctx;
	ucp_worker_h worker;
	int ucx_fd;
	ucp_mem_h arena_mh, bounce_mh, rx_mh;
	char *addr_hex, *arena_rkey_hex, *bounce_rkey_hex;
	unsigned char *arena_base;
	uint64_t arena_len;
	unsigned char *bounce, *rx;
	uint64_t bounce_len, rx_len;
	uint8_t *bounce_map; /* per KVP_BOUNCE_UNIT: 1 used */
	struct kvp_peer peers[KVP_CL_MAX_PEERS];
	unsigned npeers;
	struct kvp_nsh nsh[KVP_CL_MAX_NS];
	unsigned nnsh;
	struct kvp_grant *grants;
	uint32_t grant_gen, grant_hint;
	struct kvp_inmsg *inq, **inq_tail;
	uint64_t next_req;
	struct kvp_pub *pub;
	uint64_t nslots;
	unsigned window; /* gets in flight at once (KVP_REMOTE_WINDOW) */
	/* scratch of one mailbox call (private copies) */
	unsigned char *req;
	size_t req_cap;
	struct kvp_am_arg {
		struct kvp_cl *cl;
		unsigned id;
	} am_arg[3];
	/* the FETCH being served: its mailbox (answered key by key as the
	 * keys land), the word we took it with, its client, its keys */
	struct kvp_rbox *cur_rb;
	uint64_t cur_taken, cur_cw;
	uint32_t cur_client;
	struct kvp_cl_key *cur_keys;
	unsigned cur_unwoken;      /* answers since the client was last woken */
	struct kvp_cl_lreq *lreqs; /* the wave's LEASEs (GRANTs land here) */
	uint32_t nlreqs;
};

static uint64_t
kvp_cl_now(void)
{
	return kvp_now_ns(CLOCK_MONOTONIC);
}

static void
kvp_cl_ctr(struct kvp_cl *cl, unsigned k, uint64_t v)
{
	if (cl->shm && v)
		/* full: a statistic several readers sum */
		kvp_fetch_add(&cl->shm->cl_ctr[k], v);
}

static void
kvp_hex(const unsigned char *b, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = d[b[i] >> 4];
		out[2 * i + 1] = d[b[i] & 15];
	}
	out[2 * n] = 0;
}

static int
kvp_unhex(const char *s, size_t slen, unsigned char *out, size_t cap)
{
	size_t i;

	if (slen % 2 || slen / 2 > cap)
		return -1;
	for (i = 0; i < slen / 2; i++) {
		int hi = isdigit((unsigned char)s[2 * i]) ?
				 s[2 * i] - '0' :
			 (s[2 * i] >= 'a' && s[2 * i] <= 'f') ?
				 s[2 * i] - 'a' + 10 :
				 -1;
		int lo = isdigit((unsigned char)s[2 * i + 1]) ?
				 s[2 * i + 1] - '0' :
			 (s[2 * i + 1] >= 'a' && s[2 * i + 1] <= 'f') ?
				 s[2 * i + 1] - 'a' + 10 :
				 -1;

		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return (int)(slen / 2);
}

static char *
kvp_hex_alloc(const void *b, size_t n)
{
	char *s = (char *)malloc(2 * n + 1);

	if (s)
		kvp_hex((const unsigned char *)b, n, s);
	return s;
}

/* ---- the directory (Redis) ---- */

/* redis://[:PASSWORD@]HOST[:PORT][/DB] */
static int
kvp_cl_parse_url(struct kvp_cl *cl, const char *url)
{
	const char *p = url + 8, *at = strrchr(p, '@'), *h, *colon, *end;
	size_t hl;

	cl->port = 6379;
	if (at) {
		const char *pw = memchr(p, ':', (size_t)(at - p));

		if (!pw || (size_t)(at - pw - 1) >= sizeof(cl->pw))
			return -1;
		memcpy(cl->pw, pw + 1, (size_t)(at - pw - 1));
		cl->pw[at - pw - 1] = 0;
		p = at + 1;
	}
	h = p;
	end = h + strcspn(h, "/");
	colon = memchr(h, ':', (size_t)(end - h));
	hl = (size_t)((colon ? colon : end) - h);
	if (!hl || hl >= sizeof(cl->host))
		return -1;
	memcpy(cl->host, h, hl);
	cl->host[hl] = 0;
	if (colon) {
		char *e = NULL;
		long v = strtol(colon + 1, &e, 10);

		if (e != end || v < 1 || v > 65535)
			return -1;
		cl->port = (int)v;
	}
	return 0;
}

static void
kvp_cl_set_state(struct kvp_cl *cl, unsigned st)
{
	unsigned live = 0, k;

	if (!cl->shm)
		return;
	for (k = 0; k < cl->npeers; k++)
		live += cl->peers[k].live && !cl->peers[k].failed;
	/* release: the node name and counters before a client sees UP */
	kvp_store_release(&cl->shm->cl_state, KVP_CL_WORD(cl->inc, live, st));
}

static void
kvp_cl_dir_down(struct kvp_cl *cl, const char *why)
{
	if (cl->rc) {
		kvp_log(KVP_LOG_WARN, "cluster",
			"directory %s:%d: %s; remote lookups answer MISS until it is back",
			cl->host, cl->port, why);
		redisFree(cl->rc);
		cl->rc = NULL;
	}
	kvp_cl_ctr(cl, KVP_CLC_DIR_ERRORS, 1);
	cl->rc_retry_ns = kvp_cl_now() + 1000000000ull;
	kvp_cl_set_state(cl, KVP_CL_DOWN);
}

static bool
kvp_cl_dir_up(struct kvp_cl *cl)
{
	struct timeval tv = { 0, 500 * 1000 };
	redisReply *r;

	if (cl->rc)
		return true;
	if (kvp_cl_now() < cl->rc_retry_ns)
		return false;
	cl->rc = redisConnectWithTimeout(cl->host, cl->port, tv);
	if (!cl->rc || cl->rc->err) {
		if (cl->rc)
			redisFree(cl->rc);
		cl->rc = NULL;
		cl->rc_retry_ns = kvp_cl_now() + 1000000000ull;
		return false;
	}
	tv.tv_sec = 1;
	tv.tv_usec = 0;
	redisSetTimeout(cl->rc, tv);
	if (cl->pw[0]) {
		r = (redisReply *)redisCommand(cl->rc, "AUTH %s", cl->pw);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			if (r)
				freeReplyObject(r);
			kvp_log(KVP_LOG_ERROR, "cluster",
				"directory %s:%d refused the password",
				cl->host, cl->port);
			redisFree(cl->rc);
			cl->rc = NULL;
			cl->rc_retry_ns = kvp_cl_now() + 5000000000ull;
			return false;
		}
		freeReplyObject(r);
	}
	kvp_log(KVP_LOG_INFO, "cluster", "directory %s:%d connected", cl->host,
		cl->port);
	cl->republish = true;
	cl->next_member_ns = 0;
	return true;
}

/* Read n pipelined replies; false (and the connection dropped) on an I/O
 * error.  Error replies are kept (the caller looks). */
static bool
kvp_cl_replies(struct kvp_cl *cl, redisReply **out, unsigned n)
{
	unsigned k;
	bool ok = true;

	for (k = 0; k < n; k++) {
		void *r = NULL;

		out[k] = NULL;
		if (ok && redisGetReply(cl->rc, &r) != REDIS_OK)
			ok = false;
		out[k] = (redisReply *)r;
	}
	if (!ok) {
		for (k = 0; k < n; k++)
			if (out[k])
				freeReplyObject(out[k]);
		kvp_cl_dir_down(cl, cl->rc && cl->rc->errstr[0] ?
					    cl->rc->errstr :
					    "I/O error");
	}
	return ok;
}

/* ---- UCX ---- */

static void
kvp_cl_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct kvp_peer *p = (struct kvp_peer *)arg;

	(void)ep;
	p->failed = true;
	kvp_log(KVP_LOG_WARN, "cluster", "peer %s: endpoint failed (%s)",
		p->name, U.status_string(st));
}

static void
kvp_cl_wait_req(struct kvp_cl *cl, void *req)
{
	if (!req || UCS_PTR_IS_ERR(req))
		return;
	while (U.request_check_status(req) == UCS_INPROGRESS)
		U.worker_progress(cl->worker);
	U.request_free(req);
}

static void
kvp_cl_peer_close(struct kvp_cl *cl, struct kvp_peer *p)
{
	unsigned k;

	for (k = 0; k < 2; k++) {
		if (p->rkey[k])
			U.rkey_destroy(p->rkey[k]);
		p->rkey[k] = NULL;
	}
	if (p->ep) {
		ucp_request_param_t prm;

		memset(&prm, 0, sizeof(prm));
		prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
		kvp_cl_wait_req(cl, U.ep_close_nbx(p->ep, &prm));
		p->ep = NULL;
	}
}

/* A peer's node entry (HGETALL reply): connect, or reconnect if it is a
 * new incarnation or its endpoint failed. */
static void
kvp_cl_peer_update(struct kvp_cl *cl, struct kvp_peer *p, redisReply *r)
{
	const char *addr = NULL, *rk[2] = { NULL, NULL }, *sec = NULL;
	size_t addrl = 0, rkl[2] = { 0, 0 }, secl = 0, k;
	uint64_t inc = 0, base[2] = { 0, 0 }, len[2] = { 0, 0 };
	unsigned char *buf = NULL;
	ucp_ep_params_t ep;
	ucs_status_t st;

	for (k = 0; k + 1 < r->elements; k += 2) {
		const redisReply *f = r->element[k], *v = r->element[k + 1];

		if (f->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue;
		if (!strcmp(f->str, "addr"))
			addr = v->str, addrl = v->len;
		else if (!strcmp(f->str, "arena_rkey"))
			rk[0] = v->str, rkl[0] = v->len;
		else if (!strcmp(f->str, "bounce_rkey"))
			rk[1] = v->str, rkl[1] = v->len;
		else if (!strcmp(f->str, "secret"))
			sec = v->str, secl = v->len;
		else if (!strcmp(f->str, "inc"))
			inc = strtoull(v->str, NULL, 10);
		else if (!strcmp(f->str, "arena_base"))
			base[0] = strtoull(v->str, NULL, 10);
		else if (!strcmp(f->str, "arena_len"))
			len[0] = strtoull(v->str, NULL, 10);
		else if (!strcmp(f->str, "bounce_base"))
			base[1] = strtoull(v->str, NULL, 10);
		else if (!strcmp(f->str, "bounce_len"))
			len[1] = strtoull(v->str, NULL, 10);
	}
	if (!addr || !rk[0] || !rk[1] || !sec || !inc) {
		p->live = false;
		return;
	}
	p->live = true;
	if (p->ep && !p->failed && p->inc == inc)
		return;
	kvp_cl_peer_close(cl, p);
	p->failed = false;
	p->inc = inc;
	if (kvp_unhex(sec, secl, p->secret, sizeof(p->secret)) != 16)
		goto bad;
	buf = (unsigned char *)malloc(addrl / 2 + rkl[0] / 2 + rkl[1] / 2 + 3);
	if (!buf || kvp_unhex(addr, addrl, buf, addrl / 2) < 1)
		goto bad;
	memset(&ep, 0, sizeof(ep));
	ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.address = (const ucp_address_t *)buf;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = kvp_cl_ep_error;
	ep.err_handler.arg = p;
	st = U.ep_create(cl->worker, &ep, &p->ep);
	if (st != UCS_OK) {
		p->ep = NULL;
		goto bad;
	}
	for (k = 0; k < 2; k++) {
		int n = kvp_unhex(rk[k], rkl[k], buf,
				  addrl / 2 + rkl[0] / 2 + rkl[1] / 2 + 3);

		if (n < 1 ||
		    U.ep_rkey_unpack(p->ep, buf, &p->rkey[k]) != UCS_OK) {
			p->rkey[k] = NULL;
			goto bad;
		}
		p->base[k] = base[k];
		p->len[k] = len[k];
	}
	free(buf);
	kvp_log(KVP_LOG_INFO, "cluster", "peer %s (incarnation %llu) connected",
		p->name, (unsigned long long)inc);
	return;
bad:
	free(buf);
	if (p->warned_inc != inc)
		kvp_log(KVP_LOG_WARN, "cluster",
			"peer %s: bad node entry, or no endpoint to it (retried "
			"while it is in the directory)",
			p->name);
	p->warned_inc = inc;
	kvp_cl_peer_close(cl, p);
	p->failed = true;
}

static struct kvp_peer *
kvp_cl_peer(struct kvp_cl *cl, const char *name, bool add)
{
	unsigned k;

	for (k = 0; k < cl->npeers; k++)
		if (!strcmp(cl->peers[k].name, name))
			return &cl->peers[k];
	if (!add || strlen(name) >= sizeof(cl->peers[0].name))
		return NULL;
	if (cl->npeers == KVP_CL_MAX_PEERS) {
		/* full: reuse the entry of a node that left (no endpoint
		 * left, nothing of ours waiting on it) */
		for (k = 0; k < cl->npeers; k++)
			if (!cl->peers[k].live && !cl->peers[k].ep)
				break;
		if (k == cl->npeers)
			return NULL;
		kvp_cl_peer_close(cl, &cl->peers[k]);
	} else {
		k = cl->npeers++;
	}
	memset(&cl->peers[k], 0, sizeof(cl->peers[0]));
	snprintf(cl->peers[k].name, sizeof(cl->peers[0].name), "%s", name);
	return &cl->peers[k];
}

/* Membership: our node entry refreshed, the members read (two round
 * trips, every ttl/3). */
static void
kvp_cl_membership(struct kvp_cl *cl)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	char key[128], dkey[128], inc[24], ab[24], al[24], bb[24], bl[24],
		cap[24], ttl[24];
	redisReply *r[6], **rr = NULL;
	unsigned k, n = 0;

	cl->last_member_ns = kvp_cl_now();
	snprintf(key, sizeof(key), "kvpool:node:%s", cfg->node);
	snprintf(dkey, sizeof(dkey), "kvpool:dir:%s", cfg->node);
	snprintf(inc, sizeof(inc), "%u", cl->inc);
	snprintf(ab, sizeof(ab), "%llu",
		 (unsigned long long)(uintptr_t)cl->arena_base);
	snprintf(al, sizeof(al), "%llu", (unsigned long long)cl->arena_len);
	snprintf(bb, sizeof(bb), "%llu",
		 (unsigned long long)(uintptr_t)cl->bounce);
	snprintf(bl, sizeof(bl), "%llu", (unsigned long long)cl->bounce_len);
	snprintf(cap, sizeof(cap), "%llu",
		 (unsigned long long)cl->a->seg.L.len[KVP_R_ARENA]);
	snprintf(ttl, sizeof(ttl), "%u", cfg->cluster_ttl_ms);
	{
		const char *argv[] = { "HSET",        key,
				       "addr",        cl->addr_hex,
				       "arena_rkey",  cl->arena_rkey_hex,
				       "arena_base",  ab,
				       "arena_len",   al,
				       "bounce_rkey", cl->bounce_rkey_hex,
				       "bounce_base", bb,
				       "bounce_len",  bl,
				       "secret",      cl->secret_hex,
				       "pool",        cfg->pool,
				       "capacity",    cap,
				       "inc",         inc };

		redisAppendCommandArgv(cl->rc, 24, argv, NULL);
	}
	redisAppendCommand(cl->rc, "PEXPIRE %s %s", key, ttl);
	redisAppendCommand(cl->rc, "SADD kvpool:members %s", cfg->node);
	redisAppendCommand(cl->rc, "PEXPIRE %s %s", dkey, ttl);
	redisAppendCommand(cl->rc, "HLEN %s", dkey);
	redisAppendCommand(cl->rc, "SMEMBERS kvpool:members");
	if (!kvp_cl_replies(cl, r, 6))
		return;
	/* our directory hash expired (a stall longer than the TTL) or Redis
	 * lost it: publish everything again */
	if (r[4] && r[4]->type == REDIS_REPLY_INTEGER) {
		uint64_t mine = 0, i;

		for (i = 0; i < cl->nslots; i++)
			mine += cl->pub[i].gen1 != 0;
		if ((uint64_t)r[4]->integer != mine)
			cl->republish = true;
	}
	for (k = 0; k < cl->npeers; k++)
		cl->peers[k].live = false;
	if (r[5] && r[5]->type == REDIS_REPLY_ARRAY && r[5]->elements) {
		rr = (redisReply **)calloc(r[5]->elements, sizeof(*rr));
		for (k = 0; rr && k < r[5]->elements; k++) {
			const redisReply *m = r[5]->element[k];

			if (m->type != REDIS_REPLY_STRING ||
			    !strcmp(m->str, cfg->node) || strlen(m->str) >= 64)
				continue;
			redisAppendCommand(cl->rc, "HGETALL kvpool:node:%s",
					   m->str);
			n++;
		}
	}
	if (n && rr) {
		redisReply **rep = (redisReply **)calloc(n, sizeof(*rep));
		unsigned j = 0;

		if (rep && kvp_cl_replies(cl, rep, n)) {
			for (k = 0; k < r[5]->elements; k++) {
				const redisReply *m = r[5]->element[k];
				struct kvp_peer *p;

				if (m->type != REDIS_REPLY_STRING ||
				    !strcmp(m->str, cfg->node) ||
				    strlen(m->str) >= 64)
					continue;
				if (rep[j] &&
				    rep[j]->type == REDIS_REPLY_ARRAY &&
				    rep[j]->elements) {
					p = kvp_cl_peer(cl, m->str, true);
					if (p)
						kvp_cl_peer_update(cl, p,
								   rep[j]);
				} else if (cl->rc) {
					/* gone: its entry expired */
					redisReply *x =
						(redisReply *)redisCommand(
							cl->rc,
							"SREM kvpool:members %s",
							m->str);
					if (x)
						freeReplyObject(x);
				}
				freeReplyObject(rep[j]);
				j++;
			}
		} else if (rep && cl->rc) {
			/* kvp_cl_replies freed them */
		}
		free(rep);
	}
	free(rr);
	for (k = 0; k < 6; k++)
		if (r[k])
			freeReplyObject(r[k]);
	/* a peer out of the directory is asked nothing from now on; its
	 * endpoint is closed only after two TTLs (closing it resets the
	 * connection its own endpoint to us may share: a peer that was
	 * only late to re-register, after a Redis restart, keeps working) */
	for (k = 0; k < cl->npeers; k++) {
		struct kvp_peer *p = &cl->peers[k];

		if (p->live) {
			p->seen_ns = kvp_cl_now();
			p->said_gone = false;
			continue;
		}
		if (!p->said_gone) {
			kvp_log(KVP_LOG_INFO, "cluster",
				"peer %s left the directory", p->name);
			p->said_gone = true;
		}
		if (p->ep && kvp_cl_now() - p->seen_ns >
				     2ull * cfg->cluster_ttl_ms * 1000000ull)
			kvp_cl_peer_close(cl, p);
	}
	if (cl->rc)
		kvp_cl_set_state(cl, KVP_CL_UP);
}

/* ---- publishing ---- */

static void
kvp_cl_field(uint64_t ns, uint64_t hash, char *f)
{
	memcpy(f, &ns, 8);
	memcpy(f + 8, &hash, 8);
}

/* One pass over the index: what changed since the last pass goes out as
 * pipelined HSET/HDEL commands (at most 1024 fields each). */
static void
kvp_cl_publish(struct kvp_cl *cl)
{
	struct kvp_seg *s = &cl->a->seg;
	enum {
		CHUNK = 1024
	};
	char dkey[128];
	const char **argv;
	size_t *argl;
	char(*fields)[16], (*vals)[24];
	unsigned nset = 0, ndel = 0, ncmd = 0, k;
	char(*dfields)[16];
	uint64_t i, t0 = kvp_cl_now(), nset_all = 0, ndel_all = 0;

	if (cl->republish) {
		redisReply *r;

		snprintf(dkey, sizeof(dkey), "kvpool:dir:%s", cl->a->cfg.node);
		r = (redisReply *)redisCommand(cl->rc, "DEL %s", dkey);
		if (!r) {
			kvp_cl_dir_down(cl, "I/O error");
			return;
		}
		freeReplyObject(r);
		memset(cl->pub, 0, cl->nslots * sizeof(*cl->pub));
		cl->republish = false;
	}
	snprintf(dkey, sizeof(dkey), "kvpool:dir:%s", cl->a->cfg.node);
	argv = (const char **)malloc((2 + 2 * CHUNK) * sizeof(*argv));
	argl = (size_t *)malloc((2 + 2 * CHUNK) * sizeof(*argl));
	fields = (char(*)[16])malloc(CHUNK * 16);
	dfields = (char(*)[16])malloc(CHUNK * 16);
	vals = (char(*)[24])malloc(CHUNK * 24);
	if (!argv || !argl || !fields || !dfields || !vals)
		goto out;
	for (i = 0;; i++) {
		bool flush = i == cl->nslots;

		if (!flush) {
			/* relaxed: a snapshot; the word is read again
			 * below to make sure the entry matched it */
			uint64_t w = kvp_load_relaxed(&s->meta[i]);
			bool ready = KVP_IX_STATE(w) == KVP_IX_READY;
			uint32_t g1 = KVP_IX_GEN(w) + 1;
			struct kvp_pub *p = &cl->pub[i];

			if (ready && p->gen1 == g1)
				continue;
			if (!ready && !p->gen1)
				continue;
			if (p->gen1) {
				kvp_cl_field(p->ns, p->hash, dfields[ndel++]);
				p->gen1 = 0;
			}
			if (ready) {
				const struct kvp_entry *e = &s->entries[i];
				/* relaxed: checked against the state
				 * word read again (acquire) */
				uint64_t ns = kvp_load_relaxed(&e->e_ns),
					 h = kvp_load_relaxed(&e->e_hash),
					 len = kvp_load_relaxed(&e->e_len);

				/* acquire: the entry's fields are the
				 * ones of generation g1 - 1 */
				if (kvp_load_acquire(&s->meta[i]) == w) {
					p->gen1 = g1;
					p->ns = ns;
					p->hash = h;
					kvp_cl_field(ns, h, fields[nset]);
					snprintf(vals[nset], sizeof(vals[0]),
						 "%llu",
						 (unsigned long long)len);
					nset++;
				}
			}
		}
		if (nset && (nset == CHUNK || flush || ndel == CHUNK)) {
			argv[0] = "HSET";
			argl[0] = 4;
			argv[1] = dkey;
			argl[1] = strlen(dkey);
			for (k = 0; k < nset; k++) {
				argv[2 + 2 * k] = fields[k];
				argl[2 + 2 * k] = 16;
				argv[3 + 2 * k] = vals[k];
				argl[3 + 2 * k] = strlen(vals[k]);
			}
			redisAppendCommandArgv(cl->rc, (int)(2 + 2 * nset),
					       argv, argl);
			ncmd++;
			nset_all += nset;
			nset = 0;
			/* the fields' memory is reused: send now */
			{
				redisReply *r;
				if (!kvp_cl_replies(cl, &r, 1))
					goto out;
				freeReplyObject(r);
				ncmd--;
			}
		}
		if (ndel && (ndel == CHUNK || flush)) {
			redisReply *r;

			argv[0] = "HDEL";
			argl[0] = 4;
			argv[1] = dkey;
			argl[1] = strlen(dkey);
			for (k = 0; k < ndel; k++) {
				argv[2 + k] = dfields[k];
				argl[2 + k] = 16;
			}
			redisAppendCommandArgv(cl->rc, (int)(2 + ndel), argv,
					       argl);
			ndel_all += ndel;
			ndel = 0;
			if (!kvp_cl_replies(cl, &r, 1))
				goto out;
			freeReplyObject(r);
		}
		if (flush)
			break;
	}
	if (nset_all) {
		/* the hash may have just been created: its TTL now */
		redisReply *r = (redisReply *)redisCommand(
			cl->rc, "PEXPIRE %s %u", dkey,
			cl->a->cfg.cluster_ttl_ms);
		if (!r) {
			kvp_cl_dir_down(cl, "I/O error");
			goto out;
		}
		freeReplyObject(r);
	}
	kvp_cl_ctr(cl, KVP_CLC_PUBLISHED, nset_all);
	kvp_cl_ctr(cl, KVP_CLC_UNPUBLISHED, ndel_all);
	if ((nset_all || ndel_all) && cl->shm) {
		/* a change published now happened after the previous pass
		 * began reading its slot: its age is at most this */
		uint64_t lag = kvp_cl_now() -
			       (cl->prev_pass_ns ? cl->prev_pass_ns : t0);

		/* relaxed: gauges for humans */
		kvp_store_relaxed(&cl->shm->cl_pub_lag_ns, lag);
		if (lag > kvp_load_relaxed(&cl->shm->cl_pub_max_ns))
			kvp_store_relaxed(&cl->shm->cl_pub_max_ns, lag);
	}
	cl->prev_pass_ns = t0;
out:
	free(argv);
	free(argl);
	free(fields);
	free(dfields);
	free(vals);
}

/* ---- namespaces: a client handle of ours per namespace ---- */

static struct kvp_client *
kvp_cl_nsh(struct kvp_cl *cl, const char *ns)
{
	unsigned k;
	struct kvp_client *c = NULL;

	for (k = 0; k < cl->nnsh; k++)
		if (!strcmp(cl->nsh[k].ns, ns))
			return cl->nsh[k].c;
	if (cl->nnsh == KVP_CL_MAX_NS) {
		kvp_log(KVP_LOG_WARN, "cluster",
			"more than %u namespaces: remote requests of more are refused",
			KVP_CL_MAX_NS);
		return NULL;
	}
	if (kvp_open(cl->a->cfg.pool, ns, &c))
		return NULL;
	/* its gets of remote pages must not ask the network again */
	kvp_remote(c, 0);
	snprintf(cl->nsh[cl->nnsh].ns, sizeof(cl->nsh[0].ns), "%s", ns);
	cl->nsh[cl->nnsh++].c = c;
	return c;
}

/* ---- the owner's side: grants ---- */

static int
kvp_cl_bounce_alloc(struct kvp_cl *cl, uint64_t len, uint64_t *off)
{
	uint64_t units = (len + KVP_BOUNCE_UNIT - 1) / KVP_BOUNCE_UNIT,
		 total = cl->bounce_len / KVP_BOUNCE_UNIT, i, run = 0;

	for (i = 0; i < total; i++) {
		run = cl->bounce_map[i] ? 0 : run + 1;
		if (run == units) {
			uint64_t first = i + 1 - units;

			memset(cl->bounce_map + first, 1, units);
			*off = first * KVP_BOUNCE_UNIT;
			return 0;
		}
	}
	return -EBUSY;
}

static void
kvp_cl_bounce_free(struct kvp_cl *cl, uint64_t off, uint64_t len)
{
	memset(cl->bounce_map + off / KVP_BOUNCE_UNIT, 0,
	       (len + KVP_BOUNCE_UNIT - 1) / KVP_BOUNCE_UNIT);
}

static void
kvp_cl_grant_end(struct kvp_cl *cl, struct kvp_grant *g)
{
	if (g->kind == 1)
		kvp_lease_release(g->c, &g->l);
	else if (g->kind == 2)
		kvp_cl_bounce_free(cl, g->boff, g->blen);
	g->id = 0;
	g->kind = 0;
}

/* a grant taken but never given out */
static void
kvp_cl_grant_drop(struct kvp_cl *cl, struct kvp_grant *g)
{
	g->kind = 0;
	kvp_cl_grant_end(cl, g);
}

static struct kvp_grant *
kvp_cl_grant_new(struct kvp_cl *cl)
{
	uint32_t k;

	for (k = 0; k < KVP_CL_GRANTS; k++) {
		uint32_t i = (cl->grant_hint + k) % KVP_CL_GRANTS;

		if (!cl->grants[i].id) {
			cl->grant_hint = i + 1;
			cl->grant_gen++;
			cl->grants[i].id =
				((uint64_t)(cl->grant_gen | 1) << 16) | i;
			return &cl->grants[i];
		}
	}
	return NULL;
}

static void
kvp_cl_grants_expire(struct kvp_cl *cl, bool all)
{
	uint64_t now = kvp_cl_now();
	uint32_t i;

	for (i = 0; i < KVP_CL_GRANTS; i++)
		if (cl->grants[i].id && (all || cl->grants[i].expiry <= now))
			kvp_cl_grant_end(cl, &cl->grants[i]);
}

/* Send one message (header + payload) to peer p; eager, so the receiver
 * sees it whole in its handler.  Returns the request (to wait for) or
 * NULL when done at once; *err on failure. */
static void *
kvp_cl_send(struct kvp_cl *cl, struct kvp_peer *p, unsigned id, void *msg,
	    size_t len, bool *err)
{
	ucp_request_param_t prm;
	void *rq;

	(void)cl;
	*err = false;
	if (!p->ep || p->failed) {
		*err = true;
		return NULL;
	}
	memset(&prm, 0, sizeof(prm));
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
	prm.flags = UCP_AM_SEND_FLAG_EAGER;
	rq = U.am_send_nbx(p->ep, id, NULL, 0, msg, len, &prm);
	if (UCS_PTR_IS_ERR(rq)) {
		*err = true;
		return NULL;
	}
	return rq;
}

static void
kvp_cl_wire_hdr(struct kvp_cl *cl, struct kvp_wire_hdr *h, uint64_t req,
		const uint8_t *secret, uint32_t n, uint32_t bytes)
{
	memset(h, 0, sizeof(*h));
	h->magic = KVP_WIRE_MAGIC;
	h->req = req;
	memcpy(h->secret, secret, 16);
	snprintf(h->from, sizeof(h->from), "%s", cl->a->cfg.node);
	h->n = n;
	h->bytes = bytes;
	h->lease_ms = cl->a->cfg.remote_lease_ms;
}

/* A LEASE from a peer: validated, granted key by key, answered. */
static void
kvp_cl_serve_lease(struct kvp_cl *cl, const unsigned char *m, size_t len)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	struct kvp_wire_hdr h;
	struct kvp_peer *p;
	const unsigned char *d, *end;
	char ns[KVP_NS_NAME_MAX + 1];
	struct kvp_client *c;
	unsigned char *out = NULL;
	struct kvp_wire_grant *g;
	struct kvp_op *bo = NULL;
	uint32_t k, *bk = NULL, nb = 0;
	bool err;

	if (len < sizeof(h))
		goto refuse;
	memcpy(&h, m, sizeof(h));
	h.from[sizeof(h.from) - 1] = 0;
	if (h.magic != KVP_WIRE_MAGIC || h.bytes != len - sizeof(h) ||
	    memcmp(h.secret, cl->secret, 16) || h.n == 0 || h.n > KVP_WAVE_KEYS)
		goto refuse;
	p = kvp_cl_peer(cl, h.from, false);
	if ((!p || !p->live || !p->ep || p->failed) && cl->rc &&
	    kvp_cl_now() - cl->last_member_ns > 20000000ull) {
		/* a node we do not know (yet) presents our secret: it may
		 * have registered since our last look (or come back): look
		 * now rather than let it wait for nothing */
		kvp_cl_membership(cl);
		p = kvp_cl_peer(cl, h.from, false);
	}
	if (!p || !p->live || !p->ep || p->failed)
		goto refuse; /* not a member of the directory (now) */
	d = m + sizeof(h);
	end = d + h.bytes;
	if (d >= end || d[0] == 0 || (size_t)(end - d) < 1u + d[0])
		goto refuse;
	memcpy(ns, d + 1, d[0]);
	ns[d[0]] = 0;
	d += 1 + d[0];
	out = (unsigned char *)calloc(1, sizeof(h) + h.n * sizeof(*g));
	bo = (struct kvp_op *)calloc(h.n, sizeof(*bo));
	bk = (uint32_t *)calloc(h.n, sizeof(*bk));
	if (!out || !bo || !bk) {
		free(out);
		free(bo);
		free(bk);
		return;
	}
	g = (struct kvp_wire_grant *)(out + sizeof(h));
	c = kvp_cl_nsh(cl, ns);
	for (k = 0; k < h.n; k++) {
		const unsigned char *key;
		uint32_t klen;
		struct kvp_grant *gr;
		struct kvp_lease l;
		int rc;

		if (d >= end || d[0] == 0 || (size_t)(end - d) < 1u + d[0]) {
			/* what was granted so far goes back */
			for (k = 0; k < KVP_CL_GRANTS; k++)
				if (cl->grants[k].id &&
				    cl->grants[k].expiry > kvp_cl_now() &&
				    cl->grants[k].peer ==
					    (unsigned)(p - cl->peers) &&
				    cl->grants[k].req == h.req)
					kvp_cl_grant_end(cl, &cl->grants[k]);
			free(out);
			free(bo);
			free(bk);
			goto refuse;
		}
		klen = d[0];
		key = d + 1;
		d += 1 + klen;
		g[k].status = -EBUSY;
		if (!c)
			continue;
		gr = kvp_cl_grant_new(cl);
		if (!gr)
			continue;
		gr->c = c;
		gr->peer = (unsigned)(p - cl->peers);
		gr->req = h.req;
		gr->expiry = kvp_cl_now() + cfg->remote_lease_ms * 1000000ull;
		rc = kvp_lease_acquire(c, key, klen, cfg->remote_lease_ms, &l);
		if (rc) {
			kvp_cl_grant_drop(cl, gr);
			g[k].status = rc == -ENOENT ? -ENOENT : -EBUSY;
			continue;
		}
		if (l.tier == (int)KVP_TIER_DRAM && l.seg_off &&
		    c->seg.base + l.seg_off >= cl->arena_base &&
		    c->seg.base + l.seg_off + l.len <=
			    cl->arena_base + cl->arena_len) {
			gr->kind = 1;
			gr->l = l;
			g[k].region = 0;
			g[k].addr =
				(uint64_t)(uintptr_t)(c->seg.base + l.seg_off);
		} else {
			/* SSD-resident, or in several runs: read below, with
			 * the others, into the bounce buffer (staged by our
			 * own agent: one batch) */
			uint64_t off;

			kvp_lease_release(c, &l);
			if (l.len > cl->bounce_len) {
				kvp_cl_grant_drop(cl, gr);
				g[k].status = -E2BIG;
				continue;
			}
			if (kvp_cl_bounce_alloc(cl, l.len, &off)) {
				kvp_cl_grant_drop(cl, gr);
				continue; /* -EBUSY */
			}
			gr->kind = 2;
			gr->boff = off;
			gr->blen = l.len;
			g[k].region = 1;
			g[k].addr = (uint64_t)(uintptr_t)(cl->bounce + off);
			g[k].grant = gr->id;
			g[k].len = l.len;
			bo[nb].key = key;
			bo[nb].klen = klen;
			bo[nb].buf = cl->bounce + off;
			bo[nb].off = 0;
			bo[nb].len = l.len;
			bk[nb++] = k;
			continue;
		}
		g[k].status = 0;
		g[k].len = l.len;
		g[k].grant = gr->id;
		kvp_cl_ctr(cl, KVP_CLC_SERVED, 1);
		kvp_cl_ctr(cl, KVP_CLC_SERVED_BYTES, l.len);
	}
	if (nb)
		kvp_batch_get(c, bo, nb);
	for (k = 0; k < nb; k++) {
		struct kvp_wire_grant *x = &g[bk[k]];
		struct kvp_grant *gr =
			&cl->grants[(x->grant & 0xffffu) % KVP_CL_GRANTS];

		if (bo[k].status || bo[k].len != x->len) {
			x->status = bo[k].status == -ENOENT ? -ENOENT :
				    bo[k].status == -EBUSY  ? -EBUSY :
							      -EIO;
			if (!bo[k].status)
				x->status = -ENOENT; /* replaced meanwhile */
			kvp_cl_grant_end(cl, gr);
			x->grant = 0;
			x->addr = 0;
			continue;
		}
		x->status = 0;
		kvp_cl_ctr(cl, KVP_CLC_SERVED, 1);
		kvp_cl_ctr(cl, KVP_CLC_SERVED_BYTES, x->len);
	}
	kvp_cl_wire_hdr(cl, (struct kvp_wire_hdr *)out, h.req, p->secret, h.n,
			(uint32_t)(h.n * sizeof(*g)));
	kvp_cl_wait_req(cl, kvp_cl_send(cl, p, KVP_AM_GRANT, out,
					sizeof(h) + h.n * sizeof(*g), &err));
	free(out);
	free(bo);
	free(bk);
	return;
refuse:
	kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
}

static void
kvp_cl_serve_release(struct kvp_cl *cl, const unsigned char *m, size_t len)
{
	struct kvp_wire_hdr h;
	struct kvp_peer *p;
	uint32_t k;

	if (len < sizeof(h))
		goto refuse;
	memcpy(&h, m, sizeof(h));
	h.from[sizeof(h.from) - 1] = 0;
	if (h.magic != KVP_WIRE_MAGIC || h.bytes != len - sizeof(h) ||
	    memcmp(h.secret, cl->secret, 16) || (uint64_t)h.n * 8 != h.bytes)
		goto refuse;
	p = kvp_cl_peer(cl, h.from, false);
	if (!p)
		goto refuse;
	for (k = 0; k < h.n; k++) {
		uint64_t id;
		struct kvp_grant *g;

		memcpy(&id, m + sizeof(h) + 8 * k, 8);
		g = &cl->grants[(id & 0xffffu) % KVP_CL_GRANTS];
		if (g->id == id && id && g->peer == (unsigned)(p - cl->peers))
			kvp_cl_grant_end(cl, g);
	}
	return;
refuse:
	kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
}

/* The AM handler (inside ucp_worker_progress, on this file's thread):
 * LEASE and RELEASE are queued for the loop; a GRANT is kept for the
 * request it answers.  Nothing here trusts the sender: a message of the
 * wrong size, magic or secret is dropped. */
static ucs_status_t
kvp_cl_am(void *arg, const void *header, size_t hlen, void *data, size_t len,
	  const ucp_am_recv_param_t *prm)
{
	struct kvp_am_arg *aa = (struct kvp_am_arg *)arg;
	struct kvp_cl *cl = aa->cl;
	struct kvp_inmsg *q;

	(void)header;
	(void)hlen;
	if ((prm->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
	    len < sizeof(struct kvp_wire_hdr) || len > (64u << 20)) {
		kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
		return UCS_OK; /* we send eager only */
	}
	if (aa->id == KVP_AM_GRANT) {
		struct kvp_wire_hdr h;
		struct kvp_peer *p;
		uint32_t r;

		memcpy(&h, data, sizeof(h));
		h.from[sizeof(h.from) - 1] = 0;
		p = kvp_cl_peer(cl, h.from, false);
		if (h.magic != KVP_WIRE_MAGIC ||
		    memcmp(h.secret, cl->secret, 16) ||
		    h.bytes != len - sizeof(h) || !p) {
			kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
			return UCS_OK;
		}
		/* the LEASE of the wave it answers: that peer, that id */
		for (r = 0; r < cl->nlreqs; r++) {
			struct kvp_cl_lreq *lq = &cl->lreqs[r];

			if (lq->peer != (unsigned)(p - cl->peers) ||
			    lq->req != h.req || !lq->out || lq->done ||
			    lq->reply)
				continue;
			lq->reply = (unsigned char *)malloc(len);
			if (lq->reply) {
				memcpy(lq->reply, data, len);
				lq->reply_len = len;
			}
			return UCS_OK;
		}
		kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1); /* late, or not asked */
		return UCS_OK;
	}
	q = (struct kvp_inmsg *)malloc(sizeof(*q) + len);
	if (!q)
		return UCS_OK;
	q->next = NULL;
	q->id = aa->id;
	q->len = len;
	memcpy(q->data, data, len);
	*cl->inq_tail = q;
	cl->inq_tail = &q->next;
	return UCS_OK;
}

/* Progress UCX; when nothing moved, sleep on its event fd (and ours) at
 * most wait_ms. */
static void
kvp_cl_progress(struct kvp_cl *cl, int wait_ms)
{
	struct pollfd pf[2];

	if (U.worker_progress(cl->worker))
		return;
	if (wait_ms <= 0) {
		sched_yield();
		return;
	}
	if (U.worker_arm(cl->worker) != UCS_OK)
		return;
	pf[0].fd = cl->ucx_fd;
	pf[0].events = POLLIN;
	pf[1].fd = cl->evfd;
	pf[1].events = POLLIN;
	if (poll(pf, 2, wait_ms) > 0 && (pf[1].revents & POLLIN)) {
		uint64_t v;

		if (read(cl->evfd, &v, sizeof(v)) < 0) {
			/* EAGAIN: drained already */
		}
	}
}

static void
kvp_cl_drain(struct kvp_cl *cl)
{
	while (cl->inq) {
		struct kvp_inmsg *q = cl->inq;

		cl->inq = q->next;
		if (!cl->inq)
			cl->inq_tail = &cl->inq;
		if (q->id == KVP_AM_LEASE)
			kvp_cl_serve_lease(cl, q->data, q->len);
		else
			kvp_cl_serve_release(cl, q->data, q->len);
		free(q);
	}
}

/* What is due on the clock: our membership (every ttl/3) and a publish
 * pass (every --cluster-publish-ms).  Also called while a fetch waits,
 * so a long transfer never lets our node entry expire. */
static void
kvp_cl_tick(struct kvp_cl *cl)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	uint64_t now = kvp_cl_now();

	if (!kvp_cl_dir_up(cl)) {
		kvp_cl_set_state(cl, KVP_CL_DOWN);
		return;
	}
	if (now >= cl->next_member_ns) {
		kvp_cl_membership(cl);
		cl->next_member_ns = now + cfg->cluster_ttl_ms * 1000000ull / 3;
	}
	if (cl->rc && now >= cl->next_pub_ns) {
		kvp_cl_publish(cl);
		cl->next_pub_ns = now + cfg->cluster_publish_ms * 1000000ull;
	}
}

/* ---- the requester's side ---- */

struct kvp_cl_key {
	const unsigned char *key;
	uint32_t klen;
	uint64_t hash;
	int owner;
	uint64_t dlen; /* the directory's length */
	uint64_t off;  /* in the receive buffer */
	uint64_t glen, grant;
	unsigned region;
	uint64_t addr;
	void *rq;           /* the get in flight */
	int st;             /* its answer */
	uint64_t lease_end; /* its bytes must land before this (I36) */
	bool granted, queued;
};

/*
 * Which live peer holds each key: one pipelined HMGET per live peer (one
 * round trip).  k[i].owner = peer index or -1, k[i].dlen its length.  Among
 * several holders a key goes to the one with the highest rendezvous score
 * (spreads a hot batch over its holders).  -1: no directory.
 */
static int
kvp_cl_lookup(struct kvp_cl *cl, uint64_t nsid, struct kvp_cl_key *key,
	      uint32_t n)
{
	const char **argv = NULL;
	size_t *argl = NULL;
	char *fields = NULL, dkey[KVP_CL_MAX_PEERS][96];
	redisReply *rep[KVP_CL_MAX_PEERS];
	unsigned np = 0, pi[KVP_CL_MAX_PEERS], j;
	uint64_t t0;
	uint32_t k;
	int rc = -1;

	for (k = 0; k < n; k++) {
		key[k].owner = -1;
		key[k].dlen = 0;
	}
	if (!kvp_cl_dir_up(cl))
		return -1;
	for (j = 0; j < cl->npeers; j++)
		if (cl->peers[j].live && cl->peers[j].ep &&
		    !cl->peers[j].failed)
			pi[np++] = j;
	if (!np)
		return 0;
	argv = (const char **)malloc((2 + (size_t)n) * sizeof(*argv));
	argl = (size_t *)malloc((2 + (size_t)n) * sizeof(*argl));
	fields = (char *)malloc((size_t)n * 16);
	if (!argv || !argl || !fields)
		goto out;
	for (k = 0; k < n; k++) {
		kvp_cl_field(nsid, key[k].hash, fields + 16 * (size_t)k);
		argv[2 + k] = fields + 16 * (size_t)k;
		argl[2 + k] = 16;
	}
	argv[0] = "HMGET";
	argl[0] = 5;
	for (j = 0; j < np; j++) {
		snprintf(dkey[j], sizeof(dkey[0]), "kvpool:dir:%s",
			 cl->peers[pi[j]].name);
		argv[1] = dkey[j];
		argl[1] = strlen(dkey[j]);
		redisAppendCommandArgv(cl->rc, (int)(2 + n), argv, argl);
	}
	t0 = kvp_cl_now();
	if (!kvp_cl_replies(cl, rep, np))
		goto out;
	kvp_cl_ctr(cl, KVP_CLC_DIR_RTT, 1);
	if (cl->shm)
		/* relaxed: a gauge */
		kvp_store_relaxed(&cl->shm->cl_dir_rtt_ns, kvp_cl_now() - t0);
	for (k = 0; k < n; k++) {
		uint64_t top = 0;

		for (j = 0; j < np; j++) {
			const redisReply *r = rep[j], *e;
			uint64_t score;

			if (!r || r->type != REDIS_REPLY_ARRAY ||
			    r->elements != n)
				continue;
			e = r->element[k];
			if (e->type != REDIS_REPLY_STRING)
				continue;
			/* rendezvous over the holders, by name: every
			 * node picks the same holder for a key */
			score = kvp_hash(key[k].hash, cl->peers[pi[j]].name,
					 strlen(cl->peers[pi[j]].name)) |
				1;
			if (score > top) {
				top = score;
				key[k].owner = (int)pi[j];
				key[k].dlen = strtoull(e->str, NULL, 10);
			}
		}
		kvp_cl_ctr(cl, KVP_CLC_FOUND, key[k].owner >= 0);
	}
	for (j = 0; j < np; j++)
		if (rep[j])
			freeReplyObject(rep[j]);
	rc = 0;
out:
	free(argv);
	free(argl);
	free(fields);
	return rc;
}

/* One key's final answer, at once, into the mailbox of the FETCH being
 * served (I37: only while the mailbox is still the request we took and
 * its client the one that asked; a late write is ignored by the client,
 * whose ready words carry the request's sequence).  The client is woken
 * every 8 answers, and for each of 256 KiB or more. */
static void
kvp_cl_answer_one(struct kvp_cl *cl, const struct kvp_cl_key *x)
{
	struct kvp_seg *s = &cl->a->seg;
	struct kvp_rbox_ans *a;

	if (!cl->cur_rb ||
	    /* acquire: the request is still the one we took */
	    kvp_load_acquire(&cl->cur_rb->rb_state) != cl->cur_taken ||
	    /* acquire: and its client the one that asked */
	    kvp_load_acquire(&s->clients[cl->cur_client].cs_state) !=
		    cl->cur_cw)
		return;
	a = (struct kvp_rbox_ans *)(cl->cur_rb + 1) + (x - cl->cur_keys);
	a->ra_status = x->st;
	a->ra_len = x->st ? 0 : x->glen;
	/* release: the answer before its ready word; pairs with the
	 * client's acquire */
	kvp_istore_release(&a->ra_ready, KVP_RA_READY(cl->cur_taken >> 8));
	if (++cl->cur_unwoken >= 8 || x->glen >= (256u << 10)) {
		cl->cur_unwoken = 0;
		/* full: then wake */
		kvp_ifetch_add(&s->clients[cl->cur_client].cs_io_futex, 1);
		kvp_futex_wake(&s->clients[cl->cur_client].cs_io_futex);
	}
}

/* A key's bytes arrived: into this pool, unless they arrived after the
 * lease's deadline (the owner may have reused them: discarded, I36). */
static void
kvp_cl_land(struct kvp_cl *cl, struct kvp_client *c, struct kvp_cl_key *x)
{
	int rc;

	if (kvp_cl_now() > x->lease_end) {
		x->st = -EIO;
		return;
	}
	rc = kvp_put(c, x->key, x->klen, cl->rx + x->off, x->glen);
	x->st = rc == 0 || rc == -EEXIST      ? 0 :
		rc == -EBUSY || rc == -ENOSPC ? rc :
		rc == -E2BIG                  ? -E2BIG :
						-EIO;
	if (!x->st) {
		kvp_cl_ctr(cl, KVP_CLC_FETCHED, 1);
		kvp_cl_ctr(cl, KVP_CLC_FETCH_BYTES, x->glen);
	}
	kvp_cl_answer_one(cl, x);
}

/* Send LEASE request r (its keys: the wave positions pos[r->first..]). */
static void
kvp_cl_lease_send(struct kvp_cl *cl, const char *ns, struct kvp_cl_key *k,
		  const uint32_t *w, const uint32_t *pos, struct kvp_cl_lreq *r)
{
	struct kvp_peer *p = &cl->peers[r->peer];
	size_t nsl = strlen(ns), bytes = 1 + nsl, at;
	uint32_t i;
	bool err;

	for (i = 0; i < r->cnt; i++)
		bytes += 1 + k[w[pos[r->first + i]]].klen;
	r->msg = (unsigned char *)malloc(sizeof(struct kvp_wire_hdr) + bytes);
	r->req = ++cl->next_req;
	r->t_send = kvp_cl_now();
	if (!r->msg) {
		r->done = true;
		return;
	}
	kvp_cl_wire_hdr(cl, (struct kvp_wire_hdr *)r->msg, r->req, p->secret,
			r->cnt, (uint32_t)bytes);
	at = sizeof(struct kvp_wire_hdr);
	r->msg[at++] = (unsigned char)nsl;
	memcpy(r->msg + at, ns, nsl);
	at += nsl;
	for (i = 0; i < r->cnt; i++) {
		const struct kvp_cl_key *x = &k[w[pos[r->first + i]]];

		r->msg[at++] = (unsigned char)x->klen;
		memcpy(r->msg + at, x->key, x->klen);
		at += x->klen;
	}
	r->sent = kvp_cl_send(cl, p, KVP_AM_LEASE, r->msg, at, &err);
	r->out = !err;
	if (err)
		r->done = true; /* its keys stay FAILED */
}

/* A GRANT arrived for request r: its keys are queued for their gets. */
static void
kvp_cl_lease_granted(struct kvp_cl *cl, struct kvp_cl_key *k, const uint32_t *w,
		     const uint32_t *pos, struct kvp_cl_lreq *r)
{
	struct kvp_peer *p = &cl->peers[r->peer];
	const struct kvp_wire_hdr *h = (const struct kvp_wire_hdr *)r->reply;
	const struct kvp_wire_grant *g =
		(const struct kvp_wire_grant *)(r->reply + sizeof(*h));
	/* the owner's leases started after we asked: count from then, less
	 * a quarter for the two clocks' rates (I36) */
	uint64_t lease_end = r->t_send + h->lease_ms * 1000000ull * 3 / 4;
	uint32_t i;

	r->done = true;
	if ((uint64_t)h->n * sizeof(*g) != h->bytes || h->n != r->cnt)
		return; /* malformed: its keys stay FAILED */
	for (i = 0; i < r->cnt; i++) {
		struct kvp_cl_key *x = &k[w[pos[r->first + i]]];

		x->granted = g[i].status == 0;
		x->st = g[i].status == -ENOENT ? -ENOENT :
			g[i].status == -EBUSY  ? -EBUSY :
			g[i].status == -E2BIG  ? -E2BIG :
						 -EIO;
		if (g[i].status == -ENOENT)
			kvp_cl_ctr(cl, KVP_CLC_STALE, 1);
		x->glen = g[i].len;
		x->grant = g[i].grant;
		x->region = g[i].region;
		x->addr = g[i].addr;
		x->lease_end = lease_end;
		if (!x->granted)
			continue;
		/* the owner's word against what we reserved and its
		 * registered region */
		if (x->glen > x->dlen || x->glen == 0 || x->region > 1 ||
		    x->addr < p->base[x->region] ||
		    x->addr + x->glen >
			    p->base[x->region] + p->len[x->region]) {
			x->st = x->glen > x->dlen ? -ENOENT : -EIO;
			continue;
		}
		x->st = -EIO; /* until its bytes land */
		x->queued = true;
	}
}

/*
 * One wave: LEASE the keys from their owners in chunks of
 * KVP_LEASE_CHUNK (at most two chunks outstanding per owner, so a GRANT
 * never waits behind a long queue and each chunk's lease is counted from
 * its own request), pull each chunk's bytes as soon as its GRANT arrives
 * (at most 'window' gets in flight), put each key into this pool as it
 * lands (answering it in the client's mailbox), then RELEASE.  Every wait
 * is bounded by --remote-timeout-ms of no progress (a GRANT, a get
 * completed); answers in k[].st.
 */
static void
kvp_cl_wave(struct kvp_cl *cl, struct kvp_client *c, const char *ns,
	    struct kvp_cl_key *k, const uint32_t *w, uint32_t m)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	uint64_t tmo = cfg->remote_timeout_ms * 1000000ull, deadline;
	uint32_t *pos = NULL, i, np = 0, nr = 0, r;
	struct kvp_cl_lreq *rq = NULL;
	unsigned j, outq[KVP_CL_MAX_PEERS] = { 0 };
	bool used[KVP_CL_MAX_PEERS] = { false }, err;

	pos = (uint32_t *)malloc(sizeof(uint32_t) * (m ? m : 1));
	rq = (struct kvp_cl_lreq *)calloc(m ? m : 1, sizeof(*rq));
	for (i = 0; i < m; i++) {
		k[w[i]].st = -EIO; /* until its owner answers */
		used[k[w[i]].owner] = true;
	}
	if (!pos || !rq)
		goto out;
	/* the wave's positions grouped by owner, cut into chunks */
	for (j = 0; j < cl->npeers; j++) {
		uint32_t first = np;

		if (!used[j])
			continue;
		for (i = 0; i < m; i++)
			if (k[w[i]].owner == (int)j)
				pos[np++] = i;
		for (i = first; i < np; i += KVP_LEASE_CHUNK) {
			rq[nr].peer = j;
			rq[nr].first = i;
			rq[nr].cnt = np - i < KVP_LEASE_CHUNK ? np - i :
								KVP_LEASE_CHUNK;
			nr++;
		}
	}
	cl->lreqs = rq;
	cl->nlreqs = nr;
	deadline = kvp_cl_now() + tmo;
	for (;;) {
		bool wait = false;
		unsigned inflight = 0;

		/* LEASEs: at most two outstanding per owner */
		for (r = 0; r < nr; r++) {
			struct kvp_peer *p = &cl->peers[rq[r].peer];

			if (rq[r].done || rq[r].out)
				continue;
			if (!p->ep || p->failed) {
				rq[r].done = true;
				continue;
			}
			if (outq[rq[r].peer] >= 2) {
				wait = true;
				continue;
			}
			kvp_cl_lease_send(cl, ns, k, w, pos, &rq[r]);
			outq[rq[r].peer] += rq[r].out;
			wait = true;
		}
		/* GRANTs that arrived (the AM handler stored them) */
		for (r = 0; r < nr; r++) {
			if (!rq[r].out || rq[r].done)
				continue;
			if (rq[r].reply) {
				kvp_cl_lease_granted(cl, k, w, pos, &rq[r]);
				outq[rq[r].peer]--;
				deadline = kvp_cl_now() + tmo;
			} else if (cl->peers[rq[r].peer].failed) {
				rq[r].done = true;
				outq[rq[r].peer]--;
			} else {
				wait = true;
			}
		}
		/* gets that completed: into this pool at once */
		for (i = 0; i < m; i++) {
			struct kvp_cl_key *x = &k[w[i]];
			ucs_status_t st;

			if (!x->rq)
				continue;
			st = U.request_check_status(x->rq);
			if (st == UCS_INPROGRESS) {
				wait = true;
				inflight++;
				continue;
			}
			U.request_free(x->rq);
			x->rq = NULL;
			x->st = -EIO;
			deadline = kvp_cl_now() + tmo;
			if (st == UCS_OK)
				kvp_cl_land(cl, c, x);
		}
		/* new gets, up to the window */
		for (i = 0; i < m; i++) {
			struct kvp_cl_key *x = &k[w[i]];
			struct kvp_peer *p = &cl->peers[x->owner];
			ucp_request_param_t prm;

			if (!x->queued)
				continue;
			if (!p->ep || p->failed) {
				x->queued = false;
				continue; /* FAILED */
			}
			if (inflight >= cl->window) {
				wait = true;
				continue;
			}
			x->queued = false;
			memset(&prm, 0, sizeof(prm));
			x->rq = U.get_nbx(p->ep, cl->rx + x->off, x->glen,
					  x->addr, p->rkey[x->region], &prm);
			if (UCS_PTR_IS_ERR(x->rq)) {
				x->rq = NULL;
			} else if (!x->rq) {
				kvp_cl_land(cl, c, x);
			} else {
				inflight++;
				wait = true;
			}
		}
		if (!wait)
			break;
		/* acquire: the agent is stopping (pairs with the stop's
		 * release): give up like a timeout */
		if (kvp_cl_now() >= deadline || kvp_load_acquire(&cl->stop)) {
			/* give up: what did not move for a whole timeout is
			 * FAILED; the endpoints of peers with gets still in
			 * flight are closed (force), which ends those gets
			 * before the receive buffer is used again */
			for (i = 0; i < m; i++) {
				struct kvp_cl_key *x = &k[w[i]];

				x->queued = false;
				if (!x->rq)
					continue;
				U.request_cancel(cl->worker, x->rq);
				cl->peers[x->owner].failed = true;
			}
			for (j = 0; j < cl->npeers; j++) {
				if (!used[j] || !cl->peers[j].failed ||
				    !cl->peers[j].ep)
					continue;
				for (i = 0; i < m; i++) {
					struct kvp_cl_key *x = &k[w[i]];

					if (x->rq && x->owner == (int)j) {
						U.request_free(x->rq);
						x->rq = NULL;
					}
				}
				kvp_cl_peer_close(cl, &cl->peers[j]);
			}
			break;
		}
		kvp_cl_progress(cl, 1);
		kvp_cl_drain(cl); /* serve peers meanwhile: they may be
				    * fetching from us */
		kvp_cl_tick(cl);
	}
	/* the LEASE sends, done long ago (or ended by a closed endpoint) */
	for (r = 0; r < nr; r++) {
		if (rq[r].sent && cl->peers[rq[r].peer].ep)
			kvp_cl_wait_req(cl, rq[r].sent);
		else if (rq[r].sent)
			U.request_free(rq[r].sent);
		rq[r].sent = NULL;
	}
	/* RELEASE what was granted: one message per owner */
	for (j = 0; j < cl->npeers; j++) {
		struct kvp_peer *p = &cl->peers[j];
		uint32_t cnt = 0;
		unsigned char *rel;

		if (!used[j])
			continue;
		for (i = 0; i < m; i++)
			cnt += k[w[i]].owner == (int)j && k[w[i]].granted;
		if (!cnt || !p->ep || p->failed)
			continue;
		rel = (unsigned char *)malloc(sizeof(struct kvp_wire_hdr) +
					      8ull * cnt);
		if (!rel)
			continue;
		kvp_cl_wire_hdr(cl, (struct kvp_wire_hdr *)rel, 0, p->secret,
				cnt, 8 * cnt);
		cnt = 0;
		for (i = 0; i < m; i++)
			if (k[w[i]].owner == (int)j && k[w[i]].granted)
				memcpy(rel + sizeof(struct kvp_wire_hdr) +
					       8ull * cnt++,
				       &k[w[i]].grant, 8);
		kvp_cl_wait_req(cl, kvp_cl_send(cl, p, KVP_AM_RELEASE, rel,
						sizeof(struct kvp_wire_hdr) +
							8ull * cnt,
						&err));
		free(rel);
	}
out:
	cl->lreqs = NULL;
	cl->nlreqs = 0;
	for (r = 0; rq && r < nr; r++) {
		free(rq[r].msg);
		free(rq[r].reply);
	}
	free(rq);
	free(pos);
	for (i = 0; i < m; i++)
		if (k[w[i]].st && k[w[i]].st != -ENOENT)
			kvp_cl_ctr(cl, KVP_CLC_FAILED, 1);
	kvp_cl_set_state(cl, cl->rc ? KVP_CL_UP : KVP_CL_DOWN);
}

/* A FETCH: the keys the directory names an owner for, in waves that fit
 * the receive buffer. */
static void
kvp_cl_fetch(struct kvp_cl *cl, const char *ns, struct kvp_cl_key *k,
	     uint32_t n)
{
	struct kvp_client *c = kvp_cl_nsh(cl, ns);
	uint32_t *w, i = 0;
	uint64_t maxv = cl->a->seg.g.g_max_value;

	w = (uint32_t *)malloc(sizeof(uint32_t) * (n ? n : 1));
	for (i = 0; i < n; i++) {
		k[i].st = k[i].owner < 0 ? -ENOENT : -EBUSY;
		if (k[i].owner >= 0 &&
		    (k[i].dlen > cl->rx_len || k[i].dlen > maxv || !k[i].dlen))
			k[i].st = k[i].dlen ? -E2BIG : -ENOENT;
	}
	if (!c || !w) {
		free(w);
		return;
	}
	i = 0;
	while (i < n) {
		uint32_t m = 0;
		uint64_t used = 0;

		for (; i < n && m < KVP_WAVE_KEYS; i++) {
			uint64_t need = (k[i].dlen + 63) & ~63ull;

			if (k[i].st != -EBUSY)
				continue; /* answered already */
			if (used + need > cl->rx_len)
				break;
			k[i].off = used;
			used += need;
			w[m++] = i;
		}
		/* acquire: pairs with the stop's release */
		if (!m || kvp_load_acquire(&cl->stop))
			break;
		kvp_cl_wave(cl, c, ns, k, w, m);
	}
	free(w);
}

/* One client's mailbox, taken (word 'taken'): copy, validate, look up,
 * fetch, answer. */
static void
kvp_cl_call(struct kvp_cl *cl, uint32_t client, uint64_t cw,
	    struct kvp_rbox *rb, uint64_t taken)
{
	struct kvp_seg *s = &cl->a->seg;
	uint64_t cap = ((uint64_t)s->g.g_rbox_kib << 10) - sizeof(*rb);
	unsigned char *data = (unsigned char *)(rb + 1);
	/* relaxed: published by the client's POSTED release (acquired) */
	uint64_t kind = kvp_load_relaxed(&rb->rb_kind),
		 n = kvp_load_relaxed(&rb->rb_n),
		 bytes = kvp_load_relaxed(&rb->rb_bytes), t0 = kvp_cl_now();
	struct kvp_cl_key *k = NULL;
	struct kvp_rbox_ans *ans = NULL;
	char ns[KVP_NS_NAME_MAX + 1];
	uint64_t i, pos, nsid;
	bool bad = true;

	if ((kind == KVP_RB_PROBE || kind == KVP_RB_FETCH) && n >= 1 &&
	    n <= cap / (sizeof(*ans) + 2) && bytes >= 2 &&
	    bytes <= cap - n * sizeof(*ans)) {
		/* a private copy first: the client may keep writing */
		memcpy(cl->req, data + n * sizeof(*ans), bytes);
		k = (struct kvp_cl_key *)calloc(n, sizeof(*k));
		ans = (struct kvp_rbox_ans *)calloc(n, sizeof(*ans));
		pos = 1 + cl->req[0];
		bad = !k || !ans || cl->req[0] == 0 || pos > bytes;
		if (!bad) {
			memcpy(ns, cl->req + 1, cl->req[0]);
			ns[cl->req[0]] = 0;
			bad = strlen(ns) != cl->req[0];
		}
		nsid = bad ? 0 : kvp_ns_id(ns);
		for (i = 0; !bad && i < n; i++) {
			uint32_t kl = pos < bytes ? cl->req[pos] : 0;

			if (!kl || pos + 1 + kl > bytes) {
				bad = true;
				break;
			}
			k[i].key = cl->req + pos + 1;
			k[i].klen = kl;
			k[i].hash = kvp_key_hash(nsid, k[i].key, kl);
			pos += 1 + kl;
		}
		if (!bad && pos != bytes)
			bad = true;
	}
	if (bad) {
		kvp_cl_ctr(cl, KVP_CLC_BAD_MAILBOX, 1);
		n = n <= cap / sizeof(*ans) ? n : cap / sizeof(*ans);
		free(ans);
		ans = (struct kvp_rbox_ans *)calloc(n ? n : 1, sizeof(*ans));
		for (i = 0; ans && i < n; i++)
			ans[i].ra_status = -EINVAL;
	} else {
		kvp_cl_ctr(cl, KVP_CLC_LOOKUPS, 1);
		kvp_cl_ctr(cl, KVP_CLC_LOOKUP_KEYS, n);
		kvp_cl_lookup(cl, nsid, k, (uint32_t)n);
		if (kind == KVP_RB_FETCH) {
			cl->cur_rb = rb;
			cl->cur_taken = taken;
			cl->cur_cw = cw;
			cl->cur_client = client;
			cl->cur_keys = k;
			cl->cur_unwoken = 0;
			kvp_cl_fetch(cl, ns, k, (uint32_t)n);
			cl->cur_rb = NULL;
			for (i = 0; i < n; i++) {
				ans[i].ra_status = k[i].st;
				ans[i].ra_len = k[i].st ? 0 : k[i].glen;
			}
		} else {
			for (i = 0; i < n; i++) {
				ans[i].ra_status = k[i].owner >= 0 ? 0 :
								     -ENOENT;
				ans[i].ra_len = k[i].dlen;
			}
		}
	}
	/* answer: the client is the one that asked, and the mailbox is
	 * still the request we took (I19's rule, for mailboxes) */
	if (ans &&
	    /* acquire: the slot is still that client */
	    kvp_load_acquire(&s->clients[client].cs_state) == cw &&
	    kvp_cas(&rb->rb_state, taken,
		    (taken & ~0xffull) | KVP_RB_ANSWERING)) {
		for (i = 0; i < n; i++)
			ans[i].ra_ready = KVP_RA_READY(taken >> 8);
		memcpy(data, ans, n * sizeof(*ans));
		/* release: the answers before DONE; pairs with the client's
		 * acquire */
		kvp_store_release(&rb->rb_state,
				  (taken & ~0xffull) | KVP_RB_DONE);
		/* full: then wake */
		kvp_ifetch_add(&s->clients[client].cs_io_futex, 1);
		kvp_futex_wake(&s->clients[client].cs_io_futex);
	}
	if (!bad && kind == KVP_RB_FETCH && cl->shm) {
		uint64_t d = kvp_cl_now() - t0;

		/* full: a histogram several readers sum */
		kvp_fetch_add(&cl->shm->cl_lat[kvp_hist_bucket(d)], 1);
		kvp_fetch_add(&cl->shm->cl_lat[KVP_HIST_SUM], d);
	}
	free(k);
	free(ans);
}

/* Every POSTED mailbox of a live client; at the stop, answered MISS. */
static void
kvp_cl_mailboxes(struct kvp_cl *cl, bool stopping)
{
	struct kvp_seg *s = &cl->a->seg;
	uint32_t i;

	if (!cl->shm)
		return;
	for (i = 0; i < s->g.g_max_clients; i++) {
		struct kvp_rbox *rb = kvp__rbox(s, i);
		/* acquire: pairs with the client's POSTED release */
		uint64_t w = kvp_load_acquire(&rb->rb_state), cw, taken;

		if (KVP_RB_STATE(w) != KVP_RB_POSTED)
			continue;
		/* acquire: the client slot's word, checked again at the
		 * answer */
		cw = kvp_load_acquire(&s->clients[i].cs_state);
		if (KVP_CS_STATE(cw) != KVP_CS_LIVE)
			continue;
		taken = (w & ~0xffull) | KVP_RB_TAKEN;
		/* full CAS: the request is ours */
		if (!kvp_cas(&rb->rb_state, w, taken))
			continue;
		if (!stopping) {
			kvp_cl_call(cl, i, cw, rb, taken);
			continue;
		}
		/* full CAS: claim to answer; every key a MISS */
		if (kvp_cas(&rb->rb_state, taken,
			    (taken & ~0xffull) | KVP_RB_ANSWERING)) {
			/* relaxed: published by DONE */
			uint64_t n = kvp_load_relaxed(&rb->rb_n), j;
			uint64_t cap = (((uint64_t)s->g.g_rbox_kib << 10) -
					sizeof(*rb)) /
				       sizeof(struct kvp_rbox_ans);
			struct kvp_rbox_ans *a =
				(struct kvp_rbox_ans *)(rb + 1);

			for (j = 0; j < n && j < cap; j++) {
				a[j].ra_status = -ENOENT;
				a[j].ra_len = 0;
				a[j].ra_ready = KVP_RA_READY(taken >> 8);
			}
			/* release: the answers before DONE */
			kvp_store_release(&rb->rb_state,
					  (taken & ~0xffull) | KVP_RB_DONE);
			/* full: then wake */
			kvp_ifetch_add(&s->clients[i].cs_io_futex, 1);
			kvp_futex_wake(&s->clients[i].cs_io_futex);
		}
	}
}

/* ---- the thread ---- */

static void *
kvp_cl_waker(void *arg)
{
	struct kvp_cl *cl = (struct kvp_cl *)arg;
	unsigned last = 0;

	/* acquire: pairs with the stop's release */
	while (!kvp_load_acquire(&cl->stop)) {
		/* acquire: pairs with the clients' bump */
		unsigned cur = kvp_iload_acquire(&cl->shm->cl_wake);
		uint64_t one = 1;

		if (cur != last) {
			last = cur;
			if (write(cl->evfd, &one, sizeof(one)) < 0) {
				/* the counter is full: it is readable */
			}
		}
		kvp_futex_wait(&cl->shm->cl_wake, cur, 100000000ull);
	}
	return NULL;
}

static void *
kvp_cl_main(void *arg)
{
	struct kvp_cl *cl = (struct kvp_cl *)arg;

	/* acquire: pairs with the stop's release */
	while (!kvp_load_acquire(&cl->stop)) {
		uint64_t now, next;

		while (U.worker_progress(cl->worker))
			;
		kvp_cl_drain(cl);
		kvp_cl_tick(cl);
		kvp_cl_mailboxes(cl, false);
		kvp_cl_grants_expire(cl, false);
		next = cl->next_pub_ns < cl->next_member_ns ?
			       cl->next_pub_ns :
			       cl->next_member_ns;
		now = kvp_cl_now();
		/* asleep until UCX has work (its event fd: a peer's message,
		 * a get to serve), a client posts (ours), or a timer */
		kvp_cl_progress(
			cl,
			next > now ? (int)((next - now) / 1000000ull) + 1 : 1);
	}
	kvp_cl_mailboxes(cl, true);
	return NULL;
}

/* ---- start / stop ---- */

static int
kvp_cl_read_pw(struct kvp_cl *cl, const char *path)
{
	FILE *f = fopen(path, "r");
	struct stat st;

	if (!f) {
		kvp_log(KVP_LOG_ERROR, "cluster",
			"--cluster-password-file %s: %s", path,
			strerror(errno));
		return -1;
	}
	if (!fstat(fileno(f), &st) && (st.st_mode & 0077))
		kvp_log(KVP_LOG_WARN, "cluster",
			"%s is readable by others: chmod 600 it", path);
	if (!fgets(cl->pw, sizeof(cl->pw), f))
		cl->pw[0] = 0;
	fclose(f);
	cl->pw[strcspn(cl->pw, "\r\n")] = 0;
	return 0;
}

static int
kvp_cl_map(struct kvp_cl *cl, void *addr, uint64_t len, ucp_mem_h *mh,
	   char **hex)
{
	ucp_mem_map_params_t mp;
	void *buf = NULL;
	size_t sz = 0;

	memset(&mp, 0, sizeof(mp));
	mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
			UCP_MEM_MAP_PARAM_FIELD_LENGTH;
	mp.address = addr;
	mp.length = len;
	if (U.mem_map(cl->ctx, &mp, mh) != UCS_OK) {
		*mh = NULL;
		return -1;
	}
	if (!hex)
		return 0;
	if (U.rkey_pack(cl->ctx, *mh, &buf, &sz) != UCS_OK)
		return -1;
	*hex = kvp_hex_alloc(buf, sz);
	U.rkey_buffer_release(buf);
	return *hex ? 0 : -1;
}

static void kvp_cl_free(struct kvp_cl *cl);

int
kvp_cluster_start_agent(struct kvp_agent *a)
{
	struct kvp_agent_cfg *cfg = &a->cfg;
	struct kvp_cl *cl;
	ucp_config_t *uc = NULL;
	ucp_params_t up;
	ucp_worker_params_t wp;
	ucp_address_t *addr = NULL;
	size_t alen = 0;
	unsigned k;
	struct kvp_client *c0;

	cl = (struct kvp_cl *)calloc(1, sizeof(*cl));
	if (!cl)
		return -1;
	cl->a = a;
	cl->evfd = -1;
	cl->inq_tail = &cl->inq;
	cl->window = getenv("KVP_REMOTE_WINDOW") ?
			     (unsigned)strtoul(getenv("KVP_REMOTE_WINDOW"),
					       NULL, 10) :
			     4;
	if (!cl->window)
		cl->window = 1;
	if (!cfg->node[0]) {
		/* the short hostname, cut to the name's room */
		char h[256] = "";
		const char *nm;

		gethostname(h, sizeof(h) - 1);
		h[strcspn(h, ".")] = 0;
		h[sizeof(cfg->node) - 1] = 0;
		nm = h[0] ? h : "node";
		memcpy(cfg->node, nm, strlen(nm) + 1);
	}
	if (kvp_cl_parse_url(cl, cfg->cluster_url)) {
		kvp_log(KVP_LOG_ERROR, "cluster",
			"--cluster: want redis://[:PASSWORD@]HOST[:PORT]");
		goto fail;
	}
	if (cfg->cluster_pwfile[0] && kvp_cl_read_pw(cl, cfg->cluster_pwfile))
		goto fail;
	cl->shm = a->seg.cluster;
	if (!cl->shm)
		kvp_log(KVP_LOG_WARN, "cluster",
			"the segment was made without remote mailboxes (an agent without --cluster "
			"created it): this node publishes and serves its pages, its clients cannot "
			"fetch; stop the workers and the agent, remove the segment, restart");
	/* relaxed: this agent wrote it before its threads started */
	cl->inc = (uint32_t)kvp_load_relaxed(&a->seg.hdr->h_incarnation);
	if (getrandom(cl->secret, sizeof(cl->secret), 0) != sizeof(cl->secret))
		goto fail;
	kvp_hex(cl->secret, 16, cl->secret_hex);
	cl->nslots = a->seg.g.g_index_slots;
	cl->pub = (struct kvp_pub *)calloc(cl->nslots, sizeof(*cl->pub));
	cl->grants =
		(struct kvp_grant *)calloc(KVP_CL_GRANTS, sizeof(*cl->grants));
	cl->req_cap = (uint64_t)a->seg.g.g_rbox_kib << 10;
	cl->req = (unsigned char *)malloc(cl->req_cap ? cl->req_cap : 1);
	cl->bounce_len = cl->rx_len = cfg->remote_buffer;
	cl->bounce = (unsigned char *)aligned_alloc(4096, cl->bounce_len);
	cl->rx = (unsigned char *)aligned_alloc(4096, cl->rx_len);
	cl->bounce_map =
		(uint8_t *)calloc(cl->bounce_len / KVP_BOUNCE_UNIT + 1, 1);
	if (!cl->pub || !cl->grants || !cl->req || !cl->bounce || !cl->rx ||
	    !cl->bounce_map)
		goto fail;
	/* UCX: active messages and one-sided gets, one worker, this thread */
	if (kvp_cl_load_ucx())
		goto fail;
	if (U.config_read(NULL, NULL, &uc) != UCS_OK)
		goto ucx_fail;
	memset(&up, 0, sizeof(up));
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
	if (U.init_version(UCP_API_MAJOR, UCP_API_MINOR, &up, uc, &cl->ctx) !=
	    UCS_OK) {
		cl->ctx = NULL;
		U.config_release(uc);
		goto ucx_fail;
	}
	U.config_release(uc);
	memset(&wp, 0, sizeof(wp));
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	if (U.worker_create(cl->ctx, &wp, &cl->worker) != UCS_OK) {
		cl->worker = NULL;
		goto ucx_fail;
	}
	if (U.worker_get_efd(cl->worker, &cl->ucx_fd) != UCS_OK)
		goto ucx_fail;
	for (k = 0; k < 3; k++) {
		ucp_am_handler_param_t hp;

		cl->am_arg[k].cl = cl;
		cl->am_arg[k].id = KVP_AM_LEASE + k;
		memset(&hp, 0, sizeof(hp));
		hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
				UCP_AM_HANDLER_PARAM_FIELD_CB |
				UCP_AM_HANDLER_PARAM_FIELD_ARG;
		hp.id = KVP_AM_LEASE + k;
		hp.cb = kvp_cl_am;
		hp.arg = &cl->am_arg[k];
		if (U.worker_set_am_recv_handler(cl->worker, &hp) != UCS_OK)
			goto ucx_fail;
	}
	if (U.worker_get_address(cl->worker, &addr, &alen) != UCS_OK)
		goto ucx_fail;
	cl->addr_hex = kvp_hex_alloc(addr, alen);
	U.worker_release_address(cl->worker, addr);
	/* the arena as our client handles map it (one mapping per process:
	 * every handle's leases point into it) */
	c0 = kvp_cl_nsh(cl, "kvpool.cluster");
	if (!c0) {
		kvp_log(KVP_LOG_ERROR, "cluster",
			"cannot open the pool as a client");
		goto fail;
	}
	cl->arena_base = c0->seg.base + c0->seg.L.off[KVP_R_ARENA];
	cl->arena_len = c0->seg.L.len[KVP_R_ARENA];
	if (!cl->addr_hex ||
	    kvp_cl_map(cl, cl->arena_base, cl->arena_len, &cl->arena_mh,
		       &cl->arena_rkey_hex) ||
	    kvp_cl_map(cl, cl->bounce, cl->bounce_len, &cl->bounce_mh,
		       &cl->bounce_rkey_hex) ||
	    kvp_cl_map(cl, cl->rx, cl->rx_len, &cl->rx_mh, NULL))
		goto ucx_fail;
	cl->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cl->evfd < 0)
		goto fail;
	if (cl->shm) {
		memset(cl->shm->cl_node, 0, sizeof(cl->shm->cl_node));
		memcpy(cl->shm->cl_node, cfg->node, strlen(cfg->node));
		kvp_cl_set_state(cl, KVP_CL_DOWN);
	}
	a->cl = cl;
	if (pthread_create(&cl->thr, NULL, kvp_cl_main, cl))
		goto fail;
	cl->thr_up = true;
	if (cl->shm) {
		if (pthread_create(&cl->waker, NULL, kvp_cl_waker, cl))
			goto fail;
		cl->waker_up = true;
	}
	kvp_log(KVP_LOG_INFO, "cluster",
		"node '%s': directory %s:%d%s, lease %u ms, TTL %u ms, publish every %u ms",
		cfg->node, cl->host, cl->port, cl->pw[0] ? " (password)" : "",
		cfg->remote_lease_ms, cfg->cluster_ttl_ms,
		cfg->cluster_publish_ms);
	return 0;
ucx_fail:
	kvp_log(KVP_LOG_ERROR, "cluster", "UCX could not be set up");
fail:
	a->cl = cl;
	kvp_cluster_stop_agent(a);
	return -1;
}

static void
kvp_cl_free(struct kvp_cl *cl)
{
	unsigned k;

	kvp_cl_grants_expire(cl, true);
	if (cl->worker)
		for (k = 0; k < cl->npeers; k++)
			kvp_cl_peer_close(cl, &cl->peers[k]);
	if (cl->ctx) {
		if (cl->arena_mh)
			U.mem_unmap(cl->ctx, cl->arena_mh);
		if (cl->bounce_mh)
			U.mem_unmap(cl->ctx, cl->bounce_mh);
		if (cl->rx_mh)
			U.mem_unmap(cl->ctx, cl->rx_mh);
	}
	if (cl->worker)
		U.worker_destroy(cl->worker);
	if (cl->ctx)
		U.cleanup(cl->ctx);
	for (k = 0; k < cl->nnsh; k++)
		kvp_close(cl->nsh[k].c);
	while (cl->inq) {
		struct kvp_inmsg *q = cl->inq;

		cl->inq = q->next;
		free(q);
	}
	if (cl->rc)
		redisFree(cl->rc);
	if (cl->evfd >= 0)
		close(cl->evfd);
	free(cl->addr_hex);
	free(cl->arena_rkey_hex);
	free(cl->bounce_rkey_hex);
	free(cl->bounce);
	free(cl->rx);
	free(cl->bounce_map);
	free(cl->pub);
	free(cl->grants);
	free(cl->req);
	memset(cl->pw, 0, sizeof(cl->pw));
	free(cl);
}

void
kvp_cluster_stop_agent(struct kvp_agent *a)
{
	struct kvp_cl *cl = a->cl;

	if (!cl)
		return;
	/* clients stop asking first */
	if (cl->shm)
		/* release: clients acquire the state */
		kvp_store_release(&cl->shm->cl_state,
				  KVP_CL_WORD(cl->inc, 0, KVP_CL_OFF));
	/* release: the threads acquire it */
	kvp_store_release(&cl->stop, 1);
	if (cl->evfd >= 0) {
		uint64_t one = 1;

		if (write(cl->evfd, &one, sizeof(one)) < 0) {
			/* full: readable anyway */
		}
	}
	if (cl->shm) {
		/* full: wake the waker */
		kvp_ifetch_add(&cl->shm->cl_wake, 1);
		kvp_futex_wake(&cl->shm->cl_wake);
	}
	if (cl->thr_up)
		pthread_join(cl->thr, NULL);
	if (cl->waker_up)
		pthread_join(cl->waker, NULL);
	/* a clean stop leaves the directory at once (a crash: within TTL) */
	if (cl->rc) {
		redisReply *r[3];

		redisAppendCommand(cl->rc, "DEL kvpool:node:%s", a->cfg.node);
		redisAppendCommand(cl->rc, "DEL kvpool:dir:%s", a->cfg.node);
		redisAppendCommand(cl->rc, "SREM kvpool:members %s",
				   a->cfg.node);
		if (kvp_cl_replies(cl, r, 3)) {
			unsigned k;

			for (k = 0; k < 3; k++)
				if (r[k])
					freeReplyObject(r[k]);
		}
	}
	kvp_cl_free(cl);
	a->cl = NULL;
}
