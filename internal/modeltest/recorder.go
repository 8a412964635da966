package modeltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/promise"
	"github.com/writefence/writefence/internal/sim"
)

// Recorder stands between a test's Fences and the store they share, and
// records for the promise checker every change the store takes, and the
// calls the test makes (Begin, End). A test whose calls run one after the
// other, or nested in each other, names the call in progress by Begin and
// End alone; a test whose calls run at once gives each call's context
// the call (WithCall), and calls Ordered for the history in the order
// the store took its writes (see Ordered). It declares the store's
// capabilities as its own and reaches them through the package's helpers
// (GetPrefix, PutParts, PutIfBranded), so a Fence over it takes the paths
// it takes over the store itself.
type Recorder struct {
	inner writefence.ConditionalStore
	clock func() time.Time

	mu      sync.Mutex // guards the fields below
	hist    promise.History
	calls   []*promise.Call // in progress, innermost last
	byID    map[int]*promise.Call
	nextID  int
	checked int // entries the checker has seen
	checker *promise.Checker

	// Of a test whose calls run at once: the bytes read of each version
	// of each key, the heads read of those read only by a prefix, the
	// calls that read each version of each key, and each write, recorded
	// when it was sent.
	reads   map[string]map[string][]byte
	heads   map[string]map[string]head
	readers map[string]map[string][]int // by key and version: IDs of the calls that read it
	sent    map[int]*sentPut            // by history entry

	listings atomic.Int64 // ListBlobsConsistent calls, for the logs
}

// sentPut is a write as it was sent, and what its reply said.
type sentPut struct {
	expect  string
	landed  bool // its reply said it landed
	unknown bool // its reply was lost: it may have landed
	reply   int  // the history's length when the reply came
}

// head is the first bytes of a version read by a prefix, and its size.
type head struct {
	data []byte
	size int64
}

// holds reports whether the version whose head is h may hold data.
func (h head) holds(data []byte) bool {
	return int64(len(data)) == h.size && bytes.HasPrefix(data, h.data)
}

type callKey struct{}

// WithCall returns ctx naming c as the call its store calls are made for.
func WithCall(ctx context.Context, c *promise.Call) context.Context {
	return context.WithValue(ctx, callKey{}, c.ID)
}

// NewRecorder returns a Recorder of inner, with the blob methods when
// inner holds blobs, and each of PrefixReader and ConsistentBlobLister
// when inner declares it: a Fence reads a record whole from a store that
// reads no prefixes, and checks blobs by StatBlob on a store whose
// listing it may not check them by.
func NewRecorder(inner writefence.ConditionalStore, clock func() time.Time, opts promise.Options) (*Recorder, writefence.ConditionalStore) {
	r := &Recorder{inner: inner, clock: clock, checker: promise.NewChecker(opts)}
	_, blobs := inner.(writefence.BlobStore)
	prefix, listing := declares[writefence.PrefixReader](inner), declares[writefence.ConsistentBlobLister](inner)
	b := &blobRecorder{r}
	switch {
	case blobs && prefix && listing:
		return r, &prefixListingRecorder{&listingRecorder{b}}
	case blobs && listing:
		return r, &listingRecorder{b}
	case blobs && prefix:
		return r, &prefixBlobRecorder{b}
	case blobs:
		return r, b
	case prefix:
		return r, &prefixRecorder{r}
	}
	return r, r
}

// Concurrent readies r for calls that run at once (see Ordered).
func (r *Recorder) Concurrent() {
	r.reads, r.heads, r.readers, r.sent = map[string]map[string][]byte{}, map[string]map[string]head{}, map[string]map[string][]int{}, map[int]*sentPut{}
}

