package writefencetest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// A store's own _test.go file runs the suite from a test function:
//
//	func TestMyStore(t *testing.T) {
//		writefencetest.TestConditionalStore(t, newStore, nil)
//	}
//
// An example has no *testing.T to give it, so this one builds that test
// function and shows its type; this package's tests run the suite against
// MemStore, one store per subtest and one shared by all.
func ExampleTestConditionalStore() {
	// One store for every subtest is fine: each subtest works under a random
	// key prefix of its own, as it would in one shared bucket or database.
	store := new(writefence.MemStore)
	newStore := func(t *testing.T) writefence.ConditionalStore {
		return store
	}

	testMyStore := func(t *testing.T) {
		writefencetest.TestConditionalStore(t, newStore, nil)
	}
	fmt.Printf("%T\n", testMyStore)
	// Output: func(*testing.T)
}

// An epoch source's own _test.go file runs the epoch-source kit from a
// test function, with a constructor of elections; this one's leaders are
// TermSources of one control plane, whose term function moves on to
// depose a leader.
func ExampleTestEpochSource() {
	newElection := func(t *testing.T) writefencetest.Election {
		fence := &writefence.Fence{Store: new(writefence.MemStore)}
		var term atomic.Uint64
		term.Store(1)
		leaders := 0
		return writefencetest.Election{
			Lead: func(t *testing.T) writefence.EpochSource {
				leaders++
				return &writefence.TermSource{Fence: fence, Writer: fmt.Sprint("node-", leaders),
					Term: func(context.Context) (uint64, error) { return term.Load(), nil }}
			},
			Depose:  func(t *testing.T) { term.Add(1) },
			Deposed: writefence.ErrTermEnded,
		}
	}

	testMySource := func(t *testing.T) {
		writefencetest.TestEpochSource(t, newElection, nil)
	}
	fmt.Printf("%T\n", testMySource)
	// Output: func(*testing.T)
}
