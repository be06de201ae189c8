package baton

import (
	"slices"
	"testing"

	"github.com/baton-run/baton/ledger"
)

func TestEtcdPrefixes(t *testing.T) {
	c := Config{Project: "billing", Queues: []string{"q1"}}
	got := c.EtcdPrefixes(ledger.DefaultPrefix)
	want := []string{"/baton/election/billing/", "/baton/election-balance/billing/", "/baton/election-failing/billing/", "/baton/reconciler/billing/", "/baton/runs/billing/", "/baton/dispatch/p/billing/"}
	if !slices.Equal(got, want) {
		t.Fatalf("EtcdPrefixes = %q, want %q", got, want)
	}
	c.Election.Prefix, c.ReconcilerElectionPrefix, c.DisableReconciler = "/x/el", "/x/rec", true
	if got := c.EtcdPrefixes(""); !slices.Equal(got, []string{"/x/el/billing/", "/x/el-balance/billing/", "/x/el-failing/billing/", "/baton/runs/billing/"}) {
		t.Fatalf("custom prefixes, no reconciler, no ledger: %q", got)
	}
}