// Ordered returns the history of a test whose calls ran at once, keeping of
// the writes it recorded as they were sent those that landed. A write
// conditioned on a version reaches the store only after that version
// landed and was read, so the order writes of one key were sent in is the
// order they landed in, and each is within its call. A write whose reply
// was lost landed if a version made by no reply holds what it sent: a
// version the test read, or that the key holds at the end (final, read
// from the store once every call ended), or whose head and size, read by
// a prefix, are those of what it sent. A write landed after it was
// sent and after every read of the version it replaced, so it is placed
// when it was sent or, if later, just after the Begin of the last call
// that read that version (and began before the reply): a call that read
// the record the write replaced holds that record during the call. A
// read that returned between a write's landing and its place may still
// see what the history replaced before it began, and the reads of this
// history are for porcupine, not for promise 23.
func (r *Recorder) Ordered(ctx context.Context) (*promise.History, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	finals := map[string]string{}
	for key := range r.keysWritten() {
		// The store may sit behind a proxy that fails requests: the last
		// read is retried until one answers.
		var data []byte
		var v string
		var err error
		for try := 0; try < 50; try++ {
			if data, v, err = r.inner.Get(ctx, key); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: the last read: %w", key, err)
		}
		finals[key] = v
		if r.reads[key] == nil {
			r.reads[key] = map[string][]byte{}
		}
		r.reads[key][v] = bytes.Clone(data)
	}
	keep := map[int]bool{}
	begins := map[int]int{}  // by call ID: the index of its Begin
	after := map[int][]int{} // by index: the writes placed just after it
	moved := map[int]bool{}  // the writes placed later than sent
	byKey := map[string][]int{}
	for i, e := range r.hist.Entries {
		if e.Begin != nil {
			begins[e.Begin.ID] = i
		}
		if sp := r.sent[i]; sp != nil && e.Change != nil {
			byKey[e.Change.Key] = append(byKey[e.Change.Key], i)
		}
	}
	for key, sent := range byKey {
		// The version each write made: its reply's, or for a write whose
		// reply was lost, the version that holds its bytes, if any.
		made := map[int]string{}
		replied := map[string]bool{}
		for _, i := range sent {
			if r.sent[i].landed {
				made[i] = r.hist.Entries[i].Change.Version
				replied[made[i]] = true
			}
		}
		for _, i := range sent {
			if !r.sent[i].unknown {
				continue // a refusal of the write itself, or its reply said it landed
			}
			for v, data := range r.reads[key] {
				if !replied[v] && bytes.Equal(data, r.hist.Entries[i].Change.Data) {
					made[i] = v
				}
			}
			// A version read only by its head: a Fence over a store
			// that reads prefixes reads no more of a record it writes
			// over. Its head holds the record's epoch, writer and
			// payload's checksum.
			for v, h := range r.heads[key] {
				if _, whole := r.reads[key][v]; !whole && !replied[v] && h.holds(r.hist.Entries[i].Change.Data) {
					made[i] = v
				}
			}
		}
		// The chain from the create: at each version, the write that
		// landed on it. A write whose reply said it landed is the one.
		// Writes whose replies were lost are tried in the order they were
		// sent, the search going back when a choice leaves out of the
		// chain a write whose reply said it landed, or a version a write
		// made that the test read: a write whose reply was lost may have
		// made its version with another attempt of its call (the same
		// bytes), conditioned on a later version.
		// A version the test read is one the key held: a chain that
		// leaves out one that a write made is not the store's.
		read := map[string]bool{}
		for _, v := range made {
			_, whole := r.reads[key][v]
			read[v] = whole || len(r.readers[key][v]) > 0
		}
		final := finals[key]
		var chain []int
		var walk func(version string) bool
		// A write that replaced a version landed after every read of it,
		// so before its reply: its reply came after the Begin of every
		// call that read that version (a Begin at index reply or later
		// was recorded after the reply).
		repliedAfterReads := func(i int, version string) bool {
			for _, id := range r.readers[key][version] {
				if begins[id] >= r.sent[i].reply {
					return false
				}
			}
			return true
		}
		walk = func(version string) bool {
			var landed, lost []int
			for _, i := range sent {
				if _, ok := made[i]; ok && r.sent[i].expect == version && !slices.Contains(chain, i) && repliedAfterReads(i, version) {
					if r.sent[i].landed {
						landed = append(landed, i)
					} else {
						lost = append(lost, i)
					}
				}
			}
			candidates := lost
			switch {
			case len(landed) > 1:
				return false
			case len(landed) == 1:
				candidates = landed
			}
			// Two writes whose replies were lost, both on this version,
			// that made the same version differ only in where they are
			// placed: when one leads to no chain, neither does the other.
			tried := map[string]bool{}
			for _, i := range candidates {
				if tried[made[i]] {
					continue
				}
				tried[made[i]] = true
				chain = append(chain, i)
				if walk(made[i]) {
					return true
				}
				chain = chain[:len(chain)-1]
			}
			if version != final {
				return false
			}
			for _, i := range sent {
				if r.sent[i].landed && !slices.Contains(chain, i) {
					return false
				}
			}
			held := map[string]bool{}
			for _, i := range chain {
				held[made[i]] = true
			}
			for v, was := range read {
				if was && !held[v] {
					return false
				}
			}
			return true
		}
		if !walk("") {
			return nil, fmt.Errorf("%s: no chain of versions from the create to %q holds every write whose reply said it landed", key, final)
		}
		at := -1
		for _, i := range chain {
			keep[i] = true
			r.hist.Entries[i].Change.Version = made[i]
			// The latest Begin of a call that read what i replaced, before
			// i's reply; never before the write before it in the chain.
			at = max(at, i)
			for _, id := range r.readers[key][r.sent[i].expect] {
				if b := begins[id]; b > at && b < r.sent[i].reply {
					at = b
				}
			}
			if at > i {
				after[at] = append(after[at], i)
				moved[i] = true
			}
		}
	}
	h := &promise.History{}
	upTo := make([]int, len(r.hist.Entries)) // by index: the entries of h up to it, and the writes placed after it
	for i, e := range r.hist.Entries {
		if (r.sent[i] == nil || keep[i]) && !moved[i] {
			h.Entries = append(h.Entries, e)
		}
		for _, j := range after[i] {
			h.Entries = append(h.Entries, r.hist.Entries[j])
		}
		upTo[i] = len(h.Entries)
	}
	placeEvents(h, upTo)
	return h, nil
}

