//go:build linux

package main

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fsType is the type of the file system holding dir, as stat -f names it:
// a second opinion beside doctor's own statfs.
func fsType(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("stat", "-f", "-c", "%T", dir).Output()
	if err != nil {
		t.Skipf("stat -f: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestDoctorFileSystem: a directory store on tmpfs is a risk (a reboot
// empties it); one on a disk's file system is safe.
func TestDoctorFileSystem(t *testing.T) {
	for _, base := range []string{"/dev/shm", t.TempDir()} {
		if _, err := os.Stat(base); err != nil {
			continue
		}
		dir, err := os.MkdirTemp(base, "writefence-doctor-")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		addr := (&url.URL{Scheme: "file", Path: filepath.Join(dir, "store")}).String()
		require.Equal(t, exitOK, wf(t, "init", "-store", addr).code)
		code, fs := doctorFindings(t, addr, "file.filesystem", "-overwrite", "0") // the file system alone, whatever the load
		require.Len(t, fs, 1, base)
		if typ := fsType(t, dir); typ == "tmpfs" || typ == "ramfs" {
			assert.Equal(t, exitAtRisk, code, base)
			assert.Equal(t, levelRisk, fs[0].Level, base)
			assert.Contains(t, fs[0].Found, "is on a file system in memory (tmpfs)")
		} else {
			assert.Equal(t, exitOK, code, "%s (%s)", base, typ)
			assert.Equal(t, levelOK, fs[0].Level, "%s (%s)", base, typ)
		}
	}
}
