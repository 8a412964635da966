package zkepoch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/zkepoch"
)

// campaignAsync starts a campaign in the background; the returned channel
// yields its result.
func campaignAsync(ctx context.Context, e *zkepoch.Election, val string) <-chan error {
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
// then its session is expired behind its back: the server hands the
// session to another connection, which closes it, while the leader's
// client is kept from reconnecting. The other candidate leads and seals.
// The deposed leader's push at the epoch it drew in time is refused by the
// store; it draws no epoch while cut off, nor once its client is back and
// learns the session is gone.
func TestDeposedLeaderIsFenced(t *testing.T) {
	ctx := contextWithTimeout(t, 2*time.Minute)
	path := uniquePath(t)
	admin := newClient(t, zkEndpoint)
	ca, cb := newClient(t, zkEndpoint), newClient(t, zkEndpoint)
	a, b := zkepoch.NewElection(ca.Conn, path), zkepoch.NewElection(cb.Conn, path)
	fence := &writefence.Fence{Store: &writefence.MemStore{}}

	require.NoError(t, a.Campaign(ctx, "node-a"))
	bWon := campaignAsync(ctx, b, "node-b")
	waitCandidates(t, admin, path, 2)

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

	id, passwd := ca.dialer.session()
	require.Equal(t, ca.SessionID(), id, "the dialer read node-a's session off its connection")
	ca.dialer.freeze(true)
	expireSession(t, zkEndpoint, id, passwd)
	require.NoError(t, <-bWon, "node-b leads once node-a's znode is gone")

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
	t.Logf("deposed leader node-a: push at epoch %#x refused: %v", late, err)

	epoch, err := a.Epoch(ctx, "wal", "0")
	require.Error(t, err, "cut off, node-a gets no epoch")
	require.Zero(t, epoch)
	t.Logf("deposed leader node-a, cut off: %v", err)

	ca.dialer.freeze(false)
	ca.waitState(t, zk.StateExpired)
	ca.waitState(t, zk.StateHasSession)
	epoch, err = a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, zkepoch.ErrNotLeader, "back with a new session, node-a knows it is deposed")
	require.Contains(t, err.Error(), "expired")
	require.Zero(t, epoch)
	used, err := fence.PushFrom(ctx, a, "wal", "0", "node-a", []byte("segment 2 from the deposed leader"))
	require.ErrorIs(t, err, zkepoch.ErrNotLeader)
	require.Zero(t, used)
	t.Logf("deposed leader node-a, reconnected: %v", err)

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

// A leader whose znode is deleted while its session is alive still
// believes it leads; ZooKeeper's check refuses the mint, and nothing is
// written.
func TestDeposedLeaderGuardRefusesInZooKeeper(t *testing.T) {
	ctx := contextWithTimeout(t, time.Minute)
	path := uniquePath(t)
	admin := newClient(t, zkEndpoint)
	ca := newClient(t, zkEndpoint)
	a := zkepoch.NewElection(ca.Conn, path)
	require.NoError(t, a.Campaign(ctx, "node-a"))
	_, err := a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)

	node := waitCandidates(t, admin, path, 1)[0]
	require.NoError(t, admin.Delete(node, -1))
	before := mintZxid(t, admin, path)

	epoch, err := a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, zkepoch.ErrNotLeader)
	require.Zero(t, epoch)
	require.Contains(t, err.Error(), "deposed")
	require.Equal(t, zk.StateHasSession, ca.State(), "the session is alive: ZooKeeper refused, not the client")
	require.Equal(t, before, mintZxid(t, admin, path), "a refused draw writes nothing")
	t.Logf("deposed leader (znode %s deleted): %v", node, err)

	// The refusal is remembered.
	_, err = a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, zkepoch.ErrNotLeader)
}

func TestEpochsStrictlyIncrease(t *testing.T) {
	ctx := contextWithTimeout(t, time.Minute)
	a := zkepoch.NewElection(newClient(t, zkEndpoint).Conn, uniquePath(t))
	require.NoError(t, a.Campaign(ctx, "node-a"))
	var last uint64
	for i := range 200 {
		epoch, err := a.Epoch(ctx, "wal", "0")
		require.NoError(t, err)
		require.Greater(t, epoch, last, "draw %d", i)
		last = epoch
	}
}

