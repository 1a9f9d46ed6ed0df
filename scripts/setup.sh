#!/usr/bin/env bash
# Sets up everything Ferry needs on a fresh machine, idempotently:
#   1. a virtualenv in .venv with the pinned lock (requirements.txt) and ferry itself;
#   2. the Kafka broker jars (Maven Central) for the local clusters;
#   3. the Delta Lake jars (Maven Central) for Spark;
#   4. Debian's chromium at /usr/bin/chromium for the browser test of the Ferry page
#      (installed with apt-get when missing: as root, or through passwordless sudo);
#   5. promtool from Debian's prometheus package, unpacked into .venv/bin (not installed: no
#      Prometheus service), for the tests of the shipped alert rules.
# Needs: python3 >= 3.11, java >= 17, mvn. Re-running skips what is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

die() { echo "setup: $*" >&2; exit 2; }

py=${FERRY_PYTHON:-python3}
command -v "$py" >/dev/null || die "python3 not found: install Python >= 3.11 or set FERRY_PYTHON"
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || die "Python >= 3.11 is required ($("$py" --version 2>&1)); set FERRY_PYTHON to one"
command -v java >/dev/null || die "java not found: install a JDK >= 17 (Kafka 4 and Spark 4 need it)"
command -v mvn >/dev/null || die "mvn not found: install Maven (it fetches the Kafka and Delta jars)"

venv="$root/.venv"
stamp="$venv/.ferry-lock.sha256"
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  "$py" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing pinned Python dependencies (first run builds pyspark: a few minutes)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "pip==26.3"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
  "$venv/bin/python" -m pip check
  echo "$want" > "$stamp"
fi

# The browser test drives Debian's chromium through playwright's bundled driver
# (`playwright install` cannot download here, and is never needed).
if [ ! -x /usr/bin/chromium ]; then
  echo "setup: installing Debian's chromium (apt-get; the browser test drives it headless)"
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
  echo "setup: fetching promtool (Debian's prometheus package, unpacked into .venv/bin)"
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

echo "setup: fetching jars (Kafka brokers, Delta Lake) from Maven Central"
"$venv/bin/ferry" local jars
echo "setup: done"
