package writefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"time"

	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
)

// The conditional-update engine. Every conditional write the package
// makes goes through Fence.run: the shard records (Push, Update, Seal,
// Commit, Settle), the settle log, the floor, the collection horizon, the
// lease record and the brand claim. It reads the key, lets the change
// decide on what it read (decide.go for a shard's record), and makes one
// conditional write; on a conflict it backs off, reads afresh and decides
// again, and a write whose reply was lost is resolved by the next read.
// The guards a write needs (the probe verdict, the brand, the retry
// policy, the classification of errors, the Observer) live here once.
//
// Two kinds of write are no conditional update and do not loop here, but
// pass the same guards (guard, brandRead) and reach the Observer: a blob's
// upload (PutBlob), made once because its reader cannot be read twice (a
// failed upload leaves at most garbage that Collect deletes; the caller
// puts the blob again under a new name), and Collect's deletes and its
// clock blob, which the next pass repeats.

// The operations of the engine, as the Observer and errors name them.
const (
	opPush         = "push"
	opUpdate       = "update"
	opCommit       = "commit"
	opBlob         = "blob"
	opSeal         = "seal"
	opSettle       = "settle"
	opSettleLog    = "settle log"
	opLeaseAcquire = "lease acquire"
	opLeaseRenew   = "lease renew"
	opLeaseRelease = "lease release"
	opBrandClaim   = "brand claim"
	opCollect      = "collect"
	opLeaseSettle  = "lease settle"
	opFloor        = "floor"
	opCheck        = "check"
	opTermSource   = "term source"
)

// ops lists every op an Observer can see, in the order WriteEvent's
// documentation names them.
var ops = []string{opPush, opUpdate, opCommit, opSeal, opSettle, opSettleLog, opFloor, opBlob, opCollect,
	opLeaseAcquire, opLeaseRenew, opLeaseRelease, opLeaseSettle, opBrandClaim}

// A change is one conditional update of one key.
type change struct {
	op     string // one of the op constants
	key    string
	writer string // the writer (or lease holder) making it, for the Observer
	epoch  uint64 // the epoch it writes, for the Observer and errors; 0 when none

	// head reads only the first record.MaxHeaderSize bytes of the object
	// when the store can (GetPrefix); decide may still ask for all of it
	// with errReadWhole.
	head bool

	// cached, when not empty, is a version the first attempt conditions
	// its write on without reading: decide then gets a snapshot with only
	// that version. A stale one costs a conflict and a fresh read.
	cached string

	// branded says the Fence's brand guards this write: every change but
	// the brand's own claim.
	branded bool

	// deposes says a refusal of this change as stale deposes the writer:
	// the Deposed contexts of its key are cancelled (see Fence.Deposed).
	// Every writer's write of a record does; an operator's settle and a
	// collection, which write for nobody's tenure, do not.
	deposes bool

	// before, when set, runs at the start of every attempt, before the
	// key is read (or its cached version taken): a read the decision also
	// needs, such as the shard's floor (Fence.KeepFloor). Its error ends
	// the attempt as a read's does: a readFailure is retried, any other
	// error is a decision.
	before func(ctx context.Context) error

	// decide returns the bytes to write as parts (written as their
	// concatenation), or done when the key already holds what the change
	// wants (an earlier attempt landed), or a refusal, which is final.
	decide func(s *snapshot) (parts [][]byte, done bool, err error)
}

// snapshot is what one read of a key found.
type snapshot struct {
	found   bool
	cached  bool   // not read: the version the change remembered
	whole   bool   // data is the whole object
	version string // of the bytes read, or of the damage
	data    []byte // the object, or its first bytes
	size    int64  // the object's size

	// damage is set when the store's own check found the bytes damaged in
	// place; data is then nil and damage.Head holds what the store could
	// locate of them.
	damage *CorruptError

	// sent is the bytes of this call's last write that failed without
	// learning whether it landed (a conflict, a lost reply), nil when
	// none: a decision that finds them recorded (see ours, decide.go)
	// knows the write landed, and needs no memory of its own for it.
	sent []byte
}

