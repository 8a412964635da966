package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var brandCommand = command{
	name:    "brand",
	args:    "claim|verify|install",
	nargs:   1,
	summary: "claim, verify or install the store's brand key (its wire identity)",
	help: `
The brand key (one reserved key under the prefix) holds the identity of the
format the store's records are written in.
  claim    brand an unbranded store with -identity, or accept one already branded with it;
           unlike install it reads no record: records of another identity are locked out
  verify   read only: succeed if the brand holds -identity, exit 5 if it is absent or foreign
  install  administrative: write -identity if the store is unbranded, report whether it wrote;
           a foreign brand is refused (exit 5) and never overwritten, and so is a store
           that holds a record of another identity under the prefix (exit 5), unless
           -force is given: the brand would refuse that record's writers
A refusal names what was expected and what was found, escaped.

examples:
  writefence brand install -store file:///tmp/wf
  writefence brand verify -store valkey://127.0.0.1:6379/0 -identity myformat/v2
  writefence brand claim -json -store 'gs://mirrors?endpoint=http://127.0.0.1:4443'`,
	define: defineBrand,
}

// brandResult is brand's -json output on success.
type brandResult struct {
	Outcome   string `json:"outcome"`
	Action    string `json:"action"`
	Key       string `json:"key"`
	Identity  string `json:"identity"`
	Installed *bool  `json:"installed,omitempty"` // install only: whether it wrote
}

func defineBrand(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, defaultTimeout)
	sf.addCreateFlag(fs)
	identity := fs.String("identity", "", "wire `identity` the brand must hold (default "+defaults.Identity+")")
	force := fs.Bool("force", false, "install: brand the store even if it holds records of another identity")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := sf.output()
		verb := args[0]
		if verb != "claim" && verb != "verify" && verb != "install" {
			return o.fail(usagef("writefence: brand %s: want claim, verify or install", escape.String(verb)))
		}
		if *force && verb != "install" {
			return o.fail(usagef("writefence: brand %s: -force is for install only", verb))
		}
		if err := (names{prefix: sf.prefix, identity: *identity}).check(); err != nil {
			return o.fail(err)
		}
		// verify never writes, so it never creates a store.
		return sf.withStore(ctx, o, verb == "verify", func(ctx context.Context, s *opened) int {
			fence := &writefence.Fence{Store: s.store, Identity: *identity, Prefix: sf.prefix}
			id := *identity
			if id == "" {
				id = defaults.Identity
			}
			key := keys.Brand(sf.prefix)
			r := brandResult{Outcome: "ok", Action: verb, Key: key, Identity: id}
			var msg string
			var err error
			switch verb {
			case "claim":
				_, err = fence.ClaimBrand(ctx)
				msg = "claimed: %s holds %s"
			case "verify":
				err = fence.VerifyBrand(ctx)
				msg = "verified: %s holds %s"
			case "install":
				if !*force {
					if err := noForeignRecords(ctx, s.store, sf.prefix, id); err != nil {
						return o.fail(err)
					}
				}
				var installed bool
				installed, err = fence.ClaimBrand(ctx)
				r.Installed = &installed
				msg = "installed: %s now holds %s"
				if !installed {
					msg = "already installed: %s holds %s"
				}
			}
			if err != nil {
				return o.fail(err)
			}
			if sf.json {
				o.emit(r)
			} else {
				fmt.Fprintf(inv.stdout, msg+"\n", escape.String(key), escape.String(id))
			}
			return exitOK
		})
	}
}

// noForeignRecords returns an error matching writefence.ErrWire if a shard
// record under prefix carries another wire identity than identity: a brand
// of identity would refuse that record's writers, and no command removes a
// brand. A record whose header does not decode tells no identity and is
// left to ls and settle.
func noForeignRecords(ctx context.Context, store writefence.ConditionalStore, prefix, identity string) error {
	lister, ok := store.(writefence.Lister)
	if !ok {
		return fmt.Errorf("writefence: brand install: the store cannot list its keys, so no check that its records are of %s is possible; pass -force to brand it anyway", escape.String(identity))
	}
	fence := &writefence.Fence{Store: store, Prefix: prefix, Identity: identity}
	under := keys.Shards(prefix)
	if prefix == "" {
		prefix = keys.DefaultPrefix
	}
	errFound := errors.New("found")
	var foreign error
	err := lister.List(ctx, under, func(key string) error {
		plugin, shard, ok := keys.ParseShard(prefix, key)
		if !ok {
			return nil // not a record the fence writes
		}
		info, err := fence.Inspect(ctx, plugin, shard)
		var wire *writefence.WireError
		switch {
		case errors.As(err, &wire) && !wire.Absent:
		case errors.Is(err, writefence.ErrCorrupt) && info.Identity != "" && info.Identity != identity:
			wire = &writefence.WireError{Key: key, Expected: identity, Found: info.Identity}
		case err == nil, errors.Is(err, writefence.ErrNotFound), errors.Is(err, writefence.ErrCorrupt):
			return nil // its identity, deleted since it was listed, or not known
		default:
			return err
		}
		foreign = fmt.Errorf("writefence: brand install: refused: %s holds a record of another identity, which a brand of %s would lock out; pass -force to brand the store anyway: %w",
			escape.String(key), escape.String(identity), wire)
		return errFound
	})
	if foreign != nil {
		return foreign
	}
	if err != nil {
		return fmt.Errorf("writefence: brand install: check the records: %w", err)
	}
	return nil
}
