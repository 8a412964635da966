package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var execCommand = command{
	name:     "exec",
	args:     "[plugin/shard ...] -- <program> [args ...]",
	optional: math.MaxInt32,
	summary:  "hold a lease and run a program only while it is held, its pushes fenced at its term",
	help: `
Runs a program that did not know about fencing (a shell script, a
replication or backup tool) under a lease on the store, and gives it a
term whose epochs the store checks, so that once another supervisor holds
the lease every write the program makes through "writefence push -term"
is refused. In order, exec:

 1. takes the lease -lease as -holder (Lease.Hold), waiting while another
    holder holds it: it tries again when that holder's term would end, and
    at least every -ttl/4 (the holder may release it). Hold renews the
    lease every -ttl/3 from then on;
 2. seals each plugin/shard named before "--" at the new term (a plugin
    name cannot hold "/" here; a shard name can), so that every later
    write of the previous holder's program to them is refused;
 3. only then starts the program, with in its environment
      WRITEFENCE_STORE     the store's address (every command's default -store)
      WRITEFENCE_PREFIX    the key prefix
      WRITEFENCE_LEASE     the lease's name
      WRITEFENCE_HOLDER    -holder, the writer of the seals and of -term
      WRITEFENCE_IDENTITY  -identity, the wire identity of the seals and of -term
      WRITEFENCE_TERM      the term: writefence push -term "$WRITEFENCE_TERM"
                           <plugin> <shard> pushes at epochs of it, strictly
                           rising across separate runs of push (blob put and
                           commit take -term too);
 4. stops the program, SIGTERM to its process group then SIGKILL -grace
    later, before its term can end: as soon as the lease is found lost,
    or when this supervisor's clock says -ttl/8 + -grace of the term is
    left (renewals did not land: they land every -ttl/3, with -ttl*2/3
    left); SIGKILL comes -ttl/8 before the term ends at the latest;
 5. releases the lease once the program has exited, and exits with the
    program's status; or, when it stopped the program for the lease,
    exits 75, or with -restart goes back to 1 and runs the program again
    in a new term.

The margin, -ttl/8 before the term ends by this supervisor's clock, is
what a contender's takeover waits for at the least. It covers a timer of
the supervisor firing late on a loaded machine, the kernel ending the
program's group, and the holders' clocks disagreeing by less than it:
within these the program is gone before any other supervisor can take the
lease, so two programs never run at once. -grace is at most -ttl/8, so
that a single renewal that fails or is slow does not stop the program.

What exec cannot do: a supervisor that is itself paused (SIGSTOP, a
frozen VM, a swap storm) or that cannot run cannot stop its program. The
program runs on past its term until the supervisor runs again, which then
stops it at once: SIGTERM, and SIGKILL -grace later. Meanwhile it is the
fence, not the supervisor, that keeps the store safe: the next holder has
sealed the shards, so every write the old program makes through push
-term is refused (exit 4), as long as the store keeps the record (a
record deleted after the seal makes the next push a first write: run
writefence doctor), while writes that bypass the fence (a plain "aws s3
cp") are not protected by anything. On Linux a supervisor that is
killed takes its program with it (SIGKILL), but not what the program
started in the background.

The program's standard input, output and error are exec's. It runs in a
process group of its own, so that a stop reaches everything it started:
exec passes SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 on to
that group, and after the first four ends once the program has (no
restart). In a terminal the program is not in the foreground group and
cannot read the terminal. When the program exits, what it left running in
its group is killed before the lease is released; so a program must not
put itself in the background (fork, setsid, and exit): exec would take
its exit for the end of its work.

-timeout bounds the wait for the lease (0, the default, waits as long as
it takes). A store that does not exist is refused unless -create is given,
and an installed brand is verified (-brand), as for every command that
writes. An unreachable store, or one that refuses the lease record, fails
exec before the first term; after a term, with -restart, exec tries again
every -ttl/4. A seal refused as stale three times in a row is final: the
shard records a term the lease has not reached. "writefence lease show
NAME" shows who holds the lease, at which term, until when.

exit status: the program's own (128+n when signal n ended it), or
  75   the lease was lost or about to expire and exec stopped the program
       (without -restart), or -timeout passed before the lease was held
  126  the program was found but could not be started
  127  the program was not found
  130  interrupted before the program started
  and the statuses below for a store that fails or a usage error

examples:
  writefence exec -store file:///var/lib/wf -lease wal -holder "$(hostname)" wal/0 -- ./ship.sh
  writefence exec -store 's3://mirrors?endpoint=127.0.0.1:9000&secure=false' -lease app-db \
      -holder node-a -ttl 30s -restart -- litestream replicate -exec ./app
  # in ship.sh: push under the term, stop once refused (exit 4)
  tar -c data | writefence push -term "$WRITEFENCE_TERM" wal 0 || exit`,
	define: defineExec,
}

