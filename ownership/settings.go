package ownership

import (
	"errors"
	"time"

	"github.com/baton-run/baton/configerr"
)

// ErrInvalidConfig wraps every error of Settings.Validate; the message names the field and the rule.
var ErrInvalidConfig = errors.New("ownership: invalid config")

// Settings' defaults.
const (
	// DefaultMaxReplacements is Settings.MaxReplacements' default: a run that keeps closing (a
	// workflow that fails at once) is replaced a few times, then another candidate tries.
	DefaultMaxReplacements = 5
	// DefaultPermanentHold is Settings.PermanentHold's default.
	DefaultPermanentHold = 30 * time.Second
	// DefaultPermanentHoldMax is Settings.PermanentHoldMax's default.
	DefaultPermanentHoldMax = 5 * time.Minute
)

// Settings tune a queue's lifecycle across its term: how often it replaces a run that closed behind
// its back, and how long it keeps a term whose takeover cannot succeed. Only this package reads them;
// the backoff between attempts (RetryMin, RetryMax) is the takeover's, shared with its own attempts.
// The zero value of every field means its default.
type Settings struct {
	// MaxReplacements bounds how many runs that closed behind the owner's back (an operator's terminate
	// or cancel, a workflow that returned or failed) one term replaces; past it the term is resigned so
	// that another candidate can try. Replacements back off like the takeover's attempts
	// (takeover.Config.RetryMin doubling up to RetryMax). Default DefaultMaxReplacements; at least 1.
	MaxReplacements int
	// PermanentHold is how long a leader keeps a term whose takeover fails in a way that retrying
	// cannot fix (takeover.ErrPermanent: namespace not found, permission denied) before it resigns so
	// that another worker can try, and PermanentHoldMax caps it: a queue's n-th consecutive failed
	// term, counted across the fleet (Failures), is kept PermanentHold × 2^(n-1), at most
	// PermanentHoldMax. Within the term the takeover is retried, takeover.Config.RetryMin doubling up
	// to PermanentHold apart, so a recovered namespace is taken over within about PermanentHold.
	// Defaults DefaultPermanentHold and DefaultPermanentHoldMax; PermanentHold positive (and at least
	// the takeover's RetryMax, which the root package checks), PermanentHoldMax at least
	// PermanentHold.
	PermanentHold, PermanentHoldMax time.Duration
}

// DefaultSettings is Settings{} with every default applied: the one definition of these defaults.
func DefaultSettings() Settings { return Settings{}.WithDefaults() }

// WithDefaults returns s with every zero field set to its default.
func (s Settings) WithDefaults() Settings {
	if s.MaxReplacements == 0 {
		s.MaxReplacements = DefaultMaxReplacements
	}
	if s.PermanentHold == 0 {
		s.PermanentHold = DefaultPermanentHold
	}
	if s.PermanentHoldMax == 0 {
		s.PermanentHoldMax = DefaultPermanentHoldMax
	}
	return s
}

// Validate checks the settings after defaults are applied and returns an error wrapping
// ErrInvalidConfig that names the field and the rule it breaks.
func (s Settings) Validate() error {
	s = s.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
	}
	switch {
	case s.MaxReplacements < 1:
		return bad("MaxReplacements", "must be at least 1 (0 means %d), got %d", DefaultMaxReplacements, s.MaxReplacements)
	case s.PermanentHold <= 0:
		return bad("PermanentHold", "must be positive (0 means %v), got %v", DefaultPermanentHold, s.PermanentHold)
	case s.PermanentHoldMax < s.PermanentHold:
		return bad("PermanentHoldMax", "must be at least PermanentHold (%v), got %v", s.PermanentHold, s.PermanentHoldMax)
	}
	return nil
}
