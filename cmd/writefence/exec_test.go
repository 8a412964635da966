//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writefence exec with real processes: supervisors (this test binary run
// as the command) on one lease, each running a shell program that pushes
// through "writefence push -term" when the test tells it to, on a store
// the test names. The test pauses the holder with SIGSTOP past its TTL and
// kills another with SIGKILL, and checks what the documentation promises:
// the program starts only once the shard is sealed at its term; a paused
// supervisor cannot stop its program, whose writes after the next
// holder's seal the store refuses (exit 4); once the supervisor runs
// again it stops the program at once (SIGTERM, SIGKILL -grace later); a
// killed supervisor takes its program with it; exec ends with 75 after a
// stop for the lease, and with the program's status otherwise.
//
// Every wait is for a line the processes print (a handshake), bounded by
// a deadline far above what it takes on a loaded machine; only the TTL is
// real time, and the stop deadline is measured against the grace plus a
// slack for a loaded machine to run the resumed supervisor.

const (
	execTTL   = 4 * time.Second // renewals every 1.33s; SIGTERM with 1s left, SIGKILL with 0.5s
	execGrace = 500 * time.Millisecond
	execSlack = 2500 * time.Millisecond // for a loaded machine to schedule a resumed process
	execWait  = 45 * time.Second        // a safeguard: every awaited line comes long before
)

// execProgram is the program the supervisors run. It says it is ready,
// then runs the commands the test writes to the FIFO $1: "push N" pushes
// "<holder> N" at its term and prints the push's status and output,
// "exit N" exits with N. With IGNORE_TERM=1 it ignores SIGTERM, so that
// only SIGKILL stops it.
const execProgram = `#!/bin/sh
if [ "$IGNORE_TERM" = 1 ]; then trap '' TERM; fi
exec 3<>"$1"
echo "ready $WRITEFENCE_HOLDER term=$WRITEFENCE_TERM pid=$$ lease=$WRITEFENCE_LEASE"
while read -r cmd arg <&3; do
	case $cmd in
	push)
		out=$(echo "$WRITEFENCE_HOLDER $arg" | writefence push -term "$WRITEFENCE_TERM" wal 0 2>&1)
		echo "push $arg status=$? $out" ;;
	exit)
		exit "$arg" ;;
	esac
done
`

// execRun is one run of the scenario: its directory and the transcript
// of every process's output.
type execRun struct {
	t     *testing.T
	dir   string
	addr  string
	env   []string // added to every process's environment
	start time.Time
	mu    sync.Mutex // guards lines and procs
	lines []string
	procs []*execProc
}

func newExecRun(t *testing.T, addr string, env []string) *execRun {
	dir := t.TempDir()
	bin, err := os.Executable()
	require.NoError(t, err)
	require.NoError(t, os.Symlink(bin, filepath.Join(dir, "writefence")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "program.sh"), []byte(execProgram), 0o755))
	r := &execRun{t: t, dir: dir, addr: addr, env: env, start: time.Now()}
	t.Cleanup(r.stop)
	return r
}

func (r *execRun) note(who, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf("%7.3fs %s| %s", time.Since(r.start).Seconds(), who, line))
}

func (r *execRun) transcript() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// stop kills whatever is left: every supervisor and every program's group.
func (r *execRun) stop() {
	r.mu.Lock()
	procs := r.procs
	r.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	if r.t.Failed() || testing.Verbose() {
		r.t.Logf("transcript:\n%s", r.transcript())
	}
}

// execProc is one supervisor: writefence exec as a process.
type execProc struct {
	r        *execRun
	name     string
	cmd      *exec.Cmd
	ctl      *os.File    // the FIFO its program reads commands from
	lines    chan string // its output, stdout and stderr, line by line
	pending  []string    // lines read and not yet matched, in order
	read     sync.WaitGroup
	exited   chan struct{}
	code     int
	mu       sync.Mutex
	programs []int // the pids its programs said they run as
}

