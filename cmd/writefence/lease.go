package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
)

var leaseShowCommand = command{
	name:    "lease show",
	args:    "<name>",
	nargs:   1,
	summary: "show a lease's holder, term, expiry and version",
	help: `
Reads the record of the lease <name> (a writefence.Lease under -prefix)
once, through Fence.InspectLease, and shows its holder, its term, the
epochs the holder draws in that term (term<<32 | n, from term<<32 + 1),
its state and the store's version token: held until its expiry (by the
holder's clock), expired (a contender takes it over at once), or released.
It only reads. writefence ls lists every lease under the prefix.

Refused: a lease never acquired (exit 3), a record that does not decode
(exit 6).

examples:
  writefence lease show -store file:///tmp/wf wal/0
  writefence lease show -json wal/0 | jq -r .holder`,
	define: defineLeaseShow,
}

var leaseReleaseCommand = command{
	name:    "lease release",
	args:    "<name>",
	nargs:   1,
	summary: "release a lease its holder can no longer release, so the next contender takes it at once",
	help: `
Releases the lease <name> on behalf of the holder -holder names, for an
operator whose holder is gone (a crashed process, a host that will not come
back) and whose contenders should not wait out its expiry. -holder must be
the holder the record names (lease show shows it): a lease held by anyone
else is refused (exit 1) and nothing is written.

It replaces the record, at exactly the version lease show read, with one
released at the same term (Lease.Settle): one conditional write, refused
if the holder renewed or anyone wrote meanwhile. The next contender then
takes the lease at once, at the next term, and seals its shards, after
which every write of the released holder, if it still runs, is refused. A
lease already released is reported and left as it is.

examples:
  writefence lease release -store file:///tmp/wf -holder node-a wal/0
  writefence lease release -json -holder node-a wal/0`,
	define: defineLeaseRelease,
}

// leaseResult is lease show's -json output, and part of lease release's.
type leaseResult struct {
	Outcome string     `json:"outcome"`
	Name    string     `json:"name"`
	Key     string     `json:"key"`
	Holder  string     `json:"holder"`
	Term    uint64     `json:"term"`
	State   string     `json:"state"`            // held, expired or released
	Expiry  *time.Time `json:"expiry,omitempty"` // by the holder's clock; absent once released
	Version string     `json:"version"`
}

func newLeaseResult(info writefence.LeaseInfo, now time.Time) leaseResult {
	r := leaseResult{Outcome: "ok", Name: info.Name, Key: info.Key, Holder: info.Holder, Term: info.Term, State: leaseState(info, now), Version: info.Version}
	if !info.Released() {
		r.Expiry = &info.Expiry
	}
	return r
}

// leaseState names a lease's state by this host's clock.
func leaseState(info writefence.LeaseInfo, now time.Time) string {
	switch {
	case info.Released():
		return "released"
	case now.Before(info.Expiry):
		return "held"
	}
	return "expired"
}

// leaseWhen says when a lease expires or expired, relative to now.
func leaseWhen(info writefence.LeaseInfo, now time.Time) string {
	at := info.Expiry.Format(time.RFC3339)
	switch leaseState(info, now) {
	case "held":
		return "until " + at + " (" + info.Expiry.Sub(now).Round(time.Second).String() + " from now, by its holder's clock)"
	case "expired":
		return "since " + at + " (" + now.Sub(info.Expiry).Round(time.Second).String() + " ago): the next contender takes it over"
	}
	return "the next contender takes it at once"
}

func defineLeaseShow(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, defaultTimeout)
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := sf.output()
		if err := (names{prefix: sf.prefix, leases: []string{args[0]}}).check(); err != nil {
			return o.fail(err)
		}
		return sf.withStore(ctx, o, true, func(ctx context.Context, s *opened) int {
			info, err := sf.newFence(s, "").InspectLease(ctx, args[0])
			if err != nil {
				return o.fail(leaseError(err))
			}
			now := time.Now()
			r := newLeaseResult(info, now)
			if sf.json {
				o.emit(r)
				return exitOK
			}
			first := info.Term << 32
			fields(inv.stdout,
				"name", escape.String(info.Name),
				"key", escape.String(info.Key),
				"holder", escape.String(info.Holder),
				"term", strconv.FormatUint(info.Term, 10),
				"epochs", strconv.FormatUint(first+1, 10)+" to "+strconv.FormatUint(first|(1<<32-1), 10)+" (term<<32 | n)",
				"state", r.State+", "+leaseWhen(info, now),
				"version", escape.String(info.Version))
			return exitOK
		})
	}
}

// leaseReleaseResult is lease release's -json output.
type leaseReleaseResult struct {
	leaseResult
	Released bool `json:"released"` // false: it was released already
}

func defineLeaseRelease(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, defaultTimeout)
	holder := fs.String("holder", "", "the `holder` the lease's record names, as lease show prints it (required)")
	brand := addBrandFlag(fs)
	identity := fs.String("identity", "", "wire `identity` the store's brand must hold (default "+defaults.Identity+")")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := sf.output()
		if *holder == "" {
			return o.fail(usagef("writefence: -holder is required: the holder the lease names (writefence lease show %s prints it), so that only that holder's lease is released", shellQuote(args[0])))
		}
		name := args[0]
		if err := (names{prefix: sf.prefix, identity: *identity, writers: []string{*holder}, leases: []string{name}}).check(); err != nil {
			return o.fail(err)
		}
		return sf.withWriteFence(ctx, o, *identity, *brand, func(ctx context.Context, _ *opened, fence *writefence.Fence) int {
			info, err := fence.InspectLease(ctx, name)
			if err != nil {
				return o.fail(leaseError(err))
			}
			r := leaseReleaseResult{leaseResult: newLeaseResult(info, time.Now())}
			switch {
			case info.Released():
			case info.Holder != *holder:
				return o.fail(fmt.Errorf("writefence: lease %s is held by %s at term %d, not by -holder %s: nothing written; release it as its holder, or let it expire",
					escape.String(name), escape.String(info.Holder), info.Term, escape.String(*holder)))
			default:
				// The operator asserts the holder is gone: the record is
				// released at its own term, so the next contender takes the
				// next term at once.
				l := &writefence.Lease{Fence: fence, Name: name, Holder: *holder, TTL: time.Minute}
				if err := l.Settle(ctx, info.Version, info.Term); err != nil {
					return o.fail(leaseError(err))
				}
				if after, err := fence.InspectLease(ctx, name); err == nil {
					r.leaseResult = newLeaseResult(after, time.Now())
				}
				r.Released = true
			}
			if sf.json {
				o.emit(r)
				return exitOK
			}
			if !r.Released {
				fmt.Fprintf(inv.stdout, "already released: lease %s, term %d; nothing written\n", escape.String(name), info.Term)
				return exitOK
			}
			fmt.Fprintf(inv.stdout, "released: lease %s, held by %s at term %d (released at term %d): the next contender takes it at once\n",
				escape.String(name), escape.String(info.Holder), info.Term, r.Term)
			return exitOK
		})
	}
}

// leaseError says what to do about a lease that is not there.
func leaseError(err error) error {
	if errors.Is(err, writefence.ErrNotFound) {
		return &advisedError{err, "no lease of that name was ever acquired under -prefix: check the name and -prefix (writefence ls lists the leases)"}
	}
	return err
}
