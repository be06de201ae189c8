package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tools/benchreport"
)

// A leader is what both implementations look like to the measurements: campaign blocks until
// elected and returns when the win was observed; prefix holds the election's keys (the leader's and
// its followers').
type leader struct {
	campaign func(ctx context.Context) (time.Time, error)
	resign   func(ctx context.Context) error
	prefix   string
	close    func()
}

// newLeader makes a candidate for queue whose etcd client talks to endpoints (default: all members).
type newLeader func(cluster *etcdx.Cluster, id, queue string, ttl time.Duration, endpoints ...string) (*leader, error)

func newBaton(cluster *etcdx.Cluster, id, queue string, ttl time.Duration, endpoints ...string) (*leader, error) {
	cli, err := cluster.NewClient(endpoints...)
	if err != nil {
		return nil, err
	}
	el, err := election.New(cli, election.Config{TTL: ttl})
	if err != nil {
		cli.Close()
		return nil, err
	}
	var term *election.Term
	return &leader{
		campaign: func(ctx context.Context) (at time.Time, err error) {
			if term, err = el.Campaign(ctx, "bench", queue, id); err == nil {
				at = term.Started()
			}
			return at, err
		},
		resign: func(ctx context.Context) error { return term.Resign(ctx) },
		prefix: el.ElectionKey("bench", queue),
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_ = el.Close(ctx)
			cli.Close()
		},
	}, nil
}

func newBare(cluster *etcdx.Cluster, id, queue string, ttl time.Duration, endpoints ...string) (*leader, error) {
	cli, err := cluster.NewClient(endpoints...)
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
	if err != nil {
		cli.Close()
		return nil, err
	}
	pfx := "/bench/bare-" + queue
	e := concurrency.NewElection(sess, pfx)
	return &leader{
		campaign: func(ctx context.Context) (time.Time, error) { err := e.Campaign(ctx, id); return time.Now(), err },
		resign:   e.Resign,
		prefix:   pfx,
		close:    func() { sess.Orphan(); cli.Close() },
	}, nil
}

// leaderFigure measures with Baton, then with bare concurrency.Election, and returns the figure of
// the two; measure gets a candidate maker and an observer client for handover.
func leaderFigure(cluster *etcdx.Cluster, name, target string, met func(benchreport.Figure) bool,
	measure func(mk newLeader, observer *clientv3.Client) ([]time.Duration, error)) ([]benchreport.Figure, error) {
	observer, err := cluster.NewClient()
	if err != nil {
		return nil, err
	}
	defer observer.Close()
	var samples [2][]float64
	for k, mk := range []newLeader{newBaton, newBare} {
		d, err := measure(mk, observer)
		if err != nil {
			return nil, err
		}
		samples[k] = benchreport.Millis(d)
	}
	return []benchreport.Figure{benchreport.NewFigure(name, "ms", samples[0], "bare concurrency.Election", samples[1], target, met)}, nil
}

// benchGraceful alternates leadership between two candidates: the leader resigns as soon as the
// follower waits, then campaigns again at once, as a rolling restart does. The figure is the time
// from the resign call to the successor's win.
func benchGraceful(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	return leaderFigure(s.cluster, "graceful handover (resign -> successor's term; follower joined 5-50 ms before)",
		"p95 <= 50 ms and <= 1.5x baseline p95", func(f benchreport.Figure) bool { return f.P95 <= 50 && f.P95 <= 1.5*f.BaselineP95 },
		func(mk newLeader, observer *clientv3.Client) ([]time.Duration, error) {
			a, err := mk(s.cluster, "a", "q", 10*time.Second)
			if err != nil {
				return nil, err
			}
			defer a.close()
			b, err := mk(s.cluster, "b", "q", 10*time.Second)
			if err != nil {
				return nil, err
			}
			defer b.close()
			if _, err := a.campaign(ctx); err != nil {
				return nil, err
			}
			var samples []time.Duration
			for cur, next := a, b; len(samples) < o.rounds; cur, next = next, cur {
				// In a rolling restart the old leader stops shortly after a follower joined (5 to 50 ms):
				// the follower's watch is fresh, which is the case where a watch opened at a past revision
				// waits for etcd's 100 ms resync of unsynced watchers.
				gap := 5*time.Millisecond + rand.N(45*time.Millisecond)
				d, err := handover(ctx, observer, next, gap, func() error { return cur.resign(ctx) })
				if err != nil {
					return nil, err
				}
				samples = append(samples, d)
			}
			return samples, nil
		})
}

