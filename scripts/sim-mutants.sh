#!/usr/bin/env bash
# sim-mutants.sh: the simulator's proof of power (issue #42). Each integration/sim/mutants/<name>.patch
# puts a past bug back; its first line "# test: <go test -run regexp> <package dir under integration/>"
# names the simulator batch that must find it. Every mutant is applied in a scratch worktree of HEAD
# (the checkout is never touched), its batch runs until the first violation or SIM_BUDGET (default
# 10m), and the script reports seeds-to-find and time. It fails if any mutant survives.
set -euo pipefail

root=$(git rev-parse --show-toplevel)
budget=${SIM_BUDGET:-10m}
only=${MUTANT:-} # run only the mutant of this name
scratch=$(mktemp -d)
wt="$scratch/wt"
cleanup() {
	git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true
	rm -rf "$scratch"
}
trap cleanup EXIT
git -C "$root" worktree add --quiet --detach "$wt" HEAD

survivors=0
printf '%-32s %-9s %14s %10s\n' mutant result seeds-to-find seconds
for patch in "$root"/integration/sim/mutants/*.patch; do
	name=$(basename "$patch" .patch)
	[[ -n "$only" && "$name" != "$only" ]] && continue
	read -r marker field regexp dir < <(head -n 1 "$patch")
	if [[ "$marker $field" != "# test:" || -z "$regexp" || -z "$dir" ]]; then
		echo "$patch: first line must be '# test: <regexp> <package dir>'" >&2
		exit 2
	fi
	git -C "$wt" checkout --quiet -- .
	git -C "$wt" apply "$patch"
	report="$scratch/$name.report"
	rm -f "$report"
	set +e
	(cd "$wt/integration" && SIM_BUDGET="$budget" SIM_STOP=first SIM_REPORT="$report" \
		go test -count=1 -timeout 0 -run "$regexp" "./$dir/") >"$scratch/$name.log" 2>&1
	code=$?
	set -e
	violations=$(sed -n 's/^violations=//p' "$report" 2>/dev/null || true)
	if [[ $code -ne 0 && "${violations:-0}" -gt 0 ]]; then
		printf '%-32s %-9s %14s %10s\n' "$name" found "$(sed -n 's/^seeds_to_find=//p' "$report")" \
			"$(sed -n 's/^seconds_to_find=//p' "$report")"
	else
		survivors=$((survivors + 1))
		printf '%-32s %-9s %14s %10s\n' "$name" SURVIVED - -
		tail -n 20 "$scratch/$name.log" >&2
	fi
done
git -C "$wt" checkout --quiet -- .
if [[ $survivors -gt 0 ]]; then
	echo "sim-mutants: $survivors mutant(s) survived: the simulator cannot see those bugs" >&2
	exit 1
fi
