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
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
)

// A leader is what both implementations look like to the measurements.
type leader interface {
	// campaign blocks until elected and returns when the win was observed.
	campaign(ctx context.Context) (time.Time, error)
	// resign ends the current term gracefully.
	resign(ctx context.Context) error
	close()
}

type batonLeader struct {
	el   *election.Elector
	cli  *clientv3.Client
	id   string
	term *election.Term
}

func newBaton(cluster *etcdtest.Cluster, id string, ttl time.Duration, endpoints ...string) (*batonLeader, error) {
	cli, err := cluster.NewClient(endpoints...)
	if err != nil {
		return nil, err
	}
	el, err := election.New(cli, election.Config{TTL: ttl})
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &batonLeader{el: el, cli: cli, id: id}, nil
}

func (b *batonLeader) campaign(ctx context.Context) (time.Time, error) {
	term, err := b.el.Campaign(ctx, "bench", "q", b.id)
	if err != nil {
		return time.Time{}, err
	}
	b.term = term
	return term.Started(), nil
}

func (b *batonLeader) resign(ctx context.Context) error { return b.term.Resign(ctx) }

func (b *batonLeader) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = b.el.Close(ctx)
	b.cli.Close()
}

type bareLeader struct {
	cli  *clientv3.Client
	sess *concurrency.Session
	e    *concurrency.Election
	id   string
}

func newBare(cluster *etcdtest.Cluster, prefix, id string, ttl time.Duration, endpoints ...string) (*bareLeader, error) {
	cli, err := cluster.NewClient(endpoints...)
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &bareLeader{cli: cli, sess: sess, e: concurrency.NewElection(sess, prefix), id: id}, nil
}

func (b *bareLeader) campaign(ctx context.Context) (time.Time, error) {
	if err := b.e.Campaign(ctx, b.id); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

func (b *bareLeader) resign(ctx context.Context) error { return b.e.Resign(ctx) }

func (b *bareLeader) close() {
	b.sess.Orphan()
	b.cli.Close()
}

// benchGraceful alternates leadership between two candidates: the leader resigns as soon as the
// follower waits, then campaigns again at once, as a rolling restart does. The figure is the time
// from the resign call to the successor's win.
func benchGraceful(ctx context.Context, cluster *etcdtest.Cluster, o options) (benchreport.Figure, error) {
	ours, err := handovers(ctx, cluster, o.rounds, func(id string) (leader, error) {
		return newBaton(cluster, id, 10*time.Second)
	}, "/baton/election/bench/q")
	if err != nil {
		return benchreport.Figure{}, err
	}
	bare, err := handovers(ctx, cluster, o.rounds, func(id string) (leader, error) {
		return newBare(cluster, "/bench/bare-graceful", id, 10*time.Second)
	}, "/bench/bare-graceful")
	if err != nil {
		return benchreport.Figure{}, err
	}
	return benchreport.NewFigure("graceful handover (resign -> successor's term; follower joined 5-50 ms before)", "ms",
		benchreport.Millis(ours), "bare concurrency.Election", benchreport.Millis(bare),
		"p95 <= 50 ms and <= 1.5x baseline p95",
		func(f benchreport.Figure) bool { return f.P95 <= 50 && f.P95 <= 1.5*f.BaselineP95 }), nil
}

func handovers(ctx context.Context, cluster *etcdtest.Cluster, rounds int, mk func(id string) (leader, error), prefix string) ([]time.Duration, error) {
	a, err := mk("a")
	if err != nil {
		return nil, err
	}
	defer a.close()
	b, err := mk("b")
	if err != nil {
		return nil, err
	}
	defer b.close()
	observer, err := cluster.NewClient()
	if err != nil {
		return nil, err
	}
	defer observer.Close()

	if _, err := a.campaign(ctx); err != nil {
		return nil, err
	}
	cur, next := leader(a), leader(b)
	samples := make([]time.Duration, 0, rounds)
	for range rounds {
		won := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			at, err := next.campaign(ctx)
			if err != nil {
				errc <- err
				return
			}
			won <- at
		}()
		if err := waitKeys(ctx, observer, prefix, 2); err != nil {
			return nil, err
		}
		// In a rolling restart the old leader stops shortly after a follower joined: the follower's
		// watch is fresh, which is the case where a watch opened at a past revision waits for etcd's
		// 100 ms resync of unsynced watchers.
		time.Sleep(joinGap())
		start := time.Now()
		if err := cur.resign(ctx); err != nil {
			return nil, err
		}
		select {
		case at := <-won:
			samples = append(samples, at.Sub(start))
		case err := <-errc:
			return nil, err
		case <-time.After(30 * time.Second):
			return nil, errors.New("successor did not win within 30s")
		}
		cur, next = next, cur
	}
	return samples, nil
}

