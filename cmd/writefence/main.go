// Command writefence inspects, writes and tests fenced mirror records from
// the shell: for operators who must see and settle a shard, and for the CI
// of a store someone wants to trust.
//
// Usage:
//
//	writefence [-store ADDR] [-prefix P] [-timeout D] [-json] <command> [flags] [args]
//
// The store flags (-store, -prefix, -timeout, -json) may come before the
// command's name or among its flags; the command's other flags follow its
// name.
//
// Commands:
//
//	latest  <plugin> <shard>          a shard's epoch, writer, identity, payload size, blobs, tenure floor and version token
//	ls      [plugin]                  every shard under the prefix, with a header: plugin, shard, epoch, writer, status, blobs, bytes, tenure floor; then the leases
//	push    <plugin> <shard>          push a file or stdin at an epoch (-writer, -epoch, -file)
//	blob put <plugin> <shard>         stream a file or stdin into a new blob and print its reference (-writer, -epoch, -file)
//	blob get <plugin> <shard> <name>  write a blob the manifest references to stdout or -out, checked against its reference
//	commit  <plugin> <shard>          commit a manifest that adds (-add REF) and drops (-drop NAME) blob references at an epoch
//	gc      <plugin> <shard>          delete the blobs no manifest can reference (-grace, -dry-run); say what it kept and why
//	brand   claim|verify|install      hold the store's brand key (-identity)
//	probe                             prove that the store's conditional write is real
//	race                              race N writers over M rounds on a scratch shard, check one lands per round
//	doctor                            check the store's settings that can lose a record or an acknowledged write (scratch writes unless -writes=false), with the fix for each
//	policy s3                         print an S3 bucket policy that refuses unconditional writes and deletes of records (-bucket, -prefix)
//	settle  <plugin> <shard>          overwrite a corrupt record, only with -confirm-version of exactly that record
//	demo                              race writers on the in-memory store and show what the fence does
//	exec    [plugin/shard] -- prog    hold a lease, seal the shards, run prog while it is held, its pushes fenced at its term
//	version                           the module version and VCS revision the command was built from
//	init                              create the store's directory, bucket, table or container if it does not exist
//	seal    <plugin> <shard>          raise a shard's recorded epoch without changing its payload (-writer, -epoch)
//	lease show <name>                 a lease's holder, term, expiry and version
//	lease release <name>              release a lease for a holder that is gone (-holder)
//
// Run "writefence help <command>" for a command's flags and examples.
//
// # Store addresses
//
// -store names the store, before the command or among its flags:
//
//	file:///path                      a directory on this host (NewDirConditionalStore), shared by its processes
//	mem://                            in memory, gone when the command exits (for race and trying things out)
//	's3://bucket?endpoint=host:port'  an S3 API bucket; &secure=false for plain HTTP, &region=R
//	gs://bucket                       a Cloud Storage bucket; ?endpoint=http://host:port for an emulator
//	valkey://host:port/db             a standalone Valkey or Redis server, database db; ?script=1 for the script path
//	valkeys://host:port/db            the same over TLS (or valkey://...?tls=true)
//	valkey+cluster://host:port,...    a Valkey or Redis cluster, through any of its nodes (valkeys+cluster:// over TLS)
//	dynamodb://table                  a DynamoDB table (dynamostore); ?region=R, ?endpoint=http://host:port for a local server
//	etcd://host:port/prefix           etcd (etcdstore), keys under /prefix/; ?max-request-bytes=N for the server's limit
//	etcds://host:port/prefix          the same over TLS (or etcd://...?tls=true)
//	azblob://container                an Azure Blob container; ?endpoint=URL for another endpoint (Azurite)
//	'postgres://host:port/db?table=T' a PostgreSQL table (default writefence); &create=true lets a write create it
//
// "writefence help stores" prints the addresses and where each store's
// credentials come from.
//
// A Valkey address takes wait=N: a write counts as landed only once N
// replicas acknowledged it (StoreOptions.WaitReplicas), and reads
// are confirmed the same way; fewer within wait-timeout=D (default 1s) is an
// unknown outcome, exit 8. Without it a primary acknowledges a push before
// any replica has it, and a failover can lose it: set wait= on every
// replicated server. Over TLS the server's certificate is checked against
// the host's CAs; SSL_CERT_FILE or SSL_CERT_DIR name others.
//
// Quote an address that holds ? or & in the shell: unquoted, & ends the
// command and runs it in the background without the rest of the address.
//
// A store that does not exist (a directory that holds none, a bucket, table
// or container that is missing) is refused by every command, exit 1,
// naming "writefence init", which creates it; a command that writes creates
// it with -create instead. So a mistyped address never becomes a new store
// in which any epoch lands. Commands that only read (latest, ls, brand
// verify, lease show) never create a store, and read a directory store
// without its lock, so a user who may read it but not write it can;
// file:/// is refused. Before its first request a command checks that the
// store answers: an address where nothing listens fails at once, and so
// does a Valkey address with wait=N whose server has fewer than N replicas
// online, or a cluster node under valkey:// rather than valkey+cluster://.
//
// -blobs ADDR (or $WRITEFENCE_BLOBS) keeps the blobs (blob put, blob get,
// commit, gc, ls) in another store than the records, under the same
// prefix: records in DynamoDB, etcd, PostgreSQL, Azure Blob or Valkey,
// blobs in S3, Cloud Storage or a directory.
//
// A command that writes checks the store's brand first: a brand that is
// installed (brand install) must hold the command's -identity, else exit 5;
// -brand verify also refuses a store without a brand, -brand claim brands an
// empty one, -brand none checks none.
//
// Without -store the command uses $WRITEFENCE_STORE, and without that the
// directory $XDG_STATE_HOME/writefence (~/.local/state/writefence when
// XDG_STATE_HOME is unset). -prefix selects the key prefix, as
// Fence.Prefix does, as a directory: a prefix that does not end in "/"
// gets one (-prefix myapp writes under myapp/).
//
// Credentials never travel in the address or in a flag, so they never land
// in shell history or in a process listing; each store reads its SDK's usual
// environment: S3 takes AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN), then MINIO_ROOT_USER and MINIO_ROOT_PASSWORD (or
// MINIO_ACCESS_KEY and MINIO_SECRET_KEY), then ~/.aws/credentials
// (AWS_PROFILE); Cloud Storage uses application default credentials, or no
// credentials at all when STORAGE_EMULATOR_HOST or ?endpoint= names an
// emulator; Valkey takes VALKEY_USERNAME and VALKEY_PASSWORD, or
// REDISCLI_AUTH as valkey-cli does; DynamoDB uses the AWS SDK's default
// chain (the variables above, AWS_PROFILE and ~/.aws, AWS_REGION for the
// region); etcd takes ETCDCTL_USER and ETCDCTL_PASSWORD, and ETCDCTL_CERT,
// ETCDCTL_KEY and ETCDCTL_CACERT for TLS, as etcdctl does; Azure Blob
// takes AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT and
// AZURE_STORAGE_KEY; PostgreSQL takes what libpq does (PGPASSWORD,
// PGPASSFILE or ~/.pgpass, PGUSER...), and a user, but never a password,
// in the address.
//
// # Exit status
//
//	0   success
//	1   any other error (network, authentication, a refused settle...)
//	2   usage: a bad flag, argument or store address
//	3   not found: the shard was never pushed, or a blob is not referenced (blob get) or does not exist (commit)
//	4   stale epoch: a push at an epoch not above the recorded one was refused
//	5   wire: the brand or the record holds another wire identity
//	6   corrupt: the record failed a decoding check (settle it), or a blob's bytes do not match its reference
//	7   conflict: the record changed under a conditional write
//	8   outcome unknown: a write was sent but its result could not be learned
//	9   untrusted store: the probe saw the store ignore a precondition
//	10  violation: race or demo saw two writers land one epoch, or a record that disagrees with the winner
//	11  at risk: doctor found a store setting that can lose a record or an acknowledged write
//	12  regressed: a record seen before is gone or holds a lower epoch (deleted or restored outside the fence); see settle -lost
//	130 interrupted: SIGINT or SIGTERM stopped the command (a write in flight may have landed)
//
// exec exits with its program's status, or 75 when it stopped the program
// because the lease was lost or about to expire, 126 or 127 when the
// program could not be started or found ("writefence help exec").
//
// A failed write to stdout (a full disk, a closed pipe) is an error (1),
// never a silent success.
//
// With -json every command prints JSON on stdout, on success and on failure
// alike, usage errors included: one object per line (JSON lines); a command
// that reports several things (ls, demo, race) prints several lines. Each
// result object's "outcome" field names the exit status ("ok", "not_found",
// "stale", "usage", ...).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type command struct {
	name     string
	args     string // the synopsis after the name
	nargs    int    // how many positional arguments it requires
	optional int    // how many more it accepts
	summary  string
	help     string // what it does, and examples
	// define adds the command's flags to fs and returns its action, which
	// runs once the flags and the nargs positional arguments are parsed.
	define func(fs *flag.FlagSet, inv *invocation) action
}

