package security_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

const etcdPassword = "etcd-pw-Zq81vK3xTq"

// A role made before the run log existed (an upgrade that did not print the role again) does not
// take the fleet down: etcd refuses the run log, and the workers lead, take over and hand over as
// before it, the carry-over relying on visibility alone (each says so once, at error level).
func TestARoleWithoutTheRunLogStillLeads(t *testing.T) {
	etcd := startSecureEtcd(t, "baton", etcdPassword)
	rs := redisx.Start(t, redisx.Options{Password: "redis-admin-pw"})
	const p0 = "any-project"
	root, err := fxmodule.NewEtcdClient(fxmodule.ClientParams{Config: etcd.clientConfig("root", "root-"+etcdPassword, true),
		Lifecycle: fxtest.NewLifecycle(t)})
	if err != nil {
		t.Fatal(err)
	}
	runs := strings.TrimSuffix(takeover.RunLogProject("", p0), p0+"/") // every project's records
	_, err = root.RoleRevokePermission(t.Context(), "baton", runs, clientv3.GetPrefixRangeEnd(runs))
	_ = root.Close()
	if err != nil {
		t.Fatalf("revoke the run log from the role: %v", err)
	}
	cc := withRedis(withTemporal(etcd.clientConfig("baton", etcdPassword, true)), rs, "", rs.Password())
	p := project()
	appA, nodeA := app(t, fast(p, "old-role-a", "orders"), cc)
	appA.RequireStart()
	qa := leads(t, nodeA, "orders")
	appB, nodeB := app(t, fast(p, "old-role-b", "orders"), cc)
	appB.RequireStart()
	appA.RequireStop()
	qb := leads(t, nodeB, "orders")
	if qb.Token <= qa.Token || qb.RunID == qa.RunID {
		t.Fatalf("B's run %s at token %d did not replace A's %s at %d", qb.RunID, qb.Token, qa.RunID, qa.Token)
	}
}

