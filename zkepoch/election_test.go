package zkepoch_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/pending"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/internal/testserver/kit"
	"github.com/writefence/writefence/writefencetest"
	"github.com/writefence/writefence/zkepoch"
)

// TestEpochSourceKit runs the epoch-source kit: each leader campaigns
// with a client and a session of its own, as a separate process would; a
// leader is deposed by its session expiring behind its back (the server
// hands the session to another connection, which closes it, while the
// leader's client is kept from reconnecting), and Depose returns once its
// client is back and has learned that the session is gone. It resigns
// with Resign.
func TestEpochSourceKit(t *testing.T) {
	writefencetest.TestEpochSource(t, func(t *testing.T) writefencetest.Election {
		path := uniquePath(t)
		var c *client
		return kit.Election(func(t *testing.T) *zkepoch.Election {
			c = newClient(t, zkEndpoint)
			leader := zkepoch.NewElection(c.Conn, path)
			require.NoError(t, leader.Campaign(contextWithTimeout(t, time.Minute), "node"))
			return leader
		}, func(t *testing.T) {
			id, passwd := c.dialer.session()
			c.dialer.freeze(true)
			expireSession(t, zkEndpoint, id, passwd)
			c.dialer.freeze(false)
			c.waitState(t, zk.StateExpired)
			c.waitState(t, zk.StateHasSession)
		}, zkepoch.ErrNotLeader)
	}, nil)
}

// A leader whose session is expired behind its back while its client is
// cut off draws no epoch while cut off, though it cannot yet tell why
// (the session may survive a reconnection); once its client is back with
// a new session it knows it is deposed. The other candidate leads as soon
// as the old leader's znode is gone.
func TestLeaderCutOffWhileExpired(t *testing.T) {
	ctx := contextWithTimeout(t, 2*time.Minute)
	path := uniquePath(t)
	admin := newClient(t, zkEndpoint)
	ca, cb := newClient(t, zkEndpoint), newClient(t, zkEndpoint)
	a, b := zkepoch.NewElection(ca.Conn, path), zkepoch.NewElection(cb.Conn, path)

	require.NoError(t, a.Campaign(ctx, "node-a"))
	bWon := pending.Start(func() error { return b.Campaign(ctx, "node-b") })
	waitCandidates(t, admin, path, 2)
	_, err := a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	bWon.RequireBlocked(t, "node-b's campaign")

	id, passwd := ca.dialer.session()
	require.Equal(t, ca.SessionID(), id, "the dialer read node-a's session off its connection")
	ca.dialer.freeze(true)
	expireSession(t, zkEndpoint, id, passwd)
	require.NoError(t, bWon.Wait(), "node-b leads once node-a's znode is gone")

	epoch, err := a.Epoch(ctx, "wal", "0")
	require.Error(t, err, "cut off, node-a gets no epoch")
	require.NotErrorIs(t, err, zkepoch.ErrNotLeader, "cut off, node-a cannot tell its session is gone")
	require.Zero(t, epoch)
	t.Logf("deposed leader node-a, cut off: %v", err)

	ca.dialer.freeze(false)
	ca.waitState(t, zk.StateExpired)
	ca.waitState(t, zk.StateHasSession)
	epoch, err = a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, zkepoch.ErrNotLeader, "back with a new session, node-a knows it is deposed")
	require.Contains(t, err.Error(), "expired")
	require.Zero(t, epoch)
	_, err = b.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
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

func TestEpochRefusedWithoutLeadership(t *testing.T) {
	ctx := contextWithTimeout(t, time.Minute)
	c := newClient(t, zkEndpoint)
	a := zkepoch.NewElection(c.Conn, uniquePath(t))
	epoch, err := a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, zkepoch.ErrNotLeader, "before any campaign")
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
	bWon := pending.Start(func() error { return b.Campaign(bctx, "node-b") })
	cands := waitCandidates(t, admin, path, 2)
	bWon.RequireBlocked(t, "node-b's campaign")
	bcancel()
	require.ErrorIs(t, bWon.Wait(), context.Canceled)
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
	srv, err := testserver.StartZooKeeper()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	ctx := contextWithTimeout(t, time.Minute)
	c := newClient(t, srv.Endpoint)
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

	srv.Stop()

	for i := range 3 {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		epoch, err := a.Epoch(tctx, "wal", "0")
		cancel()
		require.Error(t, err, "draw %d", i)
		require.Zero(t, epoch)
		t.Logf("draw %d with ZooKeeper gone: %v", i, err)
	}
}
