//go:build !writefence_nogcs && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// The integration tests of the GCS adapter run against the GCS emulator
// named by WRITEFENCE_GCS_ENDPOINT (fake-gcs-server, e.g.
// http://127.0.0.1:4443, started with -public-host so the client's XML
// reads reach it).

// newGCSIntegrationStore returns a store over a bucket of the test's own
// on the emulator, removed with its objects when the test ends, and the
// bucket's handle.
func newGCSIntegrationStore(t *testing.T) (*writefence.GCSStore, *storage.BucketHandle) {
	t.Helper()
	c := testserver.GCSClient(t, testserver.GCSEndpoint(t), nil)
	name := testserver.GCSBucket(t, c)
	return writefence.NewGCSStore(c, name), c.Bucket(name)
}

// TestGCSConformance runs the kit over one bucket, its traffic counted and
// the adapter embedded in a wrapper of gcsWrapper's type, with blobs in
// chunks of 256 KiB, the smallest the client sends. Get/UnderOverwrite,
// the longest of the checks, runs beside the others, on a bucket of its
// own (TestGCSUnderOverwrite), as MinIO's does.
func TestGCSConformance(t *testing.T) {
	t.Parallel()
	gcsKit(t, kitAllBut(kitOverwrite))
}

// TestGCSUnderOverwrite runs the kit's Get/UnderOverwrite as
// TestGCSConformance runs the others.
func TestGCSUnderOverwrite(t *testing.T) {
	t.Parallel()
	gcsKit(t, "^"+kitOverwrite)
}

// gcsKit runs the kit's checks that only matches (Options.Only) as
// TestGCSConformance says, over a bucket of the test's own.
func gcsKit(t *testing.T, only string) {
	wire := testserver.NewTransport(t)
	c := testserver.GCSClient(t, testserver.GCSEndpoint(t), wire)
	name := testserver.GCSBucket(t, c)
	store := writefence.NewGCSStore(c, name)
	store.MaxObjectSize = kitReadLimit
	store.BlobPartSize = 256 << 10
	opts := kitOptions(testserver.DamageGCS(testserver.GCSClient(t, testserver.GCSEndpoint(t), nil), name))
	opts.BlobPartSize = store.BlobPartSize
	opts.Only = only
	opts.Wire = &writefencetest.Wire{Count: func() (int64, int64) { return wire.Requests(), wire.GetBytesRead() }}
	opts.Wrap = func(s writefence.ConditionalStore, o *writefencetest.Overrides) writefence.ConditionalStore {
		return gcsWrapper{s.(*writefence.GCSStore), o}
	}
	writefencetest.TestConditionalStore(t, func(t *testing.T) writefence.ConditionalStore { return store }, opts)
}

// gcsWrapper is a store that embeds the GCS adapter and overrides Get and
// PutIfVersion, as a quota or an audit log would (the kit's
// Fence/Overrides).
type gcsWrapper struct {
	*writefence.GCSStore
	o *writefencetest.Overrides
}

func (w gcsWrapper) Get(ctx context.Context, key string) ([]byte, string, error) {
	return w.o.Get(ctx, key, w.GCSStore.Get)
}

func (w gcsWrapper) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	return w.o.PutIfVersion(ctx, key, data, expect, w.GCSStore.PutIfVersion)
}

// TestGCSIntegrationRoundTrip checks the adapter's own tokens against the
// emulator: a version is the generation the server reports, and a token of
// a form it never issues cannot match, leaving the object as it was.
func TestGCSIntegrationRoundTrip(t *testing.T) {
	store, bucket := newGCSIntegrationStore(t)
	v1, err := store.PutIfVersion(t.Context(), "k", []byte("one"), "")
	require.NoError(t, err)
	v2, err := store.PutIfVersion(t.Context(), "k", []byte("two"), v1)
	require.NoError(t, err)
	attrs, err := bucket.Object("k").Attrs(t.Context())
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(attrs.Generation, 10), v2, "the version is the object's generation")
	for _, tok := range []string{"abc", "-1", "0", "1.5", "0" + v2} {
		_, err = store.PutIfVersion(t.Context(), "k", []byte("c"), tok)
		require.ErrorIs(t, err, writefence.ErrConflict, "token %q: a token never issued cannot match", tok)
	}
	data, v, err := store.Get(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, "two", string(data))
	assert.Equal(t, v2, v)
}

// TestGCSIntegrationTooLarge reads an object at the limit and refuses one a
// byte over it.
func TestGCSIntegrationTooLarge(t *testing.T) {
	store, _ := newGCSIntegrationStore(t)
	ctx := t.Context()
	const limit = 4096
	store.MaxObjectSize = limit

	_, err := store.PutIfVersion(ctx, "at", bytes.Repeat([]byte("a"), limit), "")
	require.NoError(t, err)
	_, err = store.PutIfVersion(ctx, "over", bytes.Repeat([]byte("o"), limit+1), "")
	require.NoError(t, err, "the limit bounds reads, not writes")

	data, _, err := store.Get(ctx, "at")
	require.NoError(t, err)
	assert.Len(t, data, limit)

	data, v, err := store.Get(ctx, "over")
	requireTooLarge(t, err, "over", limit)
	assert.Nil(t, data)
	assert.Empty(t, v)
}

// TestGCSBlobMemory: a 40 MiB blob streamed in 16 MiB chunks allocates no
// more than two chunks.
func TestGCSBlobMemory(t *testing.T) {
	store, _ := newGCSIntegrationStore(t)
	testBlobMemory(t, store, 2*16<<20)
}

