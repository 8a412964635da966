package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Valkey starts a valkey-server (on PATH) in dir, its working directory,
// that saves nothing, with the extra arguments extra returns, asked
// afresh for each port tried (they may name a port of their own), and
// returns it once it answers a PING (after AUTH with password, when that
// is set) at the address it returns.
func Valkey(dir, password string, extra func() []string) (*Process, string, error) {
	bin, err := exec.LookPath("valkey-server")
	if err != nil {
		return nil, "", err
	}
	p, ports, err := withPorts(1, func(ports []string) (*Process, error) {
		addr := net.JoinHostPort("127.0.0.1", ports[0])
		argv := append([]string{"--bind", "127.0.0.1", "--port", ports[0], "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no"}, extra()...)
		return Start(exec.Command(bin, argv...), "", 10*time.Second, func() error {
			_, err := valkeyDo(addr, password, "PING")
			return err
		})
	})
	if err != nil {
		return nil, "", err
	}
	return p, net.JoinHostPort("127.0.0.1", ports[0]), nil
}

// ValkeyNode is a cluster-enabled valkey-server.
type ValkeyNode struct {
	Addr    string // its client address, 127.0.0.1:port
	BusPort string // its cluster bus port
}

// StartValkeyNode starts a cluster-enabled valkey-server in dir (see
// Valkey), on a free bus port as well (the default, the client port +
// 10000, would be in the ephemeral range), serving a full sync to a
// replica at once, with the given extra arguments. The node is in no
// cluster yet: see FormValkeyCluster.
func StartValkeyNode(dir string, args ...string) (*Process, ValkeyNode, error) {
	var bus string
	p, addr, err := Valkey(dir, "", func() []string {
		bus = FreePort()
		return append([]string{"--cluster-enabled", "yes", "--cluster-port", bus,
			"--cluster-config-file", "nodes.conf", "--repl-diskless-sync-delay", "0"}, args...)
	})
	return p, ValkeyNode{Addr: addr, BusPort: bus}, err
}

// FormValkeyCluster makes one cluster of primaries, which share the
// slots in order and evenly, and replicas, where replicas[i] replicates
// primaries[i%len(primaries)]. Every node meets the first primary at its
// own client and bus ports on 127.0.0.1. It returns once every node
// reports cluster_state:ok and knows every other, and every replica's
// link is up and counted online by its primary; or, after 30 s, an error
// that says what it waited for.
func FormValkeyCluster(primaries, replicas []ValkeyNode) error {
	for i, p := range primaries {
		lo, hi := i*16384/len(primaries), (i+1)*16384/len(primaries)-1
		if _, err := valkeyDo(p.Addr, "", "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return err
		}
	}
	all := append(append([]ValkeyNode{}, primaries...), replicas...)
	_, firstPort, _ := net.SplitHostPort(primaries[0].Addr)
	for _, n := range all[1:] {
		if _, err := valkeyDo(n.Addr, "", "CLUSTER", "MEET", "127.0.0.1", firstPort, primaries[0].BusPort); err != nil {
			return err
		}
	}
	err := waitValkey("every node knows every other", func() bool {
		for _, n := range all {
			nodes, err := valkeyDo(n.Addr, "", "CLUSTER", "NODES")
			if err != nil || strings.Count(nodes, "\n") < len(all) || strings.Contains(nodes, "handshake") {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	for i, r := range replicas {
		id, err := valkeyDo(primaries[i%len(primaries)].Addr, "", "CLUSTER", "MYID")
		if err == nil {
			_, err = valkeyDo(r.Addr, "", "CLUSTER", "REPLICATE", id)
		}
		if err != nil {
			return err
		}
	}
	return waitValkey("the cluster is ok on every node, and every replica online", func() bool {
		for _, n := range all {
			if info, err := valkeyDo(n.Addr, "", "CLUSTER", "INFO"); err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		for i, p := range primaries {
			want := 0
			for j := range replicas {
				if j%len(primaries) == i {
					want++
				}
			}
			info, err := valkeyDo(p.Addr, "", "INFO", "replication")
			if err != nil || strings.Count(info, "state=online") < want {
				return false
			}
		}
		return true
	})
}

// waitValkey polls cond every 10 ms until it holds, for 30 s at most.
func waitValkey(what string, cond func() bool) error {
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("valkey: timed out waiting until %s", what)
		}
	}
	return nil
}

// valkeyDo sends one command to the Valkey server at addr, on a
// connection of its own (after AUTH with password, when that is set),
// and returns its reply: a status, a bulk string or an integer, as text;
// an error reply is an error. On a loaded two-core machine a server just
// started may take seconds to accept: the dial waits up to 15 s.
func valkeyDo(addr, password string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 15*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	if password != "" {
		if _, err := respDo(c, r, "AUTH", password); err != nil {
			return "", err
		}
	}
	return respDo(c, r, args...)
}

func respDo(w io.Writer, r *bufio.Reader, args ...string) (string, error) {
	req := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		req = fmt.Appendf(req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := w.Write(req); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case line == "":
		return "", errors.New("valkey: empty reply")
	case line[0] == '+' || line[0] == ':':
		return line[1:], nil
	case line[0] == '-':
		return "", fmt.Errorf("valkey: %s", line[1:])
	case line[0] == '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("valkey: reply %q", line)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", err
		}
		return string(b[:n]), nil
	}
	return "", fmt.Errorf("valkey: unexpected reply %q", line)
}
