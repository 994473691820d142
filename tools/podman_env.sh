# shellcheck shell=bash
# Sourced (bash) by tools/build_images.sh and tools/images_demo.sh: the
# podman flags this host needs, in two arrays, and a few shared names.
#   PODMAN_GLOBAL  global flags of every podman call (the OCI runtime)
#   PODMAN_LIMITS  flags of `podman build`, `run` and `create` (rlimits)
# Both are empty on an ordinary Debian 12 host with cgroup v2 and root's
# usual limits; each is set only where a check below says it must be.
# Installs Debian's podman, podman-compose, mmdebstrap and runc when any is
# missing (the images are opt-in: tools/install_deps.sh leaves them out);
# root or sudo.

TAGI_IMAGE_PREFIX=${TAGI_IMAGE_PREFIX:-localhost/tagi-ddp}

PODMAN_GLOBAL=()
PODMAN_LIMITS=()

# With their recommends, as tested: netavark, aardvark-dns (service names
# resolve inside a compose network) and iptables (published ports) named too.
podman_missing=()
for p in podman podman-compose mmdebstrap runc netavark aardvark-dns iptables; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || podman_missing+=("$p")
done
if [ ${#podman_missing[@]} -gt 0 ]; then
  echo "images: installing ${podman_missing[*]}"
  podman_sudo=()
  [ "$(id -u)" -eq 0 ] || podman_sudo=(sudo)
  if ! { "${podman_sudo[@]}" apt-get update -qq \
         && "${podman_sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
              apt-get install -y -qq "${podman_missing[@]}" >/dev/null; }; then
    echo "images: could not install ${podman_missing[*]}" >&2
    return 1
  fi
  unset podman_sudo
fi
unset podman_missing p

# crun (Debian's default runtime) refuses a cgroup v1 host whose unified
# (v2) hierarchy still holds a controller: "crun: cgroups in hybrid mode not
# supported, drop all controllers from cgroupv2". runc runs there.
if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ] \
   && [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null)" ]; then
  if ! command -v runc >/dev/null 2>&1; then
    echo "podman: this host mixes cgroup v1 and v2 controllers, which crun refuses," \
         "and runc is missing" >&2
    return 1
  fi
  PODMAN_GLOBAL+=(--runtime runc)
fi

# Rootful podman asks for 1048576 open files and processes in every
# container; without CAP_SYS_RESOURCE (podman inside a container or a
# sandbox) that fails: "setrlimit `RLIMIT_NOFILE`: Operation not permitted".
# Ask for no more than this shell's hard limits; podman itself runs with at
# most 32768 processes, hence that cap.
nofile_hard=$(ulimit -Hn)
nproc_hard=$(ulimit -Hu)
[ "$nofile_hard" = unlimited ] || [ "$nofile_hard" -gt 1048576 ] && nofile_hard=1048576
[ "$nproc_hard" = unlimited ] || [ "$nproc_hard" -gt 32768 ] && nproc_hard=32768
PODMAN_LIMITS+=(--ulimit "nofile=$nofile_hard:$nofile_hard" --ulimit "nproc=$nproc_hard:$nproc_hard")
unset nofile_hard nproc_hard

podman_() { podman "${PODMAN_GLOBAL[@]}" "$@"; }
