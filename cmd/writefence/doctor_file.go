//go:build linux

package main

import (
	"context"
	"fmt"
	"net/url"
	"syscall"
)

func init() {
	addressAudits["file"] = func(u *url.URL) auditor {
		return func(_ context.Context, a *audit) {
			dir, err := filePath(u)
			if err != nil {
				a.unknown("file.filesystem", err, "check the store address")
				return
			}
			fileSystem(a, dir)
		}
	}
}

// File system types (statfs f_type) whose contents a reboot discards.
const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// fileSystem reports whether the directory store at dir lives in memory.
func fileSystem(a *audit, dir string) {
	const check = "file.filesystem"
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		a.unknown(check, err, "check that the directory exists and can be read")
		return
	}
	switch uint32(st.Type) {
	case tmpfsMagic, ramfsMagic:
		a.add(finding{Check: check, Level: levelRisk, Found: fmt.Sprintf("%s is on a file system in memory (tmpfs)", dir),
			Consequence: "a reboot empties the directory: every shard looks new, and a deposed writer's push lands as if it were the first",
			Fix:         "move the store to a directory on disk, e.g. under /var/lib (the default is ~/.local/state/writefence)"})
	default:
		a.ok(check, fmt.Sprintf("%s is on a file system on disk (type %#x)", dir, uint32(st.Type)))
	}
}
