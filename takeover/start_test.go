package takeover

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
)

type noClient struct{ Client }

// A start hook shapes the run's input, task queue, timeouts and memo; one that touches what Baton
// owns is refused with an error naming the field, and wraps ErrPermanent.
func TestStartHook(t *testing.T) {
	owner := Owner{Project: "billing", Queue: "orders", ServerID: "w1", Token: 7, ElectionKey: "/k/1",
		TakeoverStartedAt: time.Unix(1, 0)}
	base := client.StartWorkflowOptions{ID: "dispatcher-billing-orders", TaskQueue: "orders",
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		Memo:                                     map[string]any{MemoKey: owner}}
	type input struct {
		Owner Owner
		Batch int
	}
	for _, tc := range []struct {
		name  string
		hook  func(s *Start)
		field string // in the error; "" = accepted
	}{
		{"shapes the start", func(s *Start) {
			s.Args = []any{input{Owner: s.Owner, Batch: 50}}
			s.Options.TaskQueue = "billing-dispatch"
			s.Options.WorkflowRunTimeout = time.Hour
			s.Options.Memo["team"] = "payments"
		}, ""},
		{"workflow ID", func(s *Start) { s.Options.ID = "mine" }, "Options.ID"},
		{"conflict policy", func(s *Start) {
			s.Options.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING
		}, "Options.WorkflowIDConflictPolicy"},
		{"reuse policy", func(s *Start) {
			s.Options.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
		}, "Options.WorkflowIDReusePolicy"},
		{"already started", func(s *Start) { s.Options.WorkflowExecutionErrorWhenAlreadyStarted = false },
			"Options.WorkflowExecutionErrorWhenAlreadyStarted"},
		{"owner token", func(s *Start) { o := s.Owner; o.Token = 99; s.Options.Memo[MemoKey] = o }, "Options.Memo[baton.owner]"},
		{"owner removed", func(s *Start) { delete(s.Options.Memo, MemoKey) }, "Options.Memo[baton.owner]"},
		{"memo replaced", func(s *Start) { s.Options.Memo = map[string]any{"x": 1} }, "Options.Memo[baton.owner]"},
		{"cron", func(s *Start) { s.Options.CronSchedule = "* * * * *" }, "Options.CronSchedule"},
		{"delay", func(s *Start) { s.Options.StartDelay = time.Second }, "Options.StartDelay"},
		{"task queue", func(s *Start) { s.Options.TaskQueue = "" }, "Options.TaskQueue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(noClient{}, Config{Start: func(_ context.Context, s *Start) error { tc.hook(s); return nil }})
			if err != nil {
				t.Fatal(err)
			}
			opts, args, err := m.prepare(t.Context(), base, owner)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				if opts.TaskQueue != "billing-dispatch" || opts.Memo["team"] != "payments" || opts.Memo[MemoKey] != owner ||
					len(args) != 1 || args[0].(input).Owner != owner {
					t.Fatalf("options %+v args %+v", opts, args)
				}
				if len(base.Memo) != 1 {
					t.Fatalf("the hook changed Baton's own memo map: %v", base.Memo)
				}
				return
			}
			if !errors.Is(err, ErrInvalidStart) || !errors.Is(err, ErrPermanent) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want ErrInvalidStart and ErrPermanent naming %s", err, tc.field)
			}
		})
	}
	m, err := New(noClient{}, Config{Start: func(context.Context, *Start) error { return errors.New("no input for orders") }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.prepare(t.Context(), base, owner); err == nil || !strings.Contains(err.Error(), "start hook: no input for orders") {
		t.Fatalf("hook error = %v", err)
	}
}
