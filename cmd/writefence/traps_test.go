package main

import (
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
)

// The tests of this file are the traps a new user of the command fell
// into, each run as that user ran it.

// recordsOnly is a store that lists its keys and holds no blobs.
type recordsOnly struct {
	writefence.ConditionalStore
	writefence.Lister
}

// TestMistypedFileStore: a write to a file:// path that holds no store is
// refused and creates nothing, naming init and -create; with -create, or
// after init, it lands. Every command that writes refuses the same way.
func TestMistypedFileStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mirrors-typo")
	addr := (&url.URL{Scheme: "file", Path: dir}).String()
	p := writeFile(t, "segment")
	for _, args := range [][]string{
		{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		{"push", "-json", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		{"blob", "put", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		{"commit", "-writer", "a", "-epoch", "1", "-keep-payload", "wal", "s"},
		{"seal", "-writer", "a", "-epoch", "1", "wal", "s"},
		{"brand", "claim"},
		{"brand", "install"},
		{"probe"},
		{"race", "-writers", "2", "-rounds", "1"},
		{"settle", "-confirm-version", "v", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		{"gc", "wal", "s"},
		{"lease", "release", "-holder", "a", "wal/0"},
	} {
		r := wf(t, append(args, "-store", addr)...)
		assert.Equal(t, exitError, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "writefence: no store at "+dir+": the directory holds none", "%v", args)
		assert.Contains(t, r.stderr, "to create it, run: writefence init -store "+addr, "%v", args)
		assert.NoDirExists(t, dir, "%v created nothing", args)
	}
	r := wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	assert.Contains(t, r.stderr, ", or pass -create", "a command that writes offers -create")
	r = wf(t, "latest", "-store", addr, "wal", "s")
	assert.NotContains(t, r.stderr, "-create", "a read does not")

	r = wf(t, "push", "-create", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, exitOK, wf(t, "latest", "-store", addr, "wal", "s").code)

	other := (&url.URL{Scheme: "file", Path: filepath.Join(t.TempDir(), "new")}).String()
	r = wf(t, "init", "-store", other)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "created: "+other+" (directory "+strings.TrimPrefix(other, "file://")+")\n", r.stdout)
	r = wf(t, "init", "-json", "-store", other)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "exists", jsonOf(t, r)["state"], "init again changes nothing")
	r = wf(t, "push", "-store", other, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	assert.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "init", "-store", "mem://")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "nothing: mem:// (this store needs nothing created)")
}

// TestInstalledBrandIsVerified: once brand install branded a store, a
// command that writes with another -identity is refused (exit 5) without
// asking for -brand verify, and writes nothing; -brand none writes
// without the check; a store nobody branded takes writes as before.
func TestInstalledBrandIsVerified(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "segment")
	r := wf(t, "push", "-store", addr, "-identity", "other/v9", "-writer", "a", "-epoch", "1", "-file", p, "wal", "unbranded")
	require.Equal(t, exitOK, r.code, "an unbranded store takes any identity: %s", r)
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s").code)
	require.Equal(t, exitOK, wf(t, "brand", "install", "-force", "-store", addr).code)

	for _, args := range [][]string{
		{"push", "-identity", "other/v9", "-writer", "b", "-epoch", "1", "-file", p, "wal", "s2"},
		{"push", "-json", "-identity", "other/v9", "-writer", "b", "-epoch", "1", "-file", p, "wal", "s2"},
		{"seal", "-identity", "other/v9", "-writer", "b", "-epoch", "1", "wal", "s2"},
		{"commit", "-identity", "other/v9", "-writer", "b", "-epoch", "1", "-keep-payload", "wal", "s2"},
	} {
		r := wf(t, append(args, "-store", addr)...)
		assert.Equal(t, exitWire, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "writefence: wire: expected other/v9 found writefence/v1", "%v", args)
		assert.Contains(t, r.stderr, "the store is branded for another format", "%v", args)
		assert.Equal(t, exitNotFound, wf(t, "latest", "-store", addr, "-identity", "other/v9", "wal", "s2").code, "%v wrote nothing", args)
	}
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "2", "-file", p, "wal", "s")
	assert.Equal(t, exitOK, r.code, "the brand's own identity writes: %s", r)

	r = wf(t, "push", "-store", addr, "-brand", "none", "-identity", "other/v9", "-writer", "b", "-epoch", "1", "-file", p, "wal", "s2")
	assert.Equal(t, exitOK, r.code, "-brand none: %s", r)
	r = wf(t, "push", "-store", addr, "-brand", "sometimes", "-writer", "b", "-epoch", "1", "-file", p, "wal", "s3")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, "want verify, claim or none")
}

