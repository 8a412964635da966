package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/listing"
	"github.com/writefence/writefence/internal/promise"
	"github.com/writefence/writefence/internal/record"
)

// baseStore is what holds the simulated deployment's keys and blobs: a
// MemStore, or a directory store.
type baseStore interface {
	writefence.ConditionalStore
	writefence.BlobStore
	writefence.Deleter
}

func newBase(dir string) (baseStore, error) {
	if dir == "" {
		return &writefence.MemStore{Clock: time.Now}, nil
	}
	s, err := writefence.NewDirConditionalStore(dir, nil)
	if err != nil {
		return nil, err
	}
	return s.(baseStore), nil
}

// errThrottled is the failure the scheduler injects into a call: a
// server's "slow down", which is neither a refusal nor a conflict.
var errThrottled = errors.New("sim: 503 slow down")

// errOver fails a store call made once the run is over.
var errOver = errors.New("sim: the run is over")

// errLostReply replaces the reply of a write that landed.
var errLostReply = errors.New("sim: connection reset after the request was sent")

// request is one store call waiting for the scheduler.
type request struct {
	proc *proc
	call int    // the call it was made for
	kind string // "get", "put", "delete", "list", "create blob", "open blob", "stat blob", "list blobs", "check blobs", "delete blob", "delete blobs"
	key  string
	seq  int // its process's count of calls, for a stable order
	nth  int // its process's count of calls of its call, kind and key, for its label

	// run makes the call on the base store, with the fault the scheduler
	// drew, in the scheduler's goroutine; its results go to variables of
	// the caller, which reads them once done delivers.
	run  func(fault) error
	done chan error

	taken bool // granted: it runs, or ran
	sent  bool // its process was paused while it waited: it cannot be withdrawn

	ctx      context.Context // the call's: once it ends, the scheduler withdraws the call unless taken or sent
	quitting bool            // withdrawn: it waits for its turn to return ctx's error
}

// less orders waiting calls by process, then key: two goroutines of one
// process (a Hold's renewer and its seals, say) may send at one instant in
// either order, but never two calls on one key.
func (r *request) less(o *request) bool {
	switch {
	case r.proc.name != o.proc.name:
		return r.proc.name < o.proc.name
	case r.key != o.key:
		return r.key < o.key
	}
	return r.seq < o.seq
}

func (r *request) finish(err error) { r.done <- err }

// procKey carries the process a context belongs to.
type procKey struct{}

// label names r, for the order of turns: by its process, call, kind and
// key, and how many such calls came before it.
func (r *request) label() string {
	return fmt.Sprintf("%s, call %d: %s %s #%d", r.proc.name, r.call, r.kind, r.key, r.nth)
}

// do queues a store call of the process ctx belongs to and waits for the
// scheduler to run it. A call not yet granted whose ctx ends is
// withdrawn by the scheduler in its turn (turns), as a client that gives
// up before sending; one granted, or sent while its process was paused,
// runs to its end.
func (w *World) do(ctx context.Context, kind, key string, run func(fault) error) error {
	p, ok := ctx.Value(procKey{}).(*proc)
	if !ok {
		panic("sim: a store call outside any process")
	}
	call, _ := ctx.Value(callKey{}).(int)
	r := &request{proc: p, call: call, kind: kind, key: key, ctx: ctx, run: run, done: make(chan error, 1)}
	w.mu.Lock()
	if w.over {
		w.mu.Unlock()
		return &writefence.StoreError{Op: "sim " + kind, Key: key, Err: errOver}
	}
	p.seq++
	r.seq = p.seq
	// Calls that differ in kind or key may come at once from two
	// goroutines of a call (a commit's stats of its blobs), in either
	// order: their labels do not count them.
	if p.calls == nil {
		p.calls = map[string]int{}
	}
	what := fmt.Sprint(call, kind, key)
	p.calls[what]++
	r.nth = p.calls[what]
	r.sent = p.paused(time.Now())
	w.pending = append(w.pending, r)
	w.mu.Unlock()
	// The scheduler learns that ctx ended, wherever it waits.
	defer context.AfterFunc(ctx, w.signal)()
	return <-r.done
}

