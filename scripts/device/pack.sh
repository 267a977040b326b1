#!/usr/bin/env bash
# Packs into .device/ (ignored by git) what a machine without LLVM 19, oneTBB,
# xxHash or hiredis needs to build lazyjit; scripts/gpu_check.sh unpacks it
# there when .device/deps.tar.xz is in the working tree (docs/gpu.md):
#   .device/deps.tar.xz   LLVM 19 (static archives of the components lazyjit uses,
#                         and the headers), oneTBB (libtbb.so.12, headers), xxHash
#                         (headers), hiredis (libhiredis.a, headers), and Python 3.12
#                         headers in case the machine has none; unpacked, it is the
#                         folder -DLAZYJIT_DEPS_PREFIX names (cmake/deps_prefix.cmake)
#   .device/MANIFEST.txt  what is inside, sizes, sha256
# Run on a machine with the Debian packages (scripts/setup.sh installs them),
# then copy the working tree with .device/ to the GPU machine. Takes about a minute (xz on 2 cores). Prints the sizes, and fails if
# .device and the working tree together pass LAZYJIT_CARRY_LIMIT_MIB (60).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
LLVM_CONFIG=${LLVM_CONFIG:-llvm-config-19}
# The LLVM components lazyjit links (lowering/): the CPU JIT (orcjit, native),
# the CUDA target (nvptx; libdevice through linker + bitreader), the pass
# pipelines; llvm-config adds what they depend on.
LLVM_COMPONENTS=${LLVM_COMPONENTS:-"orcjit native nvptx passes linker irreader bitreader bitwriter"}
LIMIT_MIB=${LAZYJIT_CARRY_LIMIT_MIB:-60}
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
libdirs=("/usr/lib/$multiarch" /usr/lib /usr/lib64 /lib/"$multiarch")

command -v "$LLVM_CONFIG" >/dev/null || { echo "pack: $LLVM_CONFIG not found (apt-get install llvm-19-dev)"; exit 1; }
command -v xz >/dev/null || { echo "pack: xz not found (apt-get install xz-utils)"; exit 1; }

# find_lib NAME: the first NAME in the library folders (symlinks resolved).
find_lib() {
  local d
  for d in "${libdirs[@]}"; do
    if [ -e "$d/$1" ]; then readlink -f "$d/$1"; return 0; fi
  done
  echo "pack: $1 not found in ${libdirs[*]}" >&2; return 1
}

stage=$(mktemp -d /tmp/lazyjit-pack.XXXXXX)
trap 'rm -rf "$stage"' EXIT
t0=$(date +%s)

# --- LLVM ---------------------------------------------------------------------
llvm_libdir=$("$LLVM_CONFIG" --libdir)
llvm_incdir=$("$LLVM_CONFIG" --includedir)
mkdir -p "$stage/llvm/lib" "$stage/llvm/include"
"$LLVM_CONFIG" --libnames --link-static $LLVM_COMPONENTS | tr ' ' '\n' | sed '/^$/d' > "$stage/llvm/lib/llvm-libs.txt"
while read -r a; do cp "$llvm_libdir/$a" "$stage/llvm/lib/"; done < "$stage/llvm/lib/llvm-libs.txt"
cp -rL "$llvm_incdir/llvm" "$llvm_incdir/llvm-c" "$stage/llvm/include/"
"$LLVM_CONFIG" --version > "$stage/llvm/version.txt"
{ echo "components: $LLVM_COMPONENTS"; echo "system-libs (llvm-config): $("$LLVM_CONFIG" --system-libs --link-static)"; } > "$stage/llvm/components.txt"

# --- oneTBB -------------------------------------------------------------------
mkdir -p "$stage/tbb/lib" "$stage/tbb/include"
cp "$(find_lib libtbb.so.12)" "$stage/tbb/lib/libtbb.so.12"
# libtbb loads its allocator from its own folder when it is there.
if tbbmalloc=$(find_lib libtbbmalloc.so.2 2>/dev/null); then cp "$tbbmalloc" "$stage/tbb/lib/libtbbmalloc.so.2"; fi
cp -rL /usr/include/tbb /usr/include/oneapi "$stage/tbb/include/"

