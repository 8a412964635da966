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

// The environment writefence exec gives its program, which -term takes
// its defaults from.
const (
	envStore  = "WRITEFENCE_STORE" // read by storeAddress too
	envPrefix = "WRITEFENCE_PREFIX"
	envLease  = "WRITEFENCE_LEASE"
	envHolder = "WRITEFENCE_HOLDER"
	envTerm   = "WRITEFENCE_TERM"
	// envIdentity is exec's -identity: the wire identity of its seals,
	// which the program's writes must carry too.
	envIdentity = "WRITEFENCE_IDENTITY"
)

// maxTerm is the highest term a push can carry: epochs are term<<32 | n.
const maxTerm = 1<<32 - 1

// termValue is -term: plain decimal digits up to maxTerm.
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

// termEndedError is a write refused because its term is over: a later
// term writes the shard. It exits as a stale epoch does (4): the store
// refuses this writer, who must stop.
type termEndedError struct {
	msg string
	err error // the TermSource's, matching ErrTermEnded
}

func (e *termEndedError) Error() string { return e.msg }
func (e *termEndedError) Unwrap() error { return e.err }

func (e *termEndedError) Is(target error) bool { return target == writefence.ErrStaleEpoch }

// ownRaceAttempts bounds the writes of one invocation that lose to a
// write of the same term and writer landing between their read and their
// write.
const ownRaceAttempts = 8

// addTermFlag adds -term to a command that writes at an epoch: the
// epoch is drawn from a term instead of -epoch.
func (w *writerFlags) addTermFlag(fs *flag.FlagSet) {
	w.flags = fs
	fs.Var(&w.term, "term", "draw the epoch from `term` instead of -epoch: above the shard's last epoch of this term by -writer (as under writefence exec)")
	// Beside -term, neither -epoch nor (under writefence exec) -writer is.
	for name, required := range map[string]string{
		"epoch":  "(required, unless -term)",
		"writer": "(required; with -term, " + envHolder + " by default)",
	} {
		f := fs.Lookup(name)
		f.Usage = strings.Replace(f.Usage, "(required)", required, 1)
	}
}

// termDefaults checks a command's -term against its other flags before
// the store is opened (check calls it): -epoch is refused beside it, and
// -writer, -prefix and -identity default to the environment writefence
// exec sets.
func (w *writerFlags) termDefaults() error {
	given := map[string]bool{}
	w.flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["epoch"] {
		return usagef("writefence: -epoch and -term: give one; -term draws the epoch")
	}
	if w.writer == "" {
		w.writer = os.Getenv(envHolder)
	}
	if w.writer == "" {
		return usagef("writefence: -term needs -writer (or %s, which writefence exec sets)", envHolder)
	}
	if id := os.Getenv(envIdentity); id != "" && !given["identity"] {
		if f := w.flags.Lookup("identity"); f != nil {
			if err := f.Value.Set(id); err != nil {
				return usagef("writefence: %s=%s: %v", envIdentity, escape.String(id), err)
			}
		}
	}
	if !given["prefix"] {
		if p := os.Getenv(envPrefix); p != "" {
			if err := (*prefixValue)(&w.prefix).Set(p); err != nil {
				return usagef("writefence: %s=%s: %v", envPrefix, escape.String(p), err)
			}
		}
	}
	return nil
}

// pushAtTerm is push -term: it draws the epoch from a TermSource of the
// term (above what the shard records for this writer and term, so
// separate invocations draw strictly rising epochs) and pushes at it, the
// brand checked as b says.
func pushAtTerm(ctx context.Context, o *output, rf *recordFlags, b brandValue, plugin, shard string) int {
	if err := rf.check(); err != nil {
		return o.fail(err)
	}
	if err := rf.names(rf.identity, false, plugin, shard).check(); err != nil {
		return o.fail(err)
	}
	payload, err := readPayload(rf.file, rf.empty, defaults.MaxPayloadSize)
	if err != nil {
		return o.fail(err)
	}
	term := rf.term.term
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
// returns it (see atTerm).
func pushTerm(ctx context.Context, fence *writefence.Fence, term uint64, plugin, shard, writer string, payload []byte) (uint64, error) {
	return atTerm(ctx, fence, "push", term, plugin, shard, writer, func(src writefence.EpochSource) (uint64, error) {
		return fence.PushFrom(ctx, src, plugin, shard, writer, payload)
	})
}

// atTerm runs write, a write of op by writer, with a TermSource of term,
// and returns the epoch it wrote at. A write that loses to another of the
// same term and writer (the program writing the shard from two processes
// at once) draws again, above it; one refused by a later term's record
// is a *termEndedError.
func atTerm(ctx context.Context, fence *writefence.Fence, op string, term uint64, plugin, shard, writer string, write func(src writefence.EpochSource) (uint64, error)) (uint64, error) {
	for attempt := 1; ; attempt++ {
		src := &writefence.TermSource{Fence: fence, Writer: writer, Term: func(context.Context) (uint64, error) { return term, nil }}
		epoch, err := write(src)
		var stale *writefence.StaleEpochError
		switch {
		case err == nil:
			return epoch, nil
		case errors.Is(err, writefence.ErrTermEnded):
			return 0, termEnded(ctx, fence, op, term, plugin, shard, err)
		case errors.As(err, &stale) && stale.RecordedEpoch>>32 == term && stale.RecordedWriter == writer && attempt < ownRaceAttempts:
			continue // a write of this term by this writer landed meanwhile: go above it
		}
		return 0, err
	}
}

// termEnded is the error of a write of op whose TermSource ended with
// err: it says what the shard records when a later term wrote it.
func termEnded(ctx context.Context, fence *writefence.Fence, op string, term uint64, plugin, shard string, err error) error {
	epoch, writer, _, lerr := fence.Latest(ctx, plugin, shard)
	if key, kerr := keys.Shard(fence.Prefix, plugin, shard); lerr == nil && kerr == nil && epoch>>32 > term {
		return &termEndedError{fmt.Sprintf("writefence: %s refused: term %d is over, %s records epoch %d of term %d by %s: the lease was lost, stop writing",
			op, term, escape.String(key), epoch, epoch>>32, escape.String(writer)), err}
	}
	return &termEndedError{"writefence: " + op + " refused: " + strings.TrimPrefix(message(err), "writefence: "), err}
}
