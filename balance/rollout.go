package balance

import (
	"maps"
	"slices"
	"strings"
)

// compareVersions orders two version strings naturally: runs of digits compare as numbers, the rest
// byte-wise, a leading "v" is ignored ("v1.10.0" > "v1.9.2", "2026.11.24" > "2026.11.3"). It returns
// -1, 0 or +1.
func compareVersions(a, b string) int {
	a, b = strings.TrimPrefix(a, "v"), strings.TrimPrefix(b, "v")
	for a != "" && b != "" {
		ca, ra := chunk(a)
		cb, rb := chunk(b)
		if c := compareChunk(ca, cb); c != 0 {
			return c
		}
		a, b = ra, rb
	}
	switch {
	case a == b:
		return 0
	case a == "":
		return -1
	default:
		return 1
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// chunk splits off the leading run of digits or of non-digits.
func chunk(s string) (string, string) {
	d := isDigit(s[0])
	i := 1
	for i < len(s) && isDigit(s[i]) == d {
		i++
	}
	return s[:i], s[i:]
}

func compareChunk(a, b string) int {
	if isDigit(a[0]) && isDigit(b[0]) {
		a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
		if len(a) != len(b) {
			if len(a) < len(b) {
				return -1
			}
			return 1
		}
	}
	return strings.Compare(a, b)
}

// inRollout reports whether workers of two versions are live, as this worker sees them.
func (r *Runner) inRollout() bool {
	on, _ := r.roster.rollout()
	return on
}

// olderThan reports whether version a is known to be older than b; unversioned is never older.
func olderThan(a, b string) bool { return a != "" && b != "" && compareVersions(a, b) < 0 }

// line returns the server IDs standing for queue, oldest key (the leader) first.
func (v *view) line(queue string) []string {
	v.mu.Lock()
	cs := make([]cand, 0, len(v.cands[queue]))
	for _, c := range v.cands[queue] {
		cs = append(cs, c)
	}
	v.mu.Unlock()
	slices.SortFunc(cs, func(a, b cand) int {
		switch {
		case a.rev < b.rev:
			return -1
		case a.rev > b.rev:
			return 1
		}
		return 0
	})
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.id
	}
	return ids
}

// leaderCounts returns how many of this worker's queues each server ID leads. The view keeps the
// counts as keys come and go (apply), so that deciding a successor does not walk every queue: a
// worker that stops decides the successor of each of its thousands of queues.
func (v *view) leaderCounts() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.led)
}

// candidateIDs returns every server ID standing for any of this worker's queues.
func (v *view) candidateIDs() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	ids := make([]string, 0, len(v.ids))
	for id := range v.ids {
		ids = append(ids, id)
	}
	return ids
}

// counts returns how many queues each worker leads.
func (r *Runner) counts() map[string]int { return r.view.leaderCounts() }
