#!/usr/bin/env bash
# Builds a local stand-in for the public python:3.10-slim-bookworm base image, for machines that
# reach no container registry: a Debian 12 (bookworm) minbase root file system made with
# debootstrap, this machine's CPython 3.10 copied into it at /usr/local (where the public image
# has its Python), imported into podman's image store. Then:
#   bash kubeflow/local_base.sh            # prints the image name when done
#   BASE_IMAGE=localhost/tfx-scaleout-base:py3.10-bookworm BEAM_BOOT_IMAGE=no-beam-boot \
#     ENGINE=podman bash kubeflow/build_images.sh --no-push --cpu-only
# Idempotent: nothing is done when the image already exists (FORCE=1 rebuilds it).
# Needs root (debootstrap, chroot), podman, debootstrap and a Debian mirror.
# Environment:
#   LOCAL_BASE_IMAGE  the image name (default localhost/tfx-scaleout-base:py3.10-bookworm)
#   PYTHON310_PREFIX  the CPython 3.10 installation to copy (default: python3.10 on PATH if it
#                     is not Debian's, else pyenv's newest $(pyenv root)/versions/3.10*)
#   DEBIAN_MIRROR     default http://deb.debian.org/debian
#   SUITE             default bookworm (its glibc must be the one the Python was built against
#                     or newer)
# What it is not: Docker Hub's python image is built from source against Debian's libraries by
# the Python Docker maintainers; this one is whatever CPython build the machine has. It is good
# for building and running the project's image here, not for publishing.
set -euo pipefail

image=${LOCAL_BASE_IMAGE:-localhost/tfx-scaleout-base:py3.10-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=${SUITE:-bookworm}
# The shared libraries CPython's extension modules link against (ldd lib-dynload/*.so), from
# Debian; the check below fails when one is still missing. ca-certificates as in the public
# image (the Debian roots; a host's own CA is mounted at build time, never baked in).
packages=libssl3,libsqlite3-0,libffi8,libbz2-1.0,liblzma5,zlib1g,libreadline8,libncursesw6
packages=$packages,libtinfo6,libuuid1,libnsl2,libtirpc3,libexpat1,libcrypt1,ca-certificates

log() { echo "local_base.sh: $*"; }
die() { echo "local_base.sh: $*" >&2; exit 1; }

command -v podman >/dev/null 2>&1 || die "podman is required (apt-get install podman runc)"
if podman image exists "$image" && [ "${FORCE:-0}" != 1 ]; then
  log "$image exists; nothing to do (FORCE=1 rebuilds it)"
  echo "$image"
  exit 0
fi
command -v debootstrap >/dev/null 2>&1 || die "debootstrap is required (apt-get install debootstrap)"
[ "$(id -u)" = 0 ] || die "debootstrap and chroot need root"

find_prefix() {
  if [ -n "${PYTHON310_PREFIX:-}" ]; then
    echo "$PYTHON310_PREFIX"; return
  fi
  local candidate
  if command -v pyenv >/dev/null 2>&1; then
    for candidate in $(ls -d "$(pyenv root)"/versions/3.10* 2>/dev/null | sort -V -r); do
      [ -x "$candidate/bin/python3.10" ] && { echo "$candidate"; return; }
    done
  fi
  if command -v python3.10 >/dev/null 2>&1; then
    candidate=$(python3.10 -c 'import sys; print(sys.base_prefix)')
    # Debian/Ubuntu's /usr Python is split over many packages: not copyable this way.
    [ "$candidate" != /usr ] && { echo "$candidate"; return; }
  fi
  die "no CPython 3.10 installation found; set PYTHON310_PREFIX"
}
prefix=$(find_prefix)
[ -x "$prefix/bin/python3.10" ] || die "$prefix/bin/python3.10 does not exist"
version=$("$prefix/bin/python3.10" -c 'import platform; print(platform.python_version())')

work=$(mktemp -d "${TMPDIR:-/tmp}/local-base.XXXXXX")
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT
root=$work/root
started=$SECONDS

log "debootstrap --variant=minbase $suite from $mirror (about 30-60 s)"
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }

log "copying CPython $version from $prefix to /usr/local"
# The interpreter, its shared library, the standard library and the C headers (the lock has an
# sdist with a C++ extension; the public image has them too); not the tests, not Tk (no X
# libraries in the base), not the site-packages of the machine's installation, not the
# scripts whose #! names the machine's prefix (pip, idle, pydoc, 2to3: venv brings pip).
mkdir -p "$root/usr/local/bin" "$root/usr/local/lib"
cp -a "$prefix/bin/python3.10" "$root/usr/local/bin/"
ln -sf python3.10 "$root/usr/local/bin/python3"
ln -sf python3.10 "$root/usr/local/bin/python"
cp -a "$prefix"/lib/libpython3* "$root/usr/local/lib/"
mkdir -p "$root/usr/local/include"
cp -a "$prefix/include/python3.10" "$root/usr/local/include/"
tar -C "$prefix/lib" \
  --exclude=python3.10/test --exclude=python3.10/site-packages/'*' \
  --exclude=python3.10/tkinter --exclude=python3.10/idlelib --exclude=python3.10/turtledemo \
  --exclude='python3.10/lib-dynload/_tkinter*' --exclude='__pycache__' \
  -c python3.10 | tar -C "$root/usr/local/lib" -x
mkdir -p "$root/usr/local/lib/python3.10/site-packages"
# /usr/local/lib is in Debian's default loader path (the binary's RUNPATH names the machine's
# prefix, which does not exist in the image).
chroot "$root" /sbin/ldconfig

log "checking the interpreter inside the root file system"
missing=$(chroot "$root" /bin/sh -c \
  'for f in /usr/local/bin/python3.10 /usr/local/lib/python3.10/lib-dynload/*.so; do
     ldd "$f" | grep "not found" | sed "s|^|$f: |"; done' || true)
[ -z "$missing" ] || die "shared libraries missing in the base: $missing"
chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin /usr/local/bin/python -c '
import bz2, ctypes, hashlib, lzma, readline, sqlite3, ssl, sys, uuid, venv, zlib, pyexpat
assert sys.version_info[:2] == (3, 10), sys.version
assert sys.prefix == "/usr/local", sys.prefix
ssl.create_default_context()
print("python", sys.version.split()[0], "ssl", ssl.OPENSSL_VERSION, "sqlite", sqlite3.sqlite_version)
'
chroot "$root" /usr/local/bin/python -m ensurepip --version >/dev/null
[ -f "$root/usr/local/include/python3.10/Python.h" ] || die "no Python.h under $prefix/include"

# What the minbase leaves that an image does not need.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
  "$root"/var/log/* "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*

log "importing as $image"
# The public image's settings: its PATH, C.UTF-8, python3 as the command.
tar --numeric-owner -C "$root" -c . | podman import \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "ENV PYTHON_VERSION=$version" \
  --change 'CMD ["python3"]' \
  - "$image" >/dev/null
log "done in $((SECONDS - started)) s: $(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}')"
echo "$image"
