package sim

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	_ "unsafe" // go:linkname

	_ "github.com/redis/go-redis/v9" // links go-redis/internal, whose variable is replaced
	_ "go.etcd.io/etcd/client/v3"    // the package whose variable is replaced
)

// clientv3's watcher wraps its context in a valCtx whose Done is valCtxCh, a package-level channel
// that never closes, and context.WithCancel over it starts a goroutine selecting on that channel and
// on the child's. valCtxCh was made outside every bubble, so that goroutine is never durably blocked
// and synctest.Wait would never return. inBubble gives each bubble its own never-closed channel for
// the bubble's life and puts the original back once every goroutine of the bubble has exited.
//
//go:linkname valCtxCh go.etcd.io/etcd/client/v3.valCtxCh
var valCtxCh chan struct{}

// go-redis keeps the timers of its connection pools' slow path (a client whose connections are all
// in use: a process whose owners and reconciler share its client) in a package-level sync.Pool, so a
// timer made in one bubble would be handed to the next, and the runtime stops the program ("select on
// synctest channel from outside bubble"). inBubble gives each bubble a pool of its own, and leaves an
// empty one behind.
//
//go:linkname semTimers github.com/redis/go-redis/v9/internal.semTimers
var semTimers sync.Pool

func freshSemTimers() {
	semTimers = sync.Pool{New: func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}}
}

// runInBubble runs one schedule of a world in its own bubble.
func runInBubble(t *testing.T, seed uint64, keep bool, run Runner) Result {
	var res Result
	inBubble(t, func(t *testing.T) { res = run(t, seed, keep) })
	return res
}

// inBubble runs f in a new synctest bubble (synctest.Test adds no subtest).
func inBubble(t *testing.T, f func(t *testing.T)) {
	orig := valCtxCh
	defer func() { valCtxCh = orig; freshSemTimers() }()
	synctest.Test(t, func(t *testing.T) {
		valCtxCh = make(chan struct{})
		freshSemTimers()
		f(t)
	})
}
