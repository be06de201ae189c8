#!/usr/bin/env bash
# `make test`: the library's unit tests (race detector on), the Kubernetes manifests' validation,
# short fuzzing, then the integration tests against real servers. Every phase runs even when an earlier one failed, and all of them feed one
# `go test -json` stream to gotestsum, so the run ends with one summary of every failure, whichever
# phase it came from, followed by what each phase cost.
#
# Usage: scripts/test.sh [PHASE...]   phases: unit manifests fuzz integration (default: all four, in that
# order)
#
# Environment: GO, GOTESTSUM (the binary; the Makefile installs it), FUZZTIME (per fuzz target),
# RACE_TIMEOUT, INTEGRATION_TIMEOUT, TEST_FLAGS (extra go test flags for unit and integration, e.g.
# "-run TestX"), UNIT_PKGS and INTEGRATION_PKGS (default ./... each), INTEGRATION_PARALLEL (integration
# packages run at once; default twice the CPUs), TEST_FORMAT (gotestsum's --format).
set -uo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
RACE_TIMEOUT=${RACE_TIMEOUT:-10m}
INTEGRATION_TIMEOUT=${INTEGRATION_TIMEOUT:-25m}
read -ra extra <<<"${TEST_FLAGS:-}"
read -ra unit_pkgs <<<"${UNIT_PKGS:-./...}"
read -ra integration_pkgs <<<"${INTEGRATION_PKGS:-./...}"
# The integration packages spend most of their time waiting on servers (TTLs, takeovers, reconcile
# cycles), not computing: four at a time on 2 cores took the phase from 5m26s to 2m56s quiet, and to
# 3m29s with two `yes > /dev/null` beside it, every test passing. go test's default is one per CPU.
INTEGRATION_PARALLEL=${INTEGRATION_PARALLEL:-$((2 * $(nproc)))}

# -ldflags=-w: no DWARF in the test binaries. Nothing in a test run reads it (stack traces come from
# the symbol table, which stays), and linking the integration binaries is where a warm run spends
# much of its time.
common=(-race -count=1 -ldflags=-w "${extra[@]}")

