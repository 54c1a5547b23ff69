#!/bin/sh
# tests/install/test_install.sh - 'ninja install' into an empty staging
# root (DESTDIR) gives an engine all it needs, from the installed tree
# alone; 'ninja uninstall' takes all of it away again.
#  1. every file expected is there (the library, its links, the headers
#     kvpool.h includes, kvpool.pc, kvpoold, kvpool, the unit, the config
#     example (kvpoold --print-config), the Python package when the tree
#     has one), identical to the build's, and the manifest lists exactly
#     what the root holds;
#  2. the library: SONAME libkvpool.so.1, exports exactly kvpool.h's calls
#     (tests/client/test_exports.sh on the staged directory);
#  3. pkg-config (pointed at the root): a client compiled header only
#     (--cflags, -latomic_ops -lpthread) and one with KVP_LINK_SHARED
#     (--libs), from the installed headers only (every header the compiler
#     reads lies in the root or the system, none in the source tree), put
#     and get against a real agent started from the staged kvpoold, each
#     reading the other's value back intact;
#  4. sd_notify: that agent, given NOTIFY_SOCKET (a path, then an abstract
#     name), sends READY=1 once it serves and STOPPING=1 on SIGTERM; with a
#     socket nobody listens on it serves anyway and says so once;
#  5. systemd-analyze verify finds nothing to say of the unit (skipped,
#     saying so, without systemd-analyze);
#  6. the Python package: imported from the staged root only; the tests of
#     tests/python, when the tree has them, run against the staged root;
#  7. ninja uninstall leaves the root empty;
#  8. ./configure --prefix=/usr (on a copy of the tree) puts everything
#     under /usr (and /etc), its install does so, and a default configure
#     anywhere writes the tree's build.ninja byte for byte.
# The agent's pool is [<KVPT_RUN>.]t<pid>_inst (tests/agent/harness.h);
# its log lies in KVPT_LOG_DIR.  The manifest of this install lies in a
# directory of its own (KVP_INSTALL_MANIFEST), never build/'s.
set -u
cd "$(dirname "$0")/../.." || exit 1
SRC=$(pwd)
need() {
	if ! command -v "$1" >/dev/null 2>&1; then
		echo "SKIP: $1 not installed (apt-get install $2)"
		exit 77
	fi
}
need ninja ninja-build
need readelf binutils
need nm binutils
need pkg-config pkg-config
need python3 python3
# the Python the package is installed for and tested with (tests/run.sh
# sets Debian's /usr/bin/python3 when there is one)
PYTHON=${PYTHON:-python3}
export PYTHON
cc=${KVP_CC:-cc}
need "$cc" build-essential