// TestLeaseShowRelease: lease show shows a lease a writefence.Lease holds;
// lease release refuses without -holder or with another holder's name,
// writing nothing, and with the holder's releases it, so that another
// holder takes it at once; ls lists the leases after the shards.
func TestLeaseShowRelease(t *testing.T) {
	addr := fileStore(t)
	ctx := t.Context()
	s, err := openStore(ctx, addr)
	require.NoError(t, err)
	defer s.close()
	fence := &writefence.Fence{Store: s.store}
	a := &writefence.Lease{Fence: fence, Name: "wal/0", Holder: "node-a", TTL: time.Hour}
	term, err := a.Acquire(ctx)
	require.NoError(t, err)

	r := wf(t, "lease", "show", "-store", addr, "wal/0")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "holder   node-a\n")
	assert.Contains(t, r.stdout, "term     1\n")
	assert.Contains(t, r.stdout, "epochs   4294967297 to 8589934591 (term<<32 | n)\n")
	assert.Regexp(t, `\nstate    held, until \S+Z \(\S+ from now, by its holder's clock\)\n`, r.stdout)
	r = wf(t, "lease", "show", "-json", "-store", addr, "wal/0")
	require.Equal(t, exitOK, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "held", m["state"])
	assert.Equal(t, "writefence/_lease/wal%2F0", m["key"])
	r = wf(t, "lease", "show", "-store", addr, "wal/1")
	assert.Equal(t, exitNotFound, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence ls lists the leases")

	r = wf(t, "ls", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Regexp(t, "^"+lsHeader+"\n\n"+lsLeaseHeader+"\nwal/0\tnode-a\t1\theld\t\\S+Z\n$", r.stdout)
	r = wf(t, "ls", "-json", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	m = jsonOf(t, r)
	assert.Equal(t, "lease", m["kind"])
	assert.Equal(t, "node-a", m["holder"])

	r = wf(t, "lease", "release", "-store", addr, "wal/0")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, "-holder is required")
	r = wf(t, "lease", "release", "-store", addr, "-holder", "node-b", "wal/0")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: lease wal/0 is held by node-a at term 1, not by -holder node-b: nothing written")
	require.NoError(t, a.Renew(ctx), "a refused release wrote nothing")

	r = wf(t, "lease", "release", "-store", addr, "-holder", "node-a", "wal/0")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "released: lease wal/0, held by node-a at term 1 (released at term 1): the next contender takes it at once\n", r.stdout)
	assert.ErrorIs(t, a.Renew(ctx), writefence.ErrLeaseLost, "the holder released for is deposed")
	r = wf(t, "lease", "show", "-store", addr, "wal/0")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "state    released, the next contender takes it at once\n")
	r = wf(t, "lease", "release", "-json", "-store", addr, "-holder", "node-a", "wal/0")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, false, jsonOf(t, r)["released"], "already released: nothing written")

	b := &writefence.Lease{Fence: fence, Name: "wal/0", Holder: "node-b", TTL: time.Hour}
	next, err := b.Acquire(ctx)
	require.NoError(t, err, "another holder takes the lease at once")
	assert.Equal(t, term+1, next)
}

