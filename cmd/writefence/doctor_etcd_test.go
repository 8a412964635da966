//go:build linux && !writefence_noetcd && !writefence_nosdk

package main

import (
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/writefence/writefence/internal/testserver"
)

// startEtcdCluster starts an etcd cluster of n members of the test's own,
// stopped when the test ends, and returns the first member's client
// address, host:port.
func startEtcdCluster(t *testing.T, n int) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if testserver.Required() {
			t.Fatal("etcd is not on PATH but WRITEFENCE_REQUIRE_SERVERS is set")
		}
		t.Skip("etcd is not on PATH")
	}
	clients, peers, initial := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		clients[i] = "http://127.0.0.1:" + testserver.FreePort()
		peers[i] = "http://127.0.0.1:" + testserver.FreePort()
		initial[i] = fmt.Sprintf("m%d=%s", i, peers[i])
	}
	for i := range n {
		c := exec.Command(bin, "--name", fmt.Sprintf("m%d", i), "--data-dir", t.TempDir(),
			"--listen-client-urls", clients[i], "--advertise-client-urls", clients[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--logger", "zap", "--log-level", "error")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		startServer(t, c, syscall.SIGKILL)
	}
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := hc.Get(clients[0] + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return strings.TrimPrefix(clients[0], "http://")
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd cluster of %d not healthy after 30 s (ports clashed?): %v", n, err)
		}
	}
}

// TestDoctorEtcd: one member is a warning (the shared server has one); a
// cluster of three of the test's own is clean, reads under overwrite
// included, and exits 0.
func TestDoctorEtcd(t *testing.T) {
	shared := "etcd://" + strings.TrimPrefix(testserver.EtcdEndpoint(t), "http://") + "/" + testserver.UniqueName(t)
	assertFinding(t, shared, "etcd.members", exitOK, levelWarn, "the cluster has one voting member")

	fs := assertDoctorClean(t, "etcd://"+startEtcdCluster(t, 3)+"/doctor", "etcd.members", "reads.overwrite")
	assert.Equal(t, []finding{{Check: "etcd.members", Level: levelOK, Found: "3 voting members: a write is acknowledged once a majority has it on disk"}},
		findingsOf(fs, "etcd.members"))
}
