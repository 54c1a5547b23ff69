#!/bin/sh
# tests/structure/test_structure.sh - the structure docs/design.md
# describes ("Who owns what"), checked on the source tree:
#  1. index/ owns the index state word: no file outside index/ writes one
#     (an atomic store, CAS or add on s->meta[...], a non-const pointer
#     into meta taken for later, a memset/memcpy over it).  tests/ may
#     forge state words on purpose (hostile clients) and are left out.
#  1b. every other shared word has one owner too (the table below: a
#     field-name pattern and the file(s) that own it): no file outside
#     its owners writes one (an atomic store, CAS, add or exchange whose
#     first argument names the field, a memset/memcpy over it, a plain
#     assignment to it, a non-const pointer to it taken for later).
#     tests/ are left out, as above.
#  1c. every field of every shared type (the KVP_FIELDS_* lists of
#     shm/kvp_shm.h, which the layout signature hashes) has a row in that
#     table, or its type is named in the list of unowned types with the
#     reason.
#  2. the mechanisms do not reach into the agent: no file under shm/,
#     index/ or tiers/ (nor kvpool.h) includes anything from agent/.
#  3. no include cycle among the tree's files (tsort finds loops).
#  4. no call cycle between agent files: the link graph of agent/*.c's
#     objects (nm: a file that needs a symbol another defines calls it;
#     a function's address taken counts too) has no loop, so the agent's
#     files form layers that call only downward (docs/design.md, "Who owns
#     what").  A callback handed down at run time (an op's completion, the
#     drives' owner table) is not a link edge: that is the point.  Reads
#     the release build's objects (tests/run.sh builds them first;
#     KVPT_OBJ_DIR names another build's); SKIP without them.
# Prints each violation with file and line; exit 0 when there is none.
set -u
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/kvpt-struct.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
bad=0
# the tracked sources; outside a git checkout (a copy of the tree) every
# source but the build outputs
srcs=$(git ls-files '*.c' '*.h' '*.cc' 2>/dev/null) ||
	srcs=$(find . -path ./build -prune -o \( -name '*.c' -o -name '*.h' -o -name '*.cc' \) -print | sed 's|^\./||' | sort)
[ -n "$srcs" ] || { echo "FAIL: no sources found"; exit 1; }

# Every file's statements (clang-format breaks a call over lines): one awk
# joins each file's lines up to a ';', '{' or '}', keeps the statement's
# first line number, and prints "file:line: statement"; tests/ forge
# words on purpose and are left out (checks 1 and 1b read these)
echo "$srcs" | tr ' ' '\n' | grep -v '^tests/' | tr '\n' '\0' |
	xargs -0 awk '
		FNR == 1 { stmt = "" }
		{ line = $0; sub(/\/\/.*/, "", line) }
		stmt == "" { start = FNR }
		{ stmt = stmt " " line }
		/[;{}][ \t]*(\/\*.*)?$/ {
			gsub(/[ \t]+/, " ", stmt); print FILENAME ":" start ":" stmt
			stmt = ""
		}' >"$tmp/raw"

# 1. state-word writes, judged per statement, outside index/: the
# statements that name meta
grep -v '^index/' "$tmp/raw" | grep -E '^[^:]*:[0-9]+:.*meta' >"$tmp/stmts"
# an atomic write, CAS or add, or a memset/memcpy, on meta
grep -E '(kvp_store_(relaxed|release)|kvp_cas|kvp_fetch_add|kvp_exchange|mem(set|cpy|move))[[:space:]]*\([^;]*meta\b' "$tmp/stmts" >"$tmp/writes"
# a pointer into meta kept for later (reads go through kvp_load_*)
sed -E 's/kvp_load_(acquire|relaxed)[[:space:]]*\([[:space:]]*&[^()]*(\([^()]*\)[^()]*)*\)//g; s/__builtin_prefetch[[:space:]]*\([[:space:]]*&[^()]*(\([^()]*\)[^()]*)*\)//g' "$tmp/stmts" |
	grep -E '&[^;]*meta\[' | grep -v 'const kvp_aword_t \*' >>"$tmp/writes"
if [ -s "$tmp/writes" ]; then
	echo "FAIL: index state words written outside index/ (use a kvp_ix_* transition):"
	sort -u -t: -k1,1 -k2,2n "$tmp/writes" | cut -c1-160 | sed 's/^/    /'
	bad=1
else
	echo "ok: no index state word is written outside index/"
