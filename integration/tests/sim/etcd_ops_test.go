package sim_test

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func (s *scriptRun) do(ctx context.Context, op etcdOp) string {
	switch op.kind {
	case "put":
		opts := []clientv3.OpOption{}
		if id := s.leaseID(op.lease); id != 0 {
			opts = append(opts, clientv3.WithLease(id))
		}
		if op.prevKV {
			opts = append(opts, clientv3.WithPrevKV())
		}
		r, err := s.cli.Put(ctx, op.key, op.val, opts...)
		if err != nil {
			return errLine(err)
		}
		return s.header(r.Header.Revision) + " prev" + s.kvs(nonNil(r.PrevKv))
	case "del":
		return s.del(ctx, op)
	case "get":
		return s.get(ctx, op)
	case "txn":
		return s.txn(ctx, op)
	case "compact":
		r, err := s.cli.Compact(ctx, max(1, s.rev-op.revBack))
		if err != nil {
			return errLine(err)
		}
		return s.header(r.Header.Revision)
	case "watch":
		return s.watch(ctx, op)
	}
	return s.lease(ctx, op)
}

func nonNil[T any](p *T) []*T {
	if p == nil {
		return nil
	}
	return []*T{p}
}

func (s *scriptRun) del(ctx context.Context, op etcdOp) string {
	key, opts := op.key, []clientv3.OpOption{}
	if op.prefix {
		key, opts = scriptPrefix, append(opts, clientv3.WithPrefix())
	}
	if op.prevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	r, err := s.cli.Delete(ctx, key, opts...)
	if err != nil {
		return errLine(err)
	}
	return fmt.Sprintf("%s deleted=%d prev%s", s.header(r.Header.Revision), r.Deleted, s.kvs(r.PrevKvs))
}

func (s *scriptRun) getOpts(op etcdOp) (string, []clientv3.OpOption) {
	key, opts := op.key, []clientv3.OpOption{}
	if op.prefix {
		key, opts = scriptPrefix, append(opts, clientv3.WithPrefix())
	}
	if op.limit > 0 {
		opts = append(opts, clientv3.WithLimit(op.limit))
	}
	if op.sortDesc {
		opts = append(opts, clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))
	}
	if op.revBack > 0 {
		opts = append(opts, clientv3.WithRev(max(1, s.rev-op.revBack+2)))
	}
	if op.maxCreate {
		opts = append(opts, clientv3.WithMaxCreateRev(max(1, s.rev-op.revBack)))
	}
	if op.countOnly {
		opts = append(opts, clientv3.WithCountOnly())
	}
	if op.keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	return key, opts
}

func (s *scriptRun) get(ctx context.Context, op etcdOp) string {
	key, opts := s.getOpts(op)
	r, err := s.cli.Get(ctx, key, opts...)
	if err != nil {
		return errLine(err)
	}
	return fmt.Sprintf("%s count=%d more=%v %s", s.header(r.Header.Revision), r.Count, r.More, s.kvs(r.Kvs))
}

func (s *scriptRun) txn(ctx context.Context, op etcdOp) string {
	var cmp clientv3.Cmp
	switch op.target {
	case "value":
		cmp = clientv3.Compare(clientv3.Value(op.key), op.result, fmt.Sprint(op.num%3))
	case "version":
		cmp = clientv3.Compare(clientv3.Version(op.key), op.result, op.num%4)
	case "create":
		cmp = clientv3.Compare(clientv3.CreateRevision(op.key), op.result, max(0, s.rev-op.num))
	case "mod":
		cmp = clientv3.Compare(clientv3.ModRevision(op.key), op.result, max(0, s.rev-op.num))
	case "lease":
		cmp = clientv3.Compare(clientv3.LeaseValue(op.key), op.result, s.leaseID(op.lease))
	}
	put := []clientv3.OpOption{}
	if id := s.leaseID(op.lease); id != 0 {
		put = append(put, clientv3.WithLease(id))
	}
	r, err := s.cli.Txn(ctx).If(cmp).
		Then(clientv3.OpPut(op.key, op.val, put...), clientv3.OpGet(scriptPrefix, clientv3.WithPrefix(), clientv3.WithLimit(2),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))).
		Else(clientv3.OpGet(op.key), clientv3.OpDelete(scriptPrefix+"z", clientv3.WithPrefix())).Commit()
	if err != nil {
		return errLine(err)
	}
	out := fmt.Sprintf("%s succeeded=%v", s.header(r.Header.Revision), r.Succeeded)
	for _, ro := range r.Responses {
		switch {
		case ro.GetResponseRange() != nil:
			g := ro.GetResponseRange()
			out += fmt.Sprintf(" get(count=%d more=%v %s)", g.Count, g.More, s.kvs(g.Kvs))
		case ro.GetResponsePut() != nil:
			out += " put"
		case ro.GetResponseDeleteRange() != nil:
			out += fmt.Sprintf(" del(%d)", ro.GetResponseDeleteRange().Deleted)
		}
	}
	return out
}

func (s *scriptRun) lease(ctx context.Context, op etcdOp) string {
	id := s.leaseID(op.lease)
	switch op.kind {
	case "grant":
		r, err := s.cli.Grant(ctx, 30)
		if err != nil {
			return errLine(err)
		}
		s.index[int64(r.ID)] = len(s.leases)
		s.leases = append(s.leases, r.ID)
		return fmt.Sprintf("%s ttl=%d", s.header(r.ResponseHeader.Revision), r.TTL)
	case "revoke":
		r, err := s.cli.Revoke(ctx, id)
		if err != nil {
			return errLine(err)
		}
		return s.header(r.Header.Revision)
	case "keepalive":
		r, err := s.cli.KeepAliveOnce(ctx, id)
		if err != nil {
			return errLine(err)
		}
		return fmt.Sprintf("%s ttl=%d", s.header(r.ResponseHeader.Revision), r.TTL)
	}
	r, err := s.cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
	if err != nil {
		return errLine(err)
	}
	return fmt.Sprintf("%s granted=%d alive=%v keys=%q", s.header(r.ResponseHeader.Revision), r.GrantedTTL, r.TTL > 0, r.Keys)
}
