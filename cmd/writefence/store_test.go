package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// assertOpens opens each address and asserts the store's type, as %T
// prints it, and its address; then it closes it.
func assertOpens(t *testing.T, want string, addrs ...string) {
	t.Helper()
	for _, addr := range addrs {
		s, err := openStore(t.Context(), addr)
		require.NoError(t, err, addr)
		assert.Equal(t, want, fmt.Sprintf("%T", s.store), addr)
		assert.Equal(t, addr, s.addr)
		require.NoError(t, s.close(), addr)
	}
}

// assertRefused runs the command on each address and asserts a usage
// error that echoes no secret (hunter2secret).
func assertRefused(t *testing.T, addrs ...string) {
	t.Helper()
	says := map[string]string{}
	for _, addr := range addrs {
		says[addr] = ""
	}
	assertRefusedSaying(t, says)
}

// assertRefusedSaying is assertRefused where the error on each address
// also says what the address maps to.
func assertRefusedSaying(t *testing.T, says map[string]string) {
	t.Helper()
	for addr, want := range says {
		// Refused before any I/O: the timeout only bounds a regression.
		r := wf(t, "latest", "-timeout", "5s", "-store", addr, "wal", "s")
		assert.Equal(t, exitUsage, r.code, "%s: %s", addr, r)
		assert.Contains(t, r.stderr, want, addr)
		assert.NotContains(t, r.stderr+r.stdout, "hunter2secret", addr)
	}
}

// TestStoreAddressRefused: malformed addresses are usage errors, found
// before any I/O, and a secret typed into an address is never echoed.
func TestStoreAddressRefused(t *testing.T) {
	assertRefused(t, "ftp://x", "mem://host", "file://relative/path", "file:///tmp/x?sync=1", "::not a url")
}

// TestStoreAddressAmbiguous: an address that names two things at once, or
// a parameter without its value, is refused before any I/O, never read as
// one of them or as the default: a parameter given twice (wait=0&wait=1
// would take wait=0, the first, and a failover could lose an acknowledged
// push), a fragment (file:///data/wf#2 would be the directory /data/wf),
// an empty value (wait=$REPLICAS with the variable unset would wait for
// none; endpoint= would be AWS).
func TestStoreAddressAmbiguous(t *testing.T) {
	dir := t.TempDir()
	assertRefusedSaying(t, map[string]string{
		"file://" + dir + "#2":               "#",
		"mem://#x":                           "#",
		"s3://bucket?endpoint=127.0.0.1:1#x": "#",
		"s3://bucket?endpoint=127.0.0.1:1&secure=false&secure=true":      "secure",
		"s3://bucket?endpoint=127.0.0.1:1&endpoint=127.0.0.1:2":          "endpoint",
		"valkey://127.0.0.1:1/0?wait=0&wait=1":                           "wait",
		"valkey://127.0.0.1:1/0?tls=true&tls=false":                      "tls",
		"etcd://127.0.0.1:1/p?max-request-bytes=1&max-request-bytes=2":   "max-request-bytes",
		"dynamodb://table?endpoint=http://127.0.0.1:1&region=a&region=b": "region",
		"postgres://127.0.0.1:1/db?table=t&table=u":                      "table",
		"valkey://127.0.0.1:1/0?wait=":                                   "wait",
		"valkey://127.0.0.1:1/0?wait":                                    "wait",
		"s3://bucket?endpoint=":                                          "endpoint",
		"gs://bucket?endpoint=http://127.0.0.1:1&project=":               "project",
		"postgres://127.0.0.1:1/db?table=":                               "table",
	})
}

func TestStoreAddressOpens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	_, err := writefence.NewDirConditionalStore(dir, nil)
	require.NoError(t, err)
	assertOpens(t, "*writefence.MemStore", "mem://")
	assertOpens(t, "*writefence.dirStore", "file://"+dir, "file://localhost"+dir)
}

