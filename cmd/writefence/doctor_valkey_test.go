//go:build !writefence_novalkey && !writefence_nosdk

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// TestDoctorValkeyEviction: on a server of the test's own, set with
// CONFIG SET, an allkeys eviction policy under a memory limit is a risk;
// without a limit, a warning; noeviction and volatile policies are safe.
func TestDoctorValkeyEviction(t *testing.T) {
	addr := testserver.StartValkey(t, "", "--appendonly", "yes")
	c := testserver.ValkeyClient(t, addr, "")
	for _, tt := range []struct {
		policy, maxmemory string
		want              level
		found             string
	}{
		{"allkeys-lru", "100mb", levelRisk, "maxmemory-policy allkeys-lru with maxmemory 104857600"},
		{"allkeys-random", "100mb", levelRisk, "maxmemory-policy allkeys-random with maxmemory 104857600"},
		{"allkeys-lfu", "0", levelWarn, "maxmemory-policy allkeys-lfu (maxmemory 0: no limit yet, so nothing is evicted until one is set)"},
		{"volatile-lru", "100mb", levelOK, "maxmemory-policy volatile-lru: it evicts only keys with a time to live, and records have none"},
		{"noeviction", "100mb", levelOK, "maxmemory-policy noeviction: a full server refuses writes and evicts nothing"},
	} {
		require.NoError(t, c.ConfigSet(t.Context(), "maxmemory-policy", tt.policy).Err())
		require.NoError(t, c.ConfigSet(t.Context(), "maxmemory", tt.maxmemory).Err())
		code, fs := doctorFindings(t, "valkey://"+addr+"/0", "valkey.eviction", "-writes=false")
		require.Len(t, fs, 1, tt.policy)
		assert.Equal(t, tt.want, fs[0].Level, tt.policy)
		assert.Equal(t, tt.found, fs[0].Found, tt.policy)
		if tt.want == levelRisk {
			assert.Equal(t, exitAtRisk, code, tt.policy)
			assert.Contains(t, fs[0].Fix, "CONFIG SET maxmemory-policy noeviction")
		} else {
			assert.Equal(t, exitOK, code, tt.policy)
		}
	}
}

// TestDoctorValkeyPersistence: no persistence at all and RDB snapshots
// alone are risks, an append-only file never synced a warning, one synced
// every second or every write safe.
func TestDoctorValkeyPersistence(t *testing.T) {
	addr := testserver.StartValkey(t, "") // --save '' --appendonly no
	c := testserver.ValkeyClient(t, addr, "")
	for _, tt := range []struct {
		set   [][2]string
		want  level
		found string
	}{
		{nil, levelRisk, "persistence is off: no append-only file and no RDB saves"},
		{[][2]string{{"save", "3600 1 300 100"}}, levelRisk, `RDB snapshots only (save 3600 1 300 100), no append-only file`},
		{[][2]string{{"appendonly", "yes"}, {"appendfsync", "no"}}, levelWarn, "append-only file with appendfsync no"},
		{[][2]string{{"appendfsync", "everysec"}}, levelOK, "append-only file with appendfsync everysec (a crash of the host can lose the last second of writes)"},
		{[][2]string{{"appendfsync", "always"}}, levelOK, "append-only file with appendfsync always"},
	} {
		for _, kv := range tt.set {
			require.NoError(t, c.ConfigSet(t.Context(), kv[0], kv[1]).Err(), "%v", kv)
		}
		code, fs := doctorFindings(t, "valkey://"+addr+"/0", "valkey.persistence", "-writes=false")
		require.Len(t, fs, 1, tt.found)
		assert.Equal(t, tt.want, fs[0].Level, tt.found)
		assert.Equal(t, tt.found, fs[0].Found)
		assert.Equal(t, tt.want == levelRisk, code == exitAtRisk, "%s: exit %d", tt.found, code)
	}
}

