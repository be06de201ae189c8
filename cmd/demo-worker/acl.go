package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// runRedisACL prints the ACL SETUSER command of a Redis user that can run this configuration and
// nothing else (baton.Config.RedisACLRules), so an operator never has to assemble the command list.
// The password is left as a placeholder: it never passes through this command.
func runRedisACL(args []string, stdout, stderr io.Writer) int {
	c, err := loadCommon()
	if err != nil {
		fmt.Fprintf(stderr, "demo-worker: %v\n", err)
		return exitConfig
	}
	user := c.clients.RedisUsername
	if user == "" {
		user = "baton"
	}
	fs := flag.NewFlagSet("redis-acl", flag.ContinueOnError)
	fs.StringVar(&c.cfg.Heartbeat.Prefix, "heartbeat-prefix", c.cfg.Heartbeat.Prefix, "heartbeat key prefix (BATON_HEARTBEAT_PREFIX)")
	fs.StringVar(&c.cfg.Registry.Prefix, "registry-prefix", c.cfg.Registry.Prefix, "registry key prefix (BATON_REGISTRY_PREFIX)")
	fs.StringVar(&user, "user", user, "the ACL user's name (BATON_REDIS_USERNAME; default baton)")
	switch err := parse(fs, args, stdout); {
	case errors.Is(err, errHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "demo-worker: %v\n", err)
		return exitConfig
	}
	if user == "" || strings.ContainsAny(user, " \t\r\n") {
		fmt.Fprintf(stderr, "demo-worker: -user must be a non-empty name without spaces, got %q\n", user)
		return exitConfig
	}
	fmt.Fprintf(stdout, "ACL SETUSER %s on >PASSWORD %s\n", user, strings.Join(c.cfg.RedisACLRules(), " "))
	return exitOK
}
