package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/writefence/writefence"
)

func ExampleFence_Push() {
	ctx := context.Background()
	fence := &writefence.Fence{Store: &writefence.MemStore{}}

	// The leader at epoch 7 ships a WAL segment.
	if err := fence.Push(ctx, "wal", "shard-0", "node-a", 7, []byte("segment 0042")); err != nil {
		fmt.Println("push:", err)
	}

	// A deposed leader, still believing it holds epoch 6, is refused
	// before it writes anything.
	err := fence.Push(ctx, "wal", "shard-0", "node-b", 6, []byte("segment 0041"))
	var stale *writefence.StaleEpochError
	if errors.As(err, &stale) {
		fmt.Printf("refused: epoch %d is recorded, by %s\n", stale.RecordedEpoch, stale.RecordedWriter)
	}

	epoch, writer, payload, _ := fence.Latest(ctx, "wal", "shard-0")
	fmt.Printf("recorded: epoch %d by %s: %s\n", epoch, writer, payload)
	// Output:
	// refused: epoch 7 is recorded, by node-a
	// recorded: epoch 7 by node-a: segment 0042
}

// A manifest kept under the fence: each writer appends the segment it
// shipped, at its epoch; a deposed writer's update is refused before next
// runs on anything.
func ExampleFence_Update() {
	ctx := context.Background()
	fence := &writefence.Fence{Store: &writefence.MemStore{}}
	add := func(segment string) func([]byte) ([]byte, error) {
		return func(manifest []byte) ([]byte, error) {
			if bytes.Contains(manifest, []byte(segment+"\n")) {
				return manifest, nil // already listed: idempotent, so a retry is safe
			}
			return append(manifest, segment+"\n"...), nil
		}
	}
	fmt.Println(fence.Update(ctx, "wal", "shard-0", "node-a", 7, add("seg-0001")))
	fmt.Println(fence.Update(ctx, "wal", "shard-0", "node-a", 8, add("seg-0002")))
	err := fence.Update(ctx, "wal", "shard-0", "node-b", 6, add("seg-0000"))
	fmt.Println("stale:", errors.Is(err, writefence.ErrStaleEpoch))

	epoch, writer, manifest, _ := fence.Latest(ctx, "wal", "shard-0")
	fmt.Printf("epoch %d by %s:\n%s", epoch, writer, manifest)
	// Output:
	// <nil>
	// <nil>
	// stale: true
	// epoch 8 by node-a:
	// seg-0001
	// seg-0002
}

func ExampleFence_PushFrom() {
	ctx := context.Background()
	fence := &writefence.Fence{Store: &writefence.MemStore{}}

	// The control plane handed this process epoch 3 for every shard.
	lease := writefence.StaticEpochSource(3)
	epoch, err := fence.PushFrom(ctx, lease, "snapshots", "shard-9", "node-c", []byte("snapshot"))
	fmt.Println(epoch, err)
	// Output:
	// 3 <nil>
}

// A store is branded once by a deploy step; writers of the same format
// verify the brand before their first push, and a program of another format
// is refused before it writes anything.
func ExampleFence_ClaimBrand() {
	ctx := context.Background()
	store := &writefence.MemStore{}

	// The deploy step. Installing again writes nothing.
	admin := &writefence.Fence{Store: store, Identity: "wal-mirror/v1"}
	installed, err := admin.ClaimBrand(ctx)
	fmt.Println("installed:", installed, err)
	installed, err = admin.ClaimBrand(ctx)
	fmt.Println("installed again:", installed, err)

	// A writer of the format: verifies once, then pushes.
	fence := &writefence.Fence{
		Store:    store,
		Identity: "wal-mirror/v1",
		Brand:    writefence.BrandVerify,
	}
	fmt.Println("push:", fence.Push(ctx, "wal", "shard-7", "node-a", 1, []byte("segment 1")))

	// A program of another format claims the store at start-up.
	other := &writefence.Fence{Store: store, Identity: "wal-mirror/v2"}
	_, err = other.ClaimBrand(ctx)
	fmt.Println("wire refusal:", errors.Is(err, writefence.ErrWire))
	fmt.Println(err)
	// Output:
	// installed: true <nil>
	// installed again: false <nil>
	// push: <nil>
	// wire refusal: true
	// writefence: wire: expected wal-mirror/v2 found wal-mirror/v1
}

