package balance

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Keys is the layout of package balance's keys in etcd, defined here once; tools read them through it.
// They live beside the project's election keys, never under them, so that no queue name can collide
// with them:
//
//	<ElectionPrefix>-balance/<project>/m/<serverID>  a worker's member record (JSON), on its own lease
//	<ElectionPrefix>-balance/<project>/h/<queue>     a resigning leader's hand-off hint (JSON: to,
//	                                                 from, reason), on its lease
//	<ElectionPrefix>-balance/<project>/t/<queue>     an operator's transfer request (JSON: to), on a
//	                                                 lease of its own: the leader hands the queue over
type Keys struct {
	// ElectionPrefix is the queue elections' prefix (election.Config.Prefix).
	ElectionPrefix string
}

// Project returns the range every balance key of project starts with.
func (k Keys) Project(project string) string { return k.ElectionPrefix + "-balance/" + project + "/" }

// Member returns the key of serverID's member record.
func (k Keys) Member(project, serverID string) string { return k.Members(project) + serverID }

// Members returns the range of project's member records.
func (k Keys) Members(project string) string { return k.Project(project) + memberDir + "/" }

// Hint returns the key of queue's hand-off hint.
func (k Keys) Hint(project, queue string) string { return k.Hints(project) + queue }

// Hints returns the range of project's hand-off hints: a hint lives from a hand-off's decision until
// the term it hands over has ended.
func (k Keys) Hints(project string) string { return k.Project(project) + hintDir + "/" }

// Transfer returns the key of an operator's request to move queue's leadership (RequestTransfer).
func (k Keys) Transfer(project, queue string) string {
	return k.Project(project) + transferDir + "/" + queue
}

// The directories under Project.
const (
	memberDir   = "m"
	hintDir     = "h"
	transferDir = "t"
)

// TransferRequest is an operator's request to move a queue's leadership gracefully to the worker To.
// The queue's leader hands it over through the designated-successor path (fenced as every handover
// is), then deletes the request; the worker To, once it leads, ignores it; a request nobody acts on
// goes with its lease.
type TransferRequest struct {
	To string `json:"to"`
}

// RequestTransfer writes req for queue, on a lease of ttl (at least a second), and returns that
// lease, which the caller may revoke to withdraw the request. The caller checks that req.To serves
// the queue: a worker named that does not stand for it holds the others off for the grace window.
func RequestTransfer(ctx context.Context, client *clientv3.Client, keys Keys, project, queue string, req TransferRequest, ttl time.Duration) (clientv3.LeaseID, error) {
	if req.To == "" {
		return 0, fmt.Errorf("balance: transfer request for %s: To must name the worker", queue)
	}
	lease, err := client.Grant(ctx, max(int64(ttl/time.Second), 1))
	if err != nil {
		return 0, fmt.Errorf("balance: transfer request lease: %w", err)
	}
	b, _ := json.Marshal(req)
	if _, err := client.Put(ctx, keys.Transfer(project, queue), string(b), clientv3.WithLease(lease.ID)); err != nil {
		return 0, fmt.Errorf("balance: transfer request for %s: %w", queue, err)
	}
	return lease.ID, nil
}
