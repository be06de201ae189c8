package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/baton-run/baton/takeover"
)

// fencedLedger refuses every owner but the current one, as the etcd ledger does.
type fencedLedger struct {
	memLedger
	current int64
}

func (l *fencedLedger) Begin(ctx context.Context, key string, o takeover.Owner) (bool, error) {
	if err := ValidateOwner(o); err != nil {
		return false, err
	}
	if o.Token != l.current {
		return false, ErrSuperseded
	}
	return l.memLedger.Begin(ctx, key, o)
}

// The activity fails without retrying, with its documented type, when the owner cannot act.
func TestDispatchFailsNonRetryably(t *testing.T) {
	for _, tc := range []struct {
		name    string
		owner   takeover.Owner
		handler error
		typ     string
	}{
		{"superseded owner", takeover.Owner{ServerID: "old", Token: 3, ElectionKey: owner.ElectionKey}, nil, ErrTypeSuperseded},
		{"owner without election key", takeover.Owner{ServerID: "x", Token: 7}, nil, ErrTypeInvalidOwner},
		{"owner without token", takeover.Owner{ServerID: "x", ElectionKey: owner.ElectionKey}, nil, ErrTypeInvalidOwner},
		{"handler refused as superseded", owner, fmt.Errorf("app write: %w", ErrSuperseded), ErrTypeSuperseded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls int
			acts := &Activities{Ledger: &fencedLedger{current: owner.Token}, Handler: func(context.Context, string, Request, takeover.Owner) error {
				calls++
				return tc.handler
			}}
			var s testsuite.WorkflowTestSuite
			env := s.NewTestActivityEnvironment()
			env.RegisterActivityWithOptions(acts.Dispatch, activity.RegisterOptions{Name: ActivityDispatch})
			_, err := env.ExecuteActivity(ActivityDispatch, Task{Key: req("t1").Key(), Request: req("t1"), Owner: tc.owner})
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Type() != tc.typ || !app.NonRetryable() {
				t.Fatalf("Dispatch = %v, want a non-retryable %s", err, tc.typ)
			}
			want := 0
			if tc.handler != nil {
				want = 1
			}
			if calls != want {
				t.Fatalf("handler called %d times, want %d", calls, want)
			}
		})
	}
}
