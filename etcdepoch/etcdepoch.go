// Package etcdepoch is a writefence.EpochSource over etcd leader election
// (go.etcd.io/etcd/client/v3/concurrency): the candidate that wins the
// election draws push epochs from etcd, and only while etcd itself confirms,
// in the transaction that mints each epoch, that it still leads.
//
// It lives in its own package so that programs importing writefence do not
// compile the etcd client unless they use it.
package etcdepoch

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/lead"
)

// ErrNotLeader reports that the caller does not lead the election: it never
// won a campaign, resigned, its session ended, or etcd shows its leader key
// gone (its lease expired or was revoked, or the key was deleted). Epoch
// returns no epoch with it. Test for it with errors.Is.
var ErrNotLeader = errors.New("writefence: etcd election: not leader")

// Election is one candidate in an etcd election and a writefence.EpochSource
// that hands out push epochs only while that candidate leads.
//
// # Epochs
//
// An epoch is the etcd revision of a write made by a transaction that etcd
// runs only if the candidate still leads. The transaction's If compares, as
// concurrency.Mutex.IsOwner does, that the candidate's leader key still
// exists at the create revision it was won with, and that no key of the
// election has a lower create revision (the candidate is the election's
// first); its Then writes the key that is the election's name itself,
// which no candidate's key (name + "/" + lease) can equal. etcd revisions
// rise with every write to the cluster and are never reused, so:
//
//   - every epoch an Election returns is greater than every epoch returned
//     before it by any Election on the same cluster;
//   - a deposed leader mints nothing: once its key is gone the If fails and
//     Epoch returns ErrNotLeader, and the key never comes back at the same
//     create revision;
//   - every epoch of a later leader is greater than every epoch of an
//     earlier one: a candidate is first only once the earlier leader's key
//     is deleted, and etcd orders that deletion after the earlier leader's
//     last mint.
//
// A new leader's first act is to seal each shard it will write
// (writefence.Fence.Seal) with one of its epochs, so a deposed leader still
// holding an epoch it drew in time is refused by the store at once.
//
// # Cost
//
// Each epoch costs one etcd round trip: one Txn request carrying the
// guard, the write and a read of the written revision, decided atomically
// by the etcd leader. It is a write, so it also costs one Raft commit
// inside the cluster, and the guard reads every candidate's key. A cheaper
// scheme (confirm leadership once, then count locally) would hand out
// epochs that etcd did not confirm at the time of each one; the check and
// the mint must be one transaction. A refusal known locally (no campaign
// won, resigned, session ended, deposed earlier) costs no round trip.
//
// Epoch never hands out an epoch from memory: an unreachable etcd returns
// an error and no epoch, when ctx ends or when the session ends, whichever
// comes first.
//
// # Limits
//
// Epochs are revisions of one etcd cluster. Moving to another cluster, or
// restoring one from a backup without raising its revision (etcdutl
// snapshot restore --bump-revision), can hand out epochs at or below ones
// already recorded. The fence still admits at most one push per epoch, but
// the new leader's Seal fails with writefence.ErrStaleEpoch and a deposed
// leader is not fenced until the revision passes the recorded epochs:
// treat a refused seal as fatal. Election names must not nest (not "a" and
// "a/b" on one cluster): as with concurrency.Election, the longer name's
// keys would count as candidates of the shorter.
//
// # Use
//
// NewElection, Campaign until it returns nil, seal the shards, then pass
// the Election to writefence.Fence.PushFrom; Resign when done. plugin and
// shard are not used: one election gates every shard its leader writes.
// Epoch is safe for concurrent use; Campaign and Resign are serialized.
type Election struct {
	name     string
	session  *concurrency.Session
	election *concurrency.Election

	// campaign serializes Campaign and Resign: a concurrency.Election is
	// not safe for concurrent use.
	campaign sync.Mutex

	// lead is this candidate's leadership: its leader key after a won
	// campaign, and the key's create revision.
	lead lead.State
}

var _ writefence.EpochSource = (*Election)(nil)

// NewElection returns a candidate in the election name, campaigning with
// session's lease. The candidates' keys are name + "/" + the lease in hex,
// as concurrency.NewElection makes them; Epoch writes the key name itself.
// An empty name is refused by every method with an error matching
// writefence.ErrInvalidArgument.
func NewElection(session *concurrency.Session, name string) *Election {
	return &Election{name: name, session: session, election: concurrency.NewElection(session, name)}
}

