package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/writefence/writefence"
)

// partitioned is a store that a test can cut off, as a network partition
// cuts one node off from the store while the others still reach it.
type partitioned struct {
	writefence.ConditionalStore
	cut atomic.Bool
}

var errUnreachable = errors.New("store unreachable")

func (p *partitioned) Get(ctx context.Context, key string) ([]byte, string, error) {
	if p.cut.Load() {
		return nil, "", errUnreachable
	}
	return p.ConditionalStore.Get(ctx, key)
}

func (p *partitioned) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if p.cut.Load() {
		return "", errUnreachable
	}
	return p.ConditionalStore.PutIfVersion(ctx, key, data, expect)
}

// A shipper under a lease that renews itself, in real time. node-a holds
// the lease and ships for longer than its TTL; a partition then cuts
// node-a off from the store, its renewals fail, and the moment its lease
// expires its context is done and it stops shipping. node-b, polling,
// takes over and seals the shard. When the partition heals, node-a learns
// who took over, and at which term, from every call it makes.
func ExampleLease_Hold() {
	ctx := context.Background()
	store := &writefence.MemStore{}
	link := &partitioned{ConditionalStore: store} // node-a's way to the store
	fenceA := &writefence.Fence{Store: link}
	fenceB := &writefence.Fence{Store: store}
	shard := writefence.Shard{Plugin: "wal", Shard: "0"}
	const ttl = 600 * time.Millisecond // renewals every 200ms

	// ship pushes a segment every 100ms under held until held is done or n
	// segments are out, and returns how many it shipped at which term.
	ship := func(held context.Context, f *writefence.Fence, l *writefence.Lease, from, n int) (shipped int, term uint64) {
		for i := from; i < from+n && held.Err() == nil; i++ {
			epoch, err := f.PushFrom(held, l, "wal", "0", l.Holder, fmt.Appendf(nil, "segment %d", i))
			if err == nil {
				shipped, term = shipped+1, epoch>>32
			}
			select {
			case <-held.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		return shipped, term
	}

	a := &writefence.Lease{Fence: fenceA, Name: "wal/0", Holder: "node-a", TTL: ttl}
	heldA, err := a.Hold(ctx, shard)
	if err != nil {
		fmt.Println("node-a:", err)
		return
	}
	shipped, term := ship(heldA, fenceA, a, 1, 8) // 800ms: longer than the TTL
	fmt.Printf("node-a shipped %d segments at term %d, renewing in the background\n", shipped, term)

	b := &writefence.Lease{Fence: fenceB, Name: "wal/0", Holder: "node-b", TTL: ttl}
	_, err = b.Hold(ctx, shard)
	var held *writefence.LeaseHeldError
	if errors.As(err, &held) {
		fmt.Printf("node-b: held by %s at term %d\n", held.Holder, held.Term)
	}

	// The partition: node-a keeps trying to ship until its lease expires.
	link.cut.Store(true)
	ship(heldA, fenceA, a, 9, 1000)
	fmt.Println("node-a stopped shipping, lease expired:", errors.Is(context.Cause(heldA), writefence.ErrLeaseExpired))

	// node-b polls, takes over once node-a's lease has expired, and seals.
	heldB, err := b.Hold(ctx, shard)
	for errors.Is(err, writefence.ErrLeaseHeld) {
		time.Sleep(ttl / 8)
		heldB, err = b.Hold(ctx, shard)
	}
	if err != nil {
		fmt.Println("node-b:", err)
		return
	}
	shipped, term = ship(heldB, fenceB, b, 100, 2)
	fmt.Printf("node-b shipped %d segments at term %d\n", shipped, term)

	// The partition heals: node-a learns what happened.
	link.cut.Store(false)
	fmt.Println("node-a renew:", a.Renew(ctx))
	_, err = fenceA.PushFrom(ctx, a, "wal", "0", "node-a", []byte("segment 10"))
	fmt.Println("node-a push:", err)

	fmt.Println("node-b release:", b.Release(ctx))
	epoch, writer, payload, _ := fenceB.Latest(ctx, "wal", "0")
	fmt.Printf("recorded: term %d by %s: %s\n", epoch>>32, writer, payload)
	// Output:
	// node-a shipped 8 segments at term 1, renewing in the background
	// node-b: held by node-a at term 1
	// node-a stopped shipping, lease expired: true
	// node-b shipped 2 segments at term 2
	// node-a renew: writefence: lease wal/0: term 1: taken over by node-b at term 2: writefence: lease lost
	// node-a push: writefence: epoch source: lease wal/0: term 1: taken over by node-b at term 2: writefence: lease lost
	// node-b release: <nil>
	// recorded: term 2 by node-b: segment 101
}
