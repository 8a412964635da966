//go:build linux && !writefence_nominio && !writefence_nosdk

package writefence

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/promise"
	"github.com/writefence/writefence/internal/record"
	"github.com/writefence/writefence/internal/testserver"
)

// The end-to-end test of the self-renewing lease: two writer processes
// (this test binary, re-executed as TestLeaseEndToEndHelper) each run a
// shipper loop on MinIO: Hold (a self-renewing Lease that seals the shard
// at takeover), then PushFrom every 100ms until the held context is done,
// then Hold again. The parent pauses the holder with SIGSTOP at a moment
// the helper announces and waits at, so the pause falls exactly there:
//
//   - renew: its renewal's conditional PUT has landed, its reply not yet
//     seen by the Lease;
//   - push: its push drew an epoch and is about to send its PUT;
//   - upload: a 4 MiB conditional PUT is in flight, 1 MiB of its body sent
//     (MinIO holds the object's lock meanwhile, so the new holder's seal
//     waits until the paused writer resumes);
//   - kill: as upload, but the helper is killed with SIGKILL and restarted
//     once the other has taken over.
//
// The rounds alternate two modes, by round and moment, so that each lane
// runs both. In "stop" the paused helper pushes under its held context, as
// a pipeline should, so its push in flight must end cancelled once it
// resumes and finds its lease expired (the helper lets it go on once the
// Lease has cancelled the context, which the Lease does from a goroutine
// of its own); in "finish" it lets a push it started finish (a context
// without the held one's cancellation), so the store itself must refuse
// it, or admit it before the new holder's seal.
//
// In every round the other helper takes over and seals, the paused one,
// resumed (or restarted), learns it lost the lease and does not get it
// back while the other holds it, and the other keeps shipping. At the end
// the store's own version history of the shard's record (bucket
// versioning) must show epochs strictly rising (so at most one version per
// epoch), every version decoding, every push a helper reported landed,
// the final record being the last push that returned nil, and each term of
// the lease record beginning with its holder's seal (the term's first
// epoch, the payload unchanged).
//
// The rounds run in e2eLanes lanes at once, each lane two helpers on a
// bucket of its own: lane L runs rounds L, L+3, ... of every moment in
// turn, and checks its own bucket's history. The lanes wait on their
// helpers' leases much more than they work, and the test runs alone (it is
// not parallel to other tests), so three at once keep its timing. CI runs
// three rounds per moment, one lane each (about 10 s, against 30 s one
// after the other). For a longer run, with the servers up (about 2.5 s a
// round in each lane):
//
//	WRITEFENCE_LEASE_E2E_ROUNDS=25 go run ./internal/testserver/cmd/servers \
//		go test -run '^TestLeaseEndToEnd$' -v -timeout 30m .

const (
	e2eHelperEnv = "WRITEFENCE_LEASE_E2E_HELPER" // the holder a helper runs as
	e2eBucketEnv = "WRITEFENCE_LEASE_E2E_BUCKET"
	e2eRoundsEnv = "WRITEFENCE_LEASE_E2E_ROUNDS" // rounds per moment; 3 when unset

	e2eTTL       = 2 * time.Second        // renewals every 667ms
	e2eEvery     = 100 * time.Millisecond // a push every 100ms
	e2eBig       = 4 << 20                // an upload's payload
	e2ePauseAt   = 1 << 20                // an upload pauses once this much of its body is sent
	e2eLeaseName = "wal/0"
	e2eWait      = time.Minute // a safeguard: what the parent waits for comes long before
	e2eLanes     = 3           // runs at once, each of two helpers on a bucket of its own
)

var e2eMoments = []string{"renew", "push", "upload", "kill"}

