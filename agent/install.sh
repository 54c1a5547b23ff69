#!/bin/sh
# agent/install.sh - 'ninja install' and 'ninja uninstall' (build.ninja runs
# this from the tree's root with the directories ./configure chose).
#
#   sh agent/install.sh install --prefix=P --bindir=B --libdir=L
#       --includedir=I --pkgconfigdir=PC --sysconfdir=S --unitdir=U
#       --pythondir=PY --so-version=X.Y.Z --so-major=X
#       --headers='kvpool.h shm/...' --python='python/kvpool/...'
#   sh agent/install.sh uninstall
#
# Environment (read here, when ninja runs the command; build.ninja holds
# nothing of it):
#   DESTDIR               a staging root every path is put under (a
#                         package's build root); empty: the live system
#   KVP_INSTALL_MANIFEST  the manifest (default build/install_manifest.txt)
#
# Installs the release build: libkvpool.so.X.Y.Z with its links
# libkvpool.so.X (the SONAME) and libkvpool.so; kvpool.h and the headers it
# includes under INCLUDEDIR/kvpool, at their paths in the tree; kvpool.pc;
# kvpoold, kvpool and kvpool-gpud (the HBM helper kvpoold starts from
# its own directory); the systemd unit kvpoold@.service
# (agent/kvpoold@.service.in with the directories filled in) and the
# commented defaults of kvpoold's flags a pool's SYSCONFDIR/kvpool/POOL.conf
# starts from (PREFIX/share/doc/kvpool/kvpoold.conf.example, written by
# kvpoold --print-config from its table of flags); the Python
# package (python/kvpool/*.py, when the tree has any) under
# PYTHONDIR/kvpool, with _installed.py naming LIBDIR and BINDIR.  Files are
# copied under a temporary name and renamed into place, so a running
# kvpoold or a process that maps libkvpool.so.1 keeps its old file.  Runs
# ldconfig after installing into the live system as root.
#
# The manifest lists, one a line, every file and link installed and every
# directory the install created (those end in '/'), DESTDIR included;
# its first line says for which DESTDIR and prefix.  'uninstall' removes
# exactly those files and links (and the bytecode Python wrote beside the
# modules, __pycache__/NAME.*.pyc), then those directories if empty,
# deepest first, then the manifest.  Installing again with the same DESTDIR
# and prefix keeps what the previous manifest listed and still exists, so
# directories the first install created stay recorded as its.
set -eu
cd "$(dirname "$0")/.."
manifest=${KVP_INSTALL_MANIFEST:-build/install_manifest.txt}

say() { echo "install.sh: $*"; }
die() { echo "install.sh: $*" >&2; exit 1; }

# ldconfig, when it is ours to run: the live system, as root
run_ldconfig() {
	[ "$(id -u)" = 0 ] || { say "not root: ldconfig not run"; return 0; }
	for l in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
		if command -v "$l" >/dev/null 2>&1; then
			"$l" || say "ldconfig failed (the loader cache is stale; run ldconfig)"
			return 0
		fi
	done
	say "no ldconfig found: run it to refresh the loader's cache"
}

uninstall() {
	[ -f "$manifest" ] || die "no $manifest: nothing recorded to uninstall (ninja install writes it)"
	head=$(sed -n 1p "$manifest")
	case $head in
	"# kvpool install manifest: DESTDIR="*) ;;
	*) die "$manifest: not a kvpool install manifest" ;;
	esac
	mdest=${head#*DESTDIR=}
	mdest=${mdest%% prefix=*}
	if [ -n "${DESTDIR:-}" ] && [ "${DESTDIR%/}" != "$mdest" ]; then
		say "DESTDIR=$DESTDIR ignored: the manifest's paths are those of DESTDIR=$mdest"
	fi
	# files and links (never a directory: rm without -r)
	grep -v '^#' "$manifest" | grep -v '/$' | while IFS= read -r f; do
		case $f in
		*.py)
			d=${f%/*} b=${f##*/}
			for c in "$d/__pycache__/${b%.py}".*.pyc; do
				if [ -f "$c" ]; then rm -f "$c"; fi
			done
			if [ -d "$d/__pycache__" ]; then rmdir "$d/__pycache__" 2>/dev/null || :; fi
			;;
		esac
		if [ -L "$f" ] || [ -f "$f" ]; then
			rm -f "$f"
		elif [ -e "$f" ]; then
			say "$f: not a file or link now, left in place"
		fi
	done
	# the directories the install created, deepest first, if empty
	grep -v '^#' "$manifest" | grep '/$' | awk '{ print gsub("/", "/"), $0 }' |
		sort -k1,1nr -k2 | cut -d' ' -f2- | while IFS= read -r d; do
		d=${d%/}
		[ -d "$d" ] || continue
		rmdir "$d" 2>/dev/null || say "$d: not empty, left in place"
	done
	n=$(grep -vc '^#' "$manifest" || :)
	rm -f "$manifest"
	say "removed what $manifest listed ($n entries)"
	[ -n "$mdest" ] || run_ldconfig
}

