//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/testserver"
)

// The stores' contract (store.go) on the adapters of the SDKs, against
// their servers or stand-ins of them: credentials never reach an error or
// a log line, a read stays within the read limit, and a token of a form a
// store never issues is a conflict decided before any request.

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

// standInStores returns an S3 and a GCS store, by adapter name, whose
// clients reach the stand-in server at url through tr and try each request
// once.
func standInStores(t *testing.T, url string, tr http.RoundTripper) map[string]writefence.ConditionalStore {
	mc := testserver.S3{Endpoint: strings.TrimPrefix(url, "http://"), AccessKey: "k", SecretKey: "s", MaxRetries: 1}.Client(t, tr)
	gc := testserver.GCSClient(t, url, tr)
	gc.SetRetry(storage.WithPolicy(storage.RetryNever))
	return map[string]writefence.ConditionalStore{
		"s3":  writefence.NewMinioStore(mc, "bucket"),
		"gcs": writefence.NewGCSStore(gc, "bucket"),
	}
}

// hugeObject serves every GET a 1 GiB body, streamed in 64 KiB chunks
// until the client goes away, with the headers of an S3 and a GCS object.
// With announce it sends Content-Length; without, the body is chunked and
// its size unknown until its end. sent counts the bytes the server wrote.
func hugeObject(announce bool, sent *atomic.Int64) http.HandlerFunc {
	const size = 1 << 30
	chunk := make([]byte, 64<<10)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("X-Goog-Generation", "7")
		if announce {
			w.Header().Set("Content-Length", strconv.Itoa(size))
		}
		for left := size; left > 0 && r.Context().Err() == nil; left -= len(chunk) {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
}

// TestHugeObjectReadStaysBounded: a server answering every read with a
// 1 GiB object is read no further than the limit plus one byte, through
// each HTTP adapter, with and without an announced length, and a push over
// it writes nothing. The handler ignores Range, as a hostile or broken
// server may.
func TestHugeObjectReadStaysBounded(t *testing.T) {
	setLimit := func(s writefence.ConditionalStore, n int64) {
		switch s := s.(type) {
		case *writefence.MinioStore:
			s.MaxObjectSize = n
		case *writefence.GCSStore:
			s.MaxObjectSize = n
		}
	}
	type scenario struct {
		announce bool
		via      string // "get", "push" or "latest"
		limit    int64  // the store's read limit; 0 means its default
	}
	var scenarios []scenario
	for _, announce := range []bool{true, false} {
		for _, via := range []string{"get", "push", "latest"} {
			scenarios = append(scenarios, scenario{announce, via, 1 << 20}) // 1 MiB
		}
	}
	// A Fence and a store left at their defaults: the worst case a caller
	// who configured nothing meets.
	scenarios = append(scenarios, scenario{false, "get", 0}, scenario{false, "latest", 0})

	for _, adapter := range []string{"s3", "gcs"} {
		for _, sc := range scenarios {
			name := fmt.Sprintf("%s/announced=%t/%s/limit=%d", adapter, sc.announce, sc.via, sc.limit)
			t.Run(name, func(t *testing.T) {
				var sent atomic.Int64
				srv := httptest.NewServer(hugeObject(sc.announce, &sent))
				t.Cleanup(srv.Close)
				tr := testserver.NewTransport(t)
				store := standInStores(t, srv.URL, tr)[adapter]
				limit := sc.limit
				f := &writefence.Fence{Store: store}
				if limit > 0 {
					setLimit(store, limit)
					f.MaxPayloadSize = limit - defaults.MaxHeaderSize
				} else {
					limit = defaults.MaxObjectSize
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()

				var err error
				switch sc.via {
				case "get":
					var data []byte
					data, _, err = store.Get(ctx, "big")
					assert.Nil(t, data)
				case "push":
					err = f.Push(ctx, "wal", "0", "w", 1, []byte("x"))
				case "latest":
					_, _, _, err = f.Latest(ctx, "wal", "0")
				}
				if sc.via == "push" && !sc.announce {
					// A push reads only the record's header, with a ranged
					// read; a response that names no total size is refused
					// as a failed read, before its body is read.
					require.Error(t, err)
					for _, not := range []error{writefence.ErrNotFound, writefence.ErrConflict, writefence.ErrStaleEpoch, writefence.ErrCorrupt} {
						assert.NotErrorIs(t, err, not)
					}
				} else {
					require.ErrorIs(t, err, writefence.ErrTooLarge)
					var se *writefence.StoreError
					require.ErrorAs(t, err, &se)
					assert.Equal(t, adapter+" get", se.Op)
					assert.ErrorContains(t, se, fmt.Sprintf("more than %d bytes", limit))
				}
				assert.Zero(t, tr.Writes(), "nothing may be written")

				read := tr.BytesRead()
				assert.LessOrEqual(t, read, limit+1)
				if sc.announce {
					assert.Zero(t, read, "an announced size over the limit is refused unread")
				}
				t.Logf("%s: 1 GiB object, limit %d: client read %d bytes; server wrote %d bytes before the client went away", name, limit, read, sent.Load())
			})
		}
	}
}

// TestMalformedVersionTokens: a token an adapter could never have issued
// cannot equal the current version: on every adapter it is a conflict,
// decided before anything reaches the server.
func TestMalformedVersionTokens(t *testing.T) {
	var reqs atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	tr := testserver.NewTransport(t)

	// A listener that only counts: the Valkey client must never dial it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var dials atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	vc := testserver.ValkeyClient(t, ln.Addr().String(), "")

	stores := standInStores(t, srv.URL, tr)
	stores["valkey"] = writefence.NewValkeyStore(vc)
	cases := []struct{ store, token string }{
		{"s3", "*"},
		{"s3", `abc"`},
		{"s3", "a, W/\"b"},
		{"s3", "etag\r\nX-Amz-Injected: 1"},
		{"gcs", "abc"},
		{"gcs", "0"},
		{"gcs", "-1"},
		{"gcs", "01"},
		{"gcs", "1&ifGenerationMatch=0"},
		{"valkey", "0123456789ABCDEF0123456789ABCDEF"},
		{"valkey", "0123456789abcdef"},
		{"valkey", "0123456789abcdef0123456789abcdef\x00"},
	}
	for _, tc := range cases {
		t.Run(tc.store+"/"+strconv.Quote(tc.token), func(t *testing.T) {
			v, err := stores[tc.store].PutIfVersion(t.Context(), "k", []byte("x"), tc.token)
			require.ErrorIs(t, err, writefence.ErrConflict)
			assert.NotErrorIs(t, err, writefence.ErrInvalidArgument)
			assert.Empty(t, v)
			assert.True(t, strings.HasPrefix(err.Error(), "writefence: "), err.Error())
			assert.NotContains(t, err.Error(), "\n", "the token is escaped in the message")
		})
	}
	assert.Zero(t, reqs.Load(), "no request may reach the HTTP server")
	assert.Zero(t, tr.Requests())
	assert.Zero(t, dials.Load(), "no connection may reach the Valkey server")
}

// testRememberedOverDamage: on S3 and GCS, whose versions name the bytes,
// a Fence decides an update over the record it wrote on what it
// remembers whatever the record's size; damage in the middle of a record
// longer than the part every store checks on a write is still never
// replaced (promise 7): it gave the record a new version, so the write
// conditioned on the remembered one is refused, and the read that follows
// finds the damage. writes counts the requests that wrote.
func testRememberedOverDamage(t *testing.T, s writefence.ConditionalStore, damage testserver.Damager, writes func() int64) {
	ctx := t.Context()
	f := &writefence.Fence{Store: s, Prefix: testserver.UniqueName(t) + "/"}
	var refs []writefence.BlobRef
	for i := range 30 {
		ref, err := f.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader(fmt.Sprint("segment ", i)))
		require.NoError(t, err)
		refs = append(refs, ref)
	}
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = refs
		return m, nil
	}))
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	data, _, err := s.Get(ctx, info.Key)
	require.NoError(t, err)
	require.Greater(t, len(data), 1343, "a record longer than every store checks on a write")
	require.NoError(t, damage(ctx, info.Key, testserver.Fault{Flip: len(data) / 2}))
	damaged, _, err := s.Get(ctx, info.Key)
	require.NoError(t, err)

	before := writes()
	err = f.Update(ctx, "wal", "0", "a", 2, func([]byte) ([]byte, error) { return []byte("next"), nil })
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, int64(1), writes()-before, "one write, decided on the remembered record and refused, before the read")
	after, _, err := s.Get(ctx, info.Key)
	require.NoError(t, err)
	assert.Equal(t, damaged, after, "the damage is as it was")
}

