package testkit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Parallel calls f(ctx, i) for every i in [0, n) from conc goroutines, all joined before it
// returns; the first error cancels the calls not yet made and is returned.
func Parallel(ctx context.Context, n, conc int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conc, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}