T=$(mktemp -d /tmp/kvpt-install.XXXXXX) || exit 1
ROOT=$T/root
mkdir "$ROOT" || exit 1
POOL=${KVPT_RUN:+$KVPT_RUN.}t$$_inst
LOG=${KVPT_LOG_DIR:-$T}/kvpt.$POOL.log
AGENT_PID= LISTEN_PID=
export KVP_INSTALL_MANIFEST=$T/install_manifest.txt
cleanup() {
	for p in $AGENT_PID $LISTEN_PID; do kill "$p" 2>/dev/null; done
	for p in $AGENT_PID $LISTEN_PID; do wait "$p" 2>/dev/null; done
	rm -f "/dev/shm/kvpool.$POOL"
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
bad=0
fail() { echo "FAIL: $*"; bad=1; }
die() { echo "FAIL: $*"; exit 1; }

# wait_for SECONDS COMMAND...: poll until COMMAND succeeds (a deadline,
# not a sleep used as synchronisation)
wait_for() {
	limit=$1
	shift
	end=$(($(date +%s) + limit))
	until "$@"; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.05
	done
}

# the configured directories, as build.ninja hands them to the install
var() { sed -n "s/^$1 = //p; s/^  $1 = //p" build.ninja | head -n1; }
prefix=$(var prefix) bindir=$(var bindir) libdir=$(var libdir) includedir=$(var includedir)
pkgconfigdir=$(var pkgconfigdir) unitdir=$(var unitdir) sysconfdir=$(var sysconfdir)
headers=$(var headers) python=$(var python)
# configure computes it from kvpool.h's KVPOOL_VERSION_*: read what it wrote
so_version=$(sed -n 's/.* --so-version=\([0-9.]*\) .*/\1/p' build.ninja | head -n1)
[ -n "$bindir" ] && [ -n "$headers" ] && [ -n "$so_version" ] ||
	die "build.ninja names no install directories (run ./configure)"

# --- 1. what the install puts where ---
DESTDIR=$ROOT ninja install >"$T/install.log" 2>&1 ||
	{ sed 's/^/    /' "$T/install.log"; die "DESTDIR=$ROOT ninja install failed"; }
[ -f "$KVP_INSTALL_MANIFEST" ] || die "the install wrote no manifest ($KVP_INSTALL_MANIFEST)"
L=$ROOT$libdir
# same FILE AS: an installed file, identical to the tree's or build's
same() {
	if [ ! -f "$1" ] || [ -L "$1" ]; then
		fail "${1#"$ROOT"} is not installed (a regular file)"
	elif ! cmp -s "$1" "$2"; then
		fail "${1#"$ROOT"} differs from $2"
	fi
}
same "$L/libkvpool.so.$so_version" "build/release/libkvpool.so.$so_version"
[ "$(readlink "$L/libkvpool.so.1")" = "libkvpool.so.$so_version" ] ||
	fail "$libdir/libkvpool.so.1 is not a link to libkvpool.so.$so_version"
[ "$(readlink "$L/libkvpool.so")" = libkvpool.so.1 ] ||
	fail "$libdir/libkvpool.so is not a link to libkvpool.so.1"
for h in $headers; do same "$ROOT$includedir/kvpool/$h" "$h"; done
same "$ROOT$bindir/kvpoold" build/release/kvpoold
same "$ROOT$bindir/kvpool" build/release/kvpool
same "$ROOT$bindir/kvpool-gpud" build/release/kvpool-gpud
for b in kvpoold kvpool kvpool-gpud; do
	[ -x "$ROOT$bindir/$b" ] || fail "$bindir/$b is not executable"
done
unit=$ROOT$unitdir/kvpoold@.service
if [ -f "$unit" ]; then
	grep -q "^ExecStart=$bindir/kvpoold --foreground --pool %i \$KVPOOLD_ARGS\$" "$unit" ||
		fail "the unit does not start $bindir/kvpoold --foreground --pool %i \$KVPOOLD_ARGS"
	grep -q "^EnvironmentFile=-$sysconfdir/kvpool/%i.conf\$" "$unit" ||
		fail "the unit does not read $sysconfdir/kvpool/%i.conf"
	grep -q '^Type=notify$' "$unit" || fail "the unit is not Type=notify"
	! grep -q '@[a-z]*@' "$unit" || fail "the unit keeps a placeholder: $(grep '@[a-z]*@' "$unit")"
else
	fail "$unitdir/kvpoold@.service is not installed"
fi
[ -f "$ROOT$pkgconfigdir/kvpool.pc" ] || fail "$pkgconfigdir/kvpool.pc is not installed"
# the commented defaults of every flag, as the staged agent prints them
build/release/kvpoold --print-config >"$T/conf.example" || fail "kvpoold --print-config"
same "$ROOT$prefix/share/doc/kvpool/kvpoold.conf.example" "$T/conf.example"
pydir=
if [ -n "$python" ]; then
	pydir=$(find "$ROOT" -path '*/kvpool/_installed.py' | head -n1)
	pydir=${pydir%/kvpool/_installed.py}
	if [ -z "$pydir" ]; then
		fail "the Python package has no kvpool/_installed.py"
	else
		for f in $python; do same "$pydir/kvpool/${f##*/}" "$f"; done
		printf 'LIBDIR = "%s"\nBINDIR = "%s"\n' "$libdir" "$bindir" >"$T/want_installed"
		cmp -s "$pydir/kvpool/_installed.py" "$T/want_installed" ||
			fail "kvpool/_installed.py is not exactly LIBDIR = \"$libdir\", BINDIR = \"$bindir\""
	fi
else
	echo "SKIP python package checks: the tree has no python/kvpool/*.py"
fi
# the manifest lists exactly what the root holds (files and links), and
# the directories it lists are directories of the root
find "$ROOT" \( -type f -o -type l \) | sort >"$T/have"
grep -v '^#' "$KVP_INSTALL_MANIFEST" | grep -v '/$' | sort >"$T/listed"
if ! cmp -s "$T/have" "$T/listed"; then
	fail "the manifest and the root's files differ (< root, > manifest):"
	diff "$T/have" "$T/listed" | grep '^[<>]' | sed 's/^/    /'
fi
grep '/$' "$KVP_INSTALL_MANIFEST" | while IFS= read -r d; do
	[ -d "$d" ] || echo "$d"
done >"$T/nodir"
[ ! -s "$T/nodir" ] || fail "manifest directories that are not: $(cat "$T/nodir")"
[ $bad = 1 ] || echo "ok: installed $(wc -l <"$T/have") files and links, the manifest lists them"
# installed again over itself: the same manifest (the directories the
# first install created stay recorded as its own)
sort "$KVP_INSTALL_MANIFEST" >"$T/manifest.1"
DESTDIR=$ROOT ninja install >"$T/install.log" 2>&1 ||
	{ sed 's/^/    /' "$T/install.log"; die "a second DESTDIR=$ROOT ninja install failed"; }
sort "$KVP_INSTALL_MANIFEST" | cmp -s - "$T/manifest.1" ||
	fail "a second install over the first wrote another manifest"

# --- 2. the library ---
soname=$(readelf -d "$L/libkvpool.so.$so_version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libkvpool.so.1 ] || fail "installed SONAME '$soname', want libkvpool.so.1"
if tests/client/test_exports.sh "$L" >"$T/exports" 2>&1; then
	echo "ok: the installed library exports kvpool.h's calls (SONAME $soname)"
else
	fail "tests/client/test_exports.sh $L:"
	sed 's/^/    /' "$T/exports"
fi

# --- 3. pkg-config and two clients, from the installed headers only ---
export PKG_CONFIG_SYSROOT_DIR="$ROOT" PKG_CONFIG_LIBDIR="$ROOT$pkgconfigdir"
unset PKG_CONFIG_PATH
cflags=$(pkg-config --cflags kvpool) || die "pkg-config --cflags kvpool failed"
libs=$(pkg-config --libs kvpool) || die "pkg-config --libs kvpool failed"
static=$(pkg-config --libs --static kvpool) || die "pkg-config --libs --static kvpool failed"
[ "$(echo $cflags)" = "-I$ROOT$includedir/kvpool" ] ||
	fail "pkg-config --cflags: '$cflags', want -I$ROOT$includedir/kvpool"
[ "$(echo $libs)" = "-L$L -lkvpool" ] || fail "pkg-config --libs: '$libs', want -L$L -lkvpool"
for l in -latomic_ops -lpthread; do
	case " $static " in
	*" $l "*) ;;
	*) fail "pkg-config --libs --static: '$static' lacks $l" ;;
	esac
