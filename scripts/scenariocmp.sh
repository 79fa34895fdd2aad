#!/usr/bin/env bash
# Compares benchmark scenarios (bench/cmd/granary-bench) of two revisions
# on this machine: builds the command at each revision, runs them in
# alternation (old, new, old, new, ...) so that both see the same drift of
# a shared machine, and summarises the runs with benchstat, each run's
# throughput turned into a time per operation.
#
#   scripts/scenariocmp.sh OLD [NEW]     NEW defaults to the working tree
#
# Settings, from the environment:
#   PAIRS      alternations (default 8)
#   SCENARIOS  the -scenario list (default tell,concurrent-ping)
#   FLAGS      more flags for granary-bench (default -duration 3s -warmup 1s)
#   OUT        where the two run files go (default a new temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

old=${1:?usage: scripts/scenariocmp.sh OLD [NEW]}
new=${2:-}
pairs=${PAIRS:-8}
scenarios=${SCENARIOS:-tell,concurrent-ping}
flags=${FLAGS:--duration 3s -warmup 1s}
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
	(cd "$work/$side" && go build -o "$work/$side.bench" ./bench/cmd/granary-bench)
	: >"$out/$side.txt"
done

# Each JSON result line becomes a benchmark line benchstat reads:
# BenchmarkScenario/<scenario>/<variant> 1 <ns per op> ns/op <allocs> allocs/op
tobench() {
	python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    name = "BenchmarkScenario/%s/%s" % (r["scenario"], r["variant"].replace(" ", "_"))
    print("%s 1 %.1f ns/op %.2f allocs/op" % (name, 1e9 / r["ops_per_sec"], r["allocs_per_op"]))
'
}

echo "scenariocmp: $pairs pairs of $scenarios; runs in $out" >&2
for i in $(seq "$pairs"); do
	for side in old new; do
		# shellcheck disable=SC2086
		"$work/$side.bench" -scenario "$scenarios" $flags | tobench >>"$out/$side.txt"
	done
	echo "scenariocmp: pair $i of $pairs done" >&2
done
cd "$out" && "$benchstat" old.txt new.txt
