package takeover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
)

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
	cases := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"unknown mode", Config{Mode: 7}, "Mode"},
		{"unknown step-down", Config{StepDown: -1}, "StepDown"},
		{"no attempts", Config{MaxAttempts: -1}, "MaxAttempts"},
		{"no concurrency", Config{MaxConcurrent: -1}, "MaxConcurrent"},
		{"too much concurrency", Config{MaxConcurrent: MaxMaxConcurrent + 1}, "MaxConcurrent"},
		{"negative attempt timeout", Config{AttemptTimeout: -time.Second}, "AttemptTimeout"},
		{"negative retry", Config{RetryMin: -time.Second}, "RetryMin"},
		{"max below min", Config{RetryMin: time.Second, RetryMax: time.Millisecond}, "RetryMax"},
		{"negative workflow task timeout", Config{WorkflowTaskTimeout: -time.Second}, "WorkflowTaskTimeout"},
		{"workflow task timeout too short", Config{WorkflowTaskTimeout: MinWorkflowTaskTimeout - time.Millisecond}, "WorkflowTaskTimeout"},
		{"workflow task timeout too long", Config{WorkflowTaskTimeout: MaxWorkflowTaskTimeout + time.Second}, "WorkflowTaskTimeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+" ") {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
	if _, err := New(nil, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New(nil) = %v", err)
	}
	for _, d := range []time.Duration{MinWorkflowTaskTimeout, MaxWorkflowTaskTimeout} {
		if err := (Config{WorkflowTaskTimeout: d}).Validate(); err != nil {
			t.Errorf("WorkflowTaskTimeout %v: %v", d, err)
		}
	}
}

// Every run Baton starts carries the configured workflow task timeout (the default when unset), in
// both start modes; a start hook may change it.
func TestStartOptionsCarryTheWorkflowTaskTimeout(t *testing.T) {
	owner := Owner{Project: "billing", Queue: "orders", ServerID: "w1", Token: 7, ElectionKey: "/k/1"}
	for _, tc := range []struct {
		name string
		cfg  Config
		want time.Duration
	}{
		{"default", Config{}, DefaultWorkflowTaskTimeout},
		{"configured", Config{WorkflowTaskTimeout: 5 * time.Second}, 5 * time.Second},
		{"signal-with-start", Config{Mode: StartSignalWithStart, WorkflowTaskTimeout: 3 * time.Second}, 3 * time.Second},
		{"hook", Config{Start: func(_ context.Context, s *Start) error {
			if s.Options.WorkflowTaskTimeout != DefaultWorkflowTaskTimeout {
				return fmt.Errorf("the hook sees %v", s.Options.WorkflowTaskTimeout)
			}
			s.Options.WorkflowTaskTimeout = 30 * time.Second
			return nil
		}}, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(noClient{}, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			opts, _, err := m.prepare(t.Context(), m.startOptions("dispatcher-billing-orders", owner), owner)
			if err != nil {
				t.Fatal(err)
			}
			if opts.WorkflowTaskTimeout != tc.want {
				t.Fatalf("WorkflowTaskTimeout = %v, want %v", opts.WorkflowTaskTimeout, tc.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{serviceerror.NewUnavailable("down"), true},
		{&serviceerror.ResourceExhausted{Message: "Too many restarts"}, true},
		{serviceerror.NewWorkflowExecutionAlreadyStarted("running", "", ""), true},
		{serviceerror.NewInvalidArgument("bad"), false},
		{serviceerror.NewNamespaceNotFound("ns"), false},
		{serviceerror.NewPermissionDenied("no", ""), false},
		{fmt.Errorf("start: %w", serviceerror.NewInvalidArgument("bad")), false},
	}
	for _, tc := range cases {
		if got := !errors.Is(classify(tc.err), ErrPermanent); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !conflictPolicyRefused(serviceerror.NewUnimplemented("no conflict policy")) || conflictPolicyRefused(serviceerror.NewUnavailable("x")) {
		t.Error("conflictPolicyRefused misclassifies")
	}
}
