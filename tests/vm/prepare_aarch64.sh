# tests/vm/prepare_aarch64.sh: `vm.sh prepare` for the AArch64 VMs
# (CIDMALLOC_VM_ARCH=aarch64), sourced by tests/vm/vm.sh after prepare.sh,
# whose cmd_prepare it replaces: installs qemu-system-aarch64 and the cross
# compiler, downloads Debian's arm64 kernels, busybox-static and the
# programs the scenarios preload cidmalloc into (the arm64 architecture is
# added to dpkg for that), cross-builds the test programs the scenarios of
# tests/vm/scenarios_aarch64/ run and libcidmalloc.so (tests/vm/cross_build.py
# replays Bazel's actions with aarch64-linux-gnu-g++) and packs them with
# the AArch64 C and C++ runtime into the initramfs.  Uses prepare.sh's
# helpers (as_root, pkg_installed, apt_update_once, install_or_skip,
# scenario_tests, write_test_envs) and vm.sh's settings.
# shellcheck shell=bash

AARCH64_SYSROOT=/usr/aarch64-linux-gnu
AARCH64_CXX=aarch64-linux-gnu-g++

ensure_packages_aarch64() {
  local -a missing=()
  command -v qemu-system-aarch64 >/dev/null || missing+=(qemu-system-arm)
  command -v "$AARCH64_CXX" >/dev/null || missing+=(g++-aarch64-linux-gnu)
  [[ -e /usr/src/googletest/googletest/src/gtest-all.cc ]] ||
    missing+=(googletest)
  pkg_installed busybox-static || missing+=(busybox-static)
  install_or_skip "${missing[@]}"
  command -v qemu-system-aarch64 >/dev/null || skip "no qemu-system-aarch64"
  # arm64 packages (the kernels, busybox) are only downloaded, never
  # installed, but apt lists them only for a configured architecture.
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    note "adding the arm64 architecture to dpkg (for apt-get download)"
    as_root dpkg --add-architecture arm64 || skip "cannot add arm64 to dpkg"
    apt_updated=0
    apt_update_once || skip "apt-get update failed"
  fi
}

# download_arm64 REGEX DIR: unpacks the newest arm64 package whose name
# matches REGEX into DIR/x and writes its name to DIR/package.
download_arm64() {
  local re="$1" dir="$2" pkg tmp
  pkg="$(apt-cache search --names-only "$re" 2>/dev/null | awk '{ print $1 }' |
    sort -V | tail -n 1)"
  if [[ -z "$pkg" ]]; then
    apt_update_once || true
    pkg="$(apt-cache search --names-only "$re" 2>/dev/null |
      awk '{ print $1 }' | sort -V | tail -n 1)"
  fi
  [[ -n "$pkg" ]] || skip "apt knows no arm64 package matching $re"
  note "downloading $pkg:arm64"
  tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
  if ! (cd "$tmp" &&
    apt-get download "$pkg:arm64" >/dev/null 2>"$tmp/err"); then
    cat "$tmp/err" >&2
    rm -rf "$tmp"
    skip "cannot download $pkg:arm64"
  fi
  mkdir -p "$dir" "$tmp/x"
  dpkg-deb -x "$tmp"/*.deb "$tmp/x" || die "cannot unpack $pkg:arm64"
  rm -rf "$dir/x"
  mv "$tmp/x" "$dir/x"
  echo "$pkg" >"$dir/package"
  rm -rf "$tmp"
}

# fetch_kernel_aarch64 SERIES: $CACHE/kernels/aarch64-SERIES/{vmlinuz,config}.
fetch_kernel_aarch64() {
  local dir="$CACHE/kernels/aarch64-$1" re
  [[ -s "$dir/vmlinuz" && -s "$dir/config" ]] && return 0
  case "$1" in
    6.1) re='^linux-image-6\.1\.0-[0-9]+-arm64-unsigned$' ;;
    6.12) re='^linux-image-6\.12\.[0-9]+\+deb12-arm64-unsigned$' ;;
    *) die "unknown kernel '$1' (6.1 or 6.12)" ;;
  esac
  download_arm64 "$re" "$dir"
  cp "$dir"/x/boot/vmlinuz-* "$dir/vmlinuz"
  cp "$dir"/x/boot/config-* "$dir/config"
  rm -rf "$dir/x"
  local opt
  for opt in SERIAL_AMBA_PL011_CONSOLE BLK_DEV_INITRD RD_GZIP NUMA RSEQ \
    MEMBARRIER DEVTMPFS TMPFS; do
    grep -q "^CONFIG_$opt=y" "$dir/config" ||
      die "kernel aarch64-$1 ($(cat "$dir/package")) lacks built-in CONFIG_$opt"
  done
}

fetch_busybox_aarch64() {
  local dir="$CACHE/aarch64-busybox"
  [[ -x "$dir/busybox" ]] && return 0
  download_arm64 '^busybox-static$' "$dir"
  cp "$dir/x/bin/busybox" "$dir/busybox"
  rm -rf "$dir/x"
}

# Debian's arm64 programs that scenarios run with cidmalloc preloaded
# (preload_check in guest/lib.sh): sort, perl and python3.11 with its
# minimal library, and the libraries they need beyond the cross compiler's
# runtime.  Downloaded once into $CACHE/aarch64-programs/<package>/x.
AARCH64_PROGRAM_PACKAGES=(coreutils perl-base libcrypt1 python3.11-minimal
  libpython3.11-minimal zlib1g libexpat1)

fetch_programs_aarch64() {
  local pkg
  for pkg in "${AARCH64_PROGRAM_PACKAGES[@]}"; do
    [[ -d "$CACHE/aarch64-programs/$pkg/x" ]] ||
      download_arm64 "^${pkg//./\\.}\$" "$CACHE/aarch64-programs/$pkg"
  done
}

# stage_programs_aarch64 STAGE: the programs at their Debian paths (perl's
# module directory left out: the checks load no module), their libraries
# where the loader looks first, and tests/preload's inputs in
# /vmtest/programs.
stage_programs_aarch64() {
  local stage="$1" src="$CACHE/aarch64-programs" lib
  mkdir -p "$stage/usr/bin" "$stage/usr/lib" "$stage/vmtest/programs"
  cp "$src/coreutils/x/usr/bin/sort" "$src/perl-base/x/usr/bin/perl" \
    "$src/python3.11-minimal/x/usr/bin/python3.11" "$stage/usr/bin/"
  cp -r "$src/libpython3.11-minimal/x/usr/lib/python3.11" "$stage/usr/lib/"
  # Compiled here (any 3.11's bytecode is the guest's; the initramfs keeps
  # the sources' times, which the .pyc files record): compiling the modules
  # it imports took python3 14 of its first run's 20 s in the VM.
  if command -v python3.11 >/dev/null; then
    python3.11 -m compileall -q -j 0 "$stage/usr/lib/python3.11" >/dev/null ||
      die "python3.11 -m compileall failed"
  fi
  for lib in libcrypt.so.1 libz.so.1 libexpat.so.1; do
    cp -L "$src"/*/x/lib/aarch64-linux-gnu/"$lib" "$stage/lib/$lib" ||
      die "no $lib in the arm64 packages"
  done
  cp "$ROOT"/tests/preload/{sort_input.awk,big_hash.pl,alloc_threads.py} \
    "$stage/vmtest/programs/"
}

