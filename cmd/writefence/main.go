// Command writefence inspects, writes and tests fenced mirror records from
// the shell: for operators who must see and settle a shard, and for the CI
// of a store someone wants to trust.
//
// Usage:
//
//	writefence [-store ADDR] <command> [flags] [args]
//
// Commands:
//
//	latest  <plugin> <shard>        a shard's epoch, writer, identity, payload size and version token
//	push    <plugin> <shard>        push a file or stdin at an epoch (-writer, -epoch, -file)
//	brand   claim|verify|install    hold the store's brand key (-identity)
//	probe                           prove that the store's conditional write is real
//	race                            race N writers over M rounds on a scratch shard, check one lands per round
//	settle  <plugin> <shard>        overwrite a corrupt record, only with -confirm-version of exactly that record
//	demo                            race writers on the in-memory store and show what the fence does
//
// Run "writefence help <command>" for a command's flags and examples.
//
// # Store addresses
//
// -store names the store, before the command or among its flags:
//
//	file:///path                    a directory on this host (DirConditionalStore), shared by its processes
//	mem://                          in memory, gone when the command exits (for race and trying things out)
//	s3://bucket?endpoint=host:port  an S3 API bucket; &secure=false for plain HTTP, &region=R
//	gs://bucket                     a Cloud Storage bucket; ?endpoint=http://host:port for an emulator
//	valkey://host:port/db           a standalone Valkey or Redis server, database db; ?script=1 for the script path
//
// Without -store the command uses $WRITEFENCE_STORE, and without that the
// directory $XDG_STATE_HOME/writefence (~/.local/state/writefence when
// XDG_STATE_HOME is unset). -prefix selects the key prefix, as
// Fence.Prefix does.
//
// Credentials never travel in the address or in a flag, so they never land
// in shell history or in a process listing; each store reads its SDK's usual
// environment: S3 takes AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN), then MINIO_ROOT_USER and MINIO_ROOT_PASSWORD (or
// MINIO_ACCESS_KEY and MINIO_SECRET_KEY), then ~/.aws/credentials
// (AWS_PROFILE); Cloud Storage uses application default credentials, or no
// credentials at all when STORAGE_EMULATOR_HOST or ?endpoint= names an
// emulator; Valkey takes VALKEY_USERNAME and VALKEY_PASSWORD, or
// REDISCLI_AUTH as valkey-cli does.
//
// # Exit status
//
//	0   success
//	1   any other error (network, authentication, a refused settle...)
//	2   usage: a bad flag, argument or store address
//	3   not found: the shard was never pushed
//	4   stale epoch: a push at an epoch not above the recorded one was refused
//	5   wire: the brand or the record holds another wire identity
//	6   corrupt: the record failed a decoding check (settle it)
//	7   conflict: the record changed under a conditional write
//	8   outcome unknown: a write was sent but its result could not be learned
//	9   untrusted store: the probe saw the store ignore a precondition
//	10  violation: race or demo saw two writers land one epoch, or a record that disagrees with the winner
//
// With -json, latest, push, brand, probe, race and settle print one JSON
// object on stdout, on success and on failure alike; its "outcome" field
// names the exit status ("ok", "not_found", "stale", ...).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

type command struct {
	name    string
	args    string // the synopsis after the name
	nargs   int    // how many positional arguments it takes
	summary string
	help    string // what it does, and examples
	// define adds the command's flags to fs and returns its action, which
	// runs once the flags and the nargs positional arguments are parsed.
	define func(fs *flag.FlagSet, inv *invocation) action
}

type action func(ctx context.Context, inv *invocation, args []string) int

// invocation is one run of a command: its outputs and the options given
// before the command's name.
type invocation struct {
	name   string
	stdout io.Writer
	stderr io.Writer
	store  string // the global -store, or ""
}

var commands []command

// The command table is filled in init because help refers to it.
func init() {
	commands = []command{
		latestCommand,
		pushCommand,
		brandCommand,
		probeCommand,
		raceCommand,
		settleCommand,
		demoCommand,
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	global := flag.NewFlagSet("writefence", flag.ContinueOnError)
	global.SetOutput(stderr)
	global.Usage = func() {}
	storeAddr := global.String("store", "", "store address")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return exitOK
		}
		fmt.Fprintln(stderr)
		usage(stderr)
		return exitUsage
	}
	args = global.Args()
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	if args[0] == "help" {
		if len(args) == 1 {
			usage(stdout)
			return exitOK
		}
		if c := lookup(args[1]); c != nil {
			commandHelp(stdout, c)
			return exitOK
		}
		args = args[1:]
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "writefence: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	inv := &invocation{name: c.name, stdout: stdout, stderr: stderr, store: *storeAddr}
	fs := flag.NewFlagSet("writefence "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	act := c.define(fs, inv)
	pos, err := parseArgs(fs, args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		commandHelp(stdout, c)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "run \"writefence help %s\" for its flags and examples\n", c.name)
		return exitUsage
	case len(pos) != c.nargs:
		fmt.Fprintf(stderr, "writefence %s: want %d arguments (%s), got %d\n", c.name, c.nargs, c.args, len(pos))
		return exitUsage
	}
	return act(ctx, inv, pos)
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: writefence [-store ADDR] <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-7s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, storeHelp)
	fmt.Fprint(w, exitHelp())
	fmt.Fprintln(w, "\nexamples:")
	fmt.Fprintln(w, "  writefence demo")
	fmt.Fprintln(w, "  writefence -store file:///tmp/wf latest wal shard-0")
	fmt.Fprintln(w, "  writefence help push")
}

func commandHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "usage: writefence %s [flags] %s\n\n%s.\n", c.name, c.args, c.summary)
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.define(fs, &invocation{name: c.name, stdout: io.Discard, stderr: io.Discard})
	fmt.Fprintln(w, "\nflags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.help))
	fmt.Fprint(w, exitHelp())
}

const storeHelp = `
store addresses (-store, before the command or among its flags):
  file:///path                    a directory on this host, shared by its processes
  mem://                          in memory, gone when the command exits
  s3://bucket?endpoint=host:port  an S3 API bucket (&secure=false for plain HTTP, &region=R)
  gs://bucket                     a Cloud Storage bucket (?endpoint=http://host:port for an emulator)
  valkey://host:port/db           a standalone Valkey or Redis server (?script=1: one-round-trip writes)
  default: $WRITEFENCE_STORE, else file://$XDG_STATE_HOME/writefence (~/.local/state/writefence)
credentials come from the environment only:
  S3            AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; or MINIO_ROOT_USER, MINIO_ROOT_PASSWORD;
                or ~/.aws/credentials (AWS_PROFILE)
  Cloud Storage application default credentials; none with STORAGE_EMULATOR_HOST or ?endpoint=
  Valkey        VALKEY_USERNAME and VALKEY_PASSWORD, or REDISCLI_AUTH
`

// parseArgs parses flags wherever they appear among args (the flag package
// stops at the first non-flag) and returns the positional arguments.
// Everything after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
