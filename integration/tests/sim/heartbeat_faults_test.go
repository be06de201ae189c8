package sim_test

import (
	"context"
	"time"
)

// fault draws this step's faults from the seed's plan (the scheduler alone draws, so a seed replays).
func (w *hbWorld) fault(ctx context.Context, wid string) {
	p, r := w.plan, w.r
	if r.Float64() < p.restore {
		w.restore()
	}
	if r.Float64() < p.elect {
		w.elect(ctx, wid)
	}
	if r.Float64() < p.flush {
		w.rec.Add("redis", "FLUSHALL")
		w.redis.FlushAll()
		w.emptied()
	}
	if r.Float64() < p.restart {
		w.rec.Add("redis", "restart without data")
		w.redis.Restart()
		w.emptied()
	}
	if r.Float64() < p.down {
		w.down = !w.down
		w.rec.Add("redis", "unavailable=%v", w.down)
		w.redis.SetDown(w.down)
	}
	if r.Float64() < p.delay {
		d := time.Duration(0)
		if r.IntN(2) == 0 {
			d = time.Duration(r.Int64N(int64(2 * hbTimeout)))
		}
		w.rec.Add("redis", "reply delay %v", d.Round(time.Millisecond))
		w.redis.SetDelay(d)
	}
	if r.Float64() < p.etcdDown {
		w.mu.Lock()
		w.etcdDown = !w.etcdDown
		w.rec.Add("etcd", "unavailable=%v", w.etcdDown)
		w.mu.Unlock()
	}
}

// restore puts etcd back to a snapshot without --bump-revision: the revision goes back, the holder's
// key is gone (its term ends in etcd; its owner learns later), and the next election's token may be
// lower than tokens already written to Redis. The next election follows at once or later.
func (w *hbWorld) restore() {
	w.mu.Lock()
	back := 1 + w.r.Int64N(int64(w.plan.regressMax))
	w.rev = max(1, w.rev-back)
	w.epoch++
	old := w.current
	w.current = nil
	w.mu.Unlock()
	w.rec.Add("etcd", "restored without --bump-revision: revision back by %d, epoch %d", back, w.epoch)
	w.retire(old)
}

func (w *hbWorld) emptied() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = nil
	w.flushed = w.current != nil
}

// heal turns every fault off, ends every stale term, and elects an owner if etcd has none.
func (w *hbWorld) heal(ctx context.Context, wid string) {
	w.rec.Add("world", "heal")
	w.down = false
	w.redis.SetDown(false)
	w.redis.SetDelay(0)
	w.mu.Lock()
	w.etcdDown = false
	cur := w.current
	var stale []*hbTerm
	for _, t := range w.terms {
		if t != cur {
			stale = append(stale, t)
		}
	}
	w.mu.Unlock()
	for _, t := range stale {
		t.cancel()
	}
	if cur == nil {
		w.elect(ctx, wid)
	}
}
