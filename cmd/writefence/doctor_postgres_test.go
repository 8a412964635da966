//go:build linux && !writefence_nopostgres && !writefence_nosdk

package main

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// pgServer is a PostgreSQL server a test started.
type pgServer struct {
	bin, dir, port string
}

// url returns the address of the server's database postgres as role,
// with the query params.
func (s pgServer) url(role, params string) string {
	return "postgres://" + role + "@127.0.0.1:" + s.port + "/postgres?sslmode=disable" + params
}

// exec runs sql on the server as the superuser.
func (s pgServer) exec(t *testing.T, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), s.url("postgres", ""))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), sql)
	require.NoError(t, err, sql)
}

// waitFor polls query on the server until it returns want.
func (s pgServer) waitFor(t *testing.T, query, want string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), s.url("postgres", ""))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := conn.QueryRow(t.Context(), query).Scan(&got); err == nil && got == want {
			return
		}
	}
	t.Fatalf("%s: got %q, want %q", query, got, want)
}

// startPostgres initialises a database cluster of the test's own and
// starts PostgreSQL on it, on 127.0.0.1 with trust authentication and the
// given -c settings; it is stopped and removed when the test ends. initdb
// and the server refuse to run as root, so as root they run as the
// postgres user. Without PostgreSQL installed the test is skipped, or
// fails when the servers are required.
func startPostgres(t *testing.T, settings ...string) pgServer {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		if testserver.Required() {
			t.Fatal("PostgreSQL is not installed (/usr/lib/postgresql/*/bin) but WRITEFENCE_REQUIRE_SERVERS is set")
		}
		t.Skip("PostgreSQL is not installed")
	}
	slices.SortFunc(bins, func(a, b string) int { return len(a) - len(b) }) // "9.6" before "15"
	s := pgServer{bin: filepath.Dir(bins[len(bins)-1])}
	dir, err := os.MkdirTemp("", "writefence-doctor-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s.dir = dir
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root, the server runs as the postgres user")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	command := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(s.bin, name), args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
		c.Dir = dir
		return c
	}
	data := filepath.Join(dir, "data")
	out, err := command("initdb", "-D", data, "-U", "postgres", "--auth", "trust", "-E", "UTF8", "--locale", "C").CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)
	// A port free a moment ago may be taken by the time the server binds
	// it (other tests start servers beside this one): it is drawn right
	// before the start, and drawn again when another process took it.
	for try := 1; ; try++ {
		s.port = testserver.FreePort()
		args := []string{"-D", data, "-h", "127.0.0.1", "-p", s.port, "-k", dir}
		for _, kv := range settings {
			args = append(args, "-c", kv)
		}
		log, exited := startServer(t, command("postgres", args...), syscall.SIGQUIT) // SIGQUIT: immediate shutdown
		if s.ready(t, log, exited) {
			return s
		}
		if try == 5 || !strings.Contains(log.String(), "Address already in use") {
			t.Fatalf("postgres exited during start-up: %s", log.String())
		}
	}
}

// ready waits for the server started with log to take connections, and
// reports false when it exited first.
func (s pgServer) ready(t *testing.T, log *strings.Builder, exited <-chan struct{}) bool {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			return false
		default:
		}
		if conn, err := pgx.Connect(t.Context(), s.url("postgres", "")); err == nil {
			_ = conn.Close(context.Background())
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres not ready after 30 s: %s", log.String())
		}
	}
}

// startStandby streams the server's WAL to pg_receivewal, which reports
// each flush at once (--synchronous) under the application name
// pg_receivewal: a standby as pg_stat_replication sees one. It is stopped
// when the test ends.
func (s pgServer) startStandby(t *testing.T) {
	t.Helper()
	c := exec.Command(filepath.Join(s.bin, "pg_receivewal"), "-D", t.TempDir(), "-h", "127.0.0.1", "-p", s.port,
		"-U", "postgres", "--no-password", "--synchronous", "--no-loop")
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	startServer(t, c, syscall.SIGKILL)
	s.waitFor(t, "SELECT count(*)::text FROM pg_stat_replication", "1")
}

