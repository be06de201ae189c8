package election

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Vacated is a queue whose last candidate key went: nobody stands for it any more.
type Vacated struct {
	Queue string
	// Previous is the candidate whose key went last: the queue's leader until then.
	Previous Leader
}

// WatchVacated reports every queue of project whose last candidate key goes (its leader resigned or
// its lease expired with nobody in line): the cue for the reconciler's leader to look for what a
// crashed owner with no successor left behind. A handover to a candidate in line vacates nothing. The
// channel is closed when ctx ends or the Elector is closed. Like Leader it is advisory: the receiver
// asks again (Leader) before it acts. A watch that has to start over (etcd compacted past it, a
// member lost its raft leader) reports the queues that had candidates before and have none after.
func (e *Elector) WatchVacated(ctx context.Context, project string) (<-chan Vacated, error) {
	if err := ValidateName("project", project); err != nil {
		return nil, err
	}
	octx, stop, err := e.bind(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan Vacated)
	e.wg.Go(func() {
		defer close(out)
		defer stop()
		e.watchVacated(octx, e.Keys().Project(project), out)
	})
	return out, nil
}

// candidates are the candidate keys of each queue: queue -> key -> its candidate.
type candidates map[string]map[string]Leader

// candidateOf parses a candidate key under prefix ("<prefix><queue>/<lease>"); ok is false for
// anything else.
func candidateOf(prefix string, kv *mvccpb.KeyValue) (string, Leader, bool) {
	queue, ok := queueOf(strings.TrimPrefix(string(kv.Key), prefix))
	if !ok {
		return "", Leader{}, false
	}
	return queue, Leader{ID: string(kv.Value), Token: kv.CreateRevision, Key: string(kv.Key)}, true
}

func (e *Elector) watchVacated(ctx context.Context, prefix string, out chan<- Vacated) {
	send := func(v Vacated) bool {
		select {
		case out <- v:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var known candidates
	backoff := e.cfg.RetryMin
	for ctx.Err() == nil {
		resp, err := e.client.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			if !e.sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, e.cfg.RetryMax)
			continue
		}
		backoff = e.cfg.RetryMin
		now := candidates{}
		for _, kv := range resp.Kvs {
			if q, c, ok := candidateOf(prefix, kv); ok {
				if now[q] == nil {
					now[q] = map[string]Leader{}
				}
				now[q][c.Key] = c
			}
		}
		// What went while no watch ran: queues that had candidates and have none now.
		for q, keys := range known {
			if len(now[q]) == 0 && len(keys) > 0 && !send(Vacated{Queue: q, Previous: oldest(keys)}) {
				return
			}
		}
		known = now
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wresp := range e.client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wresp.Err() != nil {
				break
			}
			for _, ev := range wresp.Events {
				switch ev.Type {
				case clientv3.EventTypePut:
					if q, c, ok := candidateOf(prefix, ev.Kv); ok {
						if known[q] == nil {
							known[q] = map[string]Leader{}
						}
						known[q][c.Key] = c
					}
				case clientv3.EventTypeDelete:
					q, _, ok := candidateOf(prefix, ev.Kv)
					if !ok {
						continue
					}
					prev, had := known[q][string(ev.Kv.Key)]
					if !had {
						continue
					}
					delete(known[q], string(ev.Kv.Key))
					if len(known[q]) == 0 {
						delete(known, q)
						if !send(Vacated{Queue: q, Previous: prev}) {
							cancel()
							return
						}
					}
				}
			}
		}
		cancel()
	}
}

// oldest is the candidate etcd lets lead: the lowest create revision.
func oldest(keys map[string]Leader) Leader {
	var l Leader
	for _, c := range keys {
		if l.Key == "" || c.Token < l.Token {
			l = c
		}
	}
	return l
}
