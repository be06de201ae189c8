package baton

import (
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/registry"
)

// redisCommands are the Redis commands a Node sends, its scripts' calls included (Redis checks those
// against the ACL too): the client handshake, the heartbeat and registry scripts, the reconciler's
// scan and reads, and the cluster topology and command table reads of a cluster client. go-redis also sends CLIENT
// SETINFO on connect and ignores its refusal; Redis 7.0 does not know it, so naming it in an ACL
// would make that server refuse the whole rule.
var redisCommands = []string{
	"ping", "hello", "auth", "client|setname", "readonly", "cluster|slots", "cluster|shards", "command",
	"time", "scan", "type", "exists", "get", "set", "del", "pexpire", "pttl",
	"hget", "hgetall", "hmget", "hset", "hdel", "hincrby",
	"zadd", "zrem", "zrange", "zscore",
	"evalsha", "eval",
}

// RedisACLRules returns the Redis ACL rules of a user that can run this configuration and touch
// nothing else: its project's key patterns (heartbeat.Pattern, registry.Pattern: each ends after the
// project's hash tag with a '/', which no name contains, so they match no other project's keys) and
// exactly the commands Baton sends. Unless DisableReconciler or Reconciler.SkipLegacyHeartbeats, the
// project's heartbeat entries of the layout before per-project keys too (heartbeat.LegacyPattern),
// which the reconciler cleans up while workers of the previous release run. Give them to ACL SETUSER
// after the user's name, "on" and its password, e.g.
//
//	ACL SETUSER baton on >PASSWORD resetkeys ~dispatcher:heartbeat:{payments}/* ~baton:registry:{payments}/* resetchannels -@all +ping ...
//
// "baton acl redis" prints the whole command for the configuration in its environment.
func (c Config) RedisACLRules() []string {
	c = c.withDefaults()
	rules := []string{"resetkeys", "~" + heartbeat.Pattern(c.Heartbeat.Prefix, c.Project)}
	if !c.DisableReconciler && !c.Reconciler.SkipLegacyHeartbeats {
		rules = append(rules, "~"+heartbeat.LegacyPattern(c.Heartbeat.Prefix, c.Project))
	}
	rules = append(rules, "~"+registry.Pattern(c.Registry.Prefix, c.Project), "resetchannels", "-@all")
	for _, cmd := range redisCommands {
		rules = append(rules, "+"+cmd)
	}
	return rules
}
