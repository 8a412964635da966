package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// TestEpochPlainDecimal: -epoch takes plain decimal digits only; "010" is
// not 8, "0x10" not 16. Each is a usage error and writes nothing.
func TestEpochPlainDecimal(t *testing.T) {
	addr := emptyStore(t)
	p := writeFile(t, "x")
	for _, epoch := range []string{"010", "0x10", "0X10", "0b1", "0o7", "1_0", "+1", "-1", " 1", "1 ", "１", "1e3", "", "18446744073709551616"} {
		for _, c := range []string{"push", "settle"} {
			args := []string{c, "-store", addr, "-writer", "a", "-epoch", epoch, "-file", p}
			if c == "settle" {
				args = append(args, "-confirm-version", "v")
			}
			r := wf(t, append(args, "wal", "s")...)
			assert.Equal(t, exitUsage, r.code, "%s -epoch %q: %s", c, epoch, r)
			assert.Contains(t, r.stderr, "plain decimal", "%s -epoch %q", c, epoch)
		}
	}
	assert.Equal(t, exitNotFound, wf(t, "latest", "-store", addr, "wal", "s").code, "nothing was written")
	r := wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "18446744073709551615", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "epoch 18446744073709551615 ")
	for _, c := range []string{"push", "settle"} {
		r := wf(t, "help", c)
		assert.Contains(t, r.stdout, "plain decimal digits", "help %s says how an epoch is written", c)
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

	_, lockErr := os.Stat("/lock")
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

// failingWriter fails every write, as stdout on a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestStdoutFailure: a result that could not be written is not a success.
func TestStdoutFailure(t *testing.T) {
	addr := fileStore(t)
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s").code)
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

// silentServer accepts TCP connections and never answers; accepted
// receives each connection once it is accepted.
func silentServer(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ch := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case ch <- c:
			default:
				c.Close()
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		close(ch)
		for c := range ch {
			c.Close()
		}
	})
	return l.Addr().String(), ch
}

// TestInterrupted: SIGINT and SIGTERM end the command with their own
// status, not the network error's. The signal is sent once the command is
// connected to a server that never answers, so it is the only way out.
func TestInterrupted(t *testing.T) {
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			addr, accepted := silentServer(t)
			c := wfCommand(t, "", "latest", "-timeout", "0", "-store", "s3://mirrors?secure=false&endpoint="+addr, "wal", "s")
			var stderr strings.Builder
			c.Stderr = &stderr
			require.NoError(t, c.Start())
			select {
			case <-accepted:
			case <-time.After(time.Minute):
				c.Process.Kill()
				t.Fatal("the command never connected")
			}
			require.NoError(t, c.Process.Signal(sig))
			err := c.Wait()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			assert.Equal(t, exitInterrupted, exit.ExitCode(), "%s", stderr.String())
		})
	}
	assert.Contains(t, exitHelp(), "130 interrupted")
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

// respServer answers every command with err, as a Valkey server that
// requires a password answers a client that sent none.
func respServer(t *testing.T, reply string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
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
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
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

// TestRedisLogSilenced: go-redis's own log lines (pool.go: failed to
// dial) never reach stderr; the command reports the error once.
func TestRedisLogSilenced(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	r := wfProcess(t, "latest", "-timeout", "20s", "-store", "valkey://"+addr+"/0", "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.NotContains(t, r.stderr, "pool.go")
	assert.NotContains(t, r.stderr, "redis: 20", "a log line's timestamp")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %s", r.stderr)
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

// TestLs lists shards with hostile names, across plugins, one plugin, and
// as JSON lines; a corrupt record is listed, not skipped, and sets the
// exit status.
func TestLs(t *testing.T) {
	addr := fileStore(t)
	push := func(plugin, shard, writer, epoch string) {
		r := wf(t, "push", "-store", addr, "-writer", writer, "-epoch", epoch, "-file", writeFile(t, "x"), "--", plugin, shard)
		require.Equal(t, exitOK, r.code, "%s", r)
	}
	push("wal", "shard-0", "node-a", "7")
	push("wal", "a/b\tc", "node-b", "8")
	push("snap", "%41", "node-c", "9")
	push("wal/x", "s", "node-d", "1")
	require.Equal(t, exitOK, wf(t, "brand", "install", "-store", addr).code)

	r := wf(t, "ls", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, strings.Join([]string{ // in key order: "wal/x" is "wal%2Fx" in its key
		"snap\t%41\t9\tnode-c\tok",
		"wal/x\ts\t1\tnode-d\tok",
		"wal\ta/b\\tc\t8\tnode-b\tok",
		"wal\tshard-0\t7\tnode-a\tok",
	}, "\n")+"\n", r.stdout)

	r = wf(t, "ls", "-store", addr, "wal")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, 2, strings.Count(r.stdout, "\n"), "%s", r.stdout)

	r = wf(t, "ls", "-json", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4)
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &e))
	assert.Equal(t, "a/b\tc", e["shard"])
	assert.EqualValues(t, 8, e["epoch"])

	// Damage the record of wal/shard-0 on disk: listed as corrupt.
	ds, err := writefence.NewDirConditionalStore(strings.TrimPrefix(addr, "file://"))
	require.NoError(t, err)
	key, err := keys.Shard("", "wal", "shard-0")
	require.NoError(t, err)
	data, v, err := ds.Get(t.Context(), key)
	require.NoError(t, err)
	_, err = ds.PutIfVersion(t.Context(), key, data[:len(data)-1], v)
	require.NoError(t, err)
	r = wf(t, "ls", "-store", addr)
	assert.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Contains(t, r.stdout, "wal\tshard-0\t7\tnode-a\tcorrupt\n", "the header's epoch and writer")
	assert.Equal(t, 4, strings.Count(r.stdout, "\n"), "every shard listed: %s", r.stdout)

	assert.Equal(t, exitUsage, wf(t, "ls", "-store", addr, "a", "b").code)
	r = wf(t, "ls", "-store", "ignoring://")
	assert.Equal(t, exitError, r.code, "a store that cannot list: %s", r)
}

