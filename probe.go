package writefence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/probecheck"
)

// ErrUntrustedStore reports that a store failed the probe: it accepted a
// write its precondition should have refused, or read back other bytes or
// another version than a write returned. Fencing over such a store is a
// no-op. The verdict is final: retrying cannot change how the server treats
// preconditions. Test for it with errors.Is; the detail is a *ProbeError.
var ErrUntrustedStore = errors.New("writefence: untrusted store")

// ProbeError is the verdict of a failed probe: the store did not do what
// Check requires. It matches ErrUntrustedStore and, through Err, what the
// store did instead (an unexpected error, or a description of a write or a
// read that should not have happened).
type ProbeError struct {
	Check string // the check that failed, e.g. "stale update is refused"
	Key   string // the scratch key the check ran on
	Err   error  // what the store did instead
}

func (e *ProbeError) Error() string {
	s := "writefence: untrusted store: probe at " + esc(e.Key) + ": " + e.Check
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrUntrustedStore and Err.
func (e *ProbeError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUntrustedStore}
	}
	return []error{ErrUntrustedStore, e.Err}
}

// probeCleanupTimeout bounds the deletes after a probe, which run even when
// the probe's ctx has ended.
const probeCleanupTimeout = 10 * time.Second

// Probe proves on scratch keys that s decides its preconditions on the
// server, as ConditionalStore requires, and returns nil if it does. The
// checks, each followed by a Get that must return exactly the bytes and the
// version of the last write that landed:
//
//   - a create-only put of a fresh key lands;
//   - a second create-only put of that key is refused with ErrConflict;
//   - an update with the current version lands, with a new version;
//   - an update with the first, now stale, version is refused;
//   - an update of a missing key, with a version the store issued, is
//     refused and creates nothing.
//
// The scratch keys are key followed by "-" and 16 random hex digits (and
// "-absent" for the missing key), and the content written is random, so
// neither a leftover of an earlier probe nor a concurrent probe from another
// process can pass or fail this one. When s implements Deleter, both keys
// are deleted afterwards, best effort; otherwise they stay, a few dozen
// bytes each.
//
// A store that fails a check returns a *ProbeError, which matches
// ErrUntrustedStore. Any error other than a refusal (ErrConflict) where one
// was expected is not a verdict: a network, auth or server failure is
// returned wrapped and never matches ErrUntrustedStore, and a done ctx
// returns ctx.Err() as it is. (Cloud Storage throttles rapid updates of one
// object with HTTP 429, which is such a failure: a *StoreError.)
//
// A sequential probe sees what one client sees. It catches a store that
// ignores preconditions; it cannot catch one that checks them on the client
// side and then writes unconditionally, which answers every sequential
// request correctly and loses only races. The conformance suite
// (writefencetest) races writers to catch that.
func Probe(ctx context.Context, s ConditionalStore, key string) error {
	if s == nil {
		return invalidArg("store", "nil")
	}
	if key == "" {
		return invalidArg("key", "empty")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	suffix, err := randomHex(8)
	if err != nil {
		return err
	}
	p := &prober{s: s, key: key + "-" + suffix, missing: key + "-" + suffix + "-absent"}
	if d, ok := s.(Deleter); ok {
		defer p.cleanup(ctx, d)
	}
	return p.run(ctx)
}

// prober runs one probe.
type prober struct {
	s       ConditionalStore
	key     string // the scratch key
	missing string // a key never written
}

func (p *prober) run(ctx context.Context) error {
	d1, err := probeContent("create")
	if err != nil {
		return err
	}
	v1, err := p.s.PutIfVersion(ctx, p.key, d1, "")
	if err != nil {
		return p.unexpected(ctx, probecheck.Create, p.key, err)
	}
	if err := p.readBack(ctx, probecheck.Create, d1, v1); err != nil {
		return err
	}

	d2, err := probeContent("second create")
	if err != nil {
		return err
	}
	if err := p.refused(ctx, probecheck.CreateRefused, p.key, d2, "", d1, v1); err != nil {
		return err
	}

	d3, err := probeContent("update")
	if err != nil {
		return err
	}
	v3, err := p.s.PutIfVersion(ctx, p.key, d3, v1)
	if err != nil {
		return p.unexpected(ctx, probecheck.Update, p.key, err)
	}
	if v3 == v1 {
		// Two contents under one token: a cached token would prove the
		// wrong bytes.
		return &ProbeError{Check: probecheck.Update, Key: p.key,
			Err: fmt.Errorf("the new content got the old version %s", esc(v1))}
	}
	if err := p.readBack(ctx, probecheck.Update, d3, v3); err != nil {
		return err
	}

	d4, err := probeContent("stale update")
	if err != nil {
		return err
	}
	if err := p.refused(ctx, probecheck.StaleRefused, p.key, d4, v1, d3, v3); err != nil {
		return err
	}

	d5, err := probeContent("update of a missing key")
	if err != nil {
		return err
	}
	return p.refused(ctx, probecheck.MissingRefused, p.missing, d5, v3, nil, "")
}

// refused writes data at key on expect, which the store must refuse with
// ErrConflict, leaving key holding want at wantVersion (absent when want is
// nil).
func (p *prober) refused(ctx context.Context, check, key string, data []byte, expect string, want []byte, wantVersion string) error {
	v, err := p.s.PutIfVersion(ctx, key, data, expect)
	if err == nil {
		return &ProbeError{Check: check, Key: key,
			Err: fmt.Errorf("the store accepted the write and returned version %s", esc(v))}
	}
	if !errors.Is(err, ErrConflict) {
		return p.unexpected(ctx, check, key, err)
	}
	got, gotVersion, err := p.s.Get(ctx, key)
	if want == nil {
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return p.unexpected(ctx, check, key, err)
		}
		return &ProbeError{Check: check, Key: key,
			Err: fmt.Errorf("the store refused the write but created the key, version %s", esc(gotVersion))}
	}
	if err != nil {
		return p.readError(ctx, check, key, err)
	}
	if string(got) != string(want) || gotVersion != wantVersion {
		return &ProbeError{Check: check, Key: key,
			Err: fmt.Errorf("the store refused the write but changed the key: version %s, was %s", esc(gotVersion), esc(wantVersion))}
	}
	return nil
}

