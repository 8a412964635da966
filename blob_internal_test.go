package writefence

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenBlobChecksBytes: a blob damaged in the store, or of another size
// than its reference, is never read as good bytes: the read ends with
// ErrCorrupt.
func TestOpenBlobChecksBytes(t *testing.T) {
	ctx := t.Context()
	mem := &MemStore{}
	f := &Fence{Store: mem}
	ref, err := f.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader("the segment's bytes"))
	require.NoError(t, err)
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, func(m Manifest) (Manifest, error) {
		m.Blobs = append(m.Blobs, ref)
		return m, nil
	}))
	damage := func(edit func([]byte) []byte) {
		mem.blobs.mu.Lock()
		defer mem.blobs.mu.Unlock()
		for k, b := range mem.blobs.blobs {
			if strings.HasSuffix(k, ref.Name) {
				b.data = edit(append([]byte(nil), b.data...))
				mem.blobs.blobs[k] = b
			}
		}
	}
	read := func() ([]byte, error) {
		rc, _, err := f.OpenBlob(ctx, "wal", "0", ref.Name)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}

	damage(func(b []byte) []byte { b[3] ^= 1; return b })
	_, err = read()
	require.ErrorIs(t, err, ErrCorrupt, "a flipped byte")
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "blob checksum", ce.Check)

	damage(func(b []byte) []byte { b[3] ^= 1; return b[:len(b)-1] })
	_, err = read()
	require.ErrorIs(t, err, ErrCorrupt, "a blob of another size is refused before a byte is read")

	damage(func([]byte) []byte { return []byte("the segment's bytes") })
	got, err := read()
	require.NoError(t, err, "the bytes are the reference's again")
	assert.Equal(t, "the segment's bytes", string(got))
}

// TestBlobIDsSortInTheOrderMade: a Fence's blob ids are 32 hexadecimal
// digits, the time in milliseconds then random ones, and each sorts after
// the one before, in the same millisecond, after the clock stepped back,
// and when the random digits carry over into the time's.
func TestBlobIDsSortInTheOrderMade(t *testing.T) {
	var ids blobIDs
	t0 := time.UnixMilli(1_700_000_000_000)
	next := func(now time.Time) string {
		t.Helper()
		id, err := ids.next(now)
		require.NoError(t, err)
		require.Regexp(t, `^[0-9a-f]{32}$`, id)
		return id
	}
	last := ""
	for i, now := range []time.Time{t0, t0, t0.Add(-time.Second), t0.Add(time.Millisecond), t0.Add(time.Millisecond)} {
		id := next(now)
		assert.Greater(t, id, last, "id %d", i)
		last = id
	}
	assert.Equal(t, fmt.Sprintf("%012x", t0.Add(time.Millisecond).UnixMilli()), last[:12], "the time of the last")
	assert.Equal(t, last[:12], ids.latest(t0), "latest, the clock behind the last id")
	assert.Equal(t, fmt.Sprintf("%012x", t0.Add(time.Second).UnixMilli()), ids.latest(t0.Add(time.Second)), "latest, the clock ahead")
	ids.rand = [10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	id := next(t0)
	assert.Greater(t, id, last)
	assert.Equal(t, fmt.Sprintf("%012x%020x", t0.Add(2*time.Millisecond).UnixMilli(), 0), id, "carried into the time")
}

// TestAheadListingWaitEndedCtx: a commit whose ctx ended before it waits
// for the listing started beside its read takes no evidence from it, even
// when the listing ended too, every time: not at the runtime's pick.
func TestAheadListingWaitEndedCtx(t *testing.T) {
	l := &aheadListing{prefix: "p/", done: make(chan struct{}), found: map[string]BlobInfo{}, complete: true}
	close(l.done)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for range 64 {
		_, _, ok := l.wait(ctx, []string{"p/"})
		require.False(t, ok)
	}
}