fi

# 1b. the other shared words: "pattern<TAB>owner..." rows; a pattern is
# an ERE for the field (matched right after -> or .; each alternative
# ends itself: \b, or the hold slots' subscript), its owners are the
# only files that may write it.  docs/design.md, "Who owns what", names
# the same owners.
#
# Regions that are not words of a shared type: the hold slots (the first
# row), the index state words (check 1), the HBM map (the hbm[] row).
# Left unowned on purpose: the value bytes (the arena, the staging
# arena, a mailbox's data after its header): bytes, not words, written by
# whoever holds the run, span or mailbox those protocols hand out (a
# putter its PENDING slot's runs, the agent a span it reads into, a
# client its FREE mailbox), checked by checksums, not by this test.
cat >"$tmp/owners" <<'EOT'
(cs_state|cs_pid|cs_start_time|cs_open_ns|cs_ns_id|cs_ns|cs_call_seq|cs_io_futex|cs_hold_hwm)\b|holds\[[^]]*\]	shm/kvp_slot.h
rq_[a-z]+\b	shm/kvp_ring.h
(sp_[a-z]+|h_staging_(used|peak|seq))\b	shm/kvp_span.h
ls_[a-z]+\b	shm/kvp_lease.h
(rb_[a-z]+|ra_[a-z]+|cl_wake)\b	shm/kvp_rbox.h
(dh_[a-z_0-9]+|pg_[a-z_]+|cs_alloc_claim|h_agent_alloc_claim|lock_claim)\b	tiers/kvp_dram.h
(cs_ix_resv|cs_ix_slot|h_ix_used|e_[a-z]+)\b	index/kvp_index.h
(cs_ctr|cs_hist|h_actr|h_hist_retired)\b	shm/kvp_ctr.h
h_(evict_wake|space_seq|evict_req|evict_need|ix_req|hint_seq|hint|delete_seq|evict_stuck)\b	shm/kvp_wake.h
ns_(id|named|name|ctr)\b	shm/client_stat_int.h
h_(magic|abi_major|abi_minor|features|layout_sig|create_ns|pool|geom|incarnation|agent_pid|agent_start_ns|max_pinned|dram_high_pct|dram_low_pct|durability|pad3|pad4)\b	agent/segment.c
h_(ssd_enabled|ssd_used_bytes|ssd_live_bytes|ssd_total_bytes)\b	agent/tier.c
h_drive_[a-z_]+\b	agent/drives.c
h_io_(hist|reads|writes|write_bytes)\b	agent/ops.c
h_metrics_port\b	agent/metrics_http.c
(h_gpu|gs_[a-z]+)\b|hbm\[[^]]*\]	agent/hbm.c
cl_(state|beat|pub_lag_ns|pub_max_ns|dir_rtt_ns|ctr|lat|node)\b	agent/cluster_int.h
EOT
# shared types whose fields need no row of their own (check 1c), and why
cat >"$tmp/unowned" <<'EOT'
kvp_geom	its shared copies are the header's h_geom[] (agent/segment.c's row); every other struct kvp_geom is a process's private copy
EOT
: >"$tmp/owrites"
# every file's statements (as in 1), comments and reads (a load, a futex
# wait or wake, a memcmp, sizeof) taken out; then each row's greps
sed -E 's|/\*([^*]\|\*+[^*/])*\*+/||g; s/kvp_i?load_(acquire|relaxed)[[:space:]]*\([[:space:]]*&[^()]*(\([^()]*\)[^()]*)*\)//g; s/(kvp_futex_wa(it|ke)[a-z_]*|memcmp|__builtin_prefetch|sizeof|offsetof)[[:space:]]*\([^()]*(\([^()]*\)[^()]*)*\)//g' \
	"$tmp/raw" >"$tmp/allstmts"
while IFS='	' read -r pat owners; do
	fld="(->|\.)($pat)"
	# the statements that name the word, in files that do not own it
	grep -E "$fld" "$tmp/allstmts" |
		grep -vE "^($(echo "$owners" | sed 's/ /|/g; s/\./\\./g')):" >"$tmp/ostmts"
	{
		# an atomic write, CAS or add, or a memset/memcpy, whose
		# target (first argument) names the word
		grep -E "(kvp_i?(store_relaxed|store_release|cas|fetch_add|exchange)|mem(set|cpy|move))[[:space:]]*\([^,;]*$fld" "$tmp/ostmts"
		# a plain assignment to it
		grep -E "$fld(\[[^]=]*\])*[[:space:]]*([-+*/|&^]?=[^=]|\+\+|--)" "$tmp/ostmts"
		# a pointer to it kept for later (not a const one)
		grep -E "(^|[^&])&[A-Za-z_(][^;&,=]*$fld" "$tmp/ostmts" | grep -vE 'const (volatile )?(kvp_aword_t|kvp_aint_t|struct [a-z_]+|uint(32|64)_t) \*'
	} | sed "s|\$| [owner: $owners]|" >>"$tmp/owrites"
