#!/usr/bin/env bash
# Compares the Go benchmarks of two revisions on this machine: builds the
# test binary of a package at each revision, runs them in alternation
# (old, new, old, new, ...) so that both see the same drift of a shared
# machine, and summarises the runs with benchstat.
#
#   scripts/benchcmp.sh OLD [NEW]     NEW defaults to the working tree
#
# Settings, from the environment:
#   PAIRS   alternations (default 8; each run is -count=1)
#   BENCH   the -bench regexp (default the runtime's call benchmarks)
#   PKG     the package (default ./silo)
#   OUT     where the two run files go (default a new temporary directory)
#
# benchstat comes from make's bin directory (make bin/benchstat builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

old=${1:?usage: scripts/benchcmp.sh OLD [NEW]}
new=${2:-}
pairs=${PAIRS:-8}
bench=${BENCH:-'^Benchmark(LocalCall|GrainToGrain|CrossSiloCall|CrossSiloThroughput|CrossSiloOneWay)$'}
pkg=${PKG:-./silo}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
benchstat="$root/bin/benchstat"
[ -x "$benchstat" ] || make -s "$benchstat"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# shellcheck source=lib/revtree.sh
. "$root/scripts/lib/revtree.sh"

for side in old new; do
	rev=$old
	[ "$side" = new ] && rev=$new
	tree "$rev" "$work/$side"
	(cd "$work/$side" && go test -c -o "$work/$side.test" "$pkg")
	: >"$out/$side.txt"
done

echo "benchcmp: $pairs pairs of $bench in $pkg; runs in $out" >&2
for i in $(seq "$pairs"); do
	for side in old new; do
		(cd "$work/$side/$pkg" && "$work/$side.test" -test.run '^$' -test.bench "$bench" \
			-test.benchmem -test.count 1) >>"$out/$side.txt"
	done
	echo "benchcmp: pair $i of $pairs done" >&2
done
cd "$out" && "$benchstat" old.txt new.txt