done
mkdir "$T/client"
cat >"$T/client/client.c" <<'SRC'
/* put KEY (unless there) and read it back: the bytes are a function of
 * the key, so two clients check each other's values */
#define _GNU_SOURCE
#include "kvpool.h"
#include <stdio.h>
#include <string.h>

static unsigned char val[300000], got[300000];

int main(int argc, char **argv)
{
	struct kvp_client *c;
	size_t klen, i;
	ssize_t n;
	int rc, put;

	if (argc != 3)
		return 2;
	klen = strlen(argv[2]);
	for (i = 0; i < sizeof(val); i++)
		val[i] = (unsigned char)(i * 131 + (unsigned char)argv[2][i % klen]);
	rc = kvp_open(argv[1], "install-test", &c);
	if (rc) {
		fprintf(stderr, "kvp_open %s: %s\n", argv[1], kvp_strerror(rc));
		return 1;
	}
	put = kvp_put(c, argv[2], (uint32_t)klen, val, sizeof(val));
	if (put && put != -EEXIST) {
		fprintf(stderr, "kvp_put: %s\n", kvp_strerror(put));
		return 1;
	}
	n = kvp_get(c, argv[2], (uint32_t)klen, got, sizeof(got));
	if (n != (ssize_t)sizeof(val) || memcmp(got, val, sizeof(val))) {
		fprintf(stderr, "kvp_get %s: %zd (%s), want %zu intact bytes\n",
			argv[2], n, n < 0 ? kvp_strerror((int)n) : "bytes", sizeof(val));
		return 1;
	}
	printf("%s %s, read back %zd bytes intact\n", put ? "found" : "put", argv[2], n);
	kvp_close(c);
	return 0;
}
SRC
cat >"$T/client/angle.c" <<'SRC'
#define _GNU_SOURCE
#include <kvpool/kvpool.h>
int main(void) { return kvp_strerror(-ENOENT) ? 0 : 1; }
SRC
# from $T/client (no source tree on any path), -H: every header read
cd "$T/client" || exit 1
# shellcheck disable=SC2086
build() { # OUT SRC FLAGS...: compile and link; fail and say so
	out=$1 src=$2
	shift 2
	if ! "$cc" -std=c11 -Wall -Wextra -Werror -H -o "$out" "$src" "$@" 2>"$out.err"; then
		fail "$cc $* $src:"
		grep -v '^\.\|^Multiple include guards\|^/' "$out.err" | sed 's/^/    /' | head -30
		return 1
	fi
	# the headers it read: none from the source tree
	if sed -n 's/^\.\.* //p' "$out.err" | grep -F "$SRC/" >"$out.tree"; then
		fail "$out read headers from the source tree: $(head -3 "$out.tree")"
	fi
	sed -n 's/^\.\.* //p' "$out.err" | grep -c -F "$ROOT$includedir/kvpool/" >"$out.n"
}
# shellcheck disable=SC2086
build hdronly client.c $cflags -latomic_ops -lpthread &&
	echo "ok: header only: $cc \$(pkg-config --cflags kvpool) -latomic_ops -lpthread ($(cat hdronly.n) installed headers read)"