// placeEvents gives the calls of h copies of their events placed in h,
// whose entries up to index i of the history as recorded are upTo[i]: an
// event came after the entries recorded before it, and after the writes
// placed after those, which were sent before it (a write is placed after
// entries recorded before its reply, and the Observer sees it after its
// reply).
func placeEvents(h *promise.History, upTo []int) {
	calls := map[*promise.Call]*promise.Call{}
	for i, e := range h.Entries {
		c := e.Begin
		if c == nil {
			c = e.End
		}
		if c == nil {
			continue
		}
		nc := calls[c]
		if nc == nil {
			copied := *c
			nc = &copied
			nc.Events = slices.Clone(c.Events)
			for j, ev := range nc.Events {
				if ev.Place > 0 {
					nc.Events[j].Place = upTo[ev.Place-1]
				}
			}
			calls[c] = nc
		}
		if e.Begin != nil {
			h.Entries[i].Begin = nc
		} else {
			h.Entries[i].End = nc
		}
	}
}

// keysWritten is the set of keys the history wrote. The caller holds mu.
func (r *Recorder) keysWritten() map[string]bool {
	out := map[string]bool{}
	for _, e := range r.hist.Entries {
		if e.Change != nil && e.Change.Kind == "put" {
			out[e.Change.Key] = true
		}
	}
	return out
}

// declares reports whether s declares the capability C as its own.
func declares[C any](s writefence.ConditionalStore) bool {
	c, ok := s.(writefence.Capable)
	_, has := s.(C)
	return ok && has && c.Capabilities() == s
}

// Begin records that call c starts; End records how it ended.
func (r *Recorder) Begin(c *promise.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	c.ID, c.Start = r.nextID, r.clock()
	r.calls = append(r.calls, c)
	if r.byID == nil {
		r.byID = map[int]*promise.Call{}
	}
	r.byID[c.ID] = c
	r.hist.Begin(c)
}

func (r *Recorder) End(c *promise.Call, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.End, c.Err, c.Is = r.clock(), err, sim.Classify(err)
	c.Stale, c.Regress = sim.StaleNamed(err), sim.RegressedSeen(err)
	for i := len(r.calls) - 1; i >= 0; i-- {
		if r.calls[i] == c {
			r.calls = append(r.calls[:i], r.calls[i+1:]...)
			break
		}
	}
	r.hist.Finish(c)
}

// Observe is an Observer that joins each event to the call its ctx
// names, else to the call in progress (see callIn), placed where the
// history stands.
func (r *Recorder) Observe(ctx context.Context, e writefence.WriteEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.byID[r.callIn(ctx)]; c != nil && c.End.IsZero() {
		c.Events = append(c.Events, promise.Event{Op: e.Op, Key: e.Key, Retrying: e.Retrying, Err: e.Err, Is: sim.Classify(e.Err), Place: len(r.hist.Entries)})
	}
}

// change records a change made for the call ctx names, else for the call
// in progress (see callIn), or from outside when none is.
func (r *Recorder) change(ctx context.Context, ch promise.Change) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch.Call = r.callIn(ctx)
	ch.At = r.clock()
	r.hist.Change(ch)
	return len(r.hist.Entries) - 1
}

// callIn is the call ctx names, else the call in progress, else 0. Of a
// test whose calls run at once it is 0 when ctx names none: the call
// begun last need not be the one in progress. The caller holds mu.
func (r *Recorder) callIn(ctx context.Context) int {
	if id, ok := ctx.Value(callKey{}).(int); ok {
		return id
	}
	if n := len(r.calls); n > 0 && r.sent == nil {
		return r.calls[n-1].ID
	}
	return 0
}

