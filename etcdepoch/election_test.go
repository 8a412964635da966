package etcdepoch_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/etcdepoch"
	"github.com/writefence/writefence/internal/pending"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/internal/testserver/kit"
	"github.com/writefence/writefence/writefencetest"
)

// TestEpochSourceKit runs the epoch-source kit: each leader campaigns
// with a session and a client of its own, as a separate process would; a
// leader is deposed by a third client revoking its session's lease, as
// an expiry would, and resigns with Resign.
func TestEpochSourceKit(t *testing.T) {
	writefencetest.TestEpochSource(t, func(t *testing.T) writefencetest.Election {
		name := uniqueName(t)
		admin := newClient(t, etcdEndpoint)
		var session *concurrency.Session
		return kit.Election(func(t *testing.T) *etcdepoch.Election {
			leader, s := newCandidate(t, name)
			session = s
			require.NoError(t, leader.Campaign(t.Context(), "node"))
			return leader
		}, func(t *testing.T) {
			_, err := admin.Revoke(t.Context(), session.Lease())
			require.NoError(t, err)
		}, etcdepoch.ErrNotLeader)
	}, nil)
}

// contest is an election with two candidates: a leads, and b's campaign
// waits behind it.
type contest struct {
	name     string
	admin    *clientv3.Client // a client of neither candidate
	a, b     *etcdepoch.Election
	aSession *concurrency.Session
	bWon     *pending.Call // b's campaign
	cands    []candidate   // the candidates' keys in create order
}

// newContest starts a contest in an election of its own: a campaigns as
// node-a and wins, then b campaigns as node-b under bctx. It returns once
// etcd holds both candidates' keys.
func newContest(t *testing.T, bctx context.Context) contest {
	t.Helper()
	c := contest{name: uniqueName(t), admin: newClient(t, etcdEndpoint)}
	c.a, c.aSession = newCandidate(t, c.name)
	c.b, _ = newCandidate(t, c.name)
	require.NoError(t, c.a.Campaign(context.Background(), "node-a"))
	c.bWon = pending.Start(func() error { return c.b.Campaign(bctx, "node-b") })
	c.cands = waitCandidates(t, c.admin, c.name, 2)
	return c
}

// A second candidate's campaign waits while the first leads, and wins
// once the first's key is gone; the candidates' keys are in create order.
func TestCampaignWaitsForTheLeader(t *testing.T) {
	ctx := context.Background()
	c := newContest(t, ctx)
	akey, _ := c.a.Leading()
	require.Equal(t, akey, c.cands[0].key, "node-a is the first candidate")
	_, err := c.a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	c.bWon.RequireBlocked(t, "node-b's campaign")

	_, err = c.admin.Revoke(ctx, c.aSession.Lease())
	require.NoError(t, err)
	require.NoError(t, c.bWon.Wait(), "node-b wins once node-a's key is gone")
	bkey, _ := c.b.Leading()
	require.Equal(t, c.cands[1].key, bkey)
	require.NoError(t, c.b.Resign(ctx))
}

// A leader whose key is deleted while its session is alive still believes
// it leads; etcd's guard refuses the mint, and nothing is written.
func TestDeposedLeaderGuardRefusesInEtcd(t *testing.T) {
	ctx := context.Background()
	name := uniqueName(t)
	admin := newClient(t, etcdEndpoint)
	a, sa := newCandidate(t, name)
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
	bctx, bcancel := context.WithCancel(ctx)
	c := newContest(t, bctx)
	before := mintRevision(t, c.admin, c.name)

	c.b.SetLeading(c.cands[1].key, c.cands[1].rev)
	epoch, err := c.b.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader)
	require.Zero(t, epoch)
	require.Contains(t, err.Error(), c.cands[0].key, "names the candidate that leads")
	require.Equal(t, before, mintRevision(t, c.admin, c.name))

	c.bWon.RequireBlocked(t, "node-b's campaign")
	bcancel()
	require.ErrorIs(t, c.bWon.Wait(), context.Canceled)
	_, err = c.a.Epoch(ctx, "wal", "0")
	require.NoError(t, err, "the leader is unaffected")
}

func TestEpochRefusedWithoutLeadership(t *testing.T) {
	ctx := context.Background()
	a, s := newCandidate(t, uniqueName(t))
	epoch, err := a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, etcdepoch.ErrNotLeader, "before any campaign")
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
