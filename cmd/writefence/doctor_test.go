package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

func init() {
	// levels://risk,unknown,warn adds one finding of each level named,
	// over an in-memory store.
	openers["levels"] = func(_ context.Context, u *url.URL) (*opened, error) {
		return &opened{store: &writefence.MemStore{}, close: noClose, audit: func(_ context.Context, a *audit) {
			for _, l := range strings.Split(u.Host, ",") {
				a.add(finding{Check: "test." + l, Level: level(l), Found: "a setting of level " + l})
			}
		}}, nil
	}
}

// mispairing is a store whose Get returns, once a key has been
// overwritten, the current bytes with the previous version on every third
// read.
type mispairing struct {
	mu    sync.Mutex // serialises the calls, and guards prev and reads
	mem   writefence.MemStore
	prev  map[string]string // each key's version before its last write
	reads int
}

func (m *mispairing) Get(ctx context.Context, key string) ([]byte, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, v, err := m.mem.Get(ctx, key)
	if err != nil {
		return nil, "", err
	}
	m.reads++
	if p := m.prev[key]; p != "" && m.reads%3 == 0 {
		v = p
	}
	return d, v, nil
}

func (m *mispairing) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.mem.PutIfVersion(ctx, key, data, expect)
	if err == nil {
		if m.prev == nil {
			m.prev = map[string]string{}
		}
		m.prev[key] = expect
	}
	return v, err
}

func (m *mispairing) Delete(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.prev, key)
	return m.mem.Delete(ctx, key)
}

// doctorLines parses doctor's -json output: the findings, then the result.
func doctorLines(t *testing.T, r result) ([]finding, map[string]any) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.NotEmpty(t, lines, "%s", r)
	var fs []finding
	for _, l := range lines[:len(lines)-1] {
		var f finding
		require.NoError(t, json.Unmarshal([]byte(l), &f), "%s", r)
		fs = append(fs, f)
	}
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res), "%s", r)
	return fs, res
}

// doctorFindings runs doctor -json on addr with args and returns its exit
// status and the findings of check.
func doctorFindings(t *testing.T, addr, check string, args ...string) (int, []finding) {
	t.Helper()
	r := wf(t, append([]string{"doctor", "-json", "-store", addr}, args...)...)
	fs, _ := doctorLines(t, r)
	return r.code, findingsOf(fs, check)
}

// oneFinding returns the one finding of check in doctor's -json output r.
func oneFinding(t *testing.T, r result, check string) finding {
	t.Helper()
	fs, _ := doctorLines(t, r)
	f := findingsOf(fs, check)
	require.Len(t, f, 1, "%s: %s", check, r)
	return f[0]
}

// assertFinding runs doctor -json -writes=false on addr, asserts its exit
// status and the level of its one finding of check and, unless found is
// empty, what it found; it returns the finding.
func assertFinding(t *testing.T, addr, check string, code int, lvl level, found string) finding {
	t.Helper()
	r := wf(t, "doctor", "-json", "-writes=false", "-store", addr)
	f := oneFinding(t, r, check)
	assert.Equal(t, code, r.code, "%s: %s", check, r)
	assert.Equal(t, lvl, f.Level, "%s: %+v", check, f)
	if found != "" {
		assert.Equal(t, found, f.Found, check)
	}
	return f
}

