#!/usr/bin/env bash
# What only the test command needs, beyond scripts/setup.sh, idempotently:
#   1. Debian's chromium at /usr/bin/chromium for the browser test of the Ferry page
#      (installed with apt-get when missing: as root, or through passwordless sudo);
#   2. promtool from Debian's prometheus package, unpacked into .venv/bin (not installed: no
#      Prometheus service), for the tests of the shipped alert rules;
#   3. Toxiproxy's server, built from the Go module proxy into .venv/bin/toxiproxy-server,
#      for the tests of network faults between Ferry and its clusters.
# The demo needs neither, so it runs without root or apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv"

die() { echo "test-tools: $*" >&2; exit 2; }

# The browser test drives Debian's chromium through playwright's bundled driver
# (`playwright install` cannot download here, and is never needed).
if [ ! -x /usr/bin/chromium ]; then
  echo "test-tools: installing Debian's chromium (apt-get; the browser test drives it headless)"
  command -v apt-get >/dev/null \
    || die "/usr/bin/chromium is missing and there is no apt-get: install Chromium at /usr/bin/chromium"
  as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null \
      || die "/usr/bin/chromium is missing: run 'apt-get install -y chromium' as root"
    as_root=(sudo -n)
  fi
  apt_log=$(mktemp)
  if ! { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
         && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
              apt-get install -y -qq -o Dpkg::Use-Pty=0 chromium; } >"$apt_log" 2>&1 \
     || [ ! -x /usr/bin/chromium ]; then
    tail -n 20 "$apt_log" >&2
    die "installing chromium with apt-get failed (log above, in full: $apt_log); install the Debian package chromium as root"
  fi
  rm -f "$apt_log"
fi

# promtool checks and unit-tests deploy/prometheus/ferry-rules.yml. Only the binary is needed,
# so the package is downloaded and unpacked, never installed.
if [ ! -x "$venv/bin/promtool" ]; then
  echo "test-tools: fetching promtool (Debian's prometheus package, unpacked into .venv/bin)"
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
    || die "promtool is missing and there is no apt-get/dpkg-deb: put promtool (Prometheus >= 2.42) at $venv/bin/promtool"
  deb_dir=$(mktemp -d)
  if ! (cd "$deb_dir" && apt-get download -qq prometheus >/dev/null 2>&1); then
    # A fresh machine may have no package lists yet.
    as_root=()
    [ "$(id -u)" -eq 0 ] || as_root=(sudo -n)
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
    (cd "$deb_dir" && apt-get download -qq prometheus >/dev/null 2>&1) \
      || die "could not download Debian's prometheus package (apt-get download prometheus); put promtool at $venv/bin/promtool"
  fi
  dpkg-deb -x "$deb_dir"/prometheus_*.deb "$deb_dir/x"
  install -m 0755 "$deb_dir/x/usr/bin/promtool" "$venv/bin/promtool"
  rm -rf "$deb_dir"
fi

# Toxiproxy (a TCP proxy that injects latency, stalls, cuts and bandwidth limits) sits
# between Ferry and the session's clusters in the network-fault tests. Built with the
# machine's Go from the module proxy, pinned.
TOXIPROXY_VERSION=v2.12.0
# (`go install` embeds no version the binary prints: the one built is kept beside it)
if [ ! -x "$venv/bin/toxiproxy-server" ] \
   || [ "$(cat "$venv/bin/toxiproxy-server.version" 2>/dev/null)" != "$TOXIPROXY_VERSION" ]; then
  echo "test-tools: building toxiproxy-server $TOXIPROXY_VERSION (go install, into .venv/bin)"
  command -v go >/dev/null \
    || die "toxiproxy-server is missing and there is no go: install Go >= 1.22, or put toxiproxy-server $TOXIPROXY_VERSION at $venv/bin/toxiproxy-server"
  go_bin=$(mktemp -d)
  GOBIN="$go_bin" GOFLAGS=-mod=mod go install \
    "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
    || die "go install github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION failed"
  install -m 0755 "$go_bin/server" "$venv/bin/toxiproxy-server"
  echo "$TOXIPROXY_VERSION" > "$venv/bin/toxiproxy-server.version"
  rm -rf "$go_bin"
fi
