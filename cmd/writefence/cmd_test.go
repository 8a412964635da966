package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/testserver"
)

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// wf runs the command in-process with args.
func wf(t *testing.T, args ...string) result {
	t.Helper()
	return wfContext(context.Background(), args...)
}

// wfContext runs the command in-process with args under ctx, as a signal
// ends ctx.
func wfContext(ctx context.Context, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func (r result) String() string {
	return "exit " + itoa(r.code) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

func itoa(n int) string { return strconv.Itoa(n) }

// jsonOf decodes the command's -json output.
func jsonOf(t *testing.T, r result) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m), "%s", r)
	return m
}

// testStores are the stores the tests reach by address, scheme://name:
// each function returns the store of a name, each time the command opens
// one.
var testStores = map[string]func(name string) (writefence.ConditionalStore, error){
	// shared://N is the MemStore N of sharedMem, which outlives a run of
	// the command, so that a test can put, commit and get across runs
	// (mem:// is a fresh store each run).
	"shared": func(name string) (writefence.ConditionalStore, error) { return sharedStore(name) },
	// sharednoblobs://N is the shared MemStore N seen through the core
	// interface alone: a store of records that holds no blobs, as
	// DynamoDB, etcd, PostgreSQL, Azure Blob and Valkey are.
	"sharednoblobs": func(name string) (writefence.ConditionalStore, error) {
		s, err := sharedStore(name)
		if err != nil {
			return nil, err
		}
		return recordsOnly{s, s}, nil
	},
	// noblobs:// is a store that holds no blobs (it declares no
	// BlobStore).
	"noblobs": func(string) (writefence.ConditionalStore, error) { return noBlobStore{&writefence.MemStore{}}, nil },
	// mispair:// pairs bytes with the previous write's version on every
	// third read under overwrite, as some S3-compatible servers do on a
	// few reads in ten thousand.
	"mispair": func(string) (writefence.ConditionalStore, error) { return &mispairing{}, nil },
	// Broken stores, to prove that probe and race fail on a store that
	// does not fence.
	"ignoring": func(string) (writefence.ConditionalStore, error) { return &ignoringStore{}, nil },
	"blind":    func(string) (writefence.ConditionalStore, error) { return &blindStore{}, nil },
	"garbling": func(string) (writefence.ConditionalStore, error) { return &garblingStore{}, nil },
	// interrupting://N is the interruptingStore a test registered as N.
	"interrupting": func(name string) (writefence.ConditionalStore, error) { return interruptingStoreNamed(name), nil },
	// opaque://N fails every request with an error of its own type that
	// keeps no cause, after calling the function a test registered as N.
	"opaque": func(name string) (writefence.ConditionalStore, error) {
		during, _ := opaqueDuring.Load(name)
		return opaqueStore{during.(func())}, nil
	},
}

func init() {
	for scheme, open := range testStores {
		openers[scheme] = func(_ context.Context, u *url.URL) (*opened, error) {
			s, err := open(u.Host)
			if err != nil {
				return nil, err
			}
			return &opened{store: s, close: noClose}, nil
		}
	}
}

// fileStore returns the address of a fresh directory store, created
// empty: writes never create one without -create.
func fileStore(t *testing.T) string {
	t.Helper()
	return emptyStore(t)
}

// emptyStore returns the address of a fresh directory store that exists
// and holds nothing: reads never create one.
func emptyStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	_, err := writefence.NewDirConditionalStore(dir, nil)
	require.NoError(t, err)
	return (&url.URL{Scheme: "file", Path: dir}).String()
}

// pushedStore returns the address of a fresh directory store where writer
// a pushed the payload file p, "x", to wal/s at epoch 1; and p.
func pushedStore(t *testing.T) (addr, p string) {
	t.Helper()
	addr, p = fileStore(t), writeFile(t, "x")
	r := wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	return addr, p
}

// writeFile writes a payload file and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "payload")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// runMainEnv makes the test binary run the command's main instead of the
// tests (see TestMain), so a test can run the command as a process: real
// stdout, signals, exit status, another user.
const runMainEnv = "WRITEFENCE_TEST_RUN_MAIN"

// wfCommand returns the command line args run as a process of the test
// binary (or of bin, when not empty). Its environment is the test's.
func wfCommand(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	if bin == "" {
		var err error
		bin, err = os.Executable()
		require.NoError(t, err)
	}
	c := exec.Command(bin, args...)
	c.Env = append(os.Environ(), runMainEnv+"=1")
	return c
}

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		// Started by wfProcess: be the command itself.
		os.Args = append([]string{"writefence"}, os.Args[1:]...)
		main()
	}
	goleak.VerifyTestMain(m, testserver.LeakOptions()...)
}

