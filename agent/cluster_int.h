/* SPDX-License-Identifier: MIT */
/*
 * agent/cluster_int.h - the remote tier's internals, shared by its files
 * (the cluster thread's state, the wire, the UCX table).  Included only by
 * agent/cluster*.c.
 *
 * The files, each owning one thing, and calling only downward (the
 * structure test checks the calls between agent files):
 *   cluster_ucx.c      transport: UCX loaded (kvp_ucx), request waits,
 *                      endpoint errors, progress and the sleep on its fd
 *   cluster_dir.c      the directory (Redis): connection, replies, the
 *                      name claim and its scripts, node entries checked,
 *                      the endpoint probe
 *   cluster_hold.c     what we hold for the tier: a handle per namespace,
 *                      bounce space, a served key's lease and its end;
 *                      the only file that opens or closes a client handle
 *                      (the client's mapping registry is per file)
 *   cluster_peers.c    membership, the peer table, endpoints (closing one
 *                      ends what we served that peer)
 *   cluster_pub.c      publishing our keys; what is due on the clock
 *   cluster_serve.c    the owner's side: LEASEs served, leases renewed
 *   cluster_fetch.c    the requester's side: lookup, waves, DATA landed,
 *                      each key answered in the client's mailbox
 *   cluster_mailbox.c  the mailboxes' server: take, fetch, DONE; the stop
 *   cluster.c          the thread (AM handler, waker, loop), start, stop
 *
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
#ifndef KVP_CLUSTER_INT_H
#define KVP_CLUSTER_INT_H

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
struct kvp_ucx {
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
};
extern struct kvp_ucx kvp_ucx; /* cluster_ucx.c */

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

static inline uint64_t
kvp_cl_now(void)
{
	return kvp_now_ns(CLOCK_MONOTONIC);
}

/*
 * The remote tier's words in the segment (struct kvp_cluster, region
 * KVP_R_CLUSTER): this file owns them, every write is a function below
 * (cl_wake, the mailboxes' doorbell that clients ring, is
 * shm/kvp_rbox.h's), and tests/structure/test_structure.sh fails on a
 * write anywhere else.  All are the agent's (clients read them): the
 * state word (KVP_CL_WORD, release: clients ask nothing of a tier that
 * is not UP), the heartbeat, and statistics for humans (relaxed or
 * atomic adds, never acted on).
 */

/* The state word: w (KVP_CL_WORD), release: the node name and the
 * counters before a client sees it. */
static inline void
kvp_cl_state_store(struct kvp_cl *cl, uint64_t w)
{
	if (cl->shm)
		/* release: pairs with the clients' acquire */
		kvp_store_release(&cl->shm->cl_state, w);
}

/* This node's name, for tools (before the first state store). */
static inline void
kvp_cl_node_store(struct kvp_cl *cl, const char *node)
{
	size_t len = strlen(node);

	if (!cl->shm)
		return;
	if (len > sizeof(cl->shm->cl_node) - 1)
		len = sizeof(cl->shm->cl_node) - 1;
	/* published by the state store that follows */
	memset(cl->shm->cl_node, 0, sizeof(cl->shm->cl_node));
	memcpy(cl->shm->cl_node, node, len);
}

/* The last directory round trip took ns (a gauge). */
static inline void
kvp_cl_dir_rtt(struct kvp_cl *cl, uint64_t ns)
{
	if (cl->shm)
		/* relaxed: a gauge */
		kvp_store_relaxed(&cl->shm->cl_dir_rtt_ns, ns);
}

/* The last publish pass: a change's age was at most lag (gauges for
 * humans: the last, and the largest since the agent started). */
static inline void
kvp_cl_pub_lag(struct kvp_cl *cl, uint64_t lag)
{
	if (!cl->shm)
		return;
	/* relaxed: gauges for humans, this thread's */
	kvp_store_relaxed(&cl->shm->cl_pub_lag_ns, lag);
	if (lag > kvp_load_relaxed(&cl->shm->cl_pub_max_ns))
		kvp_store_relaxed(&cl->shm->cl_pub_max_ns, lag);
}

/* A FETCH call took ns, taken to answered (its latency histogram). */
static inline void
kvp_cl_lat(struct kvp_cl *cl, uint64_t ns)
{
	if (!cl->shm)
		return;
	/* full: a histogram several readers sum */
	kvp_fetch_add(&cl->shm->cl_lat[kvp_hist_bucket(ns)], 1);
	kvp_fetch_add(&cl->shm->cl_lat[KVP_HIST_SUM], ns);
}