// outcome is how a change ended that did not fail.
type outcome struct {
	version string // the key's version now: of the write, or of what was found
	wrote   bool   // this call's write landed, rather than finding it done
}

// errReadWhole is decide's request for the whole object: its head did not
// tell enough.
var errReadWhole = errors.New("writefence: read the whole object")

// run makes change c, guarded, and tells how it ended: to the Deposed
// contexts of its key when it was refused as stale, then to the Observer.
func (f *Fence) run(ctx context.Context, c *change) (out outcome, err error) {
	attempt, start := 0, time.Now()
	defer func() {
		f.refused(c, err)
		f.observe(ctx, c, start, false, attempt, err)
	}()
	if err := f.guard(ctx, c); err != nil {
		return outcome{}, err
	}
	maxAttempts := f.maxAttempts()
	var unsure error // a write of this call whose outcome an error hid
	var last []byte  // the bytes of this call's last write that failed
	for attempt = 1; ; attempt++ {
		out, sent, err := f.attempt(ctx, c, attempt == 1 && c.cached != "", &last)
		if err == nil {
			return out, nil
		}
		if sent && !errors.Is(err, ErrConflict) && !final(err) {
			unsure = err
		}
		switch {
		case !sent && !transientRead(err), final(err):
			return outcome{}, c.failed(unsure, err)
		case ctx.Err() != nil:
			return outcome{}, c.failed(unsure, ctx.Err())
		case attempt >= maxAttempts:
			return outcome{}, c.exhausted(unsure, attempt, err)
		case errors.Is(err, ErrConflict):
			f.observe(ctx, c, start, true, attempt, err)
		}
		if f.backoff(ctx, attempt) != nil {
			return outcome{}, c.failed(unsure, ctx.Err())
		}
	}
}

// attempt reads (or takes the cached version), decides and writes once.
// sent says the error came from the write, whose outcome it may hide;
// last holds the bytes of the call's last write that failed, which the
// attempt compares with what it reads (snapshot.ours), and updates.
func (f *Fence) attempt(ctx context.Context, c *change, useCache bool, last *[]byte) (out outcome, sent bool, err error) {
	if c.before != nil {
		if err := c.before(ctx); err != nil {
			return outcome{}, false, err
		}
	}
	s := &snapshot{found: true, cached: true, version: c.cached}
	if !useCache {
		if s, err = f.readKey(ctx, c.key, c.head); err != nil {
			return outcome{}, false, readFailure{err}
		}
	}
	s.sent = *last
	parts, done, err := c.decide(s)
	if errors.Is(err, errReadWhole) {
		if s, err = f.readKey(ctx, c.key, false); err != nil {
			return outcome{}, false, readFailure{err}
		}
		s.sent = *last
		parts, done, err = c.decide(s)
	}
	switch {
	case err != nil:
		return outcome{}, false, err
	case done:
		return outcome{version: s.version}, false, nil
	}
	if err := f.brandBeforeWrite(ctx, c); err != nil {
		return outcome{}, false, err
	}
	version, err := f.write(ctx, c, parts, s.version)
	if err != nil {
		*last = bytes.Join(parts, nil)
		return outcome{}, true, err
	}
	return outcome{version: version, wrote: true}, false, nil
}

// outcomeSettled is implemented by a refusal that settles what a write
// whose reply was lost could have done: whatever it did, the caller's
// state is known (a lease taken over is lost, whether or not this
// Lease's last renewal landed first). The engine returns such a refusal
// as it is, not as an unknown outcome.
type outcomeSettled interface{ outcomeSettled() }

// readFailure marks a store's failure to read, which a retry may overcome;
// every other error of an attempt that wrote nothing is a decision.
type readFailure struct{ err error }

func (r readFailure) Error() string { return r.err.Error() }
func (r readFailure) Unwrap() error { return r.err }

func transientRead(err error) bool {
	var r readFailure
	return errors.As(err, &r) && !final(r.err)
}

