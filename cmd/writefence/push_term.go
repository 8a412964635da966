package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

// The environment writefence exec gives its program, which push -term
// takes its defaults from.
const (
	envStore  = "WRITEFENCE_STORE" // read by storeAddress too
	envPrefix = "WRITEFENCE_PREFIX"
	envLease  = "WRITEFENCE_LEASE"
	envHolder = "WRITEFENCE_HOLDER"
	envTerm   = "WRITEFENCE_TERM"
)

// maxTerm is the highest term a push can carry: epochs are term<<32 | n.
const maxTerm = 1<<32 - 1

// termValue is push's -term: plain decimal digits up to maxTerm.
type termValue struct {
	set  bool
	term uint64
}

func (v *termValue) String() string {
	if v == nil || !v.set {
		return ""
	}
	return strconv.FormatUint(v.term, 10)
}

func (v *termValue) Set(s string) error {
	var e epochValue
	if err := e.Set(s); err != nil {
		return err
	}
	if uint64(e) > maxTerm {
		return fmt.Errorf("out of range: a term is at most %d (2^32-1)", uint64(maxTerm))
	}
	v.set, v.term = true, uint64(e)
	return nil
}

// termEndedError is a push refused because its term is over: a later
// term writes the shard. It exits as a stale epoch does (4): the store
// refuses this writer, who must stop.
type termEndedError struct {
	msg string
	err error // the TermSource's, matching ErrTermEnded
}

func (e *termEndedError) Error() string { return e.msg }
func (e *termEndedError) Unwrap() error { return e.err }

func (e *termEndedError) Is(target error) bool { return target == writefence.ErrStaleEpoch }

// ownRaceAttempts bounds the pushes of one invocation that lose to a push
// of the same term and writer landing between their read and their write.
const ownRaceAttempts = 8

// pushAtTerm is push -term: it draws the epoch from a TermSource of term
// (above what the shard records for this writer and term, so separate
// invocations draw strictly rising epochs) and pushes at it, the brand
// checked as b says. fs tells which flags were given: -writer and -prefix
// default to the environment writefence exec sets.
func pushAtTerm(ctx context.Context, fs *flag.FlagSet, o *output, rf *recordFlags, b brandValue, term uint64, plugin, shard string) int {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["epoch"] {
		return o.fail(usagef("writefence: -epoch and -term: give one; -term draws the epoch"))
	}
	if rf.writer == "" {
		rf.writer = os.Getenv(envHolder)
	}
	if rf.writer == "" {
		return o.fail(usagef("writefence: -term needs -writer (or %s, which writefence exec sets)", envHolder))
	}
	if !given["prefix"] {
		if p := os.Getenv(envPrefix); p != "" {
			if err := (*prefixValue)(&rf.prefix).Set(p); err != nil {
				return o.fail(err)
			}
		}
	}
	payload, err := readPayload(rf.file, rf.empty, defaults.MaxPayloadSize)
	if err != nil {
		return o.fail(err)
	}
	return rf.withWriteFence(ctx, o, rf.identity, b, func(ctx context.Context, _ *opened, fence *writefence.Fence) int {
		epoch, err := pushTerm(ctx, fence, term, plugin, shard, rf.writer, payload)
		if err != nil {
			return o.fail(err)
		}
		key, _ := keys.Shard(rf.prefix, plugin, shard)
		if rf.json {
			o.emit(pushResult{landed(key, plugin, shard, rf.writer, epoch), len(payload)})
		} else {
			fmt.Fprintf(o.inv.stdout, "landed: %s epoch %d (term %d, #%d) by %s, %d bytes\n",
				escape.String(key), epoch, epoch>>32, epoch&maxTerm, escape.String(rf.writer), len(payload))
		}
		return exitOK
	})
}

// pushTerm pushes payload at the next epoch of term for writer and
// returns it. A push that loses to another of the same term and writer
// (the program pushing the shard from two processes at once) draws again,
// above it; one refused by a later term's record is a *termEndedError.
func pushTerm(ctx context.Context, fence *writefence.Fence, term uint64, plugin, shard, writer string, payload []byte) (uint64, error) {
	for attempt := 1; ; attempt++ {
		src := &writefence.TermSource{Fence: fence, Writer: writer, Term: func(context.Context) (uint64, error) { return term, nil }}
		epoch, err := fence.PushFrom(ctx, src, plugin, shard, writer, payload)
		var stale *writefence.StaleEpochError
		switch {
		case err == nil:
			return epoch, nil
		case errors.Is(err, writefence.ErrTermEnded):
			return 0, termEnded(ctx, fence, term, plugin, shard, err)
		case errors.As(err, &stale) && stale.RecordedEpoch>>32 == term && stale.RecordedWriter == writer && attempt < ownRaceAttempts:
			continue // a push of this term by this writer landed meanwhile: go above it
		}
		return 0, err
	}
}

// termEnded is the error of a push whose TermSource ended with err: it
// says what the shard records when a later term wrote it.
func termEnded(ctx context.Context, fence *writefence.Fence, term uint64, plugin, shard string, err error) error {
	epoch, writer, _, lerr := fence.Latest(ctx, plugin, shard)
	if key, kerr := keys.Shard(fence.Prefix, plugin, shard); lerr == nil && kerr == nil && epoch>>32 > term {
		return &termEndedError{fmt.Sprintf("writefence: push refused: term %d is over, %s records epoch %d of term %d by %s: the lease was lost, stop writing",
			term, escape.String(key), epoch, epoch>>32, escape.String(writer)), err}
	}
	return &termEndedError{"writefence: push refused: " + strings.TrimPrefix(message(err), "writefence: "), err}
}