// A Fence that claims its store before its first push: the first writer to
// start brands an empty store, later ones accept the brand.
func ExampleBrandMode() {
	ctx := context.Background()
	store := &writefence.MemStore{}
	fence := &writefence.Fence{
		Store: store,
		Brand: writefence.BrandClaim,
	}
	fmt.Println(fence.Push(ctx, "wal", "shard-7", "node-a", 1, []byte("segment 1")))
	fmt.Println((&writefence.Fence{Store: store}).VerifyBrand(ctx))

	fresh := &writefence.Fence{Store: &writefence.MemStore{}, Brand: writefence.BrandVerify}
	fmt.Println(fresh.Push(ctx, "wal", "shard-7", "node-a", 1, []byte("segment 1")))
	// Output:
	// <nil>
	// <nil>
	// writefence: wire: expected writefence/v1 but writefence/_brand is absent
}

// A writer loop gated behind a lease. Two nodes share one store: node-a
// takes the lease, seals the shard and ships segments, renewing as it goes;
// it then stalls past its TTL, node-b takes over, seals, and node-a's late
// push is refused by the store itself. A fake clock stands in for time.
func ExampleLease() {
	ctx := context.Background()
	store := &writefence.MemStore{}
	fence := &writefence.Fence{Store: store}

	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	newLease := func(holder string) *writefence.Lease {
		return &writefence.Lease{Fence: fence, Name: "wal/0", Holder: holder, TTL: 10 * time.Second, Clock: clock}
	}

	// node-a: acquire, seal, then ship while renewing.
	a := newLease("node-a")
	term, err := a.Acquire(ctx)
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("node-a holds term", term)
	seal, _ := a.Epoch(ctx, "wal", "0")
	if err := fence.Seal(ctx, "wal", "0", "node-a", seal); err != nil {
		fmt.Println("seal:", err)
		return
	}
	for i := 1; i <= 3; i++ {
		if err := a.Renew(ctx); err != nil {
			fmt.Println("renew:", err)
			return
		}
		epoch, err := fence.PushFrom(ctx, a, "wal", "0", "node-a", fmt.Appendf(nil, "segment %d", i))
		fmt.Printf("node-a pushed segment %d at term %d: %v\n", i, epoch>>32, err)
		now = now.Add(time.Second)
	}

	// node-a draws an epoch, then stalls; node-b cannot take over until the
	// lease expires.
	late, _ := a.Epoch(ctx, "wal", "0")
	b := newLease("node-b")
	if _, err := b.Acquire(ctx); errors.Is(err, writefence.ErrLeaseHeld) {
		fmt.Println("node-b:", err)
	}
	now = now.Add(15 * time.Second)
	term, _ = b.Acquire(ctx)
	fmt.Println("node-b holds term", term)
	seal, _ = b.Epoch(ctx, "wal", "0")
	if err := fence.Seal(ctx, "wal", "0", "node-b", seal); err != nil {
		fmt.Println("seal:", err)
		return
	}

	// node-a wakes up and pushes with the epoch it drew before the stall.
	err = fence.Push(ctx, "wal", "0", "node-a", late, []byte("segment 4"))
	fmt.Println("node-a late push refused:", errors.Is(err, writefence.ErrStaleEpoch))
	fmt.Println("node-a renew:", a.Renew(ctx))

	epoch, writer, payload, _ := fence.Latest(ctx, "wal", "0")
	fmt.Printf("recorded: term %d by %s: %s\n", epoch>>32, writer, payload)
	// Output:
	// node-a holds term 1
	// node-a pushed segment 1 at term 1: <nil>
	// node-a pushed segment 2 at term 1: <nil>
	// node-a pushed segment 3 at term 1: <nil>
	// node-b: writefence: lease wal/0 held by node-a at term 1 until 2030-01-01T00:00:12Z
	// node-b holds term 2
	// node-a late push refused: true
	// node-a renew: writefence: lease wal/0: term 1: taken over by node-b at term 2: writefence: lease lost
	// recorded: term 2 by node-b: segment 3
}

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