// supervise starts writefence exec as holder name, sealing wal/0, with
// the flags given, running the program; env is added to the program's
// environment.
func (r *execRun) supervise(name string, flags []string, env ...string) *execProc {
	t := r.t
	fifo := filepath.Join(r.dir, name+".ctl")
	if _, err := os.Stat(fifo); os.IsNotExist(err) {
		require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	}
	ctl, err := os.OpenFile(fifo, os.O_RDWR, 0) // never blocks, and the program never sees EOF
	require.NoError(t, err)
	args := append([]string{"exec", "-store", r.addr, "-lease", "wal", "-holder", name, "-ttl", execTTL.String(), "-grace", execGrace.String()}, flags...)
	args = append(args, "wal/0", "--", filepath.Join(r.dir, "program.sh"), fifo)
	cmd := wfCommand(t, "", args...)
	cmd.Env = append(cmd.Env, "PATH="+r.dir+":"+os.Getenv("PATH"))
	cmd.Env = append(append(cmd.Env, r.env...), env...)
	p := &execProc{r: r, name: name, cmd: cmd, ctl: ctl, lines: make(chan string, 4096), exited: make(chan struct{})}
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	errR, errW, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = outW, errW
	require.NoError(t, cmd.Start())
	outW.Close()
	errW.Close()
	r.note(name, "$ writefence "+strings.Join(args, " "))
	for _, pipe := range []*os.File{outR, errR} {
		p.read.Add(1)
		go func() {
			defer p.read.Done()
			defer pipe.Close()
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				r.note(name, sc.Text())
				p.lines <- sc.Text()
			}
		}()
	}
	go func() {
		err := cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			p.code = exit.ExitCode()
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		default:
			p.code = -1
		}
		r.note(name, fmt.Sprintf("(exec exited: %d)", p.code))
		close(p.exited)
	}()
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	return p
}

// expect waits for a line of the supervisor's output matching re, within
// d, and returns its submatches. The first such line not matched yet
// counts, whenever it came: stdout and stderr are two pipes, so lines of
// one and the other may arrive in either order.
func (p *execProc) expect(re string, d time.Duration) []string {
	p.r.t.Helper()
	rx := regexp.MustCompile(re)
	match := func(line string) []string {
		m := rx.FindStringSubmatch(line)
		if m != nil && strings.HasPrefix(line, "ready ") {
			pid, err := strconv.Atoi(regexp.MustCompile(`pid=(\d+)`).FindStringSubmatch(line)[1])
			require.NoError(p.r.t, err)
			p.mu.Lock()
			p.programs = append(p.programs, pid)
			p.mu.Unlock()
		}
		return m
	}
	for i, line := range p.pending {
		if m := match(line); m != nil {
			p.pending = append(p.pending[:i], p.pending[i+1:]...)
			return m
		}
	}
	deadline := time.After(d)
	for {
		select {
		case line := <-p.lines:
			if m := match(line); m != nil {
				return m
			}
			p.pending = append(p.pending, line)
		case <-deadline:
			p.r.t.Fatalf("%s: no line matching %q within %v; transcript:\n%s", p.name, re, d, p.r.transcript())
		}
	}
}

// tell writes a command for the supervisor's program.
func (p *execProc) tell(cmd string) {
	p.r.t.Helper()
	p.r.note(p.name, "(test: "+cmd+")")
	_, err := io.WriteString(p.ctl, cmd+"\n")
	require.NoError(p.r.t, err)
}

func (p *execProc) signal(sig syscall.Signal) {
	p.r.t.Helper()
	p.r.note(p.name, "(test: "+sig.String()+" to exec)")
	require.NoError(p.r.t, p.cmd.Process.Signal(sig))
}

