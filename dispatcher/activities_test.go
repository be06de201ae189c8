package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// fencedLedger refuses every owner but the current one, as the etcd ledger does.
type fencedLedger struct {
	memLedger
	current int64
}

func (l *fencedLedger) Begin(ctx context.Context, key string, o takeover.Owner) (bool, error) {
	if err := ledger.ValidateOwner(o); err != nil {
		return false, err
	}
	if o.Token != l.current {
		return false, ledger.ErrSuperseded
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
		{"handler refused as superseded", owner, fmt.Errorf("app write: %w", ledger.ErrSuperseded), ErrTypeSuperseded},
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

// A batch fails as a whole, without retrying, for an owner that cannot act; a key-level failure
// is reported for its item alone.
func TestDispatchBatch(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	run := func(l Ledger, o takeover.Owner, items ...Request) (BatchResult, error) {
		env := s.NewTestActivityEnvironment()
		acts := &Activities{Ledger: l, Handler: func(context.Context, string, Request, takeover.Owner) error { return nil }}
		env.RegisterActivityWithOptions(acts.DispatchBatch, activity.RegisterOptions{Name: ActivityDispatchBatch})
		b := Batch{Owner: o}
		for _, r := range items {
			b.Items = append(b.Items, BatchItem{Key: r.Key(), Request: r})
		}
		v, err := env.ExecuteActivity(ActivityDispatchBatch, b)
		var res BatchResult
		if err == nil {
			err = v.Get(&res)
		}
		return res, err
	}
	_, err := run(&fencedLedger{current: owner.Token}, takeover.Owner{ServerID: "old", Token: 3, ElectionKey: owner.ElectionKey}, req("b1"), req("b2"))
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != ErrTypeSuperseded || !app.NonRetryable() {
		t.Fatalf("batch of a superseded owner = %v, want a non-retryable %s", err, ErrTypeSuperseded)
	}
	l := &memLedger{}
	_, _ = l.Begin(context.Background(), req("b1").Key(), owner)
	_ = l.Complete(context.Background(), req("b1").Key(), owner)
	res, err := run(&badRecordLedger{memLedger: l, bad: req("b3").Key()}, owner, req("b1"), req("b2"), req("b3"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 3 || !res.Results[0].Duplicate || res.Results[1].Duplicate || res.Results[1].ErrorType != "" ||
		res.Results[2].ErrorType != ErrTypeBadRecord {
		t.Fatalf("results %+v, want b1 a duplicate, b2 dispatched, b3 a bad record", res.Results)
	}
}

type badRecordLedger struct {
	*memLedger
	bad string
}

func (l *badRecordLedger) Begin(ctx context.Context, key string, o takeover.Owner) (bool, error) {
	if key == l.bad {
		return false, fmt.Errorf("%w: %s", ledger.ErrBadRecord, key)
	}
	return l.memLedger.Begin(ctx, key, o)
}
