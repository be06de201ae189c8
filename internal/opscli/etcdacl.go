package opscli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/names"
)

// DefaultNewPasswordEnv is the environment variable the printed `etcdctl user add` reads the new
// user's password from, unless -new-password-env or -new-password-file says otherwise. It is not a
// BATON_* variable: the operator's shell holds it for one command, not a worker.
const DefaultNewPasswordEnv = "ETCD_NEW_USER_PASSWORD"

// EtcdACL is `prog acl etcd`: the etcdctl commands that create a role with read and write on exactly
// the prefixes a worker of this configuration uses (baton.Config.EtcdPrefixes), and on the
// application's own prefixes given with -extra-prefix (the keys its dispatcher runs write, fenced, such
// as an announce from a run's start), and a user with that role. The commands run unattended: the
// user's password is never printed; `etcdctl user add --new-user-password` takes it, when the line
// runs, from an environment variable (-new-password-env, default DefaultNewPasswordEnv) or a file
// (-new-password-file), which the shell expands, so it stays out of the shell's history (etcdctl's
// argument list still shows it to ps while it runs, which a comment line says).
func EtcdACL(prog string, args []string, stdout, stderr io.Writer, ignore ...string) int {
	c, err := LoadCommon(ignore...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return ExitConfig
	}
	user, role, ledgerPrefix := c.Clients.EtcdUsername, "", ledger.DefaultPrefix
	if user == "" {
		user = "baton"
	}
	pwEnv, pwFile, legacy := "", "", true
	var extra []string
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.StringVar(&c.Cfg.Project, "project", c.Cfg.Project, "project the role is for "+c.bind("Project", "project", envOf("Project")))
	fs.StringVar(&c.Cfg.Election.Prefix, "election-prefix", c.Cfg.Election.Prefix, "queue elections' prefix "+c.bind("Election.Prefix", "election-prefix", envOf("Election.Prefix")))
	fs.StringVar(&c.Cfg.ReconcilerElectionPrefix, "reconciler-election-prefix", c.Cfg.ReconcilerElectionPrefix,
		"reconciler election's prefix "+c.bind("ReconcilerElectionPrefix", "reconciler-election-prefix", envOf("ReconcilerElectionPrefix")))
	fs.StringVar(&ledgerPrefix, "ledger-prefix", ledgerPrefix, "the dispatch ledger's prefix (ledger.Config.Prefix); empty: the workers keep no ledger in etcd")
	fs.BoolVar(&legacy, "legacy-ledger", legacy, "also grant read (not write) on the dispatch ledger's layout before per-project keys "+
		"(ledger.LegacyRange: records that name no project), which workers of this release read while upgrading from the one before; "+
		"false once the workers run with ledger.Config.IgnoreLegacy")
	fs.Func("extra-prefix", "an etcd prefix of the application's own keys the role also reads and writes (repeatable): the place for the keys "+
		"the application writes itself, fenced by the run's term, such as an announce from a dispatcher run's start", func(p string) error {
		if err := names.CheckPrefix(p, "", ""); err != nil {
			return err
		}
		extra = append(extra, p)
		return nil
	})
	fs.StringVar(&user, "user", user, "the etcd user's name ("+c.bindEnv("EtcdUsername", "user", "BATON_ETCD_USERNAME")+")")
	fs.StringVar(&role, "role", role, "the role's name (default: the user's)")
	fs.StringVar(&pwEnv, "new-password-env", "", "the environment variable the printed etcdctl user add reads the new user's password from, "+
		"when it runs (default "+DefaultNewPasswordEnv+")")
	fs.StringVar(&pwFile, "new-password-file", "", "a file the printed etcdctl user add reads the new user's password from, when it runs, instead")
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
	switch {
	case pwEnv != "" && pwFile != "":
		fmt.Fprintf(stderr, "%s: -new-password-env and -new-password-file must not both be set: the password comes from one place\n", prog)
		return ExitConfig
	case pwEnv != "" && !isEnvName(pwEnv):
		fmt.Fprintf(stderr, "%s: -new-password-env must be a shell variable name (letters, digits, _; not first a digit), got %q\n", prog, pwEnv)
		return ExitConfig
	case pwEnv == "" && pwFile == "":
		pwEnv = DefaultNewPasswordEnv
	}
	if err := c.checkNames(); err != nil {
		fmt.Fprintf(stderr, "%s: %v: the role covers that project's keys only\n", prog, err)
		return ExitConfig
	}
	printEtcdRole(stdout, role, append(c.Cfg.EtcdPrefixes(ledgerPrefix), extra...), legacy, ledgerPrefix)
	if pwFile != "" {
		fmt.Fprintf(stdout, "# the password is read from %s when the next line runs; etcdctl's arguments show it to ps meanwhile\n", pwFile)
		fmt.Fprintf(stdout, "etcdctl user add %s --new-user-password=\"$(cat %s)\"\n", user, shellQuote(pwFile))
	} else {
		fmt.Fprintf(stdout, "# the password is read from $%s when the next line runs (not from the shell's history); etcdctl's arguments show it to ps meanwhile\n", pwEnv)
		fmt.Fprintf(stdout, "etcdctl user add %s --new-user-password=\"${%s:?set %s to the password of the new user}\"\n", user, pwEnv, pwEnv)
	}
	fmt.Fprintf(stdout, "etcdctl user grant-role %s %s\n", user, role)
	return ExitOK
}

// printEtcdRole prints the commands that create role with read and write on prefixes and, with
// legacy, read on the dispatch ledger's layout before per-project keys under ledgerPrefix (none when "").
func printEtcdRole(stdout io.Writer, role string, prefixes []string, legacy bool, ledgerPrefix string) {
	fmt.Fprintf(stdout, "etcdctl role add %s\n", role)
	for _, p := range prefixes {
		fmt.Fprintf(stdout, "etcdctl role grant-permission %s readwrite %s --prefix=true\n", role, shellQuote(p))
	}
	if legacy && ledgerPrefix != "" {
		key, end := ledger.LegacyRange(ledgerPrefix)
		fmt.Fprintf(stdout, "# read-only, until the workers no longer read the ledger's layout before per-project keys (-legacy-ledger=false then)\n")
		fmt.Fprintf(stdout, "etcdctl role grant-permission %s read %s %s\n", role, shellQuote(key), shellQuote(end))
	}
}

// isEnvName reports whether s is a portable shell variable name.
func isEnvName(s string) bool {
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// shellQuote returns s as one shell word: as it is when it holds only characters no shell treats
// specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_.:-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
