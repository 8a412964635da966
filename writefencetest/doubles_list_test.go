package writefencetest_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/writefence/writefence"
)

// listFault is how a listStore's List departs from the contract.
type listFault int

const (
	listOutside  listFault = iota // every key, whatever the prefix
	listTwice                     // each key twice, as a listing that restarts a page would
	listDeleted                   // deleted keys too, as a stale index would
	listNoStop                    // fn's error ignored: the listing goes on and ends with nil
	listNoCancel                  // ctx ignored
)

// listStore is MemStore with a List that has one fault.
type listStore struct {
	writefence.MemStore
	fault listFault

	mu      sync.Mutex      // guards deleted
	deleted map[string]bool // every key ever deleted
}

func (s *listStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	if s.deleted == nil {
		s.deleted = map[string]bool{}
	}
	s.deleted[key] = true
	s.mu.Unlock()
	return s.MemStore.Delete(ctx, key)
}

func (s *listStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	switch s.fault {
	case listOutside:
		return s.MemStore.List(ctx, "", fn)
	case listTwice:
		return s.MemStore.List(ctx, prefix, func(k string) error {
			if err := fn(k); err != nil {
				return err
			}
			return fn(k)
		})
	case listDeleted:
		s.mu.Lock()
		gone := slices.DeleteFunc(slices.Collect(maps.Keys(s.deleted)), func(k string) bool { return !strings.HasPrefix(k, prefix) })
		s.mu.Unlock()
		if err := s.MemStore.List(ctx, prefix, fn); err != nil {
			return err
		}
		for _, k := range gone {
			if err := fn(k); err != nil {
				return err
			}
		}
		return nil
	case listNoStop:
		return s.MemStore.List(ctx, prefix, func(k string) error { _ = fn(k); return nil })
	default:
		return s.MemStore.List(context.WithoutCancel(ctx), prefix, fn)
	}
}
