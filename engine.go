package writefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"time"

	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// The conditional-update engine. Every conditional write the package
// makes goes through engine.run: the shard records (Push, Update, Seal,
// Commit, Settle), the settle log, the floor, the collection horizon, the
// lease record and the brand claim. It reads the key, lets the change
// decide on what it read (decide.go for a shard's record), and makes one
// conditional write; on a conflict it backs off, reads afresh and decides
// again, and a write whose reply was lost is resolved by the next read.
// The guards a write needs (the probe verdict, the brand, the retry
// policy, the classification of errors, the Observer) live here once.
//
// Two kinds of write are no conditional update and do not loop here, but
// pass the same guards (guard, brandRead): a blob's upload (PutBlob), made
// once because its reader cannot be read twice (a failed upload leaves at
// most garbage that Collect deletes; the caller puts the blob again under
// a new name), which reaches the Observer, and Collect's deletes and its
// clock blob, which the next pass repeats, and which the Observer sees as
// the pass's one "collect".

// engine is a Fence as one call sees it: the Fence's settings, copied by
// Fence.engine when the call starts, and the state the Fence keeps between
// calls. Everything a write needs below the Fence's own methods is the
// engine's, so that this file, and those it calls on, never name the
// Fence. The settings' zero values mean what the Fence's fields document.
type engine struct {
	Store          ConditionalStore
	Identity       string
	Prefix         string
	MaxPayloadSize int64
	MaxAttempts    int
	RetryDelay     time.Duration
	Probe          bool
	Brand          BrandMode
	Observer       func(ctx context.Context, e WriteEvent)
	KeepFloor      bool

	*fenceState
}

// fenceState is what a Fence keeps between calls.
type fenceState struct {
	probe     verdictOnce // the kept verdict of the probe
	brandOnce verdictOnce // the kept outcome of a once-mode brand check
	cache     recordCache // what the Fence wrote and saw of each record
	deposed   deposition  // the contexts Deposed handed out
	blobIDs   blobIDs     // the last blob id PutBlob made
}

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
	// spares, when set, names the stale refusals that depose nobody: a
	// Hold's seal passed by an epoch its own Lease handed out.
	spares func(stale *StaleEpochError) bool

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

// changeResult is how a change ended that did not fail.
type changeResult struct {
	version string // the key's version now: of the write, or of what was found
	wrote   bool   // this call's write landed, rather than finding it done
}

// errReadWhole is decide's request for the whole object: its head did not
// tell enough.
var errReadWhole = errors.New("writefence: read the whole object")

// run makes change c, guarded, and tells how it ended: to the Deposed
// contexts of its key when it was refused as stale, then to the Observer.
func (e *engine) run(ctx context.Context, c *change) (out changeResult, err error) {
	attempt, start := 0, time.Now()
	defer func() {
		e.refused(c, err)
		e.observe(ctx, c, start, false, attempt, err)
	}()
	if err := e.guard(ctx, c); err != nil {
		return changeResult{}, err
	}
	maxAttempts := e.maxAttempts()
	var unsure error // a write of this call whose outcome an error hid
	var last []byte  // the bytes of this call's last write that failed
	for attempt = 1; ; attempt++ {
		out, sent, err := e.attempt(ctx, c, attempt == 1 && c.cached != "", &last)
		if err == nil {
			return out, nil
		}
		if sent && !errors.Is(err, ErrConflict) && !final(err) {
			unsure = err
		}
		switch {
		case !sent && !transientRead(err), final(err):
			return changeResult{}, c.failed(unsure, err)
		case ctx.Err() != nil:
			return changeResult{}, c.failed(unsure, ctx.Err())
		case attempt >= maxAttempts:
			return changeResult{}, c.exhausted(unsure, attempt, err)
		case errors.Is(err, ErrConflict):
			e.observe(ctx, c, start, true, attempt, err)
		}
		if e.backoff(ctx, attempt) != nil {
			return changeResult{}, c.failed(unsure, ctx.Err())
		}
	}
}

