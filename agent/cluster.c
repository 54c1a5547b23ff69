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
 *                           hash (8 bytes), value = "<len> <slot>:<gen>"
 *                           (the value's length, the publication);
 *                           the keys N's index holds; PEXPIRE ttl with the
 *                           node entry (a dead node's keys leave with it)
 *   kvpool:claim:N          the id of the agent that owns the name N
 *                           (kvp_cl_claim); every write under N checks it
 * Whatever the directory holds is checked before use (node entries,
 * names, values: "node entries" below), and a worker address reaches
 * our ucp_ep_create only after a probe process survived it.
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
 * scripts that set fields and delete only the fields that still name
 * what is deleted ("publishing" below).  A page put here is in the directory at
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
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>
#include <ucp/api/ucp.h>

#include "agent/agent_int.h"
#include "tiers/kvp_ssd.h" /* kvp_crc32c */

/* UCX, loaded when the agent runs a cluster (never linked: a node without
 * --cluster loads none of it, its constructors and memory hooks
 * included); the types and macros are the headers' (libucx-dev).  Only
 * active messages: no one-sided call is loaded, no memory is mapped for
 * remote access (docs/design.md, "What a peer can do"). */
static struct {
	__typeof__(&ucp_am_data_release) am_data_release;
	__typeof__(&ucp_am_recv_data_nbx) am_recv_data_nbx;
	__typeof__(&ucp_am_send_nbx) am_send_nbx;
	__typeof__(&ucp_cleanup) cleanup;
	__typeof__(&ucp_config_modify) config_modify;
	__typeof__(&ucp_config_read) config_read;
	__typeof__(&ucp_config_release) config_release;
	__typeof__(&ucp_ep_close_nbx) ep_close_nbx;
	__typeof__(&ucp_ep_create) ep_create;
	__typeof__(&ucp_request_cancel) request_cancel;
	__typeof__(&ucp_request_check_status) request_check_status;
	__typeof__(&ucp_request_free) request_free;
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
	/* clang-format off */
#define KVP_UCX_SYM(f, field, ucs) { #f, offsetof(__typeof__(U), field), ucs }
	static const struct {
		const char *name;
		size_t off;
		bool ucs;
	} syms[] = {
		KVP_UCX_SYM(ucp_am_data_release, am_data_release, false),
		KVP_UCX_SYM(ucp_am_recv_data_nbx, am_recv_data_nbx, false),
		KVP_UCX_SYM(ucp_am_send_nbx, am_send_nbx, false),
		KVP_UCX_SYM(ucp_cleanup, cleanup, false),
		KVP_UCX_SYM(ucp_config_modify, config_modify, false),
		KVP_UCX_SYM(ucp_config_read, config_read, false),
		KVP_UCX_SYM(ucp_config_release, config_release, false),
		KVP_UCX_SYM(ucp_ep_close_nbx, ep_close_nbx, false),
		KVP_UCX_SYM(ucp_ep_create, ep_create, false),
		KVP_UCX_SYM(ucp_request_cancel, request_cancel, false),
		KVP_UCX_SYM(ucp_request_check_status, request_check_status, false),
		KVP_UCX_SYM(ucp_request_free, request_free, false),
		KVP_UCX_SYM(ucp_worker_arm, worker_arm, false),
		KVP_UCX_SYM(ucp_worker_create, worker_create, false),
		KVP_UCX_SYM(ucp_worker_destroy, worker_destroy, false),
		KVP_UCX_SYM(ucp_worker_get_address, worker_get_address, false),
		KVP_UCX_SYM(ucp_worker_get_efd, worker_get_efd, false),
		KVP_UCX_SYM(ucp_worker_progress, worker_progress, false),
		KVP_UCX_SYM(ucp_worker_release_address, worker_release_address, false),
		KVP_UCX_SYM(ucp_worker_set_am_recv_handler, worker_set_am_recv_handler, false),
		KVP_UCX_SYM(ucs_status_string, status_string, true),
		KVP_UCX_SYM(ucp_init_version, init_version, false),
	};
	/* clang-format on */
#undef KVP_UCX_SYM
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

#define KVP_WIRE_MAGIC 0x32306c63706b766bull /* "kvpkcl02" */
#define KVP_WIRE_PROTO "2" /* the node entry's "proto": this wire format */
#define KVP_AM_LEASE 21u
#define KVP_AM_DATA 22u
#define KVP_CL_MAX_PEERS 64u
#define KVP_CL_MAX_NS 32u
#define KVP_BOUNCE_UNIT (64u << 10)
#define KVP_WAVE_KEYS 4096u
#define KVP_LEASE_CHUNK 128u /* keys per LEASE */

/* A LEASE: this header (the AM data), then the namespace and the keys
 * (each a 1-byte length and the bytes). */
struct kvp_wire_hdr {
	uint64_t magic;
	uint64_t req;       /* the LEASE's token: random, the requester's */
	uint8_t secret[16]; /* the receiver's secret (from the directory) */
	char from[64];      /* the sender's node name, NUL terminated */
	uint32_t n;         /* keys */
	uint32_t bytes;     /* payload bytes */
	uint32_t lease_ms;  /* unused (0) */
	uint32_t inc;       /* the owner's incarnation, as the directory says */
};
/* The owner's answer for one key of a LEASE: this header (the AM header),
 * and for status 0 the value's bytes (the AM data, eager or rendezvous:
 * UCX sends them from the owner's memory into the buffer the requester
 * names for them; nothing is ever read or written one-sidedly). */
struct kvp_wire_data {
	uint64_t magic;
	uint64_t req;       /* the LEASE's token */
	uint8_t secret[16]; /* the requester's secret (from the directory) */
	char from[64];      /* the owner's node name */
	uint32_t inc;       /* the owner's incarnation: the LEASE's */
	uint32_t idx;       /* the key's position in the LEASE */
	int32_t status;     /* 0, -ENOENT, -EBUSY, -EIO, -E2BIG */
	uint32_t crc;       /* CRC-32C of the bytes, taken under the lease */
	uint64_t len;       /* the value's length (status 0) */
};

struct kvp_peer {
	char name[64];
	bool live;    /* in the directory at the last refresh */
	uint64_t inc; /* its incarnation: a change means a new agent */
	uint8_t secret[16];
	ucp_ep_h ep;         /* NULL: none (never made, or failed and closed) */
	bool failed;         /* its endpoint reported an error */
	uint64_t seen_ns;    /* last seen live in the directory */
	uint64_t took_ns;    /* a send of ours to it last completed */
	bool said_gone;      /* its absence was logged */
	uint64_t warned_inc; /* a bad entry of this incarnation was logged */
	/* its node entry's checks (kvp_cl_entry_ready) */
	uint64_t ent_key;     /* digest of (inc, addr) last seen; 0: none */
	uint64_t ent_ok;      /* the digest a probe passed */
	pid_t probe_pid;      /* a probe of ent_key runs; 0: none */
	bool probe_killed;    /* it ran out of time, SIGKILL sent */
	bool pending;         /* waits for its probe (not a peer that left) */
	unsigned probe_tries; /* of ent_key that ran out of time */
	uint64_t probe_end;
};

struct kvp_nsh { /* a client handle of ours per namespace (recycled) */
	char ns[KVP_NS_NAME_MAX + 1];
	struct kvp_client *c; /* NULL: a free entry */
	unsigned refs;        /* serve jobs and fetches using it */
	uint64_t used;        /* last use (a counter): the idle oldest goes */
};

/* One key of a LEASE being served: what the owner holds for it until
 * its DATA is sent (a lease on a DRAM run, or bounce space), the header
 * (UCX reads it until the send completes) and the send. */
struct kvp_serve_key {
	struct kvp_wire_data h;
	void *rq;      /* the send in flight; NULL: none or done */
	unsigned kind; /* 0: nothing held, 1: a lease, 2: bounce space */
	struct kvp_lease l;
	uint64_t boff, blen;
	uint8_t klen; /* the key (a lease is renewed by key) */
	unsigned char key[255];
};
/* A LEASE being served: its keys' sends, each holding its lease until UCX
 * completes it.  At 3/4 of --remote-lease-ms (the deadline) the leases of
 * sends still in flight are renewed while the peer takes our bytes, and
 * the peer is dropped (its endpoint closed, which ends the sends) when it
 * has taken none for --remote-timeout-ms: a lease never runs out under
 * UCX's reads (I36). */
struct kvp_serve {
	struct kvp_serve *next;
	unsigned peer;
	struct kvp_nsh *nsh;
	uint64_t deadline;
	uint32_t n, left; /* keys; sends not yet complete */
	struct kvp_serve_key k[];
};

/* A LEASE received, queued by the AM handler. */
struct kvp_inmsg {
	struct kvp_inmsg *next;
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

/* One LEASE of a wave in flight: its owner (and the incarnation we asked),
 * its token, its keys (a run of the wave's positions). */
struct kvp_cl_lreq {
	unsigned peer;
	uint64_t req, inc;
	uint32_t first, cnt;
	unsigned char *msg; /* the LEASE (kept until its send completed) */
	void *sent;
	uint32_t answered; /* keys whose DATA arrived (or failed) */
	bool out;          /* sent, not all answered */
	bool done;         /* answered, or given up */
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
	uint64_t rng[2]; /* request tokens (xorshift128+, seeded by getrandom) */
	/* UCX */
	ucp_context_h ctx;
	ucp_worker_h worker;
	int ucx_fd;
	char *addr_hex;
	unsigned char *arena_base;
	uint64_t arena_len;
	unsigned char *bounce, *rx;
	uint64_t bounce_len, rx_len;
	uint8_t *bounce_map; /* per KVP_BOUNCE_UNIT: 1 used */
	struct kvp_peer peers[KVP_CL_MAX_PEERS];
	unsigned npeers;
	struct kvp_nsh nsh[KVP_CL_MAX_NS];
	uint64_t nsh_clock;
	struct kvp_serve *serving; /* LEASEs whose sends are in flight */
	struct kvp_inmsg *inq, **inq_tail;
	struct kvp_pub *pub;
	uint64_t nslots;
	/* scratch of one mailbox call (private copies) */
	unsigned char *req;
	size_t req_cap;
	struct kvp_am_arg {
		struct kvp_cl *cl;
		unsigned id;
	} am_arg[3]; /* LEASE, DATA, any other id */
	/* the FETCH being served: its mailbox (answered key by key as the
	 * keys land), the word we took it with, its client, its keys */
	struct kvp_rbox *cur_rb;
	uint64_t cur_taken, cur_cw;
	uint32_t cur_client;
	struct kvp_cl_key *cur_keys;
	unsigned cur_unwoken; /* answers since the client was last woken */
	/* the wave in flight: its LEASEs, keys and positions (DATA lands
	 * through them; none outside a wave) */
	struct kvp_cl_lreq *lreqs;
	uint32_t nlreqs;
	uint64_t wave_moved; /* DATA taken, receives done: the wave moves */
	struct kvp_cl_key *wk;
	const uint32_t *ww, *wpos;
	/* the directory's trust and errors (kvp_cl_claim, kvp_cl_rerr,
	 * kvp_cl_entry_admit) */
	char claim_id[160]; /* who claims our node name: host/pool/segment */
	bool claimed;       /* the name is ours (the last claim said so) */
	bool said_clash;    /* the clash was logged */
	bool said_spawn;    /* a probe that could not start was logged */
	unsigned pub_fails; /* publish passes failed in a row */
	unsigned nbad, nbad_now; /* members refused (last membership) */
	unsigned nprobes;        /* probes running */
	pid_t zombies[16];       /* probes killed, not yet reaped */
	unsigned nzombies;
	struct {
		uint64_t name_h, what;
	} refused[256]; /* refusals logged lately (a ring) */
	unsigned refused_next;
	unsigned refuse_logs, refuse_quiet; /* this look: logged, not yet */
	struct {
		char kind[16];
		uint64_t last_ns, since;
	} errk[8]; /* error replies, per kind: last logged, how many since */
};
#define KVP_CL_REFUSED_MEMO 256u
#define KVP_CL_REFUSE_LOGS 32u /* refusals logged per look, at most */
#define KVP_CL_ZOMBIES 16u

static uint64_t
kvp_cl_now(void)
{
	return kvp_now_ns(CLOCK_MONOTONIC);
}

/* The thread's heartbeat (cl_beat): clients ask nothing of a thread that
 * stopped beating.  Called wherever the thread waits or progresses. */
static void
kvp_cl_beat(struct kvp_cl *cl)
{
	if (cl->shm)
		/* release: pairs with the client's acquire (a clock
		 * reading: nothing else is published through it) */
		kvp_istore_release(&cl->shm->cl_beat,
				   (uint32_t)(kvp_cl_now() / 1000000u));
}

/* A LEASE's token: unguessable to whoever did not see the LEASE, so a
 * DATA message cannot be forged by another member (xorshift128+ seeded
 * from getrandom at start; never 0). */
static uint64_t
kvp_cl_token(struct kvp_cl *cl)
{
	uint64_t x = cl->rng[0], y = cl->rng[1];

	cl->rng[0] = y;
	x ^= x << 23;
	cl->rng[1] = x ^ y ^ (x >> 17) ^ (y >> 26);
	return (cl->rng[1] + y) | 1;
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
	kvp_store_release(&cl->shm->cl_state,
			  KVP_CL_WORD(cl->inc, live, st) |
				  KVP_CL_WORD_BAD(cl->nbad));
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

/*
 * Error replies.  Every reply is looked at: an error (OOM, WRONGTYPE,
 * READONLY, ...) is counted in dir_errors and logged, once per kind
 * (its code: the message's first word) and then at most once a minute
 * with the number since; whoever asked treats the command as not done
 * (publishing backs off, kvp_cl_tick, and nothing counts as published
 * that Redis did not take).
 */
#define KVP_CL_ERR_KINDS 8u
#define KVP_CL_ERR_LOG_NS 60000000000ull

/* true (counted, logged) if r is an error reply or none */
static bool
kvp_cl_rerr(struct kvp_cl *cl, const redisReply *r, const char *what)
{
	char kind[16];
	size_t n;
	unsigned k, old = 0;
	uint64_t now;

	if (r && r->type != REDIS_REPLY_ERROR)
		return false;
	kvp_cl_ctr(cl, KVP_CLC_DIR_ERRORS, 1);
	if (!r)
		return true; /* I/O: the connection is down (logged there) */
	n = strcspn(r->str, " ");
	if (n >= sizeof(kind))
		n = sizeof(kind) - 1;
	memcpy(kind, r->str, n);
	kind[n] = 0;
	now = kvp_cl_now();
	for (k = 0; k < KVP_CL_ERR_KINDS; k++) {
		if (!strcmp(cl->errk[k].kind, kind))
			break;
		if (cl->errk[k].last_ns < cl->errk[old].last_ns)
			old = k;
	}
	if (k == KVP_CL_ERR_KINDS) {
		k = old;
		snprintf(cl->errk[k].kind, sizeof(cl->errk[k].kind), "%s",
			 kind);
		cl->errk[k].last_ns = 0;
		cl->errk[k].since = 0;
	} else if (cl->errk[k].last_ns &&
		   now - cl->errk[k].last_ns < KVP_CL_ERR_LOG_NS) {
		cl->errk[k].since++;
		return true;
	}
	kvp_log(KVP_LOG_ERROR, "cluster",
		"directory %s:%d: %s: error reply: %.200s (%llu more since; "
		"logged once a minute per kind)",
		cl->host, cl->port, what, r->str,
		(unsigned long long)cl->errk[k].since);
	cl->errk[k].last_ns = now;
	cl->errk[k].since = 0;
	return true;
}

/*
 * The node name is claimed: kvpool:claim:N holds the id of the agent
 * that has it (cl->claim_id: host, pool and the segment's creation time,
 * so an agent restarted on the same segment is the same claimant and
 * takes its name back at once), with the TTL of the node entry,
 * refreshed by membership.  Every write of ours to N's keys is a script
 * that first checks the claim is ours (kvp_lua_*): an agent that finds
 * the name taken writes nothing, says so (an error in the log, the
 * name_clash counter, state "clash"), and tries again every ttl/3; it
 * takes the name when the other's claim ends (a clean stop removes it;
 * a crash leaves it for one TTL).
 */
/* KEYS claim; ARGV id, ttl: 1 ours (refreshed), 2 ours (taken now), or
 * the id of the agent that holds it */
static const char kvp_lua_claim[] =
	"local v = redis.call('GET', KEYS[1]) "
	"if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) "
	"return 1 end "
	"if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
	"return 2 end "
	"return v";
/* KEYS claim, hash; ARGV id, ttl, then field value pairs: set, the
 * hash's TTL renewed; -1: the name is not ours */
static const char kvp_lua_set[] =
	"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end "
	"for i = 3, #ARGV, 2 do "
	"redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end "
	"redis.call('PEXPIRE', KEYS[2], ARGV[2]) "
	"return (#ARGV - 2) / 2";
/* KEYS claim, hash; ARGV id, then field tag pairs: a field is deleted
 * only if its value still names that publication ("<len> <tag>");
 * returns how many were; -1: the name is not ours */
static const char kvp_lua_del[] =
	"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end "
	"local n = 0 "
	"for i = 2, #ARGV, 2 do "
	"local v = redis.call('HGET', KEYS[2], ARGV[i]) "
	"if v then local s = string.find(v, ' ', 1, true) "
	"if s and string.sub(v, s + 1) == ARGV[i + 1] then "
	"redis.call('HDEL', KEYS[2], ARGV[i]) n = n + 1 end end end "
	"return n";
/* KEYS claim, new hash, live hash; ARGV id, ttl: the new hash replaces
 * the live one in one step (none: the live one goes); -1: not ours */
static const char kvp_lua_swap[] =
	"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end "
	"if redis.call('EXISTS', KEYS[2]) == 1 then "
	"redis.call('RENAME', KEYS[2], KEYS[3]) "
	"redis.call('PEXPIRE', KEYS[3], ARGV[2]) "
	"else redis.call('DEL', KEYS[3]) end "
	"return 1";
/* KEYS claim, node entry, directory, members; ARGV id, name: a clean
 * stop leaves, if the name is ours */
static const char kvp_lua_leave[] =
	"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
	"redis.call('DEL', KEYS[2], KEYS[3], KEYS[1]) "
	"redis.call('SREM', KEYS[4], ARGV[2]) "
	"return 1";

/* The claim refreshed or taken (one round trip): 1 ours, 0 another
 * agent's (reported), -1 no answer (an error reply, logged; the
 * connection may be down) */
static int
kvp_cl_claim(struct kvp_cl *cl)
{
	const char *node = cl->a->cfg.node;
	char ckey[128], ttl[24];
	redisReply *r;
	int rc;

	snprintf(ckey, sizeof(ckey), "kvpool:claim:%s", node);
	snprintf(ttl, sizeof(ttl), "%u", cl->a->cfg.cluster_ttl_ms);
	{
		const char *argv[] = { "EVAL", kvp_lua_claim, "1",
				       ckey,   cl->claim_id,  ttl };

		r = (redisReply *)redisCommandArgv(cl->rc, 6, argv, NULL);
	}
	if (!r) {
		kvp_cl_dir_down(cl, cl->rc && cl->rc->errstr[0] ?
					    cl->rc->errstr :
					    "I/O error");
		return -1;
	}
	if (kvp_cl_rerr(cl, r, "claiming the node name")) {
		freeReplyObject(r);
		return -1;
	}
	if (r->type == REDIS_REPLY_INTEGER) {
		if (r->integer == 2 || !cl->claimed) {
			/* ours now: whatever N's directory holds was not
			 * written by us (or by us before a gap) */
			cl->republish = true;
			if (cl->said_clash)
				kvp_log(KVP_LOG_INFO, "cluster",
					"node name '%s' is ours now", node);
			cl->said_clash = false;
		}
		cl->claimed = true;
		freeReplyObject(r);
		return 1;
	}
	rc = 0;
	cl->claimed = false;
	kvp_cl_ctr(cl, KVP_CLC_NAME_CLASH, 1);
	if (!cl->said_clash) {
		char other[80];
		size_t k;

		for (k = 0; r->type == REDIS_REPLY_STRING && k < r->len &&
			    k < sizeof(other) - 1;
		     k++)
			other[k] = isgraph((unsigned char)r->str[k]) ?
					   r->str[k] :
					   '?';
		other[k] = 0;
		kvp_log(KVP_LOG_ERROR, "cluster",
			"node name '%s' is taken by another agent (%s; this "
			"one is %s): this agent publishes nothing and serves "
			"no one while it is; give one of them another --node "
			"(tried again every %u ms)",
			node, other, cl->claim_id,
			cl->a->cfg.cluster_ttl_ms / 3);
		cl->said_clash = true;
	}
	freeReplyObject(r);
	return rc;
}

/* One script (of the above) on N's keys: its integer reply, or
 * -2 (an error reply, logged and counted; or the connection down).
 * -1 from the script: the name is not ours (the claim lost). */
static long long
kvp_cl_script(struct kvp_cl *cl, const char *script, int nkeys,
	      const char **argv, size_t *argl, int argc, const char *what)
{
	redisReply *r;
	long long v;

	argv[0] = "EVAL";
	argl[0] = 4;
	argv[1] = script;
	argl[1] = strlen(script);
	argv[2] = nkeys == 1 ? "1" : nkeys == 2 ? "2" : nkeys == 3 ? "3" : "4";
	argl[2] = 1;
	redisAppendCommandArgv(cl->rc, argc, argv, argl);
	if (!kvp_cl_replies(cl, &r, 1))
		return -2;
	if (kvp_cl_rerr(cl, r, what) || r->type != REDIS_REPLY_INTEGER) {
		freeReplyObject(r);
		return -2;
	}
	v = r->integer;
	freeReplyObject(r);
	if (v == -1 && cl->claimed) {
		cl->claimed = false;
		cl->next_member_ns = 0; /* see who has it now */
	}
	return v;
}

/* ---- node entries: validation, the endpoint probe ---- */

/*
 * A node entry is written by whoever can write the directory: every
 * field is checked before it is used (lengths, hex, numbers parsed whole,
 * names), and a worker address, which only UCX can read and which UCX
 * asserts on when it is malformed (an abort, not an error code), reaches
 * this agent's ucp_ep_create only after a process of its own survived
 * the same call: "kvpoold --ucx-probe HEX" (kvp_cluster_probe), spawned
 * per new (incarnation, address) and watched without blocking (waitpid
 * WNOHANG and a deadline, kvp_cl_probes_reap, every turn of the thread).
 * An entry refused (by a check or by its probe) disables that one peer
 * while the entry stays as it is; it is logged once (a memory of the
 * last KVP_CL_REFUSED_MEMO refusals, by name and content) and counted in
 * the bad-peers gauge (cl_state).  A probe that runs out of time is tried
 * again (a loaded machine is not a bad peer) up to KVP_CL_PROBE_TRIES.
 */
#define KVP_CL_ADDR_MAX (16u << 10)    /* bytes of a worker address */
#define KVP_CL_ADDR_SLACK 4096u        /* zeros after it (UCX reads ahead) */
#define KVP_CL_ENTRY_FIELDS 64u        /* fields of a node entry, at most */
#define KVP_CL_PROBES 4u               /* probes running at once */
#define KVP_CL_PROBE_NS 10000000000ull /* a probe's deadline */
#define KVP_CL_PROBE_TRIES 3u
/* reply element r is the string s (all of it: a name with a NUL in it is
 * another name) */
#define KVP_CL_IS(r, s) \
	((r)->len == sizeof(s) - 1 && !memcmp((r)->str, s, (r)->len))

/* What the checks keep of a node entry (pointers into the reply). */
struct kvp_cl_entry {
	const char *addr; /* hex, checked */
	size_t addrl;
	uint64_t inc;
};

/* s[0..len) is a whole decimal number that fits in 64 bits */
static bool
kvp_cl_num(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (!len || len > 20)
		return false;
	for (i = 0; i < len; i++) {
		unsigned d = (unsigned char)s[i] - '0';

		if (d > 9 || v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

/* s[0..len) is lowercase hex of 1..max bytes (what kvp_unhex reads) */
static bool
kvp_cl_hexok(const char *s, size_t len, size_t max)
{
	size_t i;

	if (!len || len % 2 || len / 2 > max)
		return false;
	for (i = 0; i < len; i++)
		if (!isdigit((unsigned char)s[i]) && (s[i] < 'a' || s[i] > 'f'))
			return false;
	return true;
}

/* A node name as --node takes it: 1..63 of [A-Za-z0-9_.-] */
static bool
kvp_cl_name_ok(const char *s, size_t len)
{
	size_t i;

	if (!len || len >= sizeof(((struct kvp_peer *)0)->name))
		return false;
	for (i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("_.-", s[i]))
			return false;
	return true;
}

/* The length at the start of a directory value ("<len> <publication>",
 * kvp_cl_publish): digits up to a space or the end; false if not. */
static bool
kvp_cl_dirval_len(const char *s, size_t len, uint64_t *out)
{
	const char *sp = (const char *)memchr(s, ' ', len);

	return kvp_cl_num(s, sp ? (size_t)(sp - s) : len, out);
}

/* NULL if r is a node entry every field of which is well formed (e
 * filled), else why not. */
static const char *
kvp_cl_entry_parse(const redisReply *r, struct kvp_cl_entry *e)
{
	bool sec = false;
	size_t k, j;
	uint64_t v;

	memset(e, 0, sizeof(*e));
	if (r->type == REDIS_REPLY_ERROR)
		return "not a hash";
	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 ||
	    r->elements > 2 * KVP_CL_ENTRY_FIELDS)
		return "not a node entry";
	for (k = 0; k < r->elements; k += 2) {
		const redisReply *f = r->element[k], *x = r->element[k + 1];

		if (f->type != REDIS_REPLY_STRING ||
		    x->type != REDIS_REPLY_STRING)
			return "a field that is not a string";
		if (KVP_CL_IS(f, "addr")) {
			if (!kvp_cl_hexok(x->str, x->len, KVP_CL_ADDR_MAX))
				return "addr is not a worker address in hex";
			e->addr = x->str;
			e->addrl = x->len;
		} else if (KVP_CL_IS(f, "secret")) {
			if (x->len != 32 || !kvp_cl_hexok(x->str, x->len, 16))
				return "secret is not 16 bytes in hex";
			sec = true;
		} else if (KVP_CL_IS(f, "inc")) {
			if (!kvp_cl_num(x->str, x->len, &v) || !v ||
			    v > UINT32_MAX)
				return "inc is not an incarnation";
			e->inc = v;
		} else if (KVP_CL_IS(f, "proto")) {
			if (!x->len || x->len > 32)
				return "proto is not a protocol name";
			for (j = 0; j < x->len; j++)
				if (!isgraph((unsigned char)x->str[j]))
					return "proto is not a protocol name";
		} else if (KVP_CL_IS(f, "capacity")) {
			if (!kvp_cl_num(x->str, x->len, &v))
				return "capacity is not a number";
		} else if (KVP_CL_IS(f, "pool")) {
			if (!x->len || x->len >= KVP_POOL_NAME_MAX)
				return "pool is not a pool name";
			for (j = 0; j < x->len; j++)
				if (!isgraph((unsigned char)x->str[j]))
					return "pool is not a pool name";
		}
		/* another field: a newer agent's, ignored */
	}
	if (!e->addr || !sec || !e->inc)
		return "addr, secret or inc missing";
	return NULL;
}

/* A digest of what a reply holds (a refusal is remembered by it) */
static uint64_t
kvp_cl_reply_digest(const redisReply *r)
{
	uint64_t h = r->type;
	size_t k;

	if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_ERROR)
		return kvp_hash(h, r->str, r->len);
	if (r->type == REDIS_REPLY_ARRAY)
		for (k = 0; k < r->elements; k++)
			h = kvp_cl_reply_digest(r->element[k]) ^
			    kvp_hash(h, &k, sizeof(k));
	return h | 1;
}

/* true if (name, what) was refused lately (and so was logged) */
static bool
kvp_cl_refused(struct kvp_cl *cl, uint64_t name_h, uint64_t what)
{
	unsigned k;

	for (k = 0; k < KVP_CL_REFUSED_MEMO; k++)
		if (cl->refused[k].name_h == name_h &&
		    cl->refused[k].what == what)
			return true;
	return false;
}

/* Refuse a member's entry: logged the first time (the name printed
 * safe: it is anyone's bytes), remembered */
static void
kvp_cl_refuse(struct kvp_cl *cl, const char *name, size_t nlen, uint64_t what,
	      const char *why)
{
	uint64_t nh = kvp_hash(0x72656675736564ull, name, nlen);
	char safe[72];
	size_t k;

	if (kvp_cl_refused(cl, nh, what))
		return;
	if (cl->refuse_logs >= KVP_CL_REFUSE_LOGS) {
		/* not remembered: logged on a later look (a directory full
		 * of garbage costs the log a few lines per look) */
		cl->refuse_quiet++;
		return;
	}
	cl->refuse_logs++;
	cl->refused[cl->refused_next].name_h = nh;
	cl->refused[cl->refused_next].what = what;
	cl->refused_next = (cl->refused_next + 1) % KVP_CL_REFUSED_MEMO;
	for (k = 0; k < nlen && k < sizeof(safe) - 4; k++)
		safe[k] = isgraph((unsigned char)name[k]) ? name[k] : '?';
	if (k < nlen)
		memcpy(safe + k, "...", 3), k += 3;
	safe[k] = 0;
	kvp_log(KVP_LOG_WARN, "cluster",
		"peer %s: node entry refused (%s); that peer is ignored while "
		"its entry stays as it is",
		safe, why);
}

/* A member's HGETALL reply, before it has a peer: false (refused, logged
 * once) if its name or any of its fields is malformed, or a probe of the
 * same address died before. */
static bool
kvp_cl_entry_admit(struct kvp_cl *cl, const char *name, size_t nlen,
		   const redisReply *r)
{
	struct kvp_cl_entry e;
	const char *why;

	if (!kvp_cl_name_ok(name, nlen)) {
		cl->nbad_now++;
		kvp_cl_refuse(cl, name, nlen, 1, "not a node name");
		return false;
	}
	why = kvp_cl_entry_parse(r, &e);
	if (why) {
		cl->nbad_now++;
		kvp_cl_refuse(cl, name, nlen, kvp_cl_reply_digest(r), why);
		return false;
	}
	if (kvp_cl_refused(cl, kvp_hash(0x72656675736564ull, name, nlen),
			   kvp_hash(e.inc, e.addr, e.addrl) | 1)) {
		cl->nbad_now++;
		return false;
	}
	return true;
}

/* kvpoold --ucx-probe HEX: create a UCX worker and an endpoint to the
 * worker address HEX, and exit 0 if UCX took it (1: it refused it; 2:
 * not an address; 3: no UCX).  Run by the agent in a process of its own
 * (kvp_cl_probe_start): where UCX aborts on an address, this process
 * dies, not the agent. */
int
kvp_cluster_probe(const char *hex)
{
	size_t n = strlen(hex);
	unsigned char *buf;
	ucp_config_t *uc = NULL;
	ucp_params_t up;
	ucp_worker_params_t wp;
	ucp_context_h ctx = NULL;
	ucp_worker_h w = NULL;
	ucp_ep_params_t ep;
	ucp_ep_h e = NULL;
	ucs_status_t st = UCS_ERR_INVALID_PARAM;
	int k;

	if (!kvp_cl_hexok(hex, n, KVP_CL_ADDR_MAX))
		return 2;
	buf = (unsigned char *)calloc(n / 2 + KVP_CL_ADDR_SLACK, 1);
	if (!buf || kvp_unhex(hex, n, buf, n / 2) < 1)
		return 2;
	/* UCX set up as the agent sets it up (kvp_cluster_start_agent):
	 * the same transports take the address the same way */
	if (kvp_cl_load_ucx() || U.config_read(NULL, NULL, &uc) != UCS_OK ||
	    U.config_modify(uc, "TCP_PUT_ENABLE", "n") != UCS_OK)
		return 3;
	memset(&up, 0, sizeof(up));
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
	if (U.init_version(UCP_API_MAJOR, UCP_API_MINOR, &up, uc, &ctx) !=
	    UCS_OK)
		return 3;
	U.config_release(uc);
	memset(&wp, 0, sizeof(wp));
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	if (U.worker_create(ctx, &wp, &w) != UCS_OK)
		return 3;
	memset(&ep, 0, sizeof(ep));
	ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
	ep.address = (const ucp_address_t *)buf;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	st = U.ep_create(w, &ep, &e);
	if (st == UCS_OK) {
		ucp_request_param_t prm;
		void *rq;

		for (k = 0; k < 16; k++)
			U.worker_progress(w);
		memset(&prm, 0, sizeof(prm));
		prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
		rq = U.ep_close_nbx(e, &prm);
		for (k = 0; k < 100000 && rq && !UCS_PTR_IS_ERR(rq) &&
			    U.request_check_status(rq) == UCS_INPROGRESS;
		     k++)
			U.worker_progress(w);
	}
	/* the process ends here (the caller _exits): no teardown that
	 * could hang on a half-open endpoint */
	return st == UCS_OK ? 0 : 1;
}

/* Start a probe of e's address for peer p (at most KVP_CL_PROBES at
 * once: the rest wait for a later membership). */
static void
kvp_cl_probe_start(struct kvp_cl *cl, struct kvp_peer *p,
		   const struct kvp_cl_entry *e)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, dfl;
	char *hex, *argv[4], a0[] = "kvpoold", a1[] = "--ucx-probe";
	pid_t pid;
	int rc;

	if (cl->nprobes >= KVP_CL_PROBES)
		return;
	hex = strndup(e->addr, e->addrl);
	if (!hex)
		return;
	argv[0] = a0;
	argv[1] = a1;
	argv[2] = hex;
	argv[3] = NULL;
	sigemptyset(&none);
	sigemptyset(&dfl);
	sigaddset(&dfl, SIGPIPE);
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	/* no fd of ours in it (the segment, Redis, UCX); its UCX messages
	 * are not ours to log: the verdict is */
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &dfl);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK |
					      POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawn(&pid, "/proc/self/exe", &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	free(hex);
	if (rc) {
		/* tried again at the next membership; said once */
		if (!cl->said_spawn)
			kvp_log(KVP_LOG_ERROR, "cluster",
				"cannot start a probe of a peer's address "
				"(/proc/self/exe: %s): peers are not connected "
				"until one starts",
				strerror(rc));
		cl->said_spawn = true;
		return;
	}
	cl->said_spawn = false;
	p->probe_pid = pid;
	p->probe_end = kvp_cl_now() + KVP_CL_PROBE_NS;
	cl->nprobes++;
}

/* A probe's end (its wait status; timed_out: killed at its deadline). */
static void
kvp_cl_probe_done(struct kvp_cl *cl, struct kvp_peer *p, int st, bool timed_out)
{
	char why[96];

	p->probe_pid = 0;
	cl->nprobes--;
	/* look again now: the peer connects (or is refused) at once */
	cl->next_member_ns = 0;
	if (!timed_out && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		p->ent_ok = p->ent_key;
		return;
	}
	if (timed_out && ++p->probe_tries < KVP_CL_PROBE_TRIES)
		return; /* tried again at the next membership */
	if (timed_out)
		snprintf(why, sizeof(why),
			 "UCX hung on its worker address %u times",
			 KVP_CL_PROBE_TRIES);
	else if (WIFSIGNALED(st))
		snprintf(why, sizeof(why),
			 "UCX died of signal %d on its worker address",
			 WTERMSIG(st));
	else
		snprintf(why, sizeof(why),
			 "UCX refused its worker address (probe exit %d)",
			 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	kvp_cl_refuse(cl, p->name, strlen(p->name), p->ent_key, why);
	p->ent_key = 0;
	p->live = false;
}

/* Every turn of the thread: the probes that ended or ran out of time
 * (never blocks: WNOHANG; a probe killed is reaped on a later turn). */
static void
kvp_cl_probes_reap(struct kvp_cl *cl)
{
	unsigned k;

	if (!cl->nprobes && !cl->nzombies)
		return;
	for (k = 0; k < cl->nzombies;) {
		int st;

		if (waitpid(cl->zombies[k], &st, WNOHANG) == 0) {
			k++;
			continue;
		}
		cl->zombies[k] = cl->zombies[--cl->nzombies];
	}
	for (k = 0; k < cl->npeers; k++) {
		struct kvp_peer *p = &cl->peers[k];
		int st = 0;
		pid_t r;

		if (!p->probe_pid)
			continue;
		r = waitpid(p->probe_pid, &st, WNOHANG);
		if (r == p->probe_pid || r < 0) {
			/* r < 0: not ours to wait for (cannot be): tried again */
			kvp_cl_probe_done(cl, p, st, p->probe_killed || r < 0);
			p->probe_killed = false;
		} else if (!p->probe_killed && kvp_cl_now() > p->probe_end) {
			kill(p->probe_pid, SIGKILL);
			p->probe_killed = true;
		}
	}
}

/* A probe of peer p that is no longer wanted (its entry changed, the
 * peer's slot is reused, the agent stops): killed, reaped later
 * (kvp_cl_probes_reap) or now (wait: the agent stops, or no room). */
static void
kvp_cl_probe_cancel(struct kvp_cl *cl, struct kvp_peer *p, bool wait)
{
	int st;

	if (!p->probe_pid)
		return;
	kill(p->probe_pid, SIGKILL);
	if (!wait && cl->nzombies < KVP_CL_ZOMBIES)
		cl->zombies[cl->nzombies++] = p->probe_pid;
	else
		/* killed: it ends at once */
		waitpid(p->probe_pid, &st, 0);
	p->probe_pid = 0;
	p->probe_killed = false;
	cl->nprobes--;
}

/* Peer p's node entry r (admitted: kvp_cl_entry_admit): true if this
 * agent may create an endpoint to its address now (a probe of that
 * incarnation and address survived), else it starts one (the peer stays
 * out of service until it ends). */
static bool
kvp_cl_entry_ready(struct kvp_cl *cl, struct kvp_peer *p, const redisReply *r)
{
	struct kvp_cl_entry e;
	uint64_t key;

	if (kvp_cl_entry_parse(r, &e))
		return false; /* admitted: not reached */
	key = kvp_hash(e.inc, e.addr, e.addrl) | 1;
	if (p->ent_key != key) {
		kvp_cl_probe_cancel(cl, p, false);
		p->ent_key = key;
		p->probe_tries = 0;
	}
	if (p->ent_ok == key)
		return true;
	p->pending = true;
	if (!p->probe_pid)
		kvp_cl_probe_start(cl, p, &e);
	return false;
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

/* Wait for a request at most 'ms' (never past a stop): a request still in
 * flight then is cancelled, which completes it.  Only for requests that
 * end on their own in microseconds (an endpoint's forced close). */
static void
kvp_cl_wait_req(struct kvp_cl *cl, void *req, unsigned ms)
{
	uint64_t end = kvp_cl_now() + ms * 1000000ull;

	if (!req || UCS_PTR_IS_ERR(req))
		return;
	while (U.request_check_status(req) == UCS_INPROGRESS) {
		if (kvp_cl_now() >= end) {
			U.request_cancel(cl->worker, req);
			U.worker_progress(cl->worker);
			break;
		}
		U.worker_progress(cl->worker);
	}
	U.request_free(req);
}

static void kvp_cl_serve_peer_gone(struct kvp_cl *cl, unsigned peer);

/* Close peer p's endpoint (forced: UCX ends every operation on it, our
 * sends and receives included), and end what we served it. */
static void
kvp_cl_peer_close(struct kvp_cl *cl, struct kvp_peer *p)
{
	if (p->ep) {
		ucp_request_param_t prm;

		memset(&prm, 0, sizeof(prm));
		prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
		kvp_cl_wait_req(cl, U.ep_close_nbx(p->ep, &prm), 1000);
		p->ep = NULL;
	}
	kvp_cl_serve_peer_gone(cl, (unsigned)(p - cl->peers));
}

/* A peer's node entry (HGETALL reply): connect, or reconnect if it is a
 * new incarnation or its endpoint failed. */
static void
kvp_cl_peer_update(struct kvp_cl *cl, struct kvp_peer *p, redisReply *r)
{
	const char *addr = NULL, *sec = NULL, *proto = NULL;
	size_t addrl = 0, secl = 0, k;
	uint64_t inc = 0;
	unsigned char *buf = NULL;
	ucp_ep_params_t ep;
	ucs_status_t st;

	/* every field checked, the address survived a probe of its own */
	if (!kvp_cl_entry_ready(cl, p, r))
		return;
	for (k = 0; k + 1 < r->elements; k += 2) {
		const redisReply *f = r->element[k], *v = r->element[k + 1];

		if (f->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue;
		if (!strcmp(f->str, "addr"))
			addr = v->str, addrl = v->len;
		else if (!strcmp(f->str, "secret"))
			sec = v->str, secl = v->len;
		else if (!strcmp(f->str, "proto"))
			proto = v->str;
		else if (!strcmp(f->str, "inc"))
			inc = strtoull(v->str, NULL, 10);
	}
	/* a node of another wire format (an older kvpool: one-sided gets)
	 * is not a peer of ours */
	if (!addr || !sec || !inc || !proto || strcmp(proto, KVP_WIRE_PROTO)) {
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
	buf = (unsigned char *)malloc(addrl / 2 + 1);
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
		kvp_cl_probe_cancel(cl, &cl->peers[k], false);
	} else {
		k = cl->npeers++;
	}
	memset(&cl->peers[k], 0, sizeof(cl->peers[0]));
	snprintf(cl->peers[k].name, sizeof(cl->peers[0].name), "%s", name);
	return &cl->peers[k];
}

/* Membership: our name claimed (kvp_cl_claim), our node entry refreshed,
 * the members read and their entries checked (three round trips, every
 * ttl/3).  While the name is another agent's, nothing else. */
static void
kvp_cl_membership(struct kvp_cl *cl)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	char key[128], dkey[128], inc[24], cap[24], ttl[24];
	redisReply *r[6], **rep = NULL;
	unsigned k, n = 0, j;
	int claim;

	cl->last_member_ns = kvp_cl_now();
	claim = kvp_cl_claim(cl);
	if (!cl->rc)
		return;
	if (claim == 0 || (claim < 0 && !cl->claimed)) {
		kvp_cl_set_state(cl, claim == 0 ? KVP_CL_CLASH : KVP_CL_DOWN);
		return;
	}
	snprintf(key, sizeof(key), "kvpool:node:%s", cfg->node);
	snprintf(dkey, sizeof(dkey), "kvpool:dir:%s", cfg->node);
	snprintf(inc, sizeof(inc), "%u", cl->inc);
	snprintf(cap, sizeof(cap), "%llu",
		 (unsigned long long)cl->a->seg.L.len[KVP_R_ARENA]);
	snprintf(ttl, sizeof(ttl), "%u", cfg->cluster_ttl_ms);
	{
		const char *argv[] = { "HSET",     key,
				       "addr",     cl->addr_hex,
				       "proto",    KVP_WIRE_PROTO,
				       "secret",   cl->secret_hex,
				       "pool",     cfg->pool,
				       "capacity", cap,
				       "inc",      inc };

		redisAppendCommandArgv(cl->rc, 14, argv, NULL);
	}
	redisAppendCommand(cl->rc, "PEXPIRE %s %s", key, ttl);
	redisAppendCommand(cl->rc, "SADD kvpool:members %s", cfg->node);
	redisAppendCommand(cl->rc, "PEXPIRE %s %s", dkey, ttl);
	redisAppendCommand(cl->rc, "HLEN %s", dkey);
	redisAppendCommand(cl->rc, "SMEMBERS kvpool:members");
	if (!kvp_cl_replies(cl, r, 6))
		return;
	for (k = 0; k < 4; k++)
		kvp_cl_rerr(cl, r[k], "registering this node");
	/* our directory hash expired (a stall longer than the TTL) or Redis
	 * lost it, or holds what we did not publish: publish everything
	 * again */
	if (!kvp_cl_rerr(cl, r[4], "registering this node") &&
	    r[4]->type == REDIS_REPLY_INTEGER) {
		uint64_t mine = 0, i;

		for (i = 0; i < cl->nslots; i++)
			mine += cl->pub[i].gen1 != 0;
		if ((uint64_t)r[4]->integer != mine)
			cl->republish = true;
	}
	if (kvp_cl_rerr(cl, r[5], "reading the members") ||
	    r[5]->type != REDIS_REPLY_ARRAY)
		goto out; /* the peers as they were */
	for (k = 0; k < cl->npeers; k++) {
		cl->peers[k].live = false;
		cl->peers[k].pending = false;
	}
	cl->nbad_now = 0;
	cl->refuse_logs = cl->refuse_quiet = 0;
	for (k = 0; k < r[5]->elements; k++) {
		const redisReply *m = r[5]->element[k];

		if (m->type != REDIS_REPLY_STRING ||
		    (m->len == strlen(cfg->node) &&
		     !memcmp(m->str, cfg->node, m->len)))
			continue;
		if (!kvp_cl_name_ok(m->str, m->len)) {
			kvp_cl_entry_admit(cl, m->str, m->len, NULL);
			continue;
		}
		redisAppendCommand(cl->rc, "HGETALL kvpool:node:%s", m->str);
		n++;
	}
	if (n) {
		rep = (redisReply **)calloc(n, sizeof(*rep));
		if (!rep || !kvp_cl_replies(cl, rep, n)) {
			/* not read: the connection is down (no reply may be
			 * left in it) */
			if (rep == NULL)
				kvp_cl_dir_down(cl, "out of memory");
			goto out;
		}
	}
	for (k = 0, j = 0; k < r[5]->elements; k++) {
		const redisReply *m = r[5]->element[k];
		struct kvp_peer *p;

		if (m->type != REDIS_REPLY_STRING ||
		    (m->len == strlen(cfg->node) &&
		     !memcmp(m->str, cfg->node, m->len)) ||
		    !kvp_cl_name_ok(m->str, m->len))
			continue;
		if ((rep[j]->type == REDIS_REPLY_ARRAY && !rep[j]->elements) ||
		    rep[j]->type == REDIS_REPLY_NIL) {
			/* gone: its entry expired */
			redisReply *x = (redisReply *)redisCommand(
				cl->rc, "SREM kvpool:members %s", m->str);

			if (!x) {
				kvp_cl_dir_down(cl, "I/O error");
				break;
			}
			kvp_cl_rerr(cl, x, "removing a member that left");
			freeReplyObject(x);
		} else if (kvp_cl_entry_admit(cl, m->str, m->len, rep[j])) {
			p = kvp_cl_peer(cl, m->str, true);
			if (p)
				kvp_cl_peer_update(cl, p, rep[j]);
		}
		j++;
	}
	for (j = 0; j < n; j++)
		freeReplyObject(rep[j]);
	cl->nbad = cl->nbad_now;
	if (cl->refuse_quiet)
		kvp_log(KVP_LOG_WARN, "cluster",
			"%u more members refused, logged on later looks",
			cl->refuse_quiet);
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
		if (!p->said_gone && !p->pending && p->ent_ok) {
			kvp_log(KVP_LOG_INFO, "cluster",
				"peer %s left the directory", p->name);
			p->said_gone = true;
		}
		if (p->ep && kvp_cl_now() - p->seen_ns >
				     2ull * cfg->cluster_ttl_ms * 1000000ull)
			kvp_cl_peer_close(cl, p);
	}
out:
	free(rep);
	for (k = 0; k < 6; k++)
		if (r[k])
			freeReplyObject(r[k]);
	if (cl->rc)
		kvp_cl_set_state(cl, KVP_CL_UP);
}

/* ---- publishing ---- */

/*
 * A published value is "<len> <slot>:<gen>": the value's length (all a
 * reader takes: kvp_cl_lookup parses it whole up to the space), then the
 * publication (the index slot and generation it came from).  Unpublishing
 * deletes a field only if it still names that publication (kvp_lua_del):
 * a key deleted and put again, in the same slot or another, within one
 * pass or across two, keeps the field its new publication wrote, in
 * whatever order the two commands reach Redis.  A republish (a new
 * connection, a claim taken, a hash that does not match what we
 * published, an error) builds the whole hash under kvpool:dir:N:new and
 * swaps it in with one RENAME (kvp_lua_swap): readers see the old hash
 * or the new one, never none.
 */

static void
kvp_cl_field(uint64_t ns, uint64_t hash, char *f)
{
	memcpy(f, &ns, 8);
	memcpy(f + 8, &hash, 8);
}

/* One pass over the index: what changed since the last pass goes out as
 * scripts of at most 1024 fields each.  0, or -1 (an error reply or the
 * connection lost: everything is published again, after a backoff). */
static int
kvp_cl_publish(struct kvp_cl *cl)
{
	struct kvp_seg *s = &cl->a->seg;
	enum {
		CHUNK = 1024,
		HDR = 6, /* EVAL script nkeys claim hash id (+ ttl: set) */
	};
	const char *node = cl->a->cfg.node;
	char dkey[128], nkey[128], ckey[128], ttl[24];
	const char **argv;
	size_t *argl;
	char(*fields)[16], (*vals)[48], (*dfields)[16], (*tags)[32];
	unsigned nset = 0, ndel = 0, k;
	uint64_t i, t0 = kvp_cl_now(), nset_all = 0, ndel_all = 0;
	bool full = cl->republish;
	long long v;
	int rc = -1;

	snprintf(dkey, sizeof(dkey), "kvpool:dir:%s", node);
	snprintf(nkey, sizeof(nkey), "kvpool:dir:%s:new", node);
	snprintf(ckey, sizeof(ckey), "kvpool:claim:%s", node);
	snprintf(ttl, sizeof(ttl), "%u", cl->a->cfg.cluster_ttl_ms);
	argv = (const char **)malloc((HDR + 1 + 2 * CHUNK) * sizeof(*argv));
	argl = (size_t *)malloc((HDR + 1 + 2 * CHUNK) * sizeof(*argl));
	fields = (char(*)[16])malloc(CHUNK * 16);
	dfields = (char(*)[16])malloc(CHUNK * 16);
	vals = (char(*)[48])malloc(CHUNK * 48);
	tags = (char(*)[32])malloc(CHUNK * 32);
	if (!argv || !argl || !fields || !dfields || !vals || !tags)
		goto out;
	if (full) {
		/* a half-built hash of an earlier try */
		redisReply *r =
			(redisReply *)redisCommand(cl->rc, "DEL %s", nkey);

		if (!r) {
			kvp_cl_dir_down(cl, "I/O error");
			goto out;
		}
		if (kvp_cl_rerr(cl, r, "publishing")) {
			freeReplyObject(r);
			goto out;
		}
		freeReplyObject(r);
		memset(cl->pub, 0, cl->nslots * sizeof(*cl->pub));
	}
	argv[3] = ckey;
	argl[3] = strlen(ckey);
	argv[4] = full ? nkey : dkey;
	argl[4] = strlen(argv[4]);
	argv[5] = cl->claim_id;
	argl[5] = strlen(cl->claim_id);
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
				kvp_cl_field(p->ns, p->hash, dfields[ndel]);
				snprintf(tags[ndel], sizeof(tags[0]), "%llu:%u",
					 (unsigned long long)i, p->gen1);
				ndel++;
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
						 "%llu %llu:%u",
						 (unsigned long long)len,
						 (unsigned long long)i, g1);
					nset++;
				}
			}
		}
		/* the fields' memory is reused: each chunk is sent and
		 * answered before the walk goes on */
		if (nset && (nset == CHUNK || flush || ndel == CHUNK)) {
			argv[6] = ttl;
			argl[6] = strlen(ttl);
			for (k = 0; k < nset; k++) {
				argv[7 + 2 * k] = fields[k];
				argl[7 + 2 * k] = 16;
				argv[8 + 2 * k] = vals[k];
				argl[8 + 2 * k] = strlen(vals[k]);
			}
			v = kvp_cl_script(cl, kvp_lua_set, 2, argv, argl,
					  (int)(7 + 2 * nset), "publishing");
			if (v < 0)
				goto out;
			nset_all += nset;
			nset = 0;
		}
		if (ndel && (ndel == CHUNK || flush)) {
			for (k = 0; k < ndel; k++) {
				argv[6 + 2 * k] = dfields[k];
				argl[6 + 2 * k] = 16;
				argv[7 + 2 * k] = tags[k];
				argl[7 + 2 * k] = strlen(tags[k]);
			}
			v = kvp_cl_script(cl, kvp_lua_del, 2, argv, argl,
					  (int)(6 + 2 * ndel), "unpublishing");
			if (v < 0)
				goto out;
			ndel_all += (uint64_t)v;
			ndel = 0;
		}
		if (flush)
			break;
	}
	if (full) {
		argv[3] = ckey;
		argl[3] = strlen(ckey);
		argv[4] = nkey;
		argl[4] = strlen(nkey);
		argv[5] = dkey;
		argl[5] = strlen(dkey);
		argv[6] = cl->claim_id;
		argl[6] = strlen(cl->claim_id);
		argv[7] = ttl;
		argl[7] = strlen(ttl);
		if (kvp_cl_script(cl, kvp_lua_swap, 3, argv, argl, 8,
				  "publishing") < 0)
			goto out;
		cl->republish = false;
	}
	rc = 0;
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
	/* what Redis took, and only that (a republish counts once it is
	 * live) */
	if (!full || !rc)
		kvp_cl_ctr(cl, KVP_CLC_PUBLISHED, nset_all);
	kvp_cl_ctr(cl, KVP_CLC_UNPUBLISHED, ndel_all);
	if (rc)
		/* what Redis holds of ours is not known: all of it again */
		cl->republish = true;
	free(argv);
	free(argl);
	free(fields);
	free(dfields);
	free(vals);
	free(tags);
	return rc;
}

/* ---- namespaces: a client handle of ours per namespace ---- */

/*
 * A handle of ours for namespace ns, referenced (kvp_cl_nsh_put when
 * done).  At most KVP_CL_MAX_NS are open; a new namespace takes the
 * entry of the idle one used longest ago (closed first), so a node serves
 * and fetches for any number of namespaces over its life (model
 * rollouts); NULL only when KVP_CL_MAX_NS are in use at once.
 */
static struct kvp_nsh *
kvp_cl_nsh(struct kvp_cl *cl, const char *ns)
{
	struct kvp_nsh *h, *victim = NULL, *free_one = NULL;
	struct kvp_client *c = NULL;
	unsigned k;

	for (k = 0; k < KVP_CL_MAX_NS; k++) {
		h = &cl->nsh[k];
		if (!h->c) {
			if (!free_one)
				free_one = h;
			continue;
		}
		if (!strcmp(h->ns, ns)) {
			h->refs++;
			h->used = ++cl->nsh_clock;
			return h;
		}
		if (!h->refs && (!victim || h->used < victim->used))
			victim = h;
	}
	h = free_one ? free_one : victim;
	if (!h) {
		kvp_log(KVP_LOG_WARN, "cluster",
			"%u namespaces in use at once: a request for '%s' is answered BUSY",
			KVP_CL_MAX_NS, ns);
		return NULL;
	}
	if (h->c) {
		kvp_close(h->c);
		h->c = NULL;
	}
	if (kvp_open(cl->a->cfg.pool, ns, &c))
		return NULL;
	/* its gets of remote pages must not ask the network again */
	kvp_remote(c, 0);
	snprintf(h->ns, sizeof(h->ns), "%s", ns);
	h->c = c;
	h->refs = 1;
	h->used = ++cl->nsh_clock;
	return h;
}

static void
kvp_cl_nsh_put(struct kvp_nsh *h)
{
	if (h && h->refs)
		h->refs--;
}

/* ---- the owner's side: serving a LEASE ---- */

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

/* What a served key holds goes back (its send is complete or ended). */
static void
kvp_cl_serve_key_end(struct kvp_cl *cl, struct kvp_serve *sv,
		     struct kvp_serve_key *sk)
{
	if (sk->kind == 1)
		kvp_lease_release(sv->nsh->c, &sk->l);
	else if (sk->kind == 2)
		kvp_cl_bounce_free(cl, sk->boff, sk->blen);
	sk->kind = 0;
}

/* Renew the leases of job sv's sends still in flight (a fresh lease on
 * the same key, taken while the old one holds the value where it is, then
 * the old one released); false if one could not be renewed. */
static bool
kvp_cl_serve_renew(struct kvp_cl *cl, struct kvp_serve *sv)
{
	uint32_t ttl = cl->a->cfg.remote_lease_ms, i;

	for (i = 0; i < sv->n; i++) {
		struct kvp_serve_key *sk = &sv->k[i];
		struct kvp_lease l;

		if (!sk->rq || sk->kind != 1)
			continue;
		if (kvp_lease_acquire(sv->nsh->c, sk->key, sk->klen, ttl, &l))
			return false;
		if (l.seg_off != sk->l.seg_off || l.len != sk->l.len) {
			kvp_lease_release(sv->nsh->c, &l);
			return false; /* never: a leased value does not move */
		}
		kvp_lease_release(sv->nsh->c, &sk->l);
		sk->l = l;
	}
	sv->deadline = kvp_cl_now() + ttl * 750000ull;
	return true;
}

/*
 * Sends that completed end their holds; a job whose sends are all done
 * is freed.  A job at its deadline renews its leases while its peer takes
 * our bytes; a peer that took none for --remote-timeout-ms (it stopped
 * reading) is dropped: its endpoint is closed (forced), which ends the
 * sends before any lease behind them can run out (I36), and the peer is
 * asked again only when the directory names it again.  Never waits.
 */
static void
kvp_cl_serve_poll(struct kvp_cl *cl)
{
	struct kvp_serve **pp = &cl->serving;
	uint64_t now = kvp_cl_now(),
		 tmo = cl->a->cfg.remote_timeout_ms * 1000000ull;

	while (*pp) {
		struct kvp_serve *sv = *pp;
		struct kvp_peer *p = &cl->peers[sv->peer];
		uint32_t i;

		for (i = 0; i < sv->n && sv->left; i++) {
			struct kvp_serve_key *sk = &sv->k[i];

			if (!sk->rq ||
			    U.request_check_status(sk->rq) == UCS_INPROGRESS)
				continue;
			U.request_free(sk->rq);
			sk->rq = NULL;
			kvp_cl_serve_key_end(cl, sv, sk);
			sv->left--;
			p->took_ns = now;
		}
		if (sv->left && now >= sv->deadline &&
		    (now - p->took_ns > tmo || !kvp_cl_serve_renew(cl, sv))) {
			kvp_log(KVP_LOG_WARN, "cluster",
				"peer %s took none of our pages for %llu ms (%u in flight): "
				"dropped until the directory names it again",
				p->name,
				(unsigned long long)((now - p->took_ns) /
						     1000000u),
				sv->left);
			kvp_cl_ctr(cl, KVP_CLC_STALLED, 1);
			p->failed = true;
			/* ends this job (and the peer's others) */
			kvp_cl_peer_close(cl, p);
			pp = &cl->serving; /* the list changed */
			continue;
		}
		if (sv->left) {
			pp = &sv->next;
			continue;
		}
		*pp = sv->next;
		kvp_cl_nsh_put(sv->nsh);
		free(sv);
	}
}

/* Peer 'peer' is gone (its endpoint closed): its jobs end now (UCX
 * completed their sends with an error when the endpoint closed). */
static void
kvp_cl_serve_peer_gone(struct kvp_cl *cl, unsigned peer)
{
	struct kvp_serve **pp = &cl->serving;

	while (*pp) {
		struct kvp_serve *sv = *pp;
		uint32_t i;

		if (sv->peer != peer) {
			pp = &sv->next;
			continue;
		}
		for (i = 0; i < sv->n; i++) {
			struct kvp_serve_key *sk = &sv->k[i];

			if (sk->rq) {
				if (U.request_check_status(sk->rq) ==
				    UCS_INPROGRESS)
					U.request_cancel(cl->worker, sk->rq);
				U.request_free(sk->rq);
				sk->rq = NULL;
			}
			kvp_cl_serve_key_end(cl, sv, sk);
		}
		*pp = sv->next;
		kvp_cl_nsh_put(sv->nsh);
		free(sv);
	}
}

/* Does peer 'peer' have a job in flight? */
static bool
kvp_cl_serving_peer(const struct kvp_cl *cl, unsigned peer)
{
	const struct kvp_serve *sv;

	for (sv = cl->serving; sv; sv = sv->next)
		if (sv->peer == peer)
			return true;
	return false;
}

/* Send key i's answer (and its bytes when status 0) of job sv. */
static void
kvp_cl_serve_send(struct kvp_cl *cl, struct kvp_serve *sv, uint32_t i,
		  const void *bytes)
{
	struct kvp_serve_key *sk = &sv->k[i];
	struct kvp_peer *p = &cl->peers[sv->peer];
	ucp_request_param_t prm;
	void *rq;

	if (sk->h.status == 0)
		sk->h.crc = kvp_crc32c(0, bytes, sk->h.len);
	if (!p->ep || p->failed)
		goto done;
	memset(&prm, 0, sizeof(prm));
	rq = U.am_send_nbx(p->ep, KVP_AM_DATA, &sk->h, sizeof(sk->h),
			   sk->h.status ? NULL : bytes,
			   sk->h.status ? 0 : sk->h.len, &prm);
	if (UCS_PTR_IS_ERR(rq))
		goto done;
	if (rq) {
		sk->rq = rq;
		sv->left++;
		return;
	}
done:
	kvp_cl_serve_key_end(cl, sv, sk);
}

/*
 * A LEASE from a peer: validated, each key leased (a value in DRAM in one
 * run is sent from where it lies, under a timed lease; any other is read
 * into the bounce buffer first, through our own agent), and answered by
 * one DATA message per key.  The sends are left in flight
 * (kvp_cl_serve_poll ends them): nothing here waits on the peer.
 */
static void
kvp_cl_serve_lease(struct kvp_cl *cl, const unsigned char *m, size_t len)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	struct kvp_wire_hdr h;
	struct kvp_peer *p;
	const unsigned char *d, *end;
	char ns[KVP_NS_NAME_MAX + 1];
	struct kvp_serve *sv = NULL;
	struct kvp_client *c;
	struct kvp_op *bo = NULL;
	uint32_t k, *bk = NULL, nb = 0;

	if (len < sizeof(h))
		goto refuse;
	memcpy(&h, m, sizeof(h));
	h.from[sizeof(h.from) - 1] = 0;
	if (h.magic != KVP_WIRE_MAGIC || h.bytes != len - sizeof(h) ||
	    memcmp(h.secret, cl->secret, 16) || h.n == 0 ||
	    h.n > KVP_LEASE_CHUNK || h.inc != cl->inc || !h.req)
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
	/* the whole message is checked before anything is taken */
	d = m + sizeof(h);
	end = d + h.bytes;
	if (d >= end || d[0] == 0 || (size_t)(end - d) < 1u + d[0])
		goto refuse;
	memcpy(ns, d + 1, d[0]);
	ns[d[0]] = 0;
	if (strlen(ns) != d[0])
		goto refuse; /* a NUL inside the name */
	d += 1 + d[0];
	{
		const unsigned char *q = d;

		for (k = 0; k < h.n; k++) {
			if (q >= end || q[0] == 0 ||
			    (size_t)(end - q) < 1u + q[0])
				goto refuse;
			q += 1 + q[0];
		}
		if (q != end)
			goto refuse;
	}
	sv = (struct kvp_serve *)calloc(1,
					sizeof(*sv) + h.n * sizeof(sv->k[0]));
	bo = (struct kvp_op *)calloc(h.n, sizeof(*bo));
	bk = (uint32_t *)calloc(h.n, sizeof(*bk));
	if (!sv || !bo || !bk)
		goto out;
	sv->peer = (unsigned)(p - cl->peers);
	sv->n = h.n;
	sv->deadline = kvp_cl_now() + cfg->remote_lease_ms * 750000ull;
	sv->nsh = kvp_cl_nsh(cl, ns);
	c = sv->nsh ? sv->nsh->c : NULL;
	for (k = 0; k < h.n; k++) {
		struct kvp_serve_key *sk = &sv->k[k];
		const unsigned char *key = d + 1;
		uint32_t klen = d[0];
		struct kvp_lease l;
		uint64_t off;
		int rc;

		d += 1 + klen;
		sk->klen = (uint8_t)klen;
		memcpy(sk->key, key, klen);
		sk->h.magic = KVP_WIRE_MAGIC;
		sk->h.req = h.req;
		memcpy(sk->h.secret, p->secret, 16);
		snprintf(sk->h.from, sizeof(sk->h.from), "%s", cfg->node);
		sk->h.inc = cl->inc;
		sk->h.idx = k;
		sk->h.status = -EBUSY;
		if (!c)
			continue;
		rc = kvp_lease_acquire(c, key, klen, cfg->remote_lease_ms, &l);
		if (rc) {
			sk->h.status = rc == -ENOENT ? -ENOENT : -EBUSY;
			continue;
		}
		if (l.tier == (int)KVP_TIER_DRAM && l.seg_off &&
		    c->seg.base + l.seg_off >= cl->arena_base &&
		    c->seg.base + l.seg_off + l.len <=
			    cl->arena_base + cl->arena_len) {
			sk->kind = 1;
			sk->l = l;
			sk->h.status = 0;
			sk->h.len = l.len;
			continue;
		}
		/* SSD-resident, or in several runs: read below, with the
		 * others, into the bounce buffer (staged by our own agent:
		 * one batch) */
		kvp_lease_release(c, &l);
		if (l.len > cl->bounce_len) {
			sk->h.status = -E2BIG;
			continue;
		}
		if (kvp_cl_bounce_alloc(cl, l.len, &off))
			continue; /* -EBUSY */
		sk->kind = 2;
		sk->boff = off;
		sk->blen = l.len;
		sk->h.len = l.len;
		bo[nb].key = key;
		bo[nb].klen = klen;
		bo[nb].buf = cl->bounce + off;
		bo[nb].off = 0;
		bo[nb].len = l.len;
		bk[nb++] = k;
	}
	if (nb)
		kvp_batch_get(c, bo, nb);
	for (k = 0; k < nb; k++) {
		struct kvp_serve_key *sk = &sv->k[bk[k]];

		if (bo[k].status || bo[k].len != sk->h.len) {
			sk->h.status = bo[k].status == -ENOENT ? -ENOENT :
				       bo[k].status == -EBUSY  ? -EBUSY :
				       bo[k].status            ? -EIO :
								 -ENOENT;
			kvp_cl_serve_key_end(cl, sv, sk);
			continue;
		}
		sk->h.status = 0;
	}
	for (k = 0; k < h.n; k++) {
		struct kvp_serve_key *sk = &sv->k[k];
		const void *bytes =
			sk->kind == 1 ? sv->nsh->c->seg.base + sk->l.seg_off :
			sk->kind == 2 ? cl->bounce + sk->boff :
					NULL;

		if (sk->h.status == 0) {
			kvp_cl_ctr(cl, KVP_CLC_SERVED, 1);
			kvp_cl_ctr(cl, KVP_CLC_SERVED_BYTES, sk->h.len);
		}
		kvp_cl_serve_send(cl, sv, k, bytes);
	}
	if (sv->left) {
		/* the peer's clock of progress starts with its first job */
		if (!p->took_ns || !kvp_cl_serving_peer(cl, sv->peer))
			p->took_ns = kvp_cl_now();
		sv->next = cl->serving;
		cl->serving = sv;
		sv = NULL;
	}
out:
	if (sv) {
		kvp_cl_nsh_put(sv->nsh);
		free(sv);
	}
	free(bo);
	free(bk);
	return;
refuse:
	kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
}

