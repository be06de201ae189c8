package election

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
)

// sweep checks, about once a TTL while the session lives, that what etcd attaches to its lease is what
// the Elector knows of (one LeaseTimeToLive request per process, not per queue). A restore of etcd from
// a backup breaks both ways, without a watch event that could tell:
//
//   - a key of ours comes back for an election this Elector no longer campaigns for (it resigned or
//     stepped aside after the backup): our lease keeps it alive, so it would stand first in line for
//     ever and no candidate could win. It is deleted, comparing its create revision;
//   - a term's key is gone (it was put after the backup), or back at an older revision (the same
//     name: keys are named after the lease): the term's watch sees no event for either (without
//     --bump-revision it is resumed past the revisions the restore reused), and a leader that writes
//     nothing fenced would lead on without its key. The term ends with ErrKeyLost. The terms are
//     checked with their HeldCmp, many to a transaction.
func (e *Elector) sweep(s *session) {
	for e.sleep(s.ctx, clock.Jitter(e.cfg.Clock, e.cfg.TTL)) {
		terms := s.liveTerms() // before the request: each of their keys was put before it was sent
		ctx, cancel := context.WithTimeout(s.ctx, e.cfg.TTL)
		resp, err := e.client.TimeToLive(ctx, s.id, clientv3.WithAttachedKeys())
		cancel()
		if err != nil || resp.TTL <= 0 {
			continue // a lost lease is the keepalive's to find
		}
		attached := make(map[string]bool, len(resp.Keys))
		for _, k := range resp.Keys {
			attached[string(k)] = true
		}
		e.sweepTerms(s, terms)
		for key := range attached {
			e.sweepStray(s, key)
		}
	}
}

// sweepStray deletes key, one of the session's, if no campaign or term of this Elector stands behind
// it. The delete compares the create revision read now, so a campaign that starts meanwhile (and puts
// its key again, at a new revision) keeps its key.
func (e *Elector) sweepStray(s *session, key string) {
	election := key[:max(0, strings.LastIndex(key, "/"))]
	if !strings.HasPrefix(key, e.cfg.Prefix+"/") || e.campaigning(election) {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, e.cfg.TTL)
	defer cancel()
	g, err := e.client.Get(ctx, key)
	if err != nil || len(g.Kvs) == 0 || g.Kvs[0].Lease != int64(s.id) || e.campaigning(election) {
		return
	}
	if _, err := e.client.Txn(ctx).If(HeldCmp(key, g.Kvs[0].CreateRevision)).Then(clientv3.OpDelete(key)).Commit(); err == nil {
		s.log.Warn("deleted a key of the session no campaign stands behind (etcd restored?)", zap.String("key", key))
	}
}

// campaigning reports whether this Elector campaigns for or leads the election whose key is election.
func (e *Elector) campaigning(election string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.campaigns[election]
	return ok
}

// liveTerms returns the session's terms.
func (s *session) liveTerms() []*Term {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Term, 0, len(s.terms))
	for t := range s.terms {
		out = append(out, t)
	}
	return out
}

// sweepTermsPerTxn bounds the compares of one transaction (etcd's --max-txn-ops defaults to 128).
const sweepTermsPerTxn = 100

// sweepTerms ends the terms whose key no longer holds their token: one transaction comparing every
// term's HeldCmp per sweepTermsPerTxn terms, and a read of each key only when one failed.
func (e *Elector) sweepTerms(s *session, terms []*Term) {
	for len(terms) > 0 {
		batch := terms[:min(len(terms), sweepTermsPerTxn)]
		terms = terms[len(batch):]
		cmps := make([]clientv3.Cmp, len(batch))
		for i, t := range batch {
			cmps[i] = HeldCmp(t.key, t.token)
		}
		ctx, cancel := context.WithTimeout(s.ctx, e.cfg.TTL)
		resp, err := e.client.Txn(ctx).If(cmps...).Commit()
		for i := 0; err == nil && !resp.Succeeded && i < len(batch); i++ {
			t := batch[i]
			g, gerr := e.client.Get(ctx, t.key)
			if gerr == nil && !HeldIn(g.Kvs, t.token) {
				t.log.Warn("the term's key is gone or holds another revision, without an event (etcd restored?)")
				t.end(ErrKeyLost)
			}
		}
		cancel()
	}
}
