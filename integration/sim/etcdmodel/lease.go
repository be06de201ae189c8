package etcdmodel

import (
	"context"
	"sort"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

type lease struct {
	id     int64
	ttl    int64 // granted, seconds
	expiry time.Time
}

// leaseClient is the model seen through pb.LeaseClient by one named client.
type leaseClient struct {
	m    *Model
	name string
}

var _ pb.LeaseClient = (*leaseClient)(nil)

func (c *leaseClient) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest, _ ...grpc.CallOption) (*pb.LeaseGrantResponse, error) {
	return call(ctx, c.m, c.name, "LeaseGrant", r, func() (*pb.LeaseGrantResponse, error) {
		m := c.m
		if r.ID != 0 {
			return nil, unsupported("LeaseGrantRequest.ID (a client-chosen lease ID)")
		}
		ttl := max(r.TTL, int64((m.opts.MinTTL+time.Second-1)/time.Second))
		id := m.newLeaseID()
		m.leases[id] = &lease{id: id, ttl: ttl, expiry: m.clk.Now().Add(time.Duration(ttl) * time.Second)}
		m.scheduleExpiryLocked()
		return &pb.LeaseGrantResponse{Header: m.header(), ID: id, TTL: ttl}, nil
	})
}

func (m *Model) newLeaseID() int64 {
	for {
		id := int64(m.opts.Rand.Uint64() >> 1)
		if _, taken := m.leases[id]; id != 0 && !taken {
			return id
		}
	}
}

func (c *leaseClient) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest, _ ...grpc.CallOption) (*pb.LeaseRevokeResponse, error) {
	return call(ctx, c.m, c.name, "LeaseRevoke", r, func() (*pb.LeaseRevokeResponse, error) {
		if _, ok := c.m.leases[r.ID]; !ok {
			return nil, rpctypes.ErrGRPCLeaseNotFound
		}
		c.m.revokeLocked(r.ID)
		return &pb.LeaseRevokeResponse{Header: c.m.header()}, nil
	})
}

// revokeLocked removes a lease and deletes its keys in one revision.
func (m *Model) revokeLocked(id int64) {
	delete(m.leases, id)
	w := m.newWriter()
	for _, k := range keysIn(m.kvs, []byte{0}, []byte{0}) {
		if m.kvs[k].Lease == id {
			w.deleteKey(k)
		}
	}
	m.commit(w)
	m.scheduleExpiryLocked()
}

func (c *leaseClient) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest, _ ...grpc.CallOption) (*pb.LeaseTimeToLiveResponse, error) {
	return call(ctx, c.m, c.name, "LeaseTimeToLive", r, func() (*pb.LeaseTimeToLiveResponse, error) {
		m := c.m
		l, ok := m.leases[r.ID]
		if !ok {
			return &pb.LeaseTimeToLiveResponse{Header: m.header(), ID: r.ID, TTL: -1}, nil
		}
		resp := &pb.LeaseTimeToLiveResponse{Header: m.header(), ID: r.ID, GrantedTTL: l.ttl,
			TTL: int64(l.expiry.Sub(m.clk.Now()).Seconds())}
		if r.Keys {
			for _, k := range keysIn(m.kvs, []byte{0}, []byte{0}) {
				if m.kvs[k].Lease == r.ID {
					resp.Keys = append(resp.Keys, []byte(k))
				}
			}
		}
		return resp, nil
	})
}

func (c *leaseClient) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest, _ ...grpc.CallOption) (*pb.LeaseLeasesResponse, error) {
	return call(ctx, c.m, c.name, "LeaseLeases", nil, func() (*pb.LeaseLeasesResponse, error) {
		resp := &pb.LeaseLeasesResponse{Header: c.m.header()}
		for id := range c.m.leases {
			resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
		}
		sort.Slice(resp.Leases, func(i, j int) bool { return resp.Leases[i].ID < resp.Leases[j].ID })
		return resp, nil
	})
}

func (c *leaseClient) LeaseKeepAlive(ctx context.Context, _ ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	return &keepAliveStream{c: c, ctx: ctx, recvc: make(chan any, 16)}, nil
}

// keepAliveStream answers each keepalive request on the stream in order.
type keepAliveStream struct {
	c     *leaseClient
	ctx   context.Context
	recvc chan any
}

func (s *keepAliveStream) Send(r *pb.LeaseKeepAliveRequest) error {
	var (
		mu   sync.Mutex
		resp *pb.LeaseKeepAliveResponse
	)
	err := s.c.m.opts.Transport.Call(s.ctx, s.c.name, "LeaseKeepAlive", r, func() error {
		if err := s.c.m.waitLeader(); err != nil {
			return err
		}
		defer s.c.m.mu.Unlock()
		a := s.c.m.renewLocked(r.ID)
		mu.Lock()
		resp = a
		mu.Unlock()
		return nil
	})
	var msg any = err
	if err == nil {
		mu.Lock()
		msg = resp
		mu.Unlock()
	}
	select {
	case s.recvc <- msg:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (m *Model) renewLocked(id int64) *pb.LeaseKeepAliveResponse {
	l, ok := m.leases[id]
	if !ok {
		return &pb.LeaseKeepAliveResponse{Header: m.header(), ID: id, TTL: 0}
	}
	l.expiry = m.clk.Now().Add(time.Duration(l.ttl) * time.Second)
	m.scheduleExpiryLocked()
	return &pb.LeaseKeepAliveResponse{Header: m.header(), ID: id, TTL: l.ttl}
}

func (s *keepAliveStream) Recv() (*pb.LeaseKeepAliveResponse, error) {
	select {
	case msg := <-s.recvc:
		if err, ok := msg.(error); ok {
			return nil, err
		}
		return msg.(*pb.LeaseKeepAliveResponse), nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func (s *keepAliveStream) Header() (metadata.MD, error) { return nil, nil }
func (s *keepAliveStream) Trailer() metadata.MD         { return nil }
func (s *keepAliveStream) CloseSend() error             { return nil }
func (s *keepAliveStream) Context() context.Context     { return s.ctx }
func (s *keepAliveStream) SendMsg(any) error            { return unsupported("LeaseKeepAlive SendMsg") }
func (s *keepAliveStream) RecvMsg(any) error            { return unsupported("LeaseKeepAlive RecvMsg") }

// scheduleExpiryLocked arms the timer for the earliest lease expiry (none while leaderless: only a
// leader's lessor expires leases).
func (m *Model) scheduleExpiryLocked() {
	if m.expiry != nil {
		m.expiry.Stop()
		m.expiry = nil
	}
	if m.closed || m.noLeader || m.opts.Bug == LeaseNeverExpires || len(m.leases) == 0 {
		return
	}
	var first time.Time
	for _, l := range m.leases {
		if first.IsZero() || l.expiry.Before(first) {
			first = l.expiry
		}
	}
	m.expiry = m.clk.AfterFunc(max(0, first.Sub(m.clk.Now())), m.expire)
}

// expire revokes every lease past its expiry, oldest first, one revision each.
func (m *Model) expire() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.noLeader {
		return
	}
	now := m.clk.Now()
	var due []*lease
	for _, l := range m.leases {
		if !l.expiry.After(now) {
			due = append(due, l)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].expiry.Equal(due[j].expiry) {
			return due[i].expiry.Before(due[j].expiry)
		}
		return due[i].id < due[j].id
	})
	for _, l := range due {
		m.revokeLocked(l.id)
	}
	m.scheduleExpiryLocked()
}
