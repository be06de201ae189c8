package opscli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/progress"
)

// report is what `demo-worker status` found. A cell whose Known is false could not be read: it
// renders as "?" and a warning says why. A known cell without data (nobody leads, no run, no
// heartbeat) renders as "-".
type report struct {
	Project    string        `json:"project"`
	CheckedAt  time.Time     `json:"checked_at"`
	Queues     []queueStatus `json:"queues"`
	Reconciler leaderCell    `json:"reconciler_leader"`
	Warnings   []string      `json:"warnings,omitempty"`

	offlineListed bool // -offline: each queue's OfflineWorkers is read
	etcdOK        bool
	down          []string // the sources that could not be read (etcd, temporal, redis)
}

type queueStatus struct {
	Queue      string        `json:"queue"`
	Leader     leaderCell    `json:"leader"`
	Dispatcher runCell       `json:"dispatcher"`
	Heartbeat  heartbeatCell `json:"heartbeat"`
	Workers    workersCell   `json:"workers"`
	// OfflineWorkers are the queue's OFFLINE records, newest departure first; only with -offline.
	OfflineWorkers []offlineWorker `json:"offline_workers,omitzero"`
}

// leaderCell is who etcd shows as leader; ServerID is empty when nobody leads.
type leaderCell struct {
	Known    bool   `json:"known"`
	ServerID string `json:"server_id,omitempty"`
	Token    int64  `json:"token,omitempty"`
}

// runCell is the latest run of the dispatcher workflow; RunID is empty when there is none.
type runCell struct {
	Known      bool      `json:"known"`
	WorkflowID string    `json:"workflow_id,omitempty"`
	RunID      string    `json:"run_id,omitempty"`
	Status     string    `json:"status,omitempty"`
	StartTime  time.Time `json:"start_time,omitzero"`
	// OwnerServerID and OwnerToken are the run's owner as its memo (takeover.MemoKey) says: a
	// running run's token must be its queue's leader's create revision.
	OwnerServerID string `json:"owner_server_id,omitempty"`
	OwnerToken    int64  `json:"owner_token,omitempty"`
	// Progress is progress.Check's verdict on a running run: a cause when it makes no progress, and
	// what it holds; nil when the run is not running or could not be judged.
	Progress *progress.Report `json:"progress,omitempty"`
	// RunsFailing counts the latest runs that closed failed right after their start, in a row, while
	// that streak lasts (CheckRunsFailing); 0 otherwise, and when the run has been open a while.
	RunsFailing int `json:"runs_failing,omitempty"`
}

// heartbeatCell is the dispatcher's heartbeat entry in Redis; ServerID is empty when there is none.
// Age is measured by Redis time.
type heartbeatCell struct {
	Known     bool      `json:"known"`
	ServerID  string    `json:"server_id,omitempty"`
	RunID     string    `json:"run_id,omitempty"`
	Token     int64     `json:"token,omitempty"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	Age       seconds   `json:"age_seconds,omitempty"`
}

// workersCell counts the queue's workers in the registry by status, and adds up the load that the
// online and draining ones reported (baton.Config.Load): tasks running now, and completed and failed
// since each registered.
//
// Offline counts every OFFLINE record the registry still keeps (registry.Config.Retention, 24 h by
// default), split by how the worker went: Left deregistered cleanly (every restart leaves one behind,
// under its old server ID), Evicted was removed by its queue's leader when its heartbeat stopped (a
// crash, a kill, a cut from Redis). Offline = Left + Evicted.
type workersCell struct {
	Known     bool  `json:"known"`
	Online    int   `json:"online"`
	Draining  int   `json:"draining"`
	Offline   int   `json:"offline"`
	Left      int   `json:"left"`
	Evicted   int   `json:"evicted"`
	Active    int   `json:"active"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`

	firstLeft time.Time // the earliest departure of the Left (Redis time); zero when unknown
}

// How an OFFLINE worker went, as status shows it (registry.Worker.Evicted tells).
const (
	departureLeft    = "left"    // deregistered: a clean stop
	departureEvicted = "evicted" // evicted by its queue's leader: its heartbeat stopped
)

// offlineWorker is one OFFLINE record of the registry, for -offline. DepartedAt is when it went
// OFFLINE (Redis time; zero when the record does not say); EvictedBy is the evicting leader's token.
type offlineWorker struct {
	ServerID      string    `json:"server_id"`
	Hostname      string    `json:"hostname"`
	PID           int       `json:"pid"`
	Version       string    `json:"version"`
	Departure     string    `json:"departure"`
	EvictedBy     int64     `json:"evicted_by,omitempty"`
	DepartedAt    time.Time `json:"departed_at,omitzero"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
}

// seconds is a duration that JSON shows in seconds.
type seconds time.Duration

func (s seconds) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatFloat(time.Duration(s).Seconds(), 'f', 3, 64)), nil
}

const unknown = "?"

