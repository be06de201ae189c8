package baton

import (
	"cmp"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/ownership"
	"github.com/baton-run/baton/takeover"
)

// EtcdPrefixes returns the etcd key prefixes a Node of this configuration reads and writes, each to
// be granted read and write as a prefix (etcdctl role grant-permission ROLE readwrite PREFIX
// --prefix): its project's queue elections, their balance records (members and hand-off hints) and
// failing records (ownership.FailingKeys), the
// project's run log (takeover.RunLogProject; the dispatcher's carry-over reads and prunes it too) and,
// unless DisableReconciler, its reconciler election; with a ledgerPrefix (ledger.Config's
// prefix, ledger.DefaultPrefix for the default; "" for none) the project's range of the
// dispatch ledger (ledger.Range) too. Every prefix ends with a '/' after the project, a
// character no name contains, so no prefix covers another project's keys: a role with exactly these
// reaches one project's keys and nothing of another's. Nothing else in etcd is written, so it is all
// a Baton user needs (leases need no permission) but for one read during the upgrade from the
// release before per-project ledger keys: the old layout's records (ledger.LegacyRange,
// read-only, naming no project; ledger.Config.IgnoreLegacy). `baton acl etcd` prints the commands.
func (c Config) EtcdPrefixes(ledgerPrefix string) []string {
	c = c.withDefaults()
	electionPrefix := cmp.Or(c.Election.Prefix, election.DefaultConfig().Prefix)
	out := []string{
		election.Keys{Prefix: electionPrefix}.Project(c.Project),
		balance.Keys{ElectionPrefix: electionPrefix}.Project(c.Project),
		ownership.FailingKeys{ElectionPrefix: electionPrefix}.Project(c.Project),
	}
	if !c.DisableReconciler {
		out = append(out, election.Keys{Prefix: c.ReconcilerElectionPrefix}.Project(c.Project))
	}
	switch rl := c.Takeover.RunLog.(type) {
	case nil: // the Node's default
		out = append(out, takeover.RunLogProject("", c.Project))
	case *takeover.EtcdRunLog:
		out = append(out, rl.Project(c.Project))
	}
	if ledgerPrefix != "" {
		out = append(out, ledger.Range(ledgerPrefix, c.Project))
	}
	return out
}