// A first program, end to end on the in-memory store: node-a holds the
// lease of a shard, uploads a blob at an epoch of its term, commits the
// blob in the shard's manifest, and reads it back through the manifest.
//
// A plugin names the kind of data (here "wal"), a shard one independent
// stream of it (here "shard-0"); each (plugin, shard) has one record, the
// manifest, and blobs of its own. The manifest's list of blobs is what
// Commit's function returns: it gets the recorded list and adds the new
// reference. Readers get the list from Inspect (RecordInfo.Blobs), and
// OpenBlob opens only a blob on it.
func Example_leaseBlobManifest() {
	ctx := context.Background()
	fence := &writefence.Fence{Store: &writefence.MemStore{}}
	shard := writefence.Shard{Plugin: "wal", Shard: "shard-0"}

	// Hold takes the lease and seals the shard at the new term, so that
	// every earlier holder's writes are refused from now on.
	lease := &writefence.Lease{Fence: fence, Name: "wal/shard-0", Holder: "node-a", TTL: time.Minute}
	held, err := lease.Hold(ctx, shard)
	if err != nil {
		fmt.Println("hold:", err)
		return
	}
	epoch, err := lease.Epoch(held, shard.Plugin, shard.Shard)
	if err != nil {
		fmt.Println("epoch:", err)
		return
	}
	fmt.Println("node-a holds term", epoch>>32)

	// The blob: streamed in, of any size, at a key nobody else writes.
	ref, err := fence.PutBlob(held, shard.Plugin, shard.Shard, lease.Holder, epoch, strings.NewReader("segment 0001"))
	if err != nil {
		fmt.Println("put:", err)
		return
	}
	// The commit: the manifest now lists the blob, admitted at epoch.
	err = fence.Commit(held, shard.Plugin, shard.Shard, lease.Holder, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
		if !slices.Contains(m.Blobs, ref) { // a retry finds a commit that landed
			m.Blobs = append(m.Blobs, ref)
		}
		m.Payload = []byte("last segment: 0001")
		return m, nil
	})
	if err != nil {
		fmt.Println("commit:", err)
		return
	}

	// A reader follows the manifest.
	info, err := fence.Inspect(ctx, shard.Plugin, shard.Shard)
	if err != nil {
		fmt.Println("inspect:", err)
		return
	}
	fmt.Printf("manifest by %s: %q, %d blob\n", info.Writer, info.Payload, len(info.Blobs))
	for _, b := range info.Blobs {
		rc, _, err := fence.OpenBlob(ctx, shard.Plugin, shard.Shard, b.Name)
		if err != nil {
			fmt.Println("open:", err)
			return
		}
		data, err := io.ReadAll(rc) // checked against the reference as it streams
		rc.Close()
		if err != nil {
			fmt.Println("read:", err)
			return
		}
		fmt.Printf("blob of %d bytes: %s\n", b.Size, data)
	}
	fmt.Println("release:", lease.Release(ctx))
	// Output:
	// node-a holds term 1
	// manifest by node-a: "last segment: 0001", 1 blob
	// blob of 12 bytes: segment 0001
	// release: <nil>
}

// A WAL shipper under a Lease: each segment goes up as a blob, and a
// manifest commit makes it part of the shard's state. node-a is deposed
// mid-stream, with a segment uploaded but not committed; node-b takes the
// lease over and seals. node-a's last segment is never visible to a
// reader, its commit is refused, and Collect deletes it at once.
func ExampleFence_Commit() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	fence := &writefence.Fence{Store: &writefence.MemStore{Clock: clock}}
	lease := func(holder string) *writefence.Lease {
		return &writefence.Lease{Fence: fence, Name: "wal/0", Holder: holder, TTL: 10 * time.Second, Clock: clock}
	}
	// ship uploads a segment and commits it into the manifest.
	ship := func(l *writefence.Lease, holder, segment string) (writefence.BlobRef, error) {
		epoch, err := l.Epoch(ctx, "wal", "0")
		if err != nil {
			return writefence.BlobRef{}, err
		}
		ref, err := fence.PutBlob(ctx, "wal", "0", holder, epoch, strings.NewReader(segment))
		if err != nil {
			return writefence.BlobRef{}, err
		}
		epoch, err = l.Epoch(ctx, "wal", "0")
		if err != nil {
			return ref, err
		}
		return ref, fence.Commit(ctx, "wal", "0", holder, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
			if !slices.Contains(m.Blobs, ref) { // a retry finds a commit that landed
				m.Blobs = append(m.Blobs, ref)
			}
			return m, nil
		})
	}

	a := lease("node-a")
	if _, err := a.Acquire(ctx); err != nil {
		fmt.Println(err)
		return
	}
	seal, _ := a.Epoch(ctx, "wal", "0")
	fmt.Println("node-a seals:", fence.Seal(ctx, "wal", "0", "node-a", seal))
	for _, seg := range []string{"segment 1", "segment 2"} {
		_, err := ship(a, "node-a", seg)
		fmt.Printf("node-a ships %s: %v\n", seg, err)
	}

	// node-a uploads segment 3 and stalls before committing it; its lease
	// expires and node-b takes over and seals.
	late, _ := a.Epoch(ctx, "wal", "0")
	orphan, _ := fence.PutBlob(ctx, "wal", "0", "node-a", late, strings.NewReader("segment 3"))
	now = now.Add(15 * time.Second)
	b := lease("node-b")
	term, _ := b.Acquire(ctx)
	seal, _ = b.Epoch(ctx, "wal", "0")
	fmt.Printf("node-b holds term %d and seals: %v\n", term, fence.Seal(ctx, "wal", "0", "node-b", seal))

	// node-a wakes up and commits its segment at the epoch it drew.
	err := fence.Commit(ctx, "wal", "0", "node-a", late+1, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = append(m.Blobs, orphan)
		return m, nil
	})
	fmt.Println("node-a's late commit refused:", errors.Is(err, writefence.ErrStaleEpoch))
	_, _, err = fence.OpenBlob(ctx, "wal", "0", orphan.Name)
	fmt.Println("a reader sees segment 3:", !errors.Is(err, writefence.ErrNotFound))

	_, err = ship(b, "node-b", "segment 4")
	fmt.Println("node-b ships segment 4:", err)

	report, _ := fence.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	fmt.Printf("collected %d blob, kept %d referenced\n", len(report.Deleted), len(report.Referenced))

	info, _ := fence.Inspect(ctx, "wal", "0")
	for _, r := range info.Blobs {
		rc, _, _ := fence.OpenBlob(ctx, "wal", "0", r.Name)
		data, _ := io.ReadAll(rc)
		rc.Close()
		fmt.Printf("manifest: %s (%d bytes)\n", data, r.Size)
	}
	// Output:
	// node-a seals: <nil>
	// node-a ships segment 1: <nil>
	// node-a ships segment 2: <nil>
	// node-b holds term 2 and seals: <nil>
	// node-a's late commit refused: true
	// a reader sees segment 3: false
	// node-b ships segment 4: <nil>
	// collected 1 blob, kept 3 referenced
	// manifest: segment 1 (9 bytes)
	// manifest: segment 2 (9 bytes)
	// manifest: segment 4 (9 bytes)
}

