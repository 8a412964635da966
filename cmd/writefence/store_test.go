package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestStoreAddressRefused: malformed addresses are usage errors, found
// before any I/O, and a secret typed into an address is never echoed.
func TestStoreAddressRefused(t *testing.T) {
	for _, addr := range []string{
		"ftp://x",
		"mem://host",
		"file://relative/path",
		"file:///tmp/x?sync=1",
		"s3://",
		"s3://bucket/path",
		"s3://bucket?endpoint=http://127.0.0.1:9000",
		"s3://bucket?secure=maybe",
		"s3://bucket?endpiont=127.0.0.1:9000",
		"s3://AKIAEXAMPLE:hunter2secret@bucket",
		"gs://",
		"gs://bucket?endpoint=127.0.0.1:4443",
		"valkey://127.0.0.1",
		"valkey://127.0.0.1:6379/zero",
		"valkey://127.0.0.1:6379/0?script=perhaps",
		"valkey://default:hunter2secret@127.0.0.1:6379/0",
		"valkey+cluster://127.0.0.1",
		"valkey+cluster://127.0.0.1:1,127.0.0.1",
		"valkey+cluster://127.0.0.1:1,",
		"valkey+cluster://127.0.0.1:1/0",
		"valkey+cluster://default:hunter2secret@127.0.0.1:1",
		"::not a url",
	} {
		r := wf(t, "latest", "-store", addr, "wal", "s")
		assert.Equal(t, exitUsage, r.code, "%s: %s", addr, r)
		assert.NotContains(t, r.stderr+r.stdout, "hunter2secret", addr)
	}
}

func TestStoreAddressOpens(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "d")
	for addr, want := range map[string]any{
		"mem://":                         &writefence.MemStore{},
		"file://" + dir:                  &writefence.DirConditionalStore{},
		"file://localhost" + dir:         &writefence.DirConditionalStore{},
		"s3://bkt?endpoint=h:1&secure=0": &writefence.MinioConditionalStore{},
		"gs://bkt?endpoint=http://h:1":   &writefence.GCSConditionalStore{},
		"valkey://h:1/3?script=1":        &writefence.ValkeyConditionalStore{},
		"redis://h:1":                    &writefence.ValkeyConditionalStore{},
	} {
		s, err := openStore(ctx, addr)
		require.NoError(t, err, addr)
		assert.IsType(t, want, s.store, addr)
		assert.Equal(t, addr, s.addr)
		require.NoError(t, s.close(), addr)
	}
	s, err := openStore(ctx, "valkey://h:1/3?script=1")
	require.NoError(t, err)
	defer func() { require.NoError(t, s.close()) }()
	assert.True(t, s.store.(*writefence.ValkeyConditionalStore).Script)

	c, err := openStore(ctx, "valkey+cluster://h:1,h:2?script=1")
	require.NoError(t, err)
	defer func() { require.NoError(t, c.close()) }()
	assert.True(t, c.store.(*writefence.ValkeyConditionalStore).Script)
}

