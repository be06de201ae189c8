package redismodel

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ErrDown is what a dial returns while the server is unavailable.
var ErrDown = errors.New("redismodel: connection refused (server unavailable)")

// Server is one simulated Redis server.
type Server struct {
	mu       sync.Mutex
	cur      *miniredis.Miniredis
	down     bool
	delay    time.Duration
	conns    map[*conn]struct{}
	restarts int
	clients  []*redis.Client
	observe  func(cmd string)
}

// New starts a server whose TTLs and TIME follow the bubble's clock. observe, if not nil, is called
// with the upper-case command name before every command the server executes, so that an invariant
// check can see the store between commands, not only at the end of a step. It is also called for
// the commands a Lua script runs, while the script holds the store's lock: it may read the store
// (Mini) only before top-level commands such as EVALSHA, or it deadlocks.
func New(observe func(cmd string)) *Server {
	s := &Server{conns: map[*conn]struct{}{}, observe: observe}
	s.cur = s.fresh()
	return s
}

func (s *Server) fresh() *miniredis.Miniredis {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if s.observe != nil {
		// Dial starts the connection-only server, whose hook can then be set; the probe conn ends.
		if c, err := m.Dial(); err == nil {
			_ = c.Close()
		}
		m.Server().SetPreHook(func(_ *server.Peer, cmd string, _ ...string) bool {
			s.observe(cmd)
			return false
		})
	}
	return m
}

// Mini is the instance serving now, for direct reads by invariant checks (they go through no pipe).
func (s *Server) Mini() *miniredis.Miniredis {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Client returns a go-redis client over in-memory pipes to this server; Close closes it.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:            "redis.sim:6379",
		Dialer:          s.dial,
		Protocol:        2,
		DisableIdentity: true,
		PoolSize:        2,
		// A retry of a command whose reply was lost stays (a duplicated request), without go-redis's
		// backoff, which draws from the global math/rand and so made seeds replay differently.
		MinRetryBackoff: -1,
		// Endpoint detection resolves Addr in DNS, which a bubble must not do (and there is no host).
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

func (s *Server) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, ErrDown
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nc, err := s.cur.Dial()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, srv: s}
	s.conns[c] = struct{}{}
	return c, nil
}

// FlushAll removes every key (FLUSHALL); connections stay open.
func (s *Server) FlushAll() { s.Mini().FlushAll() }

// Restart replaces the instance with a fresh one without data: every connection breaks.
func (s *Server) Restart() {
	s.mu.Lock()
	old := s.cur
	s.cur = s.fresh()
	s.restarts++
	s.breakConnsLocked()
	s.mu.Unlock()
	old.Close()
}

// SetDown makes the server unavailable (dials refused, open connections broken) or available again.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if down {
		s.breakConnsLocked()
	}
}

// SetDelay delays every reply by d (0: none).
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

func (s *Server) breakConnsLocked() {
	for c := range s.conns {
		_ = c.Conn.Close()
		delete(s.conns, c)
	}
}

// Close closes every client made by Client and the instance; the bubble's goroutines of this
// server end.
func (s *Server) Close() {
	s.mu.Lock()
	clients := s.clients
	s.clients = nil
	s.breakConnsLocked()
	cur := s.cur
	s.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
	cur.Close()
}

func (s *Server) replyDelay() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delay
}

// conn is the client end of a pipe: the first read after a write (the reply) waits the server's
// delay, and a reply the caller's deadline has passed for is lost.
type conn struct {
	net.Conn
	srv     *Server
	mu      sync.Mutex
	written bool
}

func (c *conn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.written = true
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *conn) Read(b []byte) (int, error) {
	c.mu.Lock()
	wait := c.written
	c.written = false
	c.mu.Unlock()
	if d := c.srv.replyDelay(); wait && d > 0 {
		time.Sleep(d)
	}
	return c.Conn.Read(b)
}

func (c *conn) Close() error {
	c.srv.mu.Lock()
	delete(c.srv.conns, c)
	c.srv.mu.Unlock()
	return c.Conn.Close()
}