# shellcheck disable=SC2086
build linked client.c -DKVP_LINK_SHARED $cflags $libs &&
	echo "ok: linked: $cc -DKVP_LINK_SHARED \$(pkg-config --cflags --libs kvpool)"
# <kvpool/kvpool.h>, the include directory being a system one
# shellcheck disable=SC2086
build angle angle.c $cflags -I"$ROOT$includedir" -latomic_ops -lpthread &&
	echo "ok: #include <kvpool/kvpool.h> with -I$includedir (a system directory) and the pkg-config flags"
cd "$SRC" || exit 1
for p in hdronly linked; do [ -x "$T/client/$p" ] || die "the clients did not build"; done
readelf -d "$T/client/linked" | grep -q 'NEEDED.*\[libkvpool\.so\.1\]' ||
	fail "the KVP_LINK_SHARED client does not need libkvpool.so.1"
! readelf -d "$T/client/hdronly" | grep -q 'NEEDED.*libkvpool' ||
	fail "the header-only client needs libkvpool"
LD_LIBRARY_PATH=$L ldd "$T/client/linked" | grep -q "libkvpool.so.1 => $L/libkvpool.so.1" ||
	fail "the linked client does not load the staged libkvpool.so.1: $(LD_LIBRARY_PATH=$L ldd "$T/client/linked" | grep kvpool)"