done <"$tmp/owners"
if [ -s "$tmp/owrites" ]; then
	echo "FAIL: shared words written outside their owner (use a transition of the owner file named):"
	sort -u -t: -k1,1 -k2,2n "$tmp/owrites" | cut -c1-200 | sed 's/^/    /'
	bad=1
else
	echo "ok: every shared word is written by its owner only ($(wc -l <"$tmp/owners") owners' rows: $(cut -f2 "$tmp/owners" | tr '\n' ' '))"
fi

# 1c. the fields of the shared types (KVP_FIELDS_* in shm/kvp_shm.h), each
# matched against the rows' patterns as an access "->field" would be
grep -oE 'X\(kvp_[a-z_]+, [a-z_0-9]+\)' shm/kvp_shm.h |
	sed -E 's/X\((kvp_[a-z_]+), ([a-z_0-9]+)\)/\1 \2/' | sort -u >"$tmp/fields"
if [ ! -s "$tmp/fields" ]; then
	echo "FAIL: no field lists (KVP_FIELDS_*) found in shm/kvp_shm.h"
	bad=1
else
	# "->field" for each, line by line; a row's grep -n marks the lines
	# its pattern owns
	sed 's/^[^ ]* /->/' "$tmp/fields" >"$tmp/frefs"
	cut -f1 "$tmp/owners" | while read -r pat; do
		grep -nE "^(->|\.)($pat)" "$tmp/frefs" | cut -d: -f1
	done | sort -u >"$tmp/fowned"
	awk 'FILENAME == ARGV[1] { owned[$1] = 1; next }
		FILENAME == ARGV[2] { split($0, u, "\t"); free[u[1]] = 1; next }
		!(FNR in owned) && !($1 in free) { print "    struct " $1 ": " $2 }' \
		"$tmp/fowned" "$tmp/unowned" "$tmp/fields" >"$tmp/orphans"
	if [ -s "$tmp/orphans" ]; then
		echo "FAIL: shared words with no owner (a row in the table of owners of tests/structure/test_structure.sh, and the owner's transitions):"
		cat "$tmp/orphans"
		bad=1
	else
		echo "ok: every shared word has an owner ($(wc -l <"$tmp/fields") fields of $(cut -d' ' -f1 "$tmp/fields" | sort -u | wc -l) shared types; types left out: $(cut -f1 "$tmp/unowned" | tr '\n' ' ')(reasons in the test))"
	fi
fi

# 2. includes of agent/ from the mechanisms and the client
for f in $srcs; do
	case $f in shm/*|index/*|tiers/*|kvpool.h) ;; *) continue ;; esac
	grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"agent/' "$f" | sed "s|^|$f:|" >>"$tmp/inc"
done
if [ -s "$tmp/inc" ]; then
	echo "FAIL: shm/, index/, tiers/ or kvpool.h include agent/ (take it through shm/kvp_env.h):"
	sed 's/^/    /' "$tmp/inc"
	bad=1
else
	echo "ok: shm/, index/, tiers/ and kvpool.h include nothing from agent/"
fi

# 3. include cycles: edges "includer included" for tsort (one awk over
# every file), then each included name checked once
echo "$srcs" | tr ' ' '\n' | tr '\n' '\0' | xargs -0 awk '
	/^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"/ {
		g = $0; sub(/^[^"]*"/, "", g); sub(/".*/, "", g)
		print FILENAME, g
	}' >"$tmp/alledges"
: >"$tmp/edges"
for g in $(cut -d' ' -f2 "$tmp/alledges" | sort -u); do
	[ -f "$g" ] || echo "$g" >>"$tmp/nofile"
