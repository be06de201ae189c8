package etcdx

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// SaveSnapshot writes a snapshot of the cluster's backend (etcdctl snapshot save, through cli) to a
// new file in the cluster's dir and returns its path.
func (c *Cluster) SaveSnapshot(ctx context.Context, cli *clientv3.Client) (string, error) {
	if c.external {
		return "", ErrExternal
	}
	r, err := cli.Snapshot(ctx)
	if err != nil {
		return "", fmt.Errorf("etcdx: snapshot: %w", err)
	}
	defer r.Close()
	f, err := os.CreateTemp(c.root, "snapshot-*.db")
	if err != nil {
		return "", fmt.Errorf("etcdx: %w", err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return "", fmt.Errorf("etcdx: snapshot: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("etcdx: %w", err)
	}
	return f.Name(), nil
}

// RestoreOptions are the flags of etcdutl snapshot restore that change what clients see.
type RestoreOptions struct {
	// BumpRevision is --bump-revision (requires MarkCompacted).
	BumpRevision uint64
	// MarkCompacted is --mark-compacted (requires BumpRevision > 0).
	MarkCompacted bool
}

// Restore stops every member, replaces each member's data dir with one restored from the snapshot
// at path (etcdutl snapshot restore, the same snapshot for every member as etcd's disaster-recovery
// guide says), and starts the cluster again on the same ports: clients reconnect to a cluster whose
// revision, keys and leases are the snapshot's. It returns when every member is ready and a leader
// exists.
func (c *Cluster) Restore(path string, o RestoreOptions) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopAllLocked(); err != nil {
		return err
	}
	c.bg.Wait() // the members' files are closed
	peers := make([]string, len(c.members))
	for j, o := range c.members {
		peers[j] = o.name + "=" + o.peerURL.String()
	}
	for _, m := range c.members {
		if err := os.RemoveAll(m.dir); err != nil {
			return fmt.Errorf("etcdx: %w", err)
		}
		err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: path, Name: m.name, OutputDataDir: m.dir, OutputWALDir: filepath.Join(m.dir, "member", "wal"),
			PeerURLs: []string{m.peerURL.String()}, InitialCluster: strings.Join(peers, ","), InitialClusterToken: c.token,
			RevisionBump: o.BumpRevision, MarkCompacted: o.MarkCompacted,
		})
		if err != nil {
			return fmt.Errorf("etcdx: restore member %s: %w", m.name, err)
		}
	}
	return c.startAll(true)
}