static void kvp_cl_data(struct kvp_cl *cl, const struct kvp_wire_data *h,
			void *data, size_t len, bool rndv);

/* The AM handler (inside ucp_worker_progress, on this file's thread): a
 * LEASE is queued for the loop; a DATA lands in the wave it answers, or
 * is dropped.  Nothing here trusts the sender. */
static ucs_status_t
kvp_cl_am(void *arg, const void *header, size_t hlen, void *data, size_t len,
	  const ucp_am_recv_param_t *prm)
{
	struct kvp_am_arg *aa = (struct kvp_am_arg *)arg;
	struct kvp_cl *cl = aa->cl;
	bool rndv = (prm->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
	struct kvp_inmsg *q;

	if (aa->id == KVP_AM_DATA) {
		struct kvp_wire_data h;

		if (hlen != sizeof(h)) {
			kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
			return UCS_OK; /* a rendezvous dropped: never read */
		}
		memcpy(&h, header, sizeof(h));
		kvp_cl_data(cl, &h, data, len, rndv);
		return UCS_OK;
	}
	/* a LEASE: eager and small (we send no other kind); no other id is
	 * ours */
	if (aa->id != KVP_AM_LEASE || rndv || hlen ||
	    len < sizeof(struct kvp_wire_hdr) || len > (1u << 20)) {
		kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
		return UCS_OK;
	}
	q = (struct kvp_inmsg *)malloc(sizeof(*q) + len);
	if (!q)
		return UCS_OK;
	q->next = NULL;
	q->len = len;
	memcpy(q->data, data, len);
	*cl->inq_tail = q;
	cl->inq_tail = &q->next;
	return UCS_OK;
}

/* Progress UCX; when nothing moved, sleep on its event fd (and ours) at
 * most wait_ms (and never past the next heartbeat). */
static void
kvp_cl_progress(struct kvp_cl *cl, int wait_ms)
{
	struct pollfd pf[2];

	kvp_cl_beat(cl);
	if (U.worker_progress(cl->worker))
		return;
	if (wait_ms > (int)KVP_CL_BEAT_MS)
		wait_ms = (int)KVP_CL_BEAT_MS;
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
		kvp_cl_serve_lease(cl, q->data, q->len);
		free(q);
	}
}

