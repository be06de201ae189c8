package dispatcher

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/baton-run/baton/takeover"
)

// ActivityDispatch is the registered name of Activities.Dispatch.
const ActivityDispatch = "baton.Dispatch"

const errTypeInvalid = "baton.InvalidRequest"

// Task is the Dispatch activity's input.
type Task struct {
	Key     string         `json:"key"`
	Request Request        `json:"request"`
	Owner   takeover.Owner `json:"owner"`
}

// Result is the Dispatch activity's output.
type Result struct {
	// Duplicate is true when the ledger already had the key completed: nothing was dispatched.
	Duplicate bool `json:"duplicate"`
}

// Ledger records dispatch keys where every owner can read them, so deduplication survives the
// termination of the run that first saw a request.
type Ledger interface {
	// Begin marks key as in progress unless it was completed before; done reports the latter.
	Begin(ctx context.Context, key string, owner takeover.Owner) (done bool, err error)
	// Complete marks key as dispatched.
	Complete(ctx context.Context, key string, owner takeover.Owner) error
}

// Handler performs one dispatch. It may be called again for the same request if a previous attempt
// failed after it started (at-least-once between Begin and Complete), so it must be idempotent by key.
type Handler func(ctx context.Context, key string, req Request, owner takeover.Owner) error

// Activities holds the dispatcher's activities and their dependencies.
type Activities struct {
	Ledger  Ledger
	Handler Handler
}

// Dispatch dispatches a request once per dispatch key.
func (a *Activities) Dispatch(ctx context.Context, task Task) (Result, error) {
	if err := task.Request.Validate(); err != nil {
		return Result{}, temporal.NewNonRetryableApplicationError(err.Error(), errTypeInvalid, err)
	}
	if task.Key != task.Request.Key() {
		err := fmt.Errorf("%w: key %s does not match the request's fields", ErrInvalidRequest, task.Key)
		return Result{}, temporal.NewNonRetryableApplicationError(err.Error(), errTypeInvalid, err)
	}
	if a.Ledger == nil || a.Handler == nil {
		return Result{}, errors.New("dispatcher: Activities needs a Ledger and a Handler")
	}
	done, err := a.Ledger.Begin(ctx, task.Key, task.Owner)
	if err != nil {
		return Result{}, fmt.Errorf("dispatcher: ledger begin %s: %w", task.Key, err)
	}
	if done {
		return Result{Duplicate: true}, nil
	}
	if err := a.Handler(ctx, task.Key, task.Request, task.Owner); err != nil {
		return Result{}, fmt.Errorf("dispatcher: handle %s: %w", task.Key, err)
	}
	if err := a.Ledger.Complete(ctx, task.Key, task.Owner); err != nil {
		return Result{}, fmt.Errorf("dispatcher: ledger complete %s: %w", task.Key, err)
	}
	return Result{}, nil
}