func TestLeaseEndToEnd(t *testing.T) {
	rounds := 3
	if s := os.Getenv(e2eRoundsEnv); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, e2eRoundsEnv)
		require.Positive(t, n, e2eRoundsEnv)
		rounds = n
	}
	srv := testserver.S3Server(t)
	c := srv.Client(t, testserver.HTTPTransport(t))
	for lane := range min(rounds, e2eLanes) {
		t.Run(fmt.Sprintf("lane%d", lane), func(t *testing.T) {
			t.Parallel()
			bucket := e2eVersionedBucket(t, c)
			r := &e2eRun{t: t, bucket: bucket, store: newMinioStore(c, bucket, nil),
				events: make(chan e2eEvent, 1024), helpers: make(map[string]*e2eHelper)}
			t.Cleanup(r.killAll)
			r.start("a")
			r.start("b")
			start := time.Now()
			n := 0
			for i := lane; i < rounds; i += e2eLanes {
				for _, m := range e2eMoments {
					r.round(i, m)
					n++
				}
			}
			t.Logf("%d rounds in %v", n, time.Since(start).Round(time.Millisecond))
			r.stopAll()
			r.checkHistory(c)
		})
	}
}

// TestLeaseEndToEndHelper is not a test on its own: TestLeaseEndToEnd runs
// it in a child process, as one writer. It reports on file descriptor 3,
// one line per event, and takes commands on stdin: "arm <moment> <mode>"
// (pause at the moment's next occurrence: report "at <moment>" and wait;
// mode "finish" lets the pushes it starts from then on run to their end
// whatever the held context), "go" (carry on) and "stop" (stop shipping,
// release, report "stopped").
func TestLeaseEndToEndHelper(t *testing.T) {
	holder := os.Getenv(e2eHelperEnv)
	if holder == "" {
		t.Skip("run by TestLeaseEndToEnd in a child process")
	}
	bucket := os.Getenv(e2eBucketEnv)
	rep := &e2eReporter{w: os.NewFile(3, "reports")}
	defer rep.w.Close()

	var armed atomic.Value
	armed.Store("")
	var finish atomic.Bool
	cont := make(chan struct{}, 1)
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopping := func() { stopOnce.Do(func() { close(stop) }) }
	commands := make(chan struct{})
	go func() {
		defer close(commands)
		defer stopping() // the parent is gone
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmd, arg, _ := strings.Cut(sc.Text(), " ")
			switch cmd {
			case "arm":
				moment, mode, _ := strings.Cut(arg, " ")
				finish.Store(mode == "finish")
				armed.Store(moment)
			case "go":
				cont <- struct{}{}
			case "stop":
				stopping()
			}
		}
	}()
	defer func() { <-commands }() // the parent closes stdin after "stop"
	// current is the held context of the hold in progress.
	var currentMu sync.Mutex
	var current context.Context = context.Background()
	pause := func(moment string) {
		if !armed.CompareAndSwap(moment, "") {
			return
		}
		rep.send("at", moment)
		select {
		case <-cont:
		case <-stop:
		}
		if (moment == "push" || moment == "upload") && !finish.Load() {
			// Resumed after its lease expired, a push under the held
			// context must end cancelled. The Lease cancels that context
			// from a goroutine of its own as the process resumes, so the
			// push goes on only once it has: otherwise the push could
			// reach the store first and be refused as stale there, and
			// the run would not show that the push honours the context.
			currentMu.Lock()
			held := current
			currentMu.Unlock()
			select {
			case <-held.Done():
			case <-stop:
			}
		}
	}

	shardKey, err := keys.Shard("", "wal", "0")
	require.NoError(t, err)
	leaseKey, err := keys.Lease("", e2eLeaseName)
	require.NoError(t, err)
	tr := &e2eTransport{base: testserver.HTTPTransport(t), path: "/" + bucket + "/" + shardKey, pause: func() { pause("upload") }}
	store := newMinioStore(testserver.S3Server(t).Client(t, tr), bucket, nil)
	fence := &Fence{Store: store, Observer: func(_ context.Context, e WriteEvent) {
		if e.Op == opLeaseAcquire && e.Err == nil {
			rep.send("acquired", "")
		}
	}}
	lease := &Lease{Fence: fence, Name: e2eLeaseName, Holder: holder, TTL: e2eTTL}
	ctx := hook.With(context.Background(), &hook.Hooks{Write: func(ctx context.Context, key string, write func() (string, error)) (string, error) {
		switch key {
		case shardKey:
			pause("push")
		case leaseKey:
			v, err := write()
			pause("renew")
			return v, err
		}
		return write()
	}})
	wait := func(held context.Context, d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-held.Done():
		case <-stop:
		case <-t.C:
		}
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}

	n := 0
	for !stopped() {
		held, err := lease.Hold(ctx, Shard{"wal", "0"})
		if err != nil {
			rep.send("holdfail", err.Error())
			wait(context.Background(), e2eTTL/5)
			continue
		}
		currentMu.Lock()
		current = held
		currentMu.Unlock()
		rep.send("held", "")
		for held.Err() == nil && !stopped() {
			n++
			payload := e2ePayload(holder, n, armed.Load() == "upload")
			pctx := held
			if finish.Load() {
				pctx = context.WithoutCancel(held)
			}
			epoch, err := fence.PushFrom(pctx, lease, "wal", "0", holder, payload)
			if err == nil {
				sum := sha256.Sum256(payload)
				rep.send("landed", fmt.Sprintf("%d %s", epoch, hex.EncodeToString(sum[:])))
			} else {
				rep.send("refused", err.Error())
			}
			wait(held, e2eEvery)
		}
		if held.Err() != nil {
			rep.send("ended", context.Cause(held).Error())
		}
	}
	if err := lease.Release(context.Background()); err != nil {
		rep.send("release", err.Error())
	}
	rep.send("stopped", "")
}

