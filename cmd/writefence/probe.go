package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/probecheck"
)

var probeCommand = command{
	name:    "probe",
	args:    "",
	nargs:   0,
	summary: "prove that the store refuses a second create-only put and a stale update",
	help: `
Runs writefence.Probe on scratch keys in the reserved space under the prefix
(deleted afterwards): a create-only put, a second create-only put that must be
refused, an update with the current version, a stale update that must be
refused, an update of a missing key that must be refused, each read back. A
store that accepts a write it should refuse exits 9 and names the check. A
sequential probe cannot catch a store that compares on the client side: run
race for that.

examples:
  writefence probe -store 's3://mirrors?endpoint=127.0.0.1:9000&secure=false'
  writefence probe -json -store valkey://127.0.0.1:6379/0`,
	define: defineProbe,
}

// probeChecks lists Probe's checks in the order it runs them.
var probeChecks = probecheck.All

// probeResult is probe's -json output.
type probeResult struct {
	Outcome string   `json:"outcome"`
	Store   string   `json:"store"`
	Trusted bool     `json:"trusted"`
	Passed  []string `json:"passed,omitempty"` // every check, on success
	Failed  string   `json:"failed,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func defineProbe(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, defaultTimeout)
	sf.addCreateFlag(fs)
	return func(ctx context.Context, inv *invocation, _ []string) int {
		o := sf.output()
		return sf.withStore(ctx, o, false, func(ctx context.Context, s *opened) int {
			err := writefence.Probe(ctx, s.store, probeKey(sf.prefix))
			var pe *writefence.ProbeError
			if err != nil && !errors.As(err, &pe) {
				return o.fail(err) // no verdict: the store could not be probed
			}
			r := probeResult{Outcome: "ok", Store: s.addr, Trusted: err == nil, Passed: probeChecks}
			if pe != nil {
				// The read-back runs after every step, so which checks passed
				// before a failure is not known from the check alone.
				r.Outcome, r.Failed, r.Error, r.Passed = "untrusted", pe.Check, message(err), nil
			}
			if sf.json {
				o.emit(r)
			} else {
				for _, c := range r.Passed {
					fmt.Fprintf(inv.stdout, "ok      %s\n", c)
				}
				if pe != nil {
					fmt.Fprintf(inv.stdout, "FAILED  %s\n", pe.Check)
					fmt.Fprintf(inv.stdout, "untrusted: %s %s; fencing over it is a no-op\n", s.addr, probeHeadline(pe))
				} else {
					fmt.Fprintf(inv.stdout, "trusted: %s enforces conditional writes\n", s.addr)
				}
			}
			if err != nil {
				fmt.Fprintln(inv.stderr, message(err))
				return exitUntrusted
			}
			return exitOK
		})
	}
}

// probeHeadline says in a few words what a store that failed the probe
// does wrong.
func probeHeadline(pe *writefence.ProbeError) string {
	switch pe.Check {
	case probecheck.ReadBack:
		if errors.Is(pe.Err, writefence.ErrNotFound) {
			return "reads back nothing after a write it acknowledged"
		}
		return "reads back other bytes than it wrote"
	case probecheck.Create, probecheck.Update:
		return "refuses a conditional write it should accept"
	}
	return "does not enforce conditional writes"
}

// probeKey is where the probe's scratch keys go: in the reserved space
// under the prefix (keys.go: prefix + "_" + name), which no shard key
// reaches, as the Fence's own probe does.
func probeKey(prefix string) string {
	return keys.Probe(prefix)
}