type action func(ctx context.Context, inv *invocation, args []string) int

// want describes how many positional arguments c takes.
func (c *command) want() string {
	if c.optional == 0 {
		return strconv.Itoa(c.nargs)
	}
	return fmt.Sprintf("%d to %d", c.nargs, c.nargs+c.optional)
}

// invocation is one run of a command: its outputs and the options given
// before the command's name.
type invocation struct {
	name   string
	stdout io.Writer
	stderr io.Writer
	store  string // the global -store, or ""

	// Set once a store is opened, for the advice an error gets.
	addr    string        // the store's address
	timeout time.Duration // -timeout

	dash int // the index of the first positional argument after "--", -1 without "--"

	stopped <-chan struct{} // closed once a signal stopped the command: run's ctx.Done()
}

// signalled tells whether a signal (SIGINT, SIGTERM) stopped the command.
func (inv *invocation) signalled() bool {
	select {
	case <-inv.stopped:
		return true
	default:
		return false
	}
}

var commands []command

// The command table is filled in init because help refers to it.
func init() {
	commands = []command{
		latestCommand,
		lsCommand,
		pushCommand,
		blobPutCommand,
		blobGetCommand,
		commitCommand,
		gcCommand,
		brandCommand,
		probeCommand,
		raceCommand,
		doctorCommand,
		policyS3Command,
		settleCommand,
		demoCommand,
		execCommand,
		versionCommand,
	}
	commands = append(commands, storeCommands...)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal the default action is back: a second
		// one ends the command at once.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the exit status. A failed
// write to stdout turns a success into an error: a result that was not
// delivered must not look delivered.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := &checkedWriter{w: stdout}
	code := runArgs(ctx, args, out, stderr)
	if out.err != nil {
		fmt.Fprintf(stderr, "writefence: write to stdout: %v\n", out.err)
		if code == exitOK {
			code = exitError
		}
	}
	return code
}

