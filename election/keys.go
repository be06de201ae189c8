package election

import "strings"

// Keys is the layout of the elections under one prefix in etcd (Config.Prefix), defined here once;
// status tools, the drill and the benchmarks read etcd through it rather than rebuild it:
//
//	<Prefix>/<project>/<queue>/<lease ID, 16 hex digits>   one candidate of (project, queue)
//
// A candidate's value is its server ID; the candidate whose key has the lowest create revision leads,
// and that revision is its term's fencing token.
type Keys struct {
	Prefix string
}

// Keys returns the key layout of this Elector's elections.
func (e *Elector) Keys() Keys { return Keys{Prefix: e.cfg.Prefix} }

// Election returns the key of (project, queue)'s election: <Prefix>/<project>/<queue>. Its candidates
// are the keys under Candidates.
func (k Keys) Election(project, queue string) string { return k.Prefix + "/" + project + "/" + queue }

// Candidates returns the range every candidate key of (project, queue) starts with (for a prefix
// Get or Watch): <Prefix>/<project>/<queue>/.
func (k Keys) Candidates(project, queue string) string { return k.Election(project, queue) + "/" }

// Project returns the range every election key of project starts with: <Prefix>/<project>/.
func (k Keys) Project(project string) string { return k.Prefix + "/" + project + "/" }

// Queue returns the queue of a candidate key of project's elections, and false for a key that is not
// one (another project's, or not a candidate key).
func (k Keys) Queue(project, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, k.Project(project))
	if !ok {
		return "", false
	}
	return queueOf(rest)
}

// queueOf is the queue of a candidate key from the part after its project's range, <queue>/<lease>.
func queueOf(rest string) (string, bool) {
	queue, lease, ok := strings.Cut(rest, "/")
	if !ok || lease == "" || strings.Contains(lease, "/") || ValidateName("queue", queue) != nil {
		return "", false
	}
	return queue, true
}
