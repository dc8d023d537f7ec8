#!/usr/bin/env bash
# Runs the record benches and captures what benches/results/record.md cites: date,
# hardware, toolchain, crate versions, load before and after, and criterion's output.
#
#   bash benches/run-record.sh [criterion filter or flags...]
#
# Writes target/bench-logs/record-<UTC timestamp>.txt and prints its path. Extra
# arguments go to criterion (after `--`), e.g. `bash benches/run-record.sh verify/file_100k`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/bench-logs
log="target/bench-logs/record-$(date -u +%Y%m%dT%H%M%SZ).txt"
{
    echo "## command: cargo bench -p aegis-benches --bench record -- $*"
    echo "## date: $(date -u)"
    echo "## cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) online CPUs"
    echo "## kernel: $(uname -r)"
    echo "## memory: $(free -h | awk '/^Mem:/ {print $2 " total"}')"
    echo "## rustc: $(rustc --version)"
    for c in ed25519-dalek curve25519-dalek sha2 criterion; do
        v=$(awk -v n="$c" '$0 == "name = \"" n "\"" {getline; print $3}' Cargo.lock | tr -d '"' | paste -sd, -)
        echo "## crate: $c $v"
    done
    echo "## load before: $(uptime)"
} >"$log"
cargo bench -p aegis-benches --bench record -- "$@" 2>&1 | tee -a "$log"
echo "## load after: $(uptime)" >>"$log"
echo "wrote $log"
