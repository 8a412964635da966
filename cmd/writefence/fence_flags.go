package main

import (
	"context"
	"errors"
	"flag"

	"github.com/writefence/writefence"
)

// brandValue is -brand: how a command that writes checks the store's
// brand (its wire identity) first. The zero value is the default: a brand
// that is installed must hold the command's identity, and a store without
// one is written as it is, so that a store branded by "brand install"
// refuses a program of another format without every command line having
// to ask for it.
type brandValue string

const (
	brandInstalled = ""       // the default: verify a brand that is installed
	brandVerify    = "verify" // refuse a store without the brand, or with another
	brandClaim     = "claim"  // brand an empty store first
	brandNone      = "none"   // check no brand
)

func (b *brandValue) Set(s string) error {
	switch s {
	case brandVerify, brandClaim, brandNone:
		*b = brandValue(s)
		return nil
	}
	return errors.New("want verify, claim or none (without -brand an installed brand is verified)")
}

func (b *brandValue) String() string {
	if b == nil {
		return ""
	}
	return string(*b)
}

// addBrandFlag adds -brand to a command that writes.
func addBrandFlag(fs *flag.FlagSet) *brandValue {
	b := new(brandValue)
	fs.Var(b, "brand", "the store's brand, checked before the first write: verify (refuse a store nobody branded), "+
		"claim (brand an empty store first) or none (no check); by default an installed brand must hold -identity")
	return b
}

// newFence returns a Fence over s with the store flags' prefix, identity,
// and the store of -blobs, if any.
func (sf *storeFlags) newFence(s *opened, identity string) *writefence.Fence {
	return &writefence.Fence{Store: s.store, Blobs: s.blobs, Prefix: sf.prefix, Identity: identity}
}

// writeFence returns newFence for a command that writes, with its brand
// checked as b says: the default reads the brand key once, refuses another
// identity than the Fence's (a *writefence.WireError) and accepts a store
// that holds no brand.
func (sf *storeFlags) writeFence(ctx context.Context, s *opened, identity string, b brandValue) (*writefence.Fence, error) {
	f := sf.newFence(s, identity)
	switch b {
	case brandVerify:
		f.Brand = writefence.BrandVerify
	case brandClaim:
		f.Brand = writefence.BrandClaim
	case brandInstalled:
		err := f.VerifyBrand(ctx)
		var wire *writefence.WireError
		if err != nil && !(errors.As(err, &wire) && wire.Absent) {
			return nil, brandAdvice(err)
		}
	}
	return f, nil
}

// withWriteFence opens the store as withStore does, for a command that
// writes, and runs use with writeFence's Fence over it.
func (sf *storeFlags) withWriteFence(ctx context.Context, o *output, identity string, b brandValue, use func(ctx context.Context, s *opened, fence *writefence.Fence) int) int {
	return sf.withStore(ctx, o, false, func(ctx context.Context, s *opened) int {
		fence, err := sf.writeFence(ctx, s, identity, b)
		if err != nil {
			return o.fail(err)
		}
		return use(ctx, s, fence)
	})
}

// brandAdvice says what a refusal by an installed brand means.
func brandAdvice(err error) error {
	var wire *writefence.WireError
	if !errors.As(err, &wire) || wire.Absent {
		return err
	}
	return &advisedError{err, "the store is branded for another format (writefence brand verify shows it): " +
		"run the program of that format, or check -identity; -brand none writes without checking the brand"}
}
