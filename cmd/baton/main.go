// Command baton is the operator's command for a Baton deployment. It is configured like a worker
// (the BATON_* variables of baton.EnvVars and clients.EnvVars: endpoints, TLS files,
// credentials), then flags; secrets come only from the environment or -*-file flags. It reads etcd,
// Temporal and Redis directly, so it works with every worker down, and changes nothing unless a
// subcommand says so.
//
//	baton status            who leads each queue, its dispatcher run, heartbeat and workers: live
//	                        and evicted; those that left cleanly are summed up, listed with -offline
//	                        (-json)
//	baton verify            judge the deployment against Baton's invariants: 0 ok, 1 violations,
//	                        2 could not judge (-json; -since DURATION|RFC3339|REVISION judges only
//	                        what happened after that point)
//	baton ledger KEY        a dispatch request's record: not begun, pending or done, by which owner;
//	                        KEY is a dispatch key (64 hex digits), anything else is refused
//	baton ledger find -type T -id ID -payload-sha256 H [-parent P]
//	                        a request's dispatch key from the fields the producer hashes
//	                        (dispatcher.Request.Key), and its record
//	baton transfer [-project P] QUEUE [-to SERVER]
//	                        move a queue's leadership gracefully to SERVER or the best candidate,
//	                        through the designated-successor path, and wait for it (writes)
//	baton drain SERVER      ask worker SERVER to hand its queues over and stand for none, then wait
//	                        until it leads none and print where each went (-wait=false: do not wait;
//	                        -timeout) (writes)
//	baton undrain SERVER    take a drain back (writes)
//	baton acl redis         the Redis ACL SETUSER command for a Baton user of this configuration
//	baton acl etcd          the etcdctl commands for a role and user with exactly Baton's prefixes,
//	                        and the application's own (-extra-prefix), runnable unattended: the
//	                        password comes from a variable or a file when they run
//	                        (-new-password-env, -new-password-file)
//
// `baton <command> -h` lists a command's flags.
//
// # Exit codes
//
//	0  done; status: etcd answered (other sources may show "?"); verify: no violation
//	1  a server could not be read or written, or the worker named is not registered; verify: a
//	   violation
//	2  invalid configuration or usage (the message names the field, flag or variable); verify: a
//	   server could not be read, so not everything was judged
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/baton-run/baton/internal/opscli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = "usage: baton status | verify | ledger KEY | ledger find -type T -id ID ... | transfer [-project P] QUEUE [-to SERVER] | drain SERVER | undrain SERVER | acl redis | acl etcd   (baton <command> -h for its flags)"

// run is the whole command: it reads the environment of the process, parses args and returns the
// exit code. ctx ends when the process is asked to stop.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return opscli.ExitConfig
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "status":
		return opscli.Status(ctx, "baton", args, stdout, stderr)
	case "verify":
		return opscli.Verify(ctx, "baton", args, stdout, stderr)
	case "ledger":
		return opscli.Ledger(ctx, "baton", args, stdout, stderr)
	case "transfer":
		return opscli.Transfer(ctx, "baton", args, stdout, stderr)
	case "drain", "undrain":
		return opscli.Drain(ctx, "baton", cmd == "undrain", args, stdout, stderr)
	case "acl":
		if len(args) > 0 {
			switch args[0] {
			case "redis":
				return opscli.RedisACL("baton acl redis", args[1:], stdout, stderr)
			case "etcd":
				return opscli.EtcdACL("baton acl etcd", args[1:], stdout, stderr)
			}
		}
		fmt.Fprintln(stderr, "baton acl: want redis or etcd")
		return opscli.ExitConfig
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return opscli.ExitOK
	}
	fmt.Fprintf(stderr, "baton: unknown command %q\n%s\n", cmd, usage)
	return opscli.ExitConfig
}
