//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// Credentials never reach an error or a log line, and stored bytes printed
// in an error are escaped.

// logCapture records what the standard logger and go-redis's logger print
// while a test runs (the GCS and S3 clients log through the standard
// logger). go-redis has no way to read its current logger back, so the
// capture stays installed and forwards to stderr once the test is over.
type logCapture struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// redisLog forwards go-redis's log lines to the capture of the running
// test, or to stderr when none runs.
type redisLog struct{ current atomic.Pointer[logCapture] }

var redisLogger = func() *redisLog {
	l := &redisLog{}
	redis.SetLogger(l)
	return l
}()

func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	line := fmt.Sprintf(format, v...) + "\n"
	if c := l.current.Load(); c != nil {
		_, _ = c.Write([]byte(line))
		return
	}
	_, _ = os.Stderr.WriteString(line)
}

func captureLogs(t *testing.T) *logCapture {
	t.Helper()
	c := &logCapture{}
	prev := log.Writer()
	log.SetOutput(c)
	redisLogger.current.Store(c)
	t.Cleanup(func() {
		log.SetOutput(prev)
		redisLogger.current.Store(nil)
	})
	return c
}

// assertNoSecret checks that no secret appears in err, printed as a whole
// or node by node through its Unwrap tree, with %v, %+v and %#v (which shows
// the fields of an SDK's error struct).
func assertNoSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	require.Error(t, err)
	var walk func(e error)
	walk = func(e error) {
		for _, s := range []string{e.Error(), fmt.Sprintf("%v", e), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e)} {
			for _, secret := range secrets {
				require.NotContains(t, s, secret, "a credential leaked into an error (%T)", e)
			}
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				walk(next)
			}
		case interface{ Unwrap() []error }:
			for _, next := range u.Unwrap() {
				walk(next)
			}
		}
	}
	walk(err)
}

// storeErrors runs every operation of the package against store and
// returns the errors. Each must fail: the store is unreachable or refuses
// the caller.
func storeErrors(t *testing.T, store writefence.ConditionalStore) map[string]error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	errs := map[string]error{}
	_, _, errs["get"] = store.Get(ctx, "k")
	_, errs["create"] = store.PutIfVersion(ctx, "k", []byte("x"), "")
	errs["probe"] = writefence.Probe(ctx, store, "probe")
	errs["push"] = (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "w", 1, []byte("x"))
	errs["push with probe"] = (&writefence.Fence{Store: store, Probe: true}).Push(ctx, "wal", "0", "w", 1, []byte("x"))
	_, _, _, errs["latest"] = (&writefence.Fence{Store: store}).Latest(ctx, "wal", "0")
	errs["brand"] = claimBrand(ctx, &writefence.Fence{Store: store})
	if d, ok := store.(writefence.Deleter); ok {
		errs["delete"] = d.Delete(ctx, "k")
	}
	return errs
}

func TestMinioCredentialsNeverLeak(t *testing.T) {
	t.Parallel()
	s3 := testserver.S3Server(t)
	bucket := testserver.MinioBucket(t, s3.Client(t, nil))
	const wrongSecret = "wrong-minio-secret-c0ffee-must-not-leak"
	stopped := stoppedAddr(t)
	newClient := func(endpoint, secret string) *minio.Client {
		return testserver.S3{Endpoint: endpoint, AccessKey: s3.AccessKey, SecretKey: secret, MaxRetries: 1}.Client(t, testserver.HTTPTransport(t))
	}
	logs := captureLogs(t)
	cases := map[string]*minio.Client{
		"wrong secret":   newClient(s3.Endpoint, wrongSecret),
		"stopped server": newClient(stopped, s3.SecretKey),
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			for op, err := range storeErrors(t, writefence.NewMinioStore(c, bucket)) {
				t.Run(op, func(t *testing.T) {
					assertNoSecret(t, err, s3.SecretKey, wrongSecret)
					assert.NotErrorIs(t, err, writefence.ErrUntrustedStore, "an auth or transport failure is no verdict on the store")
				})
			}
		})
	}
	assert.NotContains(t, logs.String(), s3.SecretKey)
	assert.NotContains(t, logs.String(), wrongSecret)
}