func TestMinioRememberedOverDamage(t *testing.T) {
	t.Parallel()
	wire := testserver.NewTransport(t)
	c := testserver.S3Server(t).Client(t, wire)
	bucket := testserver.MinioBucket(t, c)
	testRememberedOverDamage(t, writefence.NewMinioStore(c, bucket), testserver.DamageS3(c, bucket), wire.Writes)
}

func TestGCSRememberedOverDamage(t *testing.T) {
	t.Parallel()
	wire := testserver.NewTransport(t)
	c := testserver.GCSClient(t, testserver.GCSEndpoint(t), wire)
	bucket := testserver.GCSBucket(t, c)
	damage := testserver.DamageGCS(testserver.GCSClient(t, testserver.GCSEndpoint(t), nil), bucket)
	testRememberedOverDamage(t, writefence.NewGCSStore(c, bucket), damage, wire.Writes)
}

// TestModelServers runs the model on the real servers: MinIO,
// fake-gcs-server, and Valkey on both write paths, standalone and with a
// replica that must acknowledge every write (WaitReplicas), and on the
// cluster .ci/run starts, with and without WaitReplicas. On the cluster the
// runs' keys share one hash tag, so that the brand key is in the record's
// slot and the writers under BrandVerifyAlways check it in their writes (a
// cluster refuses that across slots, as TestValkeyClusterBrand shows).
func TestModelServers(t *testing.T) {
	t.Parallel()
	t.Run("minio", func(t *testing.T) {
		t.Parallel()
		modeltest.Run(t, func(t *testing.T) modeltest.Target {
			c, bucket := newMinioBucket(t)
			return modeltest.Target{Name: "minio", Rewrites: true, Store: writefence.NewMinioStore(c, bucket), Damage: testserver.DamageS3(c, bucket), ClockStep: time.Second}
		})
	})
	t.Run("gcs", func(t *testing.T) {
		t.Parallel()
		modeltest.Run(t, func(t *testing.T) modeltest.Target {
			c := testserver.GCSClient(t, testserver.GCSEndpoint(t), nil)
			bucket := testserver.GCSBucket(t, c)
			return modeltest.Target{Name: "gcs", Rewrites: true, Store: writefence.NewGCSStore(c, bucket), Damage: testserver.DamageGCS(c, bucket)}
		})
	})
	for _, script := range []bool{false, true} {
		path := map[bool]string{false: "watch", true: "script"}[script]
		t.Run("valkey-"+path, func(t *testing.T) {
			t.Parallel()
			modeltest.Run(t, func(t *testing.T) modeltest.Target {
				c := newValkeyClient(t)
				s := writefence.NewValkeyStore(c)
				s.Script = script
				return modeltest.Target{Name: "valkey-" + path, Store: s, Damage: testserver.DamageValkey(c), Prefix: valkeyPrefix(t, c)}
			})
		})
		for _, wait := range []int{0, 1} {
			name := map[int]string{0: "valkey-cluster-", 1: "valkey-cluster-waiting-"}[wait] + path
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				modeltest.Run(t, func(t *testing.T) modeltest.Target {
					addrs := testserver.ValkeyClusterAddrs(t)
					c := testserver.ValkeyClusterClient(t, addrs)
					s := writefence.NewValkeyStore(c)
					s.Script, s.WaitReplicas, s.WaitTimeout = script, wait, testAckTimeout
					return modeltest.Target{Name: name, Store: s, Damage: testserver.DamageValkey(c), Prefix: testserver.ValkeyClusterPrefix(t, addrs, true)}
				})
			})
		}
		t.Run("valkey-replica-"+path, func(t *testing.T) {
			t.Parallel()
			modeltest.Run(t, func(t *testing.T) modeltest.Target {
				addr, primary := startPrimary(t)
				startReplica(t, primary, addr)
				s := writefence.NewValkeyStore(primary)
				s.Script, s.WaitReplicas, s.WaitTimeout = script, 1, testAckTimeout
				return modeltest.Target{Name: "valkey-replica-" + path, Store: s, Damage: testserver.DamageValkey(primary)}
			})
		})
	}
}
