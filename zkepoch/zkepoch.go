// Package zkepoch is a writefence.EpochSource over ZooKeeper leader
// election (github.com/go-zookeeper/zk): candidates queue as ephemeral
// sequential znodes, the first leads, and it draws push epochs from
// ZooKeeper only while ZooKeeper itself confirms, in the transaction that
// mints each epoch, that its znode still exists.
//
// It lives in its own package so that programs importing writefence do not
// compile the ZooKeeper client unless they use it.
package zkepoch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/lead"
)

// ErrNotLeader reports that the caller does not lead the election: it never
// won a campaign, resigned, its session expired, or ZooKeeper shows its
// znode gone. It is final for that leadership: only a new Campaign leads
// again. Epoch returns no epoch with it. Test for it with errors.Is.
var ErrNotLeader = errors.New("writefence: zookeeper election: not leader")

// Election is one candidate in a ZooKeeper election and a
// writefence.EpochSource that hands out push epochs only while that
// candidate leads.
//
// # Candidates
//
// A candidate is an ephemeral sequential znode under the election's path,
// created by Campaign with the session of the Conn it was given:
// path + "/_c_" + a random GUID + "-n-" + the sequence number ZooKeeper
// appends (go-zookeeper's protected ephemeral sequential create, so a
// create whose reply was lost is found again, and so no candidate ever
// takes over another's name). The candidate with the lowest sequence
// number leads; every other one watches the candidate just below it, and
// looks again when that one goes. Sequence numbers under one path only
// rise, so a candidate that is first stays first while its znode exists.
// Its znode goes when its session expires or closes, when it resigns, or
// when someone deletes it.
//
// # Epochs
//
// An epoch is the zxid of a ZooKeeper transaction that runs only while the
// candidate leads: a multi that checks that the candidate's znode exists
// and sets the data of the election's znode (to the candidate's name). Its
// zxid is the modification zxid the multi returns. zxids rise with every
// write to the ensemble, across its own leader changes, and are never
// reused, so:
//
//   - every epoch an Election returns is greater than every epoch returned
//     before it by any Election on the same ensemble;
//   - a deposed leader mints nothing: once its znode is gone the check
//     fails and Epoch returns ErrNotLeader; a leader whose session expired
//     behind its back is refused by ZooKeeper, or, once its client knows,
//     by the client without a round trip;
//   - every epoch of a later leader is greater than every epoch of an
//     earlier one: a candidate leads only after it saw the earlier
//     leader's znode deleted, which ZooKeeper orders after that leader's
//     last successful multi.
//
// A new leader's first act is to seal each shard it will write
// (writefence.Fence.Seal) with one of its epochs, so a deposed leader still
// holding an epoch it drew in time is refused by the store at once.
//
// Why a write per epoch, and not the leader's znode creation zxid as a
// term under writefence.TermSource: a zxid is ZooKeeper's own election
// epoch << 32 | a counter, so the zxids of a replicated ensemble (whose
// election epoch is 1 from its first election) are above 2^32-1, the
// highest term a TermSource can carry; and epochs counted locally from a
// term are epochs that ZooKeeper did not confirm at the time of each,
// which is exactly what a leader whose session expired behind its back
// must not get.
//
// # Cost
//
// Each epoch costs one ZooKeeper round trip: one multi request, which the
// ensemble's leader commits with a quorum like any write. A refusal known
// locally (no campaign won, resigned, the session gone, deposed earlier)
// costs none, and so does a client that is not connected: it returns an
// error, not ErrNotLeader, because the session may survive a reconnection
// within its timeout. Epoch never hands out an epoch from memory.
//
// # Limits
//
// Epochs are zxids of one ensemble. Moving to another ensemble, or
// restoring one from a backup or from an empty data directory, can hand
// out epochs at or below ones already recorded: the fence still admits at
// most one push per epoch, but the new leader's Seal fails with
// writefence.ErrStaleEpoch and a deposed leader is not fenced until the
// zxids pass the recorded epochs; treat a refused seal as fatal. The
// election's path holds only its candidates' znodes; znodes of other names
// under it are ignored. ZooKeeper's sequence numbers are signed 32-bit: an
// election path that has seen 2^31 candidates must be replaced. The znodes
// are created with the open ACL (zk.WorldACL(zk.PermAll)).
//
// # Use
//
// NewElection with a connected *zk.Conn, Campaign until it returns nil,
// seal the shards, then pass the Election to writefence.Fence.PushFrom;
// Resign when done. plugin and shard are not used: one election gates every
// shard its leader writes. Epoch is safe for concurrent use; Campaign and
// Resign are serialized.
//
// go-zookeeper's calls take no context. A call whose ctx ends returns
// ctx.Err() at once and leaves the request to finish in the background:
// the client answers it, or fails it when the connection closes.
type Election struct {
	conn *zk.Conn
	path string

	// campaign serializes Campaign and Resign.
	campaign sync.Mutex

	// lead is this candidate's leadership: its znode after a won
	// campaign, and the session that owns the znode.
	lead lead.State
}

