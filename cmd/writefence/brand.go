package main

import (
	"context"
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
  claim    brand an empty store with -identity, or accept one already branded with it
  verify   read only: succeed if the brand holds -identity, exit 5 if it is absent or foreign
  install  administrative: write -identity if the store is unbranded, report whether it wrote;
           a foreign brand is refused (exit 5) and never overwritten
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
	identity := fs.String("identity", "", "wire `identity` the brand must hold (default "+defaults.Identity+")")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := sf.output()
		verb := args[0]
		if verb != "claim" && verb != "verify" && verb != "install" {
			return o.fail(usagef("writefence: brand %s: want claim, verify or install", escape.String(verb)))
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
