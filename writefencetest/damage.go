package writefencetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
)

// The checks of damage done from outside the store (Options.Damage). A
// store that gives every write a new version sees an overwrite with the
// damaged bytes as any other write: Get returns those bytes under a
// version no intact write returned. A store that keeps its version beside
// the bytes must notice damage in place by its own check: Get returns a
// *writefence.CorruptError whose Version no intact content had. Either
// way a write conditioned on a version from before the damage is refused
// with ErrCorrupt or ErrConflict and writes nothing, so a version
// remembered from before never replaces bytes unseen; a write conditioned
// on the version Get reported replaces them (that is how an operator
// settles damage, Fence.Settle); and GetPrefix reports what Get does.
//
// Those checks damage small values. A store whose writes check a bounded
// part of the object they replace may miss damage beyond it that keeps
// the object's size (see writefence.ConditionalStore); testDamageMiddle
// checks what such a store must still do, and what it may do instead.

// damageRun is one key under damage and what the check knows of it.
type damageRun struct {
	t       *testing.T
	sc      *scope
	key     string
	data    []byte          // the intact bytes last written
	version string          // their version
	intact  map[string]bool // every version of intact bytes seen
	want    []byte          // the bytes the damage left, once damaged
}

// newDamageRun writes intact bytes at a fresh key, or skips the test when
// the suite has no way to damage the store.
func newDamageRun(t *testing.T, sc *scope, name string) *damageRun {
	t.Helper()
	if sc.opts.Damage == nil {
		t.Skip("Options.Damage is not set: the suite cannot damage the store from outside")
	}
	d := &damageRun{t: t, sc: sc, key: sc.key(name), intact: map[string]bool{}}
	d.write(nil, "", []byte("intact bytes, to be damaged from outside the store"))
	return d
}

// damaged is what the store reports of damaged bytes: the version of a
// *writefence.CorruptError, or the damaged bytes and their version.
type damaged struct {
	version string
	corrupt bool
}

func (s damaged) String() string {
	if s.corrupt {
		return fmt.Sprintf("a *writefence.CorruptError with version %q", s.version)
	}
	return fmt.Sprintf("the damaged bytes with version %q", s.version)
}

// damage does f to the key, whose bytes are from before, and returns what
// Get then reports, checked.
func (d *damageRun) damage(f Fault, from []byte) damaged {
	d.t.Helper()
	if err := d.sc.opts.Damage(d.t.Context(), d.key, f); err != nil {
		d.t.Fatalf("Options.Damage(%q, %+v): %v", d.key, f, err)
	}
	d.want = f.apply(from)
	return d.see(fmt.Sprintf("after Options.Damage(%q, %+v)", d.key, f), "")
}