// assertDoctorClean runs doctor -json on addr, reads under overwrite
// included, and asserts it exits 0 with every finding ok, those of checks
// and no other, in that order; it returns the findings.
func assertDoctorClean(t *testing.T, addr string, checks ...string) []finding {
	t.Helper()
	r := wf(t, "doctor", "-json", "-overwrite", "2s", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	fs, res := doctorLines(t, r)
	assert.Equal(t, "ok", res["outcome"])
	var got []string
	for _, f := range fs {
		assert.Equal(t, levelOK, f.Level, "%+v", f)
		got = append(got, f.Check)
	}
	assert.Equal(t, checks, got, "%s", r)
	return fs
}

// findingsOf returns the findings of check.
func findingsOf(fs []finding, check string) []finding {
	var out []finding
	for _, f := range fs {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// TestDoctorExitStatus: a risk exits 11, an unreadable setting 1 (a risk
// wins), warnings alone 0; -json prints each finding, then the result
// with its outcome and counts.
func TestDoctorExitStatus(t *testing.T) {
	for _, tt := range []struct {
		levels  string
		code    int
		outcome string
	}{
		{"ok,warn", exitOK, "ok"},
		{"ok,unknown,warn", exitError, "error"},
		{"unknown,risk", exitAtRisk, "at_risk"},
		{"risk,risk", exitAtRisk, "at_risk"},
	} {
		r := wf(t, "doctor", "-writes=false", "-json", "-store", "levels://"+tt.levels)
		assert.Equal(t, tt.code, r.code, "%s: %s", tt.levels, r)
		fs, res := doctorLines(t, r)
		assert.Len(t, fs, strings.Count(tt.levels, ",")+1, tt.levels)
		assert.Equal(t, tt.outcome, res["outcome"], tt.levels)
		assert.EqualValues(t, strings.Count(tt.levels, "risk"), res["risks"], tt.levels)
		assert.EqualValues(t, strings.Count(tt.levels, "unknown"), res["unknown"], tt.levels)
		assert.EqualValues(t, strings.Count(tt.levels, "warn"), res["warnings"], tt.levels)
		assert.Equal(t, "writefence/", res["prefix"])
	}

	r := wf(t, "doctor", "-writes=false", "-store", "levels://risk,ok")
	assert.Equal(t, exitAtRisk, r.code, "%s", r)
	assert.Contains(t, r.stdout, "RISK     test.risk: a setting of level risk\n")
	assert.Contains(t, r.stdout, "ok       test.ok: a setting of level ok\n")
	assert.Equal(t, "writefence doctor: 1 setting can lose a record or an acknowledged write\n", r.stderr)
	assert.True(t, errors.Is(&atRiskError{1}, errAtRisk))
	assert.Contains(t, exitHelp(), "11  at risk")
}

// TestDoctorOverwrite: a store that pairs one write's bytes with another
// write's version under overwrite is untrusted (exit 9), whatever else
// doctor finds; one that pairs them right passes, and -writes=false or
// -overwrite 0 skip the check.
func TestDoctorOverwrite(t *testing.T) {
	r := wf(t, "doctor", "-json", "-overwrite", "2s", "-store", "levels://risk")
	assert.Equal(t, exitAtRisk, r.code, "%s", r)
	fs, _ := doctorLines(t, r)
	ow := findingsOf(fs, "reads.overwrite")
	require.Len(t, ow, 1, "%s", r)
	assert.Equal(t, levelOK, ow[0].Level, "%s", r)

	r = wf(t, "doctor", "-json", "-overwrite", "2s", "-store", "mispair://")
	assert.Equal(t, exitUntrusted, r.code, "%s", r)
	fs, res := doctorLines(t, r)
	ow = findingsOf(fs, "reads.overwrite")
	require.Len(t, ow, 1, "%s", r)
	assert.Equal(t, levelRisk, ow[0].Level)
	assert.Contains(t, ow[0].Found, "bytes and version of different writes")
	assert.Equal(t, "untrusted", res["outcome"])

	for _, args := range [][]string{{"-writes=false"}, {"-overwrite", "0"}} {
		r := wf(t, append([]string{"doctor", "-json", "-store", "mispair://"}, args...)...)
		assert.Equal(t, exitOK, r.code, "%v: %s", args, r)
		fs, _ := doctorLines(t, r)
		assert.Empty(t, findingsOf(fs, "reads.overwrite"), "%v", args)
	}

	r = wf(t, "doctor", "-overwrite", "-1s", "-store", "mem://")
	assert.Equal(t, exitUsage, r.code, "%s", r)
}

// TestDoctorMem: mem:// has no settings, and says so.
func TestDoctorMem(t *testing.T) {
	r := wf(t, "doctor", "-overwrite", "1s", "-store", "mem://")
	assert.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "warn     mem.memory: ")
	assert.Contains(t, r.stdout, "ok       reads.overwrite: ")
	assert.Contains(t, r.stdout, "no setting found that can lose a record or an acknowledged write (1 warning)\n")
}
