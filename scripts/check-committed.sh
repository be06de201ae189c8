#!/usr/bin/env bash
# `make lint`: refuses what must never be committed: an executable binary (ELF, Mach-O, PE) anywhere,
# and any file over 1 MiB outside a testdata folder. Build outputs belong in .gitignore, not in history.
set -uo pipefail
cd "$(dirname "$0")/.."
limit=$((1 << 20))
bad=0
while IFS= read -r -d '' f; do
	[[ -f $f && ! -L $f ]] || continue
	magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
	case $magic in
	7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | 4d5a*)
		echo "committed binary: $f (add the build output to .gitignore and git rm --cached it)"
		bad=1
		continue
		;;
	esac
	case /$f in */testdata/*) continue ;; esac
	size=$(stat -c %s "$f")
	if ((size > limit)); then
		echo "committed file over 1 MiB outside testdata: $f ($size bytes)"
		bad=1
	fi
done < <(git ls-files -z)
exit $bad
