// Package hook lets the project's own tools step into the one write
// engine of writefence: the conformance kit's races hold every racer's
// write at a barrier, and the model test injects lost replies and failing
// reads, on exactly the store methods a Fence uses. A hook travels in the
// context of the call it applies to; without one the engine runs as is.
// It is not part of the public API.
package hook

import (
	"context"
	"time"
)

// Hooks are the steps a caller can take over. A nil field leaves its step
// alone.
type Hooks struct {
	// Read runs before each read the engine makes of key; a non-nil error
	// fails the read with it.
	Read func(ctx context.Context, key string) error

	// Write runs each conditional write the engine makes of key: it calls
	// write to make it (or does not) and returns what the engine sees.
	Write func(ctx context.Context, key string, write func() (string, error)) (string, error)

	// Wait replaces the back-off before a retry: the engine would sleep d
	// before attempt+1. A non-nil error ends the wait as a done ctx would.
	Wait func(ctx context.Context, attempt int, d time.Duration) error

	// Took runs once a Lease's call took the Lease's I/O slot, which
	// another call may just have given back: the simulation makes the
	// taker wait there for its turn, so that the two go on one at a time.
	Took func(ctx context.Context)

	// ListBudget, when above zero, replaces the budget of the listings of
	// a commit's check (the blobs a listing may run over before the
	// check turns to StatBlob, max(1000, 2 × the new blobs)), so that a
	// small simulation reaches the check of a long epoch.
	ListBudget int
}

type hooksKey struct{}

// With returns ctx carrying h.
func With(ctx context.Context, h *Hooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

// Read runs the read hook of ctx, if any.
func Read(ctx context.Context, key string) error {
	if h, _ := ctx.Value(hooksKey{}).(*Hooks); h != nil && h.Read != nil {
		return h.Read(ctx, key)
	}
	return nil
}

// Write runs write through the write hook of ctx, if any.
func Write(ctx context.Context, key string, write func() (string, error)) (string, error) {
	if h, _ := ctx.Value(hooksKey{}).(*Hooks); h != nil && h.Write != nil {
		return h.Write(ctx, key, write)
	}
	return write()
}

// Took runs the took hook of ctx, if any.
func Took(ctx context.Context) {
	if h, _ := ctx.Value(hooksKey{}).(*Hooks); h != nil && h.Took != nil {
		h.Took(ctx)
	}
}

// ListBudget returns the listing budget of ctx's hooks, or zero.
func ListBudget(ctx context.Context) int {
	if h, _ := ctx.Value(hooksKey{}).(*Hooks); h != nil {
		return h.ListBudget
	}
	return 0
}

// Wait sleeps d, or runs the wait hook of ctx instead; it returns ctx's
// error if ctx ends first.
func Wait(ctx context.Context, attempt int, d time.Duration) error {
	if h, _ := ctx.Value(hooksKey{}).(*Hooks); h != nil && h.Wait != nil {
		return h.Wait(ctx, attempt, d)
	}
	return Sleep(ctx, d)
}

// Sleep sleeps d; it returns ctx's error if ctx ends first. It runs no
// hook.
func Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d): // collected once it is unreachable, fired or not
		return nil
	}
}