// checkedWriter remembers the first error of its writer.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

// usageFail reports a usage error found before the command ran: the
// message on stderr and, with -json among args, the failure on stdout.
func usageFail(stdout, stderr io.Writer, args []string, msg string) int {
	fmt.Fprintln(stderr, msg)
	if wantsJSON(args) {
		_ = json.NewEncoder(stdout).Encode(failure{Outcome: "usage", Error: msg})
	}
	return exitUsage
}

// wantsJSON tells whether -json is among args, before "--", so that a
// usage error found while parsing them is reported as JSON too.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-json", "--json", "-json=true", "--json=true", "-json=1", "--json=1":
			return true
		}
	}
	return false
}

func runArgs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	global := flag.NewFlagSet("writefence", flag.ContinueOnError)
	global.SetOutput(stderr)
	global.Usage = func() {}
	var flagErr strings.Builder
	global.SetOutput(&flagErr)
	storeAddr := global.String("store", "", "store address")
	var before []string // the other global flags, for the command to parse
	for _, name := range forwardedFlags {
		global.Var(forwardedFlag{name: name, to: &before}, name, "")
	}
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return exitOK
		}
		// One line and a hint: the whole usage would bury the mistake.
		code := usageFail(stdout, stderr, args, "writefence: "+err.Error())
		fmt.Fprintln(stderr, globalFlagsHint)
		return code
	}
	all := args
	args = global.Args()
	if len(args) == 0 {
		usage(stderr)
		return usageFail(stdout, stderr, all, "writefence: no command")
	}
	if args[0] == "help" {
		if len(args) == 1 {
			usage(stdout)
			return exitOK
		}
		if args[1] == "stores" {
			fmt.Fprint(stdout, strings.TrimPrefix(storeHelp, "\n"))
			return exitOK
		}
		if c, _ := lookupArgs(args[1:]); c != nil {
			commandHelp(stdout, c)
			return exitOK
		}
		if group := groupOf(args[1]); group != nil && len(args) == 2 {
			groupHelp(stdout, args[1], group)
			return exitOK
		}
		args = args[1:]
	}
	c, rest := lookupArgs(args)
	if c == nil {
		if group := groupOf(args[0]); group != nil {
			msg := fmt.Sprintf("writefence %s: want a command: %s", args[0], groupVerbs(args[0], group))
			if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
				msg = fmt.Sprintf("writefence: unknown command %q: want %s", args[0]+" "+args[1], groupVerbs(args[0], group))
			}
			code := usageFail(stdout, stderr, all, msg)
			fmt.Fprintln(stderr)
			groupHelp(stderr, args[0], group)
			return code
		}
		code := usageFail(stdout, stderr, all, fmt.Sprintf("writefence: unknown command %q", args[0]))
		fmt.Fprintln(stderr)
		usage(stderr)
		return code
	}
	inv := &invocation{name: c.name, stdout: stdout, stderr: stderr, store: *storeAddr, stopped: ctx.Done()}
	fs := flag.NewFlagSet("writefence "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error comes back from Parse
	fs.Usage = func() {}
	act := c.define(fs, inv)
	given := before
	global.Visit(func(f *flag.Flag) {
		if f.Name == "store" {
			given = append([]string{"-store"}, before...)
		}
	})
	for _, f := range given {
		name, _, _ := strings.Cut(strings.TrimPrefix(f, "-"), "=")
		if fs.Lookup(name) == nil {
			code := usageFail(stdout, stderr, all, fmt.Sprintf("writefence %s: the command takes no -%s", c.name, name))
			fmt.Fprintf(stderr, "run \"writefence help %s\" for its flags and examples\n", c.name)
			return code
		}
	}
	// The flags given before the command's name come first, so that the
	// same flag among the command's own wins, as it does for -store.
	pos, dash, err := parseArgs(fs, append(before, rest...))
	inv.dash = dash
	switch {
	case errors.Is(err, flag.ErrHelp):
		commandHelp(stdout, c)
		return exitOK
	case err != nil:
		code := usageFail(stdout, stderr, all, "writefence "+c.name+": "+err.Error())
		fmt.Fprintf(stderr, "run \"writefence help %s\" for its flags and examples\n", c.name)
		return code
	case len(pos) < c.nargs || len(pos) > c.nargs+c.optional:
		return usageFail(stdout, stderr, all, fmt.Sprintf("writefence %s: want %s arguments (%s), got %d", c.name, c.want(), c.args, len(pos)))
	}
	return act(ctx, inv, pos)
}