// TestDoctorValkeyReplicas: a primary with a replica and an address
// without wait= is a risk; wait=1 makes it safe; wait= above the replicas
// online is a warning, and so is an address at the replica.
func TestDoctorValkeyReplicas(t *testing.T) {
	primary := testserver.StartValkey(t, "", "--appendonly", "yes", "--repl-diskless-sync-delay", "0")
	host, port, _ := strings.Cut(primary, ":")
	replica := testserver.StartValkey(t, "", "--appendonly", "yes", "--replicaof", host, port)
	pc := testserver.ValkeyClient(t, primary, "")
	testserver.WaitValkey(t, "the replica is online", func() bool {
		info, err := pc.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "state=online")
	})

	f := assertFinding(t, "valkey://"+primary+"/0", "valkey.replication", exitAtRisk, levelRisk, "1 replica connected and the address has no wait=")
	assert.Equal(t, finding{Check: "valkey.replication", Level: levelRisk, Found: "1 replica connected and the address has no wait=",
		Consequence: "the primary acknowledges a push before any replica has it: a failover to a replica that had not received it loses it, and two pushes of one epoch can both have returned success",
		Fix:         "add ?wait=1 (and &wait-timeout=D) to the store address of every writer, so a push counts only once replicas hold it"}, f)

	assertFinding(t, "valkey://"+primary+"/0?wait=1", "valkey.replication", exitOK, levelOK, "1 replica connected, and a push waits for 1 of them (wait=1)")
	assertFinding(t, "valkey://"+primary+"/0?wait=2", "valkey.replication", exitOK, levelWarn, "wait=2 but 1 replica connected")
	assertFinding(t, "valkey://"+replica+"/0", "valkey.replication", exitOK, levelWarn, "the server is a replica (role slave)")
}

// TestDoctorValkeyClean: a server with an append-only file, no eviction
// and no replica is clean, reads under overwrite included, and exits 0.
func TestDoctorValkeyClean(t *testing.T) {
	addr := testserver.StartValkey(t, "", "--appendonly", "yes")
	assertDoctorClean(t, "valkey://"+addr+"/0", "valkey.eviction", "valkey.persistence", "valkey.replication", "reads.overwrite")
}

// TestDoctorValkeyCluster: on a cluster of the test's own, three
// primaries without replicas, each primary's settings are read and the
// slots whose primary has no replica are a warning; on the shared cluster
// (a replica each, no persistence) the replicas without wait= and the
// missing persistence are risks on every primary, and wait=1 settles the
// former.
func TestDoctorValkeyCluster(t *testing.T) {
	var primaries []testserver.ValkeyNode
	for range 3 {
		primaries = append(primaries, testserver.StartValkeyNode(t, "--appendonly", "yes"))
	}
	testserver.FormValkeyCluster(t, primaries, nil)
	r := wf(t, "doctor", "-writes=false", "-json", "-store", "valkey+cluster://"+primaries[0].Addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	fs, _ := doctorLines(t, r)
	assert.Len(t, findingsOf(fs, "valkey.persistence"), 3, "one per primary: %s", r)
	for _, f := range findingsOf(fs, "valkey.persistence") {
		assert.Equal(t, levelOK, f.Level)
	}
	cl := findingsOf(fs, "valkey.cluster")
	require.Len(t, cl, 1)
	assert.Equal(t, levelWarn, cl[0].Level)
	for _, p := range primaries {
		assert.Contains(t, cl[0].Found, "("+p.Addr+")")
	}
	assert.Contains(t, cl[0].Found, "0-5460 ")

	shared := "valkey+cluster://" + strings.Join(testserver.ValkeyClusterAddrs(t), ",")
	r = wf(t, "doctor", "-writes=false", "-json", "-store", shared)
	assert.Equal(t, exitAtRisk, r.code, "%s", r)
	fs, res := doctorLines(t, r)
	assert.EqualValues(t, 6, res["risks"], "persistence and replication on each of 3 primaries: %s", r)
	for _, f := range findingsOf(fs, "valkey.replication") {
		assert.Equal(t, levelRisk, f.Level)
		assert.Contains(t, f.Fix, "the valkey+cluster:// address")
	}
	r = wf(t, "doctor", "-writes=false", "-json", "-store", shared+"?wait=1")
	fs, _ = doctorLines(t, r)
	for _, f := range findingsOf(fs, "valkey.replication") {
		assert.Equal(t, levelOK, f.Level, "%+v", f)
	}
	assert.Equal(t, []finding{{Check: "valkey.cluster", Level: levelOK, Found: "every one of the 3 slot ranges has a replica online"}}, findingsOf(fs, "valkey.cluster"))
}
