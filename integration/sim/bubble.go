package sim

import (
	"testing"
	"testing/synctest"

	_ "unsafe" // go:linkname

	_ "go.etcd.io/etcd/client/v3" // the package whose variable is replaced
)

// clientv3's watcher wraps its context in a valCtx whose Done is valCtxCh, a package-level channel
// that never closes, and context.WithCancel over it starts a goroutine selecting on that channel and
// on the child's. valCtxCh was made outside every bubble, so that goroutine is never durably blocked
// and synctest.Wait would never return. inBubble gives each bubble its own never-closed channel for
// the bubble's life and puts the original back once every goroutine of the bubble has exited.
//
//go:linkname valCtxCh go.etcd.io/etcd/client/v3.valCtxCh
var valCtxCh chan struct{}

// runInBubble runs one schedule of a world in its own bubble.
func runInBubble(t *testing.T, seed uint64, keep bool, run Runner) Result {
	var res Result
	inBubble(t, func(t *testing.T) { res = run(t, seed, keep) })
	return res
}

// inBubble runs f in a new synctest bubble (synctest.Test adds no subtest).
func inBubble(t *testing.T, f func(t *testing.T)) {
	orig := valCtxCh
	defer func() { valCtxCh = orig }()
	synctest.Test(t, func(t *testing.T) {
		valCtxCh = make(chan struct{})
		f(t)
	})
}
