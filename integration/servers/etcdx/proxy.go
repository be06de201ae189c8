package etcdx

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"

	"github.com/baton-run/baton/integration/servers/harness"
)

// Proxy is etcd's own fault-injecting TCP proxy (go.etcd.io/etcd/pkg/v3/proxy, the one etcd's
// integration tests use) on a loopback port in front of one target, e.g. an etcd member's client
// port or a redis-server, behind the faults Baton's tests inject: a partition and a delay.
//
// Close it after its clients: a connection that is neither partitioned nor closed by either end
// keeps Close waiting.
type Proxy struct {
	srv  proxy.Server
	addr string
	wg   sync.WaitGroup // drains srv.Error(), which stops the proxy once 16 errors are unread
}

// NewProxy listens on a free loopback port and forwards every accepted connection to target
// ("127.0.0.1:port" or "http://127.0.0.1:port").
func NewProxy(target string) (*Proxy, error) {
	if !strings.Contains(target, "://") {
		target = "tcp://" + target
	}
	to, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("etcdx: proxy target: %w", err)
	}
	if _, _, err := net.SplitHostPort(to.Host); err != nil {
		return nil, fmt.Errorf("etcdx: proxy target %q: %w", target, err)
	}
	// etcd's proxy needs its port up front; one picked as free can be taken before it binds.
	for attempt := 0; ; attempt++ {
		addr, err := harness.FreeAddr()
		if err != nil {
			return nil, fmt.Errorf("etcdx: proxy: %w", err)
		}
		srv := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: url.URL{Scheme: "tcp", Host: addr}, To: *to})
		select {
		case <-srv.Ready():
			p := &Proxy{srv: srv, addr: addr}
			p.wg.Go(func() {
				for {
					select {
					case <-srv.Error():
					case <-srv.Done():
						return
					}
				}
			})
			return p, nil
		case err := <-srv.Error():
			if attempt == 2 {
				return nil, fmt.Errorf("etcdx: proxy: %w", err)
			}
		}
	}
}

// NewTestProxy is NewProxy for tests: t.Fatal on error, Close on cleanup.
func NewTestProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Addr returns the proxy's address, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.addr }

// URL returns "http://" + Addr().
func (p *Proxy) URL() string { return "http://" + p.addr }

// Blackhole partitions the proxy: from now on nothing gets through in either direction, on
// existing and new connections (new ones are accepted), and no connection is closed, as when a
// network drops every packet. What is sent meanwhile is held, not lost: after Heal it arrives in
// order, as TCP's retransmissions would deliver it, unless an end gave up and closed first.
func (p *Proxy) Blackhole() {
	p.srv.PauseTx()
	p.srv.PauseRx()
}

// Drop partitions the proxy by losing what is sent, in both directions, instead of holding it (Blackhole):
// what an end sent meanwhile never arrives, as when the other end restarted before it could be
// delivered. The connections stay open; their streams are broken once Heal lets bytes through again.
func (p *Proxy) Drop() {
	p.srv.BlackholeTx()
	p.srv.BlackholeRx()
}

// Heal ends a partition (Blackhole or Drop) and any delay.
func (p *Proxy) Heal() {
	p.srv.UnblackholeTx()
	p.srv.UnblackholeRx()
	p.srv.UndelayTx()
	p.srv.UndelayRx()
	p.srv.UnpauseTx()
	p.srv.UnpauseRx()
}

// SetDelay delivers every chunk read, in both directions, d after it was read; 0 turns it off. A
// connection's chunks queue behind each other (order kept, nothing lost).
func (p *Proxy) SetDelay(d time.Duration) {
	if d <= 0 {
		p.srv.UndelayTx()
		p.srv.UndelayRx()
		return
	}
	p.srv.DelayTx(d, 0)
	p.srv.DelayRx(d, 0)
}

// Close stops listening, ends partitioned and delayed connections and waits for the proxy's
// goroutines. It is idempotent.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.wg.Wait()
	return err
}