/* The thread's heartbeat (cl_beat): clients ask nothing of a thread that
 * stopped beating.  Called wherever the thread waits or progresses. */
static inline void
kvp_cl_beat(struct kvp_cl *cl)
{
	if (cl->shm)
		/* release: pairs with the client's acquire (a clock
		 * reading: nothing else is published through it) */
		kvp_istore_release(&cl->shm->cl_beat,
				   (uint32_t)(kvp_cl_now() / 1000000u));
}

static inline void
kvp_cl_ctr(struct kvp_cl *cl, unsigned k, uint64_t v)
{
	if (cl->shm && v)
		/* full: a statistic several readers sum */
		kvp_fetch_add(&cl->shm->cl_ctr[k], v);
}

/* the directory's scripts (cluster_dir.c: what each does) */
extern const char kvp_lua_claim[], kvp_lua_set[], kvp_lua_del[], kvp_lua_swap[],
	kvp_lua_leave[];

/* cluster_ucx.c */
int kvp_cl_load_ucx(void);
void kvp_cl_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st);
void kvp_cl_wait_req(struct kvp_cl *cl, void *req, unsigned ms);
void kvp_cl_progress(struct kvp_cl *cl, int wait_ms);

/* cluster_dir.c */
void kvp_hex(const unsigned char *b, size_t n, char *out);
int kvp_unhex(const char *s, size_t slen, unsigned char *out, size_t cap);
char *kvp_hex_alloc(const void *b, size_t n);
int kvp_cl_parse_url(struct kvp_cl *cl, const char *url);
void kvp_cl_set_state(struct kvp_cl *cl, unsigned st);
void kvp_cl_dir_down(struct kvp_cl *cl, const char *why);
bool kvp_cl_dir_up(struct kvp_cl *cl);
bool kvp_cl_replies(struct kvp_cl *cl, redisReply **out, unsigned n);
bool kvp_cl_rerr(struct kvp_cl *cl, const redisReply *r, const char *what);
int kvp_cl_claim(struct kvp_cl *cl);
long long kvp_cl_script(struct kvp_cl *cl, const char *script, int nkeys,
			const char **argv, size_t *argl, int argc,
			const char *what);
bool kvp_cl_name_ok(const char *s, size_t len);
bool kvp_cl_dirval_len(const char *s, size_t len, uint64_t *out);
bool kvp_cl_entry_admit(struct kvp_cl *cl, const char *name, size_t nlen,
			const redisReply *r);
void kvp_cl_probes_reap(struct kvp_cl *cl);
void kvp_cl_probe_cancel(struct kvp_cl *cl, struct kvp_peer *p, bool wait);
bool kvp_cl_entry_ready(struct kvp_cl *cl, struct kvp_peer *p,
			const redisReply *r);

/* cluster_peers.c */
void kvp_cl_peer_close(struct kvp_cl *cl, struct kvp_peer *p);
struct kvp_peer *kvp_cl_peer(struct kvp_cl *cl, const char *name, bool add);
void kvp_cl_membership(struct kvp_cl *cl);

/* cluster_pub.c */
void kvp_cl_field(uint64_t ns, uint64_t hash, char *f);
int kvp_cl_publish(struct kvp_cl *cl);
void kvp_cl_tick(struct kvp_cl *cl);

/* cluster_hold.c */
struct kvp_nsh *kvp_cl_nsh(struct kvp_cl *cl, const char *ns);
void kvp_cl_nsh_put(struct kvp_nsh *h);
void kvp_cl_nsh_close_all(struct kvp_cl *cl);
int kvp_cl_bounce_alloc(struct kvp_cl *cl, uint64_t len, uint64_t *off);
void kvp_cl_serve_key_end(struct kvp_cl *cl, struct kvp_serve *sv,
			  struct kvp_serve_key *sk);
void kvp_cl_serve_peer_gone(struct kvp_cl *cl, unsigned peer);

/* cluster_serve.c */
void kvp_cl_serve_poll(struct kvp_cl *cl);
void kvp_cl_drain(struct kvp_cl *cl);

/* cluster_fetch.c */
int kvp_cl_lookup(struct kvp_cl *cl, uint64_t nsid, struct kvp_cl_key *key,
		  uint32_t n);
void kvp_cl_data(struct kvp_cl *cl, const struct kvp_wire_data *h, void *data,
		 size_t len, bool rndv);
void kvp_cl_fetch(struct kvp_cl *cl, const char *ns, struct kvp_cl_key *k,
		  uint32_t n);

/* cluster_mailbox.c */
void kvp_cl_mailboxes(struct kvp_cl *cl, bool stopping);

#endif /* KVP_CLUSTER_INT_H */
