package ownership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.uber.org/goleak"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeTerm is a term that holds until end is called.
type fakeTerm struct {
	token  int64
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newTerm(token int64) *fakeTerm {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &fakeTerm{token: token, ctx: ctx, cancel: cancel}
}

func (t *fakeTerm) end(cause error)               { t.cancel(cause) }
func (t *fakeTerm) Project() string               { return "p" }
func (t *fakeTerm) Queue() string                 { return "q" }
func (t *fakeTerm) LeaderID() string              { return "me" }
func (t *fakeTerm) Key() string                   { return fmt.Sprintf("/baton/election/p/q/%x", t.token) }
func (t *fakeTerm) Token() int64                  { return t.token }
func (t *fakeTerm) Started() time.Time            { return time.Time{} }
func (t *fakeTerm) Context() context.Context      { return t.ctx }
func (t *fakeTerm) Check() error                  { return context.Cause(t.ctx) }
func (t *fakeTerm) Err() error                    { return context.Cause(t.ctx) }
func (t *fakeTerm) Confirm(context.Context) error { return t.Check() }
func (t *fakeTerm) ValidUntil() time.Time         { return time.Now().Add(time.Hour) }

// fakes is every collaborator of a Queue, recording what it was asked.
type fakes struct {
	mu        sync.Mutex
	takes     int
	replaces  int
	stepDowns int
	clears    int
	takeErr   error             // what the next Take returns
	failTakes error             // what every Take returns while set
	attempts  int               // Take calls
	closes    chan error        // a value makes Watch return it (ErrRunClosed) ...
	continues chan takeover.Run // ... or the run it continued as
	beats     []takeover.Run    // the runs RunReporting was started for
	report    func(error)       // the last RunReporting's
	unfit     int
	fit       int
	probe     progress.Report
	started   []takeover.Run
	stopped   []error
	steppedDn []error
	continued int
}

func newFakes() *fakes {
	return &fakes{closes: make(chan error, 8), continues: make(chan takeover.Run, 8)}
}

func (f *fakes) run(n int) takeover.Run {
	return takeover.Run{WorkflowID: "dispatcher-p-q", RunID: fmt.Sprintf("run-%d", n), FirstRunID: fmt.Sprintf("run-%d", n)}
}

func (f *fakes) Take(ctx context.Context, term takeover.Term) (takeover.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.failTakes != nil {
		return takeover.Run{}, f.failTakes
	}
	if err := f.takeErr; err != nil {
		f.takeErr = nil
		return takeover.Run{}, err
	}
	f.takes++
	return f.run(f.takes + f.replaces), nil
}

func (f *fakes) Replace(ctx context.Context, term takeover.Term) (takeover.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replaces++
	return f.run(f.takes + f.replaces), nil
}

func (f *fakes) Watch(ctx context.Context, term takeover.Term, run takeover.Run) (takeover.Run, error) {
	select {
	case err := <-f.closes:
		return takeover.Run{}, err
	case next := <-f.continues:
		return next, nil
	case <-ctx.Done():
		return takeover.Run{}, ctx.Err()
	}
}

func (f *fakes) StepDown(ctx context.Context, term takeover.Term, run takeover.Run) error {
	f.mu.Lock()
	f.stepDowns++
	f.mu.Unlock()
	f.closes <- fmt.Errorf("terminated by its owner: %w", takeover.ErrRunClosed)
	return nil
}

func (f *fakes) Quiesce(context.Context, takeover.Term, takeover.Run) {}

func (f *fakes) RunReporting(ctx context.Context, term heartbeat.Term, run takeover.Run, report func(error)) error {
	f.mu.Lock()
	f.beats, f.report = append(f.beats, run), report
	f.mu.Unlock()
	<-ctx.Done()
	return nil
}

func (f *fakes) Clear(context.Context, heartbeat.Term, takeover.Run) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clears++
	return nil
}

func (f *fakes) TakingOver(string) func() { return func() {} }
func (f *fakes) Unfit(string)             { f.mu.Lock(); f.unfit++; f.mu.Unlock() }
func (f *fakes) Fit(string)               { f.mu.Lock(); f.fit++; f.mu.Unlock() }

func (f *fakes) Started(_ string, _ *fakeTerm, run takeover.Run) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, run)
}
func (f *fakes) Stopped(_ string, cause error) {
	f.mu.Lock()
	f.stopped = append(f.stopped, cause)
	f.mu.Unlock()
}
func (f *fakes) SteppedDown(_ context.Context, _ string, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.steppedDn = append(f.steppedDn, cause)
}
func (f *fakes) NewLeader(string, election.Leader)      {}
func (f *fakes) ContinuedAsNew(context.Context, string) { f.mu.Lock(); f.continued++; f.mu.Unlock() }

