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

// A shipper under a lease that renews itself. node-a holds the lease and
// ships; a partition then cuts node-a off from the store, its renewals
// fail, and the moment its lease expires by its clock its context is done
// and it stops shipping. node-b takes over and seals the shard. When the
// partition heals, node-a learns who took over, and at which term, from
// every call it makes. The leases read the time from a clock the example
// moves (Lease.Clock), so that what it prints does not depend on how fast
// the machine runs it; the renewals themselves run in the background, on
// the runtime's timers.
func ExampleLease_Hold() {
	ctx := context.Background()
	store := &writefence.MemStore{}
	link := &partitioned{ConditionalStore: store} // node-a's way to the store
	fenceA := &writefence.Fence{Store: link}
	fenceB := &writefence.Fence{Store: store}
	shard := writefence.Shard{Plugin: "wal", Shard: "0"}
	const ttl = 300 * time.Millisecond // renewals every 100ms
	var now atomic.Int64
	now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }

	// ship pushes n segments under held, unless held ends first, and
	// returns how many it shipped at which term.
	ship := func(held context.Context, f *writefence.Fence, l *writefence.Lease, from, n int) (shipped int, term uint64) {
		for i := from; i < from+n && held.Err() == nil; i++ {
			epoch, err := f.PushFrom(held, l, "wal", "0", l.Holder, fmt.Appendf(nil, "segment %d", i))
			if err == nil {
				shipped, term = shipped+1, epoch>>32
			}
		}
		return shipped, term
	}

	a := &writefence.Lease{Fence: fenceA, Name: "wal/0", Holder: "node-a", TTL: ttl, Clock: clock}
	heldA, err := a.Hold(ctx, shard)
	if err != nil {
		fmt.Println("node-a:", err)
		return
	}
	shipped, term := ship(heldA, fenceA, a, 1, 8)
	fmt.Printf("node-a shipped %d segments at term %d, renewing in the background\n", shipped, term)

	b := &writefence.Lease{Fence: fenceB, Name: "wal/0", Holder: "node-b", TTL: ttl, Clock: clock}
	_, err = b.Hold(ctx, shard)
	var held *writefence.LeaseHeldError
	if errors.As(err, &held) {
		fmt.Printf("node-b: held by %s at term %d\n", held.Holder, held.Term)
	}

	// The partition: node-a's renewals fail, and its clock passes the
	// expiry of the last one that landed.
	link.cut.Store(true)
	now.Add(int64(2 * ttl))
	<-heldA.Done()
	fmt.Println("node-a stopped shipping, lease expired:", errors.Is(context.Cause(heldA), writefence.ErrLeaseExpired))
	_, err = a.Epoch(ctx, "wal", "0")
	fmt.Println("node-a draws no epoch:", errors.Is(err, writefence.ErrLeaseExpired))

	// node-b, whose clock agrees, takes over and seals.
	heldB, err := b.Hold(ctx, shard)
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
	// node-a draws no epoch: true
	// node-b shipped 2 segments at term 2
	// node-a renew: writefence: lease wal/0: term 1: taken over by node-b at term 2: writefence: lease lost
	// node-a push: writefence: epoch source: lease wal/0: term 1: taken over by node-b at term 2: writefence: lease lost
	// node-b release: <nil>
	// recorded: term 2 by node-b: segment 101
}
