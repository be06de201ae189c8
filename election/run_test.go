package election

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A leader that steps aside stands again only after RetryMax, so that the others go first; any
// other failure backs off from RetryMin.
func TestPauseAfterAFailedTerm(t *testing.T) {
	e := &Elector{cfg: Config{RetryMin: 100 * time.Millisecond, RetryMax: 5 * time.Second}.withDefaults()}
	failed := errors.New("namespace not found")
	if got := e.pauseAfter(failed, newBackoff(e.cfg.Clock, e.cfg.RetryMin, e.cfg.RetryMax)); got > e.cfg.RetryMin {
		t.Errorf("pause after a failure = %v, want at most RetryMin %v", got, e.cfg.RetryMin)
	}
	aside := fmt.Errorf("held long enough: %w: %w", ErrStepAside, failed)
	if got := e.pauseAfter(aside, newBackoff(e.cfg.Clock, e.cfg.RetryMin, e.cfg.RetryMax)); got != e.cfg.RetryMax {
		t.Errorf("pause after stepping aside = %v, want RetryMax %v", got, e.cfg.RetryMax)
	}
}