func (f *fakes) Evict(context.Context, registry.Term, string) (int, error) { return 0, nil }
func (f *fakes) List(context.Context, registry.Filter, string, int) ([]registry.Worker, string, error) {
	return []registry.Worker{{Status: registry.StatusOnline}, {Status: registry.StatusOnline}, {Status: registry.StatusDraining}}, "", nil
}

func (f *fakes) setProbe(rep progress.Report) { f.mu.Lock(); f.probe = rep; f.mu.Unlock() }

func (f *fakes) get(read func(f *fakes)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	read(f)
}

const (
	retryMin = 100 * time.Millisecond
	interval = time.Second
)

// harness is a Queue over fakes and a fake clock, inside a synctest bubble.
type harness struct {
	t   *testing.T
	f   *fakes
	clk *clock.Fake
	q   *Queue[*fakeTerm]
}

func newHarness(t *testing.T, progressOn bool) *harness {
	h := &harness{t: t, f: newFakes(), clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	h.q = New(Config[*fakeTerm]{Queue: "q",
		Settings:   Settings{MaxReplacements: 2},
		Takeover:   takeover.Config{RetryMin: retryMin, RetryMax: 4 * retryMin},
		EvictEvery: interval, Progress: progress.Config{Interval: interval, Disabled: !progressOn},
		Taker: h.f, Beater: h.f, Evictor: h.f, Balancer: h.f, Observer: h.f, Clock: h.clk,
		Probe: func(_ context.Context, _, _ string, now time.Time) progress.Report {
			h.f.mu.Lock()
			defer h.f.mu.Unlock()
			rep := h.f.probe
			rep.CheckedAt = now
			return rep
		}})
	return h
}

// lead runs Lead of a new term in the background; done receives its result.
func (h *harness) lead(token int64) (*fakeTerm, <-chan error) {
	term := newTerm(token)
	done := make(chan error, 1)
	go func() { done <- h.q.Lead(term.ctx, term) }()
	synctest.Wait()
	return term, done
}

// advance moves the fake clock by d and lets every goroutine it woke run until it blocks again.
func (h *harness) advance(d time.Duration) {
	h.clk.Advance(d)
	synctest.Wait()
}

func TestLeadTakesOverAnnouncesOnceAndStepsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, false)
		term, done := h.lead(7)
		s := h.q.Snapshot()
		if !s.Leading || !s.Held || !s.Open || s.Run.RunID != "run-1" || s.Takeovers != 1 {
			t.Fatalf("after the takeover: %+v", s)
		}
		if got, ok := h.q.Leading(); !ok || got != term {
			t.Fatalf("Leading() = %v, %v", got, ok)
		}
		h.advance(interval) // the eviction pass counts the workers
		if w := h.q.Snapshot().Workers; w[registry.StatusOnline] != 2 || w[registry.StatusDraining] != 1 {
			t.Errorf("workers %v, want 2 online and 1 draining", w)
		}
		term.end(election.ErrKeyLost)
		if err := <-done; err != nil {
			t.Fatalf("Lead after the term ended: %v", err)
		}
		h.q.SteppedDown(term, election.ErrKeyLost)
		s = h.q.Snapshot()
		if s.HasTerm || s.Leading || !errors.Is(s.LastCause, election.ErrKeyLost) {
			t.Errorf("after the step-down: %+v", s)
		}
		h.f.get(func(f *fakes) {
			if len(f.started) != 1 || len(f.stopped) != 1 || len(f.steppedDn) != 1 {
				t.Errorf("started %v, stopped %v, stepped down %v: want one each", f.started, f.stopped, f.steppedDn)
			}
		})
	})
}

// A run closed behind the owner's back is replaced after a backoff on the injected clock, in the same
// term (announced once); past MaxReplacements the term is given up with an error.
func TestClosedRunIsReplacedAfterBackoffThenGivenUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, false)
		term, done := h.lead(7)
		defer term.end(election.ErrResigned)
		closed := fmt.Errorf("terminated out of band: %w", takeover.ErrRunClosed)
		h.f.closes <- closed
		synctest.Wait()
		if s := h.q.Snapshot(); s.Open || s.Replaced != 1 || !errors.Is(s.LastErr, takeover.ErrRunClosed) {
			t.Fatalf("after the close: %+v", s)
		}
		h.f.get(func(f *fakes) {
			if f.replaces != 0 {
				t.Fatalf("replaced before the backoff")
			}
		})
		h.advance(retryMin)
		if s := h.q.Snapshot(); !s.Open || s.Run.RunID != "run-2" {
			t.Fatalf("not replaced after the backoff: %+v", s)
		}
		h.f.closes <- closed
		synctest.Wait()
		h.advance(2 * retryMin) // doubled
		h.f.closes <- closed
		synctest.Wait()
		err := <-done
		if !errors.Is(err, takeover.ErrRunClosed) {
			t.Fatalf("Lead = %v, want the third close (MaxReplacements 2)", err)
		}
		h.f.get(func(f *fakes) {
			if f.replaces != 2 || len(f.started) != 1 {
				t.Errorf("%d replacements, %d announcements: want 2 and 1", f.replaces, len(f.started))
			}
		})
	})
}

