package election

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
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
	// successor can win. ctx is bounded by ResignTimeout (the resign then gets its own). Optional.
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
// session if the old one was lost. When ctx ends it resigns a held term (bounded by ResignTimeout, so
// a follower wins in milliseconds) and returns nil once every callback has returned. It returns an
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

	backoff := e.cfg.RetryMin
	for ctx.Err() == nil {
		term, err := e.Campaign(ctx, project, queue, value)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrAlreadyCampaigning) {
				return err
			}
			log.Warn("campaign failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			if !e.sleep(ctx, clock.Jitter(backoff)) {
				return nil
			}
			backoff = min(2*backoff, e.cfg.RetryMax)
			continue
		}
		backoff = e.cfg.RetryMin
		cause := e.lead(ctx, term, cb, log)
		if cb.OnStepDown != nil {
			cb.OnStepDown(term, cause)
		}
		if ctx.Err() == nil && !errors.Is(cause, ErrResigned) {
			// Lost, not handed over: give the others a moment before standing again.
			if !e.sleep(ctx, clock.Jitter(e.cfg.RetryMin)) {
				return nil
			}
		}
	}
	return nil
}

// lead runs OnElected for one term and returns why the term ended, after OnElected has returned.
func (e *Elector) lead(ctx context.Context, term *Term, cb Callbacks, log *zap.Logger) error {
	result := make(chan error, 1)
	go func() { result <- cb.OnElected(term.Context(), term) }()

	resign := func() {
		if cb.OnResign != nil && ctx.Err() != nil && term.Err() == nil {
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ResignTimeout)
			cb.OnResign(hctx, term)
			cancel()
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ResignTimeout)
		defer cancel()
		if err := term.Resign(rctx); err != nil {
			log.Warn("resign failed; the lease expiry hands over instead", zap.Error(err))
		}
	}
	var callbackDone bool
	select {
	case err := <-result:
		callbackDone = true
		if err != nil {
			log.Warn("leader callback failed; resigning so another candidate can lead", zap.Error(err))
			resign()
			break
		}
		select {
		case <-term.Done():
		case <-ctx.Done():
			resign()
		}
	case <-term.Done():
	case <-ctx.Done():
		resign()
	}
	if !callbackDone {
		<-result
	}
	<-term.Done()
	return term.Err()
}
