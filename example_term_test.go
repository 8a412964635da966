package writefence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/writefence/writefence"
)

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