// e2ePayload is push n of holder in this process: unique, of 1 KiB, or of
// 4 MiB for an upload.
func e2ePayload(holder string, n int, big bool) []byte {
	size := 1 << 10
	if big {
		size = e2eBig
	}
	b := make([]byte, size)
	var seed [32]byte
	copy(seed[:], fmt.Sprintf("%s %d %d", holder, os.Getpid(), n))
	_, _ = rand.NewChaCha8(seed).Read(b)
	copy(b, fmt.Sprintf("%s pid %d push %d\n", holder, os.Getpid(), n))
	return b
}

// e2eReporter writes a helper's reports, one line each.
type e2eReporter struct {
	mu sync.Mutex // guards w
	w  io.WriteCloser
}

func (r *e2eReporter) send(kind, rest string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "%s %s\n", kind, strings.ReplaceAll(rest, "\n", " "))
}

// e2eTransport pauses a conditional PUT of the shard's record once
// e2ePauseAt bytes of its body are sent, when the upload moment is armed.
type e2eTransport struct {
	base  http.RoundTripper
	path  string
	pause func()
}

func (tr *e2eTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && r.URL.Path == tr.path && r.Body != nil {
		r = r.Clone(r.Context())
		r.Body = &e2eBody{ReadCloser: r.Body, pause: tr.pause}
	}
	return tr.base.RoundTrip(r)
}

type e2eBody struct {
	io.ReadCloser
	sent   int
	paused bool
	pause  func()
}

func (b *e2eBody) Read(p []byte) (int, error) {
	if !b.paused && b.sent >= e2ePauseAt {
		b.paused = true
		b.pause()
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), 64<<10)])
	b.sent += n
	return n, err
}

// e2eVersionedBucket creates a bucket of the test's own with versioning
// on, and removes every version and the bucket when the test ends.
func e2eVersionedBucket(t *testing.T, c *minio.Client) string {
	bucket := testserver.UniqueName(t)
	ctx := t.Context()
	require.NoError(t, c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}))
	t.Cleanup(func() {
		ctx, cancel := testserver.CleanupContext(t)
		defer cancel()
		var all []minio.ObjectInfo
		for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
			if o.Err != nil {
				t.Errorf("cleanup: list %s: %v", bucket, o.Err)
				continue
			}
			all = append(all, o)
		}
		for _, o := range all {
			if err := c.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID}); err != nil {
				t.Errorf("cleanup: remove %s version %s: %v", o.Key, o.VersionID, err)
			}
		}
		if err := c.RemoveBucket(ctx, bucket); err != nil {
			t.Errorf("cleanup: remove bucket %s: %v", bucket, err)
		}
	})
	require.NoError(t, c.SetBucketVersioning(ctx, bucket, minio.BucketVersioningConfiguration{Status: "Enabled"}))
	return bucket
}