// see reads the damaged key with Get and GetPrefix and fails the test
// unless they report the damage as the contract says, and agree. With
// predate set, a GetPrefix of less than the whole object may instead
// return that version, the one from before the damage, with the leading
// bytes as they are (damage beyond the part a store checks).
func (d *damageRun) see(when, predate string) damaged {
	t := d.t
	t.Helper()
	ctx := t.Context()
	data, v, err := d.sc.s.Get(ctx, d.key)
	var ce *writefence.CorruptError
	var seen damaged
	switch {
	case err == nil:
		seen = damaged{version: v}
		switch {
		case d.intact[v]:
			t.Errorf("%s Get(%q) returned %s with version %q, a version of intact bytes: the damage went unseen", when, d.key, describe(data), v)
		case !bytes.Equal(data, d.want):
			t.Errorf("%s Get(%q) returned %s with version %q; want the damaged bytes %s, or a *writefence.CorruptError",
				when, d.key, describe(data), v, describe(d.want))
		}
	case errors.As(err, &ce):
		seen = damaged{version: ce.Version, corrupt: true}
		wantTyped(t, err, fmt.Sprintf("%s Get(%q)", when, d.key))
		switch {
		case errors.Is(err, writefence.ErrNotFound), errors.Is(err, writefence.ErrConflict):
			t.Errorf("%s Get(%q): %v matches ErrNotFound or ErrConflict; damage is neither", when, d.key, err)
		case ce.Version == "":
			t.Errorf("%s Get(%q): %v: a *writefence.CorruptError without a version, which no write can settle", when, d.key, err)
		case d.intact[ce.Version]:
			t.Errorf("%s Get(%q): %v: the version %q of the damage is a version of intact bytes", when, d.key, err, ce.Version)
		case ce.Head != nil && !bytes.HasPrefix(d.want, ce.Head):
			t.Errorf("%s Get(%q): %v: Head holds %s, which does not start the damaged bytes %s", when, d.key, err, describe(ce.Head), describe(d.want))
		}
	default:
		t.Fatalf("%s Get(%q): %v; want the damaged bytes under a new version, or a *writefence.CorruptError", when, d.key, err)
	}

	for _, n := range []int64{1, int64(len(d.want)/2) + 1, int64(len(d.want)) + 1} {
		call := fmt.Sprintf("%s GetPrefix(%q, %d)", when, d.key, n)
		prefix, size, pv, err := writefence.GetPrefix(ctx, d.sc.s, d.key, n)
		var pce *writefence.CorruptError
		switch {
		case predate != "" && n < int64(len(d.want)) && err == nil && pv == predate:
			if !bytes.Equal(prefix, d.want[:n]) || size != int64(len(d.want)) {
				t.Errorf("%s returned %s, size %d, the version %q from before the damage; want the leading bytes of %s and its size",
					call, describe(prefix), size, pv, describe(d.want))
			}
		case seen.corrupt && !errors.As(err, &pce):
			t.Errorf("%s returned %s, size %d, version %q, error %v; want %s, as Get returned", call, describe(prefix), size, pv, err, seen)
		case seen.corrupt && pce.Version != seen.version:
			t.Errorf("%s: %v: the version %q of the damage; Get reported %q", call, err, pce.Version, seen.version)
		case seen.corrupt:
			wantTyped(t, err, call)
		case err != nil:
			t.Errorf("%s: %v; want %s, as Get returned", call, err, seen)
		case !bytes.Equal(prefix, d.want[:min(n, int64(len(d.want)))]) || size != int64(len(d.want)) || pv != seen.version:
			t.Errorf("%s returned %s, size %d, version %q; want the leading bytes of %s, its size and version %q, as Get returned",
				call, describe(prefix), size, pv, describe(d.want), seen.version)
		}
	}
	return seen
}

// refuse checks that a write conditioned on each of stale (versions from
// before the damage, "" for create-only) is refused, through every write
// path, and leaves the damage as seen. The version from right before the
// damage comes first: it is the one a writer remembers, and a store that
// remembers it too (a cache) may forget it after any refusal.
func (d *damageRun) refuse(seen damaged, stale ...string) {
	t := d.t
	t.Helper()
	for _, p := range writePaths {
		for _, expect := range stale {
			call := p.call(d.key, []byte("never"), expect)
			_, err := p.write(t.Context(), d.sc.s, d.key, []byte("never"), expect)
			switch {
			case err == nil:
				t.Fatalf("%s over damaged bytes, with a version from before the damage, landed; want an error matching writefence.ErrCorrupt or writefence.ErrConflict, writing nothing", call)
			case errors.Is(err, writefence.ErrNotFound) || !errors.Is(err, writefence.ErrCorrupt) && !errors.Is(err, writefence.ErrConflict):
				t.Errorf("%s over damaged bytes: %v; want an error matching writefence.ErrCorrupt or writefence.ErrConflict", call, err)
			default:
				wantTyped(t, err, call+" over damaged bytes")
			}
			if again := d.see("after the refused "+call, ""); again != seen {
				t.Errorf("after the refused %s the store reports %s; before it, %s: the refused write changed the key", call, again, seen)
			}
		}
	}
}

// write writes data conditioned on the version seen reported (expect), and
// checks it lands and is read back intact.
func (d *damageRun) write(seen *damaged, expect string, data []byte) {
	t := d.t
	t.Helper()
	v := put(t, d.sc.s, d.key, data, expect)
	if seen != nil && v == seen.version {
		t.Errorf("PutParts(%q) replacing damaged bytes returned %q, the version of the damage; a token must not name two contents", d.key, v)
	}
	wantContent(t, d.sc.s, d.key, data, v)
	wantPrefixes(t, d.sc.s, d.key, data, v)
	d.data, d.version = data, v
	d.intact[v] = true
}

