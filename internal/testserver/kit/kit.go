// Package kit holds what the tests of the adapter modules share: the
// checks they all make of their stores (the conformance suite,
// writefencetest, on a real server with the options those runs share, the
// probe, the errors of each operation), and the epoch-source kit's
// Election of an election's candidates, so that each module's tests hold
// only what is its own. It is apart from testserver because the package
// writefence's own tests use testserver, and kit uses writefence.
package kit

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// Options are the suite's options for a store whose read limit is
// readLimit and whose bytes damage reaches from outside it, with
// Get/UnderOverwrite sized as testserver.KitOverwriteReads says.
func Options(damage testserver.Damager, readLimit int64) *writefencetest.Options {
	return &writefencetest.Options{
		Damage: func(ctx context.Context, key string, f writefencetest.Fault) error {
			return damage(ctx, key, testserver.Fault(f))
		},
		ReadLimit:      readLimit,
		OverwriteReads: testserver.KitOverwriteReads(),
	}
}

// Run runs the suite on store with Options(damage, readLimit).
func Run(t *testing.T, store writefence.ConditionalStore, damage testserver.Damager, readLimit int64) {
	t.Helper()
	writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return store }, Options(damage, readLimit))
}

// Store is what the adapter modules' stores all are: a ConditionalStore
// that is a Deleter and a Lister.
type Store interface {
	writefence.ConditionalStore
	writefence.Deleter
	writefence.Lister
}

// Probe checks that writefence.Probe trusts store and leaves no key
// behind, and that a Fence with Probe set pushes through it.
func Probe(t *testing.T, store Store) {
	t.Helper()
	if err := writefence.Probe(t.Context(), store, "probe/scratch"); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if keys := testserver.Keys(t, store); len(keys) > 0 {
		t.Errorf("the probe left %q behind", keys)
	}
	f := &writefence.Fence{Store: store, Probe: true}
	if err := f.Push(t.Context(), "wal", "0", "node-a", 1, []byte("segment")); err != nil {
		t.Fatalf("Push with Probe set: %v", err)
	}
}

// Permission checks that err is the refusal of the store operation op
// for want of permission: it matches fs.ErrPermission and neither
// writefence.ErrConflict nor writefence.ErrNotFound, and it is a
// *writefence.StoreError of op.
func Permission(t *testing.T, err error, op string) {
	t.Helper()
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("%s: %v; want an error matching fs.ErrPermission", op, err)
	}
	for _, s := range []error{writefence.ErrConflict, writefence.ErrNotFound} {
		if errors.Is(err, s) {
			t.Errorf("%s: %v matches %v", op, err, s)
		}
	}
	storeError(t, err, op)
}

// StoreError checks that err is a *writefence.StoreError of the operation
// op on key, and that it matches kind.
func StoreError(t *testing.T, err error, op, key string, kind error) {
	t.Helper()
	if se := storeError(t, err, op); se.Key != key {
		t.Errorf("StoreError.Key is %q; want %q", se.Key, key)
	}
	if !errors.Is(err, kind) {
		t.Fatalf("%s %q: %v; want an error matching %v", op, key, err, kind)
	}
}

// storeError returns err as a *writefence.StoreError, which it checks is
// of op.
func storeError(t *testing.T, err error, op string) *writefence.StoreError {
	t.Helper()
	var se *writefence.StoreError
	if !errors.As(err, &se) {
		t.Fatalf("%s: %v is no *writefence.StoreError", op, err)
	}
	if se.Op != op {
		t.Errorf("StoreError.Op is %q; want %q", se.Op, op)
	}
	return se
}

// Call makes the call of s that op names, on the key "k", and returns its
// error: get, create (a create-only write), update (a write conditioned
// on version), delete, or list (of every key).
func Call(ctx context.Context, s Store, op, version string) error {
	switch op {
	case "get":
		_, _, err := s.Get(ctx, "k")
		return err
	case "create":
		_, err := s.PutIfVersion(ctx, "k", []byte("x"), "")
		return err
	case "update":
		_, err := s.PutIfVersion(ctx, "k", []byte("x"), version)
		return err
	case "delete":
		return s.Delete(ctx, "k")
	case "list":
		return s.List(ctx, "", func(string) error { return nil })
	}
	panic("kit: no call " + op)
}

// EachOp hands check the error of each operation of s on the key "k",
// with the operation's name in a *writefence.StoreError's Op: a get, a
// get by prefix when s is a writefence.PrefixReader (also "get"), a
// create ("put"), a delete and a list.
func EachOp(ctx context.Context, s Store, check func(op string, err error)) {
	_, _, err := s.Get(ctx, "k")
	check("get", err)
	if p, ok := s.(writefence.PrefixReader); ok {
		_, _, _, err = p.GetPrefix(ctx, "k", 4)
		check("get", err)
	}
	_, err = s.PutIfVersion(ctx, "k", []byte("y"), "")
	check("put", err)
	check("delete", s.Delete(ctx, "k"))
	check("list", s.List(ctx, "", func(string) error { return nil }))
}

// Ops are the calls of Call that reach a store's every operation, by the
// name the operation has in a *writefence.StoreError's Op (after the
// store's own name, as in "etcd get").
var Ops = map[string]string{"get": "get", "put": "create", "delete": "delete", "list": "list"}

// Sentinels checks that err matches want and none of the other store
// sentinels (fs.ErrPermission, writefence.ErrConflict, ErrNotFound and
// ErrTooLarge); want nil: none of them. what names the case.
func Sentinels(t *testing.T, err, want error, what string) {
	t.Helper()
	for _, s := range []error{fs.ErrPermission, writefence.ErrConflict, writefence.ErrNotFound, writefence.ErrTooLarge} {
		if got := errors.Is(err, s); got != (s == want) {
			t.Errorf("%s: %v matches %v: %t; want %t", what, err, s, got, s == want)
		}
	}
}

// ShardKey is the store key of a shard's record under the default prefix.
func ShardKey(t *testing.T, plugin, shard string) string {
	t.Helper()
	k, err := keys.Shard("", plugin, shard)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Candidate is a leader of an election under test: an EpochSource that
// can resign.
type Candidate interface {
	writefence.EpochSource
	Resign(ctx context.Context) error
}

// Election is the Election of the epoch-source kit
// (writefencetest.TestEpochSource) over lead, which makes a leader that
// won its campaign; depose ends the leadership of the last one from
// outside it, and deposed is the error its Epoch then matches. The leader
// resigns with its Resign, which has a minute.
func Election[C Candidate](lead func(t *testing.T) C, depose func(t *testing.T), deposed error) writefencetest.Election {
	var leader C
	return writefencetest.Election{
		Lead: func(t *testing.T) writefence.EpochSource {
			leader = lead(t)
			return leader
		},
		Depose:  depose,
		Deposed: deposed,
		Resign: func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := leader.Resign(ctx); err != nil {
				t.Fatalf("Resign: %v", err)
			}
		},
	}
}
