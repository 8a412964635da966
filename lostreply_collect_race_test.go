package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
)

// faultyRecordStore lands every third write of key and then answers it
// with a lost reply, running between first on every other such fault. (A
// conflict that hid a landing would be outside ConditionalStore's
// contract: a landing superseded before the retry's read is then
// indistinguishable from a refusal.)
type faultyRecordStore struct {
	writefence.ConditionalStore
	key     string
	writes  atomic.Int64
	between func()
}

func (s *faultyRecordStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	v, err := s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
	if key != s.key || err != nil {
		return v, err
	}
	n := s.writes.Add(1)
	if n%3 != 0 {
		return v, err
	}
	if n%2 == 0 {
		s.between()
	}
	return "", fakestore.ErrLostReply
}

// Promises 3, 5 and 24 under concurrency: writers commit blobs with a
// next that appends (not idempotent), at unique rising epochs, while
// replies are lost and Collects raise the horizon and delete stray blobs. A commit that returned nil is recorded;
// one refused (not an unknown outcome) is not; every blob the record
// references exists. Run with -race and -count.
func TestCommitsLostRepliesAndCollectsRace(t *testing.T) {
	const writers, rounds = 4, 12
	ctx := t.Context()
	mem := &writefence.MemStore{}
	key := mustKey(t, "wal", "0")
	collector := &writefence.Fence{Store: mem, RetryDelay: time.Microsecond, MaxAttempts: 1000}
	collect := func() { _, _ = collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Millisecond}) }
	store := &faultyRecordStore{ConditionalStore: mem, key: key, between: collect}
	require.NoError(t, (&writefence.Fence{Store: mem}).Seal(ctx, "wal", "0", "w0", 1))

	var epochs atomic.Uint64
	epochs.Store(1)
	type result struct {
		ref writefence.BlobRef
		err error
	}
	var mu sync.Mutex
	var results []result
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			collect()
			time.Sleep(200 * time.Microsecond)
		}
	})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			writer := fmt.Sprintf("w%d", w)
			f := &writefence.Fence{Store: store, Blobs: mem, RetryDelay: time.Microsecond, MaxAttempts: 1000}
			for r := range rounds {
				epoch := epochs.Add(1)
				ref, err := f.PutBlob(ctx, "wal", "0", writer, epoch, strings.NewReader(fmt.Sprint(writer, r)))
				if err != nil {
					t.Error(err)
					return
				}
				// A stray blob for the Collects to raise the horizon over.
				if _, err := f.PutBlob(ctx, "wal", "0", writer, epoch, strings.NewReader("stray")); err != nil {
					t.Error(err)
					return
				}
				err = f.Commit(ctx, "wal", "0", writer, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
					m.Blobs = append(m.Blobs, ref)
					m.Payload = append(m.Payload, '+')
					return m, nil
				})
				mu.Lock()
				results = append(results, result{ref, err})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()

	info, err := (&writefence.Fence{Store: mem}).Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	landed := 0
	for _, r := range results {
		recorded := slices.Contains(info.Blobs, r.ref)
		switch {
		case r.err == nil:
			landed++
			assert.True(t, recorded, "a commit that returned nil is recorded: %s", r.ref.Name)
		case errors.Is(r.err, writefence.ErrOutcomeUnknown):
		default:
			assert.False(t, recorded, "a commit refused (%v) wrote nothing, yet the record references %s", r.err, r.ref.Name)
		}
	}
	assert.Equal(t, len(info.Payload), len(info.Blobs), "each landed commit appended once")
	space, err := keys.Blobs("", "wal", "0")
	require.NoError(t, err)
	for _, b := range info.Blobs {
		_, err := mem.StatBlob(ctx, space+b.Name)
		if errors.Is(err, writefence.ErrNotFound) {
			t.Errorf("referenced blob %s is missing", b.Name)
		}
	}
	assert.Positive(t, landed)
	t.Logf("%d commits, %d landed, %d writes of the record, the horizon at %v", len(results), landed, store.writes.Load(), info.Horizon)
}
