package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/writefence/writefence"
)

// Exit statuses; see the package documentation.
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitNotFound  = 3
	exitStale     = 4
	exitWire      = 5
	exitCorrupt   = 6
	exitConflict  = 7
	exitUnknown   = 8
	exitUntrusted = 9
	exitViolation = 10
	exitAtRisk    = 11
	exitRegressed = 12
	// exitInterrupted follows the shell's 128+SIGINT, for SIGTERM too: the
	// command stopped because it was asked to, not because the store failed.
	exitInterrupted = 130
)

// outcome is one exit status and the errors that lead to it.
type outcome struct {
	code int
	name string // the "outcome" of -json output
	is   func(error) bool
	doc  string
}

// outcomes maps errors to exit statuses, in the order they are tested: an
// error can match several sentinels (an unknown outcome wraps its cause, a
// failed probe what the store did instead), and the first match names it.
var outcomes = []outcome{
	{exitOK, "ok", func(err error) bool { return err == nil }, "success"},
	{exitUntrusted, "untrusted", is(writefence.ErrUntrustedStore), "untrusted store: the probe saw the store ignore a precondition"},
	{exitUnknown, "outcome_unknown", is(writefence.ErrOutcomeUnknown), "outcome unknown: a write was sent but its result could not be learned; repeat the push"},
	{exitRegressed, "regressed", is(writefence.ErrEpochRegressed), "regressed: a record seen before is gone or holds a lower epoch (deleted or restored outside the fence); see settle -lost"},
	{exitWire, "wire", is(writefence.ErrWire), "wire: the brand or the record holds another wire identity"},
	{exitCorrupt, "corrupt", is(writefence.ErrCorrupt), "corrupt: the record failed a decoding check (see settle), or a blob's bytes do not match its reference"},
	{exitStale, "stale", is(writefence.ErrStaleEpoch), "stale epoch: the recorded epoch is equal or higher"},
	{exitConflict, "conflict", is(writefence.ErrConflict), "conflict: the record changed under a conditional write"},
	{exitNotFound, "not_found", is(writefence.ErrNotFound), "not found: the shard was never pushed, or a blob is not referenced (blob get) or does not exist (commit)"},
	{exitInterrupted, "interrupted", is(context.Canceled), "interrupted: SIGINT or SIGTERM stopped the command (a write in flight may have landed: run latest)"},
	{exitUsage, "usage", isUsage, "usage: a bad flag, argument or store address"},
	{exitViolation, "violation", is(errViolation), "violation: two writers landed one epoch, or the record disagrees with the winner"},
	{exitAtRisk, "at_risk", is(errAtRisk), "at risk: doctor found a store setting that can lose a record or an acknowledged write"},
	{exitError, "error", func(error) bool { return true }, "any other error (network, authentication, a refused settle, a failed write to stdout)"},
}

// errViolation marks a broken invariant seen by race or demo.
var errViolation = errors.New("writefence: violation")

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// usageError is a mistake in the command line, found before any I/O.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

func isUsage(err error) bool {
	var ue *usageError
	return errors.As(err, &ue) || errors.Is(err, writefence.ErrInvalidArgument)
}

// classify returns the exit status and the -json outcome of err.
func classify(err error) (int, string) {
	for _, o := range outcomes {
		if o.is(err) {
			return o.code, o.name
		}
	}
	panic("unreachable: the last outcome matches every error")
}

func exitHelp() string {
	var b strings.Builder
	b.WriteString("\nexit status:\n")
	for _, o := range slices.SortedFunc(slices.Values(outcomes), func(a, b outcome) int { return a.code - b.code }) {
		fmt.Fprintf(&b, "  %-3d %s\n", o.code, o.doc)
	}
	return b.String()
}

// failure is the -json form of an error: the outcome and the message, with
// the detail of the library's typed errors.
type failure struct {
	Outcome        string  `json:"outcome"`
	Error          string  `json:"error"`
	Key            string  `json:"key,omitempty"`
	Epoch          uint64  `json:"epoch,omitempty"`
	RecordedEpoch  uint64  `json:"recorded_epoch,omitempty"`
	RecordedWriter string  `json:"recorded_writer,omitempty"`
	Check          string  `json:"check,omitempty"`
	Version        string  `json:"version,omitempty"`
	Expected       string  `json:"expected,omitempty"`
	Found          *string `json:"found,omitempty"`
	Absent         bool    `json:"absent,omitempty"`
	SeenEpoch      uint64  `json:"seen_epoch,omitempty"` // regressed: the highest epoch seen before (the -floor of settle -lost is at least it)
	SeenWriter     string  `json:"seen_writer,omitempty"`
}

func newFailure(err error) failure {
	_, name := classify(err)
	f := failure{Outcome: name, Error: message(err)}
	var (
		stale   *writefence.StaleEpochError
		corrupt *writefence.CorruptError
		wire    *writefence.WireError
		probe   *writefence.ProbeError
		unknown *writefence.OutcomeUnknownError
		regress *writefence.EpochRegressedError
	)
	switch {
	case errors.As(err, &regress):
		f.Key, f.Epoch, f.SeenEpoch, f.SeenWriter = regress.Key, regress.Epoch, regress.Seen, regress.SeenWriter
		f.RecordedEpoch, f.RecordedWriter, f.Absent = regress.Found, regress.FoundWriter, regress.Absent
	case errors.As(err, &unknown):
		f.Key, f.Epoch = unknown.Key, unknown.Epoch
	case errors.As(err, &probe):
		f.Key, f.Check = probe.Key, probe.Check
	case errors.As(err, &wire):
		f.Key, f.Expected, f.Absent = wire.Key, wire.Expected, wire.Absent
		if !wire.Absent {
			f.Found = &wire.Found
		}
	case errors.As(err, &corrupt):
		f.Key, f.Check, f.Version = corrupt.Key, corrupt.Check, corrupt.Version
	case errors.As(err, &stale):
		f.Key, f.Epoch, f.RecordedEpoch, f.RecordedWriter = stale.Key, stale.Epoch, stale.RecordedEpoch, stale.RecordedWriter
	}
	return f
}

// output writes a command's results as text or, with -json, as one JSON
// object on stdout.
type output struct {
	inv  *invocation
	json bool
}

// fail reports err and returns its exit status: the message on stderr and,
// with -json, the failure on stdout.
func (o *output) fail(err error) int {
	err = advise(err, o.inv)
	code, _ := classify(err)
	fmt.Fprintln(o.inv.stderr, message(err))
	if o.json {
		o.emit(newFailure(err))
	}
	return code
}

// emit writes v as one line of JSON on stdout: a command that reports
// several objects writes JSON lines, one object per line.
func (o *output) emit(v any) {
	if err := json.NewEncoder(o.inv.stdout).Encode(v); err != nil {
		fmt.Fprintf(o.inv.stderr, "writefence %s: encode output: %v\n", o.inv.name, err)
	}
}

// message is err's text for the terminal: the library and the adapters
// prefix their errors with "writefence: ", and one wrapping another would
// print the prefix twice.
func message(err error) string {
	return strings.ReplaceAll(err.Error(), ": writefence: ", ": ")
}

// fields writes name/value lines, the names aligned.
func fields(w io.Writer, kv ...string) {
	width := 0
	for i := 0; i < len(kv); i += 2 {
		width = max(width, len(kv[i]))
	}
	for i := 0; i < len(kv); i += 2 {
		fmt.Fprintf(w, "%-*s  %s\n", width, kv[i], kv[i+1])
	}
}
