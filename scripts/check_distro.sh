#!/usr/bin/env bash
# check_distro.sh RELEASE [ROOT] [-- COMMAND...]: runs the README's test command on a clean root
# of a Debian release, to show that the two README commands work there and not only on the
# machine at hand. RELEASE is debian12 (bookworm) or debian13 (trixie). The root is made with
# debootstrap from deb.debian.org in ROOT (default /var/tmp/mixtape-RELEASE; kept, so a second
# run starts from the installed packages), this tree's committed HEAD is copied into it
# (git archive), and inside it (chroot) the project's own scripts install what is missing and
# run: ./scripts/test.sh by default, or COMMAND. Needs root and the Debian archive; takes about
# 40 minutes on 2 cores from nothing (the packages, then a full build of every stage).
#
#   sudo ./scripts/check_distro.sh debian13
#   sudo ./scripts/check_distro.sh debian13 -- ./scripts/run_main.sh --smoke
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
release=${1:?usage: check_distro.sh debian12|debian13 [ROOT] [-- COMMAND...]}
shift
case "$release" in
  debian12) suite=bookworm ;;
  debian13) suite=trixie ;;
  *) echo "check_distro: unknown release '$release' (debian12 or debian13)" >&2; exit 2 ;;
esac
root=/var/tmp/mixtape-$release
if [ $# -gt 0 ] && [ "$1" != -- ]; then root=$1; shift; fi
[ "${1:-}" = -- ] && shift
command=("$@")
[ ${#command[@]} -eq 0 ] && command=(./scripts/test.sh)
[ "$(id -u)" -eq 0 ] || { echo "check_distro: needs root (debootstrap, chroot)" >&2; exit 2; }

if ! command -v debootstrap >/dev/null; then
  echo "check_distro: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
fi
if [ ! -x "$root/usr/bin/apt-get" ]; then
  echo "check_distro: debootstrap $suite into $root"
  debootstrap --variant=minbase "$suite" "$root" http://deb.debian.org/debian
fi

mounts=()
cleanup() { for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null || true; done; }
trap cleanup EXIT
for m in proc sys dev dev/pts; do
  mkdir -p "$root/$m"
  case $m in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs sys "$root/sys" ;;
    dev) mount --bind /dev "$root/dev" ;;
    dev/pts) mount -t devpts devpts "$root/dev/pts" ;;
  esac
  mounts+=("$root/$m")
done
cp /etc/resolv.conf "$root/etc/resolv.conf"

src=/src/mixtape
rm -rf "${root:?}$src"
mkdir -p "$root$src"
git -C "$here" archive HEAD | tar -x -C "$root$src"
echo "check_distro: $release ($(sed -n 's/^PRETTY_NAME=//p' "$root/etc/os-release")), tree $(git -C "$here" rev-parse --short HEAD): ${command[*]}"
start=$(date +%s)
status=0
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  /bin/bash -c "cd $src && ${command[*]}" || status=$?
echo "check_distro: $release: '${command[*]}' exited $status after $(($(date +%s) - start)) s"
exit $status