done
if [ -s "$tmp/nofile" ]; then
	awk 'FILENAME == ARGV[1] { no[$1] = 1; next }
		($2 in no) { print "    " $1 " includes \"" $2 "\", not a file of the tree" }' \
		"$tmp/nofile" "$tmp/alledges" >"$tmp/missing"
	awk 'FILENAME == ARGV[1] { no[$1] = 1; next } !($2 in no)' \
		"$tmp/nofile" "$tmp/alledges" >"$tmp/edges"
else
	cp "$tmp/alledges" "$tmp/edges"
fi
if [ -s "$tmp/missing" ]; then
	echo "FAIL: includes that do not name a file from the tree's root:"
	cat "$tmp/missing"
	bad=1
fi
if ! tsort "$tmp/edges" >/dev/null 2>"$tmp/loop"; then
	echo "FAIL: an include cycle:"
	sed 's/^/    /' "$tmp/loop"
	bad=1
else
	echo "ok: no include cycle ($(wc -l <"$tmp/edges") includes among $(echo "$srcs" | wc -w) files)"
fi

# 4. call cycles between agent files: "file symbol" for every global
# function or datum an agent object defines (weak ones, the inline
# crash-point words every object has, are no one's), then for every
# symbol an object needs that another defines the edge "caller callee
# symbol"; tsort finds a loop in "caller callee"
objdir=${KVPT_OBJ_DIR:-build/release/obj}
agent_srcs=$(echo "$srcs" | tr ' ' '\n' | grep '^agent/.*\.c$')
: >"$tmp/calls"
nobj=0 stale= objs=
for f in $agent_srcs; do
	o=$objdir/${f%.c}.o
	if [ ! -f "$o" ] || [ "$o" -ot "$f" ]; then stale="$stale $f"; continue; fi
	nobj=$((nobj + 1))
	objs="$objs $o"
done
if ! command -v nm >/dev/null 2>&1; then
	echo "SKIP: no call-cycle check between agent files (nm not installed: binutils)"
elif [ -n "$stale" ]; then
	echo "SKIP: no call-cycle check between agent files (no object, or an older one, in $objdir for:$stale; run ninja)"
else
	# one nm for the definitions, one for the needs ("OBJECT:... TYPE
	# SYMBOL" lines); an object's file is its source's name
	# shellcheck disable=SC2086 # a list of objects
	nm -A -g --defined-only $objs >"$tmp/defs"
	# shellcheck disable=SC2086
	nm -A -u $objs | sort -u >"$tmp/needs"
	awk -v D="$objdir/" '
		function src(x) { sub(/:.*/, "", x); sub("^" D, "", x); sub(/\.o$/, ".c", x); return x }
		FILENAME == ARGV[1] {
			if ($(NF - 1) ~ /^[TDBR]$/ && $NF != "main")
				def[$NF] = def[$NF] " " src($1)
			next
		}
		($NF in def) {
			f = src($1); n = split(def[$NF], d, " ")
			for (i = 1; i <= n; i++)
				if (d[i] != f)
					print f, d[i], $NF
		}' "$tmp/defs" "$tmp/needs" | sort -u -k1,1 -k3,3 -k2,2 >"$tmp/calls"
	cut -d' ' -f1,2 "$tmp/calls" | sort -u >"$tmp/cedges"
	if ! tsort "$tmp/cedges" >/dev/null 2>"$tmp/cloop"; then
		echo "FAIL: a call cycle between agent files (move the callee down a layer, or hand the caller's function down as a callback):"
		# tsort names each loop it breaks, its files in call order;
		# the shortest, each step with a symbol that makes it
		awk '/input contains a loop/ { n++; next }
			{ sub(/^tsort: /, ""); f[n] = f[n] " " $0; c[n]++ }
			END { b = 1; for (i = 2; i <= n; i++) if (c[i] < c[b]) b = i
				print n, f[b] }' "$tmp/cloop" >"$tmp/cshort"
		read -r nloops loop <"$tmp/cshort"
		set -- $loop
		first=$1 step=
		while [ $# -gt 0 ]; do
			a=$1 b=${2:-$first}
			sym=$(awk -v A="$a" -v B="$b" '$1 == A && $2 == B { print $3; exit }' "$tmp/calls")
			step="$step$a -[$sym]-> "
			shift
		done
		echo "    $step$first"
		echo "    ($nloops loops found by tsort; the shortest shown)"
		bad=1
	else
		echo "ok: no call cycle between agent files ($(wc -l <"$tmp/cedges") caller-callee pairs among $nobj objects)"
	fi
fi
exit $bad
