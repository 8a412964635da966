package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// The integration tier runs against the GCS emulator named by
// WRITEFENCE_GCS_ENDPOINT (fake-gcs-server, e.g. http://127.0.0.1:4443,
// started with -public-host so the client's XML reads reach it).

// newGCSIntegrationClient returns a client for the emulator at endpoint.
func newGCSIntegrationClient(t *testing.T, endpoint string) *storage.Client {
	t.Helper()
	client, err := storage.NewClient(context.Background(),
		option.WithEndpoint(endpoint+"/storage/v1/"),
		option.WithoutAuthentication())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// newGCSIntegrationStore creates a bucket of its own for the test, removed
// with everything in it when the test ends, and returns a store over it.
func newGCSIntegrationStore(t *testing.T) (*writefence.GCSConditionalStore, *storage.BucketHandle) {
	t.Helper()
	client := newGCSIntegrationClient(t, serverEnv(t, "WRITEFENCE_GCS_ENDPOINT"))
	name := uniqueName(t)
	bucket := client.Bucket(name)
	require.NoError(t, bucket.Create(gcsCtx(t), "writefence-test", nil))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		it := bucket.Objects(ctx, nil)
		for {
			attrs, err := it.Next()
			if errors.Is(err, iterator.Done) {
				break
			}
			if err != nil {
				t.Errorf("cleanup: list %s: %v", name, err)
				return
			}
			if err := bucket.Object(attrs.Name).Delete(ctx); err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
				t.Errorf("cleanup: delete %s/%s: %v", name, attrs.Name, err)
			}
		}
		if err := bucket.Delete(ctx); err != nil {
			t.Errorf("cleanup: delete bucket %s: %v", name, err)
		}
	})
	return writefence.NewGCSConditionalStore(client, name), bucket
}

func gcsCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestGCSConformance runs the exported conformance suite over one bucket.
func TestGCSConformance(t *testing.T) {
	store, _ := newGCSIntegrationStore(t)
	writefencetest.TestConditionalStore(t, func(t *testing.T) writefence.ConditionalStore { return store })
}

// TestGCSIntegrationRoundTrip checks the adapter's own contract against the
// emulator: versions are the generations the server reports, and every
// refused write leaves the object as it was.
func TestGCSIntegrationRoundTrip(t *testing.T) {
	store, bucket := newGCSIntegrationStore(t)
	ctx := gcsCtx(t)

	_, _, err := store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)

	_, err = store.PutIfVersion(ctx, "k", []byte("a"), "1")
	require.ErrorIs(t, err, writefence.ErrConflict, "a token for a missing key is a conflict")
	_, _, err = store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound, "and does not create it")

	v1, err := store.PutIfVersion(ctx, "k", []byte("a"), "")
	require.NoError(t, err)
	attrs, err := bucket.Object("k").Attrs(ctx)
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(attrs.Generation, 10), v1, "the version is the object's generation")

	_, err = store.PutIfVersion(ctx, "k", []byte("b"), "")
	require.ErrorIs(t, err, writefence.ErrConflict, "create-only over an existing object")

	v2, err := store.PutIfVersion(ctx, "k", []byte("b"), v1)
	require.NoError(t, err)
	assert.NotEqual(t, v1, v2)

	_, err = store.PutIfVersion(ctx, "k", []byte("c"), v1)
	require.ErrorIs(t, err, writefence.ErrConflict, "a stale generation")

	for _, tok := range []string{"abc", "-1", "0", "1.5"} {
		_, err = store.PutIfVersion(ctx, "k", []byte("c"), tok)
		require.ErrorIs(t, err, writefence.ErrInvalidArgument, "token %q", tok)
	}

	data, v, err := store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "b", string(data), "no refused write landed")
	assert.Equal(t, v2, v)

	require.NoError(t, store.Delete(ctx, "k"))
	require.NoError(t, store.Delete(ctx, "k"), "deleting a missing object is not an error")
	_, _, err = store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)
}

// TestGCSIntegrationTooLarge reads an object at the limit and refuses one a
// byte over it.
func TestGCSIntegrationTooLarge(t *testing.T) {
	store, _ := newGCSIntegrationStore(t)
	ctx := gcsCtx(t)
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
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	assert.Nil(t, data)
	assert.Empty(t, v)
	var tl *writefence.StoreError
	require.ErrorAs(t, err, &tl)
	assert.Contains(t, tl.Error(), fmt.Sprintf("more than %d bytes", limit))
	assert.Equal(t, "over", tl.Key)
}

// TestGCSFenceRace has 16 writers push the same epoch to one shard in each
// of 50 rounds, the epoch rising by one a round: in every round exactly one
// push lands and every other is refused as stale.
func TestGCSFenceRace(t *testing.T) {
	const writers, rounds = 16, 50
	store, _ := newGCSIntegrationStore(t)
	ctx := gcsCtx(t)

	var landed, stale int
	for round := 1; round <= rounds; round++ {
		errs := make([]error, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				<-start
				f := &writefence.Fence{Store: store}
				errs[i] = f.Push(ctx, "wal", "shard-1", fmt.Sprintf("w%02d", i), uint64(round), []byte(fmt.Sprintf("round %d by w%02d", round, i)))
			})
		}
		close(start)
		wg.Wait()

		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				require.Equal(t, -1, winner, "round %d: two pushes landed (w%02d and w%02d)", round, winner, i)
				winner = i
				landed++
			case errors.Is(err, writefence.ErrStaleEpoch):
				stale++
			default:
				require.NoError(t, err, "round %d: w%02d", round, i)
			}
		}
		require.NotEqual(t, -1, winner, "round %d: no push landed", round)

		epoch, writer, payload, err := (&writefence.Fence{Store: store}).Latest(ctx, "wal", "shard-1")
		require.NoError(t, err)
		assert.Equal(t, uint64(round), epoch)
		assert.Equal(t, fmt.Sprintf("w%02d", winner), writer, "round %d: the record is the winner's", round)
		assert.Equal(t, fmt.Sprintf("round %d by w%02d", round, winner), string(payload))
	}
	t.Logf("gcs fence race: %d rounds x %d writers: %d landed, %d stale", rounds, writers, landed, stale)
	assert.Equal(t, rounds, landed)
	assert.Equal(t, rounds*(writers-1), stale)
}
