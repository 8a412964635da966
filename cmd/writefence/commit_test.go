package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
)

// TestCommitRefused: a commit that names a blob that does not exist exits
// 3, a deposed writer's exits 4, one that adds a blob it may not commit
// exits 2; none writes anything.
func TestCommitRefused(t *testing.T) {
	forBlobStores(t, func(t *testing.T, s blobStore) {
		ghost := keys.BlobName(1, "node-a", strings.Repeat("0", 32)) + ":5:00000000"
		r := commit(t, s.addr, "node-a", "2", "-json", "-add", ghost, "-keep-payload")
		assert.Equal(t, exitNotFound, r.code, "%s", r)
		assert.Equal(t, "not_found", jsonOf(t, r)["outcome"])
		assert.Contains(t, r.stderr, "does not exist")
		assert.Equal(t, exitNotFound, wf(t, "latest", "-store", s.addr, "wal", "s").code, "nothing written")

		a := put(t, s.addr, "node-a", "1", "a's segment")
		require.Equal(t, exitOK, commit(t, s.addr, "node-a", "2", "-add", a, "-keep-payload").code)
		require.Equal(t, exitOK, commit(t, s.addr, "node-b", "7", "-payload-file", writeFile(t, "b's manifest")).code)

		// node-a, deposed at epoch 7, commits at an epoch it still holds.
		late := put(t, s.addr, "node-a", "3", "a's late segment")
		r = commit(t, s.addr, "node-a", "6", "-json", "-add", late, "-keep-payload")
		assert.Equal(t, exitStale, r.code, "%s", r)
		m := jsonOf(t, r)
		assert.Equal(t, "stale", m["outcome"])
		assert.EqualValues(t, 7, m["recorded_epoch"])
		assert.Equal(t, "node-b", m["recorded_writer"])

		// Blobs node-b may not commit: another writer's, one written before
		// its tenure began (at epoch 3, one above node-a's 2), one above
		// the commit's epoch, one of another size than the store holds.
		early := put(t, s.addr, "node-b", "2", "b's, before its tenure")
		ahead := put(t, s.addr, "node-b", "9", "b's, ahead")
		own := put(t, s.addr, "node-b", "7", "b's own")
		ref, err := parseRef(own)
		require.NoError(t, err)
		ref.Size++
		for _, add := range []string{late, early, ahead, newBlobRef(ref).Ref} {
			r = commit(t, s.addr, "node-b", "8", "-add", add, "-keep-payload")
			assert.Equal(t, exitUsage, r.code, "%s: %s", add, r)
		}
		r = wf(t, "latest", "-json", "-store", s.addr, "wal", "s")
		m = jsonOf(t, r)
		assert.EqualValues(t, 7, m["epoch"], "no refusal wrote: %s", r)
		assert.EqualValues(t, 3, m["since"], "node-b's tenure began above node-a's epoch 2")
		assert.Len(t, m["blobs"], 1)

		require.Equal(t, exitOK, commit(t, s.addr, "node-b", "8", "-add", own, "-keep-payload").code)
	})
}

// TestCommitAgain: the same commit run again once it landed (as after an
// unknown outcome) reports success and changes nothing; a -drop of a blob
// not referenced is said, not refused.
func TestCommitAgain(t *testing.T) {
	addr, _, _ := sharedMem(t)
	one := put(t, addr, "a", "1", "one")
	two := put(t, addr, "a", "1", "two")
	require.Equal(t, exitOK, commit(t, addr, "a", "2", "-add", one, "-keep-payload").code)
	manifest := writeFile(t, "v2")
	args := []string{"-add", two, "-drop", nameOf(one), "-payload-file", manifest}
	r := commit(t, addr, "a", "3", args...)
	require.Equal(t, exitOK, r.code, "%s", r)
	before := jsonOf(t, wf(t, "latest", "-json", "-store", addr, "wal", "s"))

	r = commit(t, addr, "a", "3", args...)
	assert.Equal(t, exitOK, r.code, "its own commit: %s", r)
	assert.Contains(t, r.stderr, "-drop "+nameOf(one)+": the manifest does not reference it; nothing to drop")
	assert.Equal(t, before, jsonOf(t, wf(t, "latest", "-json", "-store", addr, "wal", "s")), "nothing written")

	r = commit(t, addr, "a", "3", "-add", two, "-payload-file", writeFile(t, "v3"))
	assert.Equal(t, exitStale, r.code, "another commit at the same epoch: %s", r)
}

