package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/overwrite"
)

var doctorCommand = command{
	name:    "doctor",
	args:    "",
	nargs:   0,
	summary: "check the store's own settings that can lose a record or an acknowledged write (with scratch writes unless -writes=false), and say how to fix each",
	help: `
The record is how the store remembers a shard's epoch: a setting that deletes
it or rolls it back lets a deposed writer land as if the shard were new. doctor
reads the store's own settings and prints one finding per check: its level,
what it found, what that means for the fence and the exact fix.

  risk     can lose a record or an acknowledged write: exit 11
  warn     weakens the fence or blocks writes, but loses nothing by itself
  unknown  could not be read (the message says which permission is missing)
  ok       read, and safe

What each store is asked:
  s3://      lifecycle rules that expire or transition objects under the
             prefix; versioning; whether the bucket policy refuses
             unconditional writes and deletes of records; and, with -writes,
             whether the server refuses a write without a condition to a
             scratch key under the prefix (writefence policy s3 prints a
             policy that makes it refuse)
  gs://      lifecycle rules that delete objects under the prefix; a
             retention policy, a default event-based hold and holds or
             retention on the objects under the prefix; versioning and soft
             delete
  valkey://  maxmemory-policy, persistence (AOF, RDB saves), replicas
             without wait=N; on valkey+cluster:// each primary, and slots
             whose primary has no replica
  dynamodb:// a TTL on the table; a global table's replicas
  postgres:// synchronous_commit, fsync, standbys without a synchronous one
  etcd://    the number of members
  file://    a directory on a file system that a reboot empties (tmpfs)

With -writes (the default) doctor also checks reads under concurrent
overwrite for -overwrite (10s): one writer overwrites a scratch key in the
reserved space under the prefix while readers read it, and a read that pairs
one write's bytes with another write's version token is reported and exits 9,
as probe's untrusted store. No record is ever written: every write goes to a
scratch key in the reserved space, deleted afterwards. -writes=false only
reads settings.

Exit status: 9 when reads under overwrite mispair, else 11 when a finding can
lose a record or an acknowledged write, else 1 when a setting could not be
read, else 0.

examples:
  writefence doctor -store 's3://mirrors?endpoint=127.0.0.1:9000&secure=false'
  writefence doctor -writes=false -store valkey://127.0.0.1:6379/0
  writefence doctor -json -overwrite 30s -store gs://mirrors`,
	define: defineDoctor,
}

// errAtRisk marks a doctor run that found a setting that can lose a
// record or an acknowledged write: test with errors.Is.
var errAtRisk = errors.New("writefence: at risk")

// atRiskError is doctor's verdict on a store with n such settings.
type atRiskError struct{ n int }

func (e *atRiskError) Error() string {
	return fmt.Sprintf("writefence doctor: %s can lose a record or an acknowledged write", plural(e.n, "setting"))
}

func (e *atRiskError) Is(target error) bool { return target == errAtRisk }

// level is how much a finding matters.
type level string

const (
	levelOK      level = "ok"
	levelWarn    level = "warn"
	levelUnknown level = "unknown"
	levelRisk    level = "risk"
)

// finding is one check of doctor: -json prints each as one line.
type finding struct {
	Check       string `json:"check"` // what was read, e.g. "s3.lifecycle"
	Level       level  `json:"level"`
	Found       string `json:"found"`                 // what the setting is
	Consequence string `json:"consequence,omitempty"` // what it means for the fence
	Fix         string `json:"fix,omitempty"`         // what to do about it
}

// audit collects the findings of one doctor run.
type audit struct {
	prefix    string // the fence's key prefix, never empty
	writes    bool   // checks may write scratch keys in the reserved space
	findings  []finding
	untrusted bool // reads under overwrite paired bytes and versions of different writes
}

// auditor reads a store's own settings into a. The openers of the stores
// that have settings to read set one (opened.audit).
type auditor func(ctx context.Context, a *audit)

