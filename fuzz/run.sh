#!/usr/bin/env bash
# Runs one cargo-fuzz target of this workspace on stable Rust.
#
#   fuzz/run.sh TARGET [LIBFUZZER_ARGS...]      e.g.  fuzz/run.sh dispatch -runs=10000000
#   fuzz/run.sh build                           builds every target
#   fuzz/run.sh list                            lists the targets
#
# The recipe (see fuzz/README.md): `cargo install cargo-fuzz` once, then
# cargo-fuzz with RUSTC_BOOTSTRAP=1, which lets the stable compiler take the
# -Zsanitizer=address and sanitizer-coverage flags cargo-fuzz passes, and
# --features fuzzing, which turns on the libFuzzer targets (off by default,
# so that workspace builds compile no C++). Each run works on a copy of the
# committed seed corpus under target/fuzz-corpus/TARGET (new inputs stay
# out of the repository); crashes go to fuzz/artifacts/TARGET/.
#
# The dispatch target needs root for its fence (a private tmpfs in a mount
# namespace of its own, and a chroot); it refuses to touch anything else.
set -euo pipefail

cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: installing cargo-fuzz (from the crate registry)" >&2
    cargo install --locked cargo-fuzz
fi

target="${1:?usage: fuzz/run.sh TARGET|build|list [LIBFUZZER_ARGS...]}"
shift
case "$target" in
    list) exec cargo fuzz list ;;
    build) exec cargo fuzz build --features fuzzing ;;
esac

work="target/fuzz-corpus/$target"
mkdir -p "$work" "fuzz/artifacts/$target"
if [ -d "fuzz/corpus/$target" ]; then
    cp -n fuzz/corpus/"$target"/* "$work"/ 2>/dev/null || true
fi
# Defaults (later arguments override them): inputs up to 2 KiB (about 20
# requests for dispatch), a 10 s timeout per input (a hang is a finding).
exec cargo fuzz run --features fuzzing "$target" "$work" -- \
    -max_len=2048 -timeout=10 -print_final_stats=1 "$@"