// e2eRun is the parent's view of the helpers, from their reports.
type e2eRun struct {
	t       *testing.T
	bucket  string
	store   *minioStore // the parent's view of the bucket
	events  chan e2eEvent
	helpers map[string]*e2eHelper
	landed  []e2eLanded // every push a helper reported landed
	log     []string    // every report, for a failure's message
}

type e2eEvent struct {
	from       *e2eHelper
	kind, rest string
}

type e2eLanded struct {
	epoch  uint64
	sum    string
	holder string
}

// e2eHelper is one helper process and what its reports told.
type e2eHelper struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *e2eBuffer
	exited chan struct{}

	paused, killed, stopped bool

	holding   bool   // reported held, and not ended since
	held      int    // held reports
	landed    int    // pushes landed since it last held
	acquired  int    // acquisitions that landed
	holdFails int    // Holds refused
	at        string // the moment it waits at
	lastEnded string
	lastFail  string
	since     []string // its first reports since it was last paused
}

func (r *e2eRun) start(name string) *e2eHelper {
	t := r.t
	rd, wr, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseEndToEndHelper$", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), e2eHelperEnv+"="+name, e2eBucketEnv+"="+r.bucket)
	cmd.ExtraFiles = []*os.File{wr}
	// A helper this test stopped (SIGSTOP) ignores every signal but
	// SIGKILL: should the test binary die, the kernel sends it that.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	h := &e2eHelper{name: name, cmd: cmd, out: &e2eBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = h.out, h.out
	h.in, err = cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	wr.Close()
	r.helpers[name] = h
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		defer rd.Close()
		sc := bufio.NewScanner(rd)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			r.events <- e2eEvent{from: h, kind: kind, rest: rest}
		}
	}()
	go func() {
		<-reported
		_ = cmd.Wait()
		close(h.exited)
		r.events <- e2eEvent{from: h, kind: "exit"}
	}()
	return h
}

// until applies the helpers' reports until cond holds.
func (r *e2eRun) until(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.NewTimer(e2eWait)
	defer deadline.Stop()
	for !cond() {
		select {
		case ev := <-r.events:
			r.apply(ev)
		case <-deadline.C:
			r.t.Fatalf("waited %v for %s; the reports:\n%s", e2eWait, what, r.tail())
		}
	}
}

func (r *e2eRun) apply(ev e2eEvent) {
	h := ev.from
	r.log = append(r.log, fmt.Sprintf("%s: %s %s", h.name, ev.kind, ev.rest))
	if len(h.since) < 3 && ev.kind != "acquired" && ev.kind != "at" {
		h.since = append(h.since, ev.kind+" "+ev.rest)
	}
	switch ev.kind {
	case "held":
		h.holding, h.held, h.landed = true, h.held+1, 0
	case "ended":
		h.holding, h.lastEnded = false, ev.rest
	case "holdfail":
		h.holdFails, h.lastFail = h.holdFails+1, ev.rest
	case "acquired":
		h.acquired++
	case "at":
		h.at = ev.rest
	case "landed":
		h.landed++
		e, sum, _ := strings.Cut(ev.rest, " ")
		epoch, err := strconv.ParseUint(e, 10, 64)
		require.NoError(r.t, err, ev.rest)
		r.landed = append(r.landed, e2eLanded{epoch: epoch, sum: sum, holder: h.name})
	case "stopped":
		h.stopped = true
	case "exit":
		if !h.killed && !h.stopped {
			r.t.Fatalf("helper %s exited on its own: %v; its output:\n%s\nthe reports:\n%s", h.name, h.cmd.ProcessState, h.out, r.tail())
		}
	}
}