# --- xxHash (header-only) -----------------------------------------------------
mkdir -p "$stage/xxhash/include"
for h in xxhash.h xxh3.h xxh_x86dispatch.h; do
  [ -e "/usr/include/$h" ] && cp -L "/usr/include/$h" "$stage/xxhash/include/"
done
[ -e "$stage/xxhash/include/xxhash.h" ] || { echo "pack: /usr/include/xxhash.h not found (apt-get install libxxhash-dev)"; exit 1; }

# --- hiredis (static, position-independent) -----------------------------------
mkdir -p "$stage/hiredis/lib" "$stage/hiredis/include"
cp "$(find_lib libhiredis.a)" "$stage/hiredis/lib/libhiredis.a"
cp -rL /usr/include/hiredis "$stage/hiredis/include/"

# --- Python 3.12 headers, used only where the machine has no Python.h ---------
py312=""
for c in "$(command -v python3.12 || true)" /root/.pyenv/versions/3.12*/bin/python3.12; do
  [ -x "$c" ] || continue
  inc=$("$c" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null) || continue
  if [ -e "$inc/Python.h" ]; then py312=$inc; break; fi
done
if [ -n "$py312" ]; then
  mkdir -p "$stage/python3.12/include"
  cp -rL "$py312" "$stage/python3.12/include/python3.12"
else
  echo "pack: no Python 3.12 headers here; the device build relies on its own"
fi

# --- archive ------------------------------------------------------------------
raw=$(du -sb "$stage" | cut -f1)
mkdir -p .device
rm -f .device/deps.tar.xz.tmp
tar -C "$stage" -cf - . | xz -T0 -6 > .device/deps.tar.xz.tmp
mv .device/deps.tar.xz.tmp .device/deps.tar.xz
packed=$(stat -c %s .device/deps.tar.xz)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
part() { du -sb "$stage/$1" | cut -f1; }
{
  echo "lazyjit device dependencies, packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) by scripts/device/pack.sh"
  echo "deps.tar.xz: $(mib "$packed") ($packed bytes), unpacked $(mib "$raw"), sha256 $(sha256sum .device/deps.tar.xz | cut -d' ' -f1)"
  echo "llvm $(cat "$stage/llvm/version.txt"): $(wc -l < "$stage/llvm/lib/llvm-libs.txt") static archives $(mib "$(du -cb "$stage"/llvm/lib/*.a | tail -1 | cut -f1)"), headers $(mib "$(part llvm/include)")"
  sed 's/^/  /' "$stage/llvm/components.txt"
  echo "tbb: $(ls "$stage/tbb/lib" | tr '\n' ' ')($(dpkg-query -W -f '${Version}' libtbb12 2>/dev/null || echo '?')), headers $(mib "$(part tbb/include)")"
  echo "xxhash: $(ls "$stage/xxhash/include" | tr '\n' ' ')($(dpkg-query -W -f '${Version}' libxxhash-dev 2>/dev/null || echo '?'))"
  echo "hiredis: libhiredis.a ($(dpkg-query -W -f '${Version}' libhiredis-dev 2>/dev/null || echo '?'))"
  echo "python3.12 headers: ${py312:-none}"
} > .device/MANIFEST.txt
cat .device/MANIFEST.txt

# What a run call with carry [".device"] sends: the working tree (tracked and
# untracked-not-ignored files) and .device.
tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
dev=$(du -sb .device | cut -f1)
total=$((tree + dev))
echo "pack: carry = working tree $(mib "$tree") + .device $(mib "$dev") = $(mib "$total") (limit ${LIMIT_MIB} MiB) in $(( $(date +%s) - t0 )) s"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "pack: too big to carry"; exit 1
fi
