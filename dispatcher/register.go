package dispatcher

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Defaults of the workflow's tuning, and its bound.
const (
	DefaultHistoryLimit = 5000 // events before continue-as-new
	DefaultRecentKeys   = 1000 // dispatch keys remembered in the run for a duplicate check without a round trip
	// MaxRecentKeys bounds RecentKeys: the keys travel in the continue-as-new input, and 10,000 of them
	// are about 700 KB, well under Temporal's default payload limit of 2 MB.
	MaxRecentKeys = 10000

	DefaultMaxConcurrent = 32 // requests a run handles at a time
	MaxMaxConcurrent     = 1000
	DefaultBacklogPage   = 500 // requests read back from earlier runs per Backlog activity
	MaxBacklogPage       = 5000
)

// DefaultStickyScheduleToStartTimeout is the StickyScheduleToStartTimeout WorkerOptions sets: how long
// a dispatcher run's next workflow task waits for the worker that holds the run in its cache before
// Temporal gives it to any worker. The SDK's default is 5s.
const DefaultStickyScheduleToStartTimeout = time.Second

// WorkerOptions returns o with the options a Temporal worker that runs dispatcher runs should have,
// where o leaves them unset: StickyScheduleToStartTimeout DefaultStickyScheduleToStartTimeout.
//
// Every worker polls each queue's dispatcher task queue, so a run's workflow tasks stick to whichever
// worker ran its last one, the queue's leader or not. When that worker crashes, the run's next task
// waits on the dead worker's sticky queue for this timeout (a task the worker had already started
// waits for the run's workflow task timeout, takeover.Config.WorkflowTaskTimeout), and the requests
// the run accepted meanwhile wait with it: a crash of a worker that leads nothing stalls the queue.
// A live worker always has a poll waiting on its sticky queue and takes the task in milliseconds;
// one that does not within a second (a starved process) only costs a replay of the run's history on
// another worker, never a request.
func WorkerOptions(o worker.Options) worker.Options {
	if o.StickyScheduleToStartTimeout == 0 {
		o.StickyScheduleToStartTimeout = DefaultStickyScheduleToStartTimeout
	}
	return o
}

// RegisterOptions tune the reference dispatcher on one worker. A run's Input overrides them field by
// field; takeovers start runs with the bare Owner, so for them these are the tuning.
type RegisterOptions struct {
	// HistoryLimit is the history length (events) at which a run continues as new. Temporal's own
	// suggestion to continue as new is followed as well. Default DefaultHistoryLimit; must not be
	// negative. A small limit makes tests continue as new after a dispatch or two.
	HistoryLimit int
	// RecentKeys is how many dispatch keys a run remembers, and carries across continue-as-new, to
	// answer a duplicate without asking the ledger. Default DefaultRecentKeys; from 0 to
	// MaxRecentKeys.
	RecentKeys int
	// MaxConcurrent bounds the Dispatch activities a run has in flight, so one queue keeps up with
	// its producers while the ledger and the handler take their round trips. Default
	// DefaultMaxConcurrent; from 0 to MaxMaxConcurrent. 1 handles requests one at a time, in order.
	MaxConcurrent int
	// BacklogPage is the most requests one Backlog activity returns when a run carries over what
	// its predecessor accepted; the next page is read once fewer than that wait. Default
	// DefaultBacklogPage; from 0 to MaxBacklogPage.
	BacklogPage int
}

// Validate returns an error naming the first field that breaks its rule.
func (o RegisterOptions) Validate() error {
	switch {
	case o.HistoryLimit < 0:
		return fmt.Errorf("dispatcher: HistoryLimit must not be negative (0 means %d), got %d", DefaultHistoryLimit, o.HistoryLimit)
	case o.RecentKeys < 0:
		return fmt.Errorf("dispatcher: RecentKeys must not be negative (0 means %d), got %d", DefaultRecentKeys, o.RecentKeys)
	case o.RecentKeys > MaxRecentKeys:
		return fmt.Errorf("dispatcher: RecentKeys must be at most %d (they are carried across continue-as-new), got %d", MaxRecentKeys, o.RecentKeys)
	case o.MaxConcurrent < 0 || o.MaxConcurrent > MaxMaxConcurrent:
		return fmt.Errorf("dispatcher: MaxConcurrent must be from 0 (meaning %d) to %d, got %d", DefaultMaxConcurrent, MaxMaxConcurrent, o.MaxConcurrent)
	case o.BacklogPage < 0 || o.BacklogPage > MaxBacklogPage:
		return fmt.Errorf("dispatcher: BacklogPage must be from 0 (meaning %d) to %d, got %d", DefaultBacklogPage, MaxBacklogPage, o.BacklogPage)
	}
	return nil
}

func (o RegisterOptions) withDefaults() RegisterOptions {
	if o.HistoryLimit == 0 {
		o.HistoryLimit = DefaultHistoryLimit
	}
	if o.RecentKeys == 0 {
		o.RecentKeys = DefaultRecentKeys
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.BacklogPage == 0 {
		o.BacklogPage = DefaultBacklogPage
	}
	return o
}

// Register registers the reference dispatcher workflow, with the default tuning, and its activities
// on a Temporal worker.
func Register(w worker.Registry, a *Activities) {
	register(w, a, RegisterOptions{})
}

// RegisterWithOptions is Register with the workflow's tuning set for this worker.
func RegisterWithOptions(w worker.Registry, a *Activities, opts RegisterOptions) error {
	if err := checkRegister(w, a); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	register(w, a, opts)
	return nil
}

// RegisterActivities registers the dispatcher's activities alone, for a worker that runs an
// application's own dispatcher workflow (Serve) instead of the reference one.
func RegisterActivities(w worker.Registry, a *Activities) error {
	if err := checkRegister(w, a); err != nil {
		return err
	}
	registerActivities(w, a)
	return nil
}

func checkRegister(w worker.Registry, a *Activities) error {
	switch {
	case w == nil:
		return errors.New("dispatcher: worker must not be nil")
	case a == nil:
		return errors.New("dispatcher: Activities must not be nil")
	}
	return nil
}

func register(w worker.Registry, a *Activities, opts RegisterOptions) {
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in Input) error { return run(ctx, in, ServeOptions{Tuning: opts}) },
		workflow.RegisterOptions{Name: WorkflowName})
	registerActivities(w, a)
}

func registerActivities(w worker.Registry, a *Activities) {
	w.RegisterActivityWithOptions(a.Dispatch, activity.RegisterOptions{Name: ActivityDispatch})
	w.RegisterActivityWithOptions(a.DispatchBatch, activity.RegisterOptions{Name: ActivityDispatchBatch})
	w.RegisterActivityWithOptions(a.Backlog, activity.RegisterOptions{Name: ActivityBacklog})
}