func (r *e2eRun) tail() string {
	return strings.Join(r.log[max(0, len(r.log)-60):], "\n")
}

// holder returns the helper that holds the lease, and the other.
func (r *e2eRun) holder() (h, o *e2eHelper) {
	a, b := r.helpers["a"], r.helpers["b"]
	switch {
	case a.holding && !a.paused && !b.holding:
		return a, b
	case b.holding && !b.paused && !a.holding:
		return b, a
	}
	return nil, nil
}

// round pauses the holder at moment, waits for the other to take over,
// resumes (or restarts) the paused one, and checks that the other keeps
// the shard.
func (r *e2eRun) round(i int, moment string) {
	t := r.t
	var h, o *e2eHelper
	r.until("a holder shipping", func() bool {
		h, o = r.holder()
		return h != nil && h.landed >= 3
	})
	arm, mode := moment, "stop"
	if moment == "kill" {
		arm = "upload"
	}
	if (i+slices.Index(e2eMoments, moment))%2 == 1 {
		mode = "finish"
	}
	h.send("arm " + arm + " " + mode)
	r.until(h.name+" at "+arm, func() bool { return h.at == arm })
	h.at = ""
	acquired, held := o.acquired, o.held
	h.since = nil
	if moment == "kill" {
		h.killed = true
		require.NoError(t, h.cmd.Process.Kill())
		<-h.exited
	} else {
		r.signal(h, syscall.SIGSTOP)
		h.send("go") // read once it is resumed
	}
	if moment == "upload" {
		// The new holder's seal waits for the upload in flight: resume it
		// once the new holder has the lease.
		r.until(o.name+" acquires", func() bool { return o.acquired > acquired })
		r.signal(h, syscall.SIGCONT)
	}
	r.until(o.name+" holds", func() bool { return o.held > held })
	switch moment {
	case "renew", "push":
		r.signal(h, syscall.SIGCONT)
	case "kill":
		h = r.start(h.name)
	}

	// The resumed one learns it lost the lease and is refused it, as held
	// by the new holder (on a loaded machine an attempt may first time out
	// instead: it is waited past, never holding); the new holder keeps
	// shipping.
	heldBefore, failsBefore, landedBefore := h.held, h.holdFails, o.landed
	r.until(o.name+" keeps the shard, "+h.name+" is refused the lease", func() bool {
		require.Equal(t, heldBefore, h.held, "round %d (%s): %s is back in charge while %s holds the lease:\n%s", i, moment, h.name, o.name, r.tail())
		return h.holdFails > failsBefore && strings.Contains(h.lastFail, "held by "+o.name) && o.landed >= landedBefore+3
	})
	require.Equal(t, held+1, o.held, "round %d (%s): %s held the lease once since it took over", i, moment, o.name)
	require.True(t, o.holding, "round %d (%s): %s still holds", i, moment, o.name)
	require.Contains(t, h.lastFail, "held by "+o.name)
	if mode == "stop" && (moment == "push" || moment == "upload") {
		require.NotEmpty(t, h.since, "round %d (%s)", i, moment)
		require.Regexp(t, `^refused .*context canceled$`, h.since[0], "round %d (%s): %s's push under its held context ends cancelled once it resumes", i, moment, h.name)
	}
	rec := r.leaseRecord()
	require.Equal(t, o.name, rec.Holder, "round %d (%s): the lease record", i, moment)
	t.Logf("round %d %-6s (%s): %s took over at term %d; %s, from its pause on: %s", i, moment, mode, o.name, rec.Term, h.name, strings.Join(h.since, "; "))
}

// signal sends sig to h and, for SIGSTOP, waits until the kernel shows it
// stopped.
func (r *e2eRun) signal(h *e2eHelper, sig syscall.Signal) {
	pid := h.cmd.Process.Pid
	require.NoError(r.t, syscall.Kill(pid, sig))
	h.paused = sig == syscall.SIGSTOP
	if sig != syscall.SIGSTOP {
		return
	}
	for deadline := time.Now().Add(e2eWait); ; time.Sleep(time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		require.NoError(r.t, err)
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && (f[0] == "T" || f[0] == "t") {
			return
		}
		require.True(r.t, time.Now().Before(deadline), "helper %s not stopped", h.name)
	}
}