// Exec's defaults.
const (
	defaultExecTTL = 20 * time.Second
	minExecTTL     = 100 * time.Millisecond
)

// optDuration is a duration flag whose default depends on other flags.
type optDuration struct {
	set bool
	d   time.Duration
}

func (o *optDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 2s or 500ms")
	}
	o.set, o.d = true, d
	return nil
}

func defineExec(fs *flag.FlagSet, inv *invocation) action {
	addr := fs.String("store", inv.store, "store `address` (default $WRITEFENCE_STORE, else the state directory)")
	var prefix string
	fs.Var((*prefixValue)(&prefix), "prefix", "key `prefix`, a directory: myapp means myapp/ (default "+keys.DefaultPrefix+")")
	var wait time.Duration
	fs.Var((*durationValue)(&wait), "timeout", "give up waiting for the lease after this `duration` (0: wait as long as it takes)")
	create := fs.Bool("create", false, "create the store (a directory, bucket, table or container) if it does not exist, as init does")
	brand := addBrandFlag(fs)
	name := fs.String("lease", "", "`name` of the lease (required)")
	holder := fs.String("holder", "", "`name` of this supervisor: the lease's holder, and the writer of the seals and of the program's pushes; unique among the contenders (required)")
	ttl := fs.Duration("ttl", defaultExecTTL, "the lease's TTL: how long a contender waits after the last renewal of a holder that stopped")
	grace := &optDuration{}
	fs.Var(grace, "grace", "how long from SIGTERM to SIGKILL when the program is stopped (a `duration`), at most -ttl/8 (default -ttl/8)")
	restart := fs.Bool("restart", false, "when the program was stopped for the lease, wait for the lease again and run it again in the new term")
	identity := fs.String("identity", "", "wire `identity` of the seals' records (default "+defaults.Identity+")")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := &output{inv: inv}
		if inv.dash < 0 || inv.dash >= len(args) {
			return o.fail(usagef(`writefence exec: want the program to run after "--": writefence exec -lease NAME -holder ID [plugin/shard ...] -- program [args ...]`))
		}
		shards, err := parseShards(args[:inv.dash])
		if err != nil {
			return o.fail(err)
		}
		argv := args[inv.dash:]
		p := policy{ttl: *ttl, grace: *ttl / 8, restart: *restart, wait: wait}
		if grace.set {
			p.grace = grace.d
		}
		switch {
		case *name == "":
			return o.fail(usagef("writefence exec: -lease is required: the name of the lease the program runs under"))
		case *holder == "":
			return o.fail(usagef("writefence exec: -holder is required: a name for this supervisor, unique among those that contend for the lease (the host's name, say)"))
		case *ttl < minExecTTL:
			return o.fail(usagef("writefence exec: -ttl %v: want %v at least", *ttl, minExecTTL))
		case p.grace < 0 || p.grace > p.margin():
			return o.fail(usagef("writefence exec: -grace %v: want 0 to -ttl/8 (%v); raise -ttl for a longer grace", p.grace, p.margin()))
		}
		n := names{prefix: prefix, identity: *identity, writers: []string{*holder}, leases: []string{*name}}
		for _, s := range shards {
			n.shards = append(n.shards, [2]string{s.Plugin, s.Shard})
		}
		if err := n.check(); err != nil {
			return o.fail(err)
		}
		path, code, err := lookProgram(argv[0])
		if err != nil {
			fmt.Fprintln(inv.stderr, message(err))
			return code
		}

		sf := &storeFlags{inv: inv, addr: *addr, prefix: prefix, create: *create}
		address, err := storeAddress(sf.addr)
		if err != nil {
			return o.fail(err)
		}
		inv.addr = address
		s, err := openStore(ctx, address)
		if err != nil {
			return o.fail(err)
		}
		defer s.close()
		if _, err := sf.prepare(ctx, s, false); err != nil {
			return o.fail(err)
		}
		fence, err := sf.writeFence(ctx, s, *identity, *brand)
		if err != nil {
			return o.fail(err)
		}
		env := execEnv(os.Environ(), map[string]string{
			envStore:    address,
			envPrefix:   cmp.Or(prefix, keys.DefaultPrefix),
			envLease:    *name,
			envHolder:   *holder,
			envIdentity: cmp.Or(*identity, defaults.Identity),
		})
		in, out, errOut := passThrough(stdin, inv.stdout, inv.stderr)

		signals := make(chan os.Signal, 8)
		signal.Notify(signals, forwardedSignals...)
		defer signal.Stop(signals)
		sup := &supervisor{
			p:      p,
			name:   escape.String(*name),
			shards: shards,
			newLease: func() leaseHolder {
				return &writefence.Lease{Fence: fence, Name: *name, Holder: *holder, TTL: *ttl}
			},
			start: func(term uint64) (program, int, error) {
				pr, err := startProc(path, argv, append(env, envTerm+"="+strconv.FormatUint(term, 10)), in, out, errOut)
				if err != nil {
					return nil, exitCannotRun, fmt.Errorf("writefence exec: cannot start %s: %w", escape.String(argv[0]), err)
				}
				return pr, 0, nil
			},
			signals:     signals,
			terminating: terminatingSignal,
			logf: func(format string, a ...any) {
				line := strings.TrimPrefix(fmt.Sprintf(format, a...), "writefence: ")
				fmt.Fprintf(inv.stderr, "writefence exec: %s\n", strings.TrimPrefix(line, "writefence exec: "))
			},
			advise: func(err error) error { return advise(err, inv) },
		}
		return sup.run(ctx)
	}
}

