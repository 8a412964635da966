package zkepoch_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/zkepoch"
)

// zkEndpoint is the client address of the ZooKeeper server TestMain
// started for the package's tests and examples.
var zkEndpoint string

// TestMain starts one ZooKeeper server (Debian's zookeeper package and a
// java on PATH) for the whole run and stops it at the end. Without them
// every test here is skipped, or the run fails when
// WRITEFENCE_REQUIRE_SERVERS is set, as .ci/run sets it.
func TestMain(m *testing.M) {
	os.Exit(testserver.RunMain(m, "zkepoch", "zookeeper", testserver.ZooKeeperInstalled, testserver.StartZooKeeper, &zkEndpoint))
}

// quiet is a go-zookeeper logger that keeps the tests' output clean.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// client is a ZooKeeper client of the test's own: the session states it
// went through, and the credentials of every session it was handed, read
// off its connections (see sessionDialer).
type client struct {
	*zk.Conn
	dialer *sessionDialer

	mu     sync.Mutex // guards states, next and closed
	cond   *sync.Cond // signalled when states grows or the events end
	states []zk.State // every session state, in order
	next   int        // where waitState looks from
	closed bool       // the client's events ended
}

// newClient connects to endpoint with a session of its own (as a separate
// process would have), waits until it has its session and closes it when
// the test ends.
func newClient(t testing.TB, endpoint string) *client {
	t.Helper()
	d := &sessionDialer{}
	conn, events, err := zk.Connect([]string{endpoint}, 10*time.Second,
		zk.WithDialer(d.dial), zk.WithLogger(quiet{}), zk.WithLogInfo(false))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	c := &client{Conn: conn, dialer: d}
	c.cond = sync.NewCond(&c.mu)
	// The client drops events nobody reads; reading them all here keeps
	// every state change, however long a test looks away.
	go func() {
		for ev := range events {
			if ev.Type == zk.EventSession {
				c.mu.Lock()
				c.states = append(c.states, ev.State)
				c.cond.Broadcast()
				c.mu.Unlock()
			}
		}
		c.mu.Lock()
		c.closed = true
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	c.waitState(t, zk.StateHasSession)
	return c
}

// waitState waits until the client reaches state, after the state the
// last waitState returned at.
func (c *client) waitState(t testing.TB, state zk.State) {
	t.Helper()
	expired := false
	timer := time.AfterFunc(time.Minute, func() {
		c.mu.Lock()
		expired = true
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for i := c.next; i < len(c.states); i++ {
			if c.states[i] == state {
				c.next = i + 1
				return
			}
		}
		c.next = len(c.states)
		switch {
		case c.closed:
			t.Fatalf("the client closed before reaching %v", state)
		case expired:
			t.Fatalf("the client did not reach %v in time", state)
		}
		c.cond.Wait()
	}
}

// sessionDialer dials ZooKeeper for a client and reads the session ID and
// password off each connection's first reply (the connect response), so a
// test can end the session behind the client's back. While frozen it
// refuses to dial, as a partition would; while blackholed, its connections
// drop what the client sends, as a server that never answers would.
type sessionDialer struct {
	mu     sync.Mutex // guards the fields below
	frozen bool
	holed  bool
	id     int64
	passwd []byte
}

func (d *sessionDialer) blackhole(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.holed = on
}

func (d *sessionDialer) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	frozen := d.frozen
	d.mu.Unlock()
	if frozen {
		return nil, errors.New("partitioned by the test")
	}
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &sniffedConn{Conn: c, d: d}, nil
}

func (d *sessionDialer) freeze(frozen bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.frozen = frozen
}

func (d *sessionDialer) session() (int64, []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.id, d.passwd
}

// sniffedConn passes everything through and decodes the first frame the
// server sends: int32 length, int32 protocol version, int32 timeout,
// int64 session ID, int32 password length, the password.
type sniffedConn struct {
	net.Conn
	d    *sessionDialer
	head []byte
	done bool
}

// Write drops p while the dialer is blackholed. The client writes one
// whole request per call, so the stream stays framed.
func (c *sniffedConn) Write(p []byte) (int, error) {
	c.d.mu.Lock()
	holed := c.d.holed
	c.d.mu.Unlock()
	if holed {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *sniffedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.head = append(c.head, p[:n]...)
		if len(c.head) >= 4 {
			if size := int(binary.BigEndian.Uint32(c.head)); len(c.head) >= 4+size && size >= 20 {
				body := c.head[4 : 4+size]
				id := int64(binary.BigEndian.Uint64(body[8:16]))
				plen := int(binary.BigEndian.Uint32(body[16:20]))
				if id != 0 && plen >= 0 && 20+plen <= len(body) {
					c.d.mu.Lock()
					c.d.id, c.d.passwd = id, append([]byte(nil), body[20:20+plen]...)
					c.d.mu.Unlock()
				}
				c.done, c.head = true, nil
			}
		}
	}
	return n, err
}

// expireSession ends the session id behind its client's back: it connects
// with the session's credentials, which makes the server drop the client's
// connection and hand the session to this one, and closes the session, as
// ZooKeeper's own tests do. The server then deletes the session's
// ephemeral znodes.
func expireSession(t testing.TB, endpoint string, id int64, passwd []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", endpoint, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	w := bufio.NewWriter(c)
	frame := func(body []byte) {
		require.NoError(t, binary.Write(w, binary.BigEndian, int32(len(body))))
		_, err := w.Write(body)
		require.NoError(t, err)
		require.NoError(t, w.Flush())
	}
	var connect []byte
	connect = binary.BigEndian.AppendUint32(connect, 0)          // protocol version
	connect = binary.BigEndian.AppendUint64(connect, 0)          // last zxid seen
	connect = binary.BigEndian.AppendUint32(connect, 10000)      // timeout, ms
	connect = binary.BigEndian.AppendUint64(connect, uint64(id)) // session
	connect = binary.BigEndian.AppendUint32(connect, uint32(len(passwd)))
	connect = append(connect, passwd...)
	frame(connect)
	reply := readFrame(t, c)
	require.GreaterOrEqual(t, len(reply), 16)
	require.Equal(t, id, int64(binary.BigEndian.Uint64(reply[8:16])), "the server handed the session over")

	var closeReq []byte
	closeReq = binary.BigEndian.AppendUint32(closeReq, 1)                  // xid
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xfffffff5)) // opcode -11: close session
	frame(closeReq)
	reply = readFrame(t, c)
	require.GreaterOrEqual(t, len(reply), 16)
	require.Zero(t, int32(binary.BigEndian.Uint32(reply[12:16])), "close session answered without error")
}