func (h *e2eHelper) send(cmd string) {
	_, _ = fmt.Fprintln(h.in, cmd)
}

// stopAll stops the helper that does not hold the lease, then the holder,
// each after its current push, and waits for them to exit.
func (r *e2eRun) stopAll() {
	h, o := r.holder()
	require.NotNil(r.t, h, "a holder at the end")
	for _, x := range []*e2eHelper{o, h} {
		x.send("stop")
		x.in.Close()
		r.until(x.name+" stopped", func() bool { return x.stopped })
		<-x.exited
	}
}

// killAll kills what is left of the helpers when the test ends.
func (r *e2eRun) killAll() {
	for _, h := range r.helpers {
		select {
		case <-h.exited:
			continue
		default:
		}
		h.killed = true
		_ = h.cmd.Process.Kill()
		for {
			select {
			case <-h.exited:
			case <-r.events:
				continue
			}
			break
		}
	}
}

func (r *e2eRun) leaseRecord() leaseRecord {
	key, err := keys.Lease("", e2eLeaseName)
	require.NoError(r.t, err)
	data, _, err := r.store.Get(r.t.Context(), key)
	require.NoError(r.t, err)
	rec, check := decodeLease(data)
	require.Empty(r.t, check)
	return rec
}

// checkHistory reads the store's version history of the shard's record and
// of the lease record, oldest first, and checks what the run must leave.
func (r *e2eRun) checkHistory(c *minio.Client) {
	t := r.t
	ctx := t.Context()
	versions := func(key string) [][]byte {
		var out [][]byte
		for o := range c.ListObjects(ctx, r.bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true, ReverseVersions: true}) {
			require.NoError(t, o.Err)
			if o.Key != key {
				continue
			}
			require.False(t, o.IsDeleteMarker, "%s: a delete marker", key)
			obj, err := c.GetObject(ctx, r.bucket, key, minio.GetObjectOptions{VersionID: o.VersionID})
			require.NoError(t, err)
			data, err := io.ReadAll(obj)
			obj.Close()
			require.NoError(t, err)
			out = append(out, data)
		}
		return out
	}

	shardKey, err := keys.Shard("", "wal", "0")
	require.NoError(t, err)
	type version struct {
		epoch  uint64
		writer string
		sum    string
	}
	var history []version
	for i, data := range versions(shardKey) {
		h, body, check := record.Decode(data)
		require.Empty(t, check, "version %d of the record does not decode", i)
		sum := sha256.Sum256(body.Payload)
		v := version{epoch: h.Epoch, writer: h.Writer, sum: hex.EncodeToString(sum[:])}
		if i > 0 {
			require.Greater(t, v.epoch, history[i-1].epoch, "version %d: epochs strictly rise", i)
		}
		history = append(history, v)
	}
	byEpoch := make(map[uint64]version, len(history))
	for _, v := range history {
		byEpoch[v.epoch] = v
	}
	require.NotEmpty(t, r.landed)
	last := r.landed[0]
	for _, l := range r.landed {
		v, ok := byEpoch[l.epoch]
		require.True(t, ok, "%s's push at epoch %d returned nil but is not in the history", l.holder, l.epoch)
		require.Equal(t, version{epoch: l.epoch, writer: l.holder, sum: l.sum}, v, "the version at epoch %d", l.epoch)
		if l.epoch > last.epoch {
			last = l
		}
	}
	final := history[len(history)-1]
	require.Equal(t, version{epoch: last.epoch, writer: last.holder, sum: last.sum}, final, "the final record is the last push that returned nil")
	r.checkPromises(shardKey, versions(shardKey))

	leaseKey, err := keys.Lease("", e2eLeaseName)
	require.NoError(t, err)
	holders := make(map[uint64]string)
	var prev uint64
	leases := versions(leaseKey)
	for i, data := range leases {
		rec, check := decodeLease(data)
		require.Empty(t, check, "version %d of the lease record does not decode", i)
		require.GreaterOrEqual(t, rec.Term, prev, "version %d of the lease record: terms never go down", i)
		if h, ok := holders[rec.Term]; ok {
			require.Equal(t, h, rec.Holder, "term %d has two holders", rec.Term)
		}
		holders[rec.Term], prev = rec.Holder, rec.Term
	}
	// Every term that wrote the record began with its holder's seal: its
	// first version there is the term's first epoch, written by its
	// holder, the payload as it was (none at first). A term taken and
	// lost before its seal landed (its holder paused or killed while
	// sealing) wrote nothing there.
	unsealed := 0
	for term, holder := range holders {
		nothing := sha256.Sum256(nil)
		before, wrote := hex.EncodeToString(nothing[:]), false
		for _, v := range history {
			if v.epoch>>leaseSeqBits == term {
				require.Equal(t, term<<leaseSeqBits|1, v.epoch, "term %d (%s): its first write is its seal", term, holder)
				require.Equal(t, holder, v.writer, "the seal of term %d", term)
				require.Equal(t, before, v.sum, "the seal of term %d keeps the payload", term)
				wrote = true
				break
			}
			before = v.sum
		}
		if !wrote {
			unsealed++
		}
	}
	if unsealed > 0 {
		t.Logf("%d terms taken wrote nothing to the record (lost before their seal landed)", unsealed)
	}
	t.Logf("the record's history: %d versions: %d pushes reported landed, %d others (a seal at each takeover, and pushes that landed as their writer was paused or killed); the lease record's: %d versions, %d terms",
		len(history), len(r.landed), len(history)-len(r.landed), len(leases), len(holders))
}

