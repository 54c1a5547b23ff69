/* SPDX-License-Identifier: MIT */
/*
 * rpc_proto.h - the RPC shape's wire protocol, both ends (rpc_server.c,
 * drv_rpc.c).
 *
 * A connection starts with the client's registered buffer: 8 bytes (its
 * size) and a memfd in SCM_RIGHTS; the server maps it and answers one
 * byte.  Then, until the client hangs up, a request and its reply in
 * turn: a request is a header and rh_n ops of one kind (values move
 * through the registered buffer, at ro_off); a reply is a header
 * (rh_prefix: RPC_EXISTS's answer) and rh_n int64 statuses (value
 * length or -errno; none for RPC_EXISTS).
 */
#ifndef KVPB_RPC_PROTO_H
#define KVPB_RPC_PROTO_H

#include "stress/peers/peers_int.h"

#define KVPB_RPC_KMAX 96u
#define KVPB_RPC_MAXN KVPB_MAX_CALL /* ops in one request at the most */

enum {
	RPC_GET = 1,
	RPC_PUT,
	RPC_DEL,
	RPC_EXISTS
};

struct kvpb_rpc_op {
	uint8_t ro_op;
	uint8_t ro_klen;
	uint16_t ro_pad0;
	uint32_t ro_pad1;
	uint64_t ro_off; /* in the registered buffer */
	uint64_t ro_len;
	unsigned char ro_key[KVPB_RPC_KMAX];
};

struct kvpb_rpc_hdr {
	uint32_t rh_n;
	uint32_t rh_prefix;
};

_Static_assert(sizeof(struct kvpb_rpc_op) == 120, "rpc op layout");
_Static_assert(sizeof(struct kvpb_rpc_hdr) == 8, "rpc header layout");

/*
 * Read one message (a struct kvpb_rpc_hdr, then rh_n items of unit
 * bytes) into msg.  It reads as much as the socket holds, so a message
 * that arrived whole takes one read; the peer never sends the next
 * message before it has the answer to this one, so nothing is over-read.
 * 0, -EPIPE (hung up) or -EPROTO.
 */
static inline int
kvpb_rpc_read_msg(int fd, void *msg, size_t cap, size_t unit)
{
	unsigned char *p = msg;
	size_t got = 0, want = 8;

	while (got < want) {
		ssize_t r = read(fd, p + got, cap - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EPIPE;
		got += (size_t)r;
		if (got >= 8) {
			uint32_t n;

			memcpy(&n, p, sizeof(n));
			want = 8 + (size_t)n * unit;
			if (want > cap)
				return -EPROTO;
		}
	}
	return got == want ? 0 : -EPROTO;
}

/* rpc_server.c: the server process (its socket in kvpb_ctl->rpc_sock). */
int kvpb_rpc_server_start(void);
void kvpb_rpc_server_stop(void);

#endif
