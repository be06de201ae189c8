package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/event"
)

// Callbacks are what Run calls as leadership comes and goes, in the spirit of client-go's
// leaderelection.
type Callbacks struct {
	// OnElected is called in its own goroutine when a term starts; ctx is the term's context,
	// cancelled when the term ends. It may block until then or return early. A non-nil error (this
	// process cannot do the leader's job) resigns the term so another candidate can take over. Required.
	OnElected func(ctx context.Context, term *Term) error
	// OnResign is called when Run is about to resign a live term because its context ended, while
	// the term still holds, so the leader can hand over cleanly (stop its dispatcher run) before a
	// successor can win. ctx is bounded by HandOverTimeout (the resign's later steps get their own).
	// Optional.
	OnResign func(ctx context.Context, term *Term)
	// OnStepDown is called after every term, once OnElected has returned and the term has ended, with
	// the reason it ended. Optional.
	OnStepDown func(term *Term, cause error)
	// OnNewLeader is called with every change of leader as etcd shows it, this process included; an
	// empty ID means nobody leads. Advisory. Optional.
	OnNewLeader func(leader Leader)
}

// Run campaigns for (project, queue) until ctx ends, calling cb as leadership comes and goes. After a
// lost term or a failed campaign it campaigns again with jittered exponential backoff, on a fresh
// session if the old one was lost; after a term whose OnElected failed it also backs off (RetryMin
// doubling to RetryMax, reset by a term whose OnElected did not fail; at least RetryMax after an
// error wrapping ErrStepAside), so that a leader that cannot do its job does not campaign, fail and
// resign in a hot loop. When ctx ends it hands a held term over: OnResign while the term holds,
// then the term ends, then Run waits for OnElected to return (bounded by ResignTimeout) and only then
// deletes the key, so a follower wins in milliseconds but never while the old leader still acts. It returns nil once every callback has returned, and an
// error only for invalid arguments or a closed Elector.
func (e *Elector) Run(ctx context.Context, project, queue, value string, cb Callbacks) error {
	if cb.OnElected == nil {
		return fmt.Errorf("%w: Callbacks.OnElected must not be nil", ErrInvalidConfig)
	}
	if err := ValidateName("project", project); err != nil {
		return err
	}
	if err := ValidateName("queue", queue); err != nil {
		return err
	}
	log := e.log.With(zap.String("project", project), zap.String("queue", queue), zap.String("server_id", value))

	if cb.OnNewLeader != nil {
		octx, cancel := context.WithCancel(ctx)
		leaders, err := e.Observe(octx, project, queue)
		if err != nil {
			cancel()
			return err
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for l := range leaders {
				cb.OnNewLeader(l)
			}
		}()
		defer func() { cancel(); <-done }()
	}

	campaigns := newBackoff(e.cfg.Clock, e.cfg.RetryMin, e.cfg.RetryMax) // after failed campaigns
	failures := newBackoff(e.cfg.Clock, e.cfg.RetryMin, e.cfg.RetryMax)  // after terms whose OnElected failed
	for ctx.Err() == nil {
		term, err := e.campaignFor(ctx, project, queue, value, true)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrAlreadyCampaigning) {
				return err
			}
			pause := campaigns.next()
			log.Warn("campaign failed; retrying", zap.Error(err), zap.Duration("backoff", pause))
			if !e.sleep(ctx, pause) {
				return nil
			}
			continue
		}
		campaigns.reset()
		cause, cbErr := e.lead(ctx, term, cb)
		if cb.OnStepDown != nil {
			cb.OnStepDown(term, cause)
		}
		var pause time.Duration
		switch {
		case cbErr != nil:
			// The callback could not do the leader's job; the term was handed over. Standing again at
			// once would fail the same way, as often as etcd can elect us.
			pause = e.pauseAfter(cbErr, failures)
			log.Warn("leader callback failed; term resigned, campaigning again after a pause", zap.Error(cbErr),
				zap.Int64("token", term.Token()), zap.Duration("backoff", pause))
		case !errors.Is(cause, ErrResigned):
			// Lost, not handed over: give the others a moment before standing again.
			failures.reset()
			pause = clock.Jitter(e.cfg.Clock, e.cfg.RetryMin)
		default:
			failures.reset()
		}
		if pause > 0 && !e.sleep(ctx, pause) {
			return nil
		}
	}
	return nil
}

