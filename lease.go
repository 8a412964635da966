package writefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/writefence/writefence/internal/keys"
)

// Lease is a named, expiring, exclusive lease kept in one record of any
// ConditionalStore (S3, GCS, Valkey, a directory, memory), and an
// EpochSource that hands out push epochs only while the lease is held.
//
// # Terms and epochs
//
// The record holds the holder's name, a term and an expiry. The term rises
// by one on every acquisition: a takeover of an expired or released lease,
// the first acquisition (term 1), and a holder re-acquiring with a new Lease
// value (a restarted process), so its previous incarnation is fenced too.
// Renew keeps the term. Every change to the record is one PutIfVersion
// conditioned on the version read, so of several contenders exactly one
// gets each term, and a term is only ever written by the Lease that took it.
//
// A Fence admits one push per epoch per shard, so a term cannot serve as
// the push epoch itself. Epoch returns term<<32 | n, with n rising on every
// call from 1: every epoch a holder draws is greater than the last, and
// every epoch of a later term is greater than every epoch of an earlier one.
// A new holder's first act is to seal each shard it will write with one of
// its epochs (Fence.Seal), so a deposed holder still pushing is refused at
// once, not only after the new holder's first push. When a term's 2^32-1
// epochs run out, Epoch moves the lease to the next term with a conditional
// write, as a takeover by itself. Terms run out at 2^32-1.
//
// # Clocks
//
// Expiry is decided by local clocks: the record carries the expiry in
// wall-clock time by the writing holder's clock, and a contender takes over
// once its own clock passes it. Safety never depends on the clocks: a
// contender whose clock runs ahead takes over early, and from then on the
// old holder's pushes carry a lower term and are refused by the storage
// (ErrStaleEpoch), at the latest after the new holder seals. A clock only
// decides when a takeover may happen, never whether two pushes can both
// land. The holder itself stops handing out epochs (ErrLeaseExpired) once
// its clock passes its expiry, measured from the moment before it sent the
// write, so it stops before any contender whose clock agrees can take over.
//
// # Use
//
// Set the fields, then Acquire; Renew well before TTL elapses; pass the
// Lease to Fence.PushFrom as the EpochSource; Release when done. Holder
// must be unique among the contenders. A Lease is safe for concurrent use;
// its methods are serialized, so an Epoch waits for a Renew in flight. Set
// the fields before the first call and do not copy a Lease after it.
type Lease struct {
	// Store holds the lease record. Required.
	Store ConditionalStore

	// Prefix is the key prefix, as Fence.Prefix; empty means "writefence/".
	// The record's key is Prefix + "_lease/" + Name, escaped.
	Prefix string

	// Name names the lease, 1 to 256 bytes of any value.
	Name string

	// Holder names this contender in the record, 1 to 1024 bytes.
	Holder string

	// TTL is how long an acquisition or a renewal lasts. Required, positive.
	TTL time.Duration

	// Clock returns the current time; nil means time.Now.
	Clock func() time.Time

	mu      sync.Mutex // guards the fields below; held across the Lease's I/O
	held    bool
	term    uint64
	version string    // the store's version of the record this Lease wrote
	expiry  time.Time // by Clock: when this Lease stops handing out epochs
	seq     uint64    // the low half of the last epoch handed out
}

var _ EpochSource = (*Lease)(nil)

// Limits of the lease's epochs: Epoch returns term<<leaseSeqBits | n.
const (
	leaseSeqBits = 32
	// maxLeaseTerm is the highest term a lease can reach.
	maxLeaseTerm = 1<<(64-leaseSeqBits) - 1
	maxLeaseSeq  = 1<<leaseSeqBits - 1
)

// leaseAttempts bounds the conditional writes of one Lease call.
const leaseAttempts = defaultMaxAttempts