// forwardedFlags are the store flags, besides -store, that may come
// before the command's name as well as after it: each command parses them
// itself, with its own default (race's -timeout is not latest's).
var forwardedFlags = []string{"prefix", "timeout", "json"}

// globalFlagsHint follows an unknown flag before the command's name.
const globalFlagsHint = `run "writefence help" for the commands and their flags; a command's own flags follow its name`

// forwardedFlag is a global flag handed on to the command: Set appends it
// to the command's arguments.
type forwardedFlag struct {
	name string
	to   *[]string
}

func (f forwardedFlag) String() string { return "" }

func (f forwardedFlag) Set(v string) error {
	*f.to = append(*f.to, "-"+f.name+"="+v)
	return nil
}

// IsBoolFlag lets -json stand alone, as the commands' own -json does.
func (f forwardedFlag) IsBoolFlag() bool { return f.name == "json" }

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// lookupArgs finds the command args start with, and returns it and the
// arguments after its name: a command of two words ("blob put") is named
// by the first two arguments.
func lookupArgs(args []string) (*command, []string) {
	if len(args) >= 2 {
		if c := lookup(args[0] + " " + args[1]); c != nil {
			return c, args[2:]
		}
	}
	if len(args) >= 1 {
		if c := lookup(args[0]); c != nil {
			return c, args[1:]
		}
	}
	return nil, nil
}

// groupOf returns the commands whose name is word followed by a verb
// ("blob" for "blob put" and "blob get"), or nil.
func groupOf(word string) []*command {
	var group []*command
	for i := range commands {
		if first, _, ok := strings.Cut(commands[i].name, " "); ok && first == word {
			group = append(group, &commands[i])
		}
	}
	return group
}

// groupVerbs lists the verbs of a group of commands, as "put or get".
func groupVerbs(word string, group []*command) string {
	verbs := make([]string, len(group))
	for i, c := range group {
		verbs[i] = strings.TrimPrefix(c.name, word+" ")
	}
	return strings.Join(verbs, " or ")
}

