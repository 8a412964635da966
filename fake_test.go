package writefence_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

// The test doubles below are fakestore Stores over a writefence.MemStore,
// the in-memory model, or broken stores of their own.

// counted returns a fake store over inner, with faults, that offers Get
// and PutIfVersion alone, as a wrapper that embeds a ConditionalStore
// does; its Calls count the calls that reach the store.
func counted(inner writefence.ConditionalStore, faults ...fakestore.Fault) fakestore.Store {
	return fakestore.New(inner, fakestore.Options{Hide: fakestore.All, Faults: faults})
}

// countedFence returns a Fence over a counted MemStore.
func countedFence() (*writefence.MemStore, fakestore.Store, *writefence.Fence) {
	mem := &writefence.MemStore{}
	counting := counted(mem)
	return mem, counting, &writefence.Fence{Store: counting}
}

// roundTrips returns the reads and writes made of s.
func roundTrips(s fakestore.Store) int64 { return s.Calls(fakestore.Get) + s.Calls(fakestore.Put) }

// conflicts answers ErrConflict to the next n writes (every write when n
// is 0) without performing them, as if another writer won each race.
func conflicts(n int) fakestore.Fault {
	return fakestore.Fault{Op: fakestore.Put, Times: n, Err: writefence.ErrConflict}
}

// lostReplies performs the next n writes that land and reports
// fakestore.ErrLostReply instead of their result.
func lostReplies(n int) fakestore.Fault {
	return fakestore.Fault{Op: fakestore.Put, Times: n, Err: fakestore.ErrLostReply, Lost: true}
}

// readsFail fails every read, so the outcome of a write cannot be learned.
var readsFail = fakestore.Fault{Op: fakestore.Get, Err: fakestore.ErrLostReply}

// clientCompare returns a broken store over mem: it checks the
// precondition itself with a Get and then writes unconditionally, leaving
// a window in which another writer's write is overwritten.
func clientCompare(mem *writefence.MemStore) fakestore.Store {
	return fakestore.New(mem, fakestore.Options{Hide: fakestore.All, Put: func(ctx context.Context, key string, data []byte, expect string) (string, error) {
		_, current, err := mem.Get(ctx, key)
		if errors.Is(err, writefence.ErrNotFound) {
			current = ""
		} else if err != nil {
			return "", err
		}
		if current != expect {
			return "", writefence.ErrConflict
		}
		time.Sleep(50 * time.Microsecond) // the window a real network round trip leaves
		return unconditionalPut(ctx, mem, key, data)
	}})
}

// ignoring returns a broken store over mem that accepts every write
// whatever the precondition, as some "S3-compatible" services do with
// If-Match.
func ignoring(mem *writefence.MemStore) fakestore.Store {
	return fakestore.New(mem, fakestore.Options{Hide: fakestore.All, Put: func(ctx context.Context, key string, data []byte, _ string) (string, error) {
		time.Sleep(50 * time.Microsecond) // the request's trip to the server
		return unconditionalPut(ctx, mem, key, data)
	}})
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

// epochFunc adapts a function to an EpochSource.
type epochFunc func(ctx context.Context, plugin, shard string) (uint64, error)

func (fn epochFunc) Epoch(ctx context.Context, plugin, shard string) (uint64, error) {
	return fn(ctx, plugin, shard)
}