// storeTags are the schemes of the stores a build may leave out, by the
// tag that leaves each out.
var storeTags = map[string][]string{
	"writefence_nominio":    {"s3"},
	"writefence_nogcs":      {"gs"},
	"writefence_novalkey":   {"valkey", "valkeys", "redis", "rediss", "valkey+cluster", "valkeys+cluster"},
	"writefence_nodynamodb": {"dynamodb"},
	"writefence_noetcd":     {"etcd", "etcds"},
	"writefence_noazblob":   {"azblob"},
	"writefence_nopostgres": {"postgres", "postgresql"},
}

// TestStoreTags: each scheme of a store is either in the build or left
// out by its tag, and an address of one left out is a usage error that
// names the tag, found before any I/O.
func TestStoreTags(t *testing.T) {
	for tag, schemes := range storeTags {
		for _, scheme := range schemes {
			_, in := openers[scheme]
			by, out := omitted[scheme]
			require.NotEqual(t, in, out, "%s:// is in the build or left out, not both nor neither", scheme)
			if in {
				continue
			}
			assert.Equal(t, tag, by, scheme)
			r := wf(t, "latest", "-store", scheme+"://user:hunter2secret@host:1/x", "wal", "s")
			assert.Equal(t, exitUsage, r.code, "%s: %s", scheme, r)
			assert.Contains(t, r.stderr, "writefence: store address: "+scheme+":// is not in this build (built with "+cmp.Or(omittedBy, tag)+")")
			assert.NotContains(t, r.stderr+r.stdout, "hunter2secret", scheme)
		}
	}
}

