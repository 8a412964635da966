package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/writefence/writefence/internal/escape"
)

var initCommand = command{
	name:    "init",
	args:    "",
	summary: "create the store: its directory, bucket, table or container, if it does not exist",
	help: `
Creates what the store at -store (and -blobs, when given) needs before a
first write, unless it exists: a directory store (file://), an S3 or
Cloud Storage bucket, a DynamoDB or PostgreSQL table, an Azure Blob
container. It says, per store, whether it created it or found it; a
Valkey database, an etcd prefix and mem:// need nothing created. Running
it again changes nothing.

Every other command refuses a store that does not exist, naming this
command (a command that writes creates it with -create instead), so that
a mistyped address never becomes a new, empty store in which any epoch
lands.

Per store: s3:// takes the region= of the address (MinIO needs none); a
gs:// bucket needs a project, project=ID in the address or
$GOOGLE_CLOUD_PROJECT (an emulator's endpoint= takes any); a DynamoDB
table is created on-demand, keyed by the string "key", and waited for
until active; a PostgreSQL table comes with its sequence. The
credentials need the right to create it.

examples:
  writefence init -store file:///var/lib/writefence
  writefence init -store 's3://mirrors?endpoint=127.0.0.1:9000&secure=false'
  writefence init -store 'dynamodb://mirrors?endpoint=http://127.0.0.1:8000' -blobs 's3://mirrors?endpoint=127.0.0.1:9000&secure=false'
  writefence init -json -store 'gs://mirrors?endpoint=http://127.0.0.1:4443'`,
	define: defineInit,
}

// storeCommands are the commands that create a store, seal a shard and
// look at or release a lease, listed after the others.
var storeCommands = []command{initCommand, sealCommand, leaseShowCommand, leaseReleaseCommand}

// initResult is init's -json output, one line per store.
type initResult struct {
	Outcome string `json:"outcome"`
	Store   string `json:"store"`
	Role    string `json:"role"`   // records, or blobs
	State   string `json:"state"`  // created, exists, or nothing (nothing to create)
	Detail  string `json:"detail"` // what was created or found
}

func defineInit(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, 10*defaultTimeout)
	sf.addBlobsFlag(fs)
	return func(ctx context.Context, inv *invocation, _ []string) int {
		o := sf.output()
		ctx, cancel, addr, err := sf.begin(ctx)
		defer cancel()
		if err != nil {
			return o.fail(err)
		}
		todo := []initResult{{Store: addr, Role: "records"}}
		if sf.blobs != "" && sf.blobs != addr {
			todo = append(todo, initResult{Store: sf.blobs, Role: "blobs"})
		}
		for _, r := range todo {
			sf.inv.addr = r.Store
			if err := initStore(ctx, &r); err != nil {
				if r.Role == "blobs" {
					err = fmt.Errorf("writefence: -blobs: %w", err)
				}
				return o.fail(err)
			}
			r.Outcome = "ok"
			if sf.json {
				o.emit(r)
			} else {
				fmt.Fprintf(inv.stdout, "%s: %s (%s)\n", r.State, escape.String(r.Store), r.Detail)
			}
		}
		return exitOK
	}
}

// initStore creates the store at r.Store unless it exists, and fills in
// r's state and detail.
func initStore(ctx context.Context, r *initResult) error {
	s, err := openStoreMode(ctx, r.Store, false)
	if err != nil {
		return err
	}
	defer s.close()
	if s.create == nil {
		// It answers all the same: a mistyped address fails here.
		if s.ready != nil {
			if err := s.ready(ctx); err != nil {
				return err
			}
		}
		r.State, r.Detail = "nothing", "this store needs nothing created"
		return nil
	}
	err = s.ready(ctx)
	var missing *missingError
	switch {
	case errors.As(err, &missing):
	case err != nil:
		return err
	default:
		r.State, r.Detail = "exists", "nothing created"
		return nil
	}
	if err := s.create(ctx); err != nil {
		return err
	}
	r.State, r.Detail = "created", missing.what+" "+escape.String(missing.name)
	return nil
}
