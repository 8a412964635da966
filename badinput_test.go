//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// Hostile and out-of-range input: every case must be refused with a clear,
// typed error and must write nothing.

// snapshot is every key of a MemStore with its bytes and version.
func snapshot(t *testing.T, m *writefence.MemStore) map[string]string {
	t.Helper()
	s := make(map[string]string)
	for _, k := range testserver.Keys(t, m) {
		data, v, err := m.Get(t.Context(), k)
		require.NoError(t, err)
		s[k] = v + "\x00" + string(data)
	}
	return s
}

// recordClaiming returns a valid record whose header then claims payloadLen
// bytes of payload, with the header checksum recomputed so that only the
// length disagrees with the bytes present. It relies on the layout
// documented in internal/record/record.go.
func recordClaiming(t *testing.T, writer string, epoch, payloadLen uint64) []byte {
	t.Helper()
	m := &writefence.MemStore{}
	require.NoError(t, (&writefence.Fence{Store: m}).Push(t.Context(), "p", "s", writer, epoch, []byte("tiny")))
	rec, _, err := m.Get(t.Context(), mustKey(t, "p", "s"))
	require.NoError(t, err)
	binary.BigEndian.PutUint64(rec[16:], payloadLen)
	end := 28 + len(defaults.Identity) + len(writer)
	binary.BigEndian.PutUint32(rec[end:], crc32.Checksum(rec[:end], crc32.MakeTable(crc32.Castagnoli)))
	return rec
}