// final reports whether an error from the store is a refusal that a retry
// cannot change: damage, another wire identity, an argument or an object
// the store cannot take, refused credentials, a store the adapter cannot
// serve, an untrusted store, a stale epoch, a record that went back. A write refused so wrote nothing.
func final(err error) bool {
	for _, target := range []error{ErrCorrupt, ErrWire, ErrInvalidArgument, ErrTooLarge,
		ErrUntrustedStore, ErrStaleEpoch, ErrEpochRegressed, fs.ErrPermission, errors.ErrUnsupported} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// failed is the error of a change that ended on err: a decision, a
// refusal, or ctx.Err() when ctx ended. After a write whose outcome was
// hidden, that write may have landed and been superseded, so the change's
// outcome is unknown: err is then reported but not matched, except a
// cancellation, which the caller asked for and may test.
func (c *change) failed(unsure, err error) error {
	var r readFailure
	if errors.As(err, &r) {
		err = &prefixed{prefix: fmt.Sprintf("writefence: %s %s: read: ", c.op, esc(c.key)), err: r.err}
	}
	var settled outcomeSettled
	if unsure == nil || errors.As(err, &settled) {
		return err
	}
	then := fmt.Errorf("%w; then: %v", unsure, err)
	if isContextErr(err) {
		then = fmt.Errorf("%w; then: %w", unsure, err)
	}
	return &OutcomeUnknownError{Op: c.op, Key: c.key, Epoch: c.epoch, Err: then}
}

// exhausted is the error of a change that ran out of attempts on err.
// After a write whose outcome was hidden the outcome is unknown, whatever
// the last attempt met: the error then matches ErrOutcomeUnknown and the
// cause that hid it, and names the last error without matching it (a
// conflict after a write that may have landed says nothing of that
// write).
func (c *change) exhausted(unsure error, attempts int, err error) error {
	var r readFailure
	if errors.As(err, &r) {
		err = fmt.Errorf("read: %w", r.err)
	}
	if unsure != nil {
		return &OutcomeUnknownError{Op: c.op, Key: c.key, Epoch: c.epoch,
			Err: fmt.Errorf("%w; then %d attempts, the last: %v", unsure, attempts, trim(err))}
	}
	at := ""
	if c.epoch != 0 {
		at = fmt.Sprintf(" at epoch %d", c.epoch)
	}
	return &prefixed{prefix: fmt.Sprintf("writefence: %s%s to %s: %d attempts: ", c.op, at, esc(c.key), attempts), err: err}
}

// guard runs the checks every change passes before its first read: the
// probe verdict, then the brand as the Fence's mode asks.
func (f *Fence) guard(ctx context.Context, c *change) error {
	if f.Probe {
		if err := f.checkProbe(ctx); err != nil {
			return err
		}
	}
	if !c.branded {
		return nil
	}
	return f.checkBrand(ctx, true)
}

// guarded runs c's guards alone, as run does before c's first read, and
// tells the Observer of a refusal: for a call that reads before it runs
// the engine, so that a refused call reads nothing and is seen refused as
// itself.
func (f *Fence) guarded(ctx context.Context, c *change) error {
	err := f.guard(ctx, c)
	if err != nil {
		f.observe(ctx, c, time.Now(), false, 0, err)
	}
	return err
}

// maxAttempts is MaxAttempts or its default.
func (f *Fence) maxAttempts() int {
	if f.MaxAttempts > 0 {
		return f.MaxAttempts
	}
	return defaultMaxAttempts
}

// retried runs read, a read a call makes outside the engine's writes (an
// Inspect, the opening of a blob), under the engine's retry policy: a
// failure that is not a refusal is retried after a back-off, up to
// MaxAttempts attempts, until ctx ends.
func retried[T any](ctx context.Context, f *Fence, read func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := read()
		if err == nil || final(err) || errors.Is(err, ErrNotFound) || isContextErr(err) || attempt >= f.maxAttempts() {
			return v, err
		}
		if f.backoff(ctx, attempt) != nil {
			return v, ctx.Err()
		}
	}
}

// retryList runs list, a listing whose callback may stop it with stop,
// under the same policy as retried: stop, damage the listing reports and a
// refusal end it at once.
func retryList(ctx context.Context, f *Fence, stop error, list func() error) error {
	for attempt := 1; ; attempt++ {
		err := list()
		if err == nil || errors.Is(err, stop) || final(err) || onlyDamage(err) || isContextErr(err) || attempt >= f.maxAttempts() {
			return err
		}
		if f.backoff(ctx, attempt) != nil {
			return ctx.Err()
		}
	}
}