// TestParseShardKey: parseShardKey inverts ShardKey, and refuses keys
// ShardKey never makes.
func TestParseShardKey(t *testing.T) {
	for _, c := range [][2]string{{"wal", "s"}, {"a/b", "c"}, {"a", "b/c"}, {".x", "y."}, {"%41", "\x00\xff"}, {"tab\t", "é"}} {
		for _, prefix := range []string{keys.DefaultPrefix, "p/", ""} {
			k, err := keys.Shard(prefix, c[0], c[1])
			require.NoError(t, err)
			if prefix == "" {
				prefix = keys.DefaultPrefix
			}
			plugin, shard, ok := keys.ParseShard(prefix, k)
			require.True(t, ok, "%q", k)
			assert.Equal(t, c[0], plugin)
			assert.Equal(t, c[1], shard)
		}
	}
	for _, k := range []string{"writefence/s/a", "writefence/s/a/b/c", "writefence/s/%41/b", "writefence/s/a/%4", "writefence/s//b", "writefence/_brand", "other/s/a/b"} {
		_, _, ok := keys.ParseShard(keys.DefaultPrefix, k)
		assert.False(t, ok, "%q", k)
	}
}

// TestLatestDamagedFile: a directory store's file damaged on disk is shown
// by latest with its damaged version and the settle line to run, which
// replaces it.
func TestLatestDamagedFile(t *testing.T) {
	addr := fileStore(t)
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "5", "-file", writeFile(t, "good payload"), "wal", "s").code)
	key, err := keys.Shard("", "wal", "s")
	require.NoError(t, err)
	dir := strings.TrimPrefix(addr, "file://")
	files, err := filepath.Glob(filepath.Join(dir, "objects", "*"))
	require.NoError(t, err)
	require.Len(t, files, 1, "one record")
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	b[len(b)-6] ^= 0x20 // in the payload; the token inside the file stays
	require.NoError(t, os.WriteFile(files[0], b, 0o600))

	r := wf(t, "latest", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	m := regexp.MustCompile(`to overwrite it: writefence (settle .*)\n`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, "a settle line: %s", r)
	assert.Regexp(t, `\nversion +damaged-[0-9a-f]{64}\n`, r.stdout)
	assert.Regexp(t, `^key +`+regexp.QuoteMeta(key)+`\n`, r.stdout)

	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code)
	j := jsonOf(t, r)
	version := j["version"].(string)
	assert.True(t, strings.HasPrefix(version, "damaged-"), version)
	assert.Contains(t, m[1], "-confirm-version "+version+" ")

	r = wf(t, "push", "-store", addr, "-writer", "b", "-epoch", "9", "-file", writeFile(t, "x"), "wal", "s")
	assert.Equal(t, exitCorrupt, r.code, "a push never overwrites it: %s", r)

	// Run the suggested line, with the placeholders filled in.
	line := strings.NewReplacer("-writer W", "-writer operator", "-epoch E", "-epoch 10", "-file F", "-file "+writeFile(t, "rebuilt")).Replace(m[1])
	r = wf(t, strings.Fields(line)...)
	require.Equal(t, exitOK, r.code, "%s: %s", line, r)
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 10, jsonOf(t, r)["epoch"])
}

// TestLatestCorruptHeader: a corrupt record whose header decodes is shown
// with the epoch and writer the header claims.
func TestLatestCorruptHeader(t *testing.T) {
	addr, version := corruptRecord(t) // the payload is cut short; the header is intact
	r := wf(t, "latest", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Contains(t, r.stdout, "epoch     5\n")
	assert.Contains(t, r.stdout, "writer    a\n")
	assert.Contains(t, r.stdout, "version   "+version+"\n")
	assert.Contains(t, r.stderr, "claims epoch 5 by a")
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	m := jsonOf(t, r)
	assert.EqualValues(t, 5, m["epoch"])
	assert.Equal(t, "a", m["writer"])
	assert.Equal(t, "truncated payload", m["check"])
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

// TestReadmeRecovery: the README's shell section says what to do on each
// exit status the command returns.
func TestReadmeRecovery(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(b)
	start := strings.Index(readme, "### Operate from the shell")
	require.GreaterOrEqual(t, start, 0)
	section := readme[start:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	for _, o := range outcomes {
		if o.code == exitOK {
			continue
		}
		assert.Regexp(t, `\n\| `+itoa(o.code)+` +\|`, section, "a row for exit status %d", o.code)
	}
	for _, cmd := range []string{"latest", "ls", "settle -confirm-version", "probe", "race"} {
		assert.Contains(t, section, "writefence "+cmd)
	}
}
