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
	s := pgServer{bin: filepath.Dir(bins[len(bins)-1]), port: testserver.FreePort()}
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
	args := []string{"-D", data, "-h", "127.0.0.1", "-p", s.port, "-k", dir}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	srv := command("postgres", args...)
	var log strings.Builder
	srv.Stdout, srv.Stderr = &log, &log
	require.NoError(t, srv.Start())
	exited := make(chan struct{})
	go func() { _ = srv.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGQUIT) // immediate shutdown
		<-exited
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("postgres exited during start-up: %s", log.String())
		default:
		}
		if conn, err := pgx.Connect(t.Context(), s.url("postgres", "")); err == nil {
			_ = conn.Close(context.Background())
			return s
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
	var log strings.Builder
	c.Stdout, c.Stderr = &log, &log
	require.NoError(t, c.Start())
	exited := make(chan struct{})
	go func() { _ = c.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		<-exited
	})
	s.waitFor(t, "SELECT count(*)::text FROM pg_stat_replication", "1")
}

// TestDoctorPostgresClean: a server with fsync and synchronous_commit on
// and no standby is clean, reads under overwrite included, and exits 0.
func TestDoctorPostgresClean(t *testing.T) {
	s := startPostgres(t)
	r := wf(t, "doctor", "-json", "-overwrite", "2s", "-store", s.url("postgres", "&table=doctor&create=true"))
	require.Equal(t, exitOK, r.code, "%s", r)
	fs, _ := doctorLines(t, r)
	var checks []string
	for _, f := range fs {
		assert.Equal(t, levelOK, f.Level, "%+v", f)
		checks = append(checks, f.Check)
	}
	assert.Equal(t, []string{"postgres.fsync", "postgres.replication", "postgres.synchronous_commit", "reads.overwrite"}, checks)
}

// TestDoctorPostgresDurability: fsync off on the server (ALTER SYSTEM), and
// synchronous_commit off in the store's sessions (here from the address;
// a role or a database can set it too), are each a risk.
func TestDoctorPostgresDurability(t *testing.T) {
	s := startPostgres(t)
	s.exec(t, "ALTER SYSTEM SET fsync = off")
	s.exec(t, "SELECT pg_reload_conf()")
	s.waitFor(t, "SELECT current_setting('fsync')", "off")
	code, fs := doctorFindings(t, s.url("postgres", ""), "postgres.fsync", "-writes=false")
	assert.Equal(t, exitAtRisk, code)
	require.Len(t, fs, 1)
	assert.Equal(t, finding{Check: "postgres.fsync", Level: levelRisk, Found: "fsync is off",
		Consequence: "a crash of the host can lose or corrupt commits the server acknowledged: records roll back or break",
		Fix:         "ALTER SYSTEM SET fsync = on; SELECT pg_reload_conf();"}, fs[0])
	_, fs = doctorFindings(t, s.url("postgres", ""), "postgres.synchronous_commit", "-writes=false")
	require.Len(t, fs, 1)
	assert.Equal(t, levelOK, fs[0].Level)

	s.exec(t, "ALTER SYSTEM RESET fsync")
	s.exec(t, "SELECT pg_reload_conf()")
	s.waitFor(t, "SELECT current_setting('fsync')", "on")
	code, fs = doctorFindings(t, s.url("postgres", "&synchronous_commit=off"), "postgres.synchronous_commit", "-writes=false")
	assert.Equal(t, exitAtRisk, code)
	require.Len(t, fs, 1)
	assert.Equal(t, levelRisk, fs[0].Level)
	assert.Equal(t, "synchronous_commit is off in the store's sessions", fs[0].Found)

	s.exec(t, "CREATE ROLE lax LOGIN")
	s.exec(t, "ALTER ROLE lax SET synchronous_commit = off")
	code, fs = doctorFindings(t, s.url("lax", ""), "postgres.synchronous_commit", "-writes=false")
	assert.Equal(t, exitAtRisk, code, "set on the role")
	require.Len(t, fs, 1)
	assert.Equal(t, levelRisk, fs[0].Level)
}

// TestDoctorPostgresStandbys: a standby that streams asynchronously is a
// risk; named in synchronous_standby_names it is safe, unless the store's
// sessions commit with synchronous_commit local; a role that cannot see
// the standbys' state gets the setting as unknown.
func TestDoctorPostgresStandbys(t *testing.T) {
	s := startPostgres(t)
	s.startStandby(t)
	code, fs := doctorFindings(t, s.url("postgres", ""), "postgres.replication", "-writes=false")
	assert.Equal(t, exitAtRisk, code)
	require.Len(t, fs, 1)
	assert.Equal(t, levelRisk, fs[0].Level)
	assert.Equal(t, "1 standby stream from this server and none is synchronous (synchronous_standby_names '')", fs[0].Found)

	s.exec(t, "ALTER SYSTEM SET synchronous_standby_names = 'pg_receivewal'")
	s.exec(t, "SELECT pg_reload_conf()")
	s.waitFor(t, "SELECT sync_state FROM pg_stat_replication", "sync")
	code, fs = doctorFindings(t, s.url("postgres", ""), "postgres.replication", "-writes=false")
	assert.Equal(t, exitOK, code)
	require.Len(t, fs, 1)
	assert.Equal(t, finding{Check: "postgres.replication", Level: levelOK, Found: "1 standby stream from this server, 1 synchronous"}, fs[0])

	code, fs = doctorFindings(t, s.url("postgres", "&synchronous_commit=local"), "postgres.synchronous_commit", "-writes=false")
	assert.Equal(t, exitAtRisk, code)
	require.Len(t, fs, 1)
	assert.Equal(t, "synchronous_commit is local in the store's sessions, beside synchronous standbys", fs[0].Found)

	s.exec(t, "CREATE ROLE watcher LOGIN")
	code, fs = doctorFindings(t, s.url("watcher", ""), "postgres.replication", "-writes=false")
	assert.Equal(t, exitError, code)
	require.Len(t, fs, 1)
	assert.Equal(t, levelUnknown, fs[0].Level, "%+v", fs[0])
	assert.Contains(t, fs[0].Fix, "pg_read_all_stats")
	s.exec(t, "GRANT pg_read_all_stats TO watcher")
	code, _ = doctorFindings(t, s.url("watcher", ""), "postgres.replication", "-writes=false")
	assert.Equal(t, exitOK, code)
}