// attempt reads (or takes the cached version), decides and writes once.
// sent says the error came from the write, whose outcome it may hide;
// last holds the bytes of the call's last write that failed, which the
// attempt compares with what it reads (snapshot.ours), and updates.
func (e *engine) attempt(ctx context.Context, c *change, useCache bool, last *[]byte) (out changeResult, sent bool, err error) {
	if c.before != nil {
		if err := c.before(ctx); err != nil {
			return changeResult{}, false, err
		}
	}
	s := &snapshot{found: true, cached: true, version: c.cached}
	if !useCache {
		if s, err = e.readKey(ctx, c.key, c.head); err != nil {
			return changeResult{}, false, readFailure{err}
		}
	}
	s.sent = *last
	parts, done, err := c.decide(s)
	if errors.Is(err, errReadWhole) {
		if s, err = e.readKey(ctx, c.key, false); err != nil {
			return changeResult{}, false, readFailure{err}
		}
		s.sent = *last
		parts, done, err = c.decide(s)
	}
	switch {
	case err != nil:
		return changeResult{}, false, err
	case done:
		return changeResult{version: s.version}, false, nil
	}
	if err := e.brandBeforeWrite(ctx, c); err != nil {
		return changeResult{}, false, err
	}
	// A ctx that ended is no write sent: the call's outcome is known
	// (nothing of this attempt written), which a store that took the
	// write and failed on ctx could not say.
	if err := ctx.Err(); err != nil {
		return changeResult{}, false, err
	}
	version, err := e.write(ctx, c, parts, s.version)
	if err != nil {
		*last = bytes.Join(parts, nil)
		return changeResult{}, true, err
	}
	return changeResult{version: version, wrote: true}, false, nil
}

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
// cannot change: damage, another wire identity, an argument or an object the
// store cannot take, refused credentials, a store the adapter cannot serve,
// an untrusted store, a stale epoch, a record that went back. A write
// refused so wrote nothing.
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
		err = &prefixed{prefix: "read: ", err: r.err}
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
func (e *engine) guard(ctx context.Context, c *change) error {
	if e.Probe {
		if err := e.checkProbe(ctx, c.branded); err != nil {
			return err
		}
	}
	if !c.branded {
		return nil
	}
	return e.checkBrand(ctx, true)
}

// guarded runs c's guards alone, as run does before c's first read, and
// tells the Observer of a refusal: for a call that reads before it runs
// the engine, so that a refused call reads nothing and is seen refused as
// itself.
func (e *engine) guarded(ctx context.Context, c *change) error {
	err := e.guard(ctx, c)
	if err != nil {
		e.observe(ctx, c, time.Now(), false, 0, err)
	}
	return err
}

// maxAttempts is MaxAttempts or its default.
func (e *engine) maxAttempts() int {
	if e.MaxAttempts > 0 {
		return e.MaxAttempts
	}
	return defaultMaxAttempts
}

// retried runs read, a read a call makes outside the engine's writes (an
// Inspect, the opening of a blob), under the engine's retry policy: a
// failure that is not a refusal is retried after a back-off, up to
// MaxAttempts attempts, until ctx ends.
func retried[T any](ctx context.Context, e *engine, read func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := read()
		if err == nil || final(err) || errors.Is(err, ErrNotFound) || isContextErr(err) || attempt >= e.maxAttempts() {
			return v, err
		}
		if e.backoff(ctx, attempt) != nil {
			return v, ctx.Err()
		}
	}
}

// retryList runs list, a listing whose callback may stop it with stop,
// under the same policy as retried: stop, damage the listing reports and a
// refusal end it at once.
func retryList(ctx context.Context, e *engine, stop error, list func() error) error {
	for attempt := 1; ; attempt++ {
		err := list()
		if err == nil || errors.Is(err, stop) || final(err) || onlyDamage(err) || isContextErr(err) || attempt >= e.maxAttempts() {
			return err
		}
		if e.backoff(ctx, attempt) != nil {
			return ctx.Err()
		}
	}
}

