// Package opscli holds the operator commands that cmd/baton and cmd/demo-worker share: their
// configuration (the worker's BATON_* variables, TLS and credentials, then flags), the status table
// read straight from etcd, Temporal and Redis, and the Redis ACL. Each command is a function that
// takes its program name, arguments and output streams and returns the exit code.
package opscli
