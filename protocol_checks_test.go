//go:build (!writefence_nominio || !writefence_nogcs || !writefence_novalkey) && !writefence_nosdk

package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// The protocol checks every adapter of this package runs on its server.

// storeContents returns every key under prefix with its version and
// bytes, read through store, which must be a Lister.
func storeContents(t *testing.T, store writefence.ConditionalStore, prefix string) map[string]string {
	t.Helper()
	ctx := t.Context()
	contents := map[string]string{}
	require.NoError(t, store.(writefence.Lister).List(ctx, prefix, func(key string) error {
		data, version, err := store.Get(ctx, key)
		if err != nil {
			return err
		}
		contents[key] = version + " " + string(data)
		return nil
	}))
	return contents
}

// prefixStoreUnderTest is an adapter with the prefix capability.
type prefixStoreUnderTest interface {
	writefence.ConditionalStore
	writefence.PrefixReader
}

// testPrefixAgreesWithGet checks GetPrefix against a full Get of the same
// object on a real server: the prefix is the start of the bytes, the size
// is their length and the version is Get's version, for objects shorter
// than, as long as and longer than n, including the empty object. The S3
// and GCS prefix tests share it.
func testPrefixAgreesWithGet(t *testing.T, store prefixStoreUnderTest) {
	ctx := t.Context()
	base := testserver.UniqueName(t)
	put := func(t *testing.T, key string, data []byte, expect string) (string, error) {
		cleanupKey(t, store, key)
		return store.PutIfVersion(ctx, key, data, expect)
	}
	for _, n := range []int64{1, defaults.MaxHeaderSize} {
		seen := map[int64]bool{}
		for _, size := range []int64{0, 1, n - 1, n, n + 1, 3*n + 7} {
			if seen[size] {
				continue
			}
			seen[size] = true
			t.Run(fmt.Sprintf("n=%d/size=%d", n, size), func(t *testing.T) {
				key := fmt.Sprintf("%s/%d/%d", base, n, size)
				data := make([]byte, size)
				for i := range data {
					data[i] = byte(i*7 + 1)
				}
				written, err := put(t, key, data, "")
				require.NoError(t, err)

				prefix, gotSize, version, err := store.GetPrefix(ctx, key, n)
				require.NoError(t, err)
				full, fullVersion, err := store.Get(ctx, key)
				require.NoError(t, err)

				assert.Equal(t, data, full)
				assert.Equal(t, full[:min(n, size)], prefix)
				assert.Len(t, prefix, int(min(n, size)))
				assert.Equal(t, size, gotSize, "the object's size, not the range's")
				assert.Equal(t, fullVersion, version)
				assert.Equal(t, written, version)
			})
		}
	}

	t.Run("version follows a rewrite", func(t *testing.T) {
		key := base + "/rewrite"
		v1, err := put(t, key, []byte("first contents"), "")
		require.NoError(t, err)
		v2, err := store.PutIfVersion(ctx, key, []byte{}, v1)
		require.NoError(t, err)
		prefix, size, v, err := store.GetPrefix(ctx, key, 4)
		require.NoError(t, err)
		assert.Empty(t, prefix)
		assert.Zero(t, size)
		assert.Equal(t, v2, v)
		// The token it returned conditions a write like Get's does.
		_, err = store.PutIfVersion(ctx, key, []byte("third"), v)
		require.NoError(t, err)
		_, err = store.PutIfVersion(ctx, key, []byte("fourth"), v)
		require.ErrorIs(t, err, writefence.ErrConflict)
	})

	t.Run("missing key", func(t *testing.T) {
		_, _, _, err := store.GetPrefix(ctx, base+"/missing", defaults.MaxHeaderSize)
		require.ErrorIs(t, err, writefence.ErrNotFound)
		assert.NotErrorIs(t, err, writefence.ErrConflict)
	})

	t.Run("n below one", func(t *testing.T) {
		_, _, _, err := store.GetPrefix(ctx, base+"/missing", 0)
		require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	})
}

// cleanupKey deletes key when the test ends, on a store that can delete.
func cleanupKey(t *testing.T, store writefence.ConditionalStore, key string) {
	if d, ok := store.(writefence.Deleter); ok {
		t.Cleanup(func() {
			ctx, cancel := testserver.CleanupContext(t)
			defer cancel()
			assert.NoError(t, d.Delete(ctx, key))
		})
	}
}