# The phases, run by gotestsum through --raw-command: JSON on stdout. gotestsum reports whatever comes
# on stderr as errors, so the fuzz script's progress lines and the phase timings go to $TEST_REPORT,
# printed after gotestsum's summary.
#
# Fuzzing, when integration runs too, runs beside the integration packages' tests: they wait on
# servers far more than they compute, and fuzzing is compute alone. Its JSON is held in a file and
# follows integration's, so that the two streams do not interleave.
timing() { printf '%-12s %-7s %dm%02ds%s' "$1" "$2" $(($3 / 60)) $(($3 % 60)) "${4:-}"; }
if [[ ${1:-} == --emit ]]; then
	shift
	status=0
	timings=()
	fuzz_beside=0
	[[ " $* " == *" fuzz "* && " $* " == *" integration "* ]] && fuzz_beside=1
	for phase in "$@"; do
		start=$SECONDS
		case $phase in
		unit) "$GO" test -json "${common[@]}" -timeout "$RACE_TIMEOUT" "${unit_pkgs[@]}" ;;
		manifests)
			# deploy/kubernetes/validate, a module of its own (Kubernetes' types stay out of the
			# library's go.mod): every overlay rendered and checked, every bad fixture refused.
			# Without -race: nothing in it runs concurrently, and kustomize and the Kubernetes API
			# types take minutes to compile with it on a cold cache.
			(cd deploy/kubernetes/validate && "$GO" test -json -count=1 -ldflags=-w "${extra[@]}" -timeout "$RACE_TIMEOUT" ./...)
			;;
		fuzz)
			((fuzz_beside)) && continue
			scripts/fuzz-short.sh "$FUZZTIME" -json 2>>"$TEST_REPORT"
			;;
		integration)
			# The Temporal server that the tests start as a child process (integration/servers/temporalx), built
			# once for every package and without -race; go build does nothing when it is up to date.
			# Not beside the unit phase: on a cold cache that made both slower (see the README).
			# -ldflags=-w as for the test binaries: no DWARF, 38 MB less to write.
			bin=${XDG_CACHE_HOME:-$HOME/.cache}/baton/make-test/temporal-dev
			built=FAILED
			mkdir -p "${bin%/*}" && (cd integration && GOTMPDIR=${bin%/*} "$GO" build -ldflags=-w -o "$bin" ./tools/cmd/temporal-dev) &&
				export TEMPORALX_SERVER_BIN=$bin && built=ok
			timings+=("$(timing "  server" "$built" $((SECONDS - start)))")
			compiled=0
			if [[ -z ${INTEGRATION_PKGS:-} ]]; then
				# go test ./... would race-compile the server command too, the whole Temporal server,
				# for nothing: go test gets only the packages that have tests, and the others (the
				# demo, the drill, the benchmarks) are compiled here, not linked, with -race as the
				# tests want what they share (embedded etcd above all).
				(cd integration && "$GO" list -f '{{if .GoFiles}}{{.ImportPath}}{{end}}' ./... | grep -v '/cmd/temporal-dev$' |
					xargs "$GO" list -race -export -f '' >/dev/null) || compiled=1
				mapfile -t integration_pkgs < <(cd integration && "$GO" list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...)
			fi
			if ((fuzz_beside)); then
				fuzz_json=$(mktemp)
				fuzz_start=$SECONDS
				scripts/fuzz-short.sh "$FUZZTIME" -json >"$fuzz_json" 2>>"$TEST_REPORT" &
				fuzz_pid=$!
			fi
			# The simulator's node world (TestSimNode) runs without -race, in a run of its own: under
			# Go 1.26's race runtime it dies in 2-3 of 6 runs with a SIGSEGV inside ThreadSanitizer's
			# stack depot (a synctest bubble's goroutine, not a race report; cf. golang/go#78156).
			# Every other world runs the same library code under -race.
			# It runs when the packages include tests/sim and TEST_FLAGS choose no tests of their own.
			node_world=()
			for pkg in "${integration_pkgs[@]}"; do
				[[ $pkg == ./... || $pkg == */tests/sim || $pkg == */tests/sim/ ]] && node_world=(./tests/sim/)
			done
			[[ " ${extra[*]:-} " == *" -run"* ]] && node_world=()
			(cd integration && "$GO" test -json -p "$INTEGRATION_PARALLEL" "${common[@]}" -timeout "$INTEGRATION_TIMEOUT" \
				-skip '^TestSimNode$' "${integration_pkgs[@]}") && ((compiled == 0))
			rc=$?
			if ((${#node_world[@]})); then
				(cd integration && "$GO" test -json -count=1 -ldflags=-w "${extra[@]}" -timeout "$INTEGRATION_TIMEOUT" \
					-run '^TestSimNode$' "${node_world[@]}") || rc=1
			fi
			if ((fuzz_beside)); then
				wait "$fuzz_pid"
				fuzz_rc=$?
				cat "$fuzz_json"
				rm -f "$fuzz_json"
				result=ok
				((fuzz_rc == 0)) || result=FAILED status=1
				timings+=("$(timing fuzz "$result" $((SECONDS - fuzz_start)) " (beside integration's tests)")")
			fi
			((rc == 0))
			;;
		*)
			echo "test.sh: unknown phase $phase (unit, manifests, fuzz, integration)" >&2
			false
			;;
		esac
		rc=$?
		((rc == 0)) || status=1
		result=ok
		((rc == 0)) || result=FAILED
		timings+=("$(timing "$phase" "$result" $((SECONDS - start)))")
	done
	{
		echo
		echo "make test phases (wall time, builds included):"
		printf '  %s\n' "${timings[@]}"
	} >>"$TEST_REPORT"
	exit $status
fi

phases=("$@")
((${#phases[@]} > 0)) || phases=(unit manifests fuzz integration)
GOTESTSUM=${GOTESTSUM:-gotestsum}
format=${TEST_FORMAT:-pkgname}
TEST_REPORT=$(mktemp)
json=$(mktemp)
export TEST_REPORT
trap 'rm -f "$TEST_REPORT" "$json"' EXIT
# gotestsum's summary repeats each failed test with its output; the output of passing tests is left out.
"$GOTESTSUM" --format "$format" --format-hide-empty-pkg --hide-summary skipped --jsonfile "$json" \
	--raw-command -- "$0" --emit "${phases[@]}"
status=$?
cat "$TEST_REPORT"
# The last word: one line per failed test or package (a package that failed to build, or failed
# outside its tests: a leak check, a timeout).
failed=$(grep '"Action":"fail"' "$json" | sed -n 's/.*"Package":"\([^"]*\)"\(,"Test":"\([^"]*\)"\)\{0,1\}.*/\1 \3/p' |
	awk '$2 != "" { tests[$1] = tests[$1] "  " $1 " " $2 "\n"; next } { pkgs[$1] = 1 }
		END { for (p in tests) printf "%s", tests[p]; for (p in pkgs) if (!(p in tests)) print "  " p " (build, leak check or timeout)" }' | sort -u)
if [[ -n $failed ]]; then
	printf '\nFAILED:\n%s\n' "$failed"
elif ((status != 0)); then
	printf '\nFAILED (see the errors above)\n'
fi
exit $status
