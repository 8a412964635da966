package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
)

// TestGC: gc -dry-run deletes nothing and lists exactly what gc then
// deletes: a deposed writer's uncommitted blob at once, never a referenced
// one, nor a fresh one of the current tenure, nor one of a name blob put
// never writes; a second gc deletes nothing more.
func TestGC(t *testing.T) {
	forBlobStores(t, func(t *testing.T, s blobStore) {
		a1 := put(t, s.addr, "node-a", "1", "a's committed segment")
		require.Equal(t, exitOK, commit(t, s.addr, "node-a", "2", "-add", a1, "-keep-payload").code)
		a2 := put(t, s.addr, "node-a", "3", "a's segment, never committed")
		require.Equal(t, exitOK, commit(t, s.addr, "node-b", "5", "-keep-payload").code) // node-a is deposed
		b1 := put(t, s.addr, "node-b", "5", "b's fresh segment")
		space, err := keys.Blobs("", "wal", "s")
		require.NoError(t, err)
		_, err = s.blobs.CreateBlob(t.Context(), space+"zz-not-a-blob-name", strings.NewReader("someone else's"))
		require.NoError(t, err)

		lines := func(deleted string) string {
			return strings.Join([]string{
				"kept\t" + nameOf(a1) + "\t21\treferenced",
				deleted + "\t" + nameOf(a2) + "\t28\tunreferenced",
				"kept\t" + nameOf(b1) + "\t17\tgrace",
				"kept\tzz-not-a-blob-name\t14\tforeign",
			}, "\n") + "\n"
		}
		for range 2 {
			r := wf(t, "gc", "-dry-run", "-store", s.addr, "wal", "s")
			require.Equal(t, exitOK, r.code, "%s", r)
			assert.Equal(t, lines("would_delete"), r.stdout)
			assert.Contains(t, r.stderr, "would delete 1 blobs (28 bytes)")
			assert.True(t, blobExists(t, s, nameOf(a2)), "-dry-run deletes nothing")
		}
		r := wf(t, "gc", "-json", "-dry-run", "-store", s.addr, "wal", "s")
		require.Equal(t, exitOK, r.code, "%s", r)
		jl := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		require.Len(t, jl, 5, "four blobs and the summary: %s", r.stdout)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(jl[1]), &m))
		assert.Equal(t, map[string]any{"outcome": "ok", "action": "would_delete", "reason": "unreferenced", "name": nameOf(a2),
			"key": space + nameOf(a2), "size": 28.0, "modified": m["modified"]}, m)
		m = nil
		require.NoError(t, json.Unmarshal([]byte(jl[4]), &m))
		assert.Equal(t, map[string]any{"outcome": "ok", "plugin": "wal", "shard": "s", "dry_run": true, "grace": "24h0m0s",
			"deleted": 1.0, "deleted_bytes": 28.0, "referenced": 1.0, "kept": 2.0}, m)

		r = wf(t, "gc", "-store", s.addr, "wal", "s")
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, lines("deleted"), r.stdout, "what the dry run listed")
		assert.False(t, blobExists(t, s, nameOf(a2)))
		assert.True(t, blobExists(t, s, nameOf(a1)))
		assert.True(t, blobExists(t, s, nameOf(b1)))

		r = wf(t, "gc", "-store", s.addr, "wal", "s")
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.NotContains(t, r.stdout, "deleted")
		assert.Contains(t, r.stderr, "deleted 0 blobs")

		r = wf(t, "blob", "get", "-store", s.addr, "wal", "s", nameOf(a1))
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, "a's committed segment", r.stdout)
	})
}