var _ writefence.EpochSource = (*Election)(nil)

// candidate znodes' names: protected prefix, GUID, "-", name, sequence.
const (
	candidateName = "n-"
	seqDigits     = 10
)

// NewElection returns a candidate in the election at path (an absolute
// znode path such as "/mirrors/wal-writer"), campaigning with conn's
// session. Campaign creates path and its parents when they are missing.
// A path that is empty or not absolute is refused by every method with an
// error matching writefence.ErrInvalidArgument.
func NewElection(conn *zk.Conn, path string) *Election {
	return &Election{conn: conn, path: path}
}

// Campaign blocks until this candidate leads the election, announcing val
// as its znode's data, or until ctx ends (the error is then ctx.Err(), and
// the candidate's znode is deleted) or ZooKeeper fails. A candidate that
// led before campaigns afresh with a new znode. Epochs are handed out only
// after Campaign returned nil.
func (e *Election) Campaign(ctx context.Context, val string) error {
	if err := e.check(); err != nil {
		return err
	}
	e.campaign.Lock()
	defer e.campaign.Unlock()
	if node, _, _ := e.lead.Get(); node != "" {
		e.withdraw(ctx, node)
	}
	e.lead.Set("", 0, nil)
	if err := e.ensurePath(ctx); err != nil {
		return err
	}
	node, err := e.create(ctx, val)
	if err != nil {
		return e.failed(ctx, "campaign: create", err)
	}
	// The session that owns the znode is ZooKeeper's word, not the
	// client's: a session replaced during the create owns nothing here.
	stat, err := call(ctx, func() (*zk.Stat, error) {
		ok, stat, err := e.conn.Exists(node)
		if err == nil && !ok {
			err = zk.ErrNoNode
		}
		return stat, err
	})
	if err != nil {
		e.withdraw(ctx, node)
		return e.failed(ctx, "campaign: read "+node, err)
	}
	for {
		below, err := e.below(ctx, node)
		if err != nil {
			e.withdraw(ctx, node)
			return err
		}
		if below == "" {
			e.lead.Set(node, stat.EphemeralOwner, nil)
			return nil
		}
		if err := e.waitGone(ctx, below); err != nil {
			e.withdraw(ctx, node)
			return err
		}
	}
}

