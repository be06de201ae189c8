package drill

import (
	"context"
	"time"

	"github.com/baton-run/baton/clock"
)

func sleepCtx(ctx context.Context, d time.Duration) bool { return clock.Sleep(ctx, clock.Real(), d) }

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}
