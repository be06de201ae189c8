package registry

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/baton-run/baton/names"
)

// keys builds the key layout of one project. Every key starts with <Prefix>{<project>}: the braces
// make the project the Redis Cluster hash tag, so that the scripts, which touch a worker's record and
// its queue's sorted set together, stay on one slot. Components are separated by '/', which project,
// queue and server ID names never contain, so that no two (queue, server ID) pairs share a key:
//
//	<Prefix>{<project>}/w/<queue>/<serverID>  hash: the worker's record
//	<Prefix>{<project>}/hb/<queue>            sorted set: server IDs of live workers, scored by the
//	                                          Redis time (ms) of their last heartbeat
//	<Prefix>{<project>}/idx                   sorted set, all scores 0: "<queue>\x00<serverID>" of every
//	                                          record, read BYLEX for stable pagination
//	<Prefix>{<project>}/gone/<queue>          sorted set: OFFLINE server IDs, scored by the time (ms) their
//	                                          record expires, so the index entry can be pruned after it
//	<Prefix>{<project>}/fence/<queue>         string: the highest fencing token that evicted on the queue
type keys struct{ base string }

func newKeys(prefix, project string) keys {
	return keys{base: strings.TrimSuffix(ProjectPrefix(prefix, project), "/")}
}

// ProjectPrefix returns what every registry key of project starts with: <prefix>{<project>}/ (prefix
// "" means DefaultPrefix). The '/', which no name contains, ends the project, so no project's keys
// start with another's prefix.
func ProjectPrefix(prefix, project string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + "{" + project + "}/"
}

// Pattern returns the glob (an ACL key pattern, SCAN MATCH) that matches exactly the keys starting
// with ProjectPrefix(prefix, project): the glob characters a name may hold are escaped.
func Pattern(prefix, project string) string {
	return names.GlobEscape(ProjectPrefix(prefix, project)) + "*"
}

func (k keys) worker(queue, serverID string) string { return k.base + "/w/" + queue + "/" + serverID }
func (k keys) heartbeats(queue string) string       { return k.base + "/hb/" + queue }
func (k keys) index() string                        { return k.base + "/idx" }
func (k keys) gone(queue string) string             { return k.base + "/gone/" + queue }
func (k keys) fence(queue string) string            { return k.base + "/fence/" + queue }

// indexMember is a worker's entry in the index. NUL sorts before every byte a name may contain, so
// the entries of a queue are exactly the range [queue+"\x00", queue+"\x01").
func indexMember(queue, serverID string) string { return queue + "\x00" + serverID }

// splitMember parses an index entry; ok is false for anything indexMember would not have produced.
func splitMember(m string) (queue, serverID string, ok bool) {
	queue, serverID, found := strings.Cut(m, "\x00")
	if !found || names.Check(queue) != nil || names.Check(serverID) != nil {
		return "", "", false
	}
	return queue, serverID, true
}

// Cursors are opaque to callers: the index entry of the last worker returned, base64url-encoded.
func encodeCursor(member string) string { return base64.RawURLEncoding.EncodeToString([]byte(member)) }

func decodeCursor(cursor string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return "", fmt.Errorf("%w: cursor %s is not a cursor returned by List", ErrInvalidArgument, names.Quote(cursor))
	}
	if _, _, ok := splitMember(string(b)); !ok {
		return "", fmt.Errorf("%w: cursor %s is not a cursor returned by List", ErrInvalidArgument, names.Quote(cursor))
	}
	return string(b), nil
}
