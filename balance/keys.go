package balance

// Keys is the layout of package balance's keys in etcd, defined here once; tools read them through it.
// They live beside the project's election keys, never under them, so that no queue name can collide
// with them:
//
//	<ElectionPrefix>-balance/<project>/m/<serverID>  a worker's member record (JSON), on its own lease
//	<ElectionPrefix>-balance/<project>/h/<queue>     a resigning leader's hand-off hint (JSON: to,
//	                                                 from, reason), on its lease
type Keys struct {
	// ElectionPrefix is the queue elections' prefix (election.Config.Prefix).
	ElectionPrefix string
}

// Project returns the range every balance key of project starts with.
func (k Keys) Project(project string) string { return k.ElectionPrefix + "-balance/" + project + "/" }

// Member returns the key of serverID's member record.
func (k Keys) Member(project, serverID string) string { return k.Members(project) + serverID }

// Members returns the range of project's member records.
func (k Keys) Members(project string) string { return k.Project(project) + memberDir + "/" }

// Hint returns the key of queue's hand-off hint.
func (k Keys) Hint(project, queue string) string { return k.Hints(project) + queue }

// Hints returns the range of project's hand-off hints: a hint lives from a hand-off's decision until
// the term it hands over has ended.
func (k Keys) Hints(project string) string { return k.Project(project) + hintDir + "/" }

// The directories under Project.
const (
	memberDir = "m"
	hintDir   = "h"
)