func TestUsage(t *testing.T) {
	r := wf(t)
	assert.Equal(t, exitUsage, r.code)
	for _, c := range commands {
		assert.Contains(t, r.stderr, "  "+c.name+" ", "usage lists %s", c.name)
	}
	assert.Equal(t, exitUsage, wf(t, "nope").code)
	assert.Equal(t, exitUsage, wf(t, "-bogus", "latest").code)
	assert.Equal(t, exitUsage, wf(t, "help", "nope").code)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := wf(t, args...)
		assert.Equal(t, exitOK, r.code, "%v", args)
		assert.Contains(t, r.stdout, "exit status:")
		assert.Contains(t, r.stdout, "VALKEY_PASSWORD")
	}
}

// TestCommandHelp: every command has help with its flags, at least one
// example that names the command, and the exit statuses, both ways of
// asking for it.
func TestCommandHelp(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{"help", c.name}, {c.name, "-h"}, {c.name, "--help"}} {
			r := wf(t, args...)
			require.Equal(t, exitOK, r.code, "%v: %s", args, r)
			assert.Contains(t, r.stdout, "usage: writefence "+c.name)
			assert.Contains(t, r.stdout, "\nexamples:\n", "%v", args)
			assert.Regexp(t, `\n  writefence `+c.name+`[ \n]`, r.stdout, "%v: an example of the command", args)
			assert.Contains(t, r.stdout, "exit status:")
		}
	}
}

// TestExitStatusDocumented: the package comment and --help list the same
// statuses the code returns.
func TestExitStatusDocumented(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	help := exitHelp()
	codes := map[int]bool{}
	for _, o := range outcomes {
		assert.False(t, codes[o.code], "status %d listed twice", o.code)
		codes[o.code] = true
		assert.Contains(t, help, "\n  "+itoa(o.code)+" ", "help lists %d", o.code)
		assert.Contains(t, string(src), "\n//\t"+itoa(o.code)+" ", "package comment lists %d", o.code)
	}
	for code := exitOK; code <= exitRegressed; code++ {
		assert.True(t, codes[code], "status %d has an outcome", code)
	}
	assert.True(t, codes[exitInterrupted])
}

func TestArgCount(t *testing.T) {
	addr := fileStore(t)
	for _, args := range [][]string{
		{"latest", "-store", addr, "wal"},
		{"latest", "-store", addr, "wal", "s", "extra"},
		{"probe", "-store", addr, "extra"},
		{"brand", "-store", addr},
	} {
		r := wf(t, args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "want ", "%v", args)
	}
}

// TestFlagsAnywhere: flags may follow the positional arguments, and "--"
// ends them, so a shard named like a flag can be addressed.
func TestFlagsAnywhere(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "x")
	r := wf(t, "push", "wal", "s", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p)
	require.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "--", "wal", "-dash")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "latest", "-store", addr, "-json", "--", "wal", "-dash")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "-dash", jsonOf(t, r)["shard"])
}

// TestGlobalFlagsBeforeCommand: the store flags may come before the
// command's name, where the usage line shows them; the command parses
// them with its own defaults, and its own flags win.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	addr, store, _ := sharedMem(t)
	p := writeFile(t, "x")
	r := wf(t, "-store", addr, "-prefix", "app/", "-timeout", "30s", "-json", "push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "app/s/wal/s", jsonOf(t, r)["key"], "-json and -prefix reached push")
	_, _, err := store.Get(context.Background(), "app/s/wal/s")
	require.NoError(t, err)

	r = wf(t, "-prefix", "app/", "-json", "latest", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"])
	r = wf(t, "-prefix", "other/", "latest", "-prefix", "app/", "-store", addr, "wal", "s")
	assert.Equal(t, exitOK, r.code, "the command's own -prefix wins: %s", r)
	r = wf(t, "-json", "version")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "ok", jsonOf(t, r)["outcome"])

	r = wf(t, "-prefix", "app/", "demo")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence demo: the command takes no -prefix\n")
}

