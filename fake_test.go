package writefence_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writefence/writefence"
)

// The test doubles below wrap writefence.MemStore, the in-memory model.

// countedFence returns a Fence over a countingStore over a MemStore.
func countedFence() (*writefence.MemStore, *countingStore, *writefence.Fence) {
	mem := &writefence.MemStore{}
	counting := &countingStore{ConditionalStore: mem}
	return mem, counting, &writefence.Fence{Store: counting}
}

// countingStore counts the calls that reach the store, and the writes it
// refused as conflicts.
type countingStore struct {
	writefence.ConditionalStore
	gets, puts, conflicts atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.gets.Add(1)
	return s.ConditionalStore.Get(ctx, key)
}

func (s *countingStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.puts.Add(1)
	v, err := s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
	if errors.Is(err, writefence.ErrConflict) {
		s.conflicts.Add(1)
	}
	return v, err
}

func (s *countingStore) roundTrips() int64 { return s.gets.Load() + s.puts.Load() }

// clientCompareStore is a broken store: it checks the precondition itself
// with a Get and then writes unconditionally, leaving a window in which
// another writer's write is overwritten.
type clientCompareStore struct {
	m writefence.MemStore
}

func (s *clientCompareStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.m.Get(ctx, key)
}

func (s *clientCompareStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	_, current, err := s.m.Get(ctx, key)
	if errors.Is(err, writefence.ErrNotFound) {
		current = ""
	} else if err != nil {
		return "", err
	}
	if current != expect {
		return "", writefence.ErrConflict
	}
	time.Sleep(50 * time.Microsecond) // the window a real network round trip leaves
	return unconditionalPut(ctx, &s.m, key, data)
}

// ignoringStore is a broken store that accepts every write whatever the
// precondition, as some "S3-compatible" services do with If-Match.
type ignoringStore struct {
	m writefence.MemStore
}

func (s *ignoringStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.m.Get(ctx, key)
}

func (s *ignoringStore) PutIfVersion(ctx context.Context, key string, data []byte, _ string) (string, error) {
	time.Sleep(50 * time.Microsecond) // the request's trip to the server
	return unconditionalPut(ctx, &s.m, key, data)
}

// unconditionalPut overwrites key on m whatever it holds.
func unconditionalPut(ctx context.Context, m *writefence.MemStore, key string, data []byte) (string, error) {
	for {
		_, v, err := m.Get(ctx, key) // v is "" when absent
		if err != nil && !errors.Is(err, writefence.ErrNotFound) {
			return "", err
		}
		if nv, err := m.PutIfVersion(ctx, key, data, v); !errors.Is(err, writefence.ErrConflict) {
			return nv, err
		}
	}
}

// together runs fn(0), ..., fn(n-1) on n goroutines released at once and
// returns their errors, in order.
func together(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// conflictStore answers ErrConflict to the next n writes (forever when n is
// negative) without performing them, as if another writer won each race.
type conflictStore struct {
	writefence.ConditionalStore
	mu        sync.Mutex // guards remaining
	remaining int
	refused   atomic.Int64
}

func (s *conflictStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	refuse := s.remaining != 0
	if s.remaining > 0 {
		s.remaining--
	}
	s.mu.Unlock()
	if refuse {
		s.refused.Add(1)
		return "", writefence.ErrConflict
	}
	return s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
}

// errLostReply stands for a reply lost on the network after the server
// committed the write.
var errLostReply = errors.New("connection reset by peer")

// lostReplyStore performs the next n writes and then reports errLostReply
// instead of their result. With failReads set, reads fail too, so the
// outcome cannot be learned.
type lostReplyStore struct {
	writefence.ConditionalStore
	mu        sync.Mutex // guards remaining and failReads
	remaining int
	failReads bool
}

func (s *lostReplyStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.mu.Lock()
	fail := s.failReads
	s.mu.Unlock()
	if fail {
		return nil, "", errLostReply
	}
	return s.ConditionalStore.Get(ctx, key)
}

func (s *lostReplyStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	v, err := s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.remaining > 0 {
		s.remaining--
		return "", errLostReply
	}
	return v, err
}

func (s *lostReplyStore) set(remaining int, failReads bool) {
	s.mu.Lock()
	s.remaining, s.failReads = remaining, failReads
	s.mu.Unlock()
}

// epochFunc adapts a function to an EpochSource.
type epochFunc func(ctx context.Context, plugin, shard string) (uint64, error)

func (fn epochFunc) Epoch(ctx context.Context, plugin, shard string) (uint64, error) {
	return fn(ctx, plugin, shard)
}