// Runs that close right after they start (a start hook that fails every time) make the queue's runs
// failing after two in a row, though each is replaced and the queue has an open run most of the
// time; a replacement that lives RunFailingWithin ends the streak.
func TestRunsClosingRightAfterTheirStartAreFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, false)
		term, done := h.lead(7)
		defer term.end(election.ErrResigned)
		closed := &takeover.ClosedError{WorkflowID: "w", RunID: "r", Status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, Detail: "start failed"}
		h.f.closes <- closed
		synctest.Wait()
		if s := h.q.Snapshot(); s.QuickCloses != 1 || s.RunsFailing(h.clk.Now()) {
			t.Fatalf("after one close: %d quick closes, failing %v; want 1, false", s.QuickCloses, s.RunsFailing(h.clk.Now()))
		}
		h.advance(retryMin)
		h.f.closes <- closed
		synctest.Wait()
		h.advance(2 * retryMin)
		s := h.q.Snapshot()
		if !s.Open || s.QuickCloses != 2 || !s.RunsFailing(h.clk.Now()) {
			t.Fatalf("replaced after a second quick close: open %v, %d quick closes, failing %v; want true, 2, true",
				s.Open, s.QuickCloses, s.RunsFailing(h.clk.Now()))
		}
		h.advance(RunFailingWithin)
		if s := h.q.Snapshot(); s.RunsFailing(h.clk.Now()) {
			t.Fatalf("a replacement open for RunFailingWithin is still failing: %+v", s)
		}
		h.f.closes <- closed
		if err := <-done; !errors.Is(err, takeover.ErrRunClosed) {
			t.Fatalf("Lead = %v, want the third close (MaxReplacements 2)", err)
		}
		if s := h.q.Snapshot(); s.QuickCloses != 0 {
			t.Fatalf("a close after RunFailingWithin counted as quick: %d", s.QuickCloses)
		}
	})
}

// An operator's terminate right after a run's start is no failure of the run's own: it counts
// nothing towards failing runs.
func TestATerminateIsNoFailedStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, false)
		term, done := h.lead(7)
		defer func() { term.end(election.ErrResigned); <-done }()
		h.f.closes <- &takeover.ClosedError{WorkflowID: "w", RunID: "r", Status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED}
		synctest.Wait()
		if s := h.q.Snapshot(); s.QuickCloses != 0 || s.Replaced != 1 {
			t.Fatalf("after a terminate: %d quick closes, %d replaced; want 0, 1", s.QuickCloses, s.Replaced)
		}
	})
}

// The close that a graceful hand-over causes is the owner's own: it is not replaced. The run's
// heartbeat entry is cleared once the term has ended (its key deleted), not before: the entry names
// the ended run and the term's token, so a late clear never touches the successor's, and a Redis
// call no longer stands between each queue of a stop and its successor (issue #40).
func TestHandOverEndsTheRunWithoutReplacingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, false)
		term, done := h.lead(7)
		h.q.HandOver(t.Context(), term, true)
		if err := <-done; err != nil {
			t.Fatalf("Lead after the hand-over: %v", err)
		}
		h.f.get(func(f *fakes) {
			if f.stepDowns != 1 || f.clears != 0 || f.replaces != 0 {
				t.Errorf("before the term ended: step-downs %d, clears %d, replacements %d: want 1, 0, 0", f.stepDowns, f.clears, f.replaces)
			}
		})
		term.end(election.ErrResigned)
		h.q.SteppedDown(term, election.ErrResigned)
		h.f.get(func(f *fakes) {
			if f.stepDowns != 1 || f.clears != 1 || f.replaces != 0 {
				t.Errorf("step-downs %d, clears %d, replacements %d: want 1, 1, 0", f.stepDowns, f.clears, f.replaces)
			}
		})
		h.q.SteppedDown(term, election.ErrResigned)
		h.f.get(func(f *fakes) {
			if f.clears != 1 {
				t.Errorf("a second report of the term's end cleared again: %d clears", f.clears)
			}
		})
	})
}

