package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one target (e.g. an etcd
// member's client port). It can cut (Blackhole) or slow down (SetDelay) the
// traffic of the connections going through it.
type Proxy struct {
	target string
	l      net.Listener
	ctx    context.Context // canceled by Close: aborts upstream dials
	cancel context.CancelFunc
	delay  atomic.Int64 // time.Duration

	mu        sync.Mutex
	blackhole bool
	conns     map[*proxyConn]struct{}
	closed    bool

	wg sync.WaitGroup
}

// NewProxy listens on 127.0.0.1:0 and forwards every accepted connection to
// target ("127.0.0.1:port" or "http://127.0.0.1:port").
func NewProxy(target string) (*Proxy, error) {
	if strings.Contains(target, "://") {
		u, err := url.Parse(target)
		if err != nil {
			return nil, fmt.Errorf("etcdtest: proxy target: %w", err)
		}
		target = u.Host
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("etcdtest: proxy target: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, l: l, ctx: ctx, cancel: cancel, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
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
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// URL returns "http://" + Addr().
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Blackhole partitions the proxy: from now on, bytes in both directions on
// existing and new connections are read and dropped. New connections are
// accepted but nothing gets through; connections stay open (no RST, no FIN).
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = true
	for pc := range p.conns {
		pc.blackholed.Store(true)
	}
}

// Heal ends a blackhole and any delay. Connections that were blackholed are
// closed (bytes were lost, their streams are corrupt) so that clients
// reconnect; new connections pass normally.
func (p *Proxy) Heal() {
	p.delay.Store(0)
	p.mu.Lock()
	p.blackhole = false
	var dead []*proxyConn
	for pc := range p.conns {
		if pc.blackholed.Load() {
			dead = append(dead, pc)
		}
	}
	p.mu.Unlock()
	for _, pc := range dead {
		pc.close()
	}
}

// SetDelay delays every chunk in both directions: it is delivered d after it
// was read (order kept, nothing lost, reading is not blocked). 0 turns it off.
func (p *Proxy) SetDelay(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.delay.Store(int64(d))
}

// Close stops listening, closes all connections and waits for all goroutines.
// It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	err := p.l.Close()
	p.cancel()
	for _, pc := range conns {
		pc.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			// Unexpected accept error: back off a little instead of spinning.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

type proxyConn struct {
	p          *Proxy
	client     net.Conn
	blackholed atomic.Bool
	done       chan struct{} // closed by close

	mu       sync.Mutex
	upstream net.Conn
	closed   bool
}

func (pc *proxyConn) close() {
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		return
	}
	pc.closed = true
	close(pc.done)
	pc.client.Close()
	if pc.upstream != nil {
		pc.upstream.Close()
	}
	pc.mu.Unlock()

	pc.p.mu.Lock()
	delete(pc.p.conns, pc)
	pc.p.mu.Unlock()
}

func (p *Proxy) handle(c net.Conn) {
	defer p.wg.Done()
	pc := &proxyConn{p: p, client: c, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return
	}
	blackholed := p.blackhole
	pc.blackholed.Store(blackholed)
	p.conns[pc] = struct{}{}
	p.mu.Unlock()

	if blackholed {
		// Partitioned: accept, swallow, never reach the target.
		p.wg.Add(1)
		go pc.discard(c)
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	u, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		pc.close()
		return
	}
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		u.Close()
		return
	}
	pc.upstream = u
	pc.mu.Unlock()
	pc.pipe(c, u)
	pc.pipe(u, c)
}

// discard reads and drops everything from src until it fails.
func (pc *proxyConn) discard(src net.Conn) {
	defer pc.p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		if _, err := src.Read(buf); err != nil {
			return
		}
	}
}

type chunk struct {
	data []byte
	at   time.Time // when to deliver
	eof  bool      // src ended: close the connection pair
}

// chunkQueue is an unbounded FIFO, so that a delay never blocks reading.
type chunkQueue struct {
	mu     sync.Mutex
	items  []chunk
	notify chan struct{}
}

func (q *chunkQueue) push(c chunk) {
	q.mu.Lock()
	q.items = append(q.items, c)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *chunkQueue) pop(done <-chan struct{}) (chunk, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			c := q.items[0]
			q.items[0] = chunk{}
			q.items = q.items[1:]
			q.mu.Unlock()
			return c, true
		}
		q.mu.Unlock()
		select {
		case <-q.notify:
		case <-done:
			return chunk{}, false
		}
	}
}

// pipe copies src to dst through a queue: a reader goroutine stamps each
// chunk with its delivery time, a writer goroutine delivers it then.
func (pc *proxyConn) pipe(src, dst net.Conn) {
	q := &chunkQueue{notify: make(chan struct{}, 1)}
	pc.p.wg.Add(2)
	go func() { // reader
		defer pc.p.wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			at := time.Now().Add(time.Duration(pc.p.delay.Load()))
			if n > 0 && !pc.blackholed.Load() {
				q.push(chunk{data: append([]byte(nil), buf[:n]...), at: at})
			}
			if err != nil {
				// In a blackhole the other side must not notice anything.
				if !pc.blackholed.Load() {
					q.push(chunk{eof: true, at: at})
				}
				return
			}
		}
	}()
	go func() { // writer
		defer pc.p.wg.Done()
		var t *time.Timer
		defer func() {
			if t != nil {
				t.Stop()
			}
		}()
		for {
			c, ok := q.pop(pc.done)
			if !ok {
				return
			}
			if d := time.Until(c.at); d > 0 {
				if t == nil {
					t = time.NewTimer(d)
				} else {
					t.Reset(d)
				}
				select {
				case <-t.C:
				case <-pc.done:
					return
				}
			}
			if pc.blackholed.Load() {
				continue // dropped by the partition
			}
			if c.eof {
				pc.close()
				return
			}
			if _, err := dst.Write(c.data); err != nil {
				pc.close()
				return
			}
		}
	}()
}
