# tests/vm/prepare.sh: `vm.sh prepare`, sourced by tests/vm/vm.sh: installs
# the packages (qemu, busybox, jemalloc), downloads and checks the two Debian
# kernels, builds the programs the VMs run and packs them with busybox, /init
# and the scenarios into the initramfs (cmd_prepare).  Uses vm.sh's settings
# (CACHE, WORK, HERE, SCENARIOS, BAZEL_CMD, JEMALLOC_SO) and die / skip /
# note.
# shellcheck shell=bash

# ---- packages -----------------------------------------------------------------

as_root() {
  if ((EUID == 0)); then
    "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo "$@"
  else
    return 1
  fi
}

pkg_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

apt_updated=0
apt_update_once() {
  ((apt_updated)) && return 0
  apt_updated=1
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null >&2
}

# install_or_skip PACKAGE...: installs the packages (none: nothing to do),
# or skips the suite if they cannot be.
install_or_skip() {
  (($# > 0)) || return 0
  note "installing $*"
  command -v apt-get >/dev/null || skip "no apt-get to install $*"
  apt_update_once || skip "apt-get update failed (not root and no sudo?)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "$@" </dev/null >&2 || skip "cannot install $*"
}

# Installs qemu-system-x86 and busybox-static (needed: else skip) and
# libjemalloc2 (the locality comparison; optional).
ensure_packages() {
  local -a missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  pkg_installed busybox-static || missing+=(busybox-static)
  install_or_skip "${missing[@]}"
  command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
  [[ -x /bin/busybox ]] || skip "no /bin/busybox"
  if [[ ! -e "$JEMALLOC_SO" ]] && ! pkg_installed libjemalloc2; then
    note "installing libjemalloc2 (for the comparison)"
    { apt_update_once &&
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends libjemalloc2 </dev/null >&2; } ||
      note "no libjemalloc2: the jemalloc figures are left out"
  fi
}

# ---- kernels --------------------------------------------------------------------

# The newest Debian package of a kernel series.
kernel_package() {
  local re
  case "$1" in
    6.1) re='^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' ;;
    6.12) re='^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$' ;;
    *) die "unknown kernel '$1' (6.1 or 6.12)" ;;
  esac
  apt-cache search --names-only "$re" 2>/dev/null | awk '{ print $1 }' |
    sort -V | tail -n 1
}

# Downloads and unpacks a kernel into $CACHE/kernels/SERIES/ (vmlinuz,
# config, package) unless it is there.  Only ./boot of the package is
# extracted: everything the VM needs is built in (checked below).
fetch_kernel() {
  local series="$1" dir="$CACHE/kernels/$1"
  [[ -s "$dir/vmlinuz" && -s "$dir/config" ]] && return 0
  local pkg
  pkg="$(kernel_package "$series")"
  if [[ -z "$pkg" ]]; then
    apt_update_once || true
    pkg="$(kernel_package "$series")"
  fi
  [[ -n "$pkg" ]] || skip "apt knows no linux-image-$series...-amd64-unsigned"
  note "downloading $pkg"
  local tmp
  tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
  # apt-get download as root warns that the _apt user cannot write here.
  if ! (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>"$tmp/err"); then
    cat "$tmp/err" >&2
    rm -rf "$tmp"
    skip "cannot download $pkg"
  fi
  mkdir -p "$tmp/x"
  dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp/x" ./boot ||
    die "cannot unpack $pkg"
  mkdir -p "$dir"
  cp "$tmp"/x/boot/vmlinuz-* "$dir/vmlinuz.new"
  cp "$tmp"/x/boot/config-* "$dir/config"
  echo "$pkg" >"$dir/package"
  mv "$dir/vmlinuz.new" "$dir/vmlinuz"
  rm -rf "$tmp"
}

check_kernel_config() {
  local cfg="$CACHE/kernels/$1/config" opt
  for opt in SERIAL_8250_CONSOLE BLK_DEV_INITRD RD_GZIP NUMA ACPI_NUMA RSEQ \
    MEMBARRIER DEVTMPFS TMPFS MIGRATION; do
    grep -q "^CONFIG_$opt=y" "$cfg" ||
      die "kernel $1 ($(cat "$CACHE/kernels/$1/package")) lacks built-in CONFIG_$opt"
  done
}

# ---- building and packing -------------------------------------------------------

