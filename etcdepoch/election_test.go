package etcdepoch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/etcdepoch"
	"github.com/writefence/writefence/internal/testserver"
)

// campaignAsync starts a campaign in the background; the returned channel
// yields its result.
func campaignAsync(ctx context.Context, e *etcdepoch.Election, val string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.Campaign(ctx, val) }()
	return done
}

func requireBlocked(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned while another candidate leads: %v", what, err)
	default:
	}
}

// Two candidates. The leader seals and pushes, draws one more epoch, and
// loses its lease (revoked by a third client, as an expiry would); the
// other candidate wins and seals. The deposed leader's push at the epoch it
// drew in time is refused by the store, and it can draw no new epoch.
func TestDeposedLeaderIsFenced(t *testing.T) {
	ctx := context.Background()
	name := uniqueName(t)
	admin := newClient(t, etcdEndpoint)
	sa := newSession(t, newClient(t, etcdEndpoint), 60)
	sb := newSession(t, newClient(t, etcdEndpoint), 60)
	a := etcdepoch.NewElection(sa, name)
	b := etcdepoch.NewElection(sb, name)
	fence := &writefence.Fence{Store: &writefence.MemStore{}}

	require.NoError(t, a.Campaign(ctx, "node-a"))
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	bWon := campaignAsync(bctx, b, "node-b")
	cands := waitCandidates(t, admin, name, 2)
	akey, _ := a.Leading()
	require.Equal(t, akey, cands[0].key, "node-a is the first candidate")

	seal, err := a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	require.NoError(t, fence.Seal(ctx, "wal", "0", "node-a", seal))
	pushed, err := fence.PushFrom(ctx, a, "wal", "0", "node-a", []byte("segment 1"))
	require.NoError(t, err)
	require.Greater(t, pushed, seal)
	late, err := a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	require.Greater(t, late, pushed)
	requireBlocked(t, bWon, "node-b's campaign")

	_, err = admin.Revoke(ctx, sa.Lease())
	require.NoError(t, err)
	require.NoError(t, <-bWon, "node-b wins once node-a's key is gone")

	sealB, err := b.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	require.Greater(t, sealB, late, "the new leader's epochs exceed the deposed leader's")
	require.NoError(t, fence.Seal(ctx, "wal", "0", "node-b", sealB))

	err = fence.Push(ctx, "wal", "0", "node-a", late, []byte("segment 2 from the deposed leader"))
	require.ErrorIs(t, err, writefence.ErrStaleEpoch)
	var stale *writefence.StaleEpochError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, sealB, stale.RecordedEpoch)
	require.Equal(t, "node-b", stale.RecordedWriter)
	t.Logf("deposed leader node-a: push at epoch %d refused: %v", late, err)

	used, err := fence.PushFrom(ctx, a, "wal", "0", "node-a", []byte("segment 2 from the deposed leader"))
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader)
	require.Zero(t, used)
	t.Logf("deposed leader node-a: PushFrom refused: %v", err)
	epoch, err := a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader)
	require.Zero(t, epoch)
	t.Logf("deposed leader node-a: no new epoch: %v", err)

	used, err = fence.PushFrom(ctx, b, "wal", "0", "node-b", []byte("segment 2"))
	require.NoError(t, err)
	require.Greater(t, used, sealB)
	got, writer, payload, err := fence.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	require.Equal(t, used, got)
	require.Equal(t, "node-b", writer)
	require.Equal(t, "segment 2", string(payload))
	require.NoError(t, b.Resign(ctx))
}