// With etcd serving TLS only, demanding a client certificate and a password, and Baton's user
// limited to Baton's key prefixes, Nodes built with fxmodule.Clients campaign, lead, take the
// dispatcher over in the configured Temporal namespace, reconcile and hand over; the dispatch
// ledger works; and the same credentials can neither touch keys outside the prefixes nor campaign
// under another prefix.
func TestEtcdTLSAndAuthWithLeastPrivilege(t *testing.T) {
	etcd := startSecureEtcd(t, "baton", etcdPassword)
	rs := redisx.Start(t, redisx.Options{Password: "redis-admin-pw"})
	cc := withRedis(withTemporal(etcd.clientConfig("baton", etcdPassword, true)), rs, "", rs.Password())
	p := project()

	appA, nodeA := app(t, fast(p, "secure-a", "orders"), cc)
	appA.RequireStart()
	qa := leads(t, nodeA, "orders")
	tc := temporalx.Client(t, temporalServer)
	desc, err := tc.DescribeWorkflowExecution(t.Context(), qa.WorkflowID, qa.RunID)
	if err != nil {
		t.Fatalf("the dispatcher run is not in namespace %s: %v", namespace, err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("dispatcher run %v", st)
	}
	eventually(t, 10*time.Second, "a reconcile cycle under the reconciler election", func() error {
		if nodeA.Status().Reconciler.Cycles == 0 {
			return errors.New("no cycle yet")
		}
		return nil
	})
	// What password auth costs etcd: etcd's client authenticates again (a bcrypt check on the
	// server) for every stream it opens, and the session's keepalives and the watches are streams.
	before := etcd.authenticates.Load()
	keepalives(t, nodeA, 3)
	t.Logf("a leading Node with password auth: %d Authenticate calls over 3 keepalives (TTL 2s, 1 queue)", etcd.authenticates.Load()-before)

	// A second worker follows and takes over on a graceful stop: Resign deletes under auth too.
	appB, nodeB := app(t, fast(p, "secure-b", "orders"), cc)
	appB.RequireStart()
	appA.RequireStop()
	qb := leads(t, nodeB, "orders")
	if qb.Token <= qa.Token {
		t.Fatalf("B's token %d is not above A's %d", qb.Token, qa.Token)
	}

	// The same credentials, directly: the dispatch ledger works, nothing outside Baton's prefixes does.
	cli, err := fxmodule.NewEtcdClient(fxmodule.ClientParams{Config: cc, Lifecycle: fxtest.NewLifecycle(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	dl, err := ledger.New(cli, ledger.Config{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The ledger's writes are fenced by the live owner's lease, which B's dispatcher run carries.
	descB, err := tc.DescribeWorkflowExecution(ctx, qb.WorkflowID, qb.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var owner takeover.Owner
	if err := converter.GetDefaultDataConverter().FromPayload(descB.GetWorkflowExecutionInfo().GetMemo().GetFields()[takeover.MemoKey], &owner); err != nil {
		t.Fatalf("owner of B's run: %v", err)
	}
	if _, err := dl.Begin(ctx, "k1", owner); err != nil {
		t.Fatalf("ledger Begin under /baton/dispatch/: %v", err)
	}
	if err := dl.Complete(ctx, "k1", owner); err != nil {
		t.Fatalf("ledger Complete under /baton/dispatch/: %v", err)
	}
	if _, err := cli.Put(ctx, "/other/app/key", "x"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Put outside Baton's prefixes = %v, want permission denied", err)
	}
	if _, err := cli.Get(ctx, "/", clientv3.WithPrefix()); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Get of the whole keyspace = %v, want permission denied", err)
	}
	el, err := election.New(cli, election.Config{Prefix: "/elsewhere/election", TTL: 2 * time.Second, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close(context.WithoutCancel(ctx))
	_, err = el.Campaign(ctx, p, "orders", "intruder")
	mustContain(t, "a campaign under a prefix the role does not grant", err, "permission denied")
}

// With client-certificate auth alone (the certificate's common name is the etcd user, no password),
// a Node leads just as well and etcd never checks a password: the cheaper choice for large fleets.
func TestEtcdCertificateAuth(t *testing.T) {
	etcd := startSecureEtcd(t, "baton", etcdPassword)
	named, err := etcd.ca.Client("baton-cn", "baton") // CN = the etcd user
	if err != nil {
		t.Fatal(err)
	}
	rs := redisx.Start(t, redisx.Options{Password: "redis-admin-pw"})
	cc := withRedis(withTemporal(etcd.clientConfig("", "", false)), rs, "", rs.Password())
	cc.EtcdTLS.CertFile, cc.EtcdTLS.KeyFile = named.CertFile, named.KeyFile
	before := etcd.authenticates.Load()
	a, node := app(t, fast(project(), "cert-a", "orders"), cc)
	a.RequireStart()
	leads(t, node, "orders")
	keepalives(t, node, 3)
	if n := etcd.authenticates.Load() - before; n != 0 {
		t.Fatalf("%d Authenticate calls with certificate auth", n)
	}
	a.RequireStop()
}

// Clients with wrong or missing credentials cannot campaign, and the error says why. None of the
// errors holds the password.
func TestEtcdRefusesWrongCredentials(t *testing.T) {
	etcd := startSecureEtcd(t, "baton", etcdPassword)
	for _, tc := range []struct {
		name string
		cc   clients.Config
		// newErr is what NewEtcdClient says; "" if it connects and the campaign must fail instead.
		newErr, campaignErr []string
	}{
		{name: "wrong password", cc: etcd.clientConfig("baton", "WrongPassword-123", true),
			newErr: []string{"authentication failed", "invalid user ID or password"}},
		{name: "unknown user", cc: etcd.clientConfig("mallory", etcdPassword, true),
			newErr: []string{"authentication failed"}},
		{name: "no credentials", cc: etcd.clientConfig("", "", true),
			campaignErr: []string{"permission denied"}},
		{name: "no client certificate", cc: etcd.clientConfig("baton", etcdPassword, false),
			newErr: []string{"refused the TLS connection", "certificate required"}},
		{name: "neither certificate nor credentials", cc: etcd.clientConfig("", "", false),
			newErr: []string{"refused the TLS connection", "certificate required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, err := fxmodule.NewEtcdClient(fxmodule.ClientParams{Config: tc.cc, Lifecycle: fxtest.NewLifecycle(t)})
			if tc.newErr != nil {
				mustContain(t, "NewEtcdClient", err, tc.newErr...)
				noSecret(t, err)
				return
			}
			if err != nil {
				t.Fatalf("NewEtcdClient: %v", err)
			}
			defer cli.Close()
			el, err := election.New(cli, election.Config{TTL: 2 * time.Second, Logger: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			defer el.Close(context.WithoutCancel(ctx))
			term, err := el.Campaign(ctx, project(), "orders", "intruder")
			if term != nil {
				t.Fatal("campaign won without credentials")
			}
			mustContain(t, "Campaign", err, tc.campaignErr...)
			noSecret(t, err)
		})
	}

	// Through the Fx app, a wrong password fails the start with the same reason.
	cc := withTemporal(etcd.clientConfig("baton", "WrongPassword-123", true))
	cc.RedisAddr = "127.0.0.1:1"
	err := startErr(t, fast(project(), "secure-x", "orders"), cc)
	mustContain(t, "the app's start", err, "authentication failed")
	noSecret(t, err)
}

func noSecret(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), etcdPassword) {
		t.Fatalf("error holds the password: %v", err)
	}
}