// handover starts next's campaign, waits until it waits behind the leader (its prefix holds two keys),
// waits gap, and returns the time from act (which ends the leader's term) to next's win.
func handover(ctx context.Context, observer *clientv3.Client, next *leader, gap time.Duration, act func() error) (time.Duration, error) {
	won := make(chan time.Time, 1)
	errc := make(chan error, 1)
	// A campaign still waiting when handover gives up ends with it; a won term outlives its
	// campaign's context (both implementations), so the successor keeps what it won.
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		if at, err := next.campaign(cctx); err != nil {
			errc <- err
		} else {
			won <- at
		}
	})
	if err := harness.Poll(ctx, 10*time.Second, time.Millisecond, func() error {
		resp, err := observer.Get(ctx, next.prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count != 2 {
			err = fmt.Errorf("%s: %d keys, want 2 (a follower)", next.prefix, resp.Count)
		}
		return err
	}); err != nil {
		return 0, err
	}
	time.Sleep(gap)
	start := time.Now()
	if err := act(); err != nil {
		return 0, err
	}
	select {
	case at := <-won:
		return at.Sub(start), nil
	case err := <-errc:
		return 0, err
	case <-time.After(30 * time.Second):
		return 0, errors.New("successor did not win within 30s")
	}
}

// benchCrash measures crash failover: the leader's connection to etcd is blackholed and the
// successor wins once etcd expires the lease. Rounds run o.parallel at a time on independent queues.
func benchCrash(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	limit := benchreport.Ms(o.crashTTL + 500*time.Millisecond)
	return leaderFigure(s.cluster, fmt.Sprintf("crash failover, TTL %v (cut -> successor's term)", o.crashTTL),
		fmt.Sprintf("p95 <= TTL + 500 ms = %.0f ms", limit), func(f benchreport.Figure) bool { return f.P95 <= limit },
		func(mk newLeader, observer *clientv3.Client) ([]time.Duration, error) {
			samples := make([]time.Duration, o.crashRounds)
			return samples, harness.Parallel(ctx, o.crashRounds, o.parallel, func(ctx context.Context, i int) (err error) {
				samples[i], err = crashOnce(ctx, s.cluster, observer, o.crashTTL, i, mk)
				return err
			})
		})
}

// crashOnce measures one crash failover on queue crash-<i>.
func crashOnce(ctx context.Context, cluster *etcdx.Cluster, observer *clientv3.Client, ttl time.Duration, i int, mk newLeader) (time.Duration, error) {
	proxy, err := etcdx.NewProxy(cluster.MemberEndpoint(0))
	if err != nil {
		return 0, err
	}
	defer proxy.Close()
	queue := fmt.Sprintf("crash-%d", i)
	old, err := mk(cluster, "old", queue, ttl, proxy.URL())
	if err != nil {
		return 0, err
	}
	defer old.close()
	successor, err := mk(cluster, "new", queue, ttl)
	if err != nil {
		return 0, err
	}
	defer successor.close()
	if _, err := old.campaign(ctx); err != nil {
		return 0, err
	}
	// Let a keepalive cycle pass so the cut lands at a random point of the lease's life.
	return handover(ctx, observer, successor, time.Duration(i%7)*100*time.Millisecond,
		func() error { proxy.Blackhole(); return nil })
}