// Concurrent draws are distinct, and each drawer sees them rise.
func TestEpochsConcurrentDrawsAreDistinct(t *testing.T) {
	ctx := contextWithTimeout(t, time.Minute)
	a := zkepoch.NewElection(newClient(t, zkEndpoint).Conn, uniquePath(t))
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

// Three leaders in turn, the first resigning, the second deposed by its
// session closing: every epoch is greater than every epoch drawn before
// it, and a leader that has gone draws nothing.
func TestEpochsIncreaseAcrossThreeLeaders(t *testing.T) {
	ctx := contextWithTimeout(t, time.Minute)
	path := uniquePath(t)
	admin := newClient(t, zkEndpoint)
	var clients [3]*client
	var cands [3]*zkepoch.Election
	for i := range cands {
		clients[i] = newClient(t, zkEndpoint)
		cands[i] = zkepoch.NewElection(clients[i].Conn, path)
	}
	require.NoError(t, cands[0].Campaign(ctx, "node-0"))
	won1 := campaignAsync(ctx, cands[1], "node-1")
	waitCandidates(t, admin, path, 2) // node-1's znode is created before node-2's
	won2 := campaignAsync(ctx, cands[2], "node-2")
	waitCandidates(t, admin, path, 3)

	var all []uint64
	draw := func(e *zkepoch.Election) {
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
	require.ErrorIs(t, err, zkepoch.ErrNotLeader)

	draw(cands[1])
	requireBlocked(t, won2, "node-2's campaign")
	id, passwd := clients[1].dialer.session()
	clients[1].dialer.freeze(true)
	expireSession(t, zkEndpoint, id, passwd)
	require.NoError(t, <-won2)
	_, err = cands[1].Epoch(ctx, "wal", "0")
	require.Error(t, err)

	draw(cands[2])
	require.Len(t, all, 15)
	require.NoError(t, cands[2].Resign(ctx))
}

func TestEpochRefusedWithoutLeadership(t *testing.T) {
	ctx := contextWithTimeout(t, time.Minute)
	c := newClient(t, zkEndpoint)
	a := zkepoch.NewElection(c.Conn, uniquePath(t))
	epoch, err := a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, zkepoch.ErrNotLeader, "before any campaign")
	require.Zero(t, epoch)

	require.NoError(t, a.Campaign(ctx, "node-a"))
	_, err = a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	require.NoError(t, a.Resign(ctx))
	epoch, err = a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, zkepoch.ErrNotLeader, "after resigning")
	require.Zero(t, epoch)

	for _, path := range []string{"", "relative", "/", "/trailing/"} {
		_, err = zkepoch.NewElection(c.Conn, path).Epoch(ctx, "wal", "0")
		require.ErrorIs(t, err, writefence.ErrInvalidArgument, "path %q", path)
	}
	require.ErrorIs(t, zkepoch.NewElection(nil, "/x").Campaign(ctx, "v"), writefence.ErrInvalidArgument)
}

// A campaign whose ctx ends returns ctx.Err() and leaves no candidate
// behind.
func TestCampaignCancelled(t *testing.T) {
	ctx := contextWithTimeout(t, time.Minute)
	path := uniquePath(t)
	admin := newClient(t, zkEndpoint)
	a := zkepoch.NewElection(newClient(t, zkEndpoint).Conn, path)
	b := zkepoch.NewElection(newClient(t, zkEndpoint).Conn, path)
	require.NoError(t, a.Campaign(ctx, "node-a"))
	bctx, bcancel := context.WithCancel(ctx)
	bWon := campaignAsync(bctx, b, "node-b")
	cands := waitCandidates(t, admin, path, 2)
	requireBlocked(t, bWon, "node-b's campaign")
	bcancel()
	require.ErrorIs(t, <-bWon, context.Canceled)
	ok, _, err := admin.Exists(cands[1])
	require.NoError(t, err)
	require.False(t, ok, "the cancelled candidate's znode is deleted")
	_, err = b.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, zkepoch.ErrNotLeader)
	_, err = a.Epoch(ctx, "wal", "0")
	require.NoError(t, err, "the leader is unaffected")
}

// With its server gone, a leader gets an error and no epoch, however often
// it asks, and a ctx that ends is honoured.
func TestEpochZooKeeperKilled(t *testing.T) {
	srv, err := startZooKeeper()
	require.NoError(t, err)
	t.Cleanup(srv.stop)
	ctx := contextWithTimeout(t, time.Minute)
	c := newClient(t, srv.endpoint)
	a := zkepoch.NewElection(c.Conn, uniquePath(t))
	require.NoError(t, a.Campaign(ctx, "node-a"))
	_, err = a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)

	// Unanswered, with the connection open (what the client sends is
	// lost): the mint waits for ZooKeeper, and the caller's deadline ends
	// the wait.
	c.dialer.blackhole(true)
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	epoch, err := a.Epoch(tctx, "wal", "0")
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, epoch)
	c.dialer.blackhole(false)

	srv.stop()

	for i := range 3 {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		epoch, err := a.Epoch(tctx, "wal", "0")
		cancel()
		require.Error(t, err, "draw %d", i)
		require.Zero(t, epoch)
		t.Logf("draw %d with ZooKeeper gone: %v", i, err)
	}
}