// Campaign blocks until this candidate leads the election, announcing val
// as its value, or until ctx ends (the error is then ctx.Err()) or etcd
// fails. A candidate already leading campaigns again with the same key.
// Epochs are handed out only after Campaign returned nil.
func (e *Election) Campaign(ctx context.Context, val string) error {
	if err := e.check(); err != nil {
		return err
	}
	e.campaign.Lock()
	defer e.campaign.Unlock()
	e.lead.Set("", 0, nil)
	if err := e.election.Campaign(ctx, val); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("writefence: etcd election %s: campaign: %w", escape.String(e.name), err)
	}
	e.lead.Set(e.election.Key(), e.election.Rev(), nil)
	return nil
}

// Resign gives up leadership: Epoch refuses from the moment Resign is
// called, and the leader key is deleted so the next candidate can win.
// A candidate that does not lead returns nil.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.check(); err != nil {
		return err
	}
	e.campaign.Lock()
	defer e.campaign.Unlock()
	e.lead.Set("", 0, e.notLeader("resigned"))
	if err := e.election.Resign(ctx); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("writefence: etcd election %s: resign: %w", escape.String(e.name), err)
	}
	return nil
}

// Epoch implements writefence.EpochSource: it mints a new epoch in one
// guarded etcd transaction (see Election) and returns it. A candidate that
// does not lead returns an error matching ErrNotLeader and no epoch; an
// etcd error or an ended ctx returns that error (ctx.Err() as it is) and no
// epoch. A session that has ended refuses with ErrNotLeader, even before
// etcd deletes the key, because nothing keeps the lease alive any more.
func (e *Election) Epoch(ctx context.Context, plugin, shard string) (uint64, error) {
	if err := e.check(); err != nil {
		return 0, err
	}
	key, rev, err := e.lead.Held(ctx, e.notLeader)
	if err != nil {
		return 0, err
	}
	if e.session.Ctx().Err() != nil {
		return 0, e.lead.Drop(key, rev, e.notLeader("session ended"))
	}
	// A request in flight when the session ends is abandoned: the lease
	// may be gone by the time etcd would answer.
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.session.Ctx(), cancel)()

	resp, err := e.session.Client().Txn(tctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", rev),
		clientv3.Compare(clientv3.CreateRevision(e.name+"/"), ">", rev-1).WithPrefix(),
	).Then(
		clientv3.OpPut(e.name, key),
		clientv3.OpGet(e.name),
	).Else(
		clientv3.OpGet(e.name+"/", clientv3.WithFirstCreate()...),
	).Commit()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return 0, cerr
		}
		if e.session.Ctx().Err() != nil {
			return 0, e.lead.Drop(key, rev, e.notLeader("session ended"))
		}
		return 0, fmt.Errorf("writefence: etcd election %s: epoch: %w", escape.String(e.name), err)
	}
	if !resp.Succeeded {
		// Permanent: a create revision is never reused, and no key can
		// be created below one that exists.
		reason := fmt.Sprintf("deposed: key %s created at revision %d no longer leads", escape.String(key), rev)
		if first := resp.Responses[0].GetResponseRange().GetKvs(); len(first) > 0 {
			reason += fmt.Sprintf("; %s created at revision %d does", escape.String(string(first[0].Key)), first[0].CreateRevision)
		}
		return 0, e.lead.Drop(key, rev, e.notLeader(reason))
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	if len(kvs) != 1 || kvs[0].ModRevision < 1 {
		return 0, fmt.Errorf("writefence: etcd election %s: epoch: the transaction did not return the written key", escape.String(e.name))
	}
	return uint64(kvs[0].ModRevision), nil
}

func (e *Election) check() error {
	switch {
	case e.name == "":
		return &writefence.InvalidArgumentError{Arg: "name", Reason: "empty"}
	case e.session == nil:
		return &writefence.InvalidArgumentError{Arg: "session", Reason: "nil"}
	}
	return nil
}

func (e *Election) notLeader(reason string) error {
	return fmt.Errorf("writefence: etcd election %s: %s: %w", escape.String(e.name), reason, ErrNotLeader)
}
