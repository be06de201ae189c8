package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-run/baton/integration/sim"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
	"github.com/baton-run/baton/takeover"
)

// The run log's probes: records a Manager wrote (its Record returned nil) in a seed with a run log.
const (
	probeRunLogged      = "a takeover logged its own run in the run log"
	probePriorLogged    = "a takeover logged an earlier owner's run before ending it"
	probeStepDownLogged = "a step-down logged its chain, continued as new, at its latest run"
)

// errEtcdLost is what a run-log request lost in the network returns, as a broken connection shows.
var errEtcdLost = status.Error(codes.Unavailable, "sim: etcd request lost")

// newRunLogModel is the etcd model the seed's run log lives on (a seed in two has one): every term's
// Manager gets a real takeover.EtcdRunLog over its own real clientv3 on it, whose requests cross
// etcdNet.
func (w *world) newRunLogModel(rates faultRates) {
	w.etcd = etcdmodel.New(etcdmodel.Options{Rand: sim.Streams{Seed: w.seed}.Source("etcd/leases"),
		Transport: &etcdNet{w: w, rates: rates, rs: map[string]*rand.Rand{}}})
}

// runLogFor is term tm's run log: the real EtcdRunLog over a clientv3 of its own on the model, nil
// when the seed has none.
func (w *world) runLogFor(ctx context.Context, tm *term) (takeover.RunLog, error) {
	if w.etcd == nil {
		return nil, nil
	}
	rl, err := takeover.NewEtcdRunLog(w.etcd.NewClient(ctx, tm.who()), "")
	if err != nil {
		return nil, err
	}
	return observedRunLog{EtcdRunLog: rl, tm: tm}, nil
}

// observedRunLog is the real EtcdRunLog; it tells the world each record the Manager was told is
// logged, for the probes. It changes nothing the Manager sees.
type observedRunLog struct {
	*takeover.EtcdRunLog
	tm *term
}

func (l observedRunLog) Record(ctx context.Context, rng string, run takeover.LoggedRun) error {
	err := l.EtcdRunLog.Record(ctx, rng, run)
	if err == nil {
		l.tm.w.logged(l.tm, run)
	}
	return err
}

// logged feeds the run log's probes from a record tm's Manager logged: outside a step-down, its own
// run (a takeover's start or reuse) or an earlier owner's (logged before the takeover terminates
// it); in its step-down, a chain whose latest run is not its first (it continued as new since the
// takeover logged it, so the step-down logs it again before ending it).
func (w *world) logged(tm *term, run takeover.LoggedRun) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logLocked(tm.who(), "run log: chain %s last %s of token %d logged", short(run.RunID), short(run.Last), run.Token)
	switch {
	case w.steppingDown[tm.token]:
		if run.Token == tm.token && run.Last != "" && run.Last != run.RunID {
			w.probes[probeStepDownLogged]++
		}
	case run.Token == tm.token:
		w.probes[probeRunLogged]++
	case run.Token < tm.token:
		w.probes[probePriorLogged]++
	}
}

// etcdNet is the network between the run logs and the etcd model: every request gets the seeded
// latency and, before the heal, the seed's faults (delay, loss before it applies, a response lost
// after it applied), delivered by a timer of its own so that a request the caller gave up on still
// lands. gRPC does not duplicate a request, so nothing is duplicated.
type etcdNet struct {
	w     *world
	rates faultRates
	mu    sync.Mutex
	rs    map[string]*rand.Rand // by client
}

func (n *etcdNet) Call(ctx context.Context, client, method string, req any, deliver func() error) error {
	n.mu.Lock()
	r, ok := n.rs[client]
	if !ok {
		r = stream(n.w.seed, "etcd/"+client)
		n.rs[client] = r
	}
	f := n.w.draw(r, n.rates)
	n.mu.Unlock()
	out := make(chan error, 1)
	time.AfterFunc(f.delay, func() {
		if f.dropBefore {
			n.w.logf(client, "etcd %s %s dropped before the server", method, etcdKey(req))
			out <- errEtcdLost
			return
		}
		err := deliver()
		tag := ""
		if f.dropResponse {
			tag, err = " (response lost)", errEtcdLost
		}
		n.w.logf(client, "etcd %s %s%s -> rev %d, %v", method, etcdKey(req), tag, n.w.etcd.Revision(), err)
		out <- err
	})
	select {
	case err := <-out:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// etcdKey is the key (and value) a run-log request names, for the trace.
func etcdKey(req any) string {
	switch r := req.(type) {
	case *pb.PutRequest:
		return fmt.Sprintf("%s=%q", r.Key, r.Value)
	case *pb.RangeRequest:
		return fmt.Sprintf("%s (limit %d, sort %v)", r.Key, r.Limit, r.SortTarget)
	}
	return fmt.Sprintf("%T", req)
}