// checkPromises feeds the promise checker the record's history as the
// store kept it, each version the change of a call: the push a helper
// reported landed at that epoch, or, for a version no helper reported (a
// takeover's seal, a push whose writer was paused or killed before it
// could say), a call of its writer whose outcome nobody learned.
func (r *e2eRun) checkPromises(key string, versions [][]byte) {
	t := r.t
	var h promise.History
	at := time.Unix(0, 0)
	for i, data := range versions {
		hd, body, check := record.Decode(data)
		require.Empty(t, check)
		c := &promise.Call{ID: i + 1, Proc: hd.Writer, Op: promise.Push, Plugin: "wal", Shard: "0", Key: key,
			Writer: hd.Writer, Epoch: hd.Epoch, Payload: body.Payload, Start: at}
		sum := sha256.Sum256(body.Payload)
		reported := slices.ContainsFunc(r.landed, func(l e2eLanded) bool {
			return l.epoch == hd.Epoch && l.holder == hd.Writer && l.sum == hex.EncodeToString(sum[:])
		})
		if hd.Epoch&(1<<leaseSeqBits-1) == 1 {
			c.Op = promise.Seal
		}
		if !reported {
			c.Err, c.Is = errE2EUnknown, promise.Matches{"unknown", "cause"}
		}
		h.Begin(c)
		at = at.Add(time.Millisecond)
		h.Change(promise.Change{Call: c.ID, Kind: "put", Key: key, Data: data, Version: strconv.Itoa(i), At: at})
		c.End = at
		if c.Err == nil {
			c.Events = []promise.Event{{Op: string(c.Op), Key: key}}
		}
		h.Finish(c)
	}
	for _, v := range promise.NewChecker(promise.Options{}).Check(&h) {
		t.Errorf("the promise checker, on the record's history: %v", v)
	}
}

// errE2EUnknown is the outcome of a version no helper reported.
var errE2EUnknown = errors.New("writefence: outcome unknown: no helper reported it")

// e2eBuffer is a helper's output, written by its process's copier.
type e2eBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *e2eBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *e2eBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
