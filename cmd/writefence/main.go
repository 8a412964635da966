// Command writefence runs the fence from the shell.
//
// Usage:
//
//	writefence demo [-writers N] [-epochs N] [-seed N]
//
// demo races writers for one shard on the embedded in-memory store, prints
// what landed and what was refused and why, and checks the fence's
// invariants: no epoch lands twice and the recorded epoch only rises. It
// exits 1 if an invariant broke.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
)

// exit codes
const (
	exitOK        = 0
	exitViolation = 1
	exitUsage     = 2
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = []command{
	{"demo", "race writers on one shard of the in-memory store and check the invariants", runDemo},
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "writefence: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: writefence <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nexample:\n  writefence demo -writers 8 -epochs 24")
}

// newFlagSet returns a flag set whose errors and help go to stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("writefence "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