// TestCommitUsage: contradictory or malformed flags are refused before the
// store is opened (exit 2).
func TestCommitUsage(t *testing.T) {
	addr, _, _ := sharedMem(t)
	ref := put(t, addr, "a", "1", "bytes")
	require.Equal(t, exitOK, commit(t, addr, "a", "2", "-add", ref, "-keep-payload").code)
	other, err := parseRef(ref)
	require.NoError(t, err)
	other.CRC++
	for _, flags := range [][]string{
		{"-add", ref}, // neither -keep-payload nor -payload-file
		{"-keep-payload", "-payload-file", writeFile(t, "x")}, // both
		{"-add", ref, "-add", ref, "-keep-payload"},
		{"-add", ref, "-drop", nameOf(ref), "-keep-payload"},
		{"-add", nameOf(ref), "-keep-payload"},
		{"-add", nameOf(ref) + ":5", "-keep-payload"},
		{"-add", nameOf(ref) + ":05:00000000", "-keep-payload"},
		{"-add", nameOf(ref) + ":5:0000000", "-keep-payload"},
		{"-add", "seg-1:5:00000000", "-keep-payload"},
		{"-drop", "seg-1", "-keep-payload"},
		{"-add", newBlobRef(other).Ref, "-keep-payload"}, // the manifest references it with another CRC
		{"-payload-file", writeFile(t, "")},
	} {
		r := commit(t, addr, "a", "3", append([]string{"-json"}, flags...)...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", flags, r)
		assert.Equal(t, "usage", jsonOf(t, r)["outcome"], "%v", flags)
	}
	assert.EqualValues(t, 2, jsonOf(t, wf(t, "latest", "-json", "-store", addr, "wal", "s"))["epoch"], "nothing written")
}

// TestCommitTermAgain: commit -term run again once it landed (as after an
// unknown outcome, exit 8) reports success: it draws the term's next epoch,
// and its -add, referenced already, changes nothing.
func TestCommitTermAgain(t *testing.T) {
	addr := fileStore(t)
	t.Setenv(envStore, addr)
	t.Setenv(envHolder, "node-a")
	r := wf(t, "blob", "put", "-term", "3", "-file", writeFile(t, "segment"), "wal", "0")
	require.Equal(t, exitOK, r.code, "%s", r)
	ref := strings.TrimSpace(r.stdout)
	args := []string{"commit", "-json", "-term", "3", "-add", ref, "-keep-payload", "wal", "0"}
	for n, added := range []int{1, 0} {
		r = wf(t, args...)
		require.Equal(t, exitOK, r.code, "run %d: %s", n+1, r)
		m := jsonOf(t, r)
		assert.EqualValues(t, term3+n+1, m["epoch"], "run %d", n+1)
		assert.Len(t, m["added"], added, "run %d", n+1)
		assert.Equal(t, []any{ref}, refsOf(m), "run %d", n+1)
	}
	m := jsonOf(t, wf(t, "latest", "-json", "wal", "0"))
	assert.EqualValues(t, term3+2, m["epoch"])
	assert.Equal(t, []any{ref}, refsOf(m))
}

// refsOf is the references a -json output's blobs hold.
func refsOf(m map[string]any) []any {
	var refs []any
	for _, b := range m["blobs"].([]any) {
		refs = append(refs, b.(map[string]any)["ref"])
	}
	return refs
}