// outside records a change made outside the package.
func (r *Recorder) outside(ch promise.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch.At = r.clock()
	r.hist.Change(ch)
}

// fault records a fault injected into the call in progress: "transient"
// (a failure that changed nothing) or "lost" (a reply lost after the
// write landed).
func (r *Recorder) fault(kind string) {
	r.change(context.Background(), promise.Change{Kind: "fault", Fault: kind})
}

// writeFault records a fault injected into a put of key by the call in
// progress: "transient" (the put never reached the store), "lost" (its
// reply was lost after it landed), "conflict" (refused, a race lost) or
// "denied" (refused, fs.ErrPermission).
func (r *Recorder) writeFault(kind, key string) {
	r.change(context.Background(), promise.Change{Kind: "fault", Fault: kind, Key: key, Request: "put"})
}

// check feeds the checker what happened since the last check and returns
// what it found.
func (r *Recorder) check() []promise.Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found []promise.Violation
	for ; r.checked < len(r.hist.Entries); r.checked++ {
		found = append(found, r.checker.Add(r.hist.Entries[r.checked])...)
	}
	return found
}

func (r *Recorder) Capabilities() writefence.ConditionalStore { return r }

func (r *Recorder) Get(ctx context.Context, key string) ([]byte, string, error) {
	data, v, err := r.inner.Get(ctx, key)
	if err == nil {
		r.read(ctx, key, v, data)
	}
	return data, v, err
}

// getPrefix reads the first n bytes of key for the recorders that declare
// a PrefixReader, and remembers a read that holds the whole record, else
// the head it read.
func (r *Recorder) getPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	data, size, v, err := writefence.GetPrefix(ctx, r.inner, key, n)
	if err == nil {
		whole := data
		if int64(len(data)) != size {
			whole = nil
			r.readHead(key, v, head{bytes.Clone(data), size})
		}
		r.read(ctx, key, v, whole)
	}
	return data, size, v, err
}

// readHead remembers the head h read of version v of key.
func (r *Recorder) readHead(key, v string, h head) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.heads == nil {
		return
	}
	if r.heads[key] == nil {
		r.heads[key] = map[string]head{}
	}
	r.heads[key][v] = h
}

// read remembers that the call ctx names read version v of key, and
// what it read of it when data, the whole of it, is not nil.
func (r *Recorder) read(ctx context.Context, key, v string, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reads == nil {
		return
	}
	if r.readers[key] == nil {
		r.readers[key] = map[string][]int{}
	}
	if id := r.callIn(ctx); id != 0 {
		r.readers[key][v] = append(r.readers[key][v], id)
	}
	if data == nil {
		return
	}
	if r.reads[key] == nil {
		r.reads[key] = map[string][]byte{}
	}
	r.reads[key][v] = bytes.Clone(data)
}

// prefixRecorder is a recorder of a store that declares a PrefixReader.
type prefixRecorder struct{ *Recorder }

func (r *prefixRecorder) Capabilities() writefence.ConditionalStore { return r }

func (r *prefixRecorder) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	return r.getPrefix(ctx, key, n)
}

func (r *Recorder) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	return r.put(ctx, key, expect, [][]byte{data}, func() (string, error) { return r.inner.PutIfVersion(ctx, key, data, expect) })
}

func (r *Recorder) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expect string) (string, error) {
	return r.put(ctx, key, expect, parts, func() (string, error) { return writefence.PutParts(ctx, r.inner, key, parts, expect) })
}

func (r *Recorder) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error) {
	return r.put(ctx, key, expect, parts, func() (string, error) {
		return writefence.PutIfBranded(ctx, r.inner, brandKey, identity, key, parts, expect)
	})
}

// put makes a write and records it if it landed. Of a test whose calls
// run at once it records every write when it is sent, with its reply,
// for ordered to keep those that landed (see ordered).
func (r *Recorder) put(ctx context.Context, key, expect string, parts [][]byte, write func() (string, error)) (string, error) {
	data := bytes.Join(parts, nil)
	if r.sent == nil {
		v, err := write()
		if err == nil {
			r.change(ctx, promise.Change{Kind: "put", Key: key, Data: data, Version: v})
		}
		return v, err
	}
	at := r.change(ctx, promise.Change{Kind: "put", Key: key, Data: data})
	v, err := write()
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := &sentPut{expect: expect, landed: err == nil, reply: len(r.hist.Entries)}
	switch {
	case err == nil:
		r.hist.Entries[at].Change.Version = v
	case !errors.Is(err, writefence.ErrCorrupt) && !errors.Is(err, fs.ErrPermission) && !errors.Is(err, writefence.ErrWire):
		// A conflict too: a client that retries a write on its own after
		// a lost reply (go-redis does) meets the version its first
		// attempt made. Only a version that holds its bytes, made by no
		// reply, says it landed (see Ordered).
		sp.unknown = true
	}
	r.sent[at] = sp
	return v, err
}

