package opscli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// RedisACL prints the ACL SETUSER command of a Redis user that can run this configuration and
// nothing else (baton.Config.RedisACLRules), so an operator never has to assemble the command list.
// The password is left as a placeholder: it never passes through this command.
// fs is named prog (for example "baton acl redis"); ignore names prog's own BATON_* variables.
func RedisACL(prog string, args []string, stdout, stderr io.Writer, ignore ...string) int {
	c, err := LoadCommon(ignore...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return ExitConfig
	}
	user := c.Clients.RedisUsername
	if user == "" {
		user = "baton"
	}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.StringVar(&c.Cfg.Project, "project", c.Cfg.Project, "project the user is for "+c.bind("Project", "project", envOf("Project")))
	fs.BoolVar(&c.Cfg.Reconciler.SkipLegacyHeartbeats, "skip-legacy-heartbeats", c.Cfg.Reconciler.SkipLegacyHeartbeats,
		"leave out the project's heartbeat keys of the layout before per-project keys, which the reconciler cleans up while workers of the "+
			"previous release run ("+envOf("Reconciler.SkipLegacyHeartbeats")+")")
	fs.StringVar(&c.Cfg.Heartbeat.Prefix, "heartbeat-prefix", c.Cfg.Heartbeat.Prefix, "heartbeat key prefix ("+envOf("Heartbeat.Prefix")+")")
	fs.StringVar(&c.Cfg.Registry.Prefix, "registry-prefix", c.Cfg.Registry.Prefix, "registry key prefix ("+envOf("Registry.Prefix")+")")
	fs.StringVar(&user, "user", user, "the ACL user's name (BATON_REDIS_USERNAME)")
	switch err := Parse(fs, args, stdout); {
	case errors.Is(err, ErrHelp):
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return ExitConfig
	}
	if user == "" || strings.ContainsAny(user, " \t\r\n") {
		fmt.Fprintf(stderr, "%s: -user must be a non-empty name without spaces, got %q\n", prog, user)
		return ExitConfig
	}
	if err := c.checkNames(); err != nil {
		fmt.Fprintf(stderr, "%s: %v: the user's key patterns cover that project's keys only\n", prog, err)
		return ExitConfig
	}
	fmt.Fprintf(stdout, "ACL SETUSER %s on >PASSWORD %s\n", user, strings.Join(c.Cfg.RedisACLRules(), " "))
	return ExitOK
}