// exit waits for exec to end and returns its status.
func (p *execProc) exit(d time.Duration) int {
	p.r.t.Helper()
	select {
	case <-p.exited:
		return p.code // its programs may hold its output open: kill waits for that
	case <-time.After(d):
		p.r.t.Fatalf("%s: exec did not end within %v; transcript:\n%s", p.name, d, p.r.transcript())
		return -1
	}
}

// kill ends the supervisor and its programs' groups, whatever they are
// doing, and waits for their output to end.
func (p *execProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	p.mu.Lock()
	for _, pid := range p.programs {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	p.mu.Unlock()
	<-p.exited
	p.read.Wait()
	p.ctl.Close()
}

// gone reports whether process pid has ended: it is no more, or a zombie
// not yet reaped.
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command's name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// execTakeover runs the scenario on the store at addr, every process with
// env added to its environment, and returns the epochs of the pushes that
// reported landing, by holder.
func execTakeover(t *testing.T, addr string, env ...string) map[string][]uint64 {
	r := newExecRun(t, addr, env)
	landed := map[string][]uint64{}
	push := func(p *execProc, n int) int {
		t.Helper()
		p.tell(fmt.Sprintf("push %d", n))
		m := p.expect(fmt.Sprintf(`^push %d status=(\d+)(?: landed: \S+ epoch (\d+))?`, n), execWait)
		code, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		if code == 0 {
			epoch, err := strconv.ParseUint(m[2], 10, 64)
			require.NoError(t, err, "a landed push prints its epoch: %q", m[0])
			landed[p.name] = append(landed[p.name], epoch)
		}
		return code
	}

	// a holds the lease, seals wal/0 at term 1, then starts its program.
	a := r.supervise("a", nil, "IGNORE_TERM=1")
	a.expect(`^writefence exec: lease wal: term 1: sealed wal/0; started the program`, execWait)
	a.expect(`^ready a term=1 pid=\d+ lease=wal$`, execWait)
	require.Equal(t, exitOK, push(a, 1))
	require.Equal(t, exitOK, push(a, 2))

	// b waits while a holds it.
	b := r.supervise("b", nil)
	b.expect(`^writefence exec: lease wal: held by a at term 1, until .*; waiting$`, execWait)

	// a is paused past its TTL: b takes over and seals at term 2 before
	// its program starts; a's program runs on, and the store refuses it.
	a.signal(syscall.SIGSTOP)
	b.expect(`^writefence exec: lease wal: term 2: sealed wal/0; started the program`, execWait)
	b.expect(`^ready b term=2 `, execWait)
	for n := 3; n <= 4; n++ {
		assert.Equal(t, exitStale, push(a, n), "a write of the paused supervisor's program after the new term's seal")
	}
	require.Equal(t, exitOK, push(b, 1))
	assert.Equal(t, exitStale, push(a, 5))
	a.mu.Lock()
	aProgram := a.programs[0]
	a.mu.Unlock()
	assert.False(t, gone(aProgram), "nothing stops the program of a paused supervisor")

	// a runs again: SIGTERM at once, which its program ignores, SIGKILL a
	// grace later; a ends with 75.
	a.signal(syscall.SIGCONT)
	resumed := time.Now()
	a.expect(`^writefence exec: lease wal: term 1 .*: stopping the program \(pid \d+\): SIGTERM, SIGKILL in 500ms$`, execWait)
	a.expect(`^writefence exec: lease wal: the program \(pid \d+\) exited with status 137$`, execWait)
	stopped := time.Since(resumed)
	assert.Less(t, stopped, execGrace+execSlack, "the program stopped %v after its supervisor ran again", stopped)
	assert.Greater(t, stopped, execGrace-50*time.Millisecond, "SIGKILL came a grace after SIGTERM, not before")
	assert.True(t, gone(aProgram))
	assert.Equal(t, exitLeaseEnded, a.exit(execWait))

	// b is killed: its program dies with it. c, with -restart, takes over
	// once b's term has ended, at term 3.
	c := r.supervise("c", []string{"-restart"})
	c.expect(`^writefence exec: lease wal: held by b at term 2`, execWait)
	b.mu.Lock()
	bProgram := b.programs[0]
	b.mu.Unlock()
	b.signal(syscall.SIGKILL)
	assert.Equal(t, 128+int(syscall.SIGKILL), b.exit(execWait))
	for deadline := time.Now().Add(execWait); !gone(bProgram) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	assert.True(t, gone(bProgram), "a killed supervisor takes its program with it")
	c.expect(`^writefence exec: lease wal: term 3: sealed wal/0; started the program`, execWait)
	c.expect(`^ready c term=3 `, execWait)
	require.Equal(t, exitOK, push(c, 1))

	// A write at b's term, as something b's program left behind would make:
	// refused.
	stale := wfCommand(t, "", "push", "-store", addr, "-writer", "b", "-term", "2", "wal", "0")
	stale.Env = append(stale.Env, env...)
	stale.Stdin = strings.NewReader("b's leftover")
	out, err := stale.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v: %s", err, out)
	assert.Equal(t, exitStale, exit.ExitCode(), "%s", out)

	// c's program exits by itself: c releases the lease and ends with its
	// status.
	c.tell("exit 3")
	c.expect(`^writefence exec: lease wal: term 3 released$`, execWait)
	assert.Equal(t, 3, c.exit(execWait))
	return landed
}

// execStore is a store the takeover runs on: its address, what every
// process needs in its environment to reach it, and what to check of it
// afterwards, given the epochs of the pushes that reported landing.
type execStore func(t *testing.T) (addr string, env []string, check func(t *testing.T, landed map[string][]uint64))

// execStores are the stores TestExecTakeover runs on: the directory store,
// and MinIO where the build has it (exec_s3_test.go).
var execStores = map[string]execStore{
	"file": func(t *testing.T) (string, []string, func(*testing.T, map[string][]uint64)) {
		addr := fileStore(t)
		return addr, nil, func(t *testing.T, landed map[string][]uint64) {
			r := wf(t, "latest", "-json", "-store", addr, "wal", "0")
			require.Equal(t, exitOK, r.code, "%s", r)
			assert.EqualValues(t, landed["c"][0], jsonOf(t, r)["epoch"], "the last push that landed is the record")
		}
	},
}

// TestExecTakeover runs the scenario on each store, the stores at once.
// It times the real clock, so it does not run beside the package's
// parallel tests.
func TestExecTakeover(t *testing.T) {
	for name, store := range execStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr, env, check := store(t)
			landed := execTakeover(t, addr, env...)
			assert.Len(t, landed["a"], 2)
			assert.Len(t, landed["b"], 1)
			assert.Len(t, landed["c"], 1)
			check(t, landed)
		})
	}
}

