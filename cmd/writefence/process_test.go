package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// runMainEnv makes the test binary run the command's main instead of the
// tests (see TestMain), so a test can run the command as a process: real
// stdout, signals, exit status, another user.
const runMainEnv = "WRITEFENCE_TEST_RUN_MAIN"

// wfCommand returns the command line args run as a process of the test
// binary (or of bin, when not empty). Its environment is the test's.
func wfCommand(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	if bin == "" {
		var err error
		bin, err = os.Executable()
		require.NoError(t, err)
	}
	c := exec.Command(bin, args...)
	c.Env = append(os.Environ(), runMainEnv+"=1")
	return c
}

// wfProcess runs args as a process and returns its result.
func wfProcess(t *testing.T, args ...string) result {
	t.Helper()
	c := wfCommand(t, "", args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	var exit *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &exit)
	}
	return result{c.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}
