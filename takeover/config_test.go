package takeover

import (
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
		{"no replacements", Config{MaxReplacements: -1}, "MaxReplacements"},
		{"negative attempt timeout", Config{AttemptTimeout: -time.Second}, "AttemptTimeout"},
		{"negative retry", Config{RetryMin: -time.Second}, "RetryMin"},
		{"max below min", Config{RetryMin: time.Second, RetryMax: time.Millisecond}, "RetryMax"},
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
