package sim_test

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// watch opens a watch of the script's keys from a past revision, then writes a sentinel put and
// delete, and reads until the sentinel's revision: every event in between is compared, with no
// timing involved. A watch below the compaction ends with the compact revision.
func (s *scriptRun) watch(ctx context.Context, op etcdOp) string {
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), s.extra)
	defer cancel()
	from := max(1, s.rev-op.revBack)
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithCreatedNotify()}
	switch op.filter {
	case "noput":
		opts = append(opts, clientv3.WithFilterPut())
	case "nodelete":
		opts = append(opts, clientv3.WithFilterDelete())
	}
	if op.prevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	wc := s.cli.Watch(wctx, scriptPrefix, opts...)
	created, ok := <-wc
	if !ok || !created.Created {
		return fmt.Sprintf("no created notify: %v", created.Err())
	}
	out := fmt.Sprintf("from=%d created ", from)
	p, err := s.cli.Put(ctx, scriptPrefix+"zz", "sentinel")
	if err != nil {
		return errLine(err)
	}
	d, err := s.cli.Delete(ctx, scriptPrefix+"zz")
	if err != nil {
		return errLine(err)
	}
	s.header(d.Header.Revision)
	end := d.Header.Revision
	if op.filter == "nodelete" {
		end = p.Header.Revision
	}
	for resp := range wc {
		if resp.CompactRevision != 0 {
			return out + fmt.Sprintf(" compacted=%d", resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return out + " " + errLine(err)
		}
		out += s.events(resp.Events)
		if last := resp.Events[len(resp.Events)-1].Kv.ModRevision; last >= end {
			return out
		}
	}
	return out + " closed early"
}