# --- 4. the staged agent, with a notify socket ---
# listen SOCKET OUT: a datagram socket (a path, or @abstract) whose
# messages go to OUT, one a line; OUT.bound once it is bound; it ends
# after STOPPING=1 or 60 s
listen() {
	rm -f "$2" "$2.bound"
	"$PYTHON" - "$1" "$2" <<'PY' &
import socket, sys
addr, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0" + addr[1:] if addr.startswith("@") else addr)
open(out + ".bound", "w").close()
s.settimeout(60)
with open(out, "a") as f:
    while True:
        try:
            m = s.recv(4096).decode()
        except socket.timeout:
            break
        f.write(m + "\n")
        f.flush()
        if "STOPPING=1" in m.split("\n"):
            break
PY
	LISTEN_PID=$!
	wait_for 20 test -e "$2.bound" || die "the notify listener did not bind $1"
}
# agent NOTIFY_SOCKET: the staged kvpoold on POOL, in the foreground
agent() {
	NOTIFY_SOCKET=$1 "$ROOT$bindir/kvpoold" --foreground --pool "$POOL" --dram 64M \
		--metrics-addr 127.0.0.1:0 --populate-threads 1 2>>"$LOG" &
	AGENT_PID=$!
}
said() { grep -qx "$1" "$2" 2>/dev/null; }
# stop: SIGTERM, the agent exits 0 within the deadline (a watchdog kills
# it at 60 s: the wait cannot hang the run)
stop() {
	kill -TERM "$AGENT_PID"
	(sleep 60 && kill -KILL "$AGENT_PID" 2>/dev/null) &
	dog=$!
	wait "$AGENT_PID"
	rc=$?
	kill "$dog" 2>/dev/null
	wait "$dog" 2>/dev/null
	AGENT_PID=
	[ $rc = 0 ] || fail "the agent exited $rc after SIGTERM"
}
# running, not a zombie (kill -0 succeeds on one until it is waited for)
alive() {
	st=$(awk '{ print $3 }' "/proc/$AGENT_PID/stat" 2>/dev/null)
	[ -n "$st" ] && [ "$st" != Z ]
}
ready_or_dead() { said READY=1 "$1" || ! alive; }

listen "$T/notify.sock" "$T/notify.out"
agent "$T/notify.sock"
wait_for 30 ready_or_dead "$T/notify.out"
if said READY=1 "$T/notify.out" && alive; then
	echo "ok: the staged kvpoold sent READY=1 on a NOTIFY_SOCKET path"
	grep -q "^STATUS=serving pool '$POOL'" "$T/notify.out" || fail "no STATUS=serving pool '$POOL' line"
	for p in hdronly linked; do
		for k in key-hdronly key-linked; do
			if env LD_LIBRARY_PATH="$L" "$T/client/$p" "$POOL" "$k" >"$T/c.out" 2>&1; then
				echo "ok: $p client: $(cat "$T/c.out")"
			else
				fail "$p client on $k:"
				sed 's/^/    /' "$T/c.out"
			fi
		done
	done
	stop
	wait_for 30 said STOPPING=1 "$T/notify.out" || fail "no STOPPING=1 after SIGTERM"
	[ $bad = 1 ] || echo "ok: STOPPING=1 after SIGTERM, exit 0"
else
	fail "no READY=1 from the staged kvpoold within 30 s (agent log $LOG):"
	sed 's/^/    /' "$T/notify.out" 2>/dev/null
	tail -20 "$LOG" | sed 's/^/    /'
	[ -z "$AGENT_PID" ] || stop
fi
wait "$LISTEN_PID" 2>/dev/null
LISTEN_PID=

# an abstract socket name (@...): systemd's own form in some setups
listen "@kvpt-notify-$$" "$T/notify2.out"
agent "@kvpt-notify-$$"
if wait_for 30 ready_or_dead "$T/notify2.out" && said READY=1 "$T/notify2.out" && alive; then
	stop
	wait_for 30 said STOPPING=1 "$T/notify2.out" || fail "no STOPPING=1 on @kvpt-notify-$$"
	echo "ok: READY=1 and STOPPING=1 on an abstract NOTIFY_SOCKET"
else
	fail "no READY=1 on the abstract NOTIFY_SOCKET @kvpt-notify-$$"
	[ -z "$AGENT_PID" ] || stop
fi
wait "$LISTEN_PID" 2>/dev/null
LISTEN_PID=

