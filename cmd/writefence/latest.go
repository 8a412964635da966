package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
)

var latestCommand = command{
	name:    "latest",
	args:    "<plugin> <shard>",
	nargs:   2,
	summary: "show a shard's epoch, writer, identity, payload size, blobs and version token",
	help: `
Reads the shard's record once and decodes it strictly. The version token is
the store's, for exactly the bytes decoded: settle takes it. A manifest's
blobs are listed one per line as name:size:crc (blob get and commit -drop
take the name, commit -add the whole reference), with their number and
bytes, and "since", the tenure floor: the epoch at which the recorded
writer's tenure began, below which no blob can be committed. -json gives
them as "blobs" (a list of objects with "name", "size", "crc", "ref"),
"blob_bytes" and "since". A record of
another wire identity is shown (its identity, epoch and writer) and exits 5.
A corrupt record (a record that fails a check, or a directory store's file
or a Valkey value damaged in place) shows the failed check, its version and,
when its header still decodes, the epoch and writer it claims; it exits 6
and prints the settle command that replaces exactly that version (in -json,
as "settle"): with -epoch one above the header's epoch when the header
decodes, else with -floor GRANTED -epoch E, to fill in with the highest
epoch ever granted for the shard and an epoch above it. latest only reads:
it never creates a store.

examples:
  writefence latest -store file:///tmp/wf wal shard-0
  writefence latest -store 's3://mirrors?endpoint=127.0.0.1:9000&secure=false' -json wal shard-0
  writefence latest -out segment.bin wal shard-0     # also write the payload to a file`,
	define: defineLatest,
}

// latestResult is latest's -json output on success, on a foreign record and
// on a corrupt one.
type latestResult struct {
	Outcome string `json:"outcome"`
	Plugin  string `json:"plugin"`
	Shard   string `json:"shard"`
	recordInfo
	Check string `json:"check,omitempty"`
	Error string `json:"error,omitempty"`
	// Settle is, for a corrupt record, the settle command that replaces
	// it, as latest prints it on stderr.
	Settle string `json:"settle,omitempty"`
}

func defineLatest(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, defaultTimeout)
	identity := fs.String("identity", "", "wire `identity` the record must carry (default "+defaults.Identity+")")
	out := fs.String("out", "", "also write the payload to this `file` (- for stdout, not with -json)")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := sf.output()
		if *out == "-" && sf.json {
			return o.fail(usagef("writefence: -out - and -json both write to stdout"))
		}
		if err := (names{prefix: sf.prefix, identity: *identity, shards: [][2]string{{args[0], args[1]}}}).check(); err != nil {
			return o.fail(err)
		}
		return sf.withStore(ctx, o, true, func(ctx context.Context, s *opened) int {
			plugin, shard := args[0], args[1]
			info, err := inspect(ctx, s.store, sf.prefix, *identity, plugin, shard)
			var wire *writefence.WireError
			var corrupt *writefence.CorruptError
			foreign := errors.As(err, &wire) && info.Writer != ""
			damaged := errors.As(err, &corrupt) && corrupt.Version != ""
			if err != nil && !foreign && !damaged {
				return o.fail(err)
			}
			r := latestResult{Outcome: "ok", Plugin: plugin, Shard: shard, recordInfo: info}
			var why string
			if damaged {
				// The store's own check (a damaged file) fails before the
				// record is decoded: its version travels in the error only.
				r.Key, r.Version, r.Check = corrupt.Key, corrupt.Version, corrupt.Check
				r.Settle, why = settleLine(sf, *identity, r, plugin, shard)
			}
			if err != nil {
				err = advise(err, inv)
				_, r.Outcome = classify(err)
				r.Error = message(err)
			}
			if sf.json {
				o.emit(r)
			} else {
				w := inv.stdout
				if *out == "-" {
					w = inv.stderr // stdout carries the payload alone
				}
				kv := []string{"key", escape.String(r.Key)}
				if r.Epoch != 0 {
					kv = append(kv, "epoch", strconv.FormatUint(r.Epoch, 10), "writer", escape.String(r.Writer),
						"identity", escape.String(r.Identity))
				}
				if !damaged {
					kv = append(kv, "size", strconv.Itoa(r.Size))
					if r.Epoch != 0 {
						kv = append(kv, "since", strconv.FormatUint(r.Since, 10),
							"blobs", fmt.Sprintf("%d, %s", len(r.Blobs), formatSize(r.BlobBytes)))
						for _, b := range r.Blobs {
							kv = append(kv, "blob", b.Ref)
						}
					}
				} else {
					kv = append(kv, "check", escape.String(r.Check))
				}
				fields(w, append(kv, "version", escape.String(r.Version))...)
			}
			if err != nil {
				code, _ := classify(err)
				fmt.Fprintln(inv.stderr, message(err))
				if damaged {
					fmt.Fprintln(inv.stderr, why)
					if r.Settle != "" {
						fmt.Fprintf(inv.stderr, "to overwrite it: %s\n", r.Settle)
					}
				}
				return code
			}
			if *out != "" {
				if err := writePayload(inv, *out, info.payload); err != nil {
					return o.fail(err)
				}
			}
			return exitOK
		})
	}
}

// settleLine returns the settle command that replaces the corrupt record r
// of (plugin, shard) under identity (the default when empty), and what
// decided its epoch. When r's header decodes, Settle refuses an epoch not
// above the header's, so the line names the lowest it takes; otherwise
// only the operator knows the highest epoch ever granted, and the line
// asks for it as -floor.
func settleLine(sf *storeFlags, identity string, r latestResult, plugin, shard string) (line, why string) {
	line = "writefence settle" + storeArg(sf)
	if identity != "" {
		line += " -identity " + shellQuote(identity)
	}
	line += " -confirm-version " + shellQuote(r.Version) + " -writer W"
	switch {
	case r.Epoch == math.MaxUint64:
		return "", fmt.Sprintf("its header claims epoch %d by %s, the largest there is: no settle can go above it", r.Epoch, escape.String(r.Writer))
	case r.Epoch != 0:
		why = fmt.Sprintf("its header claims epoch %d by %s: settle above it, and above every epoch a live writer may hold", r.Epoch, escape.String(r.Writer))
		line += " -epoch " + strconv.FormatUint(r.Epoch+1, 10)
		if r.Epoch+1 > maxPlainEpoch {
			line += " -allow-huge-epoch"
		}
	default:
		why = "not even its header can be read, so the store holds no epoch to stay above: " +
			"replace GRANTED with the highest epoch ever granted for the shard (ask whatever elects writers) and E with an epoch above it"
		line += " -floor GRANTED -epoch E"
	}
	return line + " -file F " + shellQuote(plugin) + " " + shellQuote(shard), why
}

// storeArg repeats the store and prefix flags a suggested command needs,
// quoted for the shell.
func storeArg(sf *storeFlags) string {
	var s string
	if sf.addr != "" {
		s += " -store " + shellQuote(sf.addr)
	}
	if sf.prefix != "" {
		s += " -prefix " + shellQuote(sf.prefix)
	}
	return s
}

// shellQuote renders s as one shell word, escaped for the terminal first.
func shellQuote(s string) string {
	s = escape.String(s)
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:%+@", c)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

func writePayload(inv *invocation, path string, payload []byte) error {
	if path == "-" {
		_, err := inv.stdout.Write(payload)
		return err
	}
	if err := os.WriteFile(path, payload, 0o600); err != nil {
		return fmt.Errorf("writefence: write payload: %w", err)
	}
	return nil
}