// A leader whose key is deleted while its session is alive still believes
// it leads; etcd's guard refuses the mint, and nothing is written.
func TestDeposedLeaderGuardRefusesInEtcd(t *testing.T) {
	ctx := context.Background()
	name := uniqueName(t)
	admin := newClient(t, etcdEndpoint)
	sa := newSession(t, newClient(t, etcdEndpoint), 60)
	a := etcdepoch.NewElection(sa, name)
	require.NoError(t, a.Campaign(ctx, "node-a"))
	_, err := a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)

	key, rev := a.Leading()
	_, err = admin.Delete(ctx, key)
	require.NoError(t, err)
	before := mintRevision(t, admin, name)

	epoch, err := a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader)
	require.Zero(t, epoch)
	require.Contains(t, err.Error(), "deposed")
	require.NoError(t, sa.Ctx().Err(), "the session is alive: etcd refused, not the client")
	require.Equal(t, before, mintRevision(t, admin, name), "a refused draw writes nothing")
	t.Logf("deposed leader (key %s at revision %d deleted): %v", key, rev, err)

	// The refusal is remembered: no further round trip mints anything.
	_, err = a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader)
}

// A candidate whose key exists but is not the election's first is refused
// by etcd, whatever it believes: the guard compares every candidate's
// create revision, not only its own key.
func TestGuardRefusesACandidateThatIsNotFirst(t *testing.T) {
	ctx := context.Background()
	name := uniqueName(t)
	admin := newClient(t, etcdEndpoint)
	a := etcdepoch.NewElection(newSession(t, newClient(t, etcdEndpoint), 60), name)
	b := etcdepoch.NewElection(newSession(t, newClient(t, etcdEndpoint), 60), name)
	require.NoError(t, a.Campaign(ctx, "node-a"))
	bctx, bcancel := context.WithCancel(ctx)
	bWon := campaignAsync(bctx, b, "node-b")
	cands := waitCandidates(t, admin, name, 2)
	before := mintRevision(t, admin, name)

	b.SetLeading(cands[1].key, cands[1].rev)
	epoch, err := b.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader)
	require.Zero(t, epoch)
	require.Contains(t, err.Error(), cands[0].key, "names the candidate that leads")
	require.Equal(t, before, mintRevision(t, admin, name))

	requireBlocked(t, bWon, "node-b's campaign")
	bcancel()
	require.ErrorIs(t, <-bWon, context.Canceled)
	_, err = a.Epoch(ctx, "wal", "0")
	require.NoError(t, err, "the leader is unaffected")
}

func TestEpochsStrictlyIncrease(t *testing.T) {
	ctx := context.Background()
	a := etcdepoch.NewElection(newSession(t, newClient(t, etcdEndpoint), 60), uniqueName(t))
	require.NoError(t, a.Campaign(ctx, "node-a"))
	var last uint64
	for i := range 1000 {
		epoch, err := a.Epoch(ctx, "wal", "0")
		require.NoError(t, err)
		require.Greater(t, epoch, last, "draw %d", i)
		last = epoch
	}
}

// Concurrent draws are distinct, and each drawer sees them rise.
func TestEpochsConcurrentDrawsAreDistinct(t *testing.T) {
	ctx := context.Background()
	a := etcdepoch.NewElection(newSession(t, newClient(t, etcdEndpoint), 60), uniqueName(t))
	require.NoError(t, a.Campaign(ctx, "node-a"))
	const drawers, draws = 4, 50
	got := make([][]uint64, drawers)
	errs := make([]error, drawers)
	var start, wg sync.WaitGroup
	start.Add(1)
	for d := range drawers {
		wg.Go(func() {
			start.Wait()
			for range draws {
				epoch, err := a.Epoch(ctx, "wal", "0")
				if err != nil {
					errs[d] = err
					return
				}
				got[d] = append(got[d], epoch)
			}
		})
	}
	start.Done()
	wg.Wait()
	seen := make(map[uint64]bool)
	for d := range drawers {
		require.NoError(t, errs[d])
		require.Len(t, got[d], draws)
		for i, epoch := range got[d] {
			require.False(t, seen[epoch], "epoch %d handed out twice", epoch)
			seen[epoch] = true
			if i > 0 {
				require.Greater(t, epoch, got[d][i-1])
			}
		}
	}
}