# nobody listens: the agent serves anyway, and says so once
: >"$T/agent3.log"
NOTIFY_SOCKET=$T/nobody.sock "$ROOT$bindir/kvpoold" --foreground --pool "$POOL" --dram 64M \
	--metrics-addr 127.0.0.1:0 --populate-threads 1 2>"$T/agent3.log" &
AGENT_PID=$!
serving() { grep -q "serving pool '$POOL'" "$T/agent3.log" || ! alive; }
if wait_for 30 serving && alive; then
	stop
	n=$(grep -c 'cannot notify' "$T/agent3.log")
	[ "$n" = 1 ] || fail "a notify socket nobody listens on: $n log lines, want 1"
	[ $bad = 1 ] || echo "ok: with no listener on NOTIFY_SOCKET the agent serves, one log line"
else
	fail "with no listener on NOTIFY_SOCKET the agent did not serve:"
	sed 's/^/    /' "$T/agent3.log" | tail -20
	[ -z "$AGENT_PID" ] || stop
fi
cat "$T/agent3.log" >>"$LOG"

# --- 5. the unit, as systemd reads it ---
if command -v systemd-analyze >/dev/null 2>&1; then
	# an instance of the template, starting the staged binary
	mkdir "$T/units"
	sed "s|^ExecStart=$bindir/|ExecStart=$ROOT$bindir/|" "$unit" >"$T/units/kvpoold@verify.service"
	if systemd-analyze verify --man=no "$T/units/kvpoold@verify.service" >"$T/verify" 2>&1 &&
		[ ! -s "$T/verify" ]; then
		echo "ok: systemd-analyze verify kvpoold@verify.service: nothing to say"
	else
		fail "systemd-analyze verify on the unit:"
		sed 's/^/    /' "$T/verify"
	fi
else
	echo "SKIP systemd-analyze verify: systemd-analyze not installed (apt-get install systemd)"
fi

# --- 6. Python, from the staged root only ---
if [ -n "$pydir" ]; then
	mkdir "$T/py" && cd "$T/py" || exit 1
	file=$(env PYTHONPATH="$pydir" KVPOOL_LIBRARY="$L/libkvpool.so.1" "$PYTHON" -c 'import kvpool; print(kvpool.__file__)' 2>"$T/py.err")
	case $file in
	"$pydir/kvpool/"*) echo "ok: python3 imports kvpool from the staged root ($file)" ;;
	*) fail "python3 -c 'import kvpool' gives '$file', not under $pydir:"; sed 's/^/    /' "$T/py.err" ;;
	esac
	if [ -d "$SRC/tests/python" ]; then
		# cwd outside the tree, PYTHONPATH the staged root only: the
		# source tree's python/ is not on sys.path
		if env PYTHONPATH="$pydir" KVPOOL_LIBRARY="$L/libkvpool.so.1" \
			KVPOOLD="$ROOT$bindir/kvpoold" "$PYTHON" -m unittest discover \
			-s "$SRC/tests/python" -t "$SRC/tests/python" -v >"$T/unittest" 2>&1; then
			echo "ok: tests/python against the staged root: $(tail -n 3 "$T/unittest" | tr '\n' ' ')"
			grep '^SKIP\|skipped' "$T/unittest" | sed 's/^/    /' | head -20
		else
			fail "tests/python against the staged root:"
			sed 's/^/    /' "$T/unittest" | tail -60
		fi
	fi
	cd "$SRC" || exit 1
elif [ -d tests/python ]; then
	fail "tests/python exists but no Python package was installed (python/kvpool/*.py)"
fi

# --- 7. uninstall ---
DESTDIR=$ROOT ninja uninstall >"$T/uninstall.log" 2>&1 ||
	{ fail "ninja uninstall failed:"; sed 's/^/    /' "$T/uninstall.log"; }
left=$(find "$ROOT" -mindepth 1 | head -20)
if [ -n "$left" ]; then
	fail "ninja uninstall left in the root:"
	echo "$left" | sed 's/^/    /'
else
	echo "ok: ninja uninstall left the root empty"
