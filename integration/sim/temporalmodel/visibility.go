package temporalmodel

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// listQuery is the visibility query of the takeover and the carry-over: every run of one workflow ID.
var listQuery = regexp.MustCompile(`^WorkflowId = ("(?:[^"\\]|\\.)*")$`)

// sweepQuery is the reconciler's: the runs of every workflow ID with a prefix (a project's
// dispatchers), optionally only those visibility shows as running (its sweep; its probe lists all).
var sweepQuery = regexp.MustCompile(`^WorkflowId STARTS_WITH ("(?:[^"\\]|\\.)*")( AND ExecutionStatus = 'Running')?$`)

// List answers ListWorkflowExecutions for the query `WorkflowId = "<id>"`, as the SQL visibility
// store does (Temporal v1.32, executions_visibility): rows in the order coalesce(close_time, max)
// DESC, start_time DESC, run_id, so a row whose close is not indexed yet comes first, as RUNNING;
// PageSize rows a page (default 1000), NextPageToken the offset of the next page.
//
// Visibility is eventually consistent: with Options.VisibilityLag a run's row is missing until its
// lag after the start has passed, and its close shows only its lag after the close (RUNNING until
// then, with no close time). A row carries no FirstRunId, as the server's does not. Other queries
// are InvalidArgument.
func (m *Model) List(req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	rows, err := m.query(req.GetQuery())
	if err != nil {
		return nil, err
	}
	offset := 0
	if t := req.GetNextPageToken(); len(t) == 8 {
		offset = int(binary.BigEndian.Uint64(t))
	}
	size := int(req.GetPageSize())
	if size <= 0 {
		size = 1000
	}
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	end := min(offset+size, len(rows))
	if offset < end {
		resp.Executions = rows[offset:end]
	}
	if end < len(rows) {
		resp.NextPageToken = binary.BigEndian.AppendUint64(nil, uint64(end))
	}
	return resp, nil
}

// query is what visibility shows now for one of the modelled queries, in the store's order. The
// query of the reconciler's sweep (WorkflowId STARTS_WITH, ExecutionStatus = 'Running') is not
// compared with the server's by the conformance test: its rows are those of the IDs with the prefix,
// in the same order, and the status it filters on is the one visibility shows (a closed run whose
// close is not indexed yet is still listed as running).
func (m *Model) query(q string) ([]*workflowpb.WorkflowExecutionInfo, error) {
	if sub := listQuery.FindStringSubmatch(q); sub != nil {
		id, err := strconv.Unquote(sub[1])
		if err != nil {
			return nil, serviceerror.NewInvalidArgument(fmt.Sprintf("temporalmodel: query %q: %v", q, err))
		}
		return m.rows(func(wid string) bool { return wid == id }, false), nil
	}
	sub := sweepQuery.FindStringSubmatch(q)
	if sub == nil {
		return nil, serviceerror.NewInvalidArgument(fmt.Sprintf("temporalmodel: only the queries WorkflowId = \"<id>\" and "+
			"WorkflowId STARTS_WITH \"<prefix>\" [AND ExecutionStatus = 'Running'] are modelled, got %q", q))
	}
	prefix, err := strconv.Unquote(sub[1])
	if err != nil {
		return nil, serviceerror.NewInvalidArgument(fmt.Sprintf("temporalmodel: query %q: %v", q, err))
	}
	return m.rows(func(wid string) bool { return strings.HasPrefix(wid, prefix) }, sub[2] != ""), nil
}

// rows is what visibility shows now of the runs of the IDs match accepts (only those shown as
// running, if running), in the store's order.
func (m *Model) rows(match func(id string) bool, running bool) []*workflowpb.WorkflowExecutionInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opts.Clock.Now()
	var all []*Run
	for _, id := range slices.Sorted(maps.Keys(m.runs)) {
		if match(id) {
			all = append(all, m.runs[id]...)
		}
	}
	var rows []*workflowpb.WorkflowExecutionInfo
	for _, r := range all {
		if now.Before(r.listedAt) {
			continue
		}
		info := &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: r.WorkflowID, RunId: r.RunID},
			Type:      &commonpb.WorkflowType{Name: r.WorkflowType},
			StartTime: timestamppb.New(r.StartTime),
			Status:    enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			Memo:      r.Memo,
			TaskQueue: r.TaskQueue,
			// No FirstRunId: the server's listing leaves it empty (the conformance test found it).
		}
		if !r.Open() && !now.Before(r.closeListedAt) {
			info.Status, info.CloseTime = r.Status, timestamppb.New(r.CloseTime)
		}
		if running && info.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			continue
		}
		rows = append(rows, info)
	}
	closeKey := func(i *workflowpb.WorkflowExecutionInfo) time.Time {
		if i.GetCloseTime() == nil {
			return time.Unix(1<<40, 0) // '9999-12-31'
		}
		return i.GetCloseTime().AsTime()
	}
	slices.SortStableFunc(rows, func(a, b *workflowpb.WorkflowExecutionInfo) int {
		if c := closeKey(b).Compare(closeKey(a)); c != 0 {
			return c
		}
		if c := b.GetStartTime().AsTime().Compare(a.GetStartTime().AsTime()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetExecution().GetRunId(), b.GetExecution().GetRunId())
	})
	return rows
}

// Lagging reports whether visibility shows id's runs other than they are now: a row missing, or a
// closed run still RUNNING.
func (m *Model) Lagging(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opts.Clock.Now()
	for _, r := range m.runs[id] {
		if now.Before(r.listedAt) || !r.Open() && now.Before(r.closeListedAt) {
			return true
		}
	}
	return false
}