// TestBlobsInAnotherStore: a store of records that holds no blobs refuses
// the blob verbs with advice naming -blobs; with -blobs naming a store that
// holds them, blob put, commit, blob get, gc and ls work across the two.
func TestBlobsInAnotherStore(t *testing.T) {
	recordsAddr, records, _ := sharedMem(t)
	blobsAddr, blobs, _ := sharedMem(t)
	recordsAddr = strings.Replace(recordsAddr, "shared://", "sharednoblobs://", 1)
	p := writeFile(t, "a large segment")

	r := wf(t, "blob", "put", "-store", recordsAddr, "-writer", "node-a", "-epoch", "1", "-file", p, "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "give -blobs ADDRESS (or $WRITEFENCE_BLOBS) naming one, and the records stay in -store")

	with := func(args ...string) result {
		return wf(t, append(args, "-store", recordsAddr, "-blobs", blobsAddr)...)
	}
	r = with("blob", "put", "-writer", "node-a", "-epoch", "1", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	ref := strings.TrimSpace(r.stdout)
	r = with("commit", "-writer", "node-a", "-epoch", "2", "-add", ref, "-keep-payload", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = with("blob", "get", "wal", "s", nameOf(ref))
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "a large segment", r.stdout)
	r = with("gc", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "kept\t"+nameOf(ref)+"\t15\treferenced\n", r.stdout)
	r = with("ls")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, lsHeader+"\nwal\ts\t2\tnode-a\tok\t1\t15\t0\n", r.stdout)

	// Where each went: the record in one store, the blob in the other.
	key, err := keys.Shard("", "wal", "s")
	require.NoError(t, err)
	_, _, err = records.Get(t.Context(), key)
	require.NoError(t, err)
	_, _, err = blobs.Get(t.Context(), key)
	assert.ErrorIs(t, err, writefence.ErrNotFound)
	bkey, err := keys.Blob("", "wal", "s", nameOf(ref))
	require.NoError(t, err)
	_, err = blobs.StatBlob(t.Context(), bkey)
	require.NoError(t, err)
	_, err = records.StatBlob(t.Context(), bkey)
	assert.ErrorIs(t, err, writefence.ErrNotFound)

	t.Setenv("WRITEFENCE_BLOBS", blobsAddr)
	r = wf(t, "blob", "get", "-store", recordsAddr, "wal", "s", nameOf(ref))
	require.Equal(t, exitOK, r.code, "$WRITEFENCE_BLOBS: %s", r)
	assert.Equal(t, "a large segment", r.stdout)
}

// TestGCUnknownShard: gc of a shard that holds no record and no blob (a
// mistyped name) is not found, exit 3; so is one with blobs and no record,
// whose blobs only -record-gone deletes.
func TestGCUnknownShard(t *testing.T) {
	addr, _, _ := sharedMem(t)
	put(t, addr, "node-a", "1", "uncommitted")
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "other").code)
	for _, args := range [][]string{{"gc", "wal", "typo"}, {"gc", "-dry-run", "wal", "typo"}, {"gc", "-json", "wal", "typo"}} {
		r := wf(t, append(args, "-store", addr)...)
		assert.Equal(t, exitNotFound, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "writefence: gc: shard typo of plugin wal holds no record and no blob under -prefix writefence/: check the names (writefence ls lists the shards)", "%v", args)
	}
	r := wf(t, "gc", "-store", addr, "wal", "s")
	assert.Equal(t, exitNotFound, r.code, "blobs without a record: %s", r)
	assert.Contains(t, r.stdout, "\tno_record\n")
	assert.Contains(t, r.stderr, "holds 1 blobs but no record under -prefix writefence/")
	assert.Contains(t, r.stderr, "gc -record-gone deletes them")
	r = wf(t, "gc", "-record-gone", "-store", addr, "wal", "s")
	assert.Equal(t, exitOK, r.code, "a shard retired on purpose: %s", r)
	assert.Contains(t, r.stdout, "deleted\t")
	assert.Equal(t, exitOK, wf(t, "gc", "-store", addr, "wal", "other").code, "a record without blobs: %s", r)
	r = wf(t, "gc", "-record-gone", "-store", addr, "wal", "other")
	assert.Equal(t, exitUsage, r.code, "-record-gone over a record: %s", r)
}

