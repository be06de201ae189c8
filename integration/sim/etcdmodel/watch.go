package etcdmodel

import (
	"cmp"
	"context"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// watchClient is the model seen through pb.WatchClient by one named client.
type watchClient struct {
	m    *Model
	name string
}

var _ pb.WatchClient = (*watchClient)(nil)

// watcher is one watch of a stream: a range, the next revision it has to deliver, filters.
type watcher struct {
	id              int64
	key, end        []byte
	next            int64
	noPut, noDelete bool
	prevKV          bool
}

// watchStream is the server side of one gRPC watch stream. Its messages queue in out (under the
// model's lock) and one goroutine, owned by the stream and ended with its context, passes them through
// the transport in order, as one TCP connection would.
type watchStream struct {
	m             *Model
	name          string
	ctx           context.Context
	cancel        context.CancelFunc
	requireLeader bool
	watchers      map[int64]*watcher
	nextID        int64
	ids           []int64 // notifyLocked's list of watcher IDs, reused from commit to commit
	out           []*pb.WatchResponse
	wake          chan struct{}
	in            []*pb.WatchRequest // sent by the client, not yet through the transport
	inWake        chan struct{}
	recvc         chan *pb.WatchResponse
	done          chan struct{}
	closeErr      error
}

func (c *watchClient) Watch(ctx context.Context, _ ...grpc.CallOption) (pb.Watch_WatchClient, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	requireLeader := len(md.Get(rpctypes.MetadataRequireLeaderKey)) > 0
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	if requireLeader && m.noLeader {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	var label string
	if v := md.Get(watchLabelKey); len(v) > 0 {
		label = v[0]
	}
	sctx, cancel := context.WithCancel(context.WithValue(ctx, watchLabelCtx{}, label))
	ws := &watchStream{m: m, name: c.name, ctx: sctx, cancel: cancel, requireLeader: requireLeader,
		watchers: map[int64]*watcher{}, wake: make(chan struct{}, 1), inWake: make(chan struct{}, 1), recvc: make(chan *pb.WatchResponse),
		done: make(chan struct{})}
	m.watches[ws] = struct{}{}
	go ws.sendLoop()
	go ws.recvLoop()
	return ws, nil
}

// sendLoop delivers queued responses in order until the stream ends.
func (ws *watchStream) sendLoop() {
	defer func() {
		ws.m.mu.Lock()
		ws.closeLocked(ws.ctx.Err())
		ws.m.mu.Unlock()
	}()
	for {
		ws.m.mu.Lock()
		var next *pb.WatchResponse
		if len(ws.out) > 0 && ws.closeErr == nil {
			next, ws.out = ws.out[0], ws.out[1:]
		}
		ws.m.mu.Unlock()
		if next == nil {
			select {
			case <-ws.wake:
				continue
			case <-ws.done:
				return
			case <-ws.ctx.Done():
				return
			}
		}
		err := ws.m.opts.Transport.Call(ws.ctx, ws.name, "WatchResponse", next, func() error {
			select {
			case ws.recvc <- next:
				return nil
			case <-ws.done:
				return errClosed
			case <-ws.ctx.Done():
				return ws.ctx.Err()
			}
		})
		if err != nil && ws.ctx.Err() != nil {
			return
		}
	}
}

func (ws *watchStream) enqueueLocked(r *pb.WatchResponse) {
	ws.out = append(ws.out, r)
	select {
	case ws.wake <- struct{}{}:
	default:
	}
}

// closeLocked ends the stream: Recv returns err from now on.
func (ws *watchStream) closeLocked(err error) {
	if ws.closeErr != nil {
		return
	}
	if err == nil {
		err = errClosed
	}
	ws.closeErr = err
	close(ws.done)
	delete(ws.m.watches, ws)
	ws.cancel()
}

// Send queues a request, as a gRPC stream buffers it: a slow or cut network does not block the
// client's watch loop (which must still see its context end).
func (ws *watchStream) Send(r *pb.WatchRequest) error {
	ws.m.mu.Lock()
	defer ws.m.mu.Unlock()
	if ws.closeErr != nil {
		return ws.closeErr
	}
	ws.in = append(ws.in, r)
	select {
	case ws.inWake <- struct{}{}:
	default:
	}
	return nil
}

// recvLoop passes the client's requests through the transport in order until the stream ends.
func (ws *watchStream) recvLoop() {
	for {
		ws.m.mu.Lock()
		var next *pb.WatchRequest
		if len(ws.in) > 0 {
			next, ws.in = ws.in[0], ws.in[1:]
		}
		ws.m.mu.Unlock()
		if next == nil {
			select {
			case <-ws.inWake:
				continue
			case <-ws.done:
				return
			}
		}
		if err := ws.receive(next); err != nil {
			ws.m.mu.Lock()
			ws.closeLocked(err)
			ws.m.mu.Unlock()
			return
		}
	}
}

func (ws *watchStream) receive(r *pb.WatchRequest) error {
	return ws.m.opts.Transport.Call(ws.ctx, ws.name, "WatchRequest", r, func() error {
		ws.m.mu.Lock()
		defer ws.m.mu.Unlock()
		if ws.closeErr != nil {
			return ws.closeErr
		}
		switch req := r.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			return ws.createLocked(req.CreateRequest)
		case *pb.WatchRequest_CancelRequest:
			delete(ws.watchers, req.CancelRequest.WatchId)
			ws.enqueueLocked(&pb.WatchResponse{Header: ws.m.header(), WatchId: req.CancelRequest.WatchId, Canceled: true})
			return nil
		case *pb.WatchRequest_ProgressRequest:
			ws.enqueueLocked(&pb.WatchResponse{Header: ws.m.header(), WatchId: -1})
			return nil
		}
		return unsupported("WatchRequest %T", r.RequestUnion)
	})
}

func (ws *watchStream) createLocked(r *pb.WatchCreateRequest) error {
	if r.Fragment {
		return unsupported("WatchCreateRequest.Fragment")
	}
	if r.WatchId != 0 {
		return unsupported("WatchCreateRequest.WatchId (a client-chosen watch ID)")
	}
	m := ws.m
	w := &watcher{id: ws.nextID, key: r.Key, end: r.RangeEnd, next: r.StartRevision, prevKV: r.PrevKv}
	ws.nextID++
	for _, f := range r.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	if w.next <= 0 {
		w.next = m.rev + 1
	}
	ws.enqueueLocked(&pb.WatchResponse{Header: m.header(), WatchId: w.id, Created: true})
	if w.next < m.compactRev {
		m.compacted++
		ws.enqueueLocked(&pb.WatchResponse{Header: m.header(), WatchId: w.id, CompactRevision: m.compactRev, Canceled: true})
		return nil
	}
	ws.watchers[w.id] = w
	ws.notifyLocked()
	return nil
}

// notifyLocked queues, for every watcher in the order of its ID, one response per revision it has
// not seen yet. It runs at every commit, so it starts each watcher at its first unseen revision
// (the history is in revision order) instead of rescanning the history.
func (ws *watchStream) notifyLocked() {
	m := ws.m
	ws.ids = ws.ids[:0]
	for id := range ws.watchers {
		ws.ids = append(ws.ids, id)
	}
	slices.Sort(ws.ids)
	for _, id := range ws.ids {
		w := ws.watchers[id]
		from, _ := slices.BinarySearchFunc(m.history, w.next, func(rv revision, next int64) int { return cmp.Compare(rv.rev, next) })
		for _, rv := range m.history[from:] {
			var evs []*mvccpb.Event
			for _, ev := range rv.events {
				if !inRange(ev.Kv.Key, w.key, w.end) || (ev.Type == mvccpb.PUT && w.noPut) || (ev.Type == mvccpb.DELETE && w.noDelete) {
					continue
				}
				c := &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
				if w.prevKV {
					c.PrevKv = ev.PrevKv
				}
				evs = append(evs, c)
			}
			if len(evs) > 0 {
				h := m.header()
				h.Revision = rv.rev
				ws.enqueueLocked(&pb.WatchResponse{Header: h, WatchId: w.id, Events: evs})
			}
		}
		// A watch from a future revision waits for it, as etcd's synced watchers skip every event
		// below their start (after a restore without --bump-revision, the reused revisions).
		w.next = max(w.next, m.rev+1)
	}
}

func (ws *watchStream) Recv() (*pb.WatchResponse, error) {
	select {
	case r := <-ws.recvc:
		return r, nil
	case <-ws.done:
		ws.m.mu.Lock()
		defer ws.m.mu.Unlock()
		return nil, ws.closeErr
	}
}

func (ws *watchStream) Header() (metadata.MD, error) { return nil, nil }
func (ws *watchStream) Trailer() metadata.MD         { return nil }
func (ws *watchStream) CloseSend() error             { return nil }
func (ws *watchStream) Context() context.Context     { return ws.ctx }
func (ws *watchStream) SendMsg(any) error            { return unsupported("Watch SendMsg") }
func (ws *watchStream) RecvMsg(any) error            { return unsupported("Watch RecvMsg") }