// TestGCGrace: an unreferenced blob of the current tenure is kept until it
// is older than -grace by the store's clock (the test's), then deleted.
func TestGCGrace(t *testing.T) {
	addr, _, clock := sharedMem(t)
	r := wf(t, "commit", "-store", addr, "-writer", "a", "-epoch", "1", "-payload-file", writeFile(t, "a's record"), "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	ref := put(t, addr, "a", "1", "fresh")
	row := func(action, reason string) string { return action + "\t" + nameOf(ref) + "\t5\t" + reason + "\n" }
	r = wf(t, "gc", "-grace", "1h", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, row("kept", "grace"), r.stdout)

	clock.Advance(59 * time.Minute)
	assert.Equal(t, row("kept", "grace"), wf(t, "gc", "-grace", "1h", "-store", addr, "wal", "s").stdout)
	clock.Advance(time.Minute)
	assert.Equal(t, row("kept", "grace"), wf(t, "gc", "-store", addr, "wal", "s").stdout, "the default grace is 24h")
	assert.Equal(t, row("would_delete", "unreferenced"), wf(t, "gc", "-dry-run", "-grace", "1h", "-store", addr, "wal", "s").stdout)
	assert.Equal(t, row("deleted", "unreferenced"), wf(t, "gc", "-grace", "1h", "-store", addr, "wal", "s").stdout)
	assert.Empty(t, wf(t, "gc", "-grace", "1h", "-store", addr, "wal", "s").stdout)

	// Over a record no commit wrote, an unreferenced blob its writer may
	// yet commit is kept whatever its age: no horizon can say otherwise.
	stdin = strings.NewReader("b's record")
	t.Cleanup(func() { stdin = os.Stdin })
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "wal", "p").code)
	r = wf(t, "blob", "put", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "fresh"), "wal", "p")
	require.Equal(t, exitOK, r.code, "%s", r)
	plain := strings.TrimSuffix(r.stdout, "\n")
	clock.Advance(2 * time.Hour)
	assert.Equal(t, "kept\t"+nameOf(plain)+"\t5\tgrace\n", wf(t, "gc", "-grace", "1h", "-store", addr, "wal", "p").stdout)

	for _, grace := range []string{"0", "-1h", "1"} {
		r := wf(t, "gc", "-json", "-grace", grace, "-store", addr, "wal", "s")
		assert.Equal(t, exitUsage, r.code, "-grace %s: %s", grace, r)
		assert.Equal(t, "usage", jsonOf(t, r)["outcome"])
	}
}

// TestGCBelowTheFloor: a record set back below its shard's floor (a
// restore from backup after a settle) is refused as regressed (exit 12),
// and gc deletes nothing: the blobs the lost manifest referenced may be
// all that is left of the shard's newer state, and the settle that mends
// it may reference them again.
func TestGCBelowTheFloor(t *testing.T) {
	addr, s, clock := sharedMem(t)
	require.Equal(t, exitOK, commit(t, addr, "a", "1", "-payload-file", writeFile(t, "a's record")).code)
	key, err := keys.Shard("", "wal", "s")
	require.NoError(t, err)
	old, version, err := s.Get(t.Context(), key)
	require.NoError(t, err)
	r := wf(t, "settle", "-store", addr, "-lost", "-confirm-version", version, "-floor", "9", "-writer", "op", "-epoch", "10", "-file", writeFile(t, "good"), "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	ref := put(t, addr, "op", "11", "op's segment")
	require.Equal(t, exitOK, commit(t, addr, "op", "11", "-add", ref, "-keep-payload").code)

	// The record is restored to the bytes it held at epoch 1.
	_, version, err = s.Get(t.Context(), key)
	require.NoError(t, err)
	_, err = s.PutIfVersion(t.Context(), key, old, version)
	require.NoError(t, err)
	clock.Advance(2 * time.Hour)

	for _, dry := range []string{"-dry-run=true", "-dry-run=false"} {
		r = wf(t, "gc", dry, "-grace", "1h", "-store", addr, "wal", "s")
		assert.Equal(t, exitRegressed, r.code, "%s: %s", dry, r)
		assert.NotContains(t, r.stdout, "delete", dry)
	}
	assert.True(t, blobExists(t, blobStore{addr: addr, blobs: s}, nameOf(ref)), "the lost manifest's blob is kept")
}