// joinGap is the time between a follower joining and the leader resigning: 5 to 50 ms.
func joinGap() time.Duration { return 5*time.Millisecond + rand.N(45*time.Millisecond) }

// waitKeys polls until prefix holds n keys: the follower is waiting for the leader.
func waitKeys(ctx context.Context, cli *clientv3.Client, prefix string, n int64) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d keys, want %d", prefix, resp.Count, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// benchCrash measures crash failover: the leader's connection to etcd is blackholed and the
// successor wins once etcd expires the lease. Rounds run o.parallel at a time on independent queues.
func benchCrash(ctx context.Context, cluster *etcdtest.Cluster, o options) (benchreport.Figure, error) {
	ours, err := crashes(ctx, cluster, o, func(i int, id string, endpoints ...string) (leader, string, error) {
		l, err := newBaton(cluster, id, o.crashTTL, endpoints...)
		if err != nil {
			return nil, "", err
		}
		queue := fmt.Sprintf("crash-%d", i)
		return &queueLeader{batonLeader: l, queue: queue}, l.el.ElectionKey("bench", queue), nil
	})
	if err != nil {
		return benchreport.Figure{}, err
	}
	bare, err := crashes(ctx, cluster, o, func(i int, id string, endpoints ...string) (leader, string, error) {
		prefix := fmt.Sprintf("/bench/bare-crash-%d", i)
		l, err := newBare(cluster, prefix, id, o.crashTTL, endpoints...)
		return l, prefix, err
	})
	if err != nil {
		return benchreport.Figure{}, err
	}
	limit := float64(o.crashTTL+500*time.Millisecond) / float64(time.Millisecond)
	return benchreport.NewFigure(fmt.Sprintf("crash failover, TTL %v (cut -> successor's term)", o.crashTTL), "ms",
		benchreport.Millis(ours), "bare concurrency.Election", benchreport.Millis(bare),
		fmt.Sprintf("p95 <= TTL + 500 ms = %.0f ms", limit),
		func(f benchreport.Figure) bool { return f.P95 <= limit }), nil
}

type queueLeader struct {
	*batonLeader
	queue string
}

func (q *queueLeader) campaign(ctx context.Context) (time.Time, error) {
	term, err := q.el.Campaign(ctx, "bench", q.queue, q.id)
	if err != nil {
		return time.Time{}, err
	}
	q.term = term
	return term.Started(), nil
}

func crashes(ctx context.Context, cluster *etcdtest.Cluster, o options, mk func(i int, id string, endpoints ...string) (leader, string, error)) ([]time.Duration, error) {
	var mu sync.Mutex
	var samples []time.Duration
	var firstErr error
	for done := 0; done < o.crashRounds; done += o.parallel {
		var wg sync.WaitGroup
		for i := done; i < min(done+o.parallel, o.crashRounds); i++ {
			wg.Go(func() {
				d, err := crashOnce(ctx, cluster, i, mk)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				samples = append(samples, d)
			})
		}
		wg.Wait()
		if firstErr != nil {
			return nil, firstErr
		}
	}
	return samples, nil
}

func crashOnce(ctx context.Context, cluster *etcdtest.Cluster, i int, mk func(i int, id string, endpoints ...string) (leader, string, error)) (time.Duration, error) {
	proxy, err := etcdtest.NewProxy(cluster.MemberEndpoint(0))
	if err != nil {
		return 0, err
	}
	defer proxy.Close()
	old, prefix, err := mk(i, "old", proxy.URL())
	if err != nil {
		return 0, err
	}
	defer old.close()
	successor, _, err := mk(i, "new")
	if err != nil {
		return 0, err
	}
	defer successor.close()
	observer, err := cluster.NewClient()
	if err != nil {
		return 0, err
	}
	defer observer.Close()

	if _, err := old.campaign(ctx); err != nil {
		return 0, err
	}
	won := make(chan time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		at, err := successor.campaign(ctx)
		if err != nil {
			errc <- err
			return
		}
		won <- at
	}()
	if err := waitKeys(ctx, observer, prefix, 2); err != nil {
		return 0, err
	}
	// Let a keepalive cycle pass so the cut lands at a random point of the lease's life.
	time.Sleep(time.Duration(i%7) * 100 * time.Millisecond)
	start := time.Now()
	proxy.Blackhole()
	select {
	case at := <-won:
		return at.Sub(start), nil
	case err := <-errc:
		return 0, err
	case <-time.After(30 * time.Second):
		return 0, errors.New("successor did not win within 30s of the cut")
	}
}