// readKey reads key once: all of it, or with head its head (readHead). A
// missing key and damage the store found are states, not errors.
func (e *engine) readKey(ctx context.Context, key string, head bool) (*snapshot, error) {
	if err := hook.Read(ctx, key); err != nil {
		return nil, err
	}
	var s snapshot
	var err error
	if head {
		s.data, s.size, s.version, err = e.readHead(ctx, key)
		s.whole = s.size <= int64(len(s.data))
	} else {
		s.data, s.version, err = e.Store.Get(ctx, key)
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
func (e *engine) brandedWrites(c *change) bool {
	if !c.branded || !e.brandEveryWrite() {
		return false
	}
	_, ok := capability[BrandedPutter](e.Store)
	return ok
}

// brandBeforeWrite checks the brand right before c's write, when the Fence
// checks it before every write and the store cannot check it inside the
// write: a read of the brand key, whose failure is a read's (retried when
// transient, nothing sent) and whose mismatch is final.
func (e *engine) brandBeforeWrite(ctx context.Context, c *change) error {
	if !c.branded || !e.brandEveryWrite() || e.brandedWrites(c) {
		return nil
	}
	return e.brandRead(ctx)
}

// brandRead is the one read of the brand key: it reads it once and
// compares it with the Fence's identity. A failure to read is a
// readFailure; another value, or none, a *WireError (Absent set when the
// key does not exist). VerifyBrand, ClaimBrand's confirming read, the
// checks before writes and Latest all go through it.
func (e *engine) brandRead(ctx context.Context) error {
	brandKey := keys.Brand(e.Prefix)
	if err := hook.Read(ctx, brandKey); err != nil {
		return readFailure{err}
	}
	data, _, err := e.Store.Get(ctx, brandKey)
	switch {
	case errors.Is(err, ErrNotFound):
		return compareBrand(brandKey, e.wireID(), nil, false)
	case err != nil:
		return readFailure{err}
	}
	return compareBrand(brandKey, e.wireID(), data, true)
}

// write makes the change's one conditional write: through the store's
// PutIfBranded when brandedWrites, else through PutParts.
func (e *engine) write(ctx context.Context, c *change, parts [][]byte, version string) (string, error) {
	return hook.Write(ctx, c.key, func() (string, error) {
		if e.brandedWrites(c) {
			return PutIfBranded(ctx, e.Store, keys.Brand(e.Prefix), e.wireID(), c.key, parts, version)
		}
		return PutParts(ctx, e.Store, c.key, parts, version)
	})
}

// backoff waits before attempt+1, or returns ctx's error if ctx ends first.
// The delay is uniform in (0, min(RetryDelay<<(attempt-1), 500ms)].
func (e *engine) backoff(ctx context.Context, attempt int) error {
	base := e.RetryDelay
	if base <= 0 {
		base = defaultRetryDelay
	}
	ceiling := maxRetryDelay
	if shift := attempt - 1; shift < 16 && base<<shift < ceiling {
		ceiling = base << shift
	}
	return hook.Wait(ctx, attempt, rand.N(ceiling)+1)
}

// BrandMode says when a Fence checks the store's brand; the zero value
// never. A record's own identity is checked on every write whatever the
// mode.
type BrandMode int

// The brand modes.
const (
	// BrandVerify, for a store branded by a separate step (ClaimBrand at
	// deploy time, "writefence brand install"), verifies the brand before
	// the Fence's first write or Latest and keeps the verdict.
	BrandVerify BrandMode = iota + 1

	// BrandClaim, for writers that create their stores, claims the brand
	// (see ClaimBrand) before the Fence's first write. Latest neither
	// claims nor verifies; it returns a refused claim's refusal.
	BrandClaim

	// BrandVerifyAlways, for a store re-branded while writers run,
	// verifies the brand on every write and Latest: in the write's own
	// atomic step on a BrandedPutter (Valkey, etcdstore), else by a read
	// right before it, which leaves a gap in which one write may land.
	BrandVerifyAlways
)

// key validates the fence's configuration and returns the key of a shard.
func (e *engine) key(plugin, shard string) (string, error) {
	if err := e.checkConfig(); err != nil {
		return "", err
	}
	return shardKey(e.Prefix, plugin, shard)
}

// checkConfig validates the fields every operation needs.
func (e *engine) checkConfig() error {
	switch {
	case e.Store == nil:
		return invalidArg("store", "nil")
	case len(e.Identity) > record.MaxIdentityLen:
		return invalidArg("identity", "%d bytes, more than %d", len(e.Identity), record.MaxIdentityLen)
	}
	return keyErr(keys.CheckPrefix(e.Prefix))
}

// wireID is the records' wire identity: Identity or its default.
func (e *engine) wireID() string { return orDefault(e.Identity, defaultIdentity) }

func (e *engine) maxPayload() int64 {
	if e.MaxPayloadSize > 0 {
		return e.MaxPayloadSize
	}
	return defaultMaxPayloadSize
}

func (e *engine) observe(ctx context.Context, c *change, start time.Time, retrying bool, attempt int, err error) {
	if e.Observer != nil {
		e.Observer(ctx, WriteEvent{Op: c.op, Key: c.key, Writer: c.writer, Epoch: c.epoch, Attempt: attempt, Retrying: retrying, Err: err, Start: start})
	}
}

// refused tells the Deposed contexts of c's key that c ended on err, when
// err refuses a writer's write (c.deposes) as stale.
func (e *engine) refused(c *change, err error) {
	var stale *StaleEpochError
	if err == nil || !c.deposes || !errors.As(err, &stale) {
		return
	}
	if stale.Key != c.key || stale.Epoch != c.epoch || stale.Op != c.op {
		return // a refusal next returned, of another write: not this one's
	}
	if c.spares != nil && c.spares(stale) {
		return
	}
	e.deposed.depose(stale, func(key string) bool { return key == c.key })
}

// checkProbe runs the probe of the Store unless a verdict is kept. A
// Fence that checks the brand reads it before the probe writes its keys,
// for a write the brand guards (branded): a store of another program's
// brand is refused with nothing written (promises 3 and 10).
func (e *engine) checkProbe(ctx context.Context, branded bool) error {
	key := keys.Probe(e.Prefix)
	return e.probe.do(ctx, func(ctx context.Context) error {
		switch {
		case e.brandEveryWrite():
			if err := e.verifyBrandRetried(ctx); err != nil {
				return err
			}
		case branded && e.Brand != 0:
			// The probe's scratch writes land only on a store that holds
			// no other program's brand (promise 3): a brand still absent
			// is the mode's to verify or claim, after the probe.
			var we *WireError
			if err := e.verifyBrandRetried(ctx); err != nil && !(errors.As(err, &we) && we.Absent) {
				return err
			}
		}
		return Probe(ctx, e.Store, key)
	}, func(err error) bool { return errors.Is(err, ErrUntrustedStore) })
}

// brandKey validates the configuration a brand check needs and returns
// the brand key.
func (e *engine) brandKey() (string, error) {
	if err := e.checkConfig(); err != nil {
		return "", err
	}
	key := keys.Brand(e.Prefix)
	if len(key) > keys.MaxKeyLen {
		return "", invalidArg("prefix", "the brand key is %d bytes, more than %d", len(key), keys.MaxKeyLen)
	}
	return key, nil
}

// brandEveryWrite reports whether every write checks the brand itself: in
// its own atomic step on a store that can (brandedWrites), else by a read
// right before it (brandBeforeWrite).
func (e *engine) brandEveryWrite() bool { return e.Brand == BrandVerifyAlways }

// checkBrand runs the brand check the Fence's mode asks for before a write
// (forWrite) or a Latest.
func (e *engine) checkBrand(ctx context.Context, forWrite bool) error {
	switch e.Brand {
	case 0:
		return nil
	case BrandVerifyAlways:
		if forWrite {
			return nil // checked by the write itself (engine.write)
		}
		return e.verifyBrandRetried(ctx)
	case BrandVerify:
		return e.brandOnce.do(ctx, e.verifyBrandRetried, isWire)
	case BrandClaim:
		if forWrite {
			return e.brandOnce.do(ctx, func(ctx context.Context) error {
				_, err := e.claimBrand(ctx)
				return err
			}, isWire)
		}
		return e.brandOnce.refusal()
	}
	return invalidArg("brand", "unknown BrandMode %d", int(e.Brand))
}

// verifyBrandRetried is VerifyBrand with a read's retries: a transient
// failure to read the brand is tried again after a back-off, as every
// read a call makes before it writes.
func (e *engine) verifyBrandRetried(ctx context.Context) error {
	_, err := retried(ctx, e, func() (struct{}, error) { return struct{}{}, e.verifyBrand(ctx) })
	return err
}

func (e *engine) checkIdentity(key string, h record.Header) error {
	if id := e.wireID(); h.Identity != id {
		return &WireError{Key: key, Expected: id, Found: h.Identity}
	}
	return nil
}

// readHead reads the head of the record at key through GetPrefix: its
// first record.MaxHeaderSize bytes, which hold every header, and, of a
// stream's record whose references run past them, a second read of its
// header and references. It never reads the payload, except from a store
// that reads no prefixes (see Capable): that store's Get brings the whole
// record anyway, which is then decided on whole.
func (e *engine) readHead(ctx context.Context, key string) ([]byte, int64, string, error) {
	if _, ok := capability[PrefixReader](e.Store); !ok {
		data, version, err := e.Store.Get(ctx, key)
		return data, int64(len(data)), version, err
	}
	data, size, version, err := GetPrefix(ctx, e.Store, key, record.MaxHeaderSize)
	if err != nil || size <= int64(len(data)) {
		return data, size, version, err
	}
	h, check := record.DecodeHeader(data)
	if check != "" || !h.Stream() {
		return data, size, version, nil
	}
	// The header's checksum passed, so RefsLen is what a writer wrote;
	// a record shorter than it declares is left to the decision.
	end := uint64(h.Size) + h.RefsLen
	if end <= uint64(len(data)) || end > uint64(size) {
		return data, size, version, nil
	}
	if err := hook.Read(ctx, key); err != nil {
		return nil, 0, "", err
	}
	return GetPrefix(ctx, e.Store, key, int64(end))
}

// claimBrand is Fence.ClaimBrand.
func (e *engine) claimBrand(ctx context.Context) (claimed bool, err error) {
	key, err := e.brandKey()
	if err != nil {
		return false, err
	}
	identity := e.wireID()
	out, err := e.run(ctx, &change{op: opBrandClaim, key: key, decide: func(s *snapshot) ([][]byte, bool, error) {
		switch {
		case s.damage != nil:
			return nil, false, fmt.Errorf("writefence: brand: read %s: %w", esc(key), s.damage)
		case !s.found:
			return [][]byte{[]byte(identity)}, false, nil
		}
		return nil, true, compareBrand(key, identity, s.data, true)
	}})
	if err != nil || !out.wrote {
		return false, err
	}
	// The confirming read: a store that acknowledged the create must show
	// it. A read, retried as one.
	err = e.verifyBrandRetried(ctx)
	if we := (*WireError)(nil); errors.As(err, &we) && we.Absent {
		// Written and gone by the time of the read: something deletes the
		// brand key. Not a refusal: nothing was found to refuse.
		return false, fmt.Errorf("writefence: brand: claim %s: the brand key is absent right after the claim", esc(key))
	}
	return err == nil, err
}

// verifyBrand is Fence.VerifyBrand.
func (e *engine) verifyBrand(ctx context.Context) error {
	key, err := e.brandKey()
	if err != nil {
		return err
	}
	err = e.brandRead(ctx)
	var rf readFailure
	switch {
	case !errors.As(err, &rf):
		return err
	case isContextErr(rf.err):
		return rf.err
	}
	return fmt.Errorf("writefence: brand: read %s: %w", esc(key), rf.err)
}

// Defaults for the zero values of the Fence's settings.
const (
	defaultIdentity       = defaults.Identity // "writefence/v1", the package's record format
	defaultMaxPayloadSize = defaults.MaxPayloadSize
	defaultMaxAttempts    = 10
	defaultRetryDelay     = 5 * time.Millisecond
	maxRetryDelay         = 500 * time.Millisecond
)

// WriteEvent is what a Fence's Observer sees of a write. Op names it:
// "push", "update", "commit" and "seal" (Push and PushFrom, Update, Commit,
// Seal), "settle" and "settle log" (Settle, and its entry in the settle
// log), "floor" (the KeepFloor floor of a Seal or Settle), "blob" (PutBlob),
// "collect" (a Collect: its horizon's write, else its end),
// "lease acquire", "lease renew", "lease release" and "lease settle" (a
// Lease's record), "brand claim" (ClaimBrand, and BrandClaim's claim).
//
// The engine reports each write once, when it ends, and before that each
// race it lost and retried (Retrying set, Err matching ErrConflict), as
// promise 27 says. Err says what happened, tested like the error the call
// returns: nil when the key holds this write (written now, or found written);
// for a refusal, nothing written, ErrStaleEpoch, ErrEpochRegressed, ErrWire,
// ErrCorrupt, ErrUntrustedStore, ErrLeaseHeld, ErrLeaseLost, ErrNotFound or
// ErrConflict (every attempt lost); ErrOutcomeUnknown, never with a conflict
// or a refusal, when the outcome could not be learned; anything else for a
// failure. Outcome names it.
type WriteEvent struct {
	Op       string    // what was written; see above
	Key      string    // the key written
	Writer   string    // the writer, or the lease's holder; empty for the brand or a collection's horizon
	Epoch    uint64    // the epoch the write carried; 0 for a lease, the brand or a collection's horizon
	Attempt  int       // the attempt (read, decision, conditional write) it happened on, from 1; 0 when refused before the first (brand, probe)
	Retrying bool      // a lost race the call retries; false on the event that ends the write
	Err      error     // nil when the write landed; what happened otherwise
	Start    time.Time // when the write began, before its first check: the same on every event of one write
}
