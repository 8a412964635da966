package writefence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/writefence/writefence/internal/probecheck"
)

// ErrUntrustedStore reports that a store failed the probe (see Probe):
// fencing over it is a no-op. It is final; the detail is a *ProbeError.
var ErrUntrustedStore = errors.New("writefence: untrusted store")

// ProbeError is a failed probe's verdict: the store did not do what Check
// requires. It matches ErrUntrustedStore and, through Err, what the store
// did.
type ProbeError struct {
	Check string // the check that failed, e.g. "stale update is refused"
	Key   string // the scratch key the check ran on
	Err   error  // what the store did instead
}

// Error returns the message: "writefence: ", then what the fields say.
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
// server, and returns nil if it does. Writing through PutParts and reading
// back through Get and GetPrefix, as a Fence does, it checks that every read
// returns exactly the last write that landed, that a create-only put lands
// and a second is refused with ErrConflict, that an update lands at the
// current version and is refused at a stale one, that an update of a
// missing key is refused and creates nothing, and, when s declares
// BrandedPutter, the same through PutIfBranded, with a write under another
// identity refused with ErrWire.
//
// The scratch keys are key, "-" and 16 random hex digits in braces (a
// Valkey hash tag), with random content, so that no other probe can pass or
// fail this one; a Deleter's are deleted afterwards. A failed check returns
// a *ProbeError (ErrUntrustedStore); any other failure (network, auth, a
// server error) is returned wrapped and is no verdict, and a done ctx
// returns ctx.Err(). A sequential probe cannot catch a store that compares
// on the client side: writefencetest races writers for that.
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
	base := key + "-{" + suffix + "}"
	p := &prober{s: s, key: base, missing: base + "-absent", brand: base + "-brand", branded: base + "-branded"}
	if d, ok := s.(Deleter); ok {
		defer p.cleanup(ctx, d)
	}
	if err := p.run(ctx, p.key, p.put); err != nil {
		return err
	}
	if _, ok := capability[BrandedPutter](s); ok {
		return p.runBranded(ctx)
	}
	return nil
}

// prober runs one probe.
type prober struct {
	s        ConditionalStore
	key      string // the scratch key
	missing  string // a key never written
	brand    string // the scratch brand key, with BrandedPutter
	branded  string // the key written under it
	identity string // the identity the scratch brand holds
}

// putFunc is a probed write path: PutParts, or PutIfBranded under the
// scratch brand.
type putFunc func(ctx context.Context, key string, data []byte, expect string) (string, error)

// put writes data through PutParts, as two parts, so that a parts path
// really joins parts.
func (p *prober) put(ctx context.Context, key string, data []byte, expect string) (string, error) {
	half := len(data) / 2
	return PutParts(ctx, p.s, key, [][]byte{data[:half], data[half:]}, expect)
}

// run checks the preconditions of the write path put on key.
func (p *prober) run(ctx context.Context, key string, put putFunc) error {
	d1, err := probeContent("create")
	if err != nil {
		return err
	}
	v1, err := put(ctx, key, d1, "")
	if err != nil {
		return p.unexpected(ctx, probecheck.Create, key, err)
	}
	if err := p.readBack(ctx, probecheck.Create, key, d1, v1); err != nil {
		return err
	}

	d2, err := probeContent("second create")
	if err != nil {
		return err
	}
	if err := p.refused(ctx, put, probecheck.CreateRefused, key, d2, "", d1, v1); err != nil {
		return err
	}

	d3, err := probeContent("update")
	if err != nil {
		return err
	}
	v3, err := put(ctx, key, d3, v1)
	if err != nil {
		return p.unexpected(ctx, probecheck.Update, key, err)
	}
	if v3 == v1 {
		// Two contents under one token: a cached token would prove the
		// wrong bytes.
		return &ProbeError{Check: probecheck.Update, Key: key,
			Err: fmt.Errorf("the new content got the old version %s", esc(v1))}
	}
	if err := p.readBack(ctx, probecheck.Update, key, d3, v3); err != nil {
		return err
	}

	d4, err := probeContent("stale update")
	if err != nil {
		return err
	}
	if err := p.refused(ctx, put, probecheck.StaleRefused, key, d4, v1, d3, v3); err != nil {
		return err
	}
	if key != p.key {
		return nil
	}

	d5, err := probeContent("update of a missing key")
	if err != nil {
		return err
	}
	return p.refused(ctx, put, probecheck.MissingRefused, p.missing, d5, v3, nil, "")
}

