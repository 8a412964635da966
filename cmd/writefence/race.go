package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/pushrace"
)

var raceCommand = command{
	name:    "race",
	args:    "",
	nargs:   0,
	summary: "race N writers for M rounds on a scratch shard and check that exactly one lands per round",
	help: `
Each round, -writers writers (each with a Fence of its own, as separate
processes would have) push the same epoch to one scratch shard. Every
writer has read the record before any of them writes: they wait for each
other at the write, then are let go in a random order, so the winner
changes from round to round. On a store whose conditional write is real
exactly one lands and the others are refused as stale; the record must then
name the winner. Two winners, none, or a record that disagrees is a
violation (exit 10): the store compares on the client side or ignores
preconditions, and one that ignores them lets every writer land, in every
round. A progress line goes to stderr while it runs, then a table of
winners per round. The scratch record is deleted afterwards unless -keep is
set, an interrupted race's too. Interrupted (SIGINT, SIGTERM), race reports
the rounds that ran to their end and exits 130; the round it cut short
proves nothing and is left out.

examples:
  writefence race -store mem://
  writefence race -store 's3://mirrors?endpoint=127.0.0.1:9000&secure=false' -writers 32 -rounds 50
  writefence race -json -store 'valkey://127.0.0.1:6379/0?script=1'`,
	define: defineRace,
}

// raceConfig is one race.
type raceConfig struct {
	writers, rounds       int
	prefix, plugin, shard string
}

// roundResult is what one round saw.
type roundResult struct {
	Round   int      `json:"round"`
	Epoch   uint64   `json:"epoch"`
	Winners []string `json:"winners"`
	Stale   int      `json:"stale"`
	Errors  []string `json:"errors,omitempty"`
}

// raceReport is race's result, and its -json output.
type raceReport struct {
	Outcome    string        `json:"outcome"`
	Store      string        `json:"store"`
	Key        string        `json:"key"`
	Writers    int           `json:"writers"`
	Rounds     int           `json:"rounds"`
	Results    []roundResult `json:"results"`
	Violations []string      `json:"violations"`
	Errors     int           `json:"errors"`
	Error      string        `json:"error,omitempty"` // the first error, when any
	// Interrupted is set when ctx ended the race (SIGINT, SIGTERM,
	// -timeout): Results holds the rounds that ran to their end.
	Interrupted bool `json:"interrupted,omitempty"`
}

func defineRace(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, 10*time.Minute)
	sf.addCreateFlag(fs)
	cfg := raceConfig{}
	fs.IntVar(&cfg.writers, "writers", 16, "concurrent writers per round, at least 2")
	fs.IntVar(&cfg.rounds, "rounds", 20, "rounds, at least 1")
	fs.StringVar(&cfg.plugin, "plugin", "writefence-race", "plugin name of the scratch shard")
	fs.StringVar(&cfg.shard, "shard", "", "shard name of the scratch shard (default: a fresh random name; must not exist)")
	keep := fs.Bool("keep", false, "keep the scratch record afterwards")
	return func(ctx context.Context, inv *invocation, _ []string) int {
		o := sf.output()
		if cfg.writers < 2 || cfg.rounds < 1 {
			return o.fail(usagef("writefence: -writers must be at least 2 and -rounds at least 1"))
		}
		if cfg.shard == "" {
			b := make([]byte, 6)
			_, _ = rand.Read(b) // crypto/rand.Read never fails
			cfg.shard = "race-" + hex.EncodeToString(b)
		}
		cfg.prefix = sf.prefix
		key, err := keys.Shard(cfg.prefix, cfg.plugin, cfg.shard)
		if err != nil {
			return o.fail(err)
		}
		return sf.withStore(ctx, o, false, func(ctx context.Context, s *opened) int {
			// The rounds count epochs from 1, so the shard must start absent.
			if _, _, err := s.store.Get(ctx, key); !errors.Is(err, writefence.ErrNotFound) {
				if err == nil {
					err = usagef("writefence: race: %s exists; race a fresh -shard", escape.String(key))
				}
				return o.fail(err)
			}
			if d, ok := s.store.(writefence.Deleter); ok && !*keep {
				defer func() {
					dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
					defer cancel()
					if err := d.Delete(dctx, key); err != nil {
						fmt.Fprintf(inv.stderr, "writefence race: cleanup: %s\n", message(err))
					}
				}()
			}
			fmt.Fprintf(inv.stderr, "race: %s, key %s, %d writers, %d rounds\n", s.addr, escape.String(key), cfg.writers, cfg.rounds)
			p := newProgress(inv.stderr, cfg.rounds)
			rep, firstErr := raceStore(ctx, s.store, cfg, p.update)
			p.finish()
			rep.Store, rep.Key = s.addr, key

			code := exitOK
			switch {
			case len(rep.Violations) > 0:
				// Seen in rounds that ran to their end: an interrupt
				// after them does not undo them.
				code, rep.Outcome = exitViolation, "violation"
			case ctx.Err() != nil:
				// Interrupted, or out of -timeout: whatever the cut round's
				// writers met (an unknown outcome, say) is the interrupt's.
				firstErr = fmt.Errorf("writefence: race: stopped after %d of %d rounds: %w", len(rep.Results), cfg.rounds, ctx.Err())
				code, rep.Outcome = classify(firstErr)
				rep.Interrupted = true
			case firstErr != nil:
				code, rep.Outcome = classify(firstErr)
			}
			switch {
			case rep.Interrupted:
				rep.Error = firstErr.Error()
				fmt.Fprintln(inv.stderr, message(firstErr))
			case firstErr != nil:
				rep.Error = firstErr.Error()
				fmt.Fprintf(inv.stderr, "writefence race: %d errors, the first: %s\n", rep.Errors, message(firstErr))
			}
			if sf.json {
				o.emit(rep)
			} else {
				printRace(inv.stdout, rep)
			}
			return code
		})
	}
}

