package opscli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
)

// EtcdACL is `prog acl etcd`: the etcdctl commands that create a role with read and write on exactly
// the prefixes a worker of this configuration uses (baton.Config.EtcdPrefixes) and a user with that
// role. The password is never part of it: `etcdctl user add` asks for it.
func EtcdACL(prog string, args []string, stdout, stderr io.Writer, ignore ...string) int {
	c, err := LoadCommon(ignore...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return ExitConfig
	}
	user, role, ledger := c.Clients.EtcdUsername, "", dispatcher.DefaultLedgerPrefix
	if user == "" {
		user = "baton"
	}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.StringVar(&c.Cfg.Project, "project", c.Cfg.Project, "project the role is for (BATON_PROJECT)")
	fs.StringVar(&c.Cfg.Election.Prefix, "election-prefix", c.Cfg.Election.Prefix, "queue elections' prefix (BATON_ELECTION_PREFIX)")
	fs.StringVar(&c.Cfg.ReconcilerElectionPrefix, "reconciler-election-prefix", c.Cfg.ReconcilerElectionPrefix, "reconciler election's prefix")
	fs.StringVar(&ledger, "ledger-prefix", ledger, "the dispatch ledger's prefix (dispatcher.NewEtcdLedger's); empty: the workers keep no ledger in etcd")
	fs.StringVar(&user, "user", user, "the etcd user's name (BATON_ETCD_USERNAME; default baton)")
	fs.StringVar(&role, "role", role, "the role's name (default: the user's)")
	switch err := Parse(fs, args, stdout); {
	case errors.Is(err, ErrHelp):
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return ExitConfig
	}
	if role == "" {
		role = user
	}
	for _, v := range []struct{ flag, value string }{{"-user", user}, {"-role", role}} {
		if v.value == "" || strings.ContainsAny(v.value, " \t\r\n'\"") {
			fmt.Fprintf(stderr, "%s: %s must be a non-empty name without spaces or quotes, got %q\n", prog, v.flag, v.value)
			return ExitConfig
		}
	}
	if err := election.ValidateName("-project (BATON_PROJECT)", c.Cfg.Project); err != nil {
		fmt.Fprintf(stderr, "%s: %v: the role covers that project's keys only\n", prog, err)
		return ExitConfig
	}
	fmt.Fprintf(stdout, "etcdctl role add %s\n", role)
	for _, p := range c.Cfg.EtcdPrefixes(ledger) {
		fmt.Fprintf(stdout, "etcdctl role grant-permission %s readwrite %s --prefix=true\n", role, shellQuote(p))
	}
	fmt.Fprintf(stdout, "etcdctl user add %s\n", user)
	fmt.Fprintf(stdout, "etcdctl user grant-role %s %s\n", user, role)
	return ExitOK
}

// shellQuote returns s as one shell word: as it is when it holds only characters no shell treats
// specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_.:-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