// testPrefixFence: over a record holding a 16 MiB payload, a fresh fence
// reads the header alone (at most MaxHeaderSize bytes) and writes, in two
// requests; a stale push is refused after one such read; the fence that
// wrote last pushes again with the write alone. wire counts the store's
// traffic: it returns the round trips made and the bytes that reads
// returned so far. A write takes writeTrips round trips; every read or write
// may read up to slack bytes besides the record's (Valkey's version token).
func testPrefixFence(t *testing.T, store writefence.ConditionalStore, traffic func() (trips, read int64), writeTrips, slack int64) {
	ctx := t.Context()
	prefix := testserver.UniqueName(t) + "/"
	key, err := keys.Shard(prefix, "wal", "0")
	require.NoError(t, err)
	cleanupKey(t, store, key)
	big := benchPayload(16 << 20)
	fresh := func() *writefence.Fence { return &writefence.Fence{Store: store, Prefix: prefix} }
	require.NoError(t, fresh().Push(ctx, "wal", "0", "a", 1, big))

	// measure returns the round trips and the bytes read by f.
	measure := func(f func()) (int64, int64) {
		trips0, read0 := traffic()
		f()
		trips, read := traffic()
		return trips - trips0, read - read0
	}
	last := fresh()
	reqs, read := measure(func() { require.NoError(t, last.Push(ctx, "wal", "0", "b", 2, big)) })
	assert.Equal(t, 1+writeTrips, reqs, "cold push: a header read, one write")
	assert.LessOrEqual(t, read, defaults.MaxHeaderSize+2*slack, "the record replaced is read by its head alone")
	t.Logf("cold push over a 16 MiB record: %d requests, %d bytes read", reqs, read)

	reqs, read = measure(func() {
		require.ErrorIs(t, fresh().Push(ctx, "wal", "0", "c", 2, big), writefence.ErrStaleEpoch)
	})
	assert.Equal(t, int64(1), reqs, "stale push: the header read alone")
	assert.LessOrEqual(t, read, defaults.MaxHeaderSize+slack)

	reqs, read = measure(func() { require.NoError(t, last.Push(ctx, "wal", "0", "b", 3, big)) })
	assert.Equal(t, writeTrips, reqs, "steady push: the write alone")
	assert.LessOrEqual(t, read, slack)

	epoch, writer, payload, err := fresh().Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), epoch)
	assert.Equal(t, "b", writer)
	assert.Equal(t, big, payload)
}

// wrapperCalls is what a wrapper that embeds an adapter does in its
// overrides of Get and PutIfVersion: it counts every call and, when told
// to, refuses it with errWrapperRefused instead of calling the adapter.
// Embedding needs a concrete type, so each adapter's tests declare their
// wrapper type and forward its two overrides here.
type wrapperCalls struct {
	refuseGets, refusePuts atomic.Bool
	gets, puts             atomic.Int64
}

// errWrapperRefused is the wrapper's refusal: transient, so the Fence
// retries it as it would a store's failure, through the wrapper again.
var errWrapperRefused = errors.New("refused by the test's wrapper")

func (w *wrapperCalls) get(ctx context.Context, key string, next func(context.Context, string) ([]byte, string, error)) ([]byte, string, error) {
	w.gets.Add(1)
	if w.refuseGets.Load() {
		return nil, "", errWrapperRefused
	}
	return next(ctx, key)
}

func (w *wrapperCalls) put(ctx context.Context, key string, data []byte, expect string,
	next func(context.Context, string, []byte, string) (string, error)) (string, error) {
	w.puts.Add(1)
	if w.refusePuts.Load() {
		return "", errWrapperRefused
	}
	return next(ctx, key, data, expect)
}

