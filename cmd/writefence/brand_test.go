package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBrand(t *testing.T) {
	addr := emptyStore(t)
	steps := []struct {
		args    []string
		code    int
		message string // on stdout for success, stderr otherwise
	}{
		{[]string{"verify"}, exitWire, "writefence: wire: expected writefence/v1 but writefence/_brand is absent"},
		{[]string{"install"}, exitOK, "installed: writefence/_brand now holds writefence/v1"},
		{[]string{"install"}, exitOK, "already installed: writefence/_brand holds writefence/v1"},
		{[]string{"verify"}, exitOK, "verified: writefence/_brand holds writefence/v1"},
		{[]string{"claim"}, exitOK, "claimed: writefence/_brand holds writefence/v1"},
		{[]string{"claim", "-identity", "other/v2"}, exitWire, "writefence: wire: expected other/v2 found writefence/v1"},
		{[]string{"install", "-identity", "other/v2"}, exitWire, "writefence: wire: expected other/v2 found writefence/v1"},
		{[]string{"verify", "-identity", "other/v2"}, exitWire, "writefence: wire: expected other/v2 found writefence/v1"},
		{[]string{"claim", "-prefix", "other/", "-identity", "other/v2"}, exitOK, "claimed: other/_brand holds other/v2"},
		{[]string{"rebrand"}, exitUsage, "want claim, verify or install"},
	}
	for _, s := range steps {
		r := wf(t, append([]string{"brand", "-store", addr}, s.args...)...)
		require.Equal(t, s.code, r.code, "%v: %s", s.args, r)
		if s.code == exitOK {
			assert.Contains(t, r.stdout, s.message, "%v", s.args)
		} else {
			assert.Contains(t, r.stderr, s.message, "%v", s.args)
		}
	}
}

func TestBrandJSON(t *testing.T) {
	addr := fileStore(t)
	r := wf(t, "brand", "install", "-json", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, map[string]any{"outcome": "ok", "action": "install", "key": "writefence/_brand", "identity": "writefence/v1", "installed": true}, jsonOf(t, r))
	r = wf(t, "brand", "install", "-json", "-store", addr)
	assert.Equal(t, false, jsonOf(t, r)["installed"])

	r = wf(t, "brand", "verify", "-json", "-store", addr, "-identity", "evil\x1b[2J")
	require.Equal(t, exitWire, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "wire", m["outcome"])
	assert.Equal(t, "writefence/v1", m["found"])
	assert.Equal(t, "evil\x1b[2J", m["expected"])
	assert.NotContains(t, r.stderr, "\x1b", "stored and given bytes are escaped on the terminal")

	r = wf(t, "brand", "verify", "-json", "-store", emptyStore(t))
	require.Equal(t, exitWire, r.code)
	m = jsonOf(t, r)
	assert.Equal(t, true, m["absent"])
	assert.NotContains(t, m, "found")
}

// TestBrandInstallRefusesForeignRecords: install does not brand a store
// that holds a record of another identity (the brand would lock its
// writers out, and nothing removes a brand) unless -force is given.
func TestBrandInstallRefusesForeignRecords(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "x")
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-identity", "other/v1", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s").code)

	r := wf(t, "brand", "install", "-store", addr)
	require.Equal(t, exitWire, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence/s/wal/s holds a record of another identity")
	assert.Contains(t, r.stderr, "-force")
	assert.Contains(t, r.stderr, "expected writefence/v1 found other/v1")
	assert.Equal(t, exitWire, wf(t, "brand", "verify", "-store", addr).code, "nothing was branded")
	m := jsonOf(t, wf(t, "brand", "install", "-json", "-store", addr))
	assert.Equal(t, "wire", m["outcome"])
	assert.Equal(t, "other/v1", m["found"])
	assert.Equal(t, "writefence/s/wal/s", m["key"])

	r = wf(t, "brand", "install", "-store", addr, "-prefix", "elsewhere/")
	assert.Equal(t, exitOK, r.code, "records under another prefix are not the brand's: %s", r)
	r = wf(t, "brand", "install", "-store", addr, "-force")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "installed: writefence/_brand now holds writefence/v1")

	same := fileStore(t)
	require.Equal(t, exitOK, wf(t, "push", "-store", same, "-identity", "mine/v1", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s").code)
	r = wf(t, "brand", "install", "-store", same, "-identity", "mine/v1")
	assert.Equal(t, exitOK, r.code, "records of the identity itself: %s", r)
	assert.Equal(t, exitUsage, wf(t, "brand", "claim", "-force", "-store", same).code)
}

// TestBrandOfAnotherIdentity: on a store branded for another identity,
// every command that writes takes -identity, which its brand check
// expects: refused without it (exit 5, saying to check -identity), it
// passes the check with it.
func TestBrandOfAnotherIdentity(t *testing.T) {
	addr := emptyStore(t)
	require.Equal(t, exitOK, wf(t, "brand", "install", "-store", addr, "-identity", "app/v2").code)
	p := writeFile(t, "segment")
	for _, c := range []struct {
		args []string
		code int // with -identity app/v2
	}{
		{[]string{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"}, exitOK},
		{[]string{"blob", "put", "-writer", "a", "-epoch", "2", "-file", p, "wal", "s"}, exitOK},
		{[]string{"commit", "-writer", "a", "-epoch", "3", "-keep-payload", "wal", "s"}, exitOK},
		{[]string{"seal", "-writer", "a", "-epoch", "4", "wal", "s"}, exitOK},
		{[]string{"lease", "release", "-holder", "h", "wal"}, exitNotFound}, // past the brand: no lease of that name
	} {
		r := wf(t, append(c.args, "-store", addr)...)
		assert.Equal(t, exitWire, r.code, "%v: %s", c.args, r)
		assert.Contains(t, r.stderr, "check -identity", "%v", c.args)
		r = wf(t, append(c.args, "-store", addr, "-identity", "app/v2")...)
		assert.Equal(t, c.code, r.code, "%v -identity app/v2: %s", c.args, r)
	}
}
