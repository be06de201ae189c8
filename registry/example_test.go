package registry_test

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/registry"
)

// A worker registers, heartbeats until it is asked to drain, and deregisters; the queue's leader
// evicts the workers that stopped heartbeating.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	reg, err := registry.New(rdb, registry.Config{Project: "billing"})
	if err != nil {
		panic(err)
	}
	host, _ := os.Hostname()
	me := registry.Registration{
		ServerID: "worker-1", Queue: "orders", Hostname: host, PID: os.Getpid(), Version: "1.4.0",
		Capabilities: []string{"ChargeCard", "RefundCard"}, MaxConcurrency: 50,
	}
	if _, err := reg.Register(ctx, me); err != nil {
		panic(err)
	}
	for range time.Tick(reg.Config().HeartbeatInterval) {
		status, err := reg.Heartbeat(ctx, me.Queue, me.ServerID, registry.Beat{Active: 3, CompletedDelta: 12})
		if errors.Is(err, registry.ErrNotRegistered) {
			_, err = reg.Register(ctx, me) // evicted or expired: register again
		}
		if err == nil && status == registry.StatusDraining {
			break // finish running tasks, take no new ones
		}
	}
	_ = reg.Deregister(ctx, me.Queue, me.ServerID)
}

// The leader of a queue evicts dead workers while its term lasts.
func ExampleRegistry_Evict() {
	var (
		reg  *registry.Registry
		term *election.Term // from election.Elector.Campaign or Run's OnElected
	)
	ctx := term.Context()
	tick := time.NewTicker(reg.Config().HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := reg.Evict(ctx, term, term.Queue()); errors.Is(err, registry.ErrNotLeader) || errors.Is(err, registry.ErrSuperseded) {
				return
			}
		}
	}
}

// A worker process keeps itself registered with a Member: the loop of Example, with the load
// report, the re-registration and the drain flag handled for it. Its owner runs it and waits for it.
func ExampleMember() {
	var (
		ctx     context.Context    // the process's, cancelled when it stops
		reg     *registry.Registry // from registry.New
		drainer registry.Drainer   // a *balance.Runner, in a baton.Node
	)
	host, _ := os.Hostname()
	m, err := registry.NewMember(reg, registry.MemberConfig{
		Worker: registry.Registration{ServerID: "worker-1", Hostname: host, PID: os.Getpid(),
			Capabilities: []string{"ChargeCard"}, MaxConcurrency: 50},
		Queues:  []string{"orders", "refunds"},
		Load:    func(queue string) registry.Load { return registry.Load{Active: 3, Completed: 120} },
		Drainer: drainer,
	})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	<-done // after ctx ends; then deregister from each queue
}
