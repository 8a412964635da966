package launch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ZooKeeperJar is where Debian's zookeeper package puts the server; its
// manifest's Class-Path names every jar it needs.
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// ZooKeeperInstalled returns why ZooKeeper cannot be started here (a java
// on PATH and Debian's zookeeper package), or nil.
func ZooKeeperInstalled() error {
	if _, err := exec.LookPath("java"); err != nil {
		return errors.New("java is not on PATH")
	}
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		return fmt.Errorf("%s is missing", ZooKeeperJar)
	}
	return nil
}

// ZooKeeper starts a standalone ZooKeeper on a free port with a fresh
// data directory, which Stop removes, and returns it, once it hands a
// client a session, with its client address, 127.0.0.1:port.
//
// It runs the server's main class with java directly rather than Debian's
// zkServer.sh: that script reads a zkEnv.sh that fixes the configuration
// to /etc/zookeeper/conf and the classpath to
// /etc/zookeeper/conf:/usr/share/java/zookeeper.jar. The jar's manifest
// names its dependencies, so the classpath is the jar alone. The ticks are
// short, so negotiated session timeouts start at 200ms; the admin server
// (an HTTP port of its own) is off.
func ZooKeeper() (*Process, string, error) {
	p, url, err := withPort(func(port string) (*Process, error) {
		dir, err := TempDir("writefence-zookeeper-")
		if err != nil {
			return nil, err
		}
		cfg := filepath.Join(dir, "zoo.cfg")
		conf := strings.Join([]string{
			"tickTime=100",
			"maxSessionTimeout=60000",
			"dataDir=" + filepath.Join(dir, "data"),
			"clientPort=" + port,
			"clientPortAddress=127.0.0.1",
			"admin.enableServer=false",
			"4lw.commands.whitelist=ruok",
			"",
		}, "\n")
		if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		cmd := exec.Command("java", "-Xmx256m", "-Dzookeeper.forceSync=no",
			"-cp", ZooKeeperJar, "org.apache.zookeeper.server.ZooKeeperServerMain", cfg)
		return Start(cmd, dir, time.Minute, func() error { return zooKeeperReady("127.0.0.1:" + port) })
	})
	return p, strings.TrimPrefix(url, "http://"), err
}

// zooKeeperReady checks that the server at addr answers ruok with imok
// and then hands a client a session. imok alone is not enough: the server
// answers it while it still closes the connections of clients that ask
// for a session.
func zooKeeperReady(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	_, err = c.Write([]byte("ruok"))
	b, _ := io.ReadAll(c)
	c.Close()
	if err != nil || string(b) != "imok" {
		return fmt.Errorf("ruok: %q, %v", b, err)
	}
	return zooKeeperSession(addr)
}

// zooKeeperSession asks the server at addr for a session, as a client's
// first frame does, and closes the session it is handed. Each frame is
// an int32 length and a body; a connect request's body is the protocol
// version, the last zxid seen, the timeout (ms), the session (0: a new
// one) and the password; its reply's, the protocol version, the timeout,
// the session and the password.
func zooKeeperSession(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var connect []byte
	connect = binary.BigEndian.AppendUint32(connect, 0)     // protocol version
	connect = binary.BigEndian.AppendUint64(connect, 0)     // last zxid seen
	connect = binary.BigEndian.AppendUint32(connect, 10000) // timeout
	connect = binary.BigEndian.AppendUint64(connect, 0)     // a new session
	connect = binary.BigEndian.AppendUint32(connect, 16)    // the password's length
	connect = append(connect, make([]byte, 16)...)
	if _, err := c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(connect)))); err != nil {
		return err
	}
	if _, err := c.Write(connect); err != nil {
		return err
	}
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return fmt.Errorf("no session: %w", err)
	}
	reply := make([]byte, binary.BigEndian.Uint32(head[:]))
	if _, err := io.ReadFull(c, reply); err != nil {
		return fmt.Errorf("no session: %w", err)
	}
	if len(reply) < 16 || binary.BigEndian.Uint64(reply[8:16]) == 0 {
		return errors.New("no session")
	}
	// Close the session: xid 1, opcode -11.
	closeSession := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), 1), uint32(0xfffffff5))
	_, _ = c.Write(closeSession)
	return nil
}
