#!/usr/bin/env bash
# Builds infra/Dockerfile with Debian's podman on a host that reaches Debian's mirror and PyPI but no
# image registry (this project's CI machines), then smoke-tests the image with no network at all.
#
#   scripts/build_image.sh [TAG]     TAG defaults to headwater:dev
#
# 1. A base image made here: a minimal Debian bookworm root file system with python3 and its venv
#    module (debootstrap), imported as localhost/headwater-base:bookworm. Its tarball is cached in
#    $HEADWATER_IMAGE_CACHE (default /var/cache/headwater-image) and the image in podman's store, so
#    both steps are skipped when already done. Elsewhere, `docker build` uses the Dockerfile's
#    default base (python:3.11-slim) and none of this is needed.
# 2. podman build --isolation chroot with BASE_IMAGE set to that base.
# 3. In the built image, with --network none: headwater doctor, headwater sync examples/docs, and a
#    query whose first hit must be ops/runbook.md. Then the image's size.
#
# Every step is bounded (timeout): debootstrap 30 min, the build 60 min, the smoke test 10 min.
# Needs root and Debian's podman, runc and debootstrap (apt-get install podman runc debootstrap).
# docs/operations.md ("The container image") says why runc and the explicit --ulimit values.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

tag="${1:-headwater:dev}"
base=localhost/headwater-base:bookworm
cache="${HEADWATER_IMAGE_CACHE:-/var/cache/headwater-image}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
started=$SECONDS

say() { printf '==> %s\n' "$*"; }
die() { echo "scripts/build_image.sh: $*" >&2; exit 1; }
elapsed() { echo "$((SECONDS - $1)) s"; }

[ "$(id -u)" = 0 ] || die "run as root: podman build and debootstrap need it here"
for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null || die "$tool is missing: apt-get install -y podman runc debootstrap"
done

# --- 1. the base image -----------------------------------------------------------------------------
tarball="$cache/bookworm-python3.tar"
if podman image exists "$base"; then
  say "base image $base is already in podman's store"
else
  if [ ! -s "$tarball" ]; then
    t=$SECONDS
    say "making a Debian bookworm root file system with python3 (debootstrap, ~2-4 minutes; cached in $cache)"
    mkdir -p "$cache"
    rootfs="$(mktemp -d "$cache/rootfs.XXXXXX")"
    trap 'rm -rf "$rootfs"' EXIT
    # What python:3.11-slim has and the Dockerfile relies on: python3 with venv and ensurepip's pip
    # wheel, and CA certificates for pip and apt over https.
    timeout 1800 debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 \
      || { tail -n 20 "$cache/debootstrap.log" >&2; die "debootstrap failed (full log: $cache/debootstrap.log); check that $mirror is reachable or set DEBIAN_MIRROR"; }
    # Security and point-release updates, as the official images have them.
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
    timeout 1200 chroot "$rootfs" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -qq && apt-get clean && rm -rf /var/lib/apt/lists/*' \
      >>"$cache/debootstrap.log" 2>&1 || die "updating the base's packages failed (log: $cache/debootstrap.log)"
    tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
    trap - EXIT
    say "root file system ready in $(elapsed $t)"
  fi
  say "importing $tarball as $base"
  # LANG as python:3.11-slim sets it: without it Python's text I/O is ASCII in some code paths.
  podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' "$tarball" "$base" >/dev/null
fi

# --- 2. the image ----------------------------------------------------------------------------------
t=$SECONDS
say "building $tag from infra/Dockerfile (podman build --isolation chroot, BASE_IMAGE=$base)"
# chroot isolation: RUN steps need no OCI runtime, so none of runc's or crun's limits apply while building.
# The RUN steps reach PyPI with this host's CA certificates: hosts whose egress goes through a TLS-
# inspecting proxy (this project's CI machines) trust its CA only there. Both are mounted for the build
# only, never written into a layer; pip.conf says nothing but where the bundle is (pip's own certifi
# bundle would not have the proxy's CA).
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca_bundle" ] || die "$ca_bundle is missing: apt-get install -y ca-certificates"
pip_conf="$(mktemp "${TMPDIR:-/tmp}/headwater-build-pip.XXXXXX.conf")"
trap 'rm -f "$pip_conf"' EXIT
printf '[global]\ncert = %s\n' "$ca_bundle" >"$pip_conf"
previous="$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
timeout 3600 podman build --isolation chroot --build-arg BASE_IMAGE="$base" \
  -v "$ca_bundle:$ca_bundle:ro" -v "$pip_conf:/etc/pip.conf:ro" \
  -f infra/Dockerfile -t "$tag" .
rm -f "$pip_conf"
trap - EXIT
build_seconds=$((SECONDS - t))
# The image this tag named before, with the layers only it used: each code change would otherwise leave
# ~200 MB behind, each dependency change ~2 GB (CI builds on the same machine every run).
current="$(podman image inspect --format '{{.Id}}' "$tag")"
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true  # still in use by another tag or container: kept
fi
say "built $tag in ${build_seconds} s"

# --- 3. the smoke test, offline --------------------------------------------------------------------
# Without CAP_SYS_RESOURCE (this host's root lacks it) no process may raise a hard limit, and podman
# 4.3 asks for nofile and nproc limits of 1048576 by default: crun and runc both fail with "setrlimit
# RLIMIT_NOFILE / RLIMIT_NPROC: operation not permitted". So the limits are given, as high as this
# process may grant: its own hard ones, and for nproc no more than kernel.pid_max, because podman
# itself lowers its RLIMIT_NPROC to pid_max before it starts the runtime. runc is named because crun
# (podman's default where both are installed) failed here even so.
nofile="$(ulimit -Hn)"
nproc="$(ulimit -Hu)"
pid_max="$(cat /proc/sys/kernel/pid_max)"
if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc="$pid_max"; fi
[ "$nofile" != unlimited ] || nofile=1048576
run=(timeout 600 podman run --rm --runtime runc --network none
     --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc"
     -v "$PWD/examples/docs:/data/docs:ro")
t=$SECONDS
say "smoke test in $tag with no network: headwater doctor, sync examples/docs, query"
# One container for the three steps: the embedded store lives in the container's /tmp and goes with it.
hits="$("${run[@]}" -w /tmp --entrypoint sh "$tag" -c '
  set -e
  headwater doctor >&2
  headwater sync /data/docs >&2
  headwater query "how do I rotate the Chroma token?" --json
')" || die "the smoke test failed in $tag (its output is above)"
first="$(printf '%s' "$hits" | python3 -c 'import json, sys; hits = json.load(sys.stdin); print(hits[0]["uri"] if hits else "")')"
case "$first" in
  *ops/runbook.md) say "query's first hit: $first" ;;
  *) die "the query's first hit is ${first:-nothing}, expected ops/runbook.md" ;;
esac
say "smoke test passed in $(elapsed $t)"

size="$(podman image inspect --format '{{.Size}}' "$tag")"
say "image $tag: $((size / 1000000)) MB (build ${build_seconds} s, all steps $(elapsed $started))"
