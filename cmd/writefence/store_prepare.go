package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/writefence/writefence/internal/escape"
)

// addCreateFlag adds -create to a command that writes: without it a store
// that does not exist (a directory, a bucket, a table, a container) is
// refused, so that a mistyped address never becomes a new, empty store in
// which every epoch lands.
func (sf *storeFlags) addCreateFlag(fs *flag.FlagSet) {
	fs.BoolVar(&sf.create, "create", false, "create the store (a directory, bucket, table or container) if it does not exist, as init does")
}

// addBlobsFlag adds -blobs to a command that reads or writes blobs: the
// blobs may live in another store than the records (Fence.Blobs).
func (sf *storeFlags) addBlobsFlag(fs *flag.FlagSet) {
	fs.StringVar(&sf.blobs, "blobs", os.Getenv("WRITEFENCE_BLOBS"),
		"`address` of the store that holds the blobs, under the same -prefix, when -store holds none (default $WRITEFENCE_BLOBS, else -store)")
}

// missingError is a store whose bucket, table, container or directory does
// not exist. Retrying does not help: it has to be created (writefence
// init, or -create).
type missingError struct {
	addr string // the store's address, as given
	what string // "bucket", "table", "container" or "directory"
	name string
	// write tells that the command writes, and so takes -create.
	write bool
}

// readyUnless is what a store's ready check returns once it asked the
// store for its bucket, table or container (what, named name): ctx's
// error when ctx ended, a *missingError when missing, else nil. Any other
// failure of the asking (a credential refused, no permission to ask) is
// left to the command's own requests, which say more.
//
//lint:ignore U1000 the stores' files use it, and a build may leave them all out
func readyUnless(ctx context.Context, missing bool, addr, what, name string) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case missing:
		return &missingError{addr: addr, what: what, name: name}
	}
	return nil
}

func (e *missingError) Error() string {
	create := ""
	if e.write {
		create = ", or pass -create"
	}
	what := e.what + " " + escape.String(e.name)
	if e.what == "directory" {
		what = "no store at " + escape.String(e.name) + ": the directory holds none"
	} else {
		what += " does not exist"
	}
	return fmt.Sprintf("writefence: %s (%s): check -store and $WRITEFENCE_STORE; to create it, run: writefence init -store %s%s",
		what, escape.String(e.addr), shellQuote(e.addr), create)
}

// fewReplicasError is a store with fewer replicas online than wait= asks:
// no write could be confirmed. doctor reports it as a finding instead.
type fewReplicasError struct{ error }

func (e *fewReplicasError) Unwrap() error { return e.error }

// prepare opens the store of -blobs, if any, then checks that the opened
// store answers and exists (opened.ready), creating it with -create on a
// command that writes, then the store of -blobs the same way, sets
// s.blobs, and returns it to be closed.
func (sf *storeFlags) prepare(ctx context.Context, s *opened, readOnly bool) (*opened, error) {
	// doctor reads a store's settings whatever they lack: too few
	// replicas, or a table not created yet, are what it reports on.
	var few *fewReplicasError
	var missing *missingError
	var b *opened
	if sf.blobs != "" && sf.blobs != s.addr {
		// Opened first, so that a malformed -blobs creates nothing.
		var err error
		if b, err = openStoreMode(ctx, sf.blobs, readOnly); err != nil {
			var ue *usageError
			if errors.As(err, &ue) {
				return nil, usagef("writefence: -blobs: %s", strings.TrimPrefix(ue.msg, "writefence: "))
			}
			return nil, fmt.Errorf("writefence: -blobs: %w", err)
		}
	}
	if err := ensure(ctx, s, readOnly, sf.create); err != nil && !(sf.audit && (errors.As(err, &few) || errors.As(err, &missing))) {
		return b, err
	}
	if b == nil {
		return nil, nil
	}
	if err := ensure(ctx, b, readOnly, sf.create); err != nil {
		return b, err
	}
	s.blobs = b.store
	return b, nil
}

// ensure runs s's ready check and, when it finds the store missing and the
// command writes with -create, creates it.
func ensure(ctx context.Context, s *opened, readOnly, create bool) error {
	if s.ready == nil {
		return nil
	}
	err := s.ready(ctx)
	var missing *missingError
	if !errors.As(err, &missing) {
		return err
	}
	if readOnly || !create || s.create == nil {
		missing.write = !readOnly
		return missing
	}
	return s.create(ctx)
}

// durationValue is a duration flag whose refusal says what it wants: the
// flag package's own says "parse error" for "-timeout 5".
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	switch {
	case err != nil && strings.Trim(s, "0123456789.") == "":
		return fmt.Errorf("a duration needs a unit: %ss for seconds, %sm for minutes", s, s)
	case err != nil:
		return errors.New("want a duration such as 30s, 5m or 1h30m")
	case v < 0:
		return errors.New("want a duration of 0 or more")
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string {
	if d == nil {
		return "0s"
	}
	return time.Duration(*d).String()
}