func readFrame(t testing.TB, r io.Reader) []byte {
	t.Helper()
	var size int32
	require.NoError(t, binary.Read(r, binary.BigEndian, &size))
	require.Positive(t, size)
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	require.NoError(t, err)
	return b
}

// uniquePath returns a fresh election path, so runs never see each other's
// candidates.
func uniquePath(t testing.TB) string { return "/writefence-test/" + testserver.UniqueName(t) }

// waitCandidates waits until the election at path has at least n
// candidates and returns their znode paths in the order they lead. It
// waits on ZooKeeper's watch events, never on a timer.
func waitCandidates(t testing.TB, c *client, path string, n int) []string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		children, _, ch, err := c.ChildrenW(path)
		if errors.Is(err, zk.ErrNoNode) {
			_, _, ch, err = c.ExistsW(path)
			children = nil
		}
		require.NoError(t, err)
		if cands := zkepoch.LeadOrder(children); len(cands) >= n {
			for i := range cands {
				cands[i] = path + "/" + cands[i]
			}
			return cands
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("the election %s never had %d candidates", path, n)
		}
	}
}

// mintZxid returns the zxid of the last write to the election's znode
// (where epochs are minted).
func mintZxid(t testing.TB, c *client, path string) int64 {
	t.Helper()
	_, stat, err := c.Get(path)
	require.NoError(t, err)
	return stat.Mzxid
}

func contextWithTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