// simStore is the store every process of the world uses: each call waits
// for the scheduler, and each change it makes is recorded in the history.
// It declares its capabilities (a BlobStore, a ConsistentBlobLister, a
// BlobBatchDeleter, a Deleter) as its own.
type simStore struct {
	w    *World
	base baseStore
}

var (
	_ writefence.Capable   = (*simStore)(nil)
	_ writefence.BlobStore = (*simStore)(nil)

	_ writefence.ConsistentBlobLister = (*simStore)(nil)
	_ writefence.BlobBatchDeleter     = (*simStore)(nil)
	_ writefence.Deleter              = (*simStore)(nil)
)

func (s *simStore) Capabilities() writefence.ConditionalStore { return s }

// change records a change made for call. The caller runs in the
// scheduler's goroutine.
func (s *simStore) change(call int, ch promise.Change) {
	ch.Call, ch.At = call, time.Now()
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.w.record(ch)
}

// throttled records an injected transient failure of call and returns it.
func (s *simStore) throttled(call int, op, key string) error {
	s.change(call, promise.Change{Kind: "fault", Key: key, Fault: "transient", Request: op})
	return &writefence.StoreError{Op: "sim " + op, Key: key, Err: errThrottled}
}

func callOf(ctx context.Context) int {
	id, _ := ctx.Value(callKey{}).(int)
	return id
}

// Get implements writefence.ConditionalStore.
func (s *simStore) Get(ctx context.Context, key string) (data []byte, version string, err error) {
	call := callOf(ctx)
	if key == s.w.key {
		s.w.mu.Lock()
		s.w.reads[call]++
		s.w.mu.Unlock()
	}
	err = s.w.do(ctx, "get", key, func(f fault) error {
		if f == transient {
			return s.throttled(call, "get", key)
		}
		var err error
		data, version, err = s.base.Get(context.Background(), key)
		data = bytes.Clone(data)
		if (key == s.w.key || key == keys.Brand(s.w.cfg.Prefix)) && (err == nil || errors.Is(err, writefence.ErrNotFound)) {
			s.readFor(call, key)
		}
		return err
	})
	return data, version, err
}

// readFor records a read made for a Collect, of the record, the brand or
// a listing of its blobs, by which the checker judges promises 32 and 10:
// a read of the record, and of the brand where the Fence reads it before
// every write, before each batch of deletes.
func (s *simStore) readFor(call int, key string) {
	s.w.mu.Lock()
	c := s.w.calls[call]
	s.w.mu.Unlock()
	if c != nil && c.Op == promise.Collect {
		s.change(call, promise.Change{Kind: "read", Key: key})
	}
}