// addressAudits are the auditors of the stores whose settings are read
// from their address rather than through an SDK client.
var addressAudits = map[string]func(u *url.URL) auditor{
	"mem": func(*url.URL) auditor {
		return note("mem.memory", "records live in this process's memory", "every record is gone when the command exits: mem:// is for trying things out",
			"use a store that outlives the process")
	},
	"azblob": func(*url.URL) auditor {
		return note("azblob.lifecycle", "lifecycle management and soft delete are set on the storage account, which the blob API cannot read",
			"a lifecycle rule that deletes or tiers blobs under the prefix deletes records",
			"in the account's Lifecycle management, check that no rule matches blobs under the prefix; turn on blob soft delete and versioning to recover a deleted record")
	},
}

// note is an auditor that adds one warning: what doctor cannot read.
func note(check, found, consequence, fix string) auditor {
	return func(_ context.Context, a *audit) {
		a.add(finding{Check: check, Level: levelWarn, Found: found, Consequence: consequence, Fix: fix})
	}
}

func (a *audit) add(f finding) { a.findings = append(a.findings, f) }

// ok adds a finding of a setting that is safe.
func (a *audit) ok(check, found string) {
	a.add(finding{Check: check, Level: levelOK, Found: found})
}

// unknown adds a setting that could not be read because of err, with
// what would let doctor read it.
func (a *audit) unknown(check string, err error, fix string) {
	a.add(finding{Check: check, Level: levelUnknown, Found: "could not be read: " + message(err), Fix: fix})
}

// scratch returns a fresh key in the reserved space under the prefix for
// a check named name: no shard key reaches it (keys.go). The braces keep
// it in one Valkey cluster slot, as the probe's keys.
func (a *audit) scratch(name string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return keys.Probe(a.prefix) + "-doctor-" + name + "-{" + hex.EncodeToString(b) + "}"
}

// count returns how many findings have level l.
func (a *audit) count(l level) int {
	n := 0
	for _, f := range a.findings {
		if f.Level == l {
			n++
		}
	}
	return n
}

// doctorResult is doctor's last -json line.
type doctorResult struct {
	Outcome  string `json:"outcome"`
	Store    string `json:"store"`
	Prefix   string `json:"prefix"`
	Risks    int    `json:"risks"`
	Warnings int    `json:"warnings"`
	Unknown  int    `json:"unknown"`
	Error    string `json:"error,omitempty"`
}

func defineDoctor(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, 2*time.Minute)
	writes := fs.Bool("writes", true, "run the checks that write scratch keys in the reserved space under the prefix (false: read settings only)")
	overwriteFor := fs.Duration("overwrite", 10*time.Second, "how long to check reads under concurrent overwrite (0: skip it)")
	return func(ctx context.Context, inv *invocation, _ []string) int {
		o := sf.output()
		if *overwriteFor < 0 {
			return o.fail(usagef("writefence doctor: -overwrite %s: want a duration of 0 or more", *overwriteFor))
		}
		sf.audit = true
		return sf.withStore(ctx, o, !*writes, func(ctx context.Context, s *opened) int {
			a := &audit{prefix: sf.prefix, writes: *writes}
			if a.prefix == "" {
				a.prefix = keys.DefaultPrefix
			}
			audit := s.audit
			if audit == nil {
				if u, err := url.Parse(s.addr); err == nil && addressAudits[u.Scheme] != nil {
					audit = addressAudits[u.Scheme](u)
				}
			}
			if audit != nil {
				audit(ctx, a)
			}
			if *writes && *overwriteFor > 0 {
				checkOverwrite(ctx, a, s.store, *overwriteFor)
			}
			if err := ctx.Err(); err != nil {
				return o.fail(err)
			}
			return reportDoctor(o, sf.json, s.addr, a)
		})
	}
}