// lead runs OnElected for one term and returns why the term ended and OnElected's error, once
// OnElected has returned and the term has ended.
func (e *Elector) lead(ctx context.Context, term *Term, cb Callbacks) (cause, cbErr error) {
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		cbErr = cb.OnElected(term.Context(), term)
		term.callbackReturned() // a lost session may revoke the lease now
	}()
	select {
	case <-returned:
		if cbErr != nil && term.Err() == nil {
			// Nothing runs under the term any more: hand it over at once.
			e.resign(ctx, term, nil, returned)
			break
		}
		select {
		case <-term.Done():
		case <-ctx.Done():
			e.resign(ctx, term, cb.OnResign, returned)
		}
	case <-term.Done():
	case <-ctx.Done():
		e.resign(ctx, term, cb.OnResign, returned)
	}
	<-returned
	<-term.Done()
	return term.Err(), cbErr
}

// resign hands a live term over: onResign while the term still holds, then the term ends (its
// context is cancelled with ErrResigned), then OnElected gets ResignTimeout to return, and only then
// is the key deleted so that a follower can win. A callback that ignores its cancelled context past
// that bound holds the queue up no longer; fencing must cover what it still does. All of it runs in
// one of the Elector's MaxHandOvers slots: HandOverTimeout counts from the slot, not from the wait
// for it, and a term lost while it waits has nothing left to hand over.
func (e *Elector) resign(ctx context.Context, term *Term, onResign func(context.Context, *Term), returned <-chan struct{}) {
	if e.handOvers.take(term.Done()) {
		defer e.handOvers.give()
	}
	bg := context.WithoutCancel(ctx)
	if onResign != nil && term.Err() == nil {
		hctx, cancel := context.WithTimeout(bg, e.cfg.HandOverTimeout)
		onResign(hctx, term)
		cancel()
	}
	term.end(ErrResigned)
	if !errors.Is(term.Err(), ErrResigned) {
		// The term was lost meanwhile: the key is gone, or goes with the session's lease.
		return
	}
	select {
	case <-returned:
	default:
		timer := e.cfg.Clock.NewTimer(e.cfg.ResignTimeout)
		select {
		case <-returned:
		case <-timer.C():
			term.log.Warn("leader callback still running ResignTimeout after its term ended; deleting the key anyway",
				zap.Duration("resign_timeout", e.cfg.ResignTimeout))
		}
		timer.Stop()
	}
	dctx, cancel := context.WithTimeout(bg, e.cfg.ResignTimeout)
	defer cancel()
	if err := term.deleteKey(dctx); err != nil {
		term.log.Warn("resign failed; the lease expiry hands over instead", zap.Error(err))
		ev := term.event(event.ResignFailed)
		ev.Err = err.Error()
		e.cfg.Events.Emit(ev)
	}
}

// pauseAfter is how long Run waits before it stands again after a term whose OnElected failed with
// cbErr: the failures' backoff, and at least RetryMax when the leader steps aside (ErrStepAside).
func (e *Elector) pauseAfter(cbErr error, failures *backoff) time.Duration {
	pause := failures.next()
	if errors.Is(cbErr, ErrStepAside) {
		pause = max(pause, e.cfg.RetryMax)
	}
	return pause
}

// backoff is a jittered exponential backoff from min to max.
type backoff struct {
	clk           clock.Clock
	min, max, cur time.Duration
}

func newBackoff(clk clock.Clock, minimum, maximum time.Duration) *backoff {
	return &backoff{clk: clk, min: minimum, max: maximum, cur: minimum}
}

// next returns the pause to take now and doubles the following one, up to max.
func (b *backoff) next() time.Duration {
	d := clock.Jitter(b.clk, b.cur)
	b.cur = min(2*b.cur, b.max)
	return d
}

func (b *backoff) reset() { b.cur = b.min }
