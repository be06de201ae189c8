package etcdmodel

import (
	"bytes"
	"context"
	"sort"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// kvClient is the model seen through pb.KVClient by one named client.
type kvClient struct {
	m    *Model
	name string
}

var _ pb.KVClient = (*kvClient)(nil)

// call runs apply under the model's lock once a leader exists, through the transport. A transport
// may run deliver after Call returned (a request whose caller gave up still reaches etcd), so the
// answer crosses over under a mutex and only an answered call reads it.
func call[R any](ctx context.Context, m *Model, client, method string, req any, apply func() (R, error)) (R, error) {
	var (
		mu   sync.Mutex
		resp R
	)
	err := m.opts.Transport.Call(ctx, client, method, req, func() error {
		if err := m.waitLeader(); err != nil {
			return err
		}
		defer m.mu.Unlock()
		r, err := apply()
		if err == nil {
			mu.Lock()
			resp = r
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		var zero R
		return zero, err
	}
	mu.Lock()
	defer mu.Unlock()
	return resp, nil
}

func (c *kvClient) Range(ctx context.Context, r *pb.RangeRequest, _ ...grpc.CallOption) (*pb.RangeResponse, error) {
	return call(ctx, c.m, c.name, "Range", r, func() (*pb.RangeResponse, error) { return c.m.rangeLocked(r) })
}

func (c *kvClient) Put(ctx context.Context, r *pb.PutRequest, _ ...grpc.CallOption) (*pb.PutResponse, error) {
	return call(ctx, c.m, c.name, "Put", r, func() (*pb.PutResponse, error) {
		w := c.m.newWriter()
		resp, err := w.put(r)
		if err != nil {
			return nil, err
		}
		c.m.commit(w)
		resp.Header = c.m.header()
		return resp, nil
	})
}

func (c *kvClient) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest, _ ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	return call(ctx, c.m, c.name, "DeleteRange", r, func() (*pb.DeleteRangeResponse, error) {
		w := c.m.newWriter()
		resp, err := w.deleteRange(r)
		if err != nil {
			return nil, err
		}
		c.m.commit(w)
		resp.Header = c.m.header()
		return resp, nil
	})
}

func (c *kvClient) Compact(ctx context.Context, r *pb.CompactionRequest, _ ...grpc.CallOption) (*pb.CompactionResponse, error) {
	return call(ctx, c.m, c.name, "Compact", r, func() (*pb.CompactionResponse, error) {
		if err := c.m.compactLocked(r.Revision); err != nil {
			return nil, err
		}
		return &pb.CompactionResponse{Header: c.m.header()}, nil
	})
}

// inRange reports whether key falls in [start, end) with etcd's conventions: an empty end is the one
// key start, "\x00" is every key from start on.
func inRange(key, start, end []byte) bool {
	switch {
	case len(end) == 0:
		return bytes.Equal(key, start)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(key, start) >= 0
	default:
		return bytes.Compare(key, start) >= 0 && bytes.Compare(key, end) < 0
	}
}

// keysIn returns the keys of kvs in the range, sorted.
func keysIn(kvs map[string]*mvccpb.KeyValue, start, end []byte) []string {
	var keys []string
	for k := range kvs {
		if inRange([]byte(k), start, end) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// view is the key space at rev (0 = now): the current map, or a copy with later revisions undone.
func (m *Model) view(rev int64) (map[string]*mvccpb.KeyValue, error) {
	if rev <= 0 || rev == m.rev {
		return m.kvs, nil
	}
	if rev > m.rev {
		return nil, rpctypes.ErrGRPCFutureRev
	}
	if rev < m.compactRev {
		return nil, rpctypes.ErrGRPCCompacted
	}
	kvs := make(map[string]*mvccpb.KeyValue, len(m.kvs))
	for k, v := range m.kvs {
		kvs[k] = v
	}
	for i := len(m.history) - 1; i >= 0 && m.history[i].rev > rev; i-- {
		evs := m.history[i].events
		for j := len(evs) - 1; j >= 0; j-- {
			if prev := evs[j].PrevKv; prev != nil {
				kvs[string(prev.Key)] = prev
			} else {
				delete(kvs, string(evs[j].Kv.Key))
			}
		}
	}
	return kvs, nil
}

func (m *Model) rangeLocked(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if r.MinModRevision != 0 || r.MaxModRevision != 0 {
		return nil, unsupported("RangeRequest.MinModRevision/MaxModRevision")
	}
	kvs, err := m.view(r.Revision)
	if err != nil {
		return nil, err
	}
	keys := keysIn(kvs, r.Key, r.RangeEnd)
	resp := &pb.RangeResponse{Header: m.header(), Count: int64(len(keys))}
	if r.CountOnly {
		return resp, nil
	}
	var out []*mvccpb.KeyValue
	for _, k := range keys {
		kv := kvs[k]
		if (r.MinCreateRevision != 0 && kv.CreateRevision < r.MinCreateRevision) ||
			(r.MaxCreateRevision != 0 && kv.CreateRevision > r.MaxCreateRevision) {
			continue
		}
		out = append(out, kv)
	}
	sortKVs(out, r.SortOrder, r.SortTarget)
	if r.Limit > 0 && int64(len(out)) > r.Limit {
		out, resp.More = out[:r.Limit], true
	}
	for _, kv := range out {
		c := *kv
		if r.KeysOnly {
			c.Value = nil
		}
		resp.Kvs = append(resp.Kvs, &c)
	}
	return resp, nil
}

func sortKVs(kvs []*mvccpb.KeyValue, order pb.RangeRequest_SortOrder, target pb.RangeRequest_SortTarget) {
	if order == pb.RangeRequest_NONE {
		if target == pb.RangeRequest_KEY {
			return
		}
		order = pb.RangeRequest_ASCEND
	}
	field := func(kv *mvccpb.KeyValue) int64 {
		switch target {
		case pb.RangeRequest_VERSION:
			return kv.Version
		case pb.RangeRequest_CREATE:
			return kv.CreateRevision
		case pb.RangeRequest_MOD:
			return kv.ModRevision
		}
		return 0
	}
	less := func(a, b *mvccpb.KeyValue) bool {
		switch target {
		case pb.RangeRequest_KEY:
			return bytes.Compare(a.Key, b.Key) < 0
		case pb.RangeRequest_VALUE:
			return bytes.Compare(a.Value, b.Value) < 0
		}
		return field(a) < field(b)
	}
	sort.SliceStable(kvs, func(i, j int) bool {
		if order == pb.RangeRequest_DESCEND {
			return less(kvs[j], kvs[i])
		}
		return less(kvs[i], kvs[j])
	})
}

func (m *Model) compactLocked(rev int64) error {
	if rev <= m.compactRev {
		return rpctypes.ErrGRPCCompacted
	}
	if rev > m.rev {
		return rpctypes.ErrGRPCFutureRev
	}
	m.compactRev = rev
	i := 0
	for i < len(m.history) && m.history[i].rev < rev {
		i++
	}
	m.history = append([]revision(nil), m.history[i:]...)
	return nil
}