// settle replaces the damage seen with data, conditioned on its version.
func (d *damageRun) settle(seen damaged, data []byte) {
	d.t.Helper()
	d.write(&seen, seen.version, data)
}

// testDamageFlip flips a bit: the store reports the damage, refuses a
// write on the version from before, reports a second flip as other
// damage, refusing the first damage's version then, and takes a write on
// the version it reported last.
func testDamageFlip(t *testing.T, sc *scope) {
	d := newDamageRun(t, sc, "damage-flip")
	f := Fault{Flip: len(d.data) / 2}
	first := d.damage(f, d.data)
	d.refuse(first, d.version, "")

	again := d.damage(Fault{Flip: f.Flip + 1}, d.want)
	if again.version == first.version {
		t.Errorf("two different damages of %q are both reported with version %q; the version must name the damaged bytes", d.key, again.version)
	}
	d.refuse(again, d.version, first.version, "")
	d.settle(again, []byte("settled after two flips"))
}

// testDamageEmpty empties the key's value: the key still exists, holding
// nothing, which is damage, not absence.
func testDamageEmpty(t *testing.T, sc *scope) {
	d := newDamageRun(t, sc, "damage-empty")
	seen := d.damage(Fault{Empty: true}, d.data)
	d.refuse(seen, d.version, "")
	d.settle(seen, []byte("settled after emptying"))
}

// testDamageTwice does the same damage to the same bytes twice, settling
// in between with those bytes again: the second damage may be reported
// with the version of the first, and must be settled as the first was.
func testDamageTwice(t *testing.T, sc *scope) {
	d := newDamageRun(t, sc, "damage-twice")
	f := Fault{Flip: 3}
	intact := d.data
	for range 2 {
		seen := d.damage(f, intact)
		d.refuse(seen, d.version, "")
		d.settle(seen, intact)
	}
}

// testDamageMiddle flips a bit in the middle of a larger value, beyond the
// bounded part a store may check on its writes, once for each write path.
// Get must report the damage; GetPrefix may report it, or the version from
// before it (see). A write conditioned on that version is refused, as over
// any damage, leaving the damage; or it lands, and the key holds its bytes
// intact. A write conditioned on the version Get reported lands.
func testDamageMiddle(t *testing.T, sc *scope) {
	d := newDamageRun(t, sc, "damage-middle")
	size := 64 << 10
	if limit := sc.sizeLimit(t); limit > 0 {
		size = int(min(int64(size), limit))
	}
	big := make([]byte, size)
	for i := range big {
		big[i] = byte(i*31 + 7)
	}
	for i, p := range writePaths {
		d.write(nil, d.version, big)
		before := d.version
		f := Fault{Flip: size/2 + i} // other damage each time, settled once each
		if err := d.sc.opts.Damage(t.Context(), d.key, f); err != nil {
			t.Fatalf("Options.Damage(%q, %+v): %v", d.key, f, err)
		}
		d.want = f.apply(big)
		seen := d.see(fmt.Sprintf("after Options.Damage(%q, %+v) of a %d-byte value", d.key, f, size), before)

		after := []byte("written over damage in the middle")
		call := p.call(d.key, after, before)
		v, err := p.write(t.Context(), d.sc.s, d.key, after, before)
		switch {
		case err == nil:
			if v == before || v == seen.version {
				t.Errorf("%s over damage in the middle landed with version %q, a version of other bytes", call, v)
			}
			wantContent(t, d.sc.s, d.key, after, v)
			d.data, d.version = after, v
			d.intact[v] = true
			continue
		case errors.Is(err, writefence.ErrNotFound) || !errors.Is(err, writefence.ErrCorrupt) && !errors.Is(err, writefence.ErrConflict):
			t.Errorf("%s over damage in the middle: %v; want it to land, or an error matching writefence.ErrCorrupt or writefence.ErrConflict", call, err)
		default:
			wantTyped(t, err, call+" over damage in the middle")
		}
		if again := d.see("after the refused "+call, before); again != seen {
			t.Errorf("after the refused %s the store reports %s; before it, %s: the refused write changed the key", call, again, seen)
		}
		d.settle(seen, []byte("settled after damage in the middle"))
	}
}
