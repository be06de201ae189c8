package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
)

// An etcd conformance script is a seeded list of operations, drawn before it runs so that the model
// and the real server get the very same requests; each operation's answer becomes one normalized line
// (revisions, succeeded, kvs, events, error codes; lease IDs as the index of their grant).
type etcdOp struct {
	kind           string
	key, val       string
	prefix, prevKV bool
	lease          int // index of a granted lease, -1 none
	target         string
	result         string
	num            int64
	limit          int64
	sortDesc       bool
	revBack        int64 // a revision as "current minus revBack"
	maxCreate      bool
	countOnly      bool
	keysOnly       bool
	filter         string
}

const scriptPrefix = "k/"

func drawScript(seed uint64, n int) []etcdOp {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	keys := []string{"k/a", "k/b", "k/c", "k/d"}
	kinds := []string{"put", "put", "put", "txn", "txn", "get", "get", "del", "grant", "revoke", "keepalive", "ttl", "compact", "watch", "watch"}
	var ops []etcdOp
	leases := 0
	for range n {
		op := etcdOp{kind: kinds[r.IntN(len(kinds))], key: keys[r.IntN(len(keys))], lease: -1,
			val: fmt.Sprint(r.IntN(3)), prevKV: r.IntN(2) == 0, revBack: int64(r.IntN(8))}
		if leases > 0 && r.IntN(3) == 0 {
			op.lease = r.IntN(leases)
		}
		switch op.kind {
		case "grant":
			leases++
		case "revoke", "keepalive", "ttl":
			if leases == 0 {
				op.kind = "grant"
				leases++
			}
			op.lease = r.IntN(max(leases, 1))
		case "txn":
			op.target = []string{"value", "version", "create", "mod", "lease"}[r.IntN(5)]
			op.result = []string{"=", "!=", ">", "<"}[r.IntN(4)]
			op.num = int64(r.IntN(10))
		case "get":
			op.prefix, op.limit, op.sortDesc = r.IntN(2) == 0, int64(r.IntN(3)), r.IntN(2) == 0
			op.maxCreate, op.countOnly, op.keysOnly = r.IntN(4) == 0, r.IntN(6) == 0, r.IntN(6) == 0
		case "del":
			op.prefix = r.IntN(4) == 0
		case "watch":
			op.filter = []string{"", "", "noput", "nodelete"}[r.IntN(4)]
		}
		ops = append(ops, op)
	}
	return ops
}

// scriptRun runs a script against one backend and returns its lines.
type scriptRun struct {
	cli    *clientv3.Client
	leases []clientv3.LeaseID
	index  map[int64]int
	rev    int64
	lines  []string
	extra  time.Duration // how long a watch may wait for its sentinel
}

func runScript(ctx context.Context, cli *clientv3.Client, ops []etcdOp, wait time.Duration) []string {
	s := &scriptRun{cli: cli, index: map[int64]int{}, extra: wait}
	for i, op := range ops {
		s.lines = append(s.lines, fmt.Sprintf("%d %s: %s", i, op.kind, s.do(ctx, op)))
	}
	return s.lines
}

func (s *scriptRun) leaseID(i int) clientv3.LeaseID {
	if i < 0 || i >= len(s.leases) {
		return 0
	}
	return s.leases[i]
}

func (s *scriptRun) header(rev int64) string {
	s.rev = max(s.rev, rev)
	return fmt.Sprintf("rev=%d", rev)
}

func errLine(err error) string {
	err = rpctypes.Error(err)
	return fmt.Sprintf("error code=%s desc=%q", status.Code(err), rpctypes.ErrorDesc(err))
}

func (s *scriptRun) kvs(kvs []*mvccpb.KeyValue) string {
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, "[%s=%q c%d m%d v%d l%s]", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, s.leaseName(kv.Lease))
	}
	return b.String()
}

func (s *scriptRun) leaseName(id int64) string {
	if id == 0 {
		return "-"
	}
	if i, ok := s.index[id]; ok {
		return fmt.Sprint(i)
	}
	return "?"
}

func (s *scriptRun) events(evs []*clientv3.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%s%s", ev.Type, s.kvs([]*mvccpb.KeyValue{ev.Kv}))
		if ev.PrevKv != nil {
			fmt.Fprintf(&b, "prev%s", s.kvs([]*mvccpb.KeyValue{ev.PrevKv}))
		}
	}
	return b.String()
}