// TestExecUsage: exec's mistakes are found before any lease is taken.
func TestExecUsage(t *testing.T) {
	addr := fileStore(t)
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"-lease", "wal", "-holder", "a", "true"}, exitUsage, `after "--"`},
		{[]string{"-lease", "wal", "-holder", "a", "--"}, exitUsage, `after "--"`},
		{[]string{"-holder", "a", "--", "true"}, exitUsage, "-lease is required"},
		{[]string{"-lease", "wal", "--", "true"}, exitUsage, "-holder is required"},
		{[]string{"-lease", "wal", "-holder", "a", "-ttl", "8s", "-grace", "2s", "--", "true"}, exitUsage, "-grace 2s: want 0 to -ttl/8 (1s)"},
		{[]string{"-lease", "wal", "-holder", "a", "-grace", "soon", "--", "true"}, exitUsage, "duration"},
		{[]string{"-lease", "wal", "-holder", "a", "wal", "--", "true"}, exitUsage, "want plugin/shard"},
		{[]string{"-lease", "wal", "-holder", "a", "/0", "--", "true"}, exitUsage, "want plugin/shard"},
		{[]string{"-lease", "wal", "-holder", "a", "--", "no-such-program-wf"}, exitNoProgram, "program not found"},
		{[]string{"-lease", "wal", "-holder", "a", "--", "/etc/passwd"}, exitCannotRun, "permission denied"},
	} {
		r := wf(t, append([]string{"exec", "-store", addr}, c.args...)...)
		assert.Equal(t, c.code, r.code, "%v: %s", c.args, r)
		assert.Contains(t, r.stderr, c.says, "%v", c.args)
	}
	assert.Equal(t, exitUsage, wf(t, "-json", "exec", "-lease", "wal", "-holder", "a", "--", "true").code, "exec prints no JSON")

	// A store that does not exist is refused, as every command that writes
	// refuses it, unless -create is given.
	missing := (&url.URL{Scheme: "file", Path: filepath.Join(t.TempDir(), "missing")}).String()
	r := wf(t, "exec", "-store", missing, "-lease", "wal", "-holder", "a", "--", "true")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "-create")
	c := wfCommand(t, "", "exec", "-store", missing, "-create", "-lease", "wal", "-holder", "a", "--", "true")
	out, err := c.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "term 1 released")
	r = wf(t, "latest", "-store", addr, "wal", "0")
	assert.NotEqual(t, exitOK, r.code, "nothing was sealed: %s", r)
}

