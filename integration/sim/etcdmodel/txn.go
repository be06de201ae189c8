package etcdmodel

import (
	"bytes"
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
)

func (c *kvClient) Txn(ctx context.Context, r *pb.TxnRequest, _ ...grpc.CallOption) (*pb.TxnResponse, error) {
	return call(ctx, c.m, c.name, "Txn", r, func() (*pb.TxnResponse, error) {
		w := c.m.newWriter()
		snapshot := len(w.events)
		resp, err := w.txn(r)
		if err != nil {
			w.rollback(snapshot)
			return nil, err
		}
		c.m.commit(w)
		resp.Header = c.m.header()
		return resp, nil
	})
}

// rollback undoes the writer's changes after index n (a txn that failed half-way changes nothing).
func (w *writer) rollback(n int) {
	w.m.kvsGen++
	for i := len(w.events) - 1; i >= n; i-- {
		ev := w.events[i]
		if ev.PrevKv != nil {
			w.m.kvs[string(ev.PrevKv.Key)] = ev.PrevKv
		} else {
			delete(w.m.kvs, string(ev.Kv.Key))
		}
	}
	w.events = w.events[:n]
}

func (w *writer) txn(r *pb.TxnRequest) (*pb.TxnResponse, error) {
	ok := true
	for _, c := range r.Compare {
		if !w.m.compare(c) {
			ok = false
			break
		}
	}
	ops := r.Success
	if !ok {
		ops = r.Failure
	}
	resp := &pb.TxnResponse{Succeeded: ok}
	for _, op := range ops {
		ro, err := w.op(op)
		if err != nil {
			return nil, err
		}
		resp.Responses = append(resp.Responses, ro)
	}
	return resp, nil
}

func (w *writer) op(op *pb.RequestOp) (*pb.ResponseOp, error) {
	switch o := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		rr, err := w.m.rangeLocked(o.RequestRange)
		if err != nil {
			return nil, err
		}
		rr.Header = nil
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}}, nil
	case *pb.RequestOp_RequestPut:
		pr, err := w.put(o.RequestPut)
		if err != nil {
			return nil, err
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: pr}}, nil
	case *pb.RequestOp_RequestDeleteRange:
		dr, err := w.deleteRange(o.RequestDeleteRange)
		if err != nil {
			return nil, err
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}}, nil
	case *pb.RequestOp_RequestTxn:
		tr, err := w.txn(o.RequestTxn)
		if err != nil {
			return nil, err
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}}, nil
	}
	return nil, unsupported("RequestOp %T", op.Request)
}

// compare evaluates one compare as etcd's applyCompare does: every key of its range must pass; a
// missing single key compares as zero values, except that a VALUE compare on it fails.
func (m *Model) compare(c *pb.Compare) bool {
	var kvs []*mvccpb.KeyValue
	if len(c.RangeEnd) == 0 {
		if kv := m.kvs[string(c.Key)]; kv != nil {
			kvs = append(kvs, kv)
		}
	} else {
		for k, kv := range m.kvs { // every key of the range must pass: no order needed
			if inRange([]byte(k), c.Key, c.RangeEnd) {
				kvs = append(kvs, kv)
			}
		}
	}
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false
		}
		return compareKV(c, &mvccpb.KeyValue{})
	}
	for _, kv := range kvs {
		if !compareKV(c, kv) {
			return false
		}
	}
	return true
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var r int
	switch c.Target {
	case pb.Compare_VALUE:
		r = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_VERSION:
		r = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_CREATE:
		r = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		r = cmpInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_LEASE:
		r = cmpInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return r == 0
	case pb.Compare_NOT_EQUAL:
		return r != 0
	case pb.Compare_GREATER:
		return r > 0
	case pb.Compare_LESS:
		return r < 0
	}
	return false
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