// unwrapRead returns the error a readFailure carries, or err.
func unwrapRead(err error) error {
	var r readFailure
	if errors.As(err, &r) {
		return r.err
	}
	return err
}

// readKey reads key once: all of it, or with head its head (readHead). A
// missing key and damage the store found are states, not errors.
func (f *Fence) readKey(ctx context.Context, key string, head bool) (*snapshot, error) {
	if err := hook.Read(ctx, key); err != nil {
		return nil, err
	}
	var s snapshot
	var err error
	if head {
		s.data, s.size, s.version, err = f.readHead(ctx, key)
		s.whole = s.size <= int64(len(s.data))
	} else {
		s.data, s.version, err = f.Store.Get(ctx, key)
		s.size, s.whole = int64(len(s.data)), true
	}
	var ce *CorruptError
	switch {
	case err == nil:
		s.found = true
		return &s, nil
	case errors.Is(err, ErrNotFound):
		return &snapshot{}, nil
	case errors.As(err, &ce) && ce.Version != "":
		d := *ce
		if d.Key == "" {
			d.Key = key
		}
		return &snapshot{found: true, version: d.Version, damage: &d}, nil
	}
	return nil, err
}

// brandedWrites reports whether c's write checks the brand in its own
// atomic step: the Fence checks it before every write and the store is a
// BrandedPutter.
func (f *Fence) brandedWrites(c *change) bool {
	if !c.branded || !f.brandEveryWrite() {
		return false
	}
	_, ok := capability[BrandedPutter](f.Store)
	return ok
}

// brandBeforeWrite checks the brand right before c's write, when the Fence
// checks it before every write and the store cannot check it inside the
// write: a read of the brand key, whose failure is a read's (retried when
// transient, nothing sent) and whose mismatch is final.
func (f *Fence) brandBeforeWrite(ctx context.Context, c *change) error {
	if !c.branded || !f.brandEveryWrite() || f.brandedWrites(c) {
		return nil
	}
	return f.brandRead(ctx)
}

// brandRead is the one read of the brand key: it reads it once and
// compares it with the Fence's identity. A failure to read is a
// readFailure; another value, or none, a *WireError (Absent set when the
// key does not exist). VerifyBrand, ClaimBrand's confirming read, the
// checks before writes and Latest all go through it.
func (f *Fence) brandRead(ctx context.Context) error {
	brandKey := keys.Brand(f.Prefix)
	if err := hook.Read(ctx, brandKey); err != nil {
		return readFailure{err}
	}
	data, _, err := f.Store.Get(ctx, brandKey)
	switch {
	case errors.Is(err, ErrNotFound):
		return compareBrand(brandKey, f.identity(), nil, false)
	case err != nil:
		return readFailure{err}
	}
	return compareBrand(brandKey, f.identity(), data, true)
}

// write makes the change's one conditional write: through the store's
// PutIfBranded when brandedWrites, else through PutParts.
func (f *Fence) write(ctx context.Context, c *change, parts [][]byte, version string) (string, error) {
	return hook.Write(ctx, c.key, func() (string, error) {
		if f.brandedWrites(c) {
			return PutIfBranded(ctx, f.Store, keys.Brand(f.Prefix), f.identity(), c.key, parts, version)
		}
		return PutParts(ctx, f.Store, c.key, parts, version)
	})
}

// backoff waits before attempt+1, or returns ctx's error if ctx ends first.
// The delay is uniform in (0, min(RetryDelay<<(attempt-1), 500ms)].
func (f *Fence) backoff(ctx context.Context, attempt int) error {
	base := f.RetryDelay
	if base <= 0 {
		base = defaultRetryDelay
	}
	ceiling := maxRetryDelay
	if shift := attempt - 1; shift < 16 && base<<shift < ceiling {
		ceiling = base << shift
	}
	return hook.Wait(ctx, attempt, rand.N(ceiling)+1)
}
