/* SPDX-License-Identifier: MIT */
/*
 * cluster_dir.c - the remote tier's directory (Redis): the connection,
 * replies and error replies, the claim of our node name and the scripts
 * that write under it (kvp_lua_*), and the checks of what others wrote
 * there: node entries validated, a worker address probed by a process
 * of its own before it reaches ours.  Design in agent/cluster_int.h.
 */
#include "agent/cluster_int.h"

void
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

int
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

char *
kvp_hex_alloc(const void *b, size_t n)
{
	char *s = (char *)malloc(2 * n + 1);

	if (s)
		kvp_hex((const unsigned char *)b, n, s);
	return s;
}

/* ---- the directory (Redis) ---- */

/* redis://[:PASSWORD@]HOST[:PORT][/DB] */
int
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

void
kvp_cl_set_state(struct kvp_cl *cl, unsigned st)
{
	unsigned live = 0, k;

	if (!cl->shm)
		return;
	for (k = 0; k < cl->npeers; k++)
		live += cl->peers[k].live && !cl->peers[k].failed;
	/* the node name and counters before a client sees UP */
	kvp_cl_state_store(cl, KVP_CL_WORD(cl->inc, live, st) |
				       KVP_CL_WORD_BAD(cl->nbad));
}

void
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

bool
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
bool
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
bool
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
const char kvp_lua_claim[] =
	"local v = redis.call('GET', KEYS[1]) "
	"if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) "
	"return 1 end "
	"if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
	"return 2 end "
	"return v";
/* KEYS claim, hash; ARGV id, ttl, then field value pairs: set, the
 * hash's TTL renewed; -1: the name is not ours */
const char kvp_lua_set[] =
	"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end "
	"for i = 3, #ARGV, 2 do "
	"redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end "
	"redis.call('PEXPIRE', KEYS[2], ARGV[2]) "
	"return (#ARGV - 2) / 2";
/* KEYS claim, hash; ARGV id, then field tag pairs: a field is deleted
 * only if its value still names that publication ("<len> <tag>");
 * returns how many were; -1: the name is not ours */
const char kvp_lua_del[] =
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
const char kvp_lua_swap[] =
	"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end "
	"if redis.call('EXISTS', KEYS[2]) == 1 then "
	"redis.call('RENAME', KEYS[2], KEYS[3]) "
	"redis.call('PEXPIRE', KEYS[3], ARGV[2]) "
	"else redis.call('DEL', KEYS[3]) end "
	"return 1";
/* KEYS claim, node entry, directory, members; ARGV id, name: a clean
 * stop leaves, if the name is ours */
const char kvp_lua_leave[] =
	"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
	"redis.call('DEL', KEYS[2], KEYS[3], KEYS[1]) "
	"redis.call('SREM', KEYS[4], ARGV[2]) "
	"return 1";

/* The claim refreshed or taken (one round trip): 1 ours, 0 another
 * agent's (reported), -1 no answer (an error reply, logged; the
 * connection may be down) */
int
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
long long
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
bool
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
bool
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
bool
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
	if (kvp_cl_load_ucx() ||
	    kvp_ucx.config_read(NULL, NULL, &uc) != UCS_OK ||
	    kvp_ucx.config_modify(uc, "TCP_PUT_ENABLE", "n") != UCS_OK)
		return 3;
	memset(&up, 0, sizeof(up));
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
	if (kvp_ucx.init_version(UCP_API_MAJOR, UCP_API_MINOR, &up, uc, &ctx) !=
	    UCS_OK)
		return 3;
	kvp_ucx.config_release(uc);
	memset(&wp, 0, sizeof(wp));
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	if (kvp_ucx.worker_create(ctx, &wp, &w) != UCS_OK)
		return 3;
	memset(&ep, 0, sizeof(ep));
	ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
	ep.address = (const ucp_address_t *)buf;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	st = kvp_ucx.ep_create(w, &ep, &e);
	if (st == UCS_OK) {
		ucp_request_param_t prm;
		void *rq;

		for (k = 0; k < 16; k++)
			kvp_ucx.worker_progress(w);
		memset(&prm, 0, sizeof(prm));
		prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
		rq = kvp_ucx.ep_close_nbx(e, &prm);
		for (k = 0; k < 100000 && rq && !UCS_PTR_IS_ERR(rq) &&
			    kvp_ucx.request_check_status(rq) == UCS_INPROGRESS;
		     k++)
			kvp_ucx.worker_progress(w);
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
void
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
void
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
bool
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
