package dispatcher

import (
	"errors"
	"fmt"

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
)

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
	return o
}

// Register registers the reference dispatcher workflow, with the default tuning, and its activity on
// a Temporal worker.
func Register(w worker.Registry, a *Activities) {
	register(w, a, RegisterOptions{})
}

// RegisterWithOptions is Register with the workflow's tuning set for this worker.
func RegisterWithOptions(w worker.Registry, a *Activities, opts RegisterOptions) error {
	if w == nil {
		return errors.New("dispatcher: worker must not be nil")
	}
	if a == nil {
		return errors.New("dispatcher: Activities must not be nil")
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	register(w, a, opts)
	return nil
}

func register(w worker.Registry, a *Activities, opts RegisterOptions) {
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in Input) error { return run(ctx, in, opts) },
		workflow.RegisterOptions{Name: WorkflowName})
	w.RegisterActivityWithOptions(a.Dispatch, activity.RegisterOptions{Name: ActivityDispatch})
}