// TestDoctorPostgresClean: a server with fsync and synchronous_commit on
// and no standby is clean, reads under overwrite included, and exits 0.
func TestDoctorPostgresClean(t *testing.T) {
	s := startPostgres(t)
	assertDoctorClean(t, s.url("postgres", "&table=doctor&create=true"), "postgres.fsync", "postgres.replication", "postgres.synchronous_commit", "reads.overwrite")
}

// TestDoctorPostgresDurability: fsync off on the server (ALTER SYSTEM), and
// synchronous_commit off in the store's sessions (here from the address;
// a role or a database can set it too), are each a risk.
func TestDoctorPostgresDurability(t *testing.T) {
	s := startPostgres(t)
	s.exec(t, "ALTER SYSTEM SET fsync = off")
	s.exec(t, "SELECT pg_reload_conf()")
	s.waitFor(t, "SELECT current_setting('fsync')", "off")
	f := assertFinding(t, s.url("postgres", ""), "postgres.fsync", exitAtRisk, levelRisk, "fsync is off")
	assert.Equal(t, finding{Check: "postgres.fsync", Level: levelRisk, Found: "fsync is off",
		Consequence: "a crash of the host can lose or corrupt commits the server acknowledged: records roll back or break",
		Fix:         "ALTER SYSTEM SET fsync = on; SELECT pg_reload_conf();"}, f)
	assertFinding(t, s.url("postgres", ""), "postgres.synchronous_commit", exitAtRisk, levelOK, "")

	s.exec(t, "ALTER SYSTEM RESET fsync")
	s.exec(t, "SELECT pg_reload_conf()")
	s.waitFor(t, "SELECT current_setting('fsync')", "on")
	assertFinding(t, s.url("postgres", "&synchronous_commit=off"), "postgres.synchronous_commit", exitAtRisk, levelRisk, "synchronous_commit is off in the store's sessions")

	// Set on the role.
	s.exec(t, "CREATE ROLE lax LOGIN")
	s.exec(t, "ALTER ROLE lax SET synchronous_commit = off")
	assertFinding(t, s.url("lax", ""), "postgres.synchronous_commit", exitAtRisk, levelRisk, "")
}

// TestDoctorPostgresStandbys: a standby that streams asynchronously is a
// risk; named in synchronous_standby_names it is safe, unless the store's
// sessions commit with synchronous_commit local; a role that cannot see
// the standbys' state gets the setting as unknown.
func TestDoctorPostgresStandbys(t *testing.T) {
	s := startPostgres(t)
	s.startStandby(t)
	assertFinding(t, s.url("postgres", ""), "postgres.replication", exitAtRisk, levelRisk,
		"1 standby stream from this server and none is synchronous (synchronous_standby_names '')")

	s.exec(t, "ALTER SYSTEM SET synchronous_standby_names = 'pg_receivewal'")
	s.exec(t, "SELECT pg_reload_conf()")
	s.waitFor(t, "SELECT sync_state FROM pg_stat_replication", "sync")
	f := assertFinding(t, s.url("postgres", ""), "postgres.replication", exitOK, levelOK, "1 standby stream from this server, 1 synchronous")
	assert.Equal(t, finding{Check: "postgres.replication", Level: levelOK, Found: "1 standby stream from this server, 1 synchronous"}, f)
	assertFinding(t, s.url("postgres", "&synchronous_commit=local"), "postgres.synchronous_commit", exitAtRisk, levelRisk,
		"synchronous_commit is local in the store's sessions, beside synchronous standbys")

	s.exec(t, "CREATE ROLE watcher LOGIN")
	f = assertFinding(t, s.url("watcher", ""), "postgres.replication", exitError, levelUnknown, "")
	assert.Contains(t, f.Fix, "pg_read_all_stats")
	s.exec(t, "GRANT pg_read_all_stats TO watcher")
	assertFinding(t, s.url("watcher", ""), "postgres.replication", exitOK, levelOK, "")
}