// Three leaders in turn, the first resigning and the second deposed: every
// epoch is greater than every epoch drawn before it, and a leader that has
// gone draws nothing.
func TestEpochsIncreaseAcrossThreeLeaders(t *testing.T) {
	ctx := context.Background()
	name := uniqueName(t)
	admin := newClient(t, etcdEndpoint)
	var sessions [3]*concurrency.Session
	var cands [3]*etcdepoch.Election
	for i := range cands {
		sessions[i] = newSession(t, newClient(t, etcdEndpoint), 60)
		cands[i] = etcdepoch.NewElection(sessions[i], name)
	}
	require.NoError(t, cands[0].Campaign(ctx, "node-0"))
	won1 := campaignAsync(ctx, cands[1], "node-1")
	waitCandidates(t, admin, name, 2) // node-1's key is created before node-2's
	won2 := campaignAsync(ctx, cands[2], "node-2")
	waitCandidates(t, admin, name, 3)

	var all []uint64
	draw := func(e *etcdepoch.Election) {
		for range 5 {
			epoch, err := e.Epoch(ctx, "wal", "0")
			require.NoError(t, err)
			if len(all) > 0 {
				require.Greater(t, epoch, all[len(all)-1])
			}
			all = append(all, epoch)
		}
	}

	draw(cands[0])
	requireBlocked(t, won1, "node-1's campaign")
	require.NoError(t, cands[0].Resign(ctx))
	require.NoError(t, <-won1)
	_, err := cands[0].Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader)

	draw(cands[1])
	requireBlocked(t, won2, "node-2's campaign")
	_, err = admin.Revoke(ctx, sessions[1].Lease())
	require.NoError(t, err)
	require.NoError(t, <-won2)
	_, err = cands[1].Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader)

	draw(cands[2])
	require.Len(t, all, 15)
	require.NoError(t, cands[2].Resign(ctx))
}

func TestEpochRefusedWithoutLeadership(t *testing.T) {
	ctx := context.Background()
	s := newSession(t, newClient(t, etcdEndpoint), 60)
	a := etcdepoch.NewElection(s, uniqueName(t))
	epoch, err := a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader, "before any campaign")
	require.Zero(t, epoch)

	require.NoError(t, a.Campaign(ctx, "node-a"))
	_, err = a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	require.NoError(t, a.Resign(ctx))
	epoch, err = a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader, "after resigning")
	require.Zero(t, epoch)

	_, err = etcdepoch.NewElection(s, "").Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	require.ErrorIs(t, etcdepoch.NewElection(nil, "x").Campaign(ctx, "v"), writefence.ErrInvalidArgument)
}

// With its server gone, a leader gets an error and no epoch: when its ctx
// ends, and, without a deadline, when its session's lease runs out.
func TestEpochEtcdUnreachable(t *testing.T) {
	srv, err := testserver.StartEtcd()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	ctx := context.Background()

	session := func(ttl int) *concurrency.Session {
		s, err := concurrency.NewSession(newClient(t, srv.Endpoint), concurrency.WithTTL(ttl))
		require.NoError(t, err)
		t.Cleanup(s.Orphan) // with the server gone, a revoke would wait out the TTL
		return s
	}
	// A long lease: only ctx can end the wait.
	long := etcdepoch.NewElection(session(60), uniqueName(t))
	require.NoError(t, long.Campaign(ctx, "node-a"))
	// A short lease: the session ends soon after the server is gone.
	shortSession := session(2)
	short := etcdepoch.NewElection(shortSession, uniqueName(t))
	require.NoError(t, short.Campaign(ctx, "node-b"))
	for _, e := range []*etcdepoch.Election{long, short} {
		_, err := e.Epoch(ctx, "wal", "0")
		require.NoError(t, err)
	}

	srv.Stop()

	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	epoch, err := long.Epoch(tctx, "wal", "0")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, epoch)

	epoch, err = short.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader)
	require.Contains(t, err.Error(), "session ended")
	require.Zero(t, epoch)
	require.Error(t, shortSession.Ctx().Err())
}
