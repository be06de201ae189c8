package clients

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// NewRedis builds a Redis client, of a Redis Cluster with RedisClusterAddrs; the caller closes it.
// It does not connect: CheckRedis says whether the server takes the client's credentials.
func NewRedis(cfg Config) (redis.UniversalClient, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	tlsCfg, _ := c.RedisTLS.config()
	if len(c.RedisClusterAddrs) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.RedisClusterAddrs, Username: c.RedisUsername,
			Password: c.RedisPassword, TLSConfig: tlsCfg, DisableIdentity: true}), nil
	}
	return redis.NewClient(&redis.Options{Addr: c.RedisAddr, Username: c.RedisUsername, Password: c.RedisPassword,
		DB: c.RedisDB, TLSConfig: tlsCfg, DisableIdentity: true}), nil
}

// CheckRedis pings rdb (built from cfg) once, within ctx and at most maxProbeTimeout. A refusal of
// the credentials, of the PING (ACL permissions) or of the TLS connection returns an error wrapping
// ErrRefused; a server that cannot be reached returns another error.
func CheckRedis(ctx context.Context, rdb redis.UniversalClient, cfg Config) error {
	ctx, cancel := context.WithTimeout(ctx, maxProbeTimeout)
	defer cancel()
	c := cfg.withDefaults()
	err := rdb.Ping(ctx).Err()
	switch {
	case err == nil:
		return nil
	case redis.IsAuthError(err):
		user := c.RedisUsername
		if user == "" {
			user = "default"
		}
		return fmt.Errorf("clients: Redis at %s %w authentication as user %q: %w", c.RedisTarget(), ErrRefused, user, err)
	case redis.IsPermissionError(err):
		return fmt.Errorf("clients: Redis at %s %w PING for user %q (ACL permissions): %w", c.RedisTarget(), ErrRefused, c.RedisUsername, err)
	case tlsRefusal(err):
		return fmt.Errorf("clients: Redis at %s %w the TLS connection: %w", c.RedisTarget(), ErrRefused, err)
	}
	return fmt.Errorf("clients: Redis at %s: %w", c.RedisTarget(), err)
}

// RedisTarget names the Redis server, or the cluster's seed nodes, in messages and logs.
func (c Config) RedisTarget() string {
	c = c.withDefaults()
	if len(c.RedisClusterAddrs) > 0 {
		return "cluster " + strings.Join(c.RedisClusterAddrs, ",")
	}
	return c.RedisAddr
}
