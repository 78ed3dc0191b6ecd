#!/usr/bin/env bash
# promtool for the alert rules' tests (tests/deploy): taken out of Debian's prometheus package into
# build/promtool/ without installing it, so no Prometheus server is enabled or started on this machine.
# Prints nothing and exits 0 when Debian has no such package: the tests then skip, saying why.
set -euo pipefail
out="${1:-build/promtool}"
[ -x "$out/usr/bin/promtool" ] && exit 0
command -v promtool >/dev/null 2>&1 && exit 0
command -v apt-get >/dev/null 2>&1 || exit 0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp"   # apt's download user (_apt) writes here
if ! (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1); then
  (apt-get update -qq >/dev/null 2>&1 && cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1) || exit 0
fi
mkdir -p "$out"
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
install -D -m 0755 "$tmp/x/usr/bin/promtool" "$out/usr/bin/promtool"
