/* SPDX-License-Identifier: MIT */
/*
 * kvpool - operator and debugging CLI.  Reads the segment directly, so
 * stat and clients work with the agent down.
 *
 *   kvpool [--pool NAME] [--ns NS] put KEY FILE|-
 *   kvpool [--pool NAME] [--ns NS] get KEY FILE|-
 *   kvpool [--pool NAME] [--ns NS] exists KEY...
 *   kvpool [--pool NAME] [--ns NS] del KEY
 *   kvpool [--pool NAME] stat [--json]
 *   kvpool [--pool NAME] clients
 */
#include <getopt.h>

#include "agent/agent_int.h"
#include "agent/kvp_check.h"

struct kvp_stat {
	uint64_t ready, pending, deleted, claiming, checking;
	uint64_t bytes_used, bytes_total, value_bytes, unit_used;
	uint64_t clients_live, clients_dead, holds;
	uint64_t ctr[KVP_CTR_SLOTS];
	bool agent_alive;
};

static const char *const kvp_ctr_names[] = {
	"put", "put_bytes", "put_exists", "put_busy", "put_nospc", "get", "get_hit",
	"get_miss", "get_bytes", "exists", "exists_hit", "delete", "hold_retry",
	"resolve_ok", "resolve_miss", "resolve_failed", "resolve_busy_parts",
	"pins", "pins_capped", "pinned_bytes_dram", "pinned_bytes_ssd",
};

static const char *const kvp_actr_names[] = {
	"evictions", "evicted_bytes", "evict_backoff_held", "deletes_reclaimed",
	"reaped_clients", "reaped_holds", "reaped_pending_puts", "reaped_units",
	"orphan_units_freed", "allocator_recoveries", "evictions_index_full",
	"demotions", "demoted_bytes", "promotions", "staged_reads", "busy_rejects",
	"staging_expired_reclaim", "segment_reclaims", "ssd_read_bytes",
	"ssd_write_bytes", "ssd_errors", "single_flight_merges", "leases_expired",
	"pins_reaped",
};
_Static_assert(sizeof(kvp_ctr_names) / sizeof(kvp_ctr_names[0]) == KVP_CTR__N, "names");
_Static_assert(sizeof(kvp_actr_names) / sizeof(kvp_actr_names[0]) == KVP_ACTR_RETIRED0,
	       "names");

static uint32_t
kvp_count_holds(const struct kvp_seg *s, uint32_t i)
{
	uint32_t hpc = s->hdr->h_holds_per_client, k, n = 0;
	/* relaxed: a snapshot for humans */
	uint64_t hwm = kvp_load_relaxed(&s->clients[i].cs_hold_hwm);

	if (hwm > hpc)
		hwm = hpc;
	for (k = 0; k < hwm; k++)
		n += kvp_load_relaxed(&s->holds[(uint64_t)i * hpc + k]) != 0;
	return n;
}