// PutIfVersion implements writefence.ConditionalStore.
func (s *simStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (version string, err error) {
	call := callOf(ctx)
	data = bytes.Clone(data)
	err = s.w.do(ctx, "put", key, func(f fault) error {
		switch f {
		case transient:
			return s.throttled(call, "put", key)
		case denied:
			s.change(call, promise.Change{Kind: "fault", Key: key, Fault: "denied"})
			return &writefence.StoreError{Op: "sim put", Key: key, Err: fs.ErrPermission}
		}
		var err error
		version, err = s.base.PutIfVersion(context.Background(), key, data, expect)
		if errors.Is(err, writefence.ErrConflict) {
			// A race lost: the Observer sees it retried (promise 27).
			s.change(call, promise.Change{Kind: "fault", Key: key, Fault: "conflict", Request: "put"})
		}
		if err != nil {
			return err
		}
		s.change(call, promise.Change{Kind: "put", Key: key, Data: data, Version: version})
		if key == s.w.key {
			s.w.mu.Lock()
			s.w.past = append(s.w.past, data)
			s.w.mu.Unlock()
		}
		if key == s.w.leaseKey {
			s.w.mu.Lock()
			s.w.leasePast = append(s.w.leasePast, data)
			s.w.mu.Unlock()
		}
		if rec, check := record.DecodeLease(data); check == "" {
			s.w.mu.Lock()
			s.w.maxTerm = max(s.w.maxTerm, rec.Term)
			s.w.mu.Unlock()
		}
		if f == lostAfter {
			s.change(call, promise.Change{Kind: "fault", Key: key, Fault: "lost"})
			version = ""
			return &writefence.StoreError{Op: "sim put", Key: key, Err: errLostReply}
		}
		return nil
	})
	return version, err
}

// Delete implements writefence.Deleter.
func (s *simStore) Delete(ctx context.Context, key string) error {
	call := callOf(ctx)
	return s.w.do(ctx, "delete", key, func(fault) error {
		if err := s.base.Delete(context.Background(), key); err != nil {
			return err
		}
		s.change(call, promise.Change{Kind: "delete", Key: key})
		return nil
	})
}

// CreateBlob implements writefence.BlobStore. The blob's creation time is
// the world's, whatever the base store's clock.
func (s *simStore) CreateBlob(ctx context.Context, key string, r io.Reader) (info writefence.BlobInfo, err error) {
	call := callOf(ctx)
	data, err := io.ReadAll(r)
	if err != nil {
		return info, err
	}
	err = s.w.do(ctx, "create blob", key, func(f fault) error {
		if f == transient {
			return s.throttled(call, "create blob", key)
		}
		var err error
		info, err = s.base.CreateBlob(context.Background(), key, bytes.NewReader(data))
		if errors.Is(err, writefence.ErrConflict) {
			// The blob store replaces a blob, as S3's plain PUT does:
			// it cannot tell a key written twice, which no Fence does
			// (promise 19).
			if err = s.base.DeleteBlob(context.Background(), key); err == nil {
				info, err = s.base.CreateBlob(context.Background(), key, bytes.NewReader(data))
			}
		}
		if err != nil {
			return err
		}
		info.Modified = time.Now()
		s.w.mu.Lock()
		s.w.created(key, info.Modified)
		s.w.mu.Unlock()
		s.change(call, promise.Change{Kind: "create blob", Key: key, Data: data, Modified: info.Modified})
		if f == lostAfter {
			s.change(call, promise.Change{Kind: "fault", Key: key, Fault: "lost", Request: "create blob"})
			info = writefence.BlobInfo{}
			return &writefence.StoreError{Op: "sim create blob", Key: key, Err: errLostReply}
		}
		return nil
	})
	return info, err
}

// OpenBlob implements writefence.BlobStore: the reader holds a copy of the
// blob's bytes, taken when the scheduler ran the call.
func (s *simStore) OpenBlob(ctx context.Context, key string) (rc io.ReadCloser, info writefence.BlobInfo, err error) {
	call := callOf(ctx)
	err = s.w.do(ctx, "open blob", key, func(f fault) error {
		if f == transient {
			return s.throttled(call, "open blob", key)
		}
		r, bi, err := s.base.OpenBlob(context.Background(), key)
		if err != nil {
			return err
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		info = s.w.withCreated(bi)
		rc = io.NopCloser(bytes.NewReader(data))
		return nil
	})
	return rc, info, err
}

// StatBlob implements writefence.BlobStore.
func (s *simStore) StatBlob(ctx context.Context, key string) (info writefence.BlobInfo, err error) {
	call := callOf(ctx)
	err = s.w.do(ctx, "stat blob", key, func(f fault) error {
		if f == transient {
			return s.throttled(call, "stat blob", key)
		}
		bi, err := s.base.StatBlob(context.Background(), key)
		info = s.w.withCreated(bi)
		return err
	})
	return info, err
}

// ListBlobs implements writefence.BlobStore, in the order of the keys.
func (s *simStore) ListBlobs(ctx context.Context, prefix string, fn func(writefence.BlobInfo) error) error {
	return s.list(ctx, false, prefix, "", fn)
}

// ListBlobsConsistent implements writefence.ConsistentBlobLister: the
// base store's listing shows every blob created, and none deleted, before
// the scheduler runs it. A commit checks its blobs through it, and the
// scheduler may throttle it, as it throttles a StatBlob.
func (s *simStore) ListBlobsConsistent(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error {
	return s.list(ctx, true, prefix, after, fn)
}

// list lists the blobs under prefix that sort after after, in the order
// of their keys. A commit's listing ("check blobs") may be throttled.
func (s *simStore) list(ctx context.Context, check bool, prefix, after string, fn func(writefence.BlobInfo) error) error {
	call := callOf(ctx)
	kind := "list blobs"
	if check {
		kind = "check blobs"
	}
	var infos []writefence.BlobInfo
	err := s.w.do(ctx, kind, prefix, func(f fault) error {
		if f == transient {
			return s.throttled(call, kind, prefix)
		}
		err := s.base.ListBlobs(context.Background(), prefix, func(b writefence.BlobInfo) error {
			if b.Key > after {
				infos = append(infos, s.w.withCreated(b))
			}
			return nil
		})
		if err == nil && !check {
			s.readFor(call, prefix)
		}
		return err
	})
	if err != nil {
		return err
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	return listing.Each(ctx, infos, fn)
}

// DeleteBlob implements writefence.BlobStore.
func (s *simStore) DeleteBlob(ctx context.Context, key string) error {
	call := callOf(ctx)
	return s.w.do(ctx, "delete blob", key, func(f fault) error {
		if f == transient {
			return s.throttled(call, "delete blob", key)
		}
		if _, err := s.base.StatBlob(context.Background(), key); errors.Is(err, writefence.ErrNotFound) {
			return nil
		}
		if err := s.base.DeleteBlob(context.Background(), key); err != nil {
			return err
		}
		s.change(call, promise.Change{Kind: "delete blob", Key: key})
		return nil
	})
}

// DeleteBlobs implements writefence.BlobBatchDeleter: one call the
// scheduler runs whole, as one DeleteObjects request.
func (s *simStore) DeleteBlobs(ctx context.Context, keys []string) ([]string, error) {
	call := callOf(ctx)
	var deleted []string
	err := s.w.do(ctx, "delete blobs", keys[0], func(f fault) error {
		if f == transient {
			return s.throttled(call, "delete blobs", keys[0])
		}
		for _, key := range keys {
			_, err := s.base.StatBlob(context.Background(), key)
			if err == nil {
				if err := s.base.DeleteBlob(context.Background(), key); err != nil {
					return err
				}
				s.change(call, promise.Change{Kind: "delete blob", Key: key})
			} else if !errors.Is(err, writefence.ErrNotFound) {
				return err
			}
			deleted = append(deleted, key)
		}
		return nil
	})
	return deleted, err
}

// created remembers the world's creation time of a blob. The caller holds
// mu.
func (w *World) created(key string, at time.Time) {
	if w.blobTimes == nil {
		w.blobTimes = map[string]time.Time{}
	}
	w.blobTimes[key] = at
}

// withCreated gives a blob's info the world's creation time.
func (w *World) withCreated(b writefence.BlobInfo) writefence.BlobInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at, ok := w.blobTimes[b.Key]; ok {
		b.Modified = at
	}
	return b
}

// serialBlobs is the simulated store as a Fence's blob store that declares
// no BlobBatchDeleter: Collect then deletes with DeleteBlob, one blob at a
// time (Config.SerialDeletes).
type serialBlobs struct{ s *simStore }

var (
	_ writefence.Capable              = serialBlobs{}
	_ writefence.BlobStore            = serialBlobs{}
	_ writefence.ConsistentBlobLister = serialBlobs{}
)

func (b serialBlobs) Capabilities() writefence.ConditionalStore { return b }

func (b serialBlobs) Get(ctx context.Context, key string) ([]byte, string, error) {
	return b.s.Get(ctx, key)
}

func (b serialBlobs) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	return b.s.PutIfVersion(ctx, key, data, expect)
}

func (b serialBlobs) CreateBlob(ctx context.Context, key string, r io.Reader) (writefence.BlobInfo, error) {
	return b.s.CreateBlob(ctx, key, r)
}

func (b serialBlobs) OpenBlob(ctx context.Context, key string) (io.ReadCloser, writefence.BlobInfo, error) {
	return b.s.OpenBlob(ctx, key)
}

func (b serialBlobs) StatBlob(ctx context.Context, key string) (writefence.BlobInfo, error) {
	return b.s.StatBlob(ctx, key)
}

func (b serialBlobs) ListBlobs(ctx context.Context, prefix string, fn func(writefence.BlobInfo) error) error {
	return b.s.ListBlobs(ctx, prefix, fn)
}

func (b serialBlobs) ListBlobsConsistent(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error {
	return b.s.ListBlobsConsistent(ctx, prefix, after, fn)
}

func (b serialBlobs) DeleteBlob(ctx context.Context, key string) error {
	return b.s.DeleteBlob(ctx, key)
}