# The test binaries the scenarios use ("gtest PKG/NAME ..." lines).
scenario_tests() {
  sed -nE 's/^[[:space:]]*gtest[[:space:]]+([A-Za-z0-9_]+\/[A-Za-z0-9_]+).*/\1/p' \
    "$SCENARIOS"/*.sh | sort -u
}

# Writes NAME.env (the `env` of each test target, as KEY='VALUE' lines) for
# the labels given, into DIR/PKG/.
write_test_envs() {
  local dir="$1"
  shift
  local query
  query="set($*)"
  "${BAZEL_CMD[@]}" query --output=build "$query" 2>/dev/null </dev/null |
    awk -v dir="$dir" '
      /^#/ { pkg = $0; sub(/.*\/tests\//, "", pkg); sub(/\/BUILD(\.bazel)?:.*/, "", pkg) }
      /^  name = "/ { name = $0; sub(/^  name = "/, "", name); sub(/".*/, "", name)
                      file = dir "/" pkg "/" name ".env"; printf "" > file }
      /^  env = \{/ {
        s = $0; sub(/^  env = \{/, "", s); sub(/\},?$/, "", s)
        n = split(s, kv, /", "/)
        for (i = 1; i <= n; i++) {
          pair = kv[i]; gsub(/^"|"$/, "", pair)
          k = pair; sub(/": ".*/, "", k)
          v = pair; sub(/^[^"]*": "/, "", v)
          printf "%s=\047%s\047\n", k, v >> file
        }
      }'
}

# Copies a binary or library into the staging root at the same path as on
# the host, without debug info, plus (for dynamic ones) every library ldd
# finds and the loader.
stage_file() {
  local src="$1" dst="$2"
  mkdir -p "$(dirname "$dst")"
  strip --strip-debug -o "$dst" "$src" 2>/dev/null || cp -L "$src" "$dst"
  chmod u+w "$dst"
}

stage_libs() {
  local stage="$1" bin="$2" lib
  # "libx.so => /path (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)".
  while read -r lib; do
    [[ -n "$lib" && -e "$lib" ]] || continue
    [[ -e "$stage$lib" ]] || stage_file "$lib" "$stage$lib"
  done < <(ldd "$bin" 2>/dev/null | sed -nE 's#.*=> (/[^ ]+) .*#\1#p; s#^[[:space:]]*(/[^ ]+) \(0x.*#\1#p')
}

cmd_prepare() {
  ensure_packages
  mkdir -p "$CACHE/kernels" "$WORK"
  fetch_kernel 6.1
  fetch_kernel 6.12
  check_kernel_config 6.1
  check_kernel_config 6.12

  local -a tests=() labels=()
  mapfile -t tests < <(scenario_tests)
  local t f
  for t in "${tests[@]}"; do labels+=("//tests/${t%/*}:${t##*/}"); done
  note "building with ${BAZEL_CMD[*]}"
  local log="$WORK/build.log" rc=0
  # --symlink_prefix=/: leave the checkout's bazel-* symlinks alone.
  "${BAZEL_CMD[@]}" build --keep_going --symlink_prefix=/ \
    //rseq:info //:libcidmalloc.so //tests/vm:all "${labels[@]}" \
    </dev/null >"$log" 2>&1 || rc=$?
  local bin
  bin="$("${BAZEL_CMD[@]}" info bazel-bin </dev/null 2>/dev/null)" ||
    die "bazel info bazel-bin failed"
  # Every cc_binary of //tests/vm goes to /vmtest/bin.
  local -a vm_bins=()
  mapfile -t vm_bins < <("${BAZEL_CMD[@]}" query 'kind(cc_binary, //tests/vm:all)' \
    2>/dev/null </dev/null | sed 's/.*://')
  ((${#vm_bins[@]} > 0)) || die "bazel query found no cc_binary in //tests/vm"
  local need
  for need in rseq/info libcidmalloc.so "${vm_bins[@]/#/tests/vm/}"; do
    if ((rc != 0)) && [[ ! -x "$bin/$need" ]]; then
      cat "$log" >&2
      die "bazel build failed for $need (log above)"
    fi
  done
  if ((rc != 0)); then
    note "bazel build --keep_going exit $rc; the scenarios use what was built:"
    grep -E '^ERROR' "$log" | head -n 20 >&2 || true
  fi

  # Staging root: busybox, /init, the helpers, scenarios, programs, libs.
  local stage="$WORK/stage"
  rm -rf "$stage"
  mkdir -p "$stage"/{bin,dev,proc,sys,tmp,vmtest/bin,vmtest/lib,vmtest/tests,vmtest/scenarios}
  cp /bin/busybox "$stage/bin/busybox"
  cp "$HERE/guest/init" "$stage/init"
  cp "$HERE/guest/lib.sh" "$stage/vmtest/lib.sh"
  cp "$SCENARIOS"/*.sh "$stage/vmtest/scenarios/"
  chmod 755 "$stage/init"
  stage_file "$bin/rseq/info" "$stage/vmtest/bin/info"
  for f in "${vm_bins[@]}"; do
    stage_file "$bin/tests/vm/$f" "$stage/vmtest/bin/$f"
  done
  stage_file "$bin/libcidmalloc.so" "$stage/vmtest/lib/libcidmalloc.so"
  for f in "$stage"/vmtest/bin/* "$stage/vmtest/lib/libcidmalloc.so"; do
    stage_libs "$stage" "$f"
  done
  if [[ -e "$JEMALLOC_SO" ]]; then
    stage_file "$JEMALLOC_SO" "$stage$JEMALLOC_SO"
    stage_libs "$stage" "$JEMALLOC_SO"
    echo "$JEMALLOC_SO" >"$stage/vmtest/jemalloc-path"
  fi
  for t in "${tests[@]}"; do
    if [[ -x "$bin/tests/$t" ]]; then
      stage_file "$bin/tests/$t" "$stage/vmtest/tests/$t"
      stage_libs "$stage" "$bin/tests/$t"
    else
      note "not built: //tests/${t%/*}:${t##*/} (its scenarios will fail)"
    fi
  done
  ((${#labels[@]} == 0)) || write_test_envs "$stage/vmtest/tests" "${labels[@]}"

  # cpio newc, gzip.  The kernel unpacks its built-in initramfs (which has
  # /dev/console) first, then this one over it.
  (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort |
    busybox cpio -o -H newc -R 0:0 2>/dev/null | gzip -1) >"$WORK/base.cpio.gz.new"
  mv "$WORK/base.cpio.gz.new" "$WORK/base.cpio.gz"
  note "initramfs $(du -h "$WORK/base.cpio.gz" | cut -f1) ($(du -sh "$stage" | cut -f1) unpacked): $WORK/base.cpio.gz"
}
