package registry

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func validRegistration() Registration {
	return Registration{
		ServerID: "worker-1", Queue: "orders", Hostname: "pod-7f9c", PID: 4242, Version: "1.2.3",
		Capabilities: []string{"ChargeCard", "RefundCard"}, Labels: map[string]string{"region": "eu-west-1"},
		MaxConcurrency: 50,
	}
}

func TestRegistrationValidate(t *testing.T) {
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("Type%d", i)
		}
		return out
	}
	manyLabels := map[string]string{}
	for i := range MaxLabels + 1 {
		manyLabels[fmt.Sprintf("k%d", i)] = "v"
	}
	cases := []struct {
		name   string
		modify func(r *Registration)
		want   string // "" = valid
	}{
		{"valid", func(*Registration) {}, ""},
		{"no hostname, version or labels", func(r *Registration) { r.Hostname, r.Version, r.Labels = "", "", nil }, ""},
		{"empty label value", func(r *Registration) { r.Labels = map[string]string{"team": ""} }, ""},
		{"max capabilities", func(r *Registration) { r.Capabilities = many(MaxCapabilities) }, ""},
		{"empty server ID", func(r *Registration) { r.ServerID = "" }, "ServerID \"\" must not be empty"},
		{"server ID with slash", func(r *Registration) { r.ServerID = "a/b" }, "ServerID \"a/b\" must not contain '/'"},
		{"queue with space", func(r *Registration) { r.Queue = "my queue" }, "Queue \"my queue\" must not contain white space"},
		{"hostname with newline", func(r *Registration) { r.Hostname = "a\nb" }, "Hostname \"a\\nb\" must not contain control characters"},
		{"hostname too long", func(r *Registration) { r.Hostname = strings.Repeat("h", MaxHostnameLen+1) }, "Hostname"},
		{"zero pid", func(r *Registration) { r.PID = 0 }, "PID must be positive, got 0"},
		{"negative pid", func(r *Registration) { r.PID = -3 }, "PID must be positive, got -3"},
		{"version too long", func(r *Registration) { r.Version = strings.Repeat("v", MaxVersionLen+1) }, "Version"},
		{"invalid utf8 version", func(r *Registration) { r.Version = "1.\xff" }, "Version \"1.\\xff\" must be valid UTF-8"},
		{"no capabilities", func(r *Registration) { r.Capabilities = nil }, "Capabilities must list at least one capability"},
		{"empty capability list", func(r *Registration) { r.Capabilities = []string{} }, "Capabilities must list at least one"},
		{"too many capabilities", func(r *Registration) { r.Capabilities = many(MaxCapabilities + 1) }, "Capabilities must list at most 256"},
		{"empty capability", func(r *Registration) { r.Capabilities = []string{"A", ""} }, "Capabilities[1] must not be empty"},
		{"capability too long", func(r *Registration) { r.Capabilities = []string{strings.Repeat("c", MaxCapabilityLen+1)} }, "Capabilities[0]"},
		{"duplicate capability", func(r *Registration) { r.Capabilities = []string{"A", "B", "A"} }, "Capabilities[2] \"A\" duplicates Capabilities[0]"},
		{"too many labels", func(r *Registration) { r.Labels = manyLabels }, "Labels must hold at most 64 labels"},
		{"empty label key", func(r *Registration) { r.Labels = map[string]string{"": "x"} }, "Labels keys must not be empty"},
		{"label key with space", func(r *Registration) { r.Labels = map[string]string{"a b": "x"} }, "Labels key \"a b\" must not contain white space"},
		{"label value with control", func(r *Registration) { r.Labels = map[string]string{"k": "a\x00"} }, "Labels[\"k\"]"},
		{"zero concurrency", func(r *Registration) { r.MaxConcurrency = 0 }, "MaxConcurrency must be at least 1, got 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := validRegistration()
			tc.modify(&r)
			err := r.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidRegistration) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidRegistration containing %q", err, tc.want)
			}
		})
	}
}

func TestBeatValidate(t *testing.T) {
	if err := (Beat{Active: 3, CompletedDelta: 10, FailedDelta: 1}).validate(); err != nil {
		t.Fatal(err)
	}
	for _, b := range []Beat{{Active: -1}, {CompletedDelta: -1}, {FailedDelta: maxHeartbeatCounter + 1}} {
		if err := b.validate(); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "Beat.") {
			t.Fatalf("validate(%+v) = %v", b, err)
		}
	}
}