// A takeover that cannot succeed stays on record (readiness reads it) until one succeeds, and the
// term is kept meanwhile: a retry within the term takes the dispatcher over once it can.
func TestPermanentTakeoverFailureIsKeptUntilATakeoverSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, false)
		h.f.takeErr = fmt.Errorf("namespace not found: %w", takeover.ErrPermanent)
		term, done := h.lead(7)
		if s := h.q.Snapshot(); !errors.Is(s.Permanent, takeover.ErrPermanent) || s.Takeovers != 0 || s.Failing.Terms != 1 || !s.Held {
			t.Fatalf("after the failure: %+v", s)
		}
		h.f.get(func(f *fakes) {
			if len(f.started) != 0 || len(f.stopped) != 0 {
				t.Errorf("a term with no run was announced: started %v stopped %v", f.started, f.stopped)
			}
		})
		h.advance(2 * retryMin) // the first retry, at most RetryMin (jittered) later
		if s := h.q.Snapshot(); s.Permanent != nil || !s.Open || s.Failing.Terms != 0 {
			t.Fatalf("after a takeover succeeded: %+v", s)
		}
		select {
		case err := <-done:
			t.Fatalf("Lead returned %v after its takeover succeeded", err)
		default:
		}
		term.end(election.ErrResigned)
		<-done
	})
}

// A run that continues as new is followed// A run that continues as new is followed: the snapshot and the heartbeat name the new run.
func TestContinueAsNewIsFollowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, false)
		term, done := h.lead(7)
		next := takeover.Run{WorkflowID: "dispatcher-p-q", RunID: "run-1b", FirstRunID: "run-1"}
		h.f.continues <- next
		synctest.Wait()
		if s := h.q.Snapshot(); s.Run != next || !s.Open {
			t.Errorf("snapshot run %+v, want %+v", s.Run, next)
		}
		h.f.get(func(f *fakes) {
			if len(f.beats) != 2 || f.beats[1] != next || f.continued != 1 {
				t.Errorf("heartbeats for %v, %d continued: want run-1 then run-1b, 1", f.beats, f.continued)
			}
		})
		term.end(election.ErrResigned)
		<-done
	})
}

// A failing heartbeat is on record with the time it began failing, until a write succeeds.
func TestHeartbeatFailureIsDatedByTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, false)
		term, done := h.lead(7)
		defer func() { term.end(election.ErrResigned); <-done }()
		var report func(error)
		h.f.get(func(f *fakes) { report = f.report })
		failedAt := h.clk.Now()
		report(errors.New("NOPERM"))
		h.clk.Advance(5 * time.Second)
		report(errors.New("NOPERM again"))
		if s := h.q.Snapshot(); s.HeartbeatErr == nil || !s.HeartbeatFailing.Equal(failedAt) {
			t.Fatalf("failing since %v (%v), want %v", s.HeartbeatFailing, s.HeartbeatErr, failedAt)
		}
		report(nil)
		if s := h.q.Snapshot(); s.HeartbeatErr != nil {
			t.Errorf("still failing after a success: %v", s.HeartbeatErr)
		}
		// A report of an ended term's writer changes nothing.
		h.q.heartbeatResult(newTerm(3), errors.New("old term"))
		if s := h.q.Snapshot(); s.HeartbeatErr != nil {
			t.Errorf("another term's report recorded: %v", s.HeartbeatErr)
		}
	})
}

// A stall is recorded with the time its cause was first seen; Temporal unreachable for UnfitAfter
// intervals marks the worker unfit, and an answer marks it fit again.
func TestUnreachableTemporalMarksTheWorkerUnfit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, true)
		term, done := h.lead(7)
		defer func() { term.end(election.ErrResigned); <-done }()
		h.f.setProbe(progress.Report{Cause: progress.CauseUnreachable, Detail: "connection refused"})
		h.advance(interval)
		first := h.q.Snapshot()
		if first.Progress.Cause != progress.CauseUnreachable || first.StalledSince.IsZero() {
			t.Fatalf("after a check: %+v", first.Progress)
		}
		for i := 1; i < UnfitAfter; i++ {
			h.advance(interval)
		}
		h.f.get(func(f *fakes) {
			if f.unfit != 0 {
				t.Fatalf("unfit after %d intervals, want after %d", UnfitAfter-1, UnfitAfter)
			}
		})
		h.advance(interval)
		h.f.get(func(f *fakes) {
			if f.unfit == 0 {
				t.Fatalf("not unfit after %d intervals unreachable", UnfitAfter)
			}
		})
		if s := h.q.Snapshot(); !s.StalledSince.Equal(first.StalledSince) {
			t.Errorf("stalled since %v, want the first sight %v", s.StalledSince, first.StalledSince)
		}
		h.f.setProbe(progress.Report{})
		fits := 0
		h.f.get(func(f *fakes) { fits = f.fit })
		h.advance(interval)
		if s := h.q.Snapshot(); s.Progress.Stalled() || !s.StalledSince.IsZero() {
			t.Errorf("after Temporal answered: %+v since %v", s.Progress, s.StalledSince)
		}
		h.f.get(func(f *fakes) {
			if f.fit <= fits {
				t.Errorf("not marked fit again")
			}
		})
	})
}