// readBack checks that the scratch key holds exactly data at version, as
// the write named by check returned.
func (p *prober) readBack(ctx context.Context, check string, data []byte, version string) error {
	if version == "" {
		return &ProbeError{Check: check, Key: p.key, Err: errors.New("the store returned an empty version")}
	}
	got, gotVersion, err := p.s.Get(ctx, p.key)
	if err != nil {
		return p.readError(ctx, probecheck.ReadBack, p.key, err)
	}
	switch {
	case string(got) != string(data):
		return &ProbeError{Check: probecheck.ReadBack, Key: p.key,
			Err: fmt.Errorf("after the check %s, the read returned other bytes (%d, wrote %d)", check, len(got), len(data))}
	case gotVersion != version:
		return &ProbeError{Check: probecheck.ReadBack, Key: p.key,
			Err: fmt.Errorf("after the check %s, the read returned version %s, the write %s", check, esc(gotVersion), esc(version))}
	}
	return nil
}

// readError classifies a failed read of a key that a write just filled: not
// found is a verdict (the store acknowledged a write it does not show),
// anything else is not.
func (p *prober) readError(ctx context.Context, check, key string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return &ProbeError{Check: check, Key: key, Err: err}
	}
	return p.unexpected(ctx, check, key, err)
}

// unexpected wraps an error that decides nothing about the store. A done
// ctx is returned as it is. A refusal of a write that had to land is a
// verdict, since the scratch keys are the probe's own.
func (p *prober) unexpected(ctx context.Context, check, key string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, ErrConflict) {
		return &ProbeError{Check: check, Key: key, Err: err}
	}
	return fmt.Errorf("writefence: probe at %s: %s: %w", esc(key), check, err)
}

func (p *prober) cleanup(ctx context.Context, d Deleter) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeCleanupTimeout)
	defer cancel()
	_ = d.Delete(ctx, p.key)     // best effort: the key is random and tiny
	_ = d.Delete(ctx, p.missing) // may have been created by a lying store
}

// probeContent returns fresh random content for one write of the probe.
func probeContent(step string) ([]byte, error) {
	r, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	return []byte("writefence probe " + step + " " + r), nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("writefence: probe: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// checkProbe runs the probe of f.Store unless a verdict is kept.
func (f *Fence) checkProbe(ctx context.Context) error {
	key := keys.Probe(f.Prefix)
	return f.probe.do(ctx, func(ctx context.Context) error {
		return Probe(ctx, f.Store, key)
	}, func(err error) bool { return errors.Is(err, ErrUntrustedStore) })
}
