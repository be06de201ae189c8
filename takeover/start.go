package takeover

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/client"
)

// ErrInvalidStart means a Config.Start hook changed what Baton needs of a dispatcher run: the workflow
// ID, the ID reuse and conflict policies, the owner memo, or asked for a cron schedule or a delayed
// start. It wraps ErrPermanent: no retry can fix a hook.
var ErrInvalidStart = errors.New("takeover: start hook changed what Baton owns")

// Start is the start of one dispatcher run, as a Config.Start hook sees it.
type Start struct {
	// Owner is the run's fencing data. Baton puts it in the memo under MemoKey; the hook may copy it
	// into its own input (the workflow needs it to check its token), not change it.
	Owner Owner
	// Options are the start options. The hook may set the task queue (Config.TaskQueue, by default
	// DefaultTaskQueue(project, queue)), the timeouts (WorkflowTaskTimeout comes set to
	// Config.WorkflowTaskTimeout: a longer one makes a crashed worker's held task stall the run
	// longer), the retry policy, search attributes, its own memo fields and anything else, except
	// what Baton owns: ID, WorkflowIDReusePolicy, WorkflowIDConflictPolicy,
	// WorkflowExecutionErrorWhenAlreadyStarted and Memo[MemoKey]; it must not set CronSchedule or
	// StartDelay (a run that is not open at once is no dispatcher).
	Options client.StartWorkflowOptions
	// Args are the workflow's input. Default: the Owner alone.
	Args []any
}

// StartHook shapes each dispatcher run's start (Config.Start). It is called before every start
// attempt, with the attempt's context; an error fails the attempt (wrap ErrPermanent for one that
// retrying cannot fix).
type StartHook func(ctx context.Context, s *Start) error

// prepare returns the start of a run for owner: Baton's options, shaped by the hook and checked.
func (m *Manager) prepare(ctx context.Context, opts client.StartWorkflowOptions, owner Owner) (client.StartWorkflowOptions, []any, error) {
	if m.cfg.Start == nil {
		return opts, []any{owner}, nil
	}
	s := &Start{Owner: owner, Options: opts, Args: []any{owner}}
	s.Options.Memo = make(map[string]any, len(opts.Memo))
	for k, v := range opts.Memo {
		s.Options.Memo[k] = v
	}
	if err := m.cfg.Start(ctx, s); err != nil {
		return client.StartWorkflowOptions{}, nil, fmt.Errorf("start hook: %w", err)
	}
	got := s.Options
	refuse := func(field, rule string) error {
		return fmt.Errorf("%w: %w: %s %s", ErrPermanent, ErrInvalidStart, field, rule)
	}
	memoOwner, _ := got.Memo[MemoKey].(Owner)
	switch {
	case got.ID != opts.ID:
		return got, nil, refuse("Options.ID", fmt.Sprintf("must stay %q (every owner addresses one workflow), got %q", opts.ID, got.ID))
	case got.WorkflowIDReusePolicy != opts.WorkflowIDReusePolicy:
		return got, nil, refuse("Options.WorkflowIDReusePolicy", "must stay Baton's")
	case got.WorkflowIDConflictPolicy != opts.WorkflowIDConflictPolicy:
		return got, nil, refuse("Options.WorkflowIDConflictPolicy", "must stay Baton's (a start must never end a run it did not name)")
	case got.WorkflowExecutionErrorWhenAlreadyStarted != opts.WorkflowExecutionErrorWhenAlreadyStarted:
		return got, nil, refuse("Options.WorkflowExecutionErrorWhenAlreadyStarted", "must stay true")
	case memoOwner != owner:
		return got, nil, refuse("Options.Memo["+MemoKey+"]", "must stay the Owner Baton set (it is the run's fencing data)")
	case got.CronSchedule != "":
		return got, nil, refuse("Options.CronSchedule", "must be empty")
	case got.StartDelay != 0:
		return got, nil, refuse("Options.StartDelay", "must be zero")
	case got.TaskQueue == "":
		return got, nil, refuse("Options.TaskQueue", "must not be empty")
	}
	return got, s.Args, nil
}