// TestUnknownFlagShort: an unknown flag before the command's name gets
// one line and a hint, not the whole usage.
func TestUnknownFlagShort(t *testing.T) {
	for _, args := range [][]string{{"-bogus", "latest"}, {"-writer", "a", "push", "wal", "s"}} {
		r := wf(t, args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		require.Len(t, lines, 2, "%v: %s", args, r)
		assert.Equal(t, "writefence: flag provided but not defined: "+args[0], lines[0])
		assert.Contains(t, lines[1], `run "writefence help"`)
		assert.NotContains(t, r.stderr, "exit status:")
	}
}

// exampleURL finds an address with ? or & in a help text, and the
// character before it.
var exampleURL = regexp.MustCompile(`(.)\b[a-z0-9]+://[^\s']*[?&]`)

// TestHelpQuotesAddresses: every address with ? or & in the help is
// quoted, so pasting an example into a shell runs all of it.
func TestHelpQuotesAddresses(t *testing.T) {
	texts := map[string]string{"help": wf(t, "help").stdout}
	for _, c := range commands {
		texts["help "+c.name] = wf(t, "help", c.name).stdout
	}
	for name, text := range texts {
		for _, line := range strings.Split(text, "\n") {
			for _, m := range exampleURL.FindAllStringSubmatch(line, -1) {
				assert.Equal(t, "'", m[1], "%s: unquoted address in %q", name, line)
			}
		}
	}
}

// TestJSONEverywhere: with -json every command answers in JSON lines, its
// usage errors too.
func TestJSONEverywhere(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "-json", "-no-such-flag"}, {"-json", c.name, "-json", "-epoch", "x"}} {
			r := wf(t, args...)
			require.Equal(t, exitUsage, r.code, "%v: %s", args, r)
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			require.Len(t, lines, 1, "%v: one line: %s", args, r)
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &m), "%v: %s", args, r)
			assert.Equal(t, "usage", m["outcome"], "%v", args)
			assert.NotEmpty(t, m["error"])
		}
	}
	r := wf(t, "-json", "nope")
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "usage", jsonOf(t, r)["outcome"])
	r = wf(t, "latest", "-json", "-store", emptyStore(t), "wal")
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "usage", jsonOf(t, r)["outcome"], "a wrong argument count")

	r = wf(t, "demo", "-json", "-seed", "3")
	require.Equal(t, exitOK, r.code, "%s", r)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Greater(t, len(lines), 3)
	var last map[string]any
	for _, l := range lines {
		require.NoError(t, json.Unmarshal([]byte(l), &last), "every line is a JSON object: %q", l)
	}
	assert.Equal(t, "ok", last["outcome"])
	assert.Empty(t, last["violations"])
	r = wf(t, "demo", "-json", "-writers", "0")
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "usage", jsonOf(t, r)["outcome"])

	addr := fileStore(t)
	r = wf(t, "push", "-json", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s")
	require.Equal(t, exitOK, r.code)
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	assert.Equal(t, 1, strings.Count(r.stdout, "\n"), "one object, one line: %s", r.stdout)
}

// opaqueStore fails every request with an opaqueError, after calling
// during: a signal that arrives while the request is in flight, and a
// store client that wraps the cancelled request in its own error.
type opaqueStore struct{ during func() }

// opaqueDuring holds the function each opaque://N store calls, by N.
var opaqueDuring sync.Map

// opaqueError is a store client's own error: it matches neither
// context.Canceled nor any sentinel of the library.
type opaqueError struct{}

func (opaqueError) Error() string { return "sdk: request failed" }

func (s opaqueStore) Get(context.Context, string) ([]byte, string, error) {
	s.during()
	return nil, "", opaqueError{}
}

func (s opaqueStore) PutIfVersion(context.Context, string, []byte, string) (string, error) {
	s.during()
	return "", opaqueError{}
}

func (s opaqueStore) List(context.Context, string, func(string) error) error {
	s.during()
	return opaqueError{}
}

// TestJSONInterruptedAgreesWithStatus: a command a signal interrupted
// says so, -json outcome and exit status alike, even when the store's
// client returned an error of its own that hides the cancellation (the
// library returns ctx's error once ctx ended; ls lists through the
// store's client itself); the same error without a signal stays an error.
func TestJSONInterruptedAgreesWithStatus(t *testing.T) {
	for _, signalled := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		name := "json-interrupted-" + strconv.FormatBool(signalled)
		during := func() {}
		if signalled {
			during = cancel
		}
		opaqueDuring.Store(name, during)
		r := wfContext(ctx, "ls", "-json", "-store", "opaque://"+name)
		cancel()
		opaqueDuring.Delete(name)

		m := jsonOf(t, r)
		assert.Contains(t, m["error"], "sdk: request failed", "the store's error is kept: %s", r)
		if !signalled {
			assert.Equal(t, exitError, r.code, "%s", r)
			assert.Equal(t, "error", m["outcome"], "%s", r)
			continue
		}
		assert.Equal(t, exitInterrupted, r.code, "%s", r)
		assert.Equal(t, "interrupted", m["outcome"], "the outcome names the exit status: %s", r)
		assert.Contains(t, m["error"], "ls interrupted (SIGINT or SIGTERM): ", "%s", r)
	}
}

