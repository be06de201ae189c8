#!/usr/bin/env bash
# Runs every fuzz target of the library for a short, bounded time (FUZZTIME each, default 10s), for
# `make test`. The committed seed corpora (testdata/fuzz/<Target>/) also run as plain tests in
# `go test ./...`; this adds fresh inputs. A failure leaves the failing input in the package's
# testdata/fuzz/<Target>/ directory: commit it with the fix, so it stays a regression test.
#
# Usage: scripts/fuzz-short.sh [FUZZTIME [GO TEST FLAGS...]]     e.g. scripts/fuzz-short.sh 30s
#        (`make test` adds -json: its progress lines go to stderr, so stdout stays go test's own.)
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${1:-${FUZZTIME:-10s}}
shift || true

# package              target
targets=(
	"./takeover          FuzzWorkflowID"
	"./heartbeat         FuzzDecode"
	"./registry          FuzzDecodeWorker"
	".                   FuzzLoadEnv"
	"./fxmodule          FuzzLoadClientEnv"
)

failed=()
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "fuzz: $name in $pkg for $FUZZTIME" >&2
	# -fuzz takes one target of one package; -run '^$' skips the package's other tests.
	if ! "$GO" test "$@" -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"; then
		failed+=("$name ($pkg)")
	fi
done

if ((${#failed[@]} > 0)); then
	echo "fuzz: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: all ${#targets[@]} targets passed ($FUZZTIME each)" >&2
