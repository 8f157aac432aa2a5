#!/usr/bin/env bash
# Install llama-cpp-python into the venv, built from its sdist with specchat's patches to
# the llama.cpp it vendors (patches/llama.cpp/*.patch), and keep the built wheel in a cache
# outside the repository so later set-ups install it in seconds.
#
# The patches speed up what verifying drafts runs on the CPU — a batch of a few tokens — and
# leave one-token steps alone: 0001 streams each weight row once for batches of up to 8
# tokens (bit-identical logits), 0002 gives attention over a few query tokens a kernel that
# shares each block of K and V among them (AVX-512 or AVX2), 0003 aligns the CPU backend's work
# buffer to a cache line (else batched steps ran 25 % slower in some processes, by heap
# luck), 0004 asks for transparent huge pages for large CPU buffers (the weights, the KV
# cache): one-token steps ~3.7 % faster on the pair's Q4_K_M target, where 4 KiB pages
# made every step's pass over the weights pay TLB misses, 0005 gives Q4_K and Q6_K weights
# times a few rows kernels that unpack each weight block once for several rows (a Q4_K_M
# file's 2- and 3-token steps ~30 % less CPU), 0006 does the same for Q8_0, Q5_0 and Q4_0
# (llamafile's small-batch tiles read 4 weight rows at once, at a quarter of one stream's
# bandwidth here: 2 rows of Q8_0 cost 4x one, now 1.1x), 0007 makes 0005's kernels prefetch
# the weights and, where AVX-512 is, run in 512-bit registers with tiles of up to 16 rows (a
# Q4_K_M file's 5-token step 92 -> 53 ms CPU, 9 tokens 166 -> 81, one token 37), 0008 makes
# 0006's prefetch too (Q8_0 5 tokens 151 -> 128 ms CPU), 0009 gives Q4_0 times 2-16 rows a
# 512-bit kernel that decodes each block once for all of them where AVX-512 VNNI is (5
# tokens 89 -> 48 ms CPU, 9 tokens 141 -> 72). SPECCHAT_GGML_UPSTREAM=1 at run time turns
# 0001, 0002 and 0004-0009 off, for A/B measurements.
# If a patch does not apply (another LLAMA_VERSION), the build goes on without it and says so.
#
#   PYTHON         the venv's python (default .venv/bin/python)
#   LLAMA_VERSION  llama-cpp-python version (default 0.3.36)
#   CMAKE_ARGS     passed to the build (e.g. -DGGML_NATIVE=ON, -DGGML_CUDA=on)
#   JOBS           parallel compile jobs (default: the number of cores)
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-.venv/bin/python}"
version="${LLAMA_VERSION:-0.3.36}"
root="${XDG_CACHE_HOME:-$HOME/.cache}/specchat"
patches=(patches/llama.cpp/*.patch)

# The wheel depends on the version, the patches, the cmake flags and (GGML_NATIVE) this CPU.
cpu="$(uname -m) $(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || sysctl -n machdep.cpu.features 2>/dev/null || true)"
# no AMX kernels on an AMX CPU (scripts/no-amx-flags.sh says why); CMake reads CFLAGS/CXXFLAGS
noamx=$(scripts/no-amx-flags.sh)
export CFLAGS="${CFLAGS:-} $noamx" CXXFLAGS="${CXXFLAGS:-} $noamx"
key=$( { echo "$version"; echo "${CMAKE_ARGS:-}"; echo "$cpu"; [ -z "$noamx" ] || echo "$noamx"; cat "${patches[@]}"; } | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-16)
wheels="$root/wheels/llama-cpp-python-$version-$key"

install_wheel() {
  "$py" -m pip install -q --no-deps --force-reinstall "$1" && "$py" -m pip install -q "$1"
}

whl=$(ls "$wheels"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$whl" ]; then
  install_wheel "$whl"
  echo "llama-cpp-python: installed the cached build $(basename "$whl")"
  exit 0
fi

# The sdist: the one llama-server's build fetched, else download it.
sdist="$root/llama-server/$version/src/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  sdist="$root/llama-cpp-python/$version/llama_cpp_python-$version.tar.gz"
  if [ ! -f "$sdist" ]; then
    mkdir -p "$(dirname "$sdist")"
    "$py" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$(dirname "$sdist")"
  fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/specchat-llama-cpp-python.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -xzf "$sdist" -C "$work"
src="$work/llama_cpp_python-$version"

applied=()
for p in "${patches[@]}"; do
  if patch -p1 --forward --silent -d "$src/vendor/llama.cpp" < "$p" > /dev/null 2>&1; then
    applied+=("$(basename "$p")")
  else
    echo "llama-cpp-python: $(basename "$p") does not apply to llama-cpp-python $version; building without it" >&2
    # a half-applied patch must not be built: start again from the sdist
    rm -rf "$src" && tar -xzf "$sdist" -C "$work"
    applied=()
    break
  fi
done
if [ ${#applied[@]} -gt 0 ]; then
  # a local version label says which build this is (pip show, specchat's bench reports);
  # bump it when patches/llama.cpp changes
  sed -i.orig -E "s/^__version__ = \"$version\"/__version__ = \"$version+specchat.13\"/" "$src/llama_cpp/__init__.py"
fi

mkdir -p "$wheels"
CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc 2>/dev/null || echo 2)}" \
  "$py" -m pip wheel -q --no-deps -w "$work/dist" "$src"
whl=$(ls "$work"/dist/llama_cpp_python-*.whl | head -n 1)
cp "$whl" "$wheels/"
install_wheel "$wheels/$(basename "$whl")"
echo "llama-cpp-python: built $(basename "$whl") (patches: ${applied[*]:-none})"