// create creates the candidate's znode and returns its path. When ctx
// ends first, the create may still land: create then waits for its answer
// (at most withdrawTimeout) and deletes the znode, so that no candidate
// that nobody campaigns for holds up the election.
func (e *Election) create(ctx context.Context, val string) (string, error) {
	type created struct {
		node string
		err  error
	}
	done := make(chan created, 1)
	go func() {
		node, err := e.conn.CreateProtectedEphemeralSequential(e.path+"/"+candidateName, []byte(val), zk.WorldACL(zk.PermAll))
		done <- created{node, err}
	}()
	select {
	case c := <-done:
		return c.node, c.err
	case <-ctx.Done():
	}
	withdrawn := make(chan struct{})
	go func() {
		defer close(withdrawn)
		if c := <-done; c.err == nil {
			e.withdraw(ctx, c.node)
		}
	}()
	timer := time.NewTimer(withdrawTimeout)
	defer timer.Stop()
	select {
	case <-withdrawn:
	case <-timer.C: // the withdrawal goes on in the background
	}
	return "", ctx.Err()
}

// ensurePath creates the election's znode and its parents, as persistent
// znodes, where they are missing.
func (e *Election) ensurePath(ctx context.Context) error {
	parts := strings.Split(e.path[1:], "/")
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		_, err := call(ctx, func() (string, error) { return e.conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return e.failed(ctx, "campaign: create "+p, err)
		}
	}
	return nil
}

// below returns the candidate just below node, "" when node is first. A
// candidate whose sequence number cannot be read stops the campaign: the
// order of the candidates would not be known.
func (e *Election) below(ctx context.Context, node string) (string, error) {
	children, err := call(ctx, func() ([]string, error) {
		children, _, err := e.conn.Children(e.path)
		return children, err
	})
	if err != nil {
		return "", e.failed(ctx, "campaign: list candidates", err)
	}
	own := node[len(e.path)+1:]
	mine, ok := sequence(own)
	if !ok {
		return "", fmt.Errorf("writefence: zookeeper election %s: campaign: %s has no sequence number", escape.String(e.path), escape.String(own))
	}
	found, best, bestSeq := false, "", int64(-1)
	for _, c := range children {
		if !strings.HasPrefix(c, "_c_") {
			continue // not a candidate of this package
		}
		seq, ok := sequence(c)
		switch {
		case !ok:
			return "", fmt.Errorf("writefence: zookeeper election %s: campaign: candidate %s has no sequence number (wrapped past 2^31-1?)",
				escape.String(e.path), escape.String(c))
		case c == own:
			found = true
		case seq < mine && seq > bestSeq:
			best, bestSeq = c, seq
		}
	}
	if !found {
		return "", fmt.Errorf("writefence: zookeeper election %s: campaign: the candidate's znode %s is gone (its session ended?)",
			escape.String(e.path), escape.String(node))
	}
	if best == "" {
		return "", nil
	}
	return e.path + "/" + best, nil
}

// sequence returns the sequence number ZooKeeper appended to a candidate's
// name: exactly ten digits after the name.
func sequence(name string) (int64, bool) {
	i := len(name) - seqDigits
	if i < len(candidateName) || name[i-len(candidateName):i] != candidateName {
		return 0, false
	}
	digits := name[i:]
	if strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}

// waitGone waits until the znode at path is deleted, or anything else
// happens to it or to the watch, when the caller looks again.
func (e *Election) waitGone(ctx context.Context, path string) error {
	type watch struct {
		exists bool
		ch     <-chan zk.Event
	}
	w, err := call(ctx, func() (watch, error) {
		ok, _, ch, err := e.conn.ExistsW(path)
		return watch{ok, ch}, err
	})
	if err != nil {
		return e.failed(ctx, "campaign: watch "+path, err)
	}
	if !w.exists {
		return nil
	}
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// withdraw deletes a candidate's znode, best effort, even when ctx has
// ended: a campaign that gives up leaves no candidate behind.
func (e *Election) withdraw(ctx context.Context, node string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	_, _ = call(dctx, func() (struct{}, error) { return struct{}{}, e.conn.Delete(node, -1) })
}

// withdrawTimeout bounds the delete of a candidate's znode.
const withdrawTimeout = 10 * time.Second

// Resign gives up leadership: Epoch refuses from the moment Resign is
// called, and the candidate's znode is deleted so the next candidate can
// lead. A candidate that does not lead returns nil.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.check(); err != nil {
		return err
	}
	e.campaign.Lock()
	defer e.campaign.Unlock()
	node, _, _ := e.lead.Get()
	e.lead.Set("", 0, e.notLeader("resigned"))
	if node == "" {
		return nil
	}
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, e.conn.Delete(node, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return e.failed(ctx, "resign", err)
	}
	return nil
}

