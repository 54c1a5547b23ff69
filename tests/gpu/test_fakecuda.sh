#!/bin/sh
# tests/gpu/test_fakecuda.sh - the emulated CUDA runtime the GPU tests use
# (tests/gpu/fakecudart.c) checks itself (tests/gpu/test_fakecuda.c):
# copies, asynchrony, pinned accounting, injected failures, no device.
# SKIP (77) where the CUDA headers are not installed.
set -u
cd "$(dirname "$0")/../.." || exit 2
lib=$(sh tests/gpu/build_fakecuda.sh build/gpu) || exit $?
dir=$(dirname "$lib")
inc=
for d in ${CUDA_HOME:+"$CUDA_HOME/include"} \
	$(command -v nvcc >/dev/null 2>&1 && echo "$(dirname "$(dirname "$(command -v nvcc)")")/include") \
	/usr/local/cuda/include /usr/include; do
	if [ -f "$d/cuda_runtime_api.h" ]; then inc=$d; break; fi
done
${KVP_CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -I"$inc" -I. \
	-o "$dir/test_fakecuda" tests/gpu/test_fakecuda.c \
	-L"$dir" -l:libcudart.so.13 -Wl,-rpath,"$PWD/$dir" -lpthread || exit 1
exec "$dir/test_fakecuda"