cmd_prepare() {
  ensure_packages_aarch64
  mkdir -p "$CACHE/kernels" "$WORK"
  local series
  for series in $(sed -nE 's/^# vm-kernel:[[:space:]]*//p' "$SCENARIOS"/*.sh |
    sort -u); do
    fetch_kernel_aarch64 "$series"
  done
  fetch_busybox_aarch64
  fetch_programs_aarch64

  # The scenarios' gtest lines and the //tests/vm programs they check.
  local -a tests=() bins=(locality_cidmalloc slabs) labels=()
  mapfile -t tests < <(scenario_tests)
  local t f
  for t in "${tests[@]}"; do labels+=("//tests/${t%/*}:${t##*/}"); done
  note "cross-building ${#labels[@]} tests, ${#bins[@]} programs and" \
    "libcidmalloc.so for aarch64"
  local out="$WORK/cross" log="$WORK/build.log"
  if ! python3 "$HERE/cross_build.py" --out "$out" --gtest "$WORK/gtest" \
    --cxx "$AARCH64_CXX" "${labels[@]}" "${bins[@]/#///tests/vm:}" \
    //:libcidmalloc.so \
    >"$log" 2>&1 </dev/null; then
    cat "$log" >&2
    die "the cross build failed (log above)"
  fi
  local bin="$out/bazel-out/k8-opt/bin"

  local stage="$WORK/stage"
  rm -rf "$stage"
  mkdir -p "$stage"/{bin,dev,proc,sys,tmp,lib} \
    "$stage"/vmtest/{bin,lib,tests,scenarios}
  cp "$CACHE/aarch64-busybox/busybox" "$stage/bin/busybox"
  cp "$HERE/guest/init" "$stage/init"
  cp "$HERE/guest/lib.sh" "$stage/vmtest/lib.sh"
  cp "$SCENARIOS"/*.sh "$stage/vmtest/scenarios/"
  chmod 755 "$stage/init"
  # The loader at its path, the libraries where it looks first.
  for f in ld-linux-aarch64.so.1 libc.so.6 libm.so.6 libstdc++.so.6 \
    libgcc_s.so.1; do
    cp -L "$AARCH64_SYSROOT/lib/$f" "$stage/lib/$f"
  done
  for f in "${bins[@]}"; do
    aarch64-linux-gnu-strip --strip-debug -o "$stage/vmtest/bin/$f" \
      "$bin/tests/vm/$f"
  done
  aarch64-linux-gnu-strip --strip-debug \
    -o "$stage/vmtest/lib/libcidmalloc.so" "$bin/libcidmalloc.so"
  stage_programs_aarch64 "$stage"
  for t in "${tests[@]}"; do
    mkdir -p "$stage/vmtest/tests/${t%/*}"
    aarch64-linux-gnu-strip --strip-debug -o "$stage/vmtest/tests/$t" \
      "$bin/tests/$t"
  done
  ((${#labels[@]} == 0)) || write_test_envs "$stage/vmtest/tests" "${labels[@]}"

  (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort |
    busybox cpio -o -H newc -R 0:0 2>/dev/null | gzip -1) \
    >"$WORK/base.cpio.gz.new"
  mv "$WORK/base.cpio.gz.new" "$WORK/base.cpio.gz"
  note "initramfs $(du -h "$WORK/base.cpio.gz" | cut -f1): $WORK/base.cpio.gz"
}