// k8sLease stands in for the Kubernetes Lease (coordination.k8s.io/v1) that
// the writers' leader election keeps: a real program reads it with its
// Kubernetes client, or takes it from its leader elector's last renewal.
type k8sLease struct {
	holderIdentity    string
	leaderTransitions uint64
}

// leaderTerm is the term function of a writer named me over a Kubernetes
// Lease: spec.leaderTransitions, while spec.holderIdentity is me.
// leaderTransitions rises by one on every change of holder, and only the
// holder renews the Lease, so each value has one holder: one leader per
// term, strictly rising. A pod whose identity is unique to each start makes
// every restart a new term too.
func leaderTerm(lease *k8sLease, me string) func(context.Context) (uint64, error) {
	return func(context.Context) (uint64, error) {
		if lease.holderIdentity != me {
			return 0, fmt.Errorf("%s does not hold the lease (%s does)", me, lease.holderIdentity)
		}
		return lease.leaderTransitions, nil
	}
}

// ExampleTermSource gates writers behind a Kubernetes Lease with no
// Kubernetes client in sight: the term source needs only a function that
// returns the current term. The new leader seals first, so the deposed
// one's epochs are refused at once.
func ExampleTermSource() {
	ctx := context.Background()
	fence := &writefence.Fence{Store: &writefence.MemStore{}}
	lease := &k8sLease{holderIdentity: "pod-a", leaderTransitions: 3}

	a := &writefence.TermSource{Fence: fence, Writer: "pod-a", Term: leaderTerm(lease, "pod-a")}
	seal, _ := a.Epoch(ctx, "wal", "0")
	fmt.Println("pod-a seals:", fence.Seal(ctx, "wal", "0", "pod-a", seal))
	epoch, err := fence.PushFrom(ctx, a, "wal", "0", "pod-a", []byte("segment 1"))
	fmt.Printf("pod-a pushes at term %d: %v\n", epoch>>32, err)
	late, _ := a.Epoch(ctx, "wal", "0") // drawn just before pod-a is deposed

	// pod-b takes the lease over: leaderTransitions rises.
	lease.holderIdentity, lease.leaderTransitions = "pod-b", 4
	b := &writefence.TermSource{Fence: fence, Writer: "pod-b", Term: leaderTerm(lease, "pod-b")}
	seal, _ = b.Epoch(ctx, "wal", "0")
	fmt.Println("pod-b seals:", fence.Seal(ctx, "wal", "0", "pod-b", seal))

	err = fence.Push(ctx, "wal", "0", "pod-a", late, []byte("segment 2"))
	fmt.Println("pod-a's late push refused:", errors.Is(err, writefence.ErrStaleEpoch))
	_, err = fence.PushFrom(ctx, a, "wal", "0", "pod-a", []byte("segment 2"))
	fmt.Println("pod-a draws no epoch:", err)
	epoch, err = fence.PushFrom(ctx, b, "wal", "0", "pod-b", []byte("segment 2"))
	fmt.Printf("pod-b pushes at term %d: %v\n", epoch>>32, err)
	// Output:
	// pod-a seals: <nil>
	// pod-a pushes at term 3: <nil>
	// pod-b seals: <nil>
	// pod-a's late push refused: true
	// pod-a draws no epoch: writefence: epoch source: term source of pod-a at term 3: the term function failed: pod-a does not hold the lease (pod-b does): writefence: term ended
	// pod-b pushes at term 4: <nil>
}
