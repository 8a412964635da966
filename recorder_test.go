package writefence_test

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/promise"
	"github.com/writefence/writefence/internal/sim"
)

// recorder stands between a test's Fences and the store they share, and
// records for the promise checker every change the store takes, and the
// calls the test makes (begin, end): the history of a test that runs its
// calls one after the other, or nested in each other, never at once. It
// declares the store's capabilities as its own and reaches them through
// the package's helpers (GetPrefix, PutParts, PutIfBranded), so a Fence
// over it takes the paths it takes over the store itself.
type recorder struct {
	inner writefence.ConditionalStore
	clock func() time.Time

	mu      sync.Mutex // guards the fields below
	hist    promise.History
	calls   []*promise.Call // in progress, innermost last
	nextID  int
	checked int // entries the checker has seen
	checker *promise.Checker
}

// newRecorder returns a recorder of inner, with the blob methods when
// inner holds blobs.
func newRecorder(inner writefence.ConditionalStore, clock func() time.Time) (*recorder, writefence.ConditionalStore) {
	r := &recorder{inner: inner, clock: clock, checker: promise.NewChecker(promise.Options{})}
	if _, ok := inner.(writefence.BlobStore); ok {
		return r, &blobRecorder{r}
	}
	return r, r
}

// begin records that call c starts; end records how it ended.
func (r *recorder) begin(c *promise.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	c.ID, c.Start = r.nextID, r.clock()
	r.calls = append(r.calls, c)
	r.hist.Begin(c)
}

func (r *recorder) end(c *promise.Call, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.End, c.Err, c.Is = r.clock(), err, sim.Classify(err)
	for i := len(r.calls) - 1; i >= 0; i-- {
		if r.calls[i] == c {
			r.calls = append(r.calls[:i], r.calls[i+1:]...)
			break
		}
	}
	r.hist.Finish(c)
}

// observe is an Observer that joins each event to the call in progress.
func (r *recorder) observe(_ context.Context, e writefence.WriteEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.calls); n > 0 {
		c := r.calls[n-1]
		c.Events = append(c.Events, promise.Event{Op: e.Op, Key: e.Key, Retrying: e.Retrying, Err: e.Err, Is: sim.Classify(e.Err)})
	}
}

// change records a change made for the call in progress, or from outside
// when none is.
func (r *recorder) change(ch promise.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.calls); n > 0 {
		ch.Call = r.calls[n-1].ID
	}
	ch.At = r.clock()
	r.hist.Change(ch)
}

// outside records a change made outside the package.
func (r *recorder) outside(ch promise.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch.At = r.clock()
	r.hist.Change(ch)
}

// fault records a fault injected into the call in progress: "transient"
// (a failure that changed nothing) or "lost" (a reply lost after the
// write landed).
func (r *recorder) fault(kind string) { r.change(promise.Change{Kind: "fault", Fault: kind}) }

// check feeds the checker what happened since the last check and returns
// what it found.
func (r *recorder) check() []promise.Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found []promise.Violation
	for ; r.checked < len(r.hist.Entries); r.checked++ {
		found = append(found, r.checker.Add(r.hist.Entries[r.checked])...)
	}
	return found
}

func (r *recorder) Capabilities() writefence.ConditionalStore { return r }

func (r *recorder) Get(ctx context.Context, key string) ([]byte, string, error) {
	return r.inner.Get(ctx, key)
}

func (r *recorder) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	return writefence.GetPrefix(ctx, r.inner, key, n)
}

func (r *recorder) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	return r.put(key, [][]byte{data}, func() (string, error) { return r.inner.PutIfVersion(ctx, key, data, expect) })
}

func (r *recorder) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expect string) (string, error) {
	return r.put(key, parts, func() (string, error) { return writefence.PutParts(ctx, r.inner, key, parts, expect) })
}

func (r *recorder) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error) {
	return r.put(key, parts, func() (string, error) {
		return writefence.PutIfBranded(ctx, r.inner, brandKey, identity, key, parts, expect)
	})
}

// put makes a write and records it if it landed. A write whose outcome
// its error hides is not recorded: the recorder cannot tell.
func (r *recorder) put(key string, parts [][]byte, write func() (string, error)) (string, error) {
	v, err := write()
	if err == nil {
		r.change(promise.Change{Kind: "put", Key: key, Data: bytes.Join(parts, nil), Version: v})
	}
	return v, err
}

func (r *recorder) Delete(ctx context.Context, key string) error {
	err := r.inner.(writefence.Deleter).Delete(ctx, key)
	if err == nil {
		r.change(promise.Change{Kind: "delete", Key: key})
	}
	return err
}

func (r *recorder) List(ctx context.Context, prefix string, fn func(key string) error) error {
	return r.inner.(writefence.Lister).List(ctx, prefix, fn)
}

// blobRecorder is a recorder of a store that holds blobs.
type blobRecorder struct{ *recorder }

func (r *blobRecorder) Capabilities() writefence.ConditionalStore { return r }

func (r *blobRecorder) blobs() writefence.BlobStore { return r.inner.(writefence.BlobStore) }

func (r *blobRecorder) CreateBlob(ctx context.Context, key string, src io.Reader) (writefence.BlobInfo, error) {
	data, err := io.ReadAll(src)
	if err != nil {
		return writefence.BlobInfo{}, err
	}
	info, err := r.blobs().CreateBlob(ctx, key, bytes.NewReader(data))
	if err == nil {
		r.change(promise.Change{Kind: "create blob", Key: key, Data: data, Modified: info.Modified})
	}
	return info, err
}

func (r *blobRecorder) OpenBlob(ctx context.Context, key string) (io.ReadCloser, writefence.BlobInfo, error) {
	return r.blobs().OpenBlob(ctx, key)
}

func (r *blobRecorder) StatBlob(ctx context.Context, key string) (writefence.BlobInfo, error) {
	return r.blobs().StatBlob(ctx, key)
}

func (r *blobRecorder) ListBlobs(ctx context.Context, prefix string, fn func(writefence.BlobInfo) error) error {
	return r.blobs().ListBlobs(ctx, prefix, fn)
}

func (r *blobRecorder) DeleteBlob(ctx context.Context, key string) error {
	_, statErr := r.blobs().StatBlob(ctx, key)
	err := r.blobs().DeleteBlob(ctx, key)
	if err == nil && statErr == nil {
		r.change(promise.Change{Kind: "delete blob", Key: key})
	}
	return err
}
