package opscli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/progress"
)

var checkedAt = time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)

func fixedReport() report {
	return report{
		Project:   "demo",
		CheckedAt: checkedAt,
		Queues: []queueStatus{
			{
				Queue:  "orders",
				Leader: leaderCell{Known: true, ServerID: "w1", Token: 42},
				Dispatcher: runCell{Known: true, WorkflowID: "dispatcher-demo-orders", RunID: "run-a", Status: "RUNNING",
					StartTime: checkedAt.Add(-3*time.Minute - 12*time.Second), OwnerServerID: "w1", OwnerToken: 42,
					Progress: &progress.Report{CheckedAt: checkedAt, Progress: &dispatcher.Progress{Waiting: 2, InFlight: 1},
						OldestPendingAge: 12 * time.Second}},
				Heartbeat: heartbeatCell{Known: true, ServerID: "w1", RunID: "run-a", Token: 42,
					UpdatedAt: checkedAt.Add(-1200 * time.Millisecond), Age: seconds(1234 * time.Millisecond)},
				Workers: workersCell{Known: true, Online: 2, Draining: 1, Offline: 5, Left: 3, Evicted: 2, Active: 4, Completed: 1200,
					Failed: 7, firstLeft: checkedAt.Add(-5 * time.Hour)},
			},
			{
				// Nobody leads, the last run was terminated, no heartbeat, no workers: all known.
				Queue:      "payments",
				Leader:     leaderCell{Known: true},
				Dispatcher: runCell{Known: true, WorkflowID: "dispatcher-demo-payments", RunID: "run-b", Status: "TERMINATED", StartTime: checkedAt.Add(-26 * time.Hour)},
				Heartbeat:  heartbeatCell{Known: true},
				Workers:    workersCell{Known: true, Offline: 1, Left: 1, firstLeft: checkedAt.Add(-26 * time.Hour)},
			},
			{
				// A running run whose memo names another token than the leader's.
				Queue:  "returns",
				Leader: leaderCell{Known: true, ServerID: "w3", Token: 50},
				Dispatcher: runCell{Known: true, WorkflowID: "dispatcher-demo-returns", RunID: "run-c", Status: "RUNNING",
					StartTime: checkedAt.Add(-time.Second), OwnerServerID: "w2", OwnerToken: 45,
					Progress: &progress.Report{CheckedAt: checkedAt, Cause: progress.CauseNoPollers, Detail: "no worker polled"}},
				Heartbeat: heartbeatCell{Known: true},
				Workers:   workersCell{Known: true},
			},
			{
				// Temporal and Redis could not be read.
				Queue:      "refunds",
				Leader:     leaderCell{Known: true, ServerID: "w2", Token: 7},
				Dispatcher: runCell{WorkflowID: "dispatcher-demo-refunds"},
			},
			{
				// etcd could not be read either.
				Queue: "zzz",
			},
		},
		Reconciler: leaderCell{Known: true, ServerID: "w1", Token: 3},
		Warnings:   []string{"temporal unavailable: connection refused (1 later reads skipped)", "redis unavailable: TIME: connection refused"},
	}
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := writeTable(&buf, fixedReport()); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"QUEUE     LEADER  TOKEN  DISPATCHER RUN    RUN TOKEN     SINCE                         HEARTBEAT AGE  DISPATCH            WORKERS ON/DRAIN  EVICTED  LOAD ACTIVE/DONE/FAILED",
		"orders    w1      42     run-a RUNNING     42            2025-03-04T09:56:48Z (3m12s)  1.2s           ok:3@12s            2/1               2        4/1200/7",
		"payments  -       -      run-b TERMINATED  -             2025-03-03T08:00:00Z (26h0m)  -              -                   0/0               0        0/0/0",
		"returns   w3      50     run-c RUNNING     45 != leader  2025-03-04T09:59:59Z (1s)     -              STALLED:no_pollers  0/0               0        0/0/0",
		"refunds   w2      7      ?                 ?             ?                             ?              ?                   ?                 ?        ?",
		"zzz       ?       ?      ?                 ?             ?                             ?              ?                   ?                 ?        ?",
		"reconciler leader: w1 (token 3)",
		"left cleanly: 4 workers in the last 26h0m (deregistered, as on every restart; -offline lists them)",
		"warning: temporal unavailable: connection refused (1 later reads skipped)",
		"warning: redis unavailable: TIME: connection refused",
		"",
	}, "\n")
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteTableWithoutQueuesOrEtcd(t *testing.T) {
	var buf bytes.Buffer
	rep := report{Project: "demo", CheckedAt: checkedAt, Warnings: []string{"etcd unavailable: context deadline exceeded"}}
	if err := writeTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	want := "QUEUE  LEADER  TOKEN  DISPATCHER RUN  RUN TOKEN  SINCE  HEARTBEAT AGE  DISPATCH  WORKERS ON/DRAIN  EVICTED  LOAD ACTIVE/DONE/FAILED\n" +
		"no queues found for project demo\n" +
		"reconciler leader: ?\n" +
		"warning: etcd unavailable: context deadline exceeded\n"
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, fixedReport()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Project   string    `json:"project"`
		CheckedAt time.Time `json:"checked_at"`
		Queues    []struct {
			Queue   string         `json:"queue"`
			Leader  map[string]any `json:"leader"`
			Disp    map[string]any `json:"dispatcher"`
			HB      map[string]any `json:"heartbeat"`
			W       map[string]any `json:"workers"`
			Offline []any          `json:"offline_workers"`
		} `json:"queues"`
		Reconciler map[string]any `json:"reconciler_leader"`
		Warnings   []string       `json:"warnings"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if got.Project != "demo" || !got.CheckedAt.Equal(checkedAt) || len(got.Queues) != 5 || len(got.Warnings) != 2 {
		t.Fatalf("unexpected document:\n%s", buf.String())
	}
	orders, refunds := got.Queues[0], got.Queues[3]
	for _, chk := range []struct {
		name      string
		got, want any
	}{
		{"orders leader", orders.Leader["server_id"], "w1"},
		{"orders token", orders.Leader["token"], 42.0},
		{"orders run", orders.Disp["run_id"], "run-a"},
		{"orders status", orders.Disp["status"], "RUNNING"},
		{"orders run token", orders.Disp["owner_token"], 42.0},
		{"orders run owner", orders.Disp["owner_server_id"], "w1"},
		{"orders heartbeat age", orders.HB["age_seconds"], 1.234},
		{"orders online", orders.W["online"], 2.0},
		{"orders offline", orders.W["offline"], 5.0},
		{"orders left", orders.W["left"], 3.0},
		{"orders evicted", orders.W["evicted"], 2.0},
		{"orders offline workers listed without -offline", orders.Offline != nil, false},
		{"refunds leader known", refunds.Leader["known"], true},
		{"refunds dispatcher known", refunds.Disp["known"], false},
		{"refunds heartbeat known", refunds.HB["known"], false},
		{"refunds workers known", refunds.W["known"], false},
		{"reconciler", got.Reconciler["server_id"], "w1"},
	} {
		if chk.got != chk.want {
			t.Errorf("%s = %v, want %v", chk.name, chk.got, chk.want)
		}
	}
	var empty bytes.Buffer
	if err := writeJSON(&empty, report{Project: "demo"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(empty.String(), `"queues": []`) {
		t.Errorf("no queues should be an empty list:\n%s", empty.String())
	}
}

// offlineReport is a report of `status -offline`: orders keeps an evicted worker and two that left
// (one record without a departure time), payments none, and refunds could not be read.
func offlineReport() report {
	return report{
		Project:       "demo",
		CheckedAt:     checkedAt,
		offlineListed: true,
		Queues: []queueStatus{
			{
				Queue:   "orders",
				Leader:  leaderCell{Known: true, ServerID: "w1", Token: 42},
				Workers: workersCell{Known: true, Online: 1, Offline: 3, Left: 2, Evicted: 1, firstLeft: checkedAt.Add(-2 * time.Hour)},
				OfflineWorkers: []offlineWorker{
					{ServerID: "w9", Hostname: "pod-9", PID: 17, Version: "1.4.0", Departure: departureEvicted, EvictedBy: 42,
						DepartedAt: checkedAt.Add(-72 * time.Second), LastHeartbeat: checkedAt.Add(-80 * time.Second)},
					{ServerID: "w7", Hostname: "pod-7", PID: 12, Version: "1.4.0", Departure: departureLeft,
						DepartedAt: checkedAt.Add(-2 * time.Hour), LastHeartbeat: checkedAt.Add(-2 * time.Hour)},
					{ServerID: "w8", PID: 3, Departure: departureLeft, LastHeartbeat: checkedAt.Add(-3 * time.Hour)},
				},
			},
			{Queue: "payments", Leader: leaderCell{Known: true}, Workers: workersCell{Known: true}, OfflineWorkers: []offlineWorker{}},
			{Queue: "refunds", Leader: leaderCell{Known: true}},
		},
		Reconciler: leaderCell{Known: true},
		Warnings:   []string{"redis unavailable: list the workers of refunds: i/o timeout"},
	}
}

// -offline lists every OFFLINE worker, how it went and when, instead of the one-line summary.
func TestWriteTableOffline(t *testing.T) {
	var buf bytes.Buffer
	if err := writeTable(&buf, offlineReport()); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"QUEUE     LEADER  TOKEN  DISPATCHER RUN  RUN TOKEN  SINCE  HEARTBEAT AGE  DISPATCH  WORKERS ON/DRAIN  EVICTED  LOAD ACTIVE/DONE/FAILED",
		"orders    w1      42     ?               ?          ?      ?              ?         1/0               1        0/0/0",
		"payments  -       -      ?               ?          ?      ?              ?         0/0               0        0/0/0",
		"refunds   -       -      ?               ?          ?      ?              ?         ?                 ?        ?",
		"reconciler leader: -",
		"offline workers (kept for the registry's retention):",
		"QUEUE   SERVER  HOST   PID  VERSION  DEPARTURE            SINCE",
		"orders  w9      pod-9  17   1.4.0    evicted by token 42  2025-03-04T09:58:48Z (1m12s)",
		"orders  w7      pod-7  12   1.4.0    left                 2025-03-04T08:00:00Z (2h0m)",
		"orders  w8      -      3    -        left                 -",
		"warning: redis unavailable: list the workers of refunds: i/o timeout",
		"",
	}, "\n")
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}

	rep := offlineReport()
	rep.Queues = rep.Queues[1:]
	buf.Reset()
	if err := writeTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); !strings.Contains(got, "\noffline workers: none\n") || strings.Contains(got, "left cleanly") {
		t.Errorf("-offline with no OFFLINE worker:\n%s", got)
	}
}

// The summary of clean departures counts in the singular, and is left out when nobody left.
func TestLeftSummary(t *testing.T) {
	rep := report{CheckedAt: checkedAt, Queues: []queueStatus{
		{Workers: workersCell{Known: true, Offline: 2, Left: 1, Evicted: 1, firstLeft: checkedAt.Add(-90 * time.Second)}},
		{Workers: workersCell{}},
	}}
	if got, want := leftSummary(rep), "left cleanly: 1 worker in the last 1m30s (deregistered, as on every restart; -offline lists them)\n"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	rep.Queues[0].Workers.firstLeft = time.Time{} // a record without its departure time
	if got := leftSummary(rep); !strings.HasPrefix(got, "left cleanly: 1 worker (") {
		t.Errorf("summary without a departure time = %q", got)
	}
	rep.Queues[0].Workers.Left = 0
	if got := leftSummary(rep); got != "" {
		t.Errorf("summary with nobody left = %q, want none", got)
	}
}

// With -offline, JSON lists each queue's OFFLINE workers, [] for a queue without any; a queue whose
// workers could not be read has none.
func TestWriteJSONOffline(t *testing.T) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, offlineReport()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Queues []struct {
			Offline []map[string]any `json:"offline_workers"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil || len(got.Queues) != 3 {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	orders := got.Queues[0].Offline
	if len(orders) != 3 || got.Queues[1].Offline == nil || len(got.Queues[1].Offline) != 0 || got.Queues[2].Offline != nil {
		t.Fatalf("offline_workers per queue: %s", buf.String())
	}
	for _, chk := range []struct {
		name      string
		got, want any
	}{
		{"evicted server", orders[0]["server_id"], "w9"},
		{"evicted departure", orders[0]["departure"], departureEvicted},
		{"evicted by", orders[0]["evicted_by"], 42.0},
		{"evicted at", orders[0]["departed_at"], "2025-03-04T09:58:48Z"},
		{"evicted last heartbeat", orders[0]["last_heartbeat"], "2025-03-04T09:58:40Z"},
		{"left departure", orders[1]["departure"], departureLeft},
		{"left evicted_by", orders[1]["evicted_by"], nil},
		{"left without a time", orders[2]["departed_at"], nil},
	} {
		if chk.got != chk.want {
			t.Errorf("%s = %v, want %v", chk.name, chk.got, chk.want)
		}
	}
}

func TestFormatAge(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1234 * time.Millisecond, "1.2s"},
		{9960 * time.Millisecond, "10s"},
		{192400 * time.Millisecond, "3m12s"},
		{26*time.Hour + 20*time.Second, "26h0m"},
		{-300 * time.Millisecond, "-300ms"},
	} {
		if got := formatAge(tt.d); got != tt.want {
			t.Errorf("formatAge(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