// TestDefaultStore: without -store the command uses $WRITEFENCE_STORE,
// then the XDG state directory, then ~/.local/state/writefence, and the
// record persists there between runs.
func TestDefaultStore(t *testing.T) {
	t.Setenv("WRITEFENCE_STORE", "")
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	p := writeFile(t, "persisted")
	r := wf(t, "push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	require.Equal(t, exitError, r.code, "the default store is not created without -create either: %s", r)
	assert.NoDirExists(t, filepath.Join(state, "writefence"))
	require.Equal(t, exitOK, wf(t, "push", "-create", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s").code)
	r = wf(t, "latest", "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 9, jsonOf(t, r)["size"])
	assert.DirExists(t, filepath.Join(state, "writefence", "objects"))

	home := t.TempDir()
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", home)
	addr, err := storeAddress("")
	require.NoError(t, err)
	assert.Equal(t, (&url.URL{Scheme: "file", Path: filepath.Join(home, ".local", "state", "writefence")}).String(), addr)

	t.Setenv("WRITEFENCE_STORE", "mem://")
	addr, err = storeAddress("")
	require.NoError(t, err)
	assert.Equal(t, "mem://", addr)
	addr, err = storeAddress("file:///x")
	require.NoError(t, err)
	assert.Equal(t, "file:///x", addr, "-store wins over the environment")
}

// TestGlobalStoreFlag: -store before the command is the default of the
// command's own -store, which overrides it.
func TestGlobalStoreFlag(t *testing.T) {
	a, b := fileStore(t), fileStore(t)
	p := writeFile(t, "x")
	require.Equal(t, exitOK, wf(t, "-store", a, "push", "-writer", "w", "-epoch", "1", "-file", p, "wal", "s").code)
	require.Equal(t, exitOK, wf(t, "-store", b, "push", "-writer", "w", "-epoch", "1", "-file", p, "wal", "other").code)
	assert.Equal(t, exitOK, wf(t, "-store", a, "latest", "wal", "s").code)
	assert.Equal(t, exitNotFound, wf(t, "-store", a, "latest", "-store", b, "wal", "s").code)
}

// TestReadsCreateNothing: a command that only reads, on a directory that
// holds no store, says so with the path, exits 1 and creates nothing;
// file:/// is refused before anything is touched.
func TestReadsCreateNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	addr := (&url.URL{Scheme: "file", Path: dir}).String()
	for _, args := range [][]string{
		{"latest", "wal", "s"}, {"latest", "-json", "wal", "s"}, {"ls"}, {"ls", "wal"}, {"brand", "verify"},
	} {
		r := wf(t, append(args, "-store", addr)...)
		assert.Equal(t, exitError, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, dir, "%v names the path", args)
		assert.Contains(t, r.stderr, "no store there", "%v", args)
		assert.NoDirExists(t, dir, "%v created nothing", args)
	}

	_, lockErr := os.Stat("/lock") // a lock file of an older layout
	_, objErr := os.Stat("/objects")
	for _, args := range [][]string{{"latest", "wal", "s"}, {"ls"}, {"push", "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s"}} {
		for _, root := range []string{"file:///", "file:///.", "file://localhost/"} {
			r := wf(t, append(args, "-store", root)...)
			assert.Equal(t, exitUsage, r.code, "%v %s: %s", args, root, r)
		}
	}
	if errors.Is(lockErr, os.ErrNotExist) {
		assert.NoFileExists(t, "/lock")
	}
	if errors.Is(objErr, os.ErrNotExist) {
		assert.NoDirExists(t, "/objects")
	}
}

// TestUsageCreatesNothing: a name, writer, identity or prefix the library
// cannot hold, or a malformed -blobs, is a usage error (exit 2) that reads
// and writes nothing: not even -create makes the store first.
func TestUsageCreatesNothing(t *testing.T) {
	long := strings.Repeat("a", 1100)
	p := writeFile(t, "x")
	for _, args := range [][]string{
		{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", long},
		{"push", "-writer", "a", "-epoch", "1", "-file", p, long, "s"},
		{"push", "-writer", long, "-epoch", "1", "-file", p, "wal", "s"},
		{"push", "-identity", long, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		{"push", "-prefix", "app/_x", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		{"push", "-term", "1", "-writer", long, "-file", p, "wal", "s"},
		{"commit", "-writer", "a", "-epoch", "1", "-keep-payload", "wal", long},
		{"commit", "-writer", long, "-epoch", "1", "-keep-payload", "wal", "s"},
		{"commit", "-writer", "a", "-epoch", "1", "-keep-payload", "-blobs", "ftp://x", "wal", "s"},
		{"blob", "put", "-writer", "a", "-epoch", "1", "-file", p, "-blobs", "mem://x", "wal", "s"},
		{"blob", "put", "-writer", "a", "-epoch", "1", "-file", p, "wal", long},
		{"blob", "put", "-writer", long, "-epoch", "1", "-file", p, "wal", "s"},
		{"seal", "-writer", "a", "-epoch", "1", "wal", long},
		{"seal", "-writer", long, "-epoch", "1", "wal", "s"},
		{"brand", "claim", "-identity", long},
		{"exec", "-lease", long, "-holder", "h", "wal/0", "--", "true"},
		{"exec", "-lease", "l", "-holder", long, "wal/0", "--", "true"},
		{"exec", "-lease", "l", "-holder", "h", "wal/" + long, "--", "true"},
		{"exec", "-lease", "l", "-holder", "h", "-identity", long, "wal/0", "--", "true"},
	} {
		dir := filepath.Join(t.TempDir(), "none")
		addr := (&url.URL{Scheme: "file", Path: dir}).String()
		name := strings.ReplaceAll(strings.Join(args, " "), long, "<1100 bytes>")
		at := slices.Index(args, "--")
		if at < 0 {
			at = len(args)
		}
		args = slices.Concat(args[:at], []string{"-create", "-store", addr}, args[at:])
		r := wf(t, args...)
		assert.Equal(t, exitUsage, r.code, "%s: %s", name, r)
		assert.NoDirExists(t, dir, "%s created the store", name)
	}
}

// TestReadOnlyUser: a user who may read a store's directory but not write
// it reads the store: latest, ls and brand verify take no lock.
func TestReadOnlyUser(t *testing.T) {
	base, err := os.MkdirTemp("", "writefence-ro-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "store")
	addr := (&url.URL{Scheme: "file", Path: dir}).String()
	require.Equal(t, exitOK, wf(t, "push", "-create", "-store", addr, "-writer", "a", "-epoch", "3", "-file", writeFile(t, "x"), "wal", "s").code)
	require.Equal(t, exitOK, wf(t, "brand", "install", "-store", addr).code)
	// Readable by all, writable by none but root: what an operator's
	// read-only account sees.
	require.NoError(t, filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o555)
		}
		return os.Chmod(p, 0o444)
	}))
	t.Cleanup(func() { os.Chmod(dir, 0o700); os.Chmod(filepath.Join(dir, "objects"), 0o700); os.Chmod(base, 0o700) })

	reads := [][]string{{"latest", "-store", addr, "wal", "s"}, {"ls", "-store", addr}, {"brand", "verify", "-store", addr}}
	if os.Geteuid() != 0 {
		for _, args := range reads {
			r := wf(t, args...)
			assert.Equal(t, exitOK, r.code, "%v: %s", args, r)
		}
		return
	}
	// As root, read as nobody: a copy of the test binary nobody may run.
	bin := filepath.Join(base, "writefence.test")
	self, err := os.Executable()
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	copyFile(t, self, bin, 0o755)
	require.NoError(t, os.Chmod(base, 0o555))
	for _, args := range reads {
		c := wfCommand(t, bin, args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		c.Env = append(c.Env, "HOME="+base)
		out, err := c.CombinedOutput()
		assert.NoError(t, err, "%v as nobody: %s", args, out)
	}
	assert.NoFileExists(t, filepath.Join(dir, "lock.new"))
}

// copyFile copies the file from to a new file to with mode perm, in the
// kernel where it can (io.Copy between files): the test binary it copies
// is over 100 MB, which a read into memory would take whole.
func copyFile(t *testing.T, from, to string, perm os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, errors.Join(err, dst.Close()))
}

// TestErrorAdvice: the errors a user fixes from the shell say how.
func TestErrorAdvice(t *testing.T) {
	t.Run("no doubled prefix", func(t *testing.T) {
		// A store's error wrapped by the fence's: both carry the prefix.
		addr, _ := pushedStore(t)
		files, err := filepath.Glob(filepath.Join(strings.TrimPrefix(addr, "file://"), "objects", "*"))
		require.NoError(t, err)
		require.Len(t, files, 1)
		require.NoError(t, os.WriteFile(files[0], []byte("garbage"), 0o600))
		for _, args := range [][]string{{"latest", "wal", "s"}, {"latest", "-json", "wal", "s"}, {"ls"}} {
			r := wf(t, append(args, "-store", addr)...)
			assert.Equal(t, exitCorrupt, r.code, "%v: %s", args, r)
			assert.Contains(t, r.stderr, "corrupt record: dir store: ")
			assert.NotRegexp(t, `writefence: [^\n]*writefence: `, r.stderr+r.stdout, "%v", args)
		}
	})
}

// TestHelpStores: "help stores" lists the address of every store.
func TestHelpStores(t *testing.T) {
	r := wf(t, "help", "stores")
	require.Equal(t, exitOK, r.code, "%s", r)
	for _, scheme := range []string{"file", "mem", "s3", "gs", "valkey", "valkeys", "dynamodb", "etcd", "etcds"} {
		assert.Contains(t, r.stdout, scheme+"://", scheme)
	}
	assert.Contains(t, r.stdout, "credentials come from the environment only")
}

// TestPrefixIsADirectory: -prefix myapp writes under myapp/, never under
// myapps/..., and a prefix that already ends in "/" is kept as given; both
// spellings reach the same record.
func TestPrefixIsADirectory(t *testing.T) {
	addr, store, _ := sharedMem(t)
	p := writeFile(t, "x")
	r := wf(t, "push", "-store", addr, "-prefix", "myapp", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "landed: myapp/s/wal/s ")
	_, _, err := store.Get(context.Background(), "myapp/s/wal/s")
	require.NoError(t, err, "the record is under myapp/")

	r = wf(t, "latest", "-store", addr, "-prefix", "myapp/", "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "myapp/s/wal/s", jsonOf(t, r)["key"])
	r = wf(t, "ls", "-store", addr, "-prefix", "myapp")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "wal\ts\t1\ta\t")

	r = wf(t, "push", "-store", addr, "-prefix", "{app}/", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	_, _, err = store.Get(context.Background(), "{app}/s/wal/s")
	require.NoError(t, err, "a prefix ending in / is kept as given")

	assert.Contains(t, wf(t, "help", "push").stdout, "myapp means myapp/")
}

// FuzzStoreAddress: whatever address is given, opening it never panics,
// never echoes a password, and a malformed one is a usage error (of the
// schemes fuzzed, all but file and gs fail on nothing else); one that
// opens names a store and closes. Schemes whose opening builds a client
// that starts work of its own (PostgreSQL's pool, etcd's, the AWS and
// Azure SDKs') are skipped here; their addresses have tests of their own.
// A file address is opened read-only, so the fuzzer creates nothing.
func FuzzStoreAddress(f *testing.F) {
	for _, a := range []string{
		"mem://", "file:///tmp/x", "file://localhost/tmp/x", "file://host/x",
		"s3://bkt?endpoint=h:1&secure=0", "s3://u:hunter2secret@bkt?endpoint=h:1", "s3://", "s3://b/p",
		"gs://bkt?endpoint=http://h:1", "gs://Upper?endpoint=http://h:1",
		"valkey://h:1/3?script=1&wait=2&wait-timeout=250ms", "valkeys+cluster://h:1,h:2?wait=1", "redis://:hunter2secret@h:1",
		"valkey://h:1/0?wait=-1", "valkey://h:1/99999999999999999999", "%zz://", "unknown://x",
	} {
		f.Add(a)
	}
	skip := map[string]bool{"postgres": true, "postgresql": true, "etcd": true, "etcds": true, "dynamodb": true, "azblob": true}
	f.Fuzz(func(t *testing.T, addr string) {
		u, perr := url.Parse(addr)
		if perr == nil && (skip[u.Scheme] || openers[u.Scheme] != nil && !slices.Contains([]string{"mem", "file", "s3", "gs", "valkey", "valkeys", "redis", "rediss", "valkey+cluster", "valkeys+cluster", "redis+cluster", "rediss+cluster"}, u.Scheme)) {
			t.Skip()
		}
		s, err := openStoreMode(t.Context(), addr, true)
		if perr == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && len(pw) >= 4 && err != nil {
				require.NotContains(t, err.Error(), pw, "the password echoed")
			}
		}
		if err != nil {
			// A well-formed address may still fail to open for what is
			// outside it: a directory that holds no store, Cloud Storage's
			// default credentials not found.
			if u == nil || u.Scheme != "file" && u.Scheme != "gs" {
				require.True(t, isUsage(err), "%q: %v, not a usage error", addr, err)
			}
			return
		}
		require.NotNil(t, s.store)
		require.NoError(t, s.close())
	})
}

// TestPrefixRefused: a -prefix the library refuses (a segment that names
// another prefix's space, an empty segment) is a usage error of every
// command that takes one, before it reads or writes anything: probe would
// write its scratch keys into the reserved space of the prefix before it.
func TestPrefixRefused(t *testing.T) {
	addr := emptyStore(t)
	for _, prefix := range []string{"app/_x", "app/s", "app//x", "/"} {
		for _, args := range [][]string{
			{"ls"}, {"latest", "wal", "s"}, {"probe"}, {"race", "-writers", "2", "-rounds", "1"},
			{"doctor", "-writes=false"}, {"init"}, {"brand", "verify"}, {"lease", "show", "l"},
			{"exec", "-lease", "l", "-holder", "h", "--", "true"},
		} {
			at := slices.Index(args, "--")
			if at < 0 {
				at = len(args)
			}
			args = slices.Concat(args[:at], []string{"-prefix", prefix, "-store", addr}, args[at:])
			r := wf(t, args...)
			assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
			assert.Contains(t, r.stderr, "prefix", "%v", args)
		}
	}
}
