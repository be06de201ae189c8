package registry

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/names"
)

// Bounds of a Registration. They keep a record (read by every List and Get) small and printable.
const (
	MaxHostnameLen      = 255
	MaxVersionLen       = 128
	MaxCapabilities     = 256
	MaxCapabilityLen    = 200
	MaxLabels           = 64
	MaxLabelKeyLen      = 128
	MaxLabelValueLen    = 256
	MaxMaxConcurrency   = math.MaxInt32
	maxHeartbeatCounter = math.MaxInt32
)

// Registration is what a worker tells the registry about itself when it starts.
type Registration struct {
	// ServerID identifies the worker process within its queue. Required; a valid name (no '/', no
	// white space or control characters, at most 200 bytes).
	ServerID string
	// Queue is the task queue the worker polls. Required; a valid name.
	Queue string
	// Hostname of the worker's host or pod. Optional; at most 255 bytes, no white space or control
	// characters.
	Hostname string
	// PID of the worker process. Required; positive.
	PID int
	// Version of the worker build. Optional; at most 128 bytes, no control characters.
	Version string
	// Capabilities the worker can handle, e.g. workflow types. Required: 1 to 256 distinct, non-empty
	// strings of at most 200 bytes without control characters.
	Capabilities []string
	// Labels for grouping in dashboards (deployment, region, ...). Optional; at most 64, keys of 1 to
	// 128 bytes without white space or control characters, values of at most 256 bytes without
	// control characters.
	Labels map[string]string
	// MaxConcurrency is how many tasks the worker runs at once. Required; at least 1.
	MaxConcurrency int
}

// Validate returns an error wrapping ErrInvalidRegistration that names the field and the rule it
// breaks, or nil.
func (r Registration) Validate() error {
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidRegistration, field, format, args...)
	}
	if err := names.Check(r.ServerID); err != nil {
		return bad("ServerID", "%s %v", names.Quote(r.ServerID), err)
	}
	if err := names.Check(r.Queue); err != nil {
		return bad("Queue", "%s %v", names.Quote(r.Queue), err)
	}
	if err := checkText(r.Hostname, MaxHostnameLen, true); err != nil {
		return bad("Hostname", "%s %v", names.Quote(r.Hostname), err)
	}
	if r.PID <= 0 {
		return bad("PID", "must be positive, got %d", r.PID)
	}
	if err := checkText(r.Version, MaxVersionLen, false); err != nil {
		return bad("Version", "%s %v", names.Quote(r.Version), err)
	}
	switch {
	case len(r.Capabilities) == 0:
		return bad("Capabilities", "must list at least one capability (e.g. a workflow type)")
	case len(r.Capabilities) > MaxCapabilities:
		return bad("Capabilities", "must list at most %d capabilities, got %d", MaxCapabilities, len(r.Capabilities))
	}
	for i, c := range r.Capabilities {
		field := fmt.Sprintf("Capabilities[%d]", i)
		if c == "" {
			return bad(field, "must not be empty")
		}
		if err := checkText(c, MaxCapabilityLen, false); err != nil {
			return bad(field, "%s %v", names.Quote(c), err)
		}
		if j := slices.Index(r.Capabilities[:i], c); j >= 0 {
			return bad(field, "%s duplicates Capabilities[%d]", names.Quote(c), j)
		}
	}
	if len(r.Labels) > MaxLabels {
		return bad("Labels", "must hold at most %d labels, got %d", MaxLabels, len(r.Labels))
	}
	// Sorted, so that the same invalid map always yields the same error.
	for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
		if k == "" {
			return bad("Labels", "keys must not be empty")
		}
		if err := checkText(k, MaxLabelKeyLen, true); err != nil {
			return bad("Labels", "key %s %v", names.Quote(k), err)
		}
		if err := checkText(r.Labels[k], MaxLabelValueLen, false); err != nil {
			return bad(fmt.Sprintf("Labels[%s]", names.Quote(k)), "%s %v", names.Quote(r.Labels[k]), err)
		}
	}
	switch {
	case r.MaxConcurrency < 1:
		return bad("MaxConcurrency", "must be at least 1, got %d", r.MaxConcurrency)
	case r.MaxConcurrency > MaxMaxConcurrency:
		return bad("MaxConcurrency", "must be at most %d, got %d", MaxMaxConcurrency, r.MaxConcurrency)
	}
	return nil
}

// checkText bounds a free-text value: valid UTF-8, at most max bytes, no control characters, and no
// white space when noSpace.
func checkText(v string, max int, noSpace bool) error {
	switch {
	case len(v) > max:
		return fmt.Errorf("must be at most %d bytes, got %d", max, len(v))
	case !utf8.ValidString(v):
		return fmt.Errorf("must be valid UTF-8")
	}
	if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 {
		return fmt.Errorf("must not contain control characters (at byte %d)", i)
	}
	if noSpace {
		if i := strings.IndexFunc(v, unicode.IsSpace); i >= 0 {
			return fmt.Errorf("must not contain white space (at byte %d)", i)
		}
	}
	return nil
}

// Beat is what a worker reports with each heartbeat.
type Beat struct {
	// Active is the number of tasks running now. At least 0.
	Active int
	// CompletedDelta and FailedDelta are the tasks completed and failed since the previous
	// heartbeat; the registry adds them to the worker's totals. At least 0.
	CompletedDelta, FailedDelta int
}

func (b Beat) validate() error {
	for _, f := range []struct {
		name  string
		value int
	}{{"Active", b.Active}, {"CompletedDelta", b.CompletedDelta}, {"FailedDelta", b.FailedDelta}} {
		if f.value < 0 || f.value > maxHeartbeatCounter {
			return fmt.Errorf("%w: Beat.%s must be between 0 and %d, got %d", ErrInvalidArgument, f.name, maxHeartbeatCounter, f.value)
		}
	}
	return nil
}

// checkIDs validates the (queue, server ID) arguments of a call.
func checkIDs(queue, serverID string) error {
	if err := names.Check(queue); err != nil {
		return fmt.Errorf("%w: queue %s %v", ErrInvalidArgument, names.Quote(queue), err)
	}
	if err := names.Check(serverID); err != nil {
		return fmt.Errorf("%w: server ID %s %v", ErrInvalidArgument, names.Quote(serverID), err)
	}
	return nil
}
