// Command mediator is Mediator's command line: submit a run from a YAML or JSON file and follow
// it to its end, list and inspect runs, cancel them, and look at the queue, the fleet and the
// leases — over the HTTP API, through shared/client, with a bearer token or AWS SigV4.
//
// It is built on cobra because it is one binary with many subcommands, each with flags of its
// own, over global flags they all share (--url, --token, --auth, --output): cobra gives that
// tree, flags inherited down it, help and usage for every command, and shell completion,
// which the standard flag package would have to be taught by hand. A command is a
// func(*app) *cobra.Command listed in commands (root.go); app hands every command the global
// flags and the API client, so a node-side command (an agent that heartbeats and runs steps)
// sits in the same tree on the same terms as the client-side ones.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], system())
	stop()
	os.Exit(code)
}