// stoppedAddr returns an address on which nothing listens.
func stoppedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestValkeyPasswordNeverLeaks is not parallel: captureLogs swaps the
// process's log output, and TestMinioCredentialsNeverLeak, which is, does
// too; apart, each captures every line of its own run.
func TestValkeyPasswordNeverLeaks(t *testing.T) {
	const password = "valkey-password-5ec7e7-must-not-leak"
	const wrongPassword = "wrong-valkey-password-b4d-must-not-leak"
	addr := testserver.StartValkey(t, password, "--requirepass", password)
	logs := captureLogs(t)
	newStore := func(t *testing.T, addr, password string) writefence.ConditionalStore {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, DialTimeout: 2 * time.Second, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		return writefence.NewValkeyStore(c)
	}

	// The right password works, so the failures below are the password's.
	require.NoError(t, writefence.Probe(t.Context(), newStore(t, addr, password), "probe"))

	cases := map[string]struct{ addr, password string }{
		"wrong password": {addr, wrongPassword},
		"no password":    {addr, ""},
		"stopped server": {stoppedAddr(t), password},
		"wrong, stopped": {stoppedAddr(t), wrongPassword},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for op, err := range storeErrors(t, newStore(t, tc.addr, tc.password)) {
				t.Run(op, func(t *testing.T) {
					assertNoSecret(t, err, password, wrongPassword)
					assert.NotErrorIs(t, err, writefence.ErrUntrustedStore)
					assert.NotErrorIs(t, err, writefence.ErrConflict)
				})
			}
		})
	}
	assert.NotContains(t, logs.String(), password)
	assert.NotContains(t, logs.String(), wrongPassword)
}

// hostileStore holds records whose bytes an attacker chose and answers
// with version tokens it chose too.
type hostileStore struct {
	data    map[string][]byte
	version string
}

func (s *hostileStore) Get(_ context.Context, key string) ([]byte, string, error) {
	d, ok := s.data[key]
	if !ok {
		return nil, "", writefence.ErrNotFound
	}
	return d, s.version, nil
}

func (s *hostileStore) PutIfVersion(_ context.Context, key string, data []byte, _ string) (string, error) {
	s.data[key] = data
	return s.version, nil
}

// TestStoredBytesAreEscaped: a writer name, an identity, a version token or
// a brand holding newlines and terminal escapes surfaces escaped in every
// error that prints it, so it cannot forge a log line or recolour a
// terminal.
func TestStoredBytesAreEscaped(t *testing.T) {
	const hostile = "evil\nwritefence: push landed\x1b[2K\x1b[31m\r\x00\u202e"
	ctx := t.Context()
	mem := &writefence.MemStore{}
	require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", hostile, 5, []byte("x")))
	require.NoError(t, (&writefence.Fence{Store: mem, Identity: hostile}).Push(ctx, "wal", "1", "w", 5, []byte("x")))
	_, err := mem.PutIfVersion(ctx, keys.Brand(""), []byte(hostile), "")
	require.NoError(t, err)
	corrupt := &hostileStore{data: map[string][]byte{mustKey(t, "wal", "0"): []byte("WFR\x00garbage")}, version: hostile}

	cases := []struct {
		name string
		err  error
		as   any
	}{
		{"stale epoch names the recorded writer", (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "w", 5, []byte("y")), new(*writefence.StaleEpochError)},
		{"wire error names the found identity", (&writefence.Fence{Store: mem}).Push(ctx, "wal", "1", "w", 6, []byte("y")), new(*writefence.WireError)},
		{"brand names the found value", (&writefence.Fence{Store: mem}).VerifyBrand(ctx), new(*writefence.WireError)},
		{"corrupt names the version", (&writefence.Fence{Store: corrupt}).Push(ctx, "wal", "0", "w", 6, []byte("y")), new(*writefence.CorruptError)},
		{"probe names the version", writefence.Probe(ctx, &hostileStore{data: map[string][]byte{}, version: hostile}, "p"), new(*writefence.ProbeError)},
		{"key with hostile bytes", writefence.Probe(ctx, &hostileStore{data: map[string][]byte{}, version: "1"}, hostile), new(*writefence.ProbeError)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, tc.err)
			require.ErrorAs(t, tc.err, tc.as)
			for _, s := range []string{tc.err.Error(), fmt.Sprintf("%+v", tc.err)} {
				for _, b := range []string{"\n", "\r", "\x1b", "\x00", "\u202e"} {
					assert.NotContains(t, s, b, "unescaped %q in %q", b, s)
				}
				assert.Contains(t, s, `evil\nwritefence: push landed\x1b[2K\x1b[31m\r\x00\u202e`, "the value is shown, escaped")
			}
			t.Log(tc.err)
		})
	}
	assert.True(t, errors.Is(cases[0].err, writefence.ErrStaleEpoch))
}
