package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
)

// scripted is a registry that answers a Member as a test says: it holds the (queue -> status) of
// the records it has, refuses what the test tells it to, and records every call.
type scripted struct {
	mu      sync.Mutex
	records map[string]Status // queue -> status; absent = no record
	fail    error             // the next call's error, once
	calls   []string          // "register q" / "beat q {...}"
	beats   map[string][]Beat
}

func newScripted() *scripted {
	return &scripted{records: map[string]Status{}, beats: map[string][]Beat{}}
}

func (s *scripted) Register(_ context.Context, reg Registration) (Worker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "register "+reg.Queue)
	if err := s.fail; err != nil {
		s.fail = nil
		return Worker{}, err
	}
	if err := reg.Validate(); err != nil {
		return Worker{}, err
	}
	s.records[reg.Queue] = StatusOnline
	return Worker{ServerID: reg.ServerID, Queue: reg.Queue, Status: StatusOnline}, nil
}

func (s *scripted) Heartbeat(_ context.Context, queue, _ string, b Beat) (Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "beat "+queue)
	if err := s.fail; err != nil {
		s.fail = nil
		return "", err
	}
	switch st, ok := s.records[queue]; {
	case !ok:
		return "", fmt.Errorf("%w: no record", ErrNotRegistered)
	case st == StatusOffline:
		return StatusOffline, fmt.Errorf("%w: OFFLINE", ErrNotRegistered)
	default:
		s.beats[queue] = append(s.beats[queue], b)
		return st, nil
	}
}

// set changes the records as an operator, a leader or a Redis restart would.
func (s *scripted) set(f func(records map[string]Status)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.records)
}

func (s *scripted) failNext(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

func (s *scripted) beatsOf(queue string) []Beat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.beats[queue])
}

// took returns the calls since the last took.
func (s *scripted) took() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.calls
	s.calls = nil
	return out
}

type drainLog struct {
	mu    sync.Mutex
	heard []bool
}

func (d *drainLog) SetDraining(draining bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.heard = append(d.heard, draining)
}

func (d *drainLog) got() []bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.heard)
}

const testInterval = 10 * time.Second

func memberConfig(queues ...string) MemberConfig {
	return MemberConfig{Worker: Registration{ServerID: "w-1", Hostname: "pod-1", PID: 7, Version: "1.0",
		Capabilities: []string{"Dispatcher"}, MaxConcurrency: 10}, Queues: queues}
}

// running is a Member whose Run goes round by round on a fake clock, inside a synctest bubble.
type running struct {
	t   *testing.T
	m   *Member
	clk *clock.Fake
}

