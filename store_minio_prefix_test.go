package writefence_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
)

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
	base := uniqueName(t)
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
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	prefix := uniqueName(t) + "/"
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
	assert.Equal(t, 1+writeTrips, reqs, "cold push: one header read, one write")
	assert.LessOrEqual(t, read, defaults.MaxHeaderSize+2*slack)
	assert.Positive(t, read)

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

func TestMinioGetPrefix(t *testing.T) {
	store, wire := countedMinioStore(t)
	var _ writefence.PrefixReader = store
	testPrefixAgreesWithGet(t, store)
	testPrefixFence(t, store, wire.traffic, 1, 0)

	testPrefixTooLarge(t, store, func(n int64) { store.MaxObjectSize = n })
}

// TestMinioGetPrefixWire checks the request GetPrefix sends and how it reads
// the answers of servers that differ from MinIO.
func TestMinioGetPrefixWire(t *testing.T) {
	const body = "0123456789"
	// partial answers a range request as S3 does, with the given
	// Content-Range, ETag and body.
	partial := func(w http.ResponseWriter, contentRange, etag, part string) {
		if etag != "" {
			w.Header().Set("ETag", etag)
		}
		w.Header().Set("Content-Range", contentRange)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("Content-Length", strconv.Itoa(len(part)))
		w.WriteHeader(http.StatusPartialContent)
		io.WriteString(w, part)
	}
	cases := []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		prefix string
		size   int64
		fails  bool
	}{
		{"range honoured", func(w http.ResponseWriter, r *http.Request) {
			partial(w, "bytes 0-3/10", `"e1"`, body[:4])
		}, "0123", 10, false},
		{"range ignored", func(w http.ResponseWriter, r *http.Request) {
			writeS3Object(w, body, `"e1"`)
		}, "0123", 10, false},
		{"total unknown", func(w http.ResponseWriter, r *http.Request) {
			partial(w, "bytes 0-3/*", `"e1"`, body[:4])
		}, "", 0, true},
		{"short body", func(w http.ResponseWriter, r *http.Request) {
			partial(w, "bytes 0-1/10", `"e1"`, body[:2])
		}, "", 0, true},
		{"no etag", func(w http.ResponseWriter, r *http.Request) {
			partial(w, "bytes 0-3/10", "", body[:4])
		}, "", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := newS3Fake(t, tc.answer)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			prefix, size, version, err := fake.store(t, 1).GetPrefix(ctx, "k", 4)
			reqs := fake.requests()
			require.Len(t, reqs, 1)
			assert.Equal(t, "bytes=0-3", reqs[0].header.Get("Range"))
			if tc.fails {
				assertNeitherSentinel(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.prefix, string(prefix))
			assert.Equal(t, tc.size, size)
			assert.Equal(t, "e1", version)
		})
	}

	// A 416 (the empty object) is followed by one unranged GET, whose
	// answer is read from that response alone.
	fake := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			writeS3Error(w, http.StatusRequestedRangeNotSatisfiable, "InvalidRange")
			return
		}
		writeS3Object(w, "", `"empty"`)
	})
	prefix, size, version, err := fake.store(t, 1).GetPrefix(t.Context(), "k", 4)
	require.NoError(t, err)
	assert.Empty(t, prefix)
	assert.Zero(t, size)
	assert.Equal(t, "empty", version)
	reqs := fake.requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, "", reqs[1].header.Get("Range"))
}

// testPrefixTooLarge: GetPrefix of an object over the store's read limit
// is a TooLargeError, as Get's would be. setLimit sets the limit of store.
func testPrefixTooLarge(t *testing.T, store prefixStoreUnderTest, setLimit func(int64)) {
	t.Run("too large", func(t *testing.T) {
		key := uniqueName(t)
		_, err := store.PutIfVersion(t.Context(), key, make([]byte, 100), "")
		require.NoError(t, err)
		setLimit(99)
		defer setLimit(0)
		_, _, _, err = store.GetPrefix(t.Context(), key, 10)
		var tl *writefence.StoreError
		require.ErrorAs(t, err, &tl)
		assert.Contains(t, tl.Error(), fmt.Sprintf("more than %d bytes", 99))
	})
}