// Acquire takes the lease and returns its term. A Lease that holds it
// renews instead and keeps its term. Otherwise it reads the record and:
// absent, it creates it at term 1 (create-only); expired, released, or
// naming this Holder (a restarted holder), it takes it over at the
// record's term + 1, conditioned on the version read; held by another
// holder and unexpired by this Lease's clock, it returns a *LeaseHeldError
// (ErrLeaseHeld). A lost race reads again, up to 10 writes.
// A record that fails to decode returns a *CorruptError (ErrCorrupt) and is
// never overwritten.
func (l *Lease) Acquire(ctx context.Context) (uint64, error) {
	key, err := l.check()
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		err := l.rewrite(ctx, key, l.term, false)
		if err == nil {
			return l.term, nil
		}
		if !errors.Is(err, ErrLeaseLost) {
			return 0, err
		}
	}
	for range leaseAttempts {
		data, version, err := l.Store.Get(ctx, key)
		term := uint64(1)
		switch {
		case errors.Is(err, ErrNotFound):
			version = ""
		case err != nil:
			return 0, fmt.Errorf("writefence: lease %s: read: %w", esc(key), err)
		default:
			rec, check := decodeLease(data)
			if check != "" {
				return 0, &CorruptError{Key: key, Version: version, Check: "lease: " + check}
			}
			// Read the clock after the record, so a release or an expiry
			// the record shows is never judged by an earlier time.
			if rec.expiry > l.now().UnixNano() && rec.holder != l.Holder {
				return 0, &LeaseHeldError{Key: key, Holder: rec.holder, Term: rec.term, Expiry: time.Unix(0, rec.expiry)}
			}
			if rec.term >= maxLeaseTerm {
				return 0, fmt.Errorf("writefence: lease %s: term %d is the last", esc(key), rec.term)
			}
			term = rec.term + 1
		}
		expiry := l.now().Add(l.TTL)
		out := encodeLease(l.Holder, term, expiry.UnixNano())
		newVersion, err := l.Store.PutIfVersion(ctx, key, out, version)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			// The write may have landed: only its exact bytes prove it did.
			newVersion, err = l.settle(ctx, key, out, err)
			if err != nil {
				return 0, err
			}
			if newVersion == "" {
				continue
			}
		}
		l.hold(term, newVersion, expiry)
		return term, nil
	}
	return 0, fmt.Errorf("writefence: lease %s: acquire: %d attempts: %w", esc(key), leaseAttempts, ErrConflict)
}

// settle learns whether a write of out whose reply failed with cause
// landed: it returns the record's version when the store holds exactly
// out, "" when it holds something else, or an error matching
// ErrOutcomeUnknown and cause when it cannot tell.
func (l *Lease) settle(ctx context.Context, key string, out []byte, cause error) (string, error) {
	if ctx.Err() == nil {
		data, version, err := l.Store.Get(ctx, key)
		switch {
		case err == nil && bytes.Equal(data, out):
			return version, nil
		case err == nil || errors.Is(err, ErrNotFound):
			return "", nil
		}
	}
	return "", &OutcomeUnknownError{Op: "lease write", Key: key, Err: cause}
}

// Renew extends the lease by TTL from now, keeping its term, with a write
// conditioned on the version this Lease last wrote. If the store shows
// another term (a takeover) or no record, the Lease drops the lease and
// Renew returns an error matching ErrLeaseLost; so does a Lease that does
// not hold the lease. Renew succeeds after the local expiry too, as long as
// nobody took the lease over: the conditional write proves it. Any other
// error leaves the lease held until its local expiry, so a retry may land.
func (l *Lease) Renew(ctx context.Context) error {
	return l.rewriteHeld(ctx, "renew", false)
}

// Release gives the lease up: a write conditioned on the version this
// Lease last wrote marks the record expired, keeping its term, so the next
// acquisition, by anyone, takes term + 1 at once. The Lease stops handing
// out epochs whatever the outcome; after an error other than ErrLeaseLost
// the record may still show the lease held until its expiry. A Lease that
// does not hold the lease, or finds it taken over, returns an error
// matching ErrLeaseLost.
func (l *Lease) Release(ctx context.Context) error {
	return l.rewriteHeld(ctx, "release", true)
}

// rewriteHeld renews or releases the held lease: a Lease that does not
// hold it returns ErrLeaseLost without I/O. A release drops the lease
// whatever the outcome.
func (l *Lease) rewriteHeld(ctx context.Context, op string, release bool) error {
	key, err := l.check()
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return fmt.Errorf("writefence: lease %s: %s: not held: %w", esc(key), op, ErrLeaseLost)
	}
	err = l.rewrite(ctx, key, l.term, release)
	if release {
		l.drop()
	}
	return err
}

