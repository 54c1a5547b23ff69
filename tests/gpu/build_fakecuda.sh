#!/bin/sh
# tests/gpu/build_fakecuda.sh OUTDIR - build the emulated CUDA runtime
# (tests/gpu/fakecudart.c) as OUTDIR/libcudart.so.13 and print its path.
# It compiles against the toolkit's cuda_runtime_api.h (so every function
# has the real prototype): $CUDA_HOME/include, the include directory
# beside nvcc, /usr/local/cuda/include, or /usr/include.  Without those
# headers it prints why and exits 77 (no CUDA: the tests that need the
# emulator are skipped).  Test-only: never installed.
set -u
out=${1:?usage: build_fakecuda.sh OUTDIR}
inc=
for d in ${CUDA_HOME:+"$CUDA_HOME/include"} \
	$(command -v nvcc >/dev/null 2>&1 && echo "$(dirname "$(dirname "$(command -v nvcc)")")/include") \
	/usr/local/cuda/include /usr/include; do
	if [ -f "$d/cuda_runtime_api.h" ]; then inc=$d; break; fi
done
if [ -z "$inc" ]; then
	echo "no CUDA: cuda_runtime_api.h not found (CUDA_HOME, nvcc, /usr/local/cuda)" >&2
	exit 77
fi
mkdir -p "$out" || exit 1
${KVP_CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -fPIC -shared \
	-I. -I"$inc" -Wl,-soname,libcudart.so.13 -o "$out/libcudart.so.13.tmp" \
	tests/gpu/fakecudart.c -lpthread || exit 1
mv "$out/libcudart.so.13.tmp" "$out/libcudart.so.13" || exit 1
echo "$out/libcudart.so.13"