// runMember starts m's Run and returns once its first round is done; the test ends it.
func runMember(t *testing.T, reg registrar, cfg MemberConfig) *running {
	clk := clock.NewFake(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	m := newMember(reg, cfg, testInterval, clk, zap.NewNop())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	synctest.Wait()
	return &running{t: t, m: m, clk: clk}
}

// round lets one HeartbeatInterval pass on the fake clock and waits for the round it starts.
func (r *running) round() {
	r.t.Helper()
	due, ok := r.clk.NextDue()
	if !ok || due.Sub(r.clk.Now()) != testInterval {
		r.t.Fatalf("the Member waits until %v (armed %v), want one interval (%v) from %v", due, ok, testInterval, r.clk.Now())
	}
	r.clk.Advance(testInterval)
	synctest.Wait()
}

func wantCalls(t *testing.T, reg *scripted, step string, want ...string) {
	t.Helper()
	if got := reg.took(); !slices.Equal(got, want) {
		t.Fatalf("%s: calls %q, want %q", step, got, want)
	}
}

// A worker registers on every queue, then heartbeats; a heartbeat refused as not registered (the
// leader evicted it, an operator deregistered it, Redis lost the record) makes the next round
// register it again, on that queue only.
func TestMemberRegistersAgainAfterEvictionOrLostRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := newScripted()
		r := runMember(t, reg, memberConfig("orders", "billing"))
		wantCalls(t, reg, "first round", "register orders", "register billing")
		r.round()
		wantCalls(t, reg, "registered", "beat orders", "beat billing")

		reg.set(func(rec map[string]Status) { rec["orders"] = StatusOffline }) // evicted
		r.round()
		wantCalls(t, reg, "evicted", "beat orders", "beat billing")
		r.round()
		wantCalls(t, reg, "after the eviction", "register orders", "beat billing")
		r.round()
		wantCalls(t, reg, "registered again", "beat orders", "beat billing")

		reg.set(func(rec map[string]Status) { clear(rec) }) // Redis restarted empty
		r.round()
		wantCalls(t, reg, "records lost", "beat orders", "beat billing")
		r.round()
		wantCalls(t, reg, "after the loss", "register orders", "register billing")

		// Any other failure is retried as it was: a failed registration registers again, a failed
		// heartbeat heartbeats again.
		reg.failNext(errors.New("connection refused"))
		r.round()
		wantCalls(t, reg, "one heartbeat fails", "beat orders", "beat billing")
		r.round()
		wantCalls(t, reg, "after a failed heartbeat", "beat orders", "beat billing")
		if err := r.m.State().Err; err != nil {
			t.Fatalf("State().Err = %v after the heartbeats succeeded again", err)
		}
	})
}

// The Drainer hears each change of the drain flag once, however many rounds it lasts: a drain asked
// on any queue, a failed heartbeat that leaves the last answer standing, the drain taken back.
func TestMemberTellsTheDrainerEachChangeOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := newScripted()
		drainer := &drainLog{}
		cfg := memberConfig("orders", "billing")
		cfg.Drainer = drainer
		r := runMember(t, reg, cfg)
		r.round()
		if got := drainer.got(); len(got) != 0 || r.m.Draining() {
			t.Fatalf("an ONLINE worker: the Drainer heard %v, Draining() = %v; want nothing, false", got, r.m.Draining())
		}
		reg.set(func(rec map[string]Status) { rec["billing"] = StatusDraining })
		for range 3 {
			r.round()
		}
		if got := drainer.got(); !slices.Equal(got, []bool{true}) || !r.m.Draining() {
			t.Fatalf("asked to drain for 3 rounds: the Drainer heard %v, Draining() = %v; want [true], true", got, r.m.Draining())
		}
		reg.failNext(errors.New("i/o timeout")) // the orders heartbeat fails; billing still answers DRAINING
		r.round()
		reg.set(func(rec map[string]Status) { rec["billing"] = StatusOnline })
		r.round()
		r.round()
		if got := drainer.got(); !slices.Equal(got, []bool{true, false}) || r.m.Draining() {
			t.Fatalf("drain taken back: the Drainer heard %v, Draining() = %v; want [true false], false", got, r.m.Draining())
		}
		if st := r.m.State().Status; st["orders"] != StatusOnline || st["billing"] != StatusOnline {
			t.Fatalf("State().Status = %v, want both ONLINE", st)
		}
	})
}