static void
kvp_collect(const struct kvp_seg *s, struct kvp_stat *st)
{
	uint64_t i;
	uint32_t c, k;

	memset(st, 0, sizeof(*st));
	for (i = 0; i < s->hdr->h_index_slots; i++) {
		/* acquire: pairs with the publishing CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]);

		if (KVP_IX_FLAGS(w))
			st->checking++;
		switch (KVP_IX_STATE(w)) {
		case KVP_IX_READY:
			st->ready++;
			st->value_bytes += kvp_load_relaxed(&s->entries[i].e_len);
			break;
		case KVP_IX_PENDING: st->pending++; break;
		case KVP_IX_DELETED: st->deleted++; break;
		case KVP_IX_RESERVED:
		case KVP_IX_CLAIM: st->claiming++; break;
		default: break;
		}
	}
	/* relaxed: a statistic mirrored under the allocator lock */
	st->unit_used = kvp_load_relaxed(&s->dram->dh_used_mirror);
	st->bytes_used = st->unit_used * s->hdr->h_dram_unit;
	st->bytes_total = s->hdr->h_dram_pages * s->hdr->h_dram_unit;
	for (c = 0; c < s->hdr->h_max_clients; c++) {
		uint64_t w = kvp_load_acquire(&s->clients[c].cs_state); /* acquire: claim */

		if ((w & 0xff) != KVP_CS_FREE) {
			if (kvp_shm_client_alive(s, c))
				st->clients_live++;
			else
				st->clients_dead++;
			st->holds += kvp_count_holds(s, c);
		}
		for (k = 0; k < KVP_CTR_SLOTS; k++)
			st->ctr[k] += kvp_load_relaxed(&s->clients[c].cs_ctr[k]);
	}
	for (k = 0; k < KVP_CTR_SLOTS; k++)
		st->ctr[k] += kvp_load_relaxed(&s->hdr->h_actr[KVP_ACTR_RETIRED0 + k]);
	st->agent_alive = kvp_shm_agent_alive(s);
}

static int
kvp_cmd_stat(const struct kvp_seg *s, bool json)
{
	struct kvp_stat st;
	const struct kvp_shm_header *h = s->hdr;
	unsigned k;

	kvp_collect(s, &st);
	if (json) {
		printf("{\"pool\":\"%s\",\"agent_alive\":%s,\"agent_pid\":%llu,"
		       "\"incarnation\":%llu,\"entries\":%llu,\"pending\":%llu,"
		       "\"deleted\":%llu,\"dram_bytes_used\":%llu,\"dram_bytes_total\":%llu,"
		       "\"value_bytes\":%llu,\"index_slots\":%llu,\"clients\":%llu,"
		       "\"clients_dead\":%llu,\"holds\":%llu",
		       h->h_pool, st.agent_alive ? "true" : "false",
		       (unsigned long long)kvp_load_relaxed(&h->h_agent_pid),
		       (unsigned long long)kvp_load_relaxed(&h->h_incarnation),
		       (unsigned long long)st.ready, (unsigned long long)st.pending,
		       (unsigned long long)st.deleted, (unsigned long long)st.bytes_used,
		       (unsigned long long)st.bytes_total, (unsigned long long)st.value_bytes,
		       (unsigned long long)h->h_index_slots,
		       (unsigned long long)st.clients_live, (unsigned long long)st.clients_dead,
		       (unsigned long long)st.holds);
		for (k = 0; k < KVP_CTR__N; k++)
			printf(",\"%s\":%llu", kvp_ctr_names[k], (unsigned long long)st.ctr[k]);
		for (k = 0; k < KVP_ACTR_RETIRED0; k++)
			printf(",\"%s\":%llu", kvp_actr_names[k],
			       (unsigned long long)kvp_load_relaxed(&h->h_actr[k]));
		printf("}\n");
		return 0;
	}
	printf("pool %s: agent %s (pid %llu, incarnation %llu)\n", h->h_pool,
	       st.agent_alive ? "up" : "DOWN",
	       (unsigned long long)kvp_load_relaxed(&h->h_agent_pid),
	       (unsigned long long)kvp_load_relaxed(&h->h_incarnation));
	printf("  entries      %llu (pending %llu, deleted %llu) in %llu index slots\n",
	       (unsigned long long)st.ready, (unsigned long long)st.pending,
	       (unsigned long long)st.deleted, (unsigned long long)h->h_index_slots);
	printf("  dram         %.1f / %.1f MiB used (%.1f%%), values %.1f MiB\n",
	       (double)st.bytes_used / 1048576.0, (double)st.bytes_total / 1048576.0,
	       st.bytes_total ? 100.0 * (double)st.bytes_used / (double)st.bytes_total : 0.0,
	       (double)st.value_bytes / 1048576.0);
	printf("  clients      %llu live, %llu dead (not yet reaped), %llu holds\n",
	       (unsigned long long)st.clients_live, (unsigned long long)st.clients_dead,
	       (unsigned long long)st.holds);
	for (k = 0; k < KVP_CTR__N; k++)
		printf("  %-20s %llu\n", kvp_ctr_names[k], (unsigned long long)st.ctr[k]);
	for (k = 0; k < KVP_ACTR_RETIRED0; k++)
		printf("  %-20s %llu\n", kvp_actr_names[k],
		       (unsigned long long)kvp_load_relaxed(&h->h_actr[k]));
	return 0;
}

static int
kvp_cmd_clients(const struct kvp_seg *s)
{
	uint32_t i;

	printf("%5s %8s %20s %6s %6s %s\n", "slot", "pid", "start", "alive", "holds", "ns");
	for (i = 0; i < s->hdr->h_max_clients; i++) {
		const struct kvp_client_slot *cs = &s->clients[i];
		uint64_t w = kvp_load_acquire(&cs->cs_state); /* acquire: claim CAS */
		time_t t;
		char when[32];
		struct tm tm;

		if ((w & 0xff) == KVP_CS_FREE)
			continue;
		t = (time_t)(kvp_load_relaxed(&cs->cs_open_ns) / 1000000000ull);
		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		printf("%5u %8llu %20s %6s %6u %.64s\n", i,
		       (unsigned long long)kvp_load_relaxed(&cs->cs_pid), when,
		       (w & 0xff) == KVP_CS_REAPING ? "reap"
		       : kvp_shm_client_alive(s, i) ? "yes" : "no",
		       kvp_count_holds(s, i), cs->cs_ns);
	}
	return 0;
}

static int
kvp_read_all(FILE *f, unsigned char **buf, uint64_t *len)
{
	size_t cap = 1 << 20, n = 0, r;
	unsigned char *b = malloc(cap);

	while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap) {
			unsigned char *nb = realloc(b, cap * 2);
			if (!nb)
				break;
			b = nb;
			cap *= 2;
		}
	}
	if (!b || ferror(f)) {
		free(b);
		return -EIO;
	}
	*buf = b;
	*len = n;
	return 0;
}