// Epoch implements writefence.EpochSource: it mints a new epoch in one
// guarded ZooKeeper multi (see Election) and returns it. A candidate that
// does not lead returns an error matching ErrNotLeader and no epoch; so
// does one whose session expired, whether its client or ZooKeeper finds
// out. A client that is not connected, a ZooKeeper error or an ended ctx
// returns that error (ctx.Err() as it is) and no epoch.
func (e *Election) Epoch(ctx context.Context, plugin, shard string) (uint64, error) {
	if err := e.check(); err != nil {
		return 0, err
	}
	node, session, err := e.lead.Held(ctx, e.notLeader)
	if err != nil {
		return 0, err
	}
	if id := e.conn.SessionID(); id != session {
		return 0, e.lead.Drop(node, session, e.notLeader(fmt.Sprintf("session %#x expired (the client now has %#x)", session, id)))
	}
	if state := e.conn.State(); state != zk.StateHasSession {
		return 0, fmt.Errorf("writefence: zookeeper election %s: epoch: not connected (%v)", escape.String(e.path), state)
	}
	resp, err := call(ctx, func() ([]zk.MultiResponse, error) {
		return e.conn.Multi(
			&zk.CheckVersionRequest{Path: node, Version: -1},
			&zk.SetDataRequest{Path: e.path, Data: []byte(node[len(e.path)+1:]), Version: -1},
		)
	})
	switch {
	case err == nil:
	case isContextErr(err) && ctx.Err() != nil:
		return 0, ctx.Err()
	case errors.Is(err, zk.ErrNoNode):
		// Permanent: the znode's name carries a GUID of this candidate's,
		// so nothing recreates it.
		return 0, e.lead.Drop(node, session, e.notLeader("deposed: its znode "+escape.String(node)+" is gone"))
	case errors.Is(err, zk.ErrSessionExpired):
		return 0, e.lead.Drop(node, session, e.notLeader(fmt.Sprintf("session %#x expired", session)))
	default:
		return 0, fmt.Errorf("writefence: zookeeper election %s: epoch: %w", escape.String(e.path), err)
	}
	if len(resp) != 2 || resp[1].Stat == nil || resp[1].Stat.Mzxid < 1 {
		return 0, fmt.Errorf("writefence: zookeeper election %s: epoch: the multi did not return the written znode's zxid", escape.String(e.path))
	}
	return uint64(resp[1].Stat.Mzxid), nil
}

func (e *Election) check() error {
	switch {
	case e.path == "" || e.path[0] != '/' || e.path == "/" || strings.HasSuffix(e.path, "/"):
		return &writefence.InvalidArgumentError{Arg: "path", Reason: fmt.Sprintf("%s is not an absolute znode path", escape.String(e.path))}
	case e.conn == nil:
		return &writefence.InvalidArgumentError{Arg: "conn", Reason: "nil"}
	}
	return nil
}

func (e *Election) notLeader(reason string) error {
	return fmt.Errorf("writefence: zookeeper election %s: %s: %w", escape.String(e.path), reason, ErrNotLeader)
}

// failed is the error of a ZooKeeper call of op that returned err:
// ctx.Err() when ctx ended, else err wrapped.
func (e *Election) failed(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && isContextErr(err) {
		return cerr
	}
	if errors.Is(err, ErrNotLeader) {
		return err
	}
	return fmt.Errorf("writefence: zookeeper election %s: %s: %w", escape.String(e.path), op, err)
}

// call runs fn, a go-zookeeper call, and returns its result, or ctx.Err()
// as soon as ctx ends; fn then finishes in the background.
func call[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
