package etcdmodel

import (
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	errClosed   = status.Error(codes.Unavailable, "etcdmodel: model closed")
	errNoLeader = rpctypes.ErrGRPCNoLeader
)

// writer collects the changes of one revision (a put, a delete, a txn, a lease's expiry). It changes
// the key space at once, so later reads of the same txn see them; commit makes the revision.
type writer struct {
	m      *Model
	rev    int64
	events []*mvccpb.Event
}

func (m *Model) newWriter() *writer { return &writer{m: m, rev: m.rev + 1} }

func (w *writer) put(r *pb.PutRequest) (*pb.PutResponse, error) {
	if r.IgnoreValue || r.IgnoreLease {
		return nil, unsupported("PutRequest.IgnoreValue/IgnoreLease")
	}
	if r.Lease != 0 {
		if _, ok := w.m.leases[r.Lease]; !ok {
			return nil, rpctypes.ErrGRPCLeaseNotFound
		}
	}
	key := string(r.Key)
	prev := w.m.kvs[key]
	kv := &mvccpb.KeyValue{Key: r.Key, Value: r.Value, Lease: r.Lease, ModRevision: w.rev, CreateRevision: w.rev, Version: 1}
	if prev != nil {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
	}
	w.m.kvs[key] = kv
	w.m.kvsGen++
	w.events = append(w.events, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev})
	resp := &pb.PutResponse{}
	if r.PrevKv && prev != nil {
		c := *prev
		resp.PrevKv = &c
	}
	return resp, nil
}

func (w *writer) deleteRange(r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp := &pb.DeleteRangeResponse{}
	for _, k := range keysIn(w.m.kvs, r.Key, r.RangeEnd) {
		prev := w.m.kvs[k]
		w.deleteKey(k)
		resp.Deleted++
		if r.PrevKv {
			c := *prev
			resp.PrevKvs = append(resp.PrevKvs, &c)
		}
	}
	return resp, nil
}

func (w *writer) deleteKey(k string) {
	prev := w.m.kvs[k]
	delete(w.m.kvs, k)
	w.m.kvsGen++
	tomb := &mvccpb.KeyValue{Key: []byte(k), ModRevision: w.rev}
	w.events = append(w.events, &mvccpb.Event{Type: mvccpb.DELETE, Kv: tomb, PrevKv: prev})
}

// commit makes the writer's changes one revision (none if nothing changed) and tells the watches.
func (m *Model) commit(w *writer) {
	if len(w.events) == 0 {
		return
	}
	if w.rev != m.rev+1 {
		panic(fmt.Sprintf("etcdmodel: writer for revision %d committed at %d", w.rev, m.rev))
	}
	m.rev = w.rev
	m.history = append(m.history, revision{rev: w.rev, events: w.events})
	if m.opts.OnCommit != nil {
		m.opts.OnCommit(w.rev, w.events, View{m})
	}
	for ws := range m.watches {
		ws.notifyLocked()
	}
}