# --- install ---
install_main() {
	prefix= bindir= libdir= includedir= pkgconfigdir= sysconfdir= unitdir=
	pythondir= so_version= so_major= headers= python=
	for a in "$@"; do
		v=${a#*=}
		case $a in
		--prefix=*) prefix=$v ;;
		--bindir=*) bindir=$v ;;
		--libdir=*) libdir=$v ;;
		--includedir=*) includedir=$v ;;
		--pkgconfigdir=*) pkgconfigdir=$v ;;
		--sysconfdir=*) sysconfdir=$v ;;
		--unitdir=*) unitdir=$v ;;
		--pythondir=*) pythondir=$v ;;
		--so-version=*) so_version=$v ;;
		--so-major=*) so_major=$v ;;
		--headers=*) headers=$v ;;
		--python=*) python=$v ;;
		*) die "unknown argument '$a'" ;;
		esac
	done
	for v in prefix bindir libdir includedir pkgconfigdir sysconfdir unitdir so_version so_major headers; do
		eval "[ -n \"\$$v\" ]" || die "--$v missing (run it through ninja install)"
	done
	D=${DESTDIR:-}
	case $D in
	'') ;;
	/*) ;;
	*) D=$(pwd)/$D ;;
	esac
	while [ -n "$D" ] && [ "${D%/}" != "$D" ]; do D=${D%/}; done
	rel=build/release lib=libkvpool.so.$so_version
	for f in $rel/kvpoold $rel/kvpool $rel/kvpool-gpud $rel/$lib agent/kvpoold@.service.in; do
		[ -f "$f" ] || die "$f missing (ninja release builds it)"
	done
	if [ -n "$python" ] && [ -z "$pythondir" ]; then
		pythondir=$(find_pythondir "$prefix")
	fi

	mkdir -p "$(dirname "$manifest")"
	# the staging root is its caller's: made if missing, never recorded
	[ -z "$D" ] || mkdir -p "$D" || die "cannot create DESTDIR $D"
	head="# kvpool install manifest: DESTDIR=$D prefix=$prefix"
	new=$manifest.new
	echo "$head" >"$new"
	# a reinstall of the same DESTDIR and prefix keeps the previous
	# install's entries that still exist (directories it created first)
	if [ -f "$manifest" ] && [ "$(sed -n 1p "$manifest")" = "$head" ]; then
		grep -v '^#' "$manifest" | while IFS= read -r p; do
			if [ -e "$p" ] || [ -L "$p" ]; then echo "$p"; fi
		done >>"$new"
	elif [ -f "$manifest" ]; then
		cp -f "$manifest" "$manifest.old"
		say "$manifest was another install's ($(sed -n '1s/^# kvpool install manifest: //p' "$manifest")):" \
			"kept as $manifest.old (KVP_INSTALL_MANIFEST=$manifest.old ninja uninstall removes that one)"
	fi
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-install.XXXXXX")
	trap 'rm -rf "$tmp"; finish' EXIT

	# the library, its SONAME link and the linker's name for it
	inst 0755 "$rel/$lib" "$libdir/$lib"
	link "$lib" "$libdir/libkvpool.so.$so_major"
	link "libkvpool.so.$so_major" "$libdir/libkvpool.so"
	# the headers, at their paths in the tree
	for h in $headers; do
		inst 0644 "$h" "$includedir/kvpool/$h"
	done
	# pkg-config: Cflags for both ways in; Libs for the linked one
	# (KVP_LINK_SHARED), Libs.private for the header-only one
	pc_dir() { # a directory, as ${prefix}/... when it lies under it
		case $1 in
		"$prefix"/*) echo "\${prefix}${1#"$prefix"}" ;;
		*) echo "$1" ;;
		esac
	}
	cat >"$tmp/kvpool.pc" <<EOF
prefix=$prefix
libdir=$(pc_dir "$libdir")
includedir=$(pc_dir "$includedir")

Name: kvpool
Description: node-local KV-cache pool client: header only (link Libs.private), or libkvpool.so.$so_major with -DKVP_LINK_SHARED (Libs)
Version: $so_version
Cflags: -I\${includedir}/kvpool
Libs: -L\${libdir} -lkvpool
Libs.private: -latomic_ops -lpthread
EOF
	inst 0644 "$tmp/kvpool.pc" "$pkgconfigdir/kvpool.pc"
	# the agent and the CLI
	inst 0755 "$rel/kvpoold" "$bindir/kvpoold"
	inst 0755 "$rel/kvpool" "$bindir/kvpool"
	# the HBM tier's helper, started by kvpoold from its own directory
	inst 0755 "$rel/kvpool-gpud" "$bindir/kvpool-gpud"
	# the systemd unit, one instance per pool (kvpoold@POOL)
	sed -e "s|@bindir@|$bindir|g" -e "s|@sysconfdir@|$sysconfdir|g" \
		agent/kvpoold@.service.in >"$tmp/kvpoold@.service"
	inst 0644 "$tmp/kvpoold@.service" "$unitdir/kvpoold@.service"
	# every flag with its default, commented (agent/options.c's table)
	"$rel/kvpoold" --print-config >"$tmp/kvpoold.conf.example" ||
		die "$rel/kvpoold --print-config failed"
	inst 0644 "$tmp/kvpoold.conf.example" "$prefix/share/doc/kvpool/kvpoold.conf.example"
	# the Python package, and where it finds the library and the agent
	if [ -n "$python" ]; then
		for f in $python; do
			inst 0644 "$f" "$pythondir/kvpool/${f##*/}"
		done
		printf 'LIBDIR = "%s"\nBINDIR = "%s"\n' "$libdir" "$bindir" >"$tmp/_installed.py"
		inst 0644 "$tmp/_installed.py" "$pythondir/kvpool/_installed.py"
	fi
	if [ -z "$D" ]; then
		run_ldconfig
		[ ! -d /run/systemd/system ] || say "systemd: systemctl daemon-reload, then systemctl enable --now kvpoold@default"
	fi
	say "installed under ${D:-/} (prefix $prefix); $manifest lists what (ninja uninstall removes it)"
}

