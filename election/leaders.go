package election

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leaders returns the leader of every queue of project that has a candidate, keyed by queue, from one
// linearizable etcd range read of the project's election keys: its cost does not grow with the number
// of callers' questions, only with the number of candidate keys. Queues nobody stands for are absent.
// Like Leader it is advisory (etcd#7815); the reconciler uses it to decide which open dispatcher runs
// have no live owner, one read per cycle instead of one per run.
func (e *Elector) Leaders(ctx context.Context, project string) (map[string]Leader, error) {
	if err := ValidateName("project", project); err != nil {
		return nil, err
	}
	// Every queue election of project lives under the project's range (Keys).
	prefix := e.Keys().Project(project)
	resp, err := e.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("election: leaders of %s: %w", prefix, err)
	}
	out := make(map[string]Leader)
	for _, kv := range resp.Kvs {
		queue, c, ok := candidateOf(prefix, kv)
		if !ok {
			continue // not a candidate key: nothing Baton wrote
		}
		if cur, ok := out[queue]; ok && cur.Token <= c.Token {
			continue
		}
		out[queue] = c
	}
	return out, nil
}