func TestBadInputFence(t *testing.T) {
	mem := &writefence.MemStore{}
	seed := &writefence.Fence{Store: mem}
	require.NoError(t, seed.Push(t.Context(), "wal", "0", "leader", 7, []byte("seven")))
	require.NoError(t, seed.Push(t.Context(), "wal", "max", "leader", math.MaxUint64, []byte("last")))
	hugeKey := mustKey(t, "wal", "huge")
	hugeVersion, err := mem.PutIfVersion(t.Context(), hugeKey, recordClaiming(t, "leader", 3, 4<<30), "")
	require.NoError(t, err)

	counting := counted(mem)
	f := &writefence.Fence{Store: counting, MaxPayloadSize: 16}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	ctx := context.Background()
	push := func(f *writefence.Fence, ctx context.Context, plugin, shard, writer string, epoch uint64, payload []byte) func() error {
		return func() error { return f.Push(ctx, plugin, shard, writer, epoch, payload) }
	}
	latest := func(f *writefence.Fence, ctx context.Context, plugin, shard string) func() error {
		return func() error { _, _, _, err := f.Latest(ctx, plugin, shard); return err }
	}
	pushFrom := func(src writefence.EpochSource) func() error {
		return func() error { _, err := f.PushFrom(ctx, src, "wal", "0", "w", nil); return err }
	}
	errSource := errors.New("no lease held")

	// arg names the *InvalidArgumentError expected; stale, corrupt and wire
	// the other typed errors; is the sentinel every case must match.
	cases := []struct {
		name    string
		call    func() error
		is      error
		arg     string
		stale   *writefence.StaleEpochError
		corrupt *writefence.CorruptError
		wire    *writefence.WireError
	}{
		{name: "push nil store", call: push(&writefence.Fence{}, ctx, "p", "s", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "store"},
		{name: "push empty plugin", call: push(f, ctx, "", "s", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "plugin"},
		{name: "push empty shard", call: push(f, ctx, "p", "", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "shard"},
		{name: "push plugin over MaxNameLen", call: push(f, ctx, strings.Repeat("p", keys.MaxNameLen+1), "s", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "plugin"},
		{name: "push hostile names escaping past MaxKeyLen", call: push(f, ctx, strings.Repeat("\x00", 256), strings.Repeat("../", 85), "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "key"},
		{name: "push empty writer", call: push(f, ctx, "p", "s", "", 1, nil), is: writefence.ErrInvalidArgument, arg: "writer"},
		{name: "push writer over MaxWriterLen", call: push(f, ctx, "p", "s", strings.Repeat("w", 1025), 1, nil), is: writefence.ErrInvalidArgument, arg: "writer"},
		{name: "push epoch 0", call: push(f, ctx, "wal", "0", "w", 0, nil), is: writefence.ErrInvalidArgument, arg: "epoch"},
		{name: "push payload over the limit", call: push(f, ctx, "wal", "0", "w", 8, make([]byte, 17)), is: writefence.ErrInvalidArgument, arg: "payload"},
		{name: "push identity over MaxIdentityLen", call: push(&writefence.Fence{Store: counting, Identity: strings.Repeat("i", 256)}, ctx, "p", "s", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "identity"},
		{name: "push max epoch over max epoch", call: push(f, ctx, "wal", "max", "rival", math.MaxUint64, nil), is: writefence.ErrStaleEpoch,
			stale: &writefence.StaleEpochError{Op: "push", Key: mustKey(t, "wal", "max"), Epoch: math.MaxUint64, RecordedEpoch: math.MaxUint64, RecordedWriter: "leader"}},
		{name: "push equal epoch", call: push(f, ctx, "wal", "0", "rival", 7, nil), is: writefence.ErrStaleEpoch,
			stale: &writefence.StaleEpochError{Op: "push", Key: mustKey(t, "wal", "0"), Epoch: 7, RecordedEpoch: 7, RecordedWriter: "leader"}},
		{name: "push over a header claiming 4 GiB", call: push(f, ctx, "wal", "huge", "w", 9, nil), is: writefence.ErrCorrupt,
			corrupt: &writefence.CorruptError{Key: hugeKey, Version: hugeVersion, Check: "truncated payload"}},
		{name: "push cancelled ctx", call: push(f, cancelled, "wal", "0", "w", 8, nil), is: context.Canceled},
		{name: "push expired ctx", call: push(f, expired, "wal", "0", "w", 8, nil), is: context.DeadlineExceeded},
		{name: "push cancelled ctx with probe", call: push(&writefence.Fence{Store: counting, Probe: true}, cancelled, "wal", "0", "w", 8, nil), is: context.Canceled},
		{name: "latest nil store", call: latest(&writefence.Fence{}, ctx, "p", "s"), is: writefence.ErrInvalidArgument, arg: "store"},
		{name: "latest empty shard", call: latest(f, ctx, "wal", ""), is: writefence.ErrInvalidArgument, arg: "shard"},
		{name: "latest shard over MaxNameLen", call: latest(f, ctx, "wal", strings.Repeat("s", keys.MaxNameLen+1)), is: writefence.ErrInvalidArgument, arg: "shard"},
		{name: "latest never pushed", call: latest(f, ctx, "wal", "never"), is: writefence.ErrNotFound},
		{name: "latest header claiming 4 GiB", call: latest(f, ctx, "wal", "huge"), is: writefence.ErrCorrupt,
			corrupt: &writefence.CorruptError{Key: hugeKey, Version: hugeVersion, Check: "truncated payload"}},
		{name: "latest cancelled ctx", call: latest(f, cancelled, "wal", "0"), is: context.Canceled},
		{name: "push-from nil source", call: pushFrom(nil), is: writefence.ErrInvalidArgument, arg: "source"},
		{name: "push-from epoch 0", call: pushFrom(writefence.StaticEpochSource(0)), is: writefence.ErrInvalidArgument, arg: "epoch"},
		{name: "push-from failing source", call: pushFrom(epochFunc(func(context.Context, string, string) (uint64, error) { return 0, errSource })), is: errSource},
		{name: "brand nil store", call: func() error { return (&writefence.Fence{}).VerifyBrand(ctx) }, is: writefence.ErrInvalidArgument, arg: "store"},
		{name: "brand identity over MaxIdentityLen", call: func() error {
			return claimBrand(ctx, &writefence.Fence{Store: counting, Identity: strings.Repeat("i", 256)})
		}, is: writefence.ErrInvalidArgument, arg: "identity"},
		{name: "brand key over MaxKeyLen", call: func() error {
			_, err := (&writefence.Fence{Store: counting, Prefix: strings.Repeat("k", keys.MaxKeyLen+1)}).ClaimBrand(ctx)
			return err
		}, is: writefence.ErrInvalidArgument, arg: "prefix"},
		{name: "brand unbranded store", call: func() error { return (&writefence.Fence{Store: counting}).VerifyBrand(ctx) }, is: writefence.ErrWire,
			wire: &writefence.WireError{Key: keys.Brand(""), Expected: defaults.Identity, Absent: true}},
		{name: "brand claim cancelled ctx", call: func() error { return claimBrand(cancelled, &writefence.Fence{Store: counting}) }, is: context.Canceled},
		{name: "probe nil store", call: func() error { return writefence.Probe(ctx, nil, "k") }, is: writefence.ErrInvalidArgument, arg: "store"},
		{name: "probe empty key", call: func() error { return writefence.Probe(ctx, counting, "") }, is: writefence.ErrInvalidArgument, arg: "key"},
		{name: "memstore malformed version", call: func() error {
			_, err := counting.PutIfVersion(ctx, mustKey(t, "wal", "0"), []byte("x"), "not-a-version\n")
			return err
		}, is: writefence.ErrConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, mem)
			puts := counting.Calls(fakestore.Put)
			err := tc.call()
			require.ErrorIs(t, err, tc.is)
			assert.True(t, strings.HasPrefix(err.Error(), "writefence: ") || tc.is == context.Canceled || tc.is == context.DeadlineExceeded,
				"message %q lacks the package prefix", err)
			if tc.arg != "" {
				var ia *writefence.InvalidArgumentError
				require.ErrorAs(t, err, &ia)
				assert.Equal(t, tc.arg, ia.Arg)
			}
			if tc.stale != nil {
				var se *writefence.StaleEpochError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, *tc.stale, *se)
			}
			if tc.corrupt != nil {
				var ce *writefence.CorruptError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, *tc.corrupt, *ce)
			}
			if tc.wire != nil {
				var we *writefence.WireError
				require.ErrorAs(t, err, &we)
				assert.Equal(t, *tc.wire, *we)
			}
			if tc.name != "memstore malformed version" {
				assert.Equal(t, puts, counting.Calls(fakestore.Put), "no write may be attempted")
			}
			assert.Equal(t, before, snapshot(t, mem), "the store must be unchanged")
		})
	}
}

// TestHostileNamesStayInTheirKey: names that are valid however hostile
// (path separators, dot segments, NUL, newlines, terminal escapes, percent
// signs) land under an escaped key inside the shard space and read back.
func TestHostileNamesStayInTheirKey(t *testing.T) {
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem, Prefix: "tenant/"}
	names := []string{"..", "../../etc/passwd", "a/b", "\x00", "line\nbreak", "\x1b[31mred", "%2F", "_brand", "s/x", " "}
	for i, n := range names {
		require.NoError(t, f.Push(t.Context(), n, n, "w", uint64(i+1), []byte(n)))
	}
	keys := testserver.Keys(t, mem)
	require.Len(t, keys, len(names))
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, "tenant/s/"), k)
		segments := strings.Split(k, "/")
		assert.Len(t, segments, 4, "key %q splits into prefix, space, plugin and shard", k)
		for _, seg := range segments {
			assert.NotContains(t, []string{"", ".", ".."}, seg, "key %q has a dot or empty segment", k)
		}
		for _, c := range []byte(k) {
			assert.True(t, c > ' ' && c < 0x7f, "key %q carries byte %#x", k, c)
		}
	}
	for i, n := range names {
		epoch, _, payload, err := f.Latest(t.Context(), n, n)
		require.NoError(t, err)
		assert.Equal(t, uint64(i+1), epoch)
		assert.Equal(t, n, string(payload))
	}
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