/* What is due on the clock: our membership (every ttl/3) and a publish
 * pass (every --cluster-publish-ms; after a failed one, twice the wait
 * of the one before, up to KVP_CL_BACKOFF_MAX_MS).  Also called while a
 * fetch waits, so a long transfer never lets our node entry expire. */
#define KVP_CL_BACKOFF_MAX_MS 5000u
static void
kvp_cl_tick(struct kvp_cl *cl)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	uint64_t now = kvp_cl_now();

	kvp_cl_probes_reap(cl);
	if (!kvp_cl_dir_up(cl)) {
		kvp_cl_set_state(cl, KVP_CL_DOWN);
		return;
	}
	if (now >= cl->next_member_ns) {
		kvp_cl_membership(cl);
		cl->next_member_ns = now + cfg->cluster_ttl_ms * 1000000ull / 3;
	}
	if (cl->rc && cl->claimed && now >= cl->next_pub_ns) {
		uint64_t wait = cfg->cluster_publish_ms;

		if (kvp_cl_publish(cl)) {
			unsigned f = cl->pub_fails < 16 ? cl->pub_fails : 16;

			wait <<= f;
			if (wait > KVP_CL_BACKOFF_MAX_MS)
				wait = KVP_CL_BACKOFF_MAX_MS >
						       cfg->cluster_publish_ms ?
					       KVP_CL_BACKOFF_MAX_MS :
					       cfg->cluster_publish_ms;
			cl->pub_fails++;
		} else {
			cl->pub_fails = 0;
		}
		cl->next_pub_ns = now + wait * 1000000ull;
	}
}

