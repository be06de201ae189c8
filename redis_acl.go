package baton

import "github.com/baton-run/baton/registry"

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
// nothing else: its key patterns (the heartbeat and registry prefixes) and exactly the commands Baton
// sends. Give them to ACL SETUSER after the user's name, "on" and its password, e.g.
//
//	ACL SETUSER baton on >PASSWORD resetkeys ~dispatcher:heartbeat:* ~baton:registry:* resetchannels -@all +ping ...
//
// "baton acl redis" prints the whole command for the configuration in its environment.
func (c Config) RedisACLRules() []string {
	c = c.withDefaults()
	registryPrefix := c.Registry.Prefix
	if registryPrefix == "" {
		registryPrefix = registry.DefaultPrefix
	}
	rules := []string{"resetkeys", "~" + c.Heartbeat.Prefix + "*", "~" + registryPrefix + "*", "resetchannels", "-@all"}
	for _, cmd := range redisCommands {
		rules = append(rules, "+"+cmd)
	}
	return rules
}
