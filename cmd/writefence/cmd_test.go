package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// wf runs the command in-process with args.
func wf(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func (r result) String() string {
	return "exit " + itoa(r.code) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

func itoa(n int) string { return strconv.Itoa(n) }

// jsonOf decodes the command's -json output.
func jsonOf(t *testing.T, r result) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m), "%s", r)
	return m
}

// fileStore returns the address of a fresh directory store.
func fileStore(t *testing.T) string {
	t.Helper()
	return (&url.URL{Scheme: "file", Path: filepath.Join(t.TempDir(), "store")}).String()
}

// emptyStore returns the address of a fresh directory store that exists
// and holds nothing: reads never create one.
func emptyStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	_, err := writefence.NewDirConditionalStore(dir)
	require.NoError(t, err)
	return (&url.URL{Scheme: "file", Path: dir}).String()
}

// writeFile writes a payload file and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "payload")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestUsage(t *testing.T) {
	r := wf(t)
	assert.Equal(t, exitUsage, r.code)
	for _, c := range commands {
		assert.Contains(t, r.stderr, "  "+c.name+" ", "usage lists %s", c.name)
	}
	assert.Equal(t, exitUsage, wf(t, "nope").code)
	assert.Equal(t, exitUsage, wf(t, "-bogus", "latest").code)
	assert.Equal(t, exitUsage, wf(t, "help", "nope").code)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := wf(t, args...)
		assert.Equal(t, exitOK, r.code, "%v", args)
		assert.Contains(t, r.stdout, "exit status:")
		assert.Contains(t, r.stdout, "VALKEY_PASSWORD")
	}
}

// TestCommandHelp: every command has help with its flags, at least one
// example that names the command, and the exit statuses, both ways of
// asking for it.
func TestCommandHelp(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{"help", c.name}, {c.name, "-h"}, {c.name, "--help"}} {
			r := wf(t, args...)
			require.Equal(t, exitOK, r.code, "%v: %s", args, r)
			assert.Contains(t, r.stdout, "usage: writefence "+c.name)
			assert.Contains(t, r.stdout, "\nexamples:\n", "%v", args)
			assert.Regexp(t, `\n  writefence `+c.name+`[ \n]`, r.stdout, "%v: an example of the command", args)
			assert.Contains(t, r.stdout, "exit status:")
		}
	}
}

// TestExitStatusDocumented: the package comment and --help list the same
// statuses the code returns.
func TestExitStatusDocumented(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	help := exitHelp()
	codes := map[int]bool{}
	for _, o := range outcomes {
		assert.False(t, codes[o.code], "status %d listed twice", o.code)
		codes[o.code] = true
		assert.Contains(t, help, "\n  "+itoa(o.code)+" ", "help lists %d", o.code)
		assert.Contains(t, string(src), "\n//\t"+itoa(o.code)+" ", "package comment lists %d", o.code)
	}
	for code := exitOK; code <= exitViolation; code++ {
		assert.True(t, codes[code], "status %d has an outcome", code)
	}
	assert.True(t, codes[exitInterrupted])
}

func TestArgCount(t *testing.T) {
	addr := fileStore(t)
	for _, args := range [][]string{
		{"latest", "-store", addr, "wal"},
		{"latest", "-store", addr, "wal", "s", "extra"},
		{"probe", "-store", addr, "extra"},
		{"brand", "-store", addr},
	} {
		r := wf(t, args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "want ", "%v", args)
	}
}

// TestFlagsAnywhere: flags may follow the positional arguments, and "--"
// ends them, so a shard named like a flag can be addressed.
func TestFlagsAnywhere(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "x")
	r := wf(t, "push", "wal", "s", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p)
	require.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "--", "wal", "-dash")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "latest", "-store", addr, "-json", "--", "wal", "-dash")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "-dash", jsonOf(t, r)["shard"])
}