/* ---- the requester's side ---- */

enum kvp_ck_phase {
	KVP_CK_WAIT = 0, /* its DATA has not come */
	KVP_CK_RECV,     /* its bytes are being received (rq) */
	KVP_CK_ARRIVED,  /* its bytes are in the receive buffer */
	KVP_CK_DONE,     /* answered (st) */
};

struct kvp_cl_key {
	const unsigned char *key;
	uint32_t klen;
	uint64_t hash;
	int owner;
	uint64_t dlen; /* the directory's length */
	uint64_t off;  /* in the receive buffer (room for dlen) */
	uint64_t glen; /* the owner's length (its DATA) */
	uint32_t crc;  /* the owner's CRC-32C of the bytes */
	unsigned phase;
	void *rq; /* the rendezvous receive in flight */
	int st;   /* its answer */
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
	for (j = 0; j < np; j++)
		if (rep[j] && rep[j]->type == REDIS_REPLY_ERROR)
			kvp_cl_rerr(cl, rep[j], "looking up keys");
	for (k = 0; k < n; k++) {
		uint64_t top = 0, dlen;

		for (j = 0; j < np; j++) {
			const redisReply *r = rep[j], *e;
			uint64_t score;

			if (!r || r->type != REDIS_REPLY_ARRAY ||
			    r->elements != n)
				continue;
			e = r->element[k];
			if (e->type != REDIS_REPLY_STRING ||
			    !kvp_cl_dirval_len(e->str, e->len, &dlen))
				continue;
			/* rendezvous over the holders, by name: every
			 * node picks the same holder for a key */
			score = kvp_hash(key[k].hash, cl->peers[pi[j]].name,
					 strlen(cl->peers[pi[j]].name)) |
				1;
			if (score > top) {
				top = score;
				key[k].owner = (int)pi[j];
				key[k].dlen = dlen;
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

/* A key's bytes arrived: into this pool once their CRC is the owner's
 * (the owner took it under its lease), and answered. */
static void
kvp_cl_land(struct kvp_cl *cl, struct kvp_client *c, struct kvp_cl_key *x)
{
	int rc;

	x->phase = KVP_CK_DONE;
	if (kvp_crc32c(0, cl->rx + x->off, x->glen) != x->crc) {
		x->st = -EIO;
		kvp_cl_ctr(cl, KVP_CLC_CORRUPT, 1);
		kvp_cl_answer_one(cl, x);
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

/*
 * A DATA message (in the AM handler): it answers key h->idx of a LEASE of
 * the wave in flight only if it names that LEASE's token, comes from the
 * owner we asked under the incarnation we asked, carries our secret, and
 * answers a key not answered yet; its bytes go only into the room we
 * reserved for that key (the directory's length).  Anything else is
 * refused (a rendezvous refused is dropped unread).
 */
static void
kvp_cl_data(struct kvp_cl *cl, const struct kvp_wire_data *h, void *data,
	    size_t len, bool rndv)
{
	struct kvp_cl_lreq *r = NULL;
	struct kvp_cl_key *x;
	ucp_request_param_t prm;
	char from[sizeof(h->from)];
	uint32_t i;
	void *rq;

	memcpy(from, h->from, sizeof(from));
	from[sizeof(from) - 1] = 0;
	if (h->magic != KVP_WIRE_MAGIC || memcmp(h->secret, cl->secret, 16))
		goto refuse;
	for (i = 0; i < cl->nlreqs; i++)
		if (cl->lreqs[i].req == h->req && cl->lreqs[i].out &&
		    !cl->lreqs[i].done) {
			r = &cl->lreqs[i];
			break;
		}
	if (!r || h->idx >= r->cnt || h->inc != r->inc ||
	    strcmp(from, cl->peers[r->peer].name))
		goto refuse;
	x = &cl->wk[cl->ww[cl->wpos[r->first + h->idx]]];
	if (x->phase != KVP_CK_WAIT)
		goto refuse; /* answered already */
	r->answered++;
	cl->wave_moved++;
	if (h->status) {
		x->st = h->status == -ENOENT ? -ENOENT :
			h->status == -EBUSY  ? -EBUSY :
			h->status == -E2BIG  ? -E2BIG :
					       -EIO;
		if (h->status == -ENOENT)
			kvp_cl_ctr(cl, KVP_CLC_STALE, 1);
		x->phase = KVP_CK_DONE;
		return;
	}
	if (h->len == 0 || h->len > x->dlen || h->len != len) {
		/* another length than the directory's: replaced since */
		x->st = h->len > x->dlen ? -ENOENT : -EIO;
		x->phase = KVP_CK_DONE;
		return;
	}
	x->glen = h->len;
	x->crc = h->crc;
	if (!rndv) {
		memcpy(cl->rx + x->off, data, len);
		x->phase = KVP_CK_ARRIVED;
		return;
	}
	memset(&prm, 0, sizeof(prm));
	rq = U.am_recv_data_nbx(cl->worker, data, cl->rx + x->off, len, &prm);
	if (UCS_PTR_IS_ERR(rq)) {
		x->st = -EIO;
		x->phase = KVP_CK_DONE;
	} else if (!rq) {
		x->phase = KVP_CK_ARRIVED;
	} else {
		x->rq = rq;
		x->phase = KVP_CK_RECV;
	}
	return;
refuse:
	kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
}

/* Send LEASE request r (its keys: the wave positions pos[r->first..]),
 * to the incarnation of its owner the directory names now. */
static void
kvp_cl_lease_send(struct kvp_cl *cl, const char *ns, struct kvp_cl_key *k,
		  const uint32_t *w, const uint32_t *pos, struct kvp_cl_lreq *r)
{
	struct kvp_peer *p = &cl->peers[r->peer];
	size_t nsl = strlen(ns), bytes = 1 + nsl, at;
	struct kvp_wire_hdr *h;
	ucp_request_param_t prm;
	uint32_t i;
	void *rq;

	for (i = 0; i < r->cnt; i++)
		bytes += 1 + k[w[pos[r->first + i]]].klen;
	r->msg = (unsigned char *)calloc(1, sizeof(*h) + bytes);
	r->req = kvp_cl_token(cl);
	r->inc = p->inc;
	r->done = true; /* unless sent below: its keys stay FAILED */
	if (!r->msg || !p->ep || p->failed)
		return;
	h = (struct kvp_wire_hdr *)r->msg;
	h->magic = KVP_WIRE_MAGIC;
	h->req = r->req;
	memcpy(h->secret, p->secret, 16);
	snprintf(h->from, sizeof(h->from), "%s", cl->a->cfg.node);
	h->n = r->cnt;
	h->bytes = (uint32_t)bytes;
	h->inc = (uint32_t)p->inc;
	at = sizeof(*h);
	r->msg[at++] = (unsigned char)nsl;
	memcpy(r->msg + at, ns, nsl);
	at += nsl;
	for (i = 0; i < r->cnt; i++) {
		const struct kvp_cl_key *x = &k[w[pos[r->first + i]]];

		r->msg[at++] = (unsigned char)x->klen;
		memcpy(r->msg + at, x->key, x->klen);
		at += x->klen;
	}
	memset(&prm, 0, sizeof(prm));
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
	prm.flags = UCP_AM_SEND_FLAG_EAGER;
	rq = U.am_send_nbx(p->ep, KVP_AM_LEASE, NULL, 0, r->msg, at, &prm);
	if (UCS_PTR_IS_ERR(rq))
		return;
	r->sent = rq;
	r->out = true;
	r->done = false;
}

/* The wave gives up on the keys still moving: receives in flight end by
 * closing their owners' endpoints (forced: UCX writes nothing more into
 * the receive buffer), which are reconnected when the directory names
 * them again. */
static void
kvp_cl_wave_abort(struct kvp_cl *cl, struct kvp_cl_key *k, const uint32_t *w,
		  uint32_t m)
{
	uint32_t i;

	/* no DATA is taken from here on (closing an endpoint progresses
	 * UCX, which may deliver one) */
	for (i = 0; i < cl->nlreqs; i++)
		cl->lreqs[i].done = true;
	for (i = 0; i < m; i++) {
		struct kvp_cl_key *x = &k[w[i]];

		if (!x->rq)
			continue;
		U.request_cancel(cl->worker, x->rq);
		cl->peers[x->owner].failed = true;
	}
	for (i = 0; i < m; i++) {
		struct kvp_cl_key *x = &k[w[i]];

		if (x->rq && cl->peers[x->owner].ep)
			kvp_cl_peer_close(cl, &cl->peers[x->owner]);
		if (x->rq) {
			U.request_free(x->rq);
			x->rq = NULL;
		}
		if (x->phase != KVP_CK_DONE)
			x->phase = KVP_CK_DONE; /* st: -EIO */
	}
}

/*
 * One wave: LEASE the keys from their owners in chunks of
 * KVP_LEASE_CHUNK (at most two chunks outstanding per owner, so an answer
 * never waits behind a long queue), take each key's DATA as it comes
 * (the owner sends the bytes; a large value by rendezvous straight into
 * the receive buffer), put each key into this pool as it lands (answering
 * it in the client's mailbox).  Every wait is bounded by
 * --remote-timeout-ms without progress (a DATA, a receive completed) and
 * by the stop; a LEASE whose owner restarted meanwhile (another
 * incarnation) or failed ends at once, its keys FAILED.  Answers in
 * k[].st.
 */
static void
kvp_cl_wave(struct kvp_cl *cl, struct kvp_client *c, const char *ns,
	    struct kvp_cl_key *k, const uint32_t *w, uint32_t m)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	uint64_t tmo = cfg->remote_timeout_ms * 1000000ull, deadline, moved;
	uint32_t *pos = NULL, i, np = 0, nr = 0, r;
	struct kvp_cl_lreq *rq = NULL;
	unsigned j, outq[KVP_CL_MAX_PEERS] = { 0 };
	bool used[KVP_CL_MAX_PEERS] = { false };

	pos = (uint32_t *)malloc(sizeof(uint32_t) * (m ? m : 1));
	rq = (struct kvp_cl_lreq *)calloc(m ? m : 1, sizeof(*rq));
	for (i = 0; i < m; i++) {
		k[w[i]].st = -EIO; /* until its owner answers */
		k[w[i]].phase = KVP_CK_WAIT;
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
	cl->wk = k;
	cl->ww = w;
	cl->wpos = pos;
	deadline = kvp_cl_now() + tmo;
	moved = cl->wave_moved;
	for (;;) {
		bool wait = false;

		/* LEASEs: at most two outstanding per owner */
		for (r = 0; r < nr; r++) {
			struct kvp_cl_lreq *q = &rq[r];

			if (q->done || q->out || q->msg)
				continue;
			if (outq[q->peer] >= 2) {
				wait = true;
				continue;
			}
			kvp_cl_lease_send(cl, ns, k, w, pos, q);
			outq[q->peer] += q->out;
			wait |= q->out;
		}
		/* LEASEs answered whole, or whose owner failed or restarted */
		for (r = 0; r < nr; r++) {
			struct kvp_cl_lreq *q = &rq[r];
			const struct kvp_peer *p = &cl->peers[q->peer];

			if (!q->out || q->done)
				continue;
			if (q->answered < q->cnt && p->ep && !p->failed &&
			    p->inc == q->inc) {
				wait = true;
				continue;
			}
			q->done = true;
			outq[q->peer]--;
		}
		/* bytes received: into this pool at once */
		for (i = 0; i < m; i++) {
			struct kvp_cl_key *x = &k[w[i]];

			if (x->phase == KVP_CK_RECV) {
				ucs_status_t st = U.request_check_status(x->rq);

				if (st == UCS_INPROGRESS) {
					wait = true;
					continue;
				}
				U.request_free(x->rq);
				x->rq = NULL;
				cl->wave_moved++;
				x->phase = st == UCS_OK ? KVP_CK_ARRIVED :
							  KVP_CK_DONE;
			}
			if (x->phase == KVP_CK_ARRIVED)
				kvp_cl_land(cl, c, x);
		}
		if (cl->wave_moved != moved) {
			moved = cl->wave_moved;
			deadline = kvp_cl_now() + tmo;
		}
		if (!wait)
			break;
		/* acquire: the agent is stopping (pairs with the stop's
		 * release): give up like a timeout */
		if (kvp_cl_now() >= deadline || kvp_load_acquire(&cl->stop)) {
			kvp_cl_wave_abort(cl, k, w, m);
			break;
		}
		kvp_cl_progress(cl, 1);
		kvp_cl_drain(cl); /* serve peers meanwhile: they may be
				    * fetching from us */
		kvp_cl_serve_poll(cl);
		kvp_cl_tick(cl);
	}
	/* the LEASE sends (eager, done long ago; bounded if not) */
	for (r = 0; r < nr; r++) {
		if (rq[r].sent)
			kvp_cl_wait_req(cl, rq[r].sent, 100);
		rq[r].sent = NULL;
	}
out:
	cl->lreqs = NULL;
	cl->nlreqs = 0;
	cl->wk = NULL;
	cl->ww = cl->wpos = NULL;
	for (r = 0; rq && r < nr; r++)
		free(rq[r].msg);
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
	struct kvp_nsh *nh = kvp_cl_nsh(cl, ns);
	struct kvp_client *c = nh ? nh->c : NULL;
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
		kvp_cl_nsh_put(nh);
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
	kvp_cl_nsh_put(nh);
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
		/* the namespace is the client's own, as its slot says (set
		 * at kvp_open): a client asks for its namespace only; the
		 * name is read from the mailbox (the slot keeps a hash and a
		 * truncated copy) and must hash to the slot's id.  acquire:
		 * the slot's fields as published with its LIVE word (cw) */
		if (!bad &&
		    nsid != kvp_load_acquire(&s->clients[client].cs_ns_id))
			bad = true;
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
		kvp_cl_serve_poll(cl);
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
	struct kvp_nsh *c0;

	cl = (struct kvp_cl *)calloc(1, sizeof(*cl));
	if (!cl)
		return -1;
	cl->a = a;
	cl->evfd = -1;
	cl->inq_tail = &cl->inq;
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
	{
		/* who claims the node name: this host, this pool, this
		 * segment (its creation time: an agent restarted on it is
		 * the same claimant) */
		char h[64] = "";

		gethostname(h, sizeof(h) - 1);
		snprintf(cl->claim_id, sizeof(cl->claim_id), "%s/%s/%llu", h,
			 cfg->pool,
			 (unsigned long long)a->seg.hdr->h_create_ns);
	}
	if (getrandom(cl->secret, sizeof(cl->secret), 0) !=
		    sizeof(cl->secret) ||
	    getrandom(cl->rng, sizeof(cl->rng), 0) != sizeof(cl->rng))
		goto fail;
	cl->rng[0] |= 1;
	kvp_hex(cl->secret, 16, cl->secret_hex);
	cl->nslots = a->seg.g.g_index_slots;
	cl->pub = (struct kvp_pub *)calloc(cl->nslots, sizeof(*cl->pub));
	cl->req_cap = (uint64_t)a->seg.g.g_rbox_kib << 10;
	cl->req = (unsigned char *)malloc(cl->req_cap ? cl->req_cap : 1);
	cl->bounce_len = cl->rx_len = cfg->remote_buffer;
	cl->bounce = (unsigned char *)aligned_alloc(4096, cl->bounce_len);
	cl->rx = (unsigned char *)aligned_alloc(4096, cl->rx_len);
	cl->bounce_map =
		(uint8_t *)calloc(cl->bounce_len / KVP_BOUNCE_UNIT + 1, 1);
	if (!cl->pub || !cl->req || !cl->bounce || !cl->rx || !cl->bounce_map)
		goto fail;
	/* UCX: active messages only, one worker, this thread.  No one-sided
	 * feature (UCP's software RMA handlers are not installed), no memory
	 * mapped for remote access, and TCP's PUT (a write to whatever
	 * address the peer names, unchecked) off: a peer gets bytes only as
	 * our DATA messages, and writes nothing (docs/design.md) */
	if (kvp_cl_load_ucx())
		goto fail;
	if (U.config_read(NULL, NULL, &uc) != UCS_OK)
		goto ucx_fail;
	if (U.config_modify(uc, "TCP_PUT_ENABLE", "n") != UCS_OK) {
		U.config_release(uc);
		goto ucx_fail;
	}
	memset(&up, 0, sizeof(up));
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
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
	/* a handler for every id a peer can name (16 bits), registered in
	 * increasing order: UCX 1.13 grows its table of handlers past the
	 * id registered without clearing the new entries, counts them valid,
	 * and calls whatever an unset entry holds when a peer sends that id
	 * (an ASan agent died of it: tests/cluster/test_hostile_peer.sh,
	 * forged messages).  Ids not ours are refused by kvp_cl_am. */
	for (k = 0; k < 3; k++) {
		cl->am_arg[k].cl = cl;
		cl->am_arg[k].id = k == 0 ? KVP_AM_LEASE :
				   k == 1 ? KVP_AM_DATA :
					    0xffffffffu;
	}
	for (k = 0; k <= 0xffffu; k++) {
		ucp_am_handler_param_t hp;

		memset(&hp, 0, sizeof(hp));
		hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
				UCP_AM_HANDLER_PARAM_FIELD_CB |
				UCP_AM_HANDLER_PARAM_FIELD_ARG;
		hp.id = k;
		hp.cb = kvp_cl_am;
		hp.arg = &cl->am_arg[k == KVP_AM_LEASE ? 0 :
				     k == KVP_AM_DATA  ? 1 :
							 2];
		if (U.worker_set_am_recv_handler(cl->worker, &hp) != UCS_OK)
			goto ucx_fail;
	}
	if (U.worker_get_address(cl->worker, &addr, &alen) != UCS_OK)
		goto ucx_fail;
	cl->addr_hex = kvp_hex_alloc(addr, alen);
	U.worker_release_address(cl->worker, addr);
	/* the arena as our client handles map it (one mapping per process:
	 * every handle's leases point into it); this handle stays referenced
	 * (never recycled) for the agent's life */
	c0 = kvp_cl_nsh(cl, "kvpool.cluster");
	if (!c0) {
		kvp_log(KVP_LOG_ERROR, "cluster",
			"cannot open the pool as a client");
		goto fail;
	}
	cl->arena_base = c0->c->seg.base + c0->c->seg.L.off[KVP_R_ARENA];
	cl->arena_len = c0->c->seg.L.len[KVP_R_ARENA];
	if (!cl->addr_hex)
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

	for (k = 0; k < cl->npeers; k++)
		kvp_cl_probe_cancel(cl, &cl->peers[k], true);
	for (k = 0; k < cl->nzombies; k++) {
		int st;

		waitpid(cl->zombies[k], &st, 0);
	}
	if (cl->worker)
		for (k = 0; k < cl->npeers; k++)
			kvp_cl_peer_close(cl, &cl->peers[k]);
	if (cl->worker)
		U.worker_destroy(cl->worker);
	if (cl->ctx)
		U.cleanup(cl->ctx);
	for (k = 0; k < KVP_CL_MAX_NS; k++)
		if (cl->nsh[k].c)
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
	free(cl->bounce);
	free(cl->rx);
	free(cl->bounce_map);
	free(cl->pub);
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
	/* a clean stop leaves the directory at once (a crash: within
	 * TTL), if the name is ours */
	if (cl->rc && cl->claimed) {
		char ckey[128], key[128], dkey[128];
		const char *argv[] = { NULL,
				       NULL,
				       NULL,
				       ckey,
				       key,
				       dkey,
				       "kvpool:members",
				       cl->claim_id,
				       a->cfg.node };
		size_t argl[9];
		unsigned k;

		snprintf(ckey, sizeof(ckey), "kvpool:claim:%s", a->cfg.node);
		snprintf(key, sizeof(key), "kvpool:node:%s", a->cfg.node);
		snprintf(dkey, sizeof(dkey), "kvpool:dir:%s", a->cfg.node);
		for (k = 3; k < 9; k++)
			argl[k] = strlen(argv[k]);
		kvp_cl_script(cl, kvp_lua_leave, 4, argv, argl, 9, "leaving");
	}
	kvp_cl_free(cl);
	a->cl = NULL;
}