func (r *Recorder) Delete(ctx context.Context, key string) error {
	err := r.inner.(writefence.Deleter).Delete(ctx, key)
	if err == nil {
		r.change(ctx, promise.Change{Kind: "delete", Key: key})
	}
	return err
}

func (r *Recorder) List(ctx context.Context, prefix string, fn func(key string) error) error {
	return r.inner.(writefence.Lister).List(ctx, prefix, fn)
}

// blobRecorder is a Recorder of a store that holds blobs.
type blobRecorder struct{ *Recorder }

func (r *blobRecorder) Capabilities() writefence.ConditionalStore { return r }

func (r *blobRecorder) blobs() writefence.BlobStore { return r.inner.(writefence.BlobStore) }

func (r *blobRecorder) CreateBlob(ctx context.Context, key string, src io.Reader) (writefence.BlobInfo, error) {
	data, err := io.ReadAll(src)
	if err != nil {
		return writefence.BlobInfo{}, err
	}
	info, err := r.blobs().CreateBlob(ctx, key, bytes.NewReader(data))
	if err == nil {
		r.change(ctx, promise.Change{Kind: "create blob", Key: key, Data: data, Modified: info.Modified})
	}
	return info, err
}

// WriteBlob writes through writefence.WriteBlob on the inner store, which
// takes the inner store's BlobWriter where it declares one and falls back
// to its CreateBlob, as a Fence over the inner store would: the recorder
// declares it whatever the inner store does. The creation time it records
// is StatBlob's.
func (r *blobRecorder) WriteBlob(ctx context.Context, key string, src io.Reader) (int64, error) {
	data, err := io.ReadAll(src)
	if err != nil {
		return 0, err
	}
	size, err := writefence.WriteBlob(ctx, r.inner, key, bytes.NewReader(data))
	if err == nil {
		info, serr := r.blobs().StatBlob(ctx, key)
		if serr != nil {
			return size, serr
		}
		r.change(ctx, promise.Change{Kind: "create blob", Key: key, Data: data, Modified: info.Modified})
	}
	return size, err
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

// DeleteBlobs deletes through writefence.DeleteBlobs on the inner store,
// which takes the inner store's BlobBatchDeleter where it declares one
// and falls back to its DeleteBlob, as a Fence over the inner store
// would: the recorder declares it whatever the inner store does.
func (r *blobRecorder) DeleteBlobs(ctx context.Context, keys []string) ([]string, error) {
	existed := map[string]bool{}
	for _, k := range keys {
		_, err := r.blobs().StatBlob(ctx, k)
		existed[k] = err == nil
	}
	deleted, err := writefence.DeleteBlobs(ctx, r.inner, keys)
	for _, k := range deleted {
		if existed[k] {
			r.change(ctx, promise.Change{Kind: "delete blob", Key: k})
		}
	}
	return deleted, err
}

func (r *blobRecorder) DeleteBlob(ctx context.Context, key string) error {
	_, statErr := r.blobs().StatBlob(ctx, key)
	err := r.blobs().DeleteBlob(ctx, key)
	if err == nil && statErr == nil {
		r.change(ctx, promise.Change{Kind: "delete blob", Key: key})
	}
	return err
}

// prefixBlobRecorder is a recorder of a store that holds blobs and
// declares a PrefixReader.
type prefixBlobRecorder struct{ *blobRecorder }

func (r *prefixBlobRecorder) Capabilities() writefence.ConditionalStore { return r }

func (r *prefixBlobRecorder) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	return r.getPrefix(ctx, key, n)
}

// listingRecorder is a recorder of a store that holds blobs and declares
// a ConsistentBlobLister.
type listingRecorder struct{ *blobRecorder }

func (r *listingRecorder) Capabilities() writefence.ConditionalStore { return r }

func (r *listingRecorder) ListBlobsConsistent(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error {
	r.listings.Add(1)
	return r.inner.(writefence.ConsistentBlobLister).ListBlobsConsistent(ctx, prefix, after, fn)
}

// prefixListingRecorder is a recorder of a store that holds blobs and
// declares a PrefixReader and a ConsistentBlobLister.
type prefixListingRecorder struct{ *listingRecorder }

func (r *prefixListingRecorder) Capabilities() writefence.ConditionalStore { return r }

func (r *prefixListingRecorder) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	return r.getPrefix(ctx, key, n)
}