func writeJSON(w io.Writer, rep report) error {
	if rep.Queues == nil {
		rep.Queues = []queueStatus{}
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// dispatchCellText is the DISPATCH cell: "-" without a judged run, RUNS-FAILING:<n> while the latest
// runs keep failing right after their start, the cause of a stall, or "ok" with what the run holds
// (requests, and how long the oldest has waited) when it was asked.
func dispatchCellText(r runCell) string {
	p := r.Progress
	switch {
	case !r.Known:
		return "?"
	case r.RunsFailing > 0:
		return fmt.Sprintf("RUNS-FAILING:%d", r.RunsFailing)
	case p == nil:
		return "-"
	case p.Stalled():
		return "STALLED:" + string(p.Cause)
	case p.Progress != nil && p.Progress.Waiting+p.Progress.InFlight > 0:
		return fmt.Sprintf("ok:%d@%s", p.Progress.Waiting+p.Progress.InFlight, p.OldestPendingAge.Round(time.Second))
	}
	return "ok"
}

// writeTable prints one row per queue, the reconciler leader, the workers that left cleanly (a
// summary, or with -offline the list of every OFFLINE worker) and the warnings.
func writeTable(w io.Writer, rep report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tLEADER\tTOKEN\tDISPATCHER RUN\tRUN TOKEN\tSINCE\tHEARTBEAT AGE\tDISPATCH\tWORKERS ON/DRAIN\tEVICTED\tLOAD ACTIVE/DONE/FAILED")
	for _, q := range rep.Queues {
		leader, token := leaderCells(q.Leader)
		run, since := runCells(q.Dispatcher, rep.CheckedAt)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", q.Queue, leader, token, run, runTokenText(q), since,
			heartbeatCellText(q.Heartbeat), dispatchCellText(q.Dispatcher), workersCellText(q.Workers), evictedCellText(q.Workers),
			loadCellText(q.Workers))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	if len(rep.Queues) == 0 {
		fmt.Fprintf(&b, "no queues found for project %s\n", rep.Project)
	}
	leader, token := leaderCells(rep.Reconciler)
	if rep.Reconciler.Known && rep.Reconciler.ServerID != "" {
		leader += " (token " + token + ")"
	}
	fmt.Fprintf(&b, "reconciler leader: %s\n", leader)
	if !rep.offlineListed {
		b.WriteString(leftSummary(rep))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if rep.offlineListed {
		if err := writeOffline(w, rep); err != nil {
			return err
		}
	}
	b.Reset()
	for _, warn := range rep.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", warn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// leftSummary is one line on the workers that deregistered cleanly, which the table leaves out: every
// restart leaves such a record behind for the registry's retention, and it is no trouble. It is empty
// when there is none.
func leftSummary(rep report) string {
	left := 0
	var first time.Time
	for _, q := range rep.Queues {
		left += q.Workers.Left
		if f := q.Workers.firstLeft; !f.IsZero() && (first.IsZero() || f.Before(first)) {
			first = f
		}
	}
	if left == 0 {
		return ""
	}
	what := fmt.Sprintf("%d workers", left)
	if left == 1 {
		what = "1 worker"
	}
	if !first.IsZero() {
		what += " in the last " + formatAge(rep.CheckedAt.Sub(first))
	}
	return fmt.Sprintf("left cleanly: %s (deregistered, as on every restart; -offline lists them)\n", what)
}

// writeOffline lists the OFFLINE workers of every queue whose workers could be read.
func writeOffline(w io.Writer, rep report) error {
	n := 0
	for _, q := range rep.Queues {
		n += len(q.OfflineWorkers)
	}
	if n == 0 {
		_, err := io.WriteString(w, "offline workers: none\n")
		return err
	}
	if _, err := io.WriteString(w, "offline workers (kept for the registry's retention):\n"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSERVER\tHOST\tPID\tVERSION\tDEPARTURE\tSINCE")
	for _, q := range rep.Queues {
		for _, x := range q.OfflineWorkers {
			how := x.Departure
			if x.EvictedBy != 0 {
				how += " by token " + strconv.FormatInt(x.EvictedBy, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", q.Queue, x.ServerID, orDash(x.Hostname), x.PID, orDash(x.Version),
				how, sinceText(x.DepartedAt, rep.CheckedAt))
		}
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func leaderCells(l leaderCell) (leader, token string) {
	switch {
	case !l.Known:
		return unknown, unknown
	case l.ServerID == "":
		return "-", "-"
	}
	return l.ServerID, strconv.FormatInt(l.Token, 10)
}

func runCells(r runCell, now time.Time) (run, since string) {
	switch {
	case !r.Known:
		return unknown, unknown
	case r.RunID == "":
		return "-", "-"
	}
	return r.RunID + " " + r.Status, sinceText(r.StartTime, now)
}

// sinceText is a time and how long ago it was, or "-" for the zero time.
func sinceText(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339) + " (" + formatAge(now.Sub(t)) + ")"
}

// runTokenText is the run's memo token, flagged "!=" when the run is running and its token is not
// the leader's: a run nobody holds the term for.
func runTokenText(q queueStatus) string {
	r := q.Dispatcher
	switch {
	case !r.Known:
		return unknown
	case r.RunID == "" || r.OwnerToken == 0:
		return "-"
	case r.Status == runningStatus && q.Leader.Known && r.OwnerToken != q.Leader.Token:
		return fmt.Sprintf("%d != leader", r.OwnerToken)
	}
	return strconv.FormatInt(r.OwnerToken, 10)
}

// runningStatus is statusName of a running run.
const runningStatus = "RUNNING"

func heartbeatCellText(h heartbeatCell) string {
	switch {
	case !h.Known:
		return unknown
	case h.ServerID == "":
		return "-"
	}
	return formatAge(time.Duration(h.Age))
}

func workersCellText(c workersCell) string {
	if !c.Known {
		return unknown
	}
	return fmt.Sprintf("%d/%d", c.Online, c.Draining)
}

func evictedCellText(c workersCell) string {
	if !c.Known {
		return unknown
	}
	return strconv.Itoa(c.Evicted)
}

func loadCellText(c workersCell) string {
	if !c.Known {
		return unknown
	}
	return fmt.Sprintf("%d/%d/%d", c.Active, c.Completed, c.Failed)
}

// formatAge rounds d for a person: tenths of a second under 10s, seconds under an hour, minutes beyond.
func formatAge(d time.Duration) string {
	switch {
	case d < 10*time.Second && d > -10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}