// TestLsHeaderAndBlobOnlyShards: ls prints a header, and lists a shard
// that holds blobs but no record (blobs put and never committed) after
// the shards with a record, with the number and bytes of its blobs.
func TestLsHeaderAndBlobOnlyShards(t *testing.T) {
	forBlobStores(t, func(t *testing.T, s blobStore) {
		r := wf(t, "ls", "-store", s.addr)
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, lsHeader+"\n", r.stdout, "an empty store: the header alone")

		require.Equal(t, exitOK, wf(t, "push", "-store", s.addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "z").code)
		for _, data := range []string{"one", "three"} {
			r := wf(t, "blob", "put", "-store", s.addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, data), "wal", "orphan")
			require.Equal(t, exitOK, r.code, "%s", r)
		}
		r = wf(t, "ls", "-store", s.addr)
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, lsHeader+"\nwal\tz\t1\ta\tok\t0\t0\t0\nwal\torphan\t-\t-\tno_record\t2\t8\t-\n", r.stdout)
		r = wf(t, "ls", "-store", s.addr, "snap")
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, lsHeader+"\n", r.stdout, "another plugin's blobs are not listed")

		r = wf(t, "ls", "-json", "-store", s.addr)
		require.Equal(t, exitOK, r.code, "%s", r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 2, "no header in JSON: %s", r.stdout)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[1]), &m))
		assert.Equal(t, "shard", m["kind"])
		assert.Equal(t, false, m["record"])
		assert.Equal(t, "orphan", m["shard"])
		assert.EqualValues(t, 2, m["blob_count"])
		assert.EqualValues(t, 8, m["blob_bytes"])
	})
}

// TestDurationWithoutUnit: -timeout 5 says a duration needs a unit, not
// "parse error"; so does -grace.
func TestDurationWithoutUnit(t *testing.T) {
	for _, args := range [][]string{{"latest", "-timeout", "5", "wal", "s"}, {"-timeout", "5", "ls"}, {"gc", "-grace", "24", "wal", "s"}} {
		r := wf(t, append(args, "-store", "mem://")...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
		assert.NotContains(t, r.stderr, "parse error", "%v", args)
		assert.Regexp(t, `invalid value "\d+" for flag -\w+: a duration needs a unit: \d+s for seconds, \d+m for minutes`, r.stderr, "%v", args)
	}
	r := wf(t, "latest", "-timeout", "soon", "-store", "mem://", "wal", "s")
	assert.Contains(t, r.stderr, "want a duration such as 30s, 5m or 1h30m")
	assert.Equal(t, exitNotFound, wf(t, "latest", "-timeout", "0", "-store", "mem://", "wal", "s").code, "0 needs no unit")
	assert.Equal(t, exitNotFound, wf(t, "latest", "-timeout", "1m30s", "-store", "mem://", "wal", "s").code)
}

// TestHugePayloadSuggestsBlob: a payload over the record's limit is
// refused with the blob put and commit that carry it instead.
func TestHugePayloadSuggestsBlob(t *testing.T) {
	stdin = io.LimitReader(zeros{}, defaults.MaxPayloadSize+1)
	t.Cleanup(func() { stdin = os.Stdin })
	r := wf(t, "push", "-store", fileStore(t), "-writer", "a", "-epoch", "1", "wal", "s")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: payload: stdin holds more than the record's limit of 67108864 bytes (64 MiB); put a payload this large in a blob")
	assert.Contains(t, r.stderr, "writefence blob put -writer W -epoch N -file F PLUGIN SHARD")
	assert.Contains(t, r.stderr, `writefence commit -writer W -epoch N -add "$ref" -keep-payload PLUGIN SHARD`)
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