// TestGCSCommitManyBlobs: see testCommitManyBlobs.
func TestGCSCommitManyBlobs(t *testing.T) {
	t.Parallel()
	wire := testserver.NewTransport(t)
	c := testserver.GCSClient(t, testserver.GCSEndpoint(t), wire)
	store := writefence.NewGCSStore(c, testserver.GCSBucket(t, c))
	testCommitManyBlobs(t, store, func() (int64, int64) { return wire.Requests(), wire.Writes() })
}

// gcsDropLastModified is a transport that removes Last-Modified from every
// response, as a server that never sends it would, and counts the
// responses it removed it from.
type gcsDropLastModified struct {
	base    http.RoundTripper
	removed atomic.Int64
}

func (s *gcsDropLastModified) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(r)
	if err == nil && resp.Header.Get("Last-Modified") != "" {
		resp.Header.Del("Last-Modified")
		s.removed.Add(1)
	}
	return resp, err
}

// TestGCSIntegrationBlobTimeWithoutLastModified: through a transport that
// drops Last-Modified from the emulator's responses, CreateBlob, OpenBlob,
// StatBlob and ListBlobs report one and the same creation time for each
// blob, a time of the emulator's clock (on this machine, so near ours),
// never a zero time.
func TestGCSIntegrationBlobTimeWithoutLastModified(t *testing.T) {
	t.Parallel()
	wire := &gcsDropLastModified{base: testserver.HTTPTransport(t)}
	c := testserver.GCSClient(t, testserver.GCSEndpoint(t), wire)
	store := writefence.NewGCSStore(c, testserver.GCSBucket(t, c))
	ctx := t.Context()

	created := map[string]writefence.BlobInfo{}
	for _, n := range []int{0, 1, 4<<10 + 3} {
		key := "blob/" + strconv.Itoa(n)
		data := bytes.Repeat([]byte{'b'}, n)
		info, err := store.CreateBlob(ctx, key, bytes.NewReader(data))
		require.NoError(t, err)
		assert.Equal(t, int64(n), info.Size)
		assert.WithinDuration(t, time.Now(), info.Modified, time.Minute, "the emulator's clock")
		created[key] = info

		rc, opened, err := store.OpenBlob(ctx, key)
		require.NoError(t, err)
		got, err := io.ReadAll(rc)
		require.NoError(t, rc.Close())
		require.NoError(t, err)
		assert.Equal(t, data, got)
		assert.Equal(t, info, opened, "OpenBlob")

		stat, err := store.StatBlob(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, info, stat, "StatBlob")
	}
	listed := map[string]writefence.BlobInfo{}
	require.NoError(t, store.ListBlobs(ctx, "blob/", func(i writefence.BlobInfo) error {
		listed[i.Key] = i
		return nil
	}))
	assert.Equal(t, created, listed, "ListBlobs")
	assert.Positive(t, wire.removed.Load(), "the emulator sent a Last-Modified the transport removed")
}

// TestGCSNoSuchBucket: over a bucket that does not exist, a push, a blob
// and a lease end at their first write with errors.ErrUnsupported, which
// names the cause, and are not retried. The read before each cannot tell
// a missing bucket from a missing object (the client answers both as
// storage.ErrObjectNotExist), so it reads no record.
func TestGCSNoSuchBucket(t *testing.T) {
	t.Parallel()
	wire := testserver.NewTransport(t)
	c := testserver.GCSClient(t, testserver.GCSEndpoint(t), wire)
	fence := &writefence.Fence{Store: writefence.NewGCSStore(c, "no-such-bucket-"+strconv.FormatInt(time.Now().UnixNano(), 36)),
		RetryDelay: time.Microsecond}
	for _, tc := range []struct {
		name  string
		call  func() error
		kinds map[string]int64
	}{
		{"push", func() error { return fence.Push(t.Context(), "wal", "0", "a", 1, []byte("x")) },
			map[string]int64{"GET": 1, "POST": 1}},
		{"blob", func() error {
			_, err := fence.PutBlob(t.Context(), "wal", "0", "a", 1, bytes.NewReader([]byte("segment")))
			return err
		}, map[string]int64{"POST": 1}},
		{"lease", func() error {
			_, err := (&writefence.Lease{Fence: fence, Name: "l", Holder: "h", TTL: time.Minute}).Acquire(t.Context())
			return err
		}, map[string]int64{"GET": 1, "POST": 1}},
	} {
		before := wire.Kinds()
		err := tc.call()
		require.ErrorIs(t, err, errors.ErrUnsupported, tc.name)
		assert.Contains(t, err.Error(), "the bucket does not exist (create it", tc.name)
		after := wire.Kinds()
		for k := range after {
			after[k] -= before[k]
			if after[k] == 0 {
				delete(after, k)
			}
		}
		assert.Equal(t, tc.kinds, after, "%s: the requests, none retried", tc.name)
	}
}

// TestGCSCommitAfterEscapedKeys: see testCommitAfterEscapedKeys.
func TestGCSCommitAfterEscapedKeys(t *testing.T) {
	t.Parallel()
	gc := testserver.GCSClient(t, testserver.GCSEndpoint(t), nil)
	testCommitAfterEscapedKeys(t, writefence.NewGCSStore(gc, testserver.GCSBucket(t, gc)))
}
