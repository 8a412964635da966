package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// What Install installs from the Go module proxy and npm, at pinned
// versions; staticcheck is .ci/run's.
var (
	goPrograms = []string{
		"github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c",
		"github.com/fsouza/fake-gcs-server@v1.56.1",
		"honnef.co/go/tools/cmd/staticcheck@v0.8.2",
	}
	azuritePackage  = "azurite@3.37.0"
	dynalitePackage = "dynalite@4.0.0"
)

// BinDir is where Install puts the programs it builds with go install:
// WRITEFENCE_SERVER_BIN, by default /var/cache/writefence-ci/bin. npm
// packages go beside it, in npm/.
func BinDir() string {
	if d := os.Getenv("WRITEFENCE_SERVER_BIN"); d != "" {
		return d
	}
	return "/var/cache/writefence-ci/bin"
}

// npmDir is the directory of the npm package pkg (name@version).
func npmDir(pkg string) string {
	return filepath.Join(filepath.Dir(BinDir()), "npm", strings.Replace(pkg, "@", "-", 1))
}

// Install installs what the tests need and is missing, saying so on w:
// the Debian packages (as root, with apt-get, which takes one lock, so
// one after another; Valkey from bookworm-backports), the Go programs
// (go install into BinDir, each with a stamp of the version it built)
// and the npm packages, the three kinds at once. A second run on the
// same machine installs nothing. The tests start servers of their own,
// so services that a package starts are stopped.
func Install(w io.Writer) error {
	if err := os.MkdirAll(BinDir(), 0o755); err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards errs and w
		errs []error
	)
	// run runs cmd, which installs what, and reports whether it succeeded.
	run := func(what string, cmd *exec.Cmd) bool {
		mu.Lock()
		fmt.Fprintln(w, "install:", what)
		mu.Unlock()
		out, err := cmd.CombinedOutput()
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("install %s: %s: %w\n%s", what, cmd, err, out))
			mu.Unlock()
		}
		return err == nil
	}
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	wg.Go(func() { installDebian(run, fail) })
	for _, pkg := range goPrograms {
		wg.Go(func() {
			name := filepath.Base(strings.Split(pkg, "@")[0])
			stamp := filepath.Join(BinDir(), "."+name+".version")
			// The stamp names what was built: module@version, or the
			// version alone, as .ci/run wrote staticcheck's.
			b, _ := os.ReadFile(stamp)
			got := strings.TrimSpace(string(b))
			if (got == pkg || strings.HasSuffix(pkg, "@"+got)) && exists(filepath.Join(BinDir(), name)) {
				return
			}
			cmd := exec.Command("go", "install", pkg)
			cmd.Env = append(os.Environ(), "GOBIN="+BinDir(), "GOFLAGS=-mod=mod")
			if run(pkg, cmd) {
				if err := os.WriteFile(stamp, []byte(pkg+"\n"), 0o644); err != nil {
					fail(err)
				}
			}
		})
	}
	for pkg, installed := range map[string]string{
		azuritePackage:  filepath.Join("node_modules", ".bin", "azurite-blob"),
		dynalitePackage: filepath.Join("node_modules", "dynalite", "cli.js"),
	} {
		wg.Go(func() {
			if !exists(filepath.Join(npmDir(pkg), installed)) {
				run(pkg+" (npm)", exec.Command("npm", "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error",
					"--cache", filepath.Join(filepath.Dir(BinDir()), "npm", "cache"), "--prefix", npmDir(pkg), pkg))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// installDebian installs the Debian packages that are missing, and stops
// the services they start: the tests start servers of their own.
func installDebian(run func(what string, cmd *exec.Cmd) bool, fail func(error)) {
	apt := func(args ...string) *exec.Cmd {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd
	}
	pg, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	var pkgs, services []string
	for _, p := range []struct {
		pkg, service string
		present      bool
	}{
		{"etcd-server", "etcd", onPath("etcd")},
		// ZooKeeper brings the Java runtime it needs.
		{"zookeeper", "", onPath("java") && exists(ZooKeeperJar)},
		{"postgresql", "postgresql", len(pg) > 0},
	} {
		if !p.present {
			pkgs, services = append(pkgs, p.pkg), append(services, p.service)
		}
	}
	valkey := !onPath("valkey-server")
	if !valkey && len(pkgs) == 0 {
		return
	}
	if valkey {
		services = append(services, "valkey-server")
		err := os.WriteFile("/etc/apt/sources.list.d/writefence-backports.list",
			[]byte("deb http://deb.debian.org/debian bookworm-backports main\n"), 0o644)
		if err != nil {
			fail(err)
			return
		}
	}
	if !run("apt-get update", apt("update", "-qq")) {
		return
	}
	if valkey {
		run("valkey-server (bookworm-backports)", apt("install", "-y", "-qq", "-t", "bookworm-backports", "valkey-server"))
	}
	if len(pkgs) > 0 {
		run(strings.Join(pkgs, ", ")+" (Debian)", apt(append([]string{"install", "-y", "-qq", "--no-install-recommends"}, pkgs...)...))
	}
	for _, s := range services {
		if s != "" && exec.Command("systemctl", "stop", s).Run() != nil {
			_ = exec.Command("service", s, "stop").Run()
		}
	}
}

func onPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