// reportDoctor prints a's findings and returns doctor's exit status.
func reportDoctor(o *output, asJSON bool, addr string, a *audit) int {
	w := o.inv.stdout
	if !asJSON {
		fields(w, "store", addr, "prefix", a.prefix)
	}
	for _, f := range a.findings {
		if asJSON {
			o.emit(f)
			continue
		}
		printFinding(w, f)
	}
	risks, unknown := a.count(levelRisk), a.count(levelUnknown)
	var err error
	switch {
	case a.untrusted:
		err = fmt.Errorf("writefence doctor: reads under overwrite paired one write's bytes with another write's version: %w", writefence.ErrUntrustedStore)
	case risks > 0:
		err = &atRiskError{risks}
	case unknown > 0:
		err = fmt.Errorf("writefence doctor: %s could not be read; the store may still lose a record", plural(unknown, "setting"))
	}
	code, name := classify(err)
	if asJSON {
		r := doctorResult{Outcome: name, Store: addr, Prefix: a.prefix, Risks: risks, Warnings: a.count(levelWarn), Unknown: unknown}
		if err != nil {
			r.Error = message(err)
		}
		o.emit(r)
	} else if err == nil {
		fmt.Fprintf(w, "no setting found that can lose a record or an acknowledged write (%s)\n", plural(a.count(levelWarn), "warning"))
	}
	if err != nil {
		fmt.Fprintln(o.inv.stderr, message(err))
	}
	return code
}

// printFinding writes f as text: its level and what was found on one
// line, then what it means and the fix, indented.
func printFinding(w io.Writer, f finding) {
	lv := string(f.Level)
	if f.Level == levelRisk {
		lv = "RISK"
	}
	fmt.Fprintf(w, "%-8s %s: %s\n", lv, f.Check, f.Found)
	if f.Consequence != "" {
		fmt.Fprintf(w, "         consequence: %s\n", f.Consequence)
	}
	if f.Fix != "" {
		fmt.Fprintf(w, "         fix: %s\n", f.Fix)
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// checkOverwrite runs the check of reads under concurrent overwrite for
// at most d on a scratch key, through the same store methods a Fence
// reads and writes through, and deletes the key afterwards.
func checkOverwrite(ctx context.Context, a *audit, s writefence.ConditionalStore, d time.Duration) {
	const check = "reads.overwrite"
	key := a.scratch("overwrite")
	if del, ok := s.(writefence.Deleter); ok {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = del.Delete(dctx, key)
		}()
	}
	res, err := overwrite.Run(ctx, s, key, overwrite.Check{Until: time.Now().Add(d)})
	switch {
	case err != nil && ctx.Err() != nil:
		return // the command reports the timeout or the interruption
	case err != nil:
		a.unknown(check, err, "make sure the credentials may write and delete keys under the prefix, or run with -writes=false")
	case len(res.Mismatches) > 0:
		a.untrusted = true
		n := 0
		for _, m := range res.Mismatches {
			n += m.Count
		}
		a.add(finding{Check: check, Level: levelRisk,
			Found:       fmt.Sprintf("%d of %d reads paired bytes and version token of different writes, e.g. %s", n, res.Reads, res.Mismatches[0].Message),
			Consequence: "a fence can decide on bytes that are no longer there, or write over a record it never read: its conditional write proves nothing",
			Fix:         "use another server, or one whose reads take bytes and version from one consistent response; writefence race and the conformance kit (writefencetest) show the same"})
	case res.Overlapped == 0:
		a.add(finding{Check: check, Level: levelUnknown,
			Found: fmt.Sprintf("no read overlapped a write within %s (%d writes, %d reads)", d, res.Writes, res.Reads),
			Fix:   "run with a longer -overwrite"})
	default:
		a.ok(check, fmt.Sprintf("%d reads under %d overwrites, each paired bytes and version of one write (%d readers, %s)",
			res.Overlapped, res.Writes, overwrite.Readers, d))
	}
}

// overlaps reports whether a rule on keys under rulePrefix can reach a
// key under prefix: one of the two prefixes starts with the other.
func overlaps(rulePrefix, prefix string) bool {
	return strings.HasPrefix(prefix, rulePrefix) || strings.HasPrefix(rulePrefix, prefix)
}