// TestExecStatus: exec ends with the program's status, passes its output
// through and gives it its environment; the lease is released, so the
// next exec takes the next term at once.
func TestExecStatus(t *testing.T) {
	addr := fileStore(t)
	script := `echo "term=$WRITEFENCE_TERM holder=$WRITEFENCE_HOLDER lease=$WRITEFENCE_LEASE prefix=$WRITEFENCE_PREFIX store=$WRITEFENCE_STORE"; exit 7`
	for term := 1; term <= 2; term++ {
		c := wfCommand(t, "", "exec", "-store", addr, "-prefix", "app", "-lease", "l", "-holder", "h", "--", "sh", "-c", script)
		var stdout, stderr strings.Builder
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "%v: %s", err, stderr.String())
		assert.Equal(t, 7, exit.ExitCode(), "%s", stderr.String())
		assert.Equal(t, fmt.Sprintf("term=%d holder=h lease=l prefix=app/ store=%s\n", term, addr), stdout.String())
		assert.Contains(t, stderr.String(), fmt.Sprintf("term %d released", term))
	}
}

// TestExecDocPushTermUnderIdentity: exec's and push's help say that a
// program run by "writefence exec" pushes with `writefence push -term
// "$WRITEFENCE_TERM" <plugin> <shard>` and nothing more ("is all it
// needs"). exec takes -identity for the records it seals; the program's
// push must then write that identity too, or every push of the program
// is refused as of another wire identity (exit 5) over exec's own seal.
func TestExecDocPushTermUnderIdentity(t *testing.T) {
	addr := fileStore(t)
	dir := t.TempDir()
	bin, err := os.Executable()
	require.NoError(t, err)
	require.NoError(t, os.Symlink(bin, filepath.Join(dir, "writefence")))
	script := `echo x | writefence push -term "$WRITEFENCE_TERM" wal 0`
	c := wfCommand(t, "", "exec", "-store", addr, "-identity", "app/v1", "-lease", "l", "-holder", "h", "wal/0", "--", "sh", "-c", script)
	c.Env = append(c.Env, "PATH="+dir+":"+os.Getenv("PATH"))
	var stdout, stderr strings.Builder
	c.Stdout, c.Stderr = &stdout, &stderr
	err = c.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		require.Failf(t, "the program's push -term failed", "exit %d\nstdout:\n%s\nstderr:\n%s", exit.ExitCode(), stdout.String(), stderr.String())
	}
	require.NoError(t, err, "%s", stderr.String())
	assert.Contains(t, stdout.String(), "landed: writefence/s/wal/0")
}
