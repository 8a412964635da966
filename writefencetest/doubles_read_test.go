package writefencetest_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// The doubles of the read path: a GetPrefix that departs from Get, reads
// that tear under overwrite, a read limit that is not kept.

// prefixFault is how a prefixStore's GetPrefix departs from its Get.
type prefixFault int

const (
	prefixCorrect      prefixFault = iota
	prefixStaleVersion             // the version of the write before the latest, as a lagging metadata cache would
	prefixSizeOfPrefix             // the prefix's length as the object's size
	prefixWholeObject              // every byte, whatever n asks for
)

// prefixStore is a MemStore with a GetPrefix, correct or with one fault.
type prefixStore struct {
	limited
	fault prefixFault

	mu       sync.Mutex        // guards previous
	previous map[string]string // each key's version before its latest write
}

func (s *prefixStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock() // held across the write, so previous stays in step with it
	defer s.mu.Unlock()
	v, err := s.MemStore.PutIfVersion(ctx, key, data, expect)
	if err == nil {
		if s.previous == nil {
			s.previous = map[string]string{}
		}
		s.previous[key] = expect
	}
	return v, err
}

func (s *prefixStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.previous, key)
	return s.MemStore.Delete(ctx, key)
}

func (s *prefixStore) Capabilities() writefence.ConditionalStore { return s }

func (s *prefixStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, v, err := s.MemStore.Get(ctx, key)
	if err != nil {
		return nil, 0, "", err
	}
	size := int64(len(data))
	if s.fault != prefixWholeObject {
		data = data[:min(n, size)]
	}
	switch s.fault {
	case prefixStaleVersion:
		if prev := s.previous[key]; prev != "" {
			v = prev
		}
	case prefixSizeOfPrefix:
		size = int64(len(data))
	}
	return data, size, v, nil
}

// tornEvery is how often a tornStore tears: one read in tornEvery of a key
// that has been overwritten, the rate the overwrite check is sized for.
const tornEvery = 3000

// tornStore pairs the bytes of a key's latest write with the version of
// the write before on every tornEvery-th read of the key once it has been
// overwritten, as some S3-compatible servers do under concurrent
// overwrite, and is otherwise correct: its writes are atomic and compare
// against the current version. Only the overwrite check reads one key
// that often.
type tornStore struct {
	mu      sync.Mutex // guards objects and counter
	objects map[string]*tornObject
	counter int
}

type tornObject struct {
	data     []byte
	version  string
	previous string // the version before the latest write; "" for none
	reads    int    // reads since the first overwrite
}

func (s *tornStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return nil, "", notFound("torn get", key)
	}
	if o.previous != "" {
		if o.reads++; o.reads%tornEvery == 0 {
			return slices.Clone(o.data), o.previous, nil
		}
	}
	return slices.Clone(o.data), o.version, nil
}

func (s *tornStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if ok != (expect != "") || ok && o.version != expect {
		return "", conflict("torn put", key)
	}
	if s.objects == nil {
		s.objects = map[string]*tornObject{}
	}
	s.counter++
	next := &tornObject{data: slices.Clone(data), version: strconv.Itoa(s.counter)}
	if ok {
		next.previous, next.reads = o.version, o.reads
	}
	s.objects[key] = next
	return next.version, nil
}

func (s *tornStore) Delete(ctx context.Context, key string) error {
	return deleteLocked(ctx, &s.mu, s.objects, key)
}

// limitFault is how a limitStore keeps its read limit.
type limitFault int

const (
	limitCorrect         limitFault = iota
	limitIgnored                    // no limit at all: Get reads whatever is there
	limitPrefixUnbounded            // Get keeps it, GetPrefix does not
	limitOffByOne                   // an object of exactly the limit is refused too
)

// limitStoreLimit is a limitStore's read limit.
const limitStoreLimit = 4096

// limitStore is a MemStore, with a GetPrefix, that states a read limit of
// limitStoreLimit and keeps it, or not.
type limitStore struct {
	writefence.MemStore
	fault limitFault
}

func (s *limitStore) Capabilities() writefence.ConditionalStore { return s }