// testWrapperNotBypassed checks that a store embedding an adapter and
// overriding Get or PutIfVersion is used through its overrides, never
// through the capabilities it inherits (GetPrefix, PutPartsIfVersion,
// PutIfBranded), by every write of a Fence (Push, Update, Seal, Settle,
// Lease.Acquire, ClaimBrand) and every read, with no brand check and with
// BrandVerifyAlways. wrapped is such a wrapper over adapter, its overrides
// forwarded to calls; the test's keys are under prefix.
//
// With its PutIfVersion refusing, every write attempt the engine makes
// (counted by testserver.Trace, MaxAttempts of them) reaches the override
// and the operation fails with the wrapper's error; with its Get
// refusing, every read does, and nothing is written. Either way the store
// is unchanged.
func testWrapperNotBypassed(t *testing.T, adapter, wrapped writefence.ConditionalStore, calls *wrapperCalls, prefix string) {
	const maxAttempts = 3
	for _, brand := range []writefence.BrandMode{0, writefence.BrandVerifyAlways} {
		t.Run(map[writefence.BrandMode]string{0: "no brand", writefence.BrandVerifyAlways: "brand verified in every write"}[brand], func(t *testing.T) {
			ctx := t.Context()
			prefix := prefix + strconv.Itoa(int(brand)) + "/"
			direct := &writefence.Fence{Store: adapter, Prefix: prefix}
			require.NoError(t, direct.Push(ctx, "wal", "0", "w", 3, []byte("recorded at 3")))
			damagedKey, err := keys.Shard(prefix, "wal", "damaged")
			require.NoError(t, err)
			_, err = adapter.PutIfVersion(ctx, damagedKey, []byte("no record"), "")
			require.NoError(t, err)
			info, err := direct.Inspect(ctx, "wal", "damaged")
			require.ErrorIs(t, err, writefence.ErrCorrupt)
			if brand != 0 {
				_, err := direct.ClaimBrand(ctx)
				require.NoError(t, err)
			}
			before := storeContents(t, adapter, prefix)

			f := &writefence.Fence{Store: wrapped, Prefix: prefix, Brand: brand, MaxAttempts: maxAttempts}
			type op struct {
				name  string
				write bool
				run   func(ctx context.Context) error
			}
			ops := []op{
				{"push", true, func(ctx context.Context) error { return f.Push(ctx, "wal", "0", "w", 7, []byte("pushed")) }},
				{"update", true, func(ctx context.Context) error {
					return f.Update(ctx, "wal", "0", "w", 7, func(cur []byte) ([]byte, error) { return append(cur, '+'), nil })
				}},
				{"seal", true, func(ctx context.Context) error { return f.Seal(ctx, "wal", "0", "w", 7) }},
				{"settle", true, func(ctx context.Context) error {
					return f.Settle(ctx, "wal", "damaged", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 9, Payload: []byte("settled"), Floor: 1})
				}},
				{"lease acquire", true, func(ctx context.Context) error {
					_, err := (&writefence.Lease{Fence: f, Name: "lease", Holder: "h", TTL: time.Minute}).Acquire(ctx)
					return err
				}},
				{"latest", false, func(ctx context.Context) error { _, _, _, err := f.Latest(ctx, "wal", "0"); return err }},
				{"inspect", false, func(ctx context.Context) error { _, err := f.Inspect(ctx, "wal", "0"); return err }},
			}
			if brand == 0 {
				// Under a brand the store is claimed already: nothing to write.
				ops = append(ops, op{"claim brand", true, func(ctx context.Context) error { _, err := f.ClaimBrand(ctx); return err }})
			}
			for _, mode := range []string{"put refused", "get refused"} {
				for _, o := range ops {
					if mode == "put refused" && !o.write {
						continue
					}
					t.Run(mode+"/"+o.name, func(t *testing.T) {
						calls.refusePuts.Store(mode == "put refused")
						calls.refuseGets.Store(mode == "get refused")
						defer calls.refusePuts.Store(false)
						defer calls.refuseGets.Store(false)
						gets0, puts0 := calls.gets.Load(), calls.puts.Load()
						tctx, trace := testserver.Traced(ctx)
						err := o.run(tctx)
						gets, puts := calls.gets.Load()-gets0, calls.puts.Load()-puts0
						t.Logf("%d reads, %d writes by the engine; %d gets, %d puts by the wrapper: %v", trace.Reads(), trace.Writes(), gets, puts, err)
						require.ErrorIs(t, err, errWrapperRefused, "the override was used")
						if mode == "put refused" {
							assert.Equal(t, int64(maxAttempts), trace.Writes(), "every attempt wrote")
							assert.Equal(t, trace.Writes(), puts, "every write went through the override")
							// Under BrandVerifyAlways the brand read before
							// each write is one of the engine's reads too.
							wantReads := int64(maxAttempts) // a settle reads its log too
							if brand == writefence.BrandVerifyAlways {
								wantReads = 2 * maxAttempts
							}
							assert.GreaterOrEqual(t, trace.Reads(), wantReads, "every attempt read")
							assert.Equal(t, trace.Reads(), gets, "every read went through Get")
						} else {
							// A write retries its read, and so do Latest
							// and Inspect (promise 6); under a brand these
							// read the brand first (not an engine read),
							// which is refused, and under BrandVerifyAlways
							// retried as every read of theirs is.
							reads, brandReads := int64(maxAttempts), int64(0)
							if !o.write && brand != 0 {
								reads, brandReads = 0, 1
								if brand == writefence.BrandVerifyAlways {
									brandReads = maxAttempts
								}
							}
							assert.Equal(t, reads, trace.Reads(), "every attempt read")
							assert.Equal(t, trace.Reads()+brandReads, gets, "every read went through the override")
							assert.Zero(t, trace.Writes(), "nothing was written")
							assert.Zero(t, puts)
						}
						assert.Equal(t, before, storeContents(t, adapter, prefix), "the store is unchanged")
					})
				}
			}
		})
	}
}

func benchPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31 + 7)
	}
	return p
}