// runBranded checks PutIfBranded: its preconditions under a scratch brand
// that holds the probe's identity, and its refusal of another identity.
func (p *prober) runBranded(ctx context.Context) error {
	id, err := randomHex(8)
	if err != nil {
		return err
	}
	p.identity = "writefence probe " + id
	if _, err := p.put(ctx, p.brand, []byte(p.identity), ""); err != nil {
		return p.unexpected(ctx, probecheck.Create, p.brand, err)
	}
	put := func(ctx context.Context, key string, data []byte, expect string) (string, error) {
		return PutIfBranded(ctx, p.s, p.brand, p.identity, key, [][]byte{data}, expect)
	}
	if err := p.run(ctx, p.branded, put); err != nil {
		return err
	}
	want, wantVersion, err := p.s.Get(ctx, p.branded)
	if err != nil {
		return p.readError(ctx, probecheck.ReadBack, p.branded, err)
	}
	v, err := PutIfBranded(ctx, p.s, p.brand, p.identity+" other", p.branded, [][]byte{[]byte("foreign")}, wantVersion)
	switch {
	case err == nil:
		return &ProbeError{Check: probecheck.ForeignRefused, Key: p.branded,
			Err: fmt.Errorf("the store accepted the write and returned version %s", esc(v))}
	case !errors.Is(err, ErrWire):
		return p.unexpected(ctx, probecheck.ForeignRefused, p.branded, err)
	}
	return p.readBack(ctx, probecheck.ForeignRefused, p.branded, want, wantVersion)
}

// refused writes data at key on expect, which the store must refuse with
// ErrConflict, leaving key holding want at wantVersion (absent when want is
// nil).
func (p *prober) refused(ctx context.Context, put putFunc, check, key string, data []byte, expect string, want []byte, wantVersion string) error {
	v, err := put(ctx, key, data, expect)
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

// readBack checks that key holds exactly data at version, as the write
// named by check returned, through Get and through GetPrefix.
func (p *prober) readBack(ctx context.Context, check, key string, data []byte, version string) error {
	if version == "" {
		return &ProbeError{Check: check, Key: key, Err: errors.New("the store returned an empty version")}
	}
	got, gotVersion, err := p.s.Get(ctx, key)
	if err != nil {
		return p.readError(ctx, probecheck.ReadBack, key, err)
	}
	if err := readMismatch("read", check, got, int64(len(got)), gotVersion, data, version); err != nil {
		return &ProbeError{Check: probecheck.ReadBack, Key: key, Err: err}
	}
	n := int64(len(data)/2 + 1)
	prefix, size, gotVersion, err := GetPrefix(ctx, p.s, key, n)
	if err != nil {
		return p.readError(ctx, probecheck.ReadBack, key, err)
	}
	if err := readMismatch("prefix read", check, prefix, size, gotVersion, data[:min(n, int64(len(data)))], version); err != nil {
		return &ProbeError{Check: probecheck.ReadBack, Key: key, Err: err}
	}
	if size != int64(len(data)) {
		return &ProbeError{Check: probecheck.ReadBack, Key: key,
			Err: fmt.Errorf("after the check %s, the prefix read returned size %d, the write %d", check, size, len(data))}
	}
	return nil
}

// readMismatch says how a read (what) after the check disagrees with the
// bytes and version the write returned.
func readMismatch(what, check string, got []byte, size int64, gotVersion string, want []byte, version string) error {
	switch {
	case string(got) != string(want):
		return fmt.Errorf("after the check %s, the %s returned other bytes (%d, wrote %d)", check, what, size, len(want))
	case gotVersion != version:
		return fmt.Errorf("after the check %s, the %s returned version %s, the write %s", check, what, esc(gotVersion), esc(version))
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
	// Best effort: the keys are random and tiny. The missing key may have
	// been created by a lying store.
	for _, k := range []string{p.key, p.missing, p.brand, p.branded} {
		_ = d.Delete(ctx, k)
	}
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
