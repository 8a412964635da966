// Command servers installs the real servers the tests run against and
// starts, for a whole run, the ones the tests share (see
// internal/testserver/launch):
//
//	go run ./internal/testserver/cmd/servers -install
//	go run ./internal/testserver/cmd/servers [-env file] [command [arg...]]
//
// With -install it installs what is missing (as root, on Debian
// bookworm), and ends there unless a command follows. Otherwise it starts
// the servers, with their data in a new directory, and runs the command
// with the environment that names them; when the command ends it stops
// them, removes their data and exits as the command did. Without a
// command it writes that environment, as export lines for a shell to
// source, to the -env file (standard output by default) and keeps the
// servers up until it is interrupted or terminated.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/writefence/writefence/internal/testserver/launch"
)

func main() {
	install := flag.Bool("install", false, "install the servers that are missing")
	envFile := flag.String("env", "", "without a command, write the servers' environment to `file`")
	flag.Parse()
	if *install {
		if err := launch.Install(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "servers:", err)
			os.Exit(1)
		}
		if flag.NArg() == 0 {
			return
		}
	}
	os.Exit(run(*envFile, flag.Args()))
}

// run starts the servers and runs args with them, or waits for a signal
// when args is empty, and returns the exit code.
func run(envFile string, args []string) int {
	// Caught from now on, so that the servers are stopped whenever this
	// process is asked to end.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	dir, err := launch.TempDir("writefence-servers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "servers:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	env, stop, err := launch.Shared(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "servers:", err)
		return 1
	}
	defer stop()
	fmt.Fprintf(os.Stderr, "servers: up in %.1fs, data in %s:\n  %s\n", time.Since(t0).Seconds(), dir, strings.Join(env, "\n  "))
	if len(args) == 0 {
		if err := writeEnv(envFile, env); err != nil {
			fmt.Fprintln(os.Stderr, "servers:", err)
			return 1
		}
		<-sigs
		return 0
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "servers:", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case err := <-done:
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return exit.ExitCode()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "servers:", err)
				return 1
			}
			return 0
		}
	}
}

// writeEnv writes env as export lines to file, whole or not at all, or
// to standard output when file is "".
func writeEnv(file string, env []string) error {
	var b strings.Builder
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s='%s'\n", k, strings.ReplaceAll(v, "'", `'\''`))
	}
	if file == "" {
		_, err := os.Stdout.WriteString(b.String())
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".servers-env-")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(b.String()); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