// The load report sends the registry the increase of the application's running totals since the
// last heartbeat the registry took, and shows the totals it took.
func TestMemberReportsTheIncreaseOfTheTotals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := newScripted()
		var mu sync.Mutex
		var now Load
		cfg := memberConfig("orders")
		cfg.Load = func(string) Load { mu.Lock(); defer mu.Unlock(); return now }
		r := runMember(t, reg, cfg) // registered; the first heartbeat is the next round's
		steps := []struct {
			name    string
			now     Load
			refused bool
			want    Beat
		}{
			{"first", Load{Active: 3, Completed: 5, Failed: 1}, false, Beat{Active: 3, CompletedDelta: 5, FailedDelta: 1}},
			{"more done, refused", Load{Active: 2, Completed: 9, Failed: 1}, true, Beat{}},
			// The previous heartbeat failed: its increase is sent again, with the new one.
			{"after a refused heartbeat", Load{Active: 2, Completed: 10, Failed: 2}, false, Beat{Active: 2, CompletedDelta: 5, FailedDelta: 1}},
			// The application reset its counters: they count from zero.
			{"counters reset", Load{Active: 1, Completed: 2}, false, Beat{Active: 1, CompletedDelta: 2}},
		}
		taken := Load{}
		for _, s := range steps {
			mu.Lock()
			now = s.now
			mu.Unlock()
			if s.refused {
				reg.failNext(errors.New("connection reset"))
			}
			before := len(reg.beatsOf("orders"))
			r.round()
			beats := reg.beatsOf("orders")
			if s.refused {
				if len(beats) != before {
					t.Fatalf("%s: the registry took %v", s.name, beats[before:])
				}
			} else {
				if len(beats) != before+1 || beats[before] != s.want {
					t.Fatalf("%s: the registry took %v, want %+v", s.name, beats[before:], s.want)
				}
				taken = s.now
			}
			if got := r.m.State().Load["orders"]; got != taken {
				t.Fatalf("%s: State().Load = %+v, want the totals the registry last took %+v", s.name, got, taken)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		reg := newScripted()
		r := runMember(t, reg, memberConfig("orders"))
		r.round()
		if beats := reg.beatsOf("orders"); len(beats) != 1 || beats[0] != (Beat{}) {
			t.Fatalf("without MemberConfig.Load: the registry took %v, want one empty beat", beats)
		}
		if st := r.m.State(); st.Load != nil {
			t.Fatalf("without MemberConfig.Load: State().Load = %v, want nil", st.Load)
		}
	})
}

// State dates the last success on the Member's clock and keeps the last failure until a call
// succeeds again.
func TestMemberStateDatesSuccessesOnItsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := newScripted()
		reg.failNext(errors.New("connection refused"))
		r := runMember(t, reg, memberConfig("orders"))
		start := r.clk.Now()
		if st := r.m.State(); st.Err == nil || !st.LastHeartbeat.IsZero() {
			t.Fatalf("after a failed registration: %+v, want the error and no heartbeat", st)
		}
		r.round()
		if st := r.m.State(); st.Err != nil || !st.LastHeartbeat.Equal(start.Add(testInterval)) {
			t.Fatalf("after a registration: %+v, want no error and the fake clock's time", st)
		}
		r.round()
		if st := r.m.State(); st.Err != nil || !st.LastHeartbeat.Equal(start.Add(2*testInterval)) ||
			st.Status["orders"] != StatusOnline {
			t.Fatalf("after a heartbeat: %+v, want ONLINE at the fake clock's time", st)
		}
	})
}

func TestMemberConfigValidate(t *testing.T) {
	withWorker := func(f func(*Registration)) MemberConfig {
		c := memberConfig("orders")
		f(&c.Worker)
		return c
	}
	cases := []struct {
		name string
		cfg  MemberConfig
		want string // "" = valid
	}{
		{"valid", memberConfig("orders", "billing"), ""},
		{"no queues", memberConfig(), "Queues must name at least one queue"},
		{"bad queue", memberConfig("orders", "a/b"), "Queues[1] \"a/b\" must not contain '/'"},
		{"queue twice", memberConfig("orders", "billing", "orders"), "Queues[2] \"orders\" is listed twice"},
		{"queue in the worker", withWorker(func(r *Registration) { r.Queue = "orders" }), "Worker.Queue is set per queue by the Member"},
		{"no server ID", withWorker(func(r *Registration) { r.ServerID = "" }), "Worker.ServerID"},
		{"no capability", withWorker(func(r *Registration) { r.Capabilities = nil }), "Worker.Capabilities must list at least one"},
		{"no PID", withWorker(func(r *Registration) { r.PID = 0 }), "Worker.PID must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantConfigErr(t, tc.cfg.Validate(), tc.want)
		})
	}
}
