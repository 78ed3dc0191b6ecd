#!/usr/bin/env bash
# Installs the Debian packages lamplighter's tests and demos use, when missing:
# Slurm (slurmctld, slurmd, client) and munge for the real test cluster,
# systemd for `systemd-analyze verify` of the unit files, gcc for the simulated GPU library,
# etcd-server for the bare-metal coordination tests (started on free loopback ports by the lab, never as a service).
set -euo pipefail
need=()
command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || need+=(slurmd)
command -v sbatch >/dev/null 2>&1 || need+=(slurm-client)
command -v munged >/dev/null 2>&1 || need+=(munge)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
[ ${#need[@]} -eq 0 ] && exit 0
echo "lamplighter: installing Debian packages: ${need[*]}" >&2
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "lamplighter: need root (or sudo) to apt-get install ${need[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