# The manifest, whatever way the install ends: what it made so far, each
# path once, in the order made (a failed install can be uninstalled too).
finish() {
	[ -f "$new" ] || return 0
	{
		sed -n 1p "$new"
		sed 1d "$new" | awk '!seen[$0]++'
	} >"$new.u" && mv -f "$new.u" "$manifest" && rm -f "$new"
}

# mkd DIR: create DESTDIR/DIR and its missing parents, recording those it
# created (each ending in '/')
mkd() {
	path= rest=${1#/}
	while [ -n "$rest" ]; do
		part=${rest%%/*}
		if [ "$part" = "$rest" ]; then rest=; else rest=${rest#*/}; fi
		path=$path/$part
		if [ ! -d "$D$path" ]; then
			mkdir -m 0755 "$D$path" || die "cannot create $D$path"
			echo "$D$path/" >>"$new"
		fi
	done
}

# inst MODE SRC DIR/NAME: copy to a temporary name beside it, then rename
inst() {
	dst=$D$3
	mkd "${3%/*}"
	cp "$2" "$dst.kvp-new.$$" && chmod "$1" "$dst.kvp-new.$$" &&
		mv -f "$dst.kvp-new.$$" "$dst" || {
		rm -f "$dst.kvp-new.$$"
		die "cannot install $dst"
	}
	echo "$dst" >>"$new"
}

# link TARGET DIR/NAME: a relative symlink
link() {
	dst=$D$2
	mkd "${2%/*}"
	ln -sfn "$1" "$dst" || die "cannot link $dst"
	echo "$dst" >>"$new"
}

# The directory of PREFIX that python3 ($PYTHON if set) imports from: Debian's
# dist-packages (/usr/local/lib/python3.X/dist-packages), else the
# upstream site-packages, whichever its sys.path has; without python3,
# PREFIX/lib/python3/dist-packages (configure --pythondir chooses).
find_pythondir() {
	py=${PYTHON:-python3}
	if ! command -v "$py" >/dev/null 2>&1; then
		say "python3 not found: the Python package goes to $1/lib/python3/dist-packages (configure --pythondir=DIR to choose)" >&2
		echo "${1%/}/lib/python3/dist-packages"
		return
	fi
	"$py" - "$1" <<'EOF'
import sys, sysconfig
prefix = sys.argv[1].rstrip("/")
v = "%d.%d" % sys.version_info[:2]
cands = [prefix + "/lib/python3/dist-packages",
	 prefix + "/lib/python" + v + "/dist-packages",
	 prefix + "/lib/python" + v + "/site-packages"]
for c in cands:
	if c in sys.path:
		print(c)
		break
else:
	debian = "posix_local" in sysconfig.get_scheme_names() or \
		any(p.endswith("/dist-packages") for p in sys.path)
	print(cands[1] if debian else cands[2])
EOF
}

case ${1:-} in
install) shift; install_main "$@" ;;
uninstall) uninstall ;;
*) die "usage: install.sh install --prefix=... | uninstall" ;;
esac
