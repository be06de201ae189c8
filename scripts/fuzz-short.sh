#!/usr/bin/env bash
# Runs every fuzz target of the library for a short, bounded time (FUZZTIME each, default 10s), for
# `make test`. The committed seed corpora (testdata/fuzz/<Target>/) also run as plain tests in
# `go test ./...`; this adds fresh inputs. A failure leaves the failing input in the package's
# testdata/fuzz/<Target>/ directory: commit it with the fix, so it stays a regression test.
#
# Coverage guidance covers Baton's own packages, not the standard library or the dependencies.
# `go test -fuzz` instruments every package in the binary, so on a cold cache it compiles the
# library's whole dependency tree (Temporal's SDK and API, etcd's client, gRPC) a third time: about
# 260 s of CPU here, beside the integration tests. Built as below, only Baton's packages are compiled
# instrumented (`-gcflags=<module>/...=-d=libfuzzer`, the flag go test -fuzz adds to each package);
# the rest come from the cache, already compiled for the README's snippet and the Temporal server
# (about 40 s of CPU cold), and an uninstrumented dependency runs at full speed: about 90,000
# inputs a second for FuzzWorkflowID against 7,000 fully instrumented. The binary runs as go test
# would run it: in its package's directory, with go test's fuzz cache for the package.
#
# One fuzzing worker per target (go test's default is one per CPU): beside the integration tests a
# second worker takes CPU they need, and one worker alone still tries several times the inputs that
# two fully instrumented workers did.
#
# Usage: scripts/fuzz-short.sh [FUZZTIME [-json]]     e.g. scripts/fuzz-short.sh 30s
#        (`make test` adds -json: its progress lines go to stderr, so stdout stays go test's own.)
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${1:-${FUZZTIME:-10s}}
json=${2:-}
[[ -z $json || $json == -json ]] || { echo "fuzz-short.sh: want FUZZTIME and -json at most, got $*" >&2; exit 2; }

# package              target
targets=(
	"./takeover          FuzzWorkflowID"
	"./heartbeat         FuzzDecode"
	"./registry          FuzzDecodeWorker"
	".                   FuzzLoadEnv"
	"./clients           FuzzLoadEnv"
)

module=$("$GO" list -m)
fuzzcache=$("$GO" env GOCACHE)/fuzz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/out
failed=()
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	corpus=$pkg/testdata/fuzz/$name
	importpath=$("$GO" list "$pkg")
	bin=$work/${name}.test
	echo "fuzz: $name in $pkg for $FUZZTIME" >&2
	if ! "$GO" test -c -o "$bin" -gcflags="$module/...=-d=libfuzzer" "$pkg" >"$out" 2>&1; then
		cat "$out" >&2
		failed+=("$name ($pkg: does not build)")
		continue
	fi
	run=("$bin" -test.paniconexit0 -test.timeout=10m -test.run='^$' -test.fuzz="^${name}\$" -test.parallel=1
		-test.fuzztime="$FUZZTIME" -test.fuzzcachedir="$fuzzcache/$importpath")
	[[ -n $json ]] && run=("$GO" tool test2json -t -p "$importpath" "${run[0]}" -test.v=test2json "${run[@]:1}")
	for attempt in 1 2; do
		inputs=$(find "$corpus" -type f 2>/dev/null | wc -l)
		if (cd "$pkg" && "${run[@]}") >"$out" 2>&1; then
			rc=0
		else
			rc=1
		fi
		# On a loaded machine the fuzzing coordinator can hit its own deadline while a worker is still
		# busy and report "context deadline exceeded": no input failed, and none was written to the
		# corpus. That, and only that, runs once more; a real finding always leaves its input.
		if ((rc != 0 && attempt == 1)) && (($(find "$corpus" -type f 2>/dev/null | wc -l) == inputs)) &&
			grep -q 'context deadline exceeded' "$out"; then
			echo "fuzz: $name stopped at the fuzzing engine's own deadline without a failing input; once more" >&2
			continue
		fi
		break
	done
	cat "$out"
	((rc == 0)) || failed+=("$name ($pkg)")
done

if ((${#failed[@]} > 0)); then
	echo "fuzz: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: all ${#targets[@]} targets passed ($FUZZTIME each)" >&2
