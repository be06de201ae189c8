package etcdx

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-run/baton/integration/servers/harness"
)

func TestMain(m *testing.M) {
	harness.VerifyTestMain(m)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, cli *clientv3.Client, k, v string) {
	t.Helper()
	if _, err := cli.Put(ctxT(t, 10*time.Second), k, v); err != nil {
		t.Fatalf("put %s: %v", k, err)
	}
}

func mustGet(t *testing.T, cli *clientv3.Client, k, want string) {
	t.Helper()
	resp, err := cli.Get(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want {
		t.Fatalf("get %s: got %v, want %q", k, resp.Kvs, want)
	}
}

func skipExternal(t *testing.T, c *Cluster) {
	if c.External() {
		t.Skip("external etcd (" + EnvEndpoints + "): cannot inject faults")
	}
}

func TestSingleMember(t *testing.T) {
	start := time.Now()
	c := Start(t, Options{})
	t.Logf("StartCluster(1 member): %v", time.Since(start))
	if (!c.External() && len(c.Endpoints()) != 1) || c.MemberEndpoint(0) != c.Endpoints()[0] {
		t.Fatalf("endpoints: %v", c.Endpoints())
	}
	cli := Client(t, c)
	mustPut(t, cli, "etcdx/single", "v1")
	mustGet(t, cli, "etcdx/single", "v1")
}

func TestThreeMembersStopRestart(t *testing.T) {
	start := time.Now()
	c := Start(t, Options{Members: 3})
	t.Logf("StartCluster(3 members): %v", time.Since(start))
	skipExternal(t, c)
	if n := len(c.Endpoints()); n != 3 {
		t.Fatalf("got %d endpoints", n)
	}
	cli := Client(t, c)
	mustPut(t, cli, "k0", "before")

	// A client of member 0 only, with an open watch and lease keepalive
	// stream: a graceful embed Close would wait for them (~7s).
	cli0 := Client(t, c, c.MemberEndpoint(0))
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	wch := cli0.Watch(wctx, "k0")
	lease, err := cli0.Grant(ctxT(t, 10*time.Second), 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli0.KeepAlive(wctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	mustPut(t, cli, "k0", "watched")
	select {
	case <-wch:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}

	start = time.Now()
	if err := c.StopMember(0); err != nil {
		t.Fatal(err)
	}
	stopDur := time.Since(start)
	t.Logf("StopMember(0) with open streams: %v", stopDur)
	if stopDur > 3*time.Second {
		t.Errorf("StopMember took %v, want a fast hard stop", stopDur)
	}
	if c.IsRunning(0) {
		t.Fatal("member 0 still running")
	}
	// The stopped member does not serve.
	if _, err := cli0.Get(ctxT(t, time.Second), "k0"); err == nil {
		t.Fatal("get via stopped member succeeded")
	}
	harness.Eventually(t, 15*time.Second, "put with member 0 down", func() error {
		_, err := cli.Put(ctxT(t, 3*time.Second), "k1", "while-down")
		return err
	})
	mustGet(t, cli, "k1", "while-down")

	start = time.Now()
	if err := c.RestartMember(0); err != nil {
		t.Fatal(err)
	}
	t.Logf("RestartMember(0): %v", time.Since(start))
	if !c.IsRunning(0) {
		t.Fatal("member 0 not running")
	}
	// Linearizable read (the default) served by member 0 alone: it must have
	// caught up with the write made while it was down.
	cliR := Client(t, c, c.MemberEndpoint(0))
	mustGet(t, cliR, "k1", "while-down")

	// Kill the leader (no leadership transfer): the others elect a new one.
	lead, err := c.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := c.StopMember(lead); err != nil {
		t.Fatal(err)
	}
	t.Logf("StopMember(leader=%d): %v", lead, time.Since(start))
	harness.Eventually(t, 15*time.Second, "put with leader down", func() error {
		_, err := cli.Put(ctxT(t, 3*time.Second), "k2", "leader-down")
		return err
	})
	newLead, err := c.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if newLead == lead {
		t.Fatalf("leader still %d", lead)
	}
	start = time.Now()
	if err := c.RestartMember(lead); err != nil {
		t.Fatal(err)
	}
	t.Logf("RestartMember(old leader %d): %v", lead, time.Since(start))
	mustGet(t, Client(t, c, c.MemberEndpoint(lead)), "k2", "leader-down")

	start = time.Now()
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Restart(3 members): %v", time.Since(start))
	harness.Eventually(t, 10*time.Second, "get after full restart", func() error {
		_, err := cli.Get(ctxT(t, 2*time.Second), "k2")
		return err
	})
	mustGet(t, cli, "k2", "leader-down")
}

func TestRestartKeepsData(t *testing.T) {
	c := Start(t, Options{})
	skipExternal(t, c)
	eps := c.Endpoints()
	cli := Client(t, c)
	mustPut(t, cli, "persist", "yes")
	start := time.Now()
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Restart(1 member): %v", time.Since(start))
	if got := c.Endpoints(); got[0] != eps[0] {
		t.Fatalf("endpoint changed: %v -> %v", eps, got)
	}
	// The old client reconnects to the same port.
	harness.Eventually(t, 10*time.Second, "get after restart", func() error {
		resp, err := cli.Get(ctxT(t, 2*time.Second), "persist")
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "yes" {
			return errors.New("value lost")
		}
		return nil
	})
	mustPut(t, cli, "persist2", "yes")

	// Stop, then RestartMember of a stopped single member.
	if err := c.StopMember(0); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartMember(0); err != nil {
		t.Fatal(err)
	}
	mustGet(t, Client(t, c), "persist2", "yes")

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := c.StopMember(0); err == nil {
		t.Fatal("StopMember after Close succeeded")
	}
}

func isDeadline(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}

func TestProxy(t *testing.T) {
	c := Start(t, Options{})
	p := NewTestProxy(t, c.MemberEndpoint(0))
	cli := Client(t, c, p.URL())
	mustPut(t, cli, "px", "1")
	mustGet(t, cli, "px", "1")

	p.Blackhole()
	_, err := cli.Get(ctxT(t, time.Second), "px")
	if !isDeadline(err) {
		t.Fatalf("get through blackhole: err = %v, want deadline exceeded", err)
	}
	p.Heal()
	harness.Eventually(t, 15*time.Second, "get after heal", func() error {
		_, err := cli.Get(ctxT(t, time.Second), "px")
		return err
	})

	// A lower bound only: load can make a request slower, never faster.
	p.SetDelay(300 * time.Millisecond)
	start := time.Now()
	mustGet(t, cli, "px", "1")
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Fatalf("get with 300ms delay each way took %v, want >= 600ms", d)
	}
	p.SetDelay(0)
	mustGet(t, cli, "px", "1")
}

// TestProxyTCP checks the partition and delay semantics on a plain echo server.
func TestProxyTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	defer func() { l.Close(); <-done }()

	p := NewTestProxy(t, l.Addr().String())
	var conns []net.Conn
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		return c
	}
	defer func() { // before the proxy's Close, which waits for its connections
		for _, c := range conns {
			c.Close()
		}
	}()
	read := func(c net.Conn, want string, within time.Duration) error {
		c.SetReadDeadline(time.Now().Add(within))
		defer c.SetReadDeadline(time.Time{})
		buf := make([]byte, len(want))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != want {
			return errors.New("echo mismatch: " + string(buf))
		}
		return nil
	}
	echo := func(c net.Conn, msg string, within time.Duration) error {
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		return read(c, msg, within)
	}
	old := dial()
	if err := echo(old, "hello", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	fresh := dial() // accepted, but nothing gets through
	for _, c := range []net.Conn{old, fresh} {
		if err := echo(c, "held", 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("echo through blackhole: %v, want a timeout (open connection, no data)", err)
		}
	}
	p.Heal()
	for _, c := range []net.Conn{old, fresh} { // what was sent during the partition arrives
		if err := read(c, "held", 10*time.Second); err != nil {
			t.Fatalf("bytes held by the partition after Heal: %v", err)
		}
	}
	if err := echo(dial(), "healed", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(100 * time.Millisecond)
	start := time.Now()
	if err := echo(dial(), "abc", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("delayed echo took %v, want >= 200ms", d)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestExternal(t *testing.T) {
	t.Setenv(EnvEndpoints, "http://127.0.0.1:1, http://127.0.0.1:2")
	c, err := StartCluster(Options{Members: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !c.External() {
		t.Fatal("not external")
	}
	if got := c.Endpoints(); len(got) != 2 || got[1] != "http://127.0.0.1:2" || c.MemberEndpoint(0) != "http://127.0.0.1:1" {
		t.Fatalf("endpoints: %v", got)
	}
	for _, err := range []error{c.StopMember(0), c.RestartMember(0), c.Restart()} {
		if !errors.Is(err, ErrExternal) {
			t.Fatalf("got %v, want ErrExternal", err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