// over reports whether data is over the limit, as the fault sees it.
func (s *limitStore) over(data []byte, prefix bool) bool {
	switch {
	case s.fault == limitIgnored, prefix && s.fault == limitPrefixUnbounded:
		return false
	case s.fault == limitOffByOne:
		return len(data) >= limitStoreLimit
	}
	return len(data) > limitStoreLimit
}

func (s *limitStore) tooLarge(key string) error {
	return &writefence.StoreError{Op: "limit get", Key: key, Err: fmt.Errorf("%w: more than %d bytes", writefence.ErrTooLarge, limitStoreLimit)}
}

func (s *limitStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	data, v, err := s.MemStore.Get(ctx, key)
	if err == nil && s.over(data, false) {
		return nil, "", s.tooLarge(key)
	}
	return data, v, err
}

func (s *limitStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	data, v, err := s.MemStore.Get(ctx, key)
	switch {
	case err != nil:
		return nil, 0, "", err
	case s.over(data, true):
		return nil, 0, "", s.tooLarge(key)
	}
	return data[:min(n, int64(len(data)))], int64(len(data)), v, nil
}

// sizedFault is how a sizedStore refuses an object over its write limit.
type sizedFault int

const (
	sizedCorrect sizedFault = iota
	sizedLands              // it says ErrTooLarge, but the write landed
	sizedBare               // its ErrTooLarge is not a *writefence.StoreError
)

// sizedLimit is the most a sizedStore writes: less than Payload/1MiB's
// object, as a DynamoDB item is.
const sizedLimit = 300_000

// sizedStore is a MemStore that refuses a write of more than sizedLimit
// bytes with ErrTooLarge, as a store whose objects hold no more does, and
// states no read limit.
type sizedStore struct {
	writefence.MemStore
	fault sizedFault
}

func (s *sizedStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if len(data) <= sizedLimit {
		return s.MemStore.PutIfVersion(ctx, key, data, expect)
	}
	err := fmt.Errorf("%w: %d bytes, more than an object holds", writefence.ErrTooLarge, len(data))
	switch s.fault {
	case sizedLands:
		if _, werr := s.MemStore.PutIfVersion(ctx, key, data, expect); werr != nil {
			return "", werr
		}
	case sizedBare:
		return "", err
	}
	return "", &writefence.StoreError{Op: "sized put", Key: key, Err: err}
}

// wiredStore is a prefixStore whose traffic is counted, for Fence/Reads:
// each call is a round trip, and the bytes a read returns are read. With
// whole set its GetPrefix fetches the whole object and cuts it, as a store
// that ignores the length it is asked for does, and counts all of it.
type wiredStore struct {
	prefixStore
	whole       bool
	trips, read atomic.Int64
}

func (s *wiredStore) Capabilities() writefence.ConditionalStore { return s }

func (s *wiredStore) wire() *writefencetest.Wire {
	return &writefencetest.Wire{Count: func() (int64, int64) { return s.trips.Load(), s.read.Load() }}
}

func (s *wiredStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.trips.Add(1)
	data, v, err := s.prefixStore.Get(ctx, key)
	s.read.Add(int64(len(data)))
	return data, v, err
}

func (s *wiredStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	s.trips.Add(1)
	prefix, size, v, err := s.prefixStore.GetPrefix(ctx, key, n)
	if s.whole {
		s.read.Add(size)
	} else {
		s.read.Add(int64(len(prefix)))
	}
	return prefix, size, v, err
}

func (s *wiredStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.trips.Add(1)
	return s.prefixStore.PutIfVersion(ctx, key, data, expect)
}

// overridingStore embeds a prefixStore, which declares its GetPrefix, and
// overrides Get and PutIfVersion through Overrides, as a quota over an
// adapter would: it inherits GetPrefix but does not declare it, so a Fence
// reads through its Get.
type overridingStore struct {
	*prefixStore
	o *writefencetest.Overrides
}

func (w overridingStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	return w.o.Get(ctx, key, w.prefixStore.Get)
}

func (w overridingStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	return w.o.PutIfVersion(ctx, key, data, expect, w.prefixStore.PutIfVersion)
}

// declaringStore is an overridingStore that declares the capabilities it
// inherits as its own: a Fence then reads through the inherited GetPrefix,
// past the override of Get.
type declaringStore struct{ overridingStore }

func (w declaringStore) Capabilities() writefence.ConditionalStore { return w }
