#!/bin/sh
# Type-check ptlab for arm64 Linux from any host:
#
#   rustup target add aarch64-unknown-linux-gnu   # once
#   scripts/check-arm64.sh
#
# With an aarch64 C cross-compiler (Debian: gcc-aarch64-linux-gnu, or
# CC_aarch64_unknown_linux_gnu set) every crate and target is checked:
#   cargo check --release --workspace --all-targets --target aarch64-unknown-linux-gnu
# Without one, ptlab-model's tests and benches are left out: its
# dev-dependency criterion depends on `alloca`, whose build script compiles
# C for the target (cc-rs looks for aarch64-linux-gnu-gcc). Everything else
# is checked with all its targets, and ptlab-model's library too; the model
# is pure Rust with nothing architecture-specific, so its tests lose little.
set -eu
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu

if [ -n "${CC_aarch64_unknown_linux_gnu:-}" ] || command -v aarch64-linux-gnu-gcc >/dev/null 2>&1; then
    echo "check-arm64: every crate and target for $target"
    exec cargo check --release --workspace --all-targets --target "$target"
fi

echo "check-arm64: no aarch64 C cross-compiler (aarch64-linux-gnu-gcc): checking every crate for $target" \
     "except ptlab-model's tests and benches (criterion -> alloca builds C)"
cargo check --release --workspace --exclude ptlab-model --all-targets --target "$target"
cargo check --release -p ptlab-model --lib --target "$target"