// failingWriter fails every write, as stdout on a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestStdoutFailure: a result that could not be written is not a success.
func TestStdoutFailure(t *testing.T) {
	addr, _ := pushedStore(t)
	for _, args := range [][]string{
		{"latest", "-store", addr, "wal", "s"}, {"latest", "-json", "-store", addr, "wal", "s"},
		{"ls", "-store", addr}, {"ls", "-json", "-store", addr}, {"version"}, {"demo", "-json"},
	} {
		var stderr strings.Builder
		code := run(context.Background(), args, failingWriter{}, &stderr)
		assert.Equal(t, exitError, code, "%v: %s", args, stderr.String())
		assert.Contains(t, stderr.String(), "write to stdout", "%v", args)
	}

	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	for _, args := range [][]string{{"latest", "-store", addr, "wal", "s"}, {"latest", "-json", "-store", addr, "wal", "s"}} {
		c := wfCommand(t, "", args...)
		full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		require.NoError(t, err)
		var stderr strings.Builder
		c.Stdout, c.Stderr = full, &stderr
		err = c.Run()
		full.Close()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%v > /dev/full: %s", args, stderr.String())
		assert.Equal(t, exitError, exit.ExitCode(), "%v > /dev/full: %s", args, stderr.String())
		assert.Contains(t, stderr.String(), "no space left on device")
	}
}

// TestVersion: version prints the module version, the Go version and the
// revision when the build was stamped with one.
func TestVersion(t *testing.T) {
	r := wf(t, "version")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Regexp(t, `^writefence \S+ go1\.\d+`, r.stdout)
	r = wf(t, "version", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "ok", m["outcome"])
	assert.Contains(t, m["go"], "go1.")

	defer func(f func() (*debug.BuildInfo, bool)) { readBuildInfo = f }(readBuildInfo)
	readBuildInfo = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/writefence/writefence", Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	r = wf(t, "version")
	assert.Equal(t, "writefence v1.2.3 go1.26.0 revision 0123abcd modified module github.com/writefence/writefence\n", r.stdout)
}

// TestVersionWithoutVCSStamp: a binary built with -buildvcs=false carries
// no vcs.* settings; version says the stamp is absent, without blaming
// the build, and prints the module version when there is one.
func TestVersionWithoutVCSStamp(t *testing.T) {
	defer func(f func() (*debug.BuildInfo, bool)) { readBuildInfo = f }(readBuildInfo)
	for _, c := range []struct{ version, want string }{
		{"(devel)", "writefence (devel) go1.26.0 (no VCS stamp: built without VCS information, as with -buildvcs=false, so the revision is unknown) module github.com/writefence/writefence\n"},
		{"v1.2.3", "writefence v1.2.3 go1.26.0 (no VCS stamp: the module version names the build) module github.com/writefence/writefence\n"},
	} {
		readBuildInfo = func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/writefence/writefence", Version: c.version},
				Settings: []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "CGO_ENABLED", Value: "1"}}}, true
		}
		r := wf(t, "version")
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, c.want, r.stdout)
		assert.NotContains(t, r.stdout, "build with go build")
		r = wf(t, "version", "-json")
		m := jsonOf(t, r)
		assert.Equal(t, c.version, m["version"])
		assert.NotContains(t, m, "revision")
	}
}

// TestReadmeRecovery: the README's shell section says what to do on each
// exit status the command returns.
func TestReadmeRecovery(t *testing.T) {
	section := readmeShell(t)
	for _, o := range outcomes {
		if o.code == exitOK {
			continue
		}
		assert.Regexp(t, `\n\| `+itoa(o.code)+` +\|`, section, "a row for exit status %d", o.code)
	}
	for _, cmd := range []string{"latest", "ls", "settle -confirm-version", "probe", "race", "blob put", "blob get", "commit", "gc"} {
		assert.Contains(t, section, "writefence "+cmd)
	}
}

// readmeShell returns the README's section on the command.
func readmeShell(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(b)
	start := strings.Index(readme, "### Operate from the shell")
	require.GreaterOrEqual(t, start, 0)
	section := readme[start:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	return section
}

// TestPayloadLimitDocumented: the payload limit push and settle enforce
// is in their flag help and in the README, from the one constant.
func TestPayloadLimitDocumented(t *testing.T) {
	limit := "at most " + itoa(defaults.MaxPayloadSize>>20) + " MiB"
	for _, c := range []string{"push", "settle"} {
		help := wf(t, "help", c).stdout
		flags := help[strings.Index(help, "\nflags:\n"):]
		file := flags[strings.Index(flags, "  -file "):]
		file = file[:strings.Index(file[1:], "\n  -")+1]
		assert.Contains(t, file, limit, "help %s, -file", c)
	}
	assert.Contains(t, strings.Join(strings.Fields(readmeShell(t)), " "), "is "+limit)
}

// TestReadmeBuckets: the README says how to create the bucket an s3:// or
// gs:// store needs, on MinIO and on fake-gcs-server, since the command
// creates none.
func TestReadmeBuckets(t *testing.T) {
	section := readmeShell(t)
	assert.Contains(t, section, "mc mb local/mirrors")
	assert.Contains(t, section, "MakeBucket")
	assert.Contains(t, section, "/storage/v1/b?project=")
	assert.Contains(t, section, `{"name": "mirrors"}`)
}