// parseShards parses the shards exec seals, each plugin/shard, split at
// the first "/".
func parseShards(args []string) ([]writefence.Shard, error) {
	shards := make([]writefence.Shard, 0, len(args))
	for _, a := range args {
		plugin, shard, ok := strings.Cut(a, "/")
		if !ok || plugin == "" || shard == "" {
			return nil, usagef("writefence exec: %s: want plugin/shard, such as wal/0, for each shard to seal before %q", escape.String(a), "--")
		}
		shards = append(shards, writefence.Shard{Plugin: plugin, Shard: shard})
	}
	return shards, nil
}

// lookProgram finds the program as a shell would, before any lease is
// taken: a program that is not there fails at once (127), not after a
// takeover that would depose a working holder for nothing.
func lookProgram(name string) (string, int, error) {
	path, err := exec.LookPath(name)
	switch {
	case err == nil:
		return path, 0, nil
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return "", exitNoProgram, fmt.Errorf("writefence exec: %s: program not found (PATH, or a path to it)", escape.String(name))
	}
	return "", exitCannotRun, fmt.Errorf("writefence exec: %s: %w", escape.String(name), err)
}

// execEnv returns environ without the variables exec sets, and with
// those of set (the term is added per term).
func execEnv(environ []string, set map[string]string) []string {
	env := make([]string, 0, len(environ)+len(set))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if _, mine := set[k]; !mine && k != envTerm {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		env = append(env, k+"="+set[k])
	}
	return slices.Clip(env)
}

// passThrough returns the streams the program gets: exec's own files
// where they are files (a terminal stays a terminal, a closed pipe is the
// program's to see), else the writers themselves.
func passThrough(in io.Reader, out, errOut io.Writer) (io.Reader, io.Writer, io.Writer) {
	if c, ok := out.(*checkedWriter); ok {
		if f, ok := c.w.(*os.File); ok {
			out = f
		}
	}
	return in, out, errOut
}