// TestValkeyAddress: a Valkey address's query sets the replicas every
// write waits for and how long, and TLS; a bad value is a usage error that
// names the parameter, before any I/O.
func TestValkeyAddress(t *testing.T) {
	ctx := context.Background()
	for addr, want := range map[string]struct {
		wait    int
		timeout time.Duration
	}{
		"valkey://h:1/0":                                  {},
		"valkey://h:1/0?wait=0":                           {},
		"valkey://h:1/0?wait=1":                           {wait: 1},
		"valkey://h:1/0?wait=2&wait-timeout=250ms":        {wait: 2, timeout: 250 * time.Millisecond},
		"valkeys://h:1/0?wait=1&wait-timeout=3s&script=1": {wait: 1, timeout: 3 * time.Second},
		"valkey://h:1/0?tls=true":                         {},
		"rediss://h:1":                                    {},
		"valkey+cluster://h:1,h:2":                        {},
		"valkey+cluster://h:1,h:2/?wait=1":                {wait: 1},
		"valkeys+cluster://h:1?wait=2&wait-timeout=250ms": {wait: 2, timeout: 250 * time.Millisecond},
		"valkey+cluster://h:1?script=1&tls=true&wait=1":   {wait: 1},
	} {
		s, err := openStore(ctx, addr)
		require.NoError(t, err, addr)
		vs := s.store.(*writefence.ValkeyConditionalStore)
		assert.Equal(t, want.wait, vs.WaitReplicas, addr)
		assert.Equal(t, want.timeout, vs.WaitTimeout, addr)
		require.NoError(t, s.close(), addr)
	}
	for addr, param := range map[string]string{
		"valkey://h:1/0?wait=-1":                   "wait=-1",
		"valkey://h:1/0?wait=one":                  "wait=one",
		"valkey://h:1/0?wait=1.5":                  "wait=1.5",
		"valkey://h:1/0?wait=99999999999":          "wait=99999999999",
		"valkey://h:1/0?wait=1&wait-timeout=soon":  "wait-timeout=soon",
		"valkey://h:1/0?wait=1&wait-timeout=0s":    "wait-timeout=0s",
		"valkey://h:1/0?wait=1&wait-timeout=-1s":   "wait-timeout=-1s",
		"valkey://h:1/0?wait-timeout=1s":           "wait-timeout=1s without wait=N",
		"valkey://h:1/0?wait=0&wait-timeout=1s":    "wait-timeout=1s without wait=N",
		"valkey://h:1/0?tls=maybe":                 "tls=maybe",
		"valkeys://h:1/0?tls=false":                "tls=false",
		"valkeys://h/0":                            "valkeys://host:port/db",
		"valkey://h:1/0?wiat=1":                    `"wiat"`,
		"valkey://h:1/0?wait=1&wait_timeout=100ms": `"wait_timeout"`,
		"valkey+cluster://h:1?wait=one":            "wait=one",
		"valkey+cluster://h:1?wait-timeout=1s":     "wait-timeout=1s without wait=N",
		"valkeys+cluster://h:1?tls=false":          "use valkey+cluster://",
		"valkey+cluster://h:1?db=3":                `"db"`,
	} {
		r := wf(t, "latest", "-store", addr, "wal", "s")
		assert.Equal(t, exitUsage, r.code, "%s: %s", addr, r)
		assert.Contains(t, r.stderr, param, addr)
	}
	r := wf(t, "help")
	for _, doc := range []string{"valkeys://host:port/db", "wait=N", "wait-timeout=D", "tls=true"} {
		assert.Contains(t, r.stdout, doc, "the store addresses in help")
	}
	for _, c := range []string{"push", "settle"} {
		assert.Contains(t, wf(t, "help", c).stdout, "'valkey://host:port/0?wait=1'", "help %s", c)
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
	require.Equal(t, exitOK, wf(t, "push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s").code)
	r := wf(t, "latest", "-json", "wal", "s")
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

// TestBucketNameUsage: a bucket name the service would refuse is a usage
// error, found before any request.
func TestBucketNameUsage(t *testing.T) {
	for _, addr := range []string{"s3://ab?endpoint=127.0.0.1:1", "s3://Bad_Bucket?endpoint=127.0.0.1:1", "s3://a..b?endpoint=127.0.0.1:1",
		"gs://ab?endpoint=http://127.0.0.1:1", "gs://Upper?endpoint=http://127.0.0.1:1", "gs://-x-?endpoint=http://127.0.0.1:1"} {
		r := wf(t, "latest", "-store", addr, "-timeout", "5s", "wal", "s")
		assert.Equal(t, exitUsage, r.code, "%s: %s", addr, r)
		assert.Contains(t, r.stderr, "bucket", addr)
	}
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

// TestReadOnlyUser: a user who may read a store's directory but not write
// it reads the store: latest, ls and brand verify take no lock.
func TestReadOnlyUser(t *testing.T) {
	base, err := os.MkdirTemp("", "writefence-ro-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "store")
	addr := (&url.URL{Scheme: "file", Path: dir}).String()
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "3", "-file", writeFile(t, "x"), "wal", "s").code)
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
	data, err := os.ReadFile(self)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	require.NoError(t, os.WriteFile(bin, data, 0o755))
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

// tcpServer accepts connections on a loopback port and hands each to
// serve, in a goroutine of its own; it returns the address. When the test
// ends the listener and every connection are closed and serve is waited
// for.
func tcpServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex // guards conns and closed
		conns  []net.Conn
		closed bool
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// silentServer accepts TCP connections and never answers; accepted
// receives each of the first 16 connections once it is accepted.
func silentServer(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ch := make(chan net.Conn, 16)
	addr = tcpServer(t, func(c net.Conn) {
		select {
		case ch <- c:
		default:
		}
	})
	return addr, ch
}

// respServer answers every command with reply, as a Valkey server that
// requires a password answers a client that sent none with an error.
func respServer(t *testing.T, reply string) string {
	t.Helper()
	return tcpServer(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "*") {
				if _, err := io.WriteString(c, reply); err != nil {
					return
				}
			}
		}
	})
}