static void
kvp_cli_usage(void)
{
	fprintf(stderr,
		"usage: kvpool [--pool NAME] [--ns NS] COMMAND\n"
		"  put KEY FILE|-     store FILE (or stdin) under KEY\n"
		"  get KEY FILE|-     write KEY's value to FILE (or stdout)\n"
		"  exists KEY...      print 1/0 per key; exit 0 if all present\n"
		"  del KEY            delete KEY\n"
		"  stat [--json]      entries, DRAM use, clients, counters\n"
		"  clients            client slots: pid, start time, alive, holds\n"
		"  check [--wait MS]  verify the pool's invariants (read-only; agent up\n"
		"                     or down); re-checks for MS (default 3000) what a\n"
		"                     busy pool may show for a moment; exit 1 names them\n"
		"  crashpoints        list the crash points (KVP_CRASH_AT=NAME)\n");
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pool", required_argument, NULL, 'p' },
		{ "ns", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *pool = "default", *ns = "default", *cmd;
	struct kvp_client *c = NULL;
	int opt, rc = 0;

	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (opt) {
		case 'p': pool = optarg; break;
		case 'n': ns = optarg; break;
		default: kvp_cli_usage(); return opt == 'h' ? 0 : 2;
		}
	}
	if (optind >= argc) {
		kvp_cli_usage();
		return 2;
	}
	cmd = argv[optind++];
	if (!strcmp(cmd, "crashpoints")) {
		unsigned k;

		for (k = 0; k < KVP_CP__N; k++)
			printf("%2u %-20s %-6s %s\n", k, kvp_crash_name(k),
			       kvp_crash_is_agent(k) ? "agent" : "client", kvp_crash_what(k));
		return 0;
	}
	if (!strcmp(cmd, "check")) {
		struct kvp_check_report r;
		struct kvp_seg s;
		unsigned wait_ms = 3000;
		char msg[512];

		if (optind + 1 < argc && !strcmp(argv[optind], "--wait"))
			wait_ms = (unsigned)strtoul(argv[optind + 1], NULL, 10);
		else if (optind < argc) {
			kvp_cli_usage();
			return 2;
		}
		rc = kvp_seg_map(pool, false, &s, msg, sizeof(msg));
		if (rc) {
			fprintf(stderr, "kvpool: %s\n", msg);
			return 2;
		}
		kvp_check_wait(&s, wait_ms, stdout, &r);
		kvp_check_summary(&r, stdout);
		kvp__seg_unmap(&s);
		return r.violations ? 1 : 0;
	}
	if (!strcmp(cmd, "stat") || !strcmp(cmd, "clients")) {
		struct kvp_seg s;
		char msg[512];

		rc = kvp_seg_map(pool, false, &s, msg, sizeof(msg));
		if (rc) {
			fprintf(stderr, "kvpool: %s\n", msg);
			return 1;
		}
		if (!strcmp(cmd, "stat"))
			rc = kvp_cmd_stat(&s, optind < argc && !strcmp(argv[optind], "--json"));
		else
			rc = kvp_cmd_clients(&s);
		kvp__seg_unmap(&s);
		return rc ? 1 : 0;
	}
	rc = kvp_open(pool, ns, &c);
	if (rc) {
		fprintf(stderr, "kvpool: cannot open pool '%s': %s\n", pool, kvp_strerror(rc));
		return 1;
	}
	if (!strcmp(cmd, "put") && argc - optind == 2) {
		FILE *f = strcmp(argv[optind + 1], "-") ? fopen(argv[optind + 1], "rb") : stdin;
		unsigned char *buf = NULL;
		uint64_t len = 0;

		if (!f || kvp_read_all(f, &buf, &len)) {
			fprintf(stderr, "kvpool: cannot read %s\n", argv[optind + 1]);
			rc = -EIO;
		} else {
			rc = kvp_put(c, argv[optind], (uint32_t)strlen(argv[optind]), buf, len);
		}
		if (f && f != stdin)
			fclose(f);
		free(buf);
	} else if (!strcmp(cmd, "get") && argc - optind == 2) {
		uint64_t cap = c->seg.hdr->h_max_value;
		unsigned char *buf = malloc(cap);
		ssize_t n = buf ? kvp_get(c, argv[optind], (uint32_t)strlen(argv[optind]),
					  buf, cap) : -ENOMEM;
		if (n >= 0) {
			FILE *f = strcmp(argv[optind + 1], "-") ? fopen(argv[optind + 1], "wb")
								: stdout;
			if (!f || fwrite(buf, 1, (size_t)n, f) != (size_t)n)
				n = -EIO;
			if (f && f != stdout)
				fclose(f);
		}
		rc = n < 0 ? (int)n : 0;
		free(buf);
	} else if (!strcmp(cmd, "exists") && argc - optind >= 1) {
		int k, all = 1;

		for (k = optind; k < argc; k++) {
			int e = kvp_exists(c, argv[k], (uint32_t)strlen(argv[k]));
			printf("%s %d\n", argv[k], e > 0);
			all &= e > 0;
		}
		rc = all ? 0 : -ENOENT;
	} else if (!strcmp(cmd, "del") && argc - optind == 1) {
		rc = kvp_delete(c, argv[optind], (uint32_t)strlen(argv[optind]));
	} else {
		kvp_close(c);
		kvp_cli_usage();
		return 2;
	}
	kvp_close(c);
	if (rc && strcmp(cmd, "exists"))
		fprintf(stderr, "kvpool: %s: %s\n", cmd, kvp_strerror(rc));
	return rc ? 1 : 0;
}