// groupHelp lists the commands of a group, for "writefence help blob".
func groupHelp(w io.Writer, word string, group []*command) {
	fmt.Fprintf(w, "usage: writefence %s %s [flags] [args]\n\ncommands:\n", word, strings.ReplaceAll(groupVerbs(word, group), " or ", "|"))
	width := 0
	for _, c := range group {
		width = max(width, len(c.name))
	}
	for _, c := range group {
		fmt.Fprintf(w, "  %-*s %s\n", width, c.name, c.summary)
	}
	fmt.Fprintf(w, "\nrun \"writefence help %s\" for a command's flags and examples\n", group[0].name)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: writefence [-store ADDR] [-prefix P] [-timeout D] [-json] <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s %s\n", width, c.name, c.summary)
	}
	fmt.Fprint(w, storeHelp)
	fmt.Fprint(w, exitHelp())
	fmt.Fprintln(w, "\nexamples:")
	fmt.Fprintln(w, "  writefence demo")
	fmt.Fprintln(w, "  writefence -store file:///tmp/wf latest wal shard-0")
	fmt.Fprintln(w, "  writefence -store 's3://mirrors?endpoint=127.0.0.1:9000&secure=false' ls")
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
store addresses (-store, before the command or among its flags; quote one holding ? or &):
  file:///path                      a directory on this host, shared by its processes
  mem://                            in memory, gone when the command exits
  's3://bucket?endpoint=host:port'  an S3 API bucket ('...&secure=false' for plain HTTP, '...&region=R')
  gs://bucket                       a Cloud Storage bucket ('gs://bucket?endpoint=http://host:port' for an emulator;
                                    '...?project=ID': the project init creates the bucket in, default $GOOGLE_CLOUD_PROJECT)
  valkey://host:port/db             a standalone Valkey or Redis server ('valkey://host:port/db?script=1': one-round-trip writes)
                                    with replicas: 'valkey://host:port/db?wait=N&wait-timeout=D': a write lands only once
                                    N replicas acknowledge it within D (default 1s), else exit 8; without wait= a
                                    failover can lose an acknowledged push
  valkeys://host:port/db            the same over TLS (or '...?tls=true'); the host's CAs, or SSL_CERT_FILE, check the server
  valkey+cluster://host:port,...    a Valkey or Redis cluster, through any of its nodes (valkeys+cluster:// over TLS);
                                    script=, wait= and wait-timeout= as for valkey://, wait=N counting the replicas of
                                    the primary that owns each record's slot
  dynamodb://table                  a DynamoDB table keyed by the string "key" ('...?region=R', '...?endpoint=http://host:port'
                                    for a local server); items up to 400 KB; init creates the table
  etcd://host:port/prefix           etcd, keys under /prefix/ ('...?max-request-bytes=N' when the server's is not 1.5 MiB)
  etcds://host:port/prefix          the same over TLS (or '...?tls=true'); ETCDCTL_CACERT, else the host's CAs, check the server
  azblob://container                an Azure Blob container ('azblob://container?endpoint=URL': the account's URL, e.g.
                                    Azurite's http://127.0.0.1:10000/devstoreaccount1)
  'postgres://[user@]host:port/db?table=T'
                                    a PostgreSQL table (default table writefence); '...&create=true': a write creates the
                                    table and its sequence if missing; the other parameters are pgx's (sslmode=...)
  default: $WRITEFENCE_STORE, else file://$XDG_STATE_HOME/writefence (~/.local/state/writefence)
  a store that does not exist is refused: writefence init creates its directory, bucket, table or container
  (or -create, on a command that writes); reads (latest, ls, brand verify, lease show) never create one
  -blobs ADDR (or $WRITEFENCE_BLOBS): the blobs in another store than the records, under the same -prefix
credentials come from the environment only:
  S3            AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; or MINIO_ROOT_USER, MINIO_ROOT_PASSWORD;
                or ~/.aws/credentials (AWS_PROFILE)
  Cloud Storage application default credentials; none with STORAGE_EMULATOR_HOST or an endpoint=
  Valkey        VALKEY_USERNAME and VALKEY_PASSWORD, or REDISCLI_AUTH
  DynamoDB      the AWS SDK's: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN); AWS_PROFILE, ~/.aws; AWS_REGION
  etcd          ETCDCTL_USER (name or name:password) and ETCDCTL_PASSWORD; ETCDCTL_CERT and ETCDCTL_KEY for a client certificate
  Azure Blob    AZURE_STORAGE_CONNECTION_STRING; or AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY (a shared key)
  PostgreSQL    PGPASSWORD or PGPASSFILE (~/.pgpass), PGUSER (or the address's user), and libpq's other PG* variables
`

// parseArgs parses flags wherever they appear among args (the flag package
// stops at the first non-flag) and returns the positional arguments, and
// the index among them of the first one after "--" (-1 without "--").
// Everything after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, int, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, -1, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, -1, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), len(pos), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
