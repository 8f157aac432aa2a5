#!/usr/bin/env bash
# Build llama.cpp's llama-server and rpc-server from the source that the pinned
# llama-cpp-python sdist vendors, once, into a cache outside the repository.
# Prints the directory that holds the binaries on its last line.
#
#   PYTHON        python used for `pip download` (default .venv/bin/python, else python3)
#   LLAMA_VERSION llama-cpp-python version whose vendored llama.cpp is built (0.3.36)
#   LLAMA_SERVER_CMAKE_ARGS extra cmake flags (e.g. -DGGML_CUDA=on)
#   JOBS          parallel compile jobs (default 2)
set -euo pipefail
version="${LLAMA_VERSION:-0.3.36}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/specchat/llama-server/$version"
bin="$cache/bin"
# GGML_NATIVE compiles for this CPU, so the binaries carry the CPU and cmake flags they were
# built for (as the llama-cpp-python wheel's cache does): a home shared by an AVX-512 and an
# AVX2 machine must not hand the AVX2 one a binary that dies on its first AVX-512 instruction.
cpu="$(uname -m) $(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || sysctl -n machdep.cpu.features 2>/dev/null || true)"
# no AMX kernels on an AMX CPU (scripts/no-amx-flags.sh says why)
noamx=$("$(dirname "$0")/no-amx-flags.sh")
key=$( { echo "${LLAMA_SERVER_CMAKE_ARGS:-}"; echo "$cpu"; [ -z "$noamx" ] || echo "$noamx"; } | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-16)
if [ -x "$bin/llama-server" ] && [ -x "$bin/rpc-server" ] && [ "$(cat "$bin/built-for" 2>/dev/null)" = "$key" ]; then
  echo "$bin"
  exit 0
fi
py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
start=$(date +%s)
mkdir -p "$cache/src"
sdist="$cache/src/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  "$py" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$cache/src" >&2
fi
tar -xzf "$sdist" -C "$cache/src" "llama_cpp_python-$version/vendor/llama.cpp"
srcdir="$cache/src/llama_cpp_python-$version/vendor/llama.cpp"
# shellcheck disable=SC2086
cmake -S "$srcdir" -B "$cache/build-$key" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DGGML_RPC=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
  ${noamx:+"-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx"} \
  ${LLAMA_SERVER_CMAKE_ARGS:-} >&2
# rpc-server's CMake target is ggml-rpc-server (the binary keeps that name)
cmake --build "$cache/build-$key" --target llama-server ggml-rpc-server -j "${JOBS:-2}" >&2
mkdir -p "$bin"
# copied beside and renamed over, so a server still running the old binary keeps it
cp "$cache/build-$key/bin/llama-server" "$bin/llama-server.new" && mv -f "$bin/llama-server.new" "$bin/llama-server"
cp "$cache/build-$key/bin/ggml-rpc-server" "$bin/rpc-server.new" && mv -f "$bin/rpc-server.new" "$bin/rpc-server"
echo "$key" > "$bin/built-for"
echo "llama-server: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
