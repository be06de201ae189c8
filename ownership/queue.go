package ownership

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// Term is what the lifecycle needs of an election term (*election.Term in production): what the
// takeover, the heartbeat and the registry's eviction need, and whether it has ended.
type Term interface {
	takeover.Term
	// Err is nil until the term ends, then the cause.
	Err() error
	// ValidUntil is when the term ends unless its session's lease is kept alive.
	ValidUntil() time.Time
	comparable
}

// The root package's instantiation: *election.Term satisfies Term.
var _ = New[*election.Term]

// Taker is the takeover of the queue's dispatcher (*takeover.Manager).
type Taker interface {
	// Take terminates any prior run and starts this term's; Replace starts a run after this owner's
	// closed behind its back.
	Take(ctx context.Context, term takeover.Term) (takeover.Run, error)
	Replace(ctx context.Context, term takeover.Term) (takeover.Run, error)
	// Watch returns the chain's next run when run continues as new, or an error wrapping
	// takeover.ErrRunClosed when it closed.
	Watch(ctx context.Context, term takeover.Term, run takeover.Run) (takeover.Run, error)
	// StepDown ends (or leaves) the term's run on a graceful resign; Quiesce lets it finish what its
	// handlers run and start nothing new.
	StepDown(ctx context.Context, term takeover.Term, run takeover.Run) error
	Quiesce(ctx context.Context, term takeover.Term, run takeover.Run)
}

// Beater writes the owner's dispatcher heartbeats (*heartbeat.Writer).
type Beater interface {
	RunReporting(ctx context.Context, term heartbeat.Term, run takeover.Run, report func(error)) error
	Clear(ctx context.Context, term heartbeat.Term, run takeover.Run) error
}

// Evictor is the worker registry, as the queue's leader uses it (*registry.Registry).
type Evictor interface {
	Evict(ctx context.Context, term registry.Term, queue string) (int, error)
	List(ctx context.Context, f registry.Filter, cursor string, limit int) ([]registry.Worker, string, error)
}

// Balancer is all that the lifecycle and package balance say to each other (*balance.Runner): a
// takeover under way must not be handed off, and an owner that cannot supervise its run asks the
// queue's other workers to take it.
type Balancer interface {
	// TakingOver marks queue's takeover under way until done is called.
	TakingOver(queue string) (done func())
	// Unfit asks the queue's other workers to stand for it, and hands it to one; Fit withdraws that.
	Unfit(queue string)
	Fit(queue string)
}

// Probe judges the progress of the run (package progress: progress.Check with its client and config).
type Probe func(ctx context.Context, workflowID, runID string, now time.Time) progress.Report

// Observer hears what a Queue does, for the root package's listeners and metrics. Its methods are
// called with no lock held and must not block.
type Observer[T Term] interface {
	// Started is called once per term, when its first run is open; Stopped after such a term ended.
	Started(queue string, term T, run takeover.Run)
	Stopped(queue string, cause error)
	// SteppedDown is called for every term that ended, reported or not; ctx is the term's (ended:
	// for its values).
	SteppedDown(ctx context.Context, queue string, cause error)
	// NewLeader is the leader as etcd shows it (advisory).
	NewLeader(queue string, l election.Leader)
	// ContinuedAsNew is called for each run of the chain that continued as new, under the term's
	// supervision context.
	ContinuedAsNew(ctx context.Context, queue string)
}

// Config is one queue's lifecycle.
type Config[T Term] struct {
	Queue string
	// Settings bound the replacements of runs that closed behind the owner's back (MaxReplacements)
	// and the hold of a term whose takeover fails for good (PermanentHold, PermanentHoldMax). Zero
	// fields are their defaults.
	Settings
	// Takeover gives the backoff of replacements and of a held term's retries (RetryMin, RetryMax),
	// the takeover's own. Zero fields are takeover's defaults.
	Takeover takeover.Config
	// EvictEvery is how often the leader evicts dead workers (the registry heartbeat interval).
	EvictEvery time.Duration
	// Progress is how often (Interval) the run's progress is checked, unless Disabled.
	Progress progress.Config

	Taker    Taker
	Beater   Beater
	Failures Failures // nil: each worker counts its own failed terms only
	Evictor  Evictor  // nil: no registry, no eviction
	Balancer Balancer
	Probe    Probe
	Observer Observer[T]
	Clock    clock.Clock // nil: the real clock
	Log      *zap.Logger // nil: none
}