// raceStore runs the race with pushrace.Run, the race the conformance kit
// runs. It returns the report and the first error a writer or the check met
// that is not a verdict (a network error, say): an error the race cannot
// blame on the store.
func raceStore(ctx context.Context, store writefence.ConditionalStore, cfg raceConfig, progress func(round, violations, errors int)) (raceReport, error) {
	rep := raceReport{Outcome: "ok", Writers: cfg.writers, Rounds: cfg.rounds, Violations: []string{}}
	var firstErr error
	_, err := pushrace.Run(ctx, store, pushrace.Race{
		Writers: cfg.writers, Rounds: cfg.rounds,
		Prefix: cfg.prefix, Plugin: cfg.plugin, Shard: cfg.shard,
		Progress: func(r pushrace.Round) {
			if ctx.Err() != nil {
				// The round ctx cut short proves nothing either way: a
				// writer's push was cancelled, not refused.
				return
			}
			res := roundResult{Round: r.Round, Epoch: r.Epoch, Winners: r.Winners, Stale: r.Stale}
			for _, err := range r.Errors {
				if firstErr == nil {
					firstErr = err
				}
				res.Errors = append(res.Errors, message(err))
			}
			rep.Errors += len(r.Errors)
			for _, v := range r.Violations {
				rep.Violations = append(rep.Violations, fmt.Sprintf("round %d: %s", r.Round, v))
			}
			rep.Results = append(rep.Results, res)
			if progress != nil {
				progress(r.Round, len(rep.Violations), rep.Errors)
			}
		},
	})
	if err != nil && firstErr == nil {
		firstErr = err
	}
	return rep, firstErr
}

func printRace(w io.Writer, rep raceReport) {
	fmt.Fprintf(w, "%-6s %-6s %-6s %-6s %s\n", "round", "epoch", "stale", "errors", "winners")
	for _, r := range rep.Results {
		winners := strings.Join(r.Winners, ", ")
		if winners == "" {
			winners = "-"
		}
		fmt.Fprintf(w, "%-6d %-6d %-6d %-6d %s\n", r.Round, r.Epoch, r.Stale, len(r.Errors), winners)
	}
	for _, v := range rep.Violations {
		fmt.Fprintf(w, "VIOLATION: %s\n", v)
	}
	switch {
	case len(rep.Violations) > 0:
		fmt.Fprintf(w, "result: %d violations in %d rounds: this store does not fence writers\n", len(rep.Violations), len(rep.Results))
	case rep.Interrupted:
		fmt.Fprintf(w, "result: stopped after %d of %d rounds, none of them with a violation: the race is inconclusive\n", len(rep.Results), rep.Rounds)
	case rep.Errors > 0:
		fmt.Fprintf(w, "result: no violation, but %d errors: the race is inconclusive\n", rep.Errors)
	default:
		fmt.Fprintf(w, "result: %d rounds of %d writers, exactly one winner each, the record always the winner's: no violation\n", len(rep.Results), rep.Writers)
	}
}

// progress writes one progress line to stderr while the race runs:
// rewritten in place on a terminal, otherwise at most once a second.
type progress struct {
	w        io.Writer
	rounds   int
	terminal bool
	last     time.Time // when a line was last printed
	line     string    // the latest state
	printed  string    // the line last printed
}

func newProgress(w io.Writer, rounds int) *progress {
	p := &progress{w: w, rounds: rounds}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

func (p *progress) update(round, violations, errs int) {
	p.line = fmt.Sprintf("race: round %d/%d, %d violations, %d errors", round, p.rounds, violations, errs)
	switch {
	case p.terminal:
		fmt.Fprintf(p.w, "\r%s", p.line)
		p.printed = p.line
	case time.Since(p.last) >= time.Second:
		fmt.Fprintln(p.w, p.line)
		p.last, p.printed = time.Now(), p.line
	}
}

// finish ends the progress line with the final state.
func (p *progress) finish() {
	switch {
	case p.terminal && p.printed != "":
		fmt.Fprintln(p.w)
	case !p.terminal && p.line != p.printed:
		fmt.Fprintln(p.w, p.line)
	}
}