// TestErrorAdvice: the errors a user fixes from the shell say how.
func TestErrorAdvice(t *testing.T) {
	t.Run("valkey NOAUTH names the variables read", func(t *testing.T) {
		t.Setenv("VALKEY_PASSWORD", "")
		t.Setenv("REDISCLI_AUTH", "")
		addr := respServer(t, "-NOAUTH Authentication required.\r\n")
		r := wf(t, "latest", "-timeout", "20s", "-store", "valkey://"+addr+"/0", "wal", "s")
		assert.Equal(t, exitError, r.code, "%s", r)
		for _, v := range []string{"VALKEY_USERNAME (unset)", "VALKEY_PASSWORD (unset)", "REDISCLI_AUTH (unset)"} {
			assert.Contains(t, r.stderr, v)
		}
	})
	t.Run("timeout names the address and -timeout", func(t *testing.T) {
		addr, _ := silentServer(t)
		store := "valkey://" + addr + "/0"
		start := time.Now()
		r := wf(t, "latest", "-json", "-timeout", "200ms", "-store", store, "wal", "s")
		// go-redis's own read timeout is seconds; -timeout must win.
		assert.Less(t, time.Since(start), 3*time.Second, "the command gave up at -timeout")
		assert.Equal(t, exitError, r.code, "%s", r)
		assert.Contains(t, r.stderr, store)
		assert.Contains(t, r.stderr, "-timeout 200ms")
		assert.Contains(t, jsonOf(t, r)["error"], "raise -timeout")
	})
	t.Run("https to plain http suggests secure=false", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) }))
		defer srv.Close()
		u, err := url.Parse(srv.URL)
		require.NoError(t, err)
		r := wf(t, "latest", "-timeout", "30s", "-store", "s3://mirrors?endpoint="+u.Host, "wal", "s")
		assert.Equal(t, exitError, r.code, "%s", r)
		assert.Contains(t, r.stderr, "secure=false")
	})
	t.Run("TLS to a plain server says so", func(t *testing.T) {
		// A plain server answers the TLS handshake's bytes with an error
		// line, as Valkey does when they hold a newline.
		plain := tcpServer(t, func(c net.Conn) { _, _ = io.WriteString(c, "-ERR unknown command\r\n") })
		silent, _ := silentServer(t)
		for _, store := range []string{"valkeys://" + plain + "/0", "valkey://" + plain + "/0?tls=true", "valkeys://" + silent + "/0"} {
			r := wf(t, "latest", "-timeout", "500ms", "-store", store, "wal", "s")
			assert.Equal(t, exitError, r.code, "%s: %s", store, r)
			assert.Contains(t, r.stderr, "does not speak TLS", store)
			assert.Contains(t, r.stderr, "use valkey:// without tls=true", store)
		}
	})
	t.Run("no doubled prefix", func(t *testing.T) {
		// A store's error wrapped by the fence's: both carry the prefix.
		addr := fileStore(t)
		require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s").code)
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

// closedPort returns a 127.0.0.1 address where nothing listens: a port
// taken and let go.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestGCSConnectionRefused: a gs:// endpoint that refuses the connection
// fails with the refusal, as S3 and Valkey do, rather than retrying until
// -timeout ends it with a deadline.
func TestGCSConnectionRefused(t *testing.T) {
	addr := "gs://mirrors?endpoint=http://" + closedPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := openStore(ctx, addr)
	require.NoError(t, err)
	defer s.close()
	_, _, err = s.store.Get(ctx, "writefence/s/wal/s")
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)

	r := wf(t, "latest", "-timeout", "20s", "-store", addr, "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "connection refused")
	assert.NotContains(t, r.stderr, "deadline")
	assert.NotContains(t, r.stderr, "no answer from")
}