// Epoch implements EpochSource: it returns a new push epoch of the held
// term, term<<32 | n, greater than every epoch it returned before. plugin
// and shard are not used: one lease gates every shard its holder writes.
// It makes no I/O, except once per 2^32-1 epochs to move to the next term.
// A Lease that does not hold the lease returns an error matching
// ErrLeaseLost; one whose local expiry has passed, ErrLeaseExpired.
func (l *Lease) Epoch(ctx context.Context, plugin, shard string) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return 0, fmt.Errorf("writefence: lease %s: not held: %w", esc(l.Name), ErrLeaseLost)
	}
	if !l.now().Before(l.expiry) {
		return 0, fmt.Errorf("writefence: lease %s: term %d: expired at %s: %w",
			esc(l.Name), l.term, l.expiry.UTC().Format(time.RFC3339Nano), ErrLeaseExpired)
	}
	if l.seq >= maxLeaseSeq {
		key, err := l.check()
		if err != nil {
			return 0, err
		}
		if l.term >= maxLeaseTerm {
			return 0, fmt.Errorf("writefence: lease %s: term %d is the last", esc(key), l.term)
		}
		if err := l.rewrite(ctx, key, l.term+1, false); err != nil {
			return 0, err
		}
	}
	l.seq++
	return l.term<<leaseSeqBits | l.seq, nil
}

// rewrite writes this Lease's record at term (its own term, or the next one
// when its epochs ran out) with a fresh expiry, or released, conditioned on
// the version it last wrote. The caller holds mu and the lease.
func (l *Lease) rewrite(ctx context.Context, key string, term uint64, release bool) error {
	for range leaseAttempts {
		start := l.now()
		expiry := start.Add(l.TTL)
		stamp := expiry.UnixNano()
		if release {
			stamp = 0
		}
		out := encodeLease(l.Holder, term, stamp)
		version, err := l.Store.PutIfVersion(ctx, key, out, l.version)
		if err == nil {
			l.hold(term, version, expiry)
			return nil
		}
		if !errors.Is(err, ErrConflict) && ctx.Err() != nil {
			return &OutcomeUnknownError{Op: "lease write", Key: key, Err: err}
		}
		// A conflict, or an outcome hidden by an error: the record says
		// which.
		data, current, gerr := l.Store.Get(ctx, key)
		if errors.Is(gerr, ErrNotFound) {
			ours := l.term
			l.drop()
			return fmt.Errorf("writefence: lease %s: term %d: the record is gone: %w", esc(key), ours, ErrLeaseLost)
		}
		if gerr != nil {
			return fmt.Errorf("writefence: lease %s: write: %w; then read: %w", esc(key), err, gerr)
		}
		if bytes.Equal(data, out) {
			l.hold(term, current, expiry)
			return nil
		}
		rec, check := decodeLease(data)
		if check != "" {
			l.drop()
			return &CorruptError{Key: key, Version: current, Check: "lease: " + check}
		}
		if rec.term != l.term || rec.holder != l.Holder {
			ours := l.term
			l.drop()
			return fmt.Errorf("writefence: lease %s: term %d: now held by %s at term %d: %w",
				esc(key), ours, esc(rec.holder), rec.term, ErrLeaseLost)
		}
		// Our own term at another version: an earlier write of ours whose
		// reply was lost. Condition the next attempt on it.
		l.version = current
	}
	return fmt.Errorf("writefence: lease %s: %d attempts: %w", esc(key), leaseAttempts, ErrConflict)
}

// hold records that this Lease holds term at version until expiry; a new
// term starts its epochs afresh.
func (l *Lease) hold(term uint64, version string, expiry time.Time) {
	if !l.held || term != l.term {
		l.seq = 0
	}
	l.held, l.term, l.version, l.expiry = true, term, version, expiry
}

func (l *Lease) drop() {
	l.held, l.term, l.version, l.expiry, l.seq = false, 0, "", time.Time{}, 0
}

func (l *Lease) now() time.Time {
	if l.Clock != nil {
		return l.Clock()
	}
	return time.Now()
}

// check validates the Lease's fields and returns its record's key.
func (l *Lease) check() (string, error) {
	switch {
	case l.Store == nil:
		return "", invalidArg("store", "Lease.Store is nil")
	case l.Holder == "":
		return "", invalidArg("holder", "empty")
	case len(l.Holder) > maxWriterLen:
		return "", invalidArg("holder", "%d bytes, more than %d", len(l.Holder), maxWriterLen)
	case l.TTL <= 0:
		return "", invalidArg("ttl", "%v, must be positive", l.TTL)
	}
	k, err := keys.Lease(l.Prefix, l.Name)
	return k, keyErr(err)
}
