package opscli

import (
	"testing"
	"time"

	"github.com/baton-run/baton/registry"
)

// The workers cell counts live workers and adds up their load; it splits the OFFLINE ones by how they
// went, as their records say: evicted by a leader, or deregistered (left). -offline lists both.
func TestWorkersCellAdd(t *testing.T) {
	at := func(min int) time.Time { return checkedAt.Add(time.Duration(-min) * time.Minute) }
	workers := []registry.Worker{
		{ServerID: "on", Status: registry.StatusOnline, Active: 2, TotalCompleted: 10, TotalFailed: 1},
		{ServerID: "drain", Status: registry.StatusDraining, Active: 1, TotalCompleted: 5},
		{ServerID: "crashed", Status: registry.StatusOffline, Hostname: "pod-1", PID: 7, Version: "1.2",
			Active: 9, TotalCompleted: 100, DeregisteredAt: at(3), LastHeartbeat: at(4), EvictedBy: 42},
		{ServerID: "restarted", Status: registry.StatusOffline, Active: 9, DeregisteredAt: at(60), LastHeartbeat: at(60)},
		{ServerID: "deployed", Status: registry.StatusOffline, DeregisteredAt: at(30), LastHeartbeat: at(30)},
		{ServerID: "no-time", Status: registry.StatusOffline, LastHeartbeat: at(90)},
	}
	var c workersCell
	for _, w := range workers {
		c.add(w)
	}
	want := workersCell{Online: 1, Draining: 1, Offline: 4, Left: 3, Evicted: 1, Active: 3, Completed: 15, Failed: 1,
		firstLeft: at(60)}
	if c != want {
		t.Errorf("cell %+v\nwant %+v", c, want)
	}

	crashed, left := newOfflineWorker(workers[2]), newOfflineWorker(workers[5])
	if want := (offlineWorker{ServerID: "crashed", Hostname: "pod-1", PID: 7, Version: "1.2", Departure: departureEvicted,
		EvictedBy: 42, DepartedAt: at(3), LastHeartbeat: at(4)}); crashed != want {
		t.Errorf("evicted worker listed as %+v\nwant %+v", crashed, want)
	}
	if left.Departure != departureLeft || left.EvictedBy != 0 || !left.DepartedAt.IsZero() {
		t.Errorf("deregistered worker without a departure time listed as %+v", left)
	}
}