fi
[ ! -e "$KVP_INSTALL_MANIFEST" ] || fail "ninja uninstall left its manifest"

# --- 8. configure --prefix=/usr, on a copy of the tree ---
mkdir "$T/tree"
cp -R configure kvpool.h shm index tiers "$T/tree/" || die "cannot copy the tree"
[ ! -d python ] || cp -R python "$T/tree/"
(cd "$T/tree" && ./configure >/dev/null) || die "./configure failed in a copy of the tree"
cmp -s "$T/tree/build.ninja" build.ninja ||
	fail "./configure in another directory writes another build.ninja than the tree's"
(cd "$T/tree" && ./configure --prefix=/usr >/dev/null) || die "./configure --prefix=/usr failed"
tv() { sed -n "s/^$1 = //p" "$T/tree/build.ninja"; }
for v in prefix:/usr bindir:/usr/bin libdir:/usr/lib includedir:/usr/include \
	pkgconfigdir:/usr/lib/pkgconfig sysconfdir:/etc unitdir:/usr/lib/systemd/system \
	pythondir:/usr/lib/python3/dist-packages configure_args:--prefix=/usr; do
	[ "$(tv "${v%%:*}")" = "${v#*:}" ] || fail "--prefix=/usr: ${v%%:*} = '$(tv "${v%%:*}")', want ${v#*:}"
done
(cd "$T/tree" && ./configure --prefix=/opt/kvp --libdir=/usr/lib/x86_64-linux-gnu --pythondir=/opt/py >/dev/null) ||
	die "./configure with directory options failed"
[ "$(tv libdir)" = /usr/lib/x86_64-linux-gnu ] && [ "$(tv pkgconfigdir)" = /usr/lib/x86_64-linux-gnu/pkgconfig ] &&
	[ "$(tv bindir)" = /opt/kvp/bin ] && [ "$(tv sysconfdir)" = /opt/kvp/etc ] && [ "$(tv pythondir)" = /opt/py ] ||
	fail "--libdir/--pythondir overrides not honoured"
(cd "$T/tree" && ./configure --prefix=usr >/dev/null 2>&1) && fail "./configure took a relative --prefix"
# the /usr install itself: build.ninja's command, run in this tree
(cd "$T/tree" && ./configure --prefix=/usr >/dev/null) || exit 1
cmd=$(ninja -C "$T/tree" -t commands install | tail -n1)
case $cmd in "sh agent/install.sh install "*) ;; *) die "no install command in the /usr build.ninja: $cmd" ;; esac
mkdir "$T/root2"
if env DESTDIR="$T/root2" sh -c "$cmd" >"$T/install2.log" 2>&1; then
	for f in /usr/bin/kvpoold /usr/bin/kvpool /usr/lib/libkvpool.so.1 /usr/include/kvpool/kvpool.h \
		/usr/lib/pkgconfig/kvpool.pc /usr/lib/systemd/system/kvpoold@.service \
		/usr/share/doc/kvpool/kvpoold.conf.example \
		${python:+/usr/lib/python3/dist-packages/kvpool/_installed.py}; do
		[ -e "$T/root2$f" ] || fail "--prefix=/usr: $f not installed"
	done
	grep -q '^EnvironmentFile=-/etc/kvpool/%i.conf$' "$T/root2/usr/lib/systemd/system/kvpoold@.service" ||
		fail "--prefix=/usr: the unit does not read /etc/kvpool/%i.conf"
	other=$(cd "$T/root2" && find . ! -type d | grep -v '^\./usr/' | head -5)
	[ -z "$other" ] || fail "--prefix=/usr installed outside /usr: $other"
	sh agent/install.sh uninstall >/dev/null 2>&1 || fail "uninstall of the /usr install failed"
	[ -z "$(find "$T/root2" -mindepth 1 | head -1)" ] || fail "uninstall of the /usr install left files"
	[ $bad = 1 ] || echo "ok: ./configure --prefix=/usr installs under /usr (and reads /etc/kvpool)"
else
	fail "the /usr install failed:"
	sed 's/^/    /' "$T/install2.log"
fi
exit $bad
