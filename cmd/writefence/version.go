package main

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"
)

var versionCommand = command{
	name:    "version",
	args:    "",
	nargs:   0,
	summary: "print the module version and VCS revision the command was built from",
	help: `
Prints the module's version (as go install pinned it, or "(devel)" for a
build from a checkout), the VCS revision and time the build was stamped with
(a build from a checkout with uncommitted changes says "modified"), and the
Go version. A binary built without VCS information (-buildvcs=false, often
set in GOFLAGS, or from a tree that is not a checkout) has no revision, and
says so. Quote the revision, or the module version, when reporting a
problem.

examples:
  writefence version
  writefence version -json`,
	define: defineVersion,
}

// versionResult is version's output.
type versionResult struct {
	Outcome  string `json:"outcome"`
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = debug.ReadBuildInfo

func defineVersion(fs *flag.FlagSet, inv *invocation) action {
	asJSON := fs.Bool("json", false, "print one JSON object on stdout")
	return func(_ context.Context, inv *invocation, _ []string) int {
		o := &output{inv: inv, json: *asJSON}
		bi, ok := readBuildInfo()
		if !ok {
			return o.fail(fmt.Errorf("writefence: version: the binary carries no build information"))
		}
		r := versionResult{Outcome: "ok", Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
		if r.Version == "" {
			r.Version = "(devel)"
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				r.Revision = s.Value
			case "vcs.time":
				r.Time = s.Value
			case "vcs.modified":
				r.Modified = s.Value == "true"
			}
		}
		if *asJSON {
			o.emit(r)
			return exitOK
		}
		line := fmt.Sprintf("writefence %s %s", r.Version, r.Go)
		switch {
		case r.Revision == "" && r.Version != "(devel)":
			// go install module@version stamps no VCS information; the
			// module version names the build.
			line += " (no VCS stamp: the module version names the build)"
		case r.Revision == "":
			// The build had no VCS information to stamp: -buildvcs=false
			// (often in GOFLAGS), or a source tree that is not a checkout.
			line += " (no VCS stamp: built without VCS information, as with -buildvcs=false, so the revision is unknown)"
		default:
			line += " revision " + r.Revision
			if r.Time != "" {
				line += " " + r.Time
			}
			if r.Modified {
				line += " modified"
			}
		}
		if r.Module != "" {
			line += " module " + r.Module
		}
		fmt.Fprintln(inv.stdout, line)
		return exitOK
	}
}