// Queue is this process's ownership of one queue. The zero value is not usable: call New.
type Queue[T Term] struct {
	cfg Config[T]
	clk clock.Clock
	log *zap.Logger

	mu           sync.Mutex
	st           state[T]
	announced    T    // the term Observer.Started reported
	hasAnnounced bool // whether announced holds one
}

// New returns the lifecycle of cfg.Queue.
func New[T Term](cfg Config[T]) *Queue[T] {
	cfg.Settings, cfg.Takeover = cfg.Settings.WithDefaults(), cfg.Takeover.WithDefaults()
	q := &Queue[T]{cfg: cfg, clk: cfg.Clock, log: cfg.Log}
	if q.clk == nil {
		q.clk = clock.Real()
	}
	if q.log == nil {
		q.log = zap.NewNop()
	}
	return q
}

// Name is the queue's name.
func (q *Queue[T]) Name() string { return q.cfg.Queue }

// Settings are the settings the queue runs with, defaults applied.
func (q *Queue[T]) Settings() Settings { return q.cfg.Settings }

func (q *Queue[T]) update(f func(s *state[T])) {
	q.mu.Lock()
	defer q.mu.Unlock()
	f(&q.st)
}

// Quiesce lets the run this process leads, if any, finish the dispatches in its handlers and start
// no new ones (Taker.Quiesce), bounded by ctx: the first step of a planned stop.
func (q *Queue[T]) Quiesce(ctx context.Context) {
	q.mu.Lock()
	s := q.st
	q.mu.Unlock()
	if s.hasTerm && s.term.Check() == nil && s.open && s.run.RunID != "" {
		q.cfg.Taker.Quiesce(ctx, s.term, s.run)
	}
}

// HandOver runs while a graceful stop resigns a live term (OnResign): the owner steps down as the
// takeover's StepDown policy says. When it ended its run (clearEntry), its heartbeat entry is
// cleared once the term has ended (SteppedDown), after the election key: the entry names the ended
// run and this term's token, so the clear never touches a successor's entry, and the successor need
// not wait for it.
func (q *Queue[T]) HandOver(ctx context.Context, term T, clearEntry bool) {
	q.mu.Lock()
	run := q.st.run
	owned := q.st.hasTerm && q.st.term == term && run.RunID != ""
	q.st.handingOver = owned // the run's close that follows is ours: supervision must not replace it
	q.mu.Unlock()
	if !owned {
		return
	}
	if err := q.cfg.Taker.StepDown(ctx, term, run); err != nil {
		q.log.Warn("step-down left the dispatcher run to the successor", zap.String("queue", q.cfg.Queue), zap.Error(err))
		return
	}
	if clearEntry {
		q.update(func(s *state[T]) { s.clearOnEnd = s.hasTerm && s.term == term })
	}
}

// SteppedDown records the end of term (OnStepDown) with its cause, tells the Observer, and clears
// the heartbeat entry of the run the term's hand-over ended.
func (q *Queue[T]) SteppedDown(term T, cause error) {
	q.cfg.Observer.SteppedDown(term.Context(), q.cfg.Queue, cause)
	var announced bool
	var ended takeover.Run
	q.update(func(s *state[T]) {
		if s.hasTerm && s.term == term {
			if s.clearOnEnd {
				ended = s.run
			}
			var zero T
			s.term, s.hasTerm, s.run = zero, false, takeover.Run{}
		}
		s.clearOnEnd, s.lastCause = false, cause
		if announced = q.hasAnnounced && q.announced == term; announced {
			var zero T
			q.announced, q.hasAnnounced = zero, false
		}
	})
	if announced {
		q.cfg.Observer.Stopped(q.cfg.Queue, cause)
	}
	if ended.RunID != "" {
		// The term's context has ended; its values stay, and the Beater bounds the call.
		if err := q.cfg.Beater.Clear(context.WithoutCancel(term.Context()), term, ended); err != nil {
			q.log.Warn("heartbeat entry left for the reconciler", zap.String("queue", q.cfg.Queue), zap.Error(err))
		}
	}
}

// NewLeader records the queue's leader as etcd shows it (OnNewLeader), and tells the Observer.
func (q *Queue[T]) NewLeader(l election.Leader) {
	q.update(func(s *state[T]) { s.leader = l })
	q.cfg.Observer.NewLeader(q.cfg.Queue, l)
}
