package writefence

import (
	"context"
	"fmt"
	"time"

	"github.com/writefence/writefence/internal/keys"
)

// LeaseInfo is what InspectLease learned of a lease's record from one
// read.
type LeaseInfo struct {
	Name    string    // the lease's name
	Key     string    // its record's key
	Version string    // the store's version token of exactly the bytes decoded
	Holder  string    // the holder the record names
	Term    uint64    // the term it records; the holder's epochs are Term<<32 | n
	Expiry  time.Time // when the term ends by its holder's clock, in UTC; zero once released
}

// Released reports whether the holder gave the lease up (Lease.Release).
func (i LeaseInfo) Released() bool { return i.Expiry.IsZero() }

// InspectLease reads the record of the lease named name, for an operator,
// checking no brand (promise 33): ErrNotFound for a lease never acquired,
// a *CorruptError with its version for a damaged record.
func (f *Fence) InspectLease(ctx context.Context, name string) (LeaseInfo, error) {
	e := f.engine()
	if err := e.checkConfig(); err != nil {
		return LeaseInfo{}, err
	}
	key, err := keys.Lease(f.Prefix, name)
	if err != nil {
		return LeaseInfo{}, keyErr(err)
	}
	info := LeaseInfo{Name: name, Key: key}
	s, err := retried(ctx, e, func() (*snapshot, error) { return e.readKey(ctx, key, false) })
	switch {
	case err != nil:
		return info, fmt.Errorf("writefence: lease %s: read %s: %w", esc(name), esc(key), err)
	case !s.found:
		return info, fmt.Errorf("writefence: lease %s: %s: %w", esc(name), esc(key), ErrNotFound)
	case s.damage != nil:
		return info, s.damage
	}
	info.Version = s.version
	rec, check := decodeLease(s.data)
	if check != "" {
		return info, &CorruptError{Key: key, Version: s.version, Check: "lease: " + check}
	}
	info.Holder, info.Term = rec.Holder, rec.Term
	if rec.Expiry != 0 {
		info.Expiry = time.Unix(0, rec.Expiry).UTC()
	}
	return info, nil
}
