#!/bin/sh
# Project setup: system packages the test suite needs beyond cargo.
#
#   sudo scripts/setup.sh
#
# Idempotent: installs only what is missing and says what it does.
#   chromium, chromium-driver  headless browser (and its WebDriver) for the
#                              `ptlab show` picture tests
#                              (crates/ptlab-show/tests/chromium.rs) and the
#                              layout test of the reproduce report and show
#                              pages (crates/ptlab/tests/layout_chromium.rs);
#                              without them those tests print SKIP and pass.
#   fonts-dejavu-core          the font the pictures name first, so that
#                              screenshots look the same everywhere.
set -eu

need=""
for pkg in chromium chromium-driver fonts-dejavu-core; do
    if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        echo "setup: $pkg is already installed"
    else
        need="$need $pkg"
    fi
done

if [ -z "$need" ]; then
    echo "setup: nothing to do"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install:$need (run: sudo $0)" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: apt-get not found; install these Debian packages by hand:$need" >&2
    exit 1
fi

echo "setup: apt-get update"
apt-get update -q
echo "setup: apt-get install$need"
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need
echo "setup: installed:$need"
/usr/bin/chromium --version 2>/dev/null || true
