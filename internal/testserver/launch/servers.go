package launch

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Etcd starts a one-member etcd (the etcd binary on PATH, e.g. Debian's
// etcd-server) on free ports with a fresh data directory, which Stop
// removes, and the extra arguments args, and returns it once /health
// answers, with its client URL.
func Etcd(args ...string) (*Process, string, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, "", err
	}
	p, ports, err := withPorts(2, func(ports []string) (*Process, error) {
		dir, err := TempDir("writefence-etcd-")
		if err != nil {
			return nil, err
		}
		client, peer := "http://127.0.0.1:"+ports[0], "http://127.0.0.1:"+ports[1]
		argv := append([]string{
			"--name", "wf", "--data-dir", dir,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "wf=" + peer, "--initial-cluster-state", "new",
			"--logger", "zap", "--log-level", "error"}, args...)
		return Start(exec.Command(bin, argv...), dir, 30*time.Second, httpReady("GET", client+"/health", `"health":"true"`))
	})
	if err != nil {
		return nil, "", err
	}
	return p, "http://127.0.0.1:" + ports[0], nil
}

// MinIO starts MinIO (BinDir/minio) with its data in dir and returns it
// with its address; its root user is S3AccessKey, S3SecretKey.
func MinIO(dir string) (*Process, string, error) {
	p, ports, err := withPorts(2, func(ports []string) (*Process, error) {
		cmd := exec.Command(filepath.Join(BinDir(), "minio"), "server", dir, "--quiet",
			"--address", "127.0.0.1:"+ports[0], "--console-address", "127.0.0.1:"+ports[1])
		cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+S3AccessKey, "MINIO_ROOT_PASSWORD="+S3SecretKey,
			"MINIO_BROWSER=off", "MINIO_UPDATE=off")
		return Start(cmd, "", time.Minute, httpReady("GET", "http://127.0.0.1:"+ports[0]+"/minio/health/ready", ""))
	})
	if err != nil {
		return nil, "", err
	}
	return p, "127.0.0.1:" + ports[0], nil
}

// The credentials of the S3 server Shared starts.
const (
	S3AccessKey = "writefence"
	S3SecretKey = "writefence-secret"
)

// FakeGCS starts fake-gcs-server (BinDir/fake-gcs-server), in memory,
// and returns it with its URL. It names itself by that address: without
// -public-host the Go client's reads get 404.
func FakeGCS() (*Process, string, error) {
	return withPort(func(port string) (*Process, error) {
		cmd := exec.Command(filepath.Join(BinDir(), "fake-gcs-server"), "-scheme", "http", "-host", "127.0.0.1",
			"-port", port, "-public-host", "127.0.0.1:"+port, "-backend", "memory")
		return Start(cmd, "", time.Minute, httpReady("GET", "http://127.0.0.1:"+port+"/storage/v1/b", ""))
	})
}

// Dynalite starts dynalite (DynamoDB's API over an in-memory LevelDB,
// installed by Install), whose tables become ACTIVE at once, and returns
// it with its URL.
func Dynalite() (*Process, string, error) {
	cli := filepath.Join(npmDir(dynalitePackage), "node_modules", "dynalite", "cli.js")
	return withPort(func(port string) (*Process, error) {
		cmd := exec.Command("node", cli, "--host", "127.0.0.1", "--port", port,
			"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
		// It answers any POST, with an error for one that names no operation.
		return Start(cmd, "", time.Minute, httpReady("POST", "http://127.0.0.1:"+port+"/", ""))
	})
}

// Azurite starts Azurite's blob service (installed by Install), its data
// in memory (which costs it a fifth less CPU than files on tmpfs), and
// returns it with the URL of the well-known development account,
// AzuriteAccount, whose key is AzuriteKey.
func Azurite() (*Process, string, error) {
	bin := filepath.Join(npmDir(azuritePackage), "node_modules", ".bin", "azurite-blob")
	p, url, err := withPort(func(port string) (*Process, error) {
		cmd := exec.Command(bin, "--blobHost", "127.0.0.1", "--blobPort", port, "--inMemoryPersistence",
			"--silent", "--skipApiVersionCheck", "--disableTelemetry")
		// Any HTTP answer will do: an anonymous request is refused.
		return Start(cmd, "", time.Minute, httpReady("GET", "http://127.0.0.1:"+port+"/", ""))
	})
	if err != nil {
		return nil, "", err
	}
	return p, url + "/" + AzuriteAccount, nil
}

// Azurite's well-known development account.
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Postgres creates a database cluster in dir and starts the newest
// PostgreSQL under /usr/lib/postgresql on it, listening on 127.0.0.1
// only, and returns it with the URL of its superuser, postgres, whose
// password is PostgresPassword. initdb and the server refuse to run as
// root, so both run as the postgres user, which must reach dir (its
// parent, at least, must let it through). Connections over TCP
// authenticate with a password (scram-sha-256), so that a test can see a
// login refused; fsync is off, as a test server need not survive a crash
// of its machine.
func Postgres(dir string) (*Process, string, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(bins, func(a, b string) int { return pgVersion(a) - pgVersion(b) })
	if len(bins) == 0 {
		return nil, "", errors.New("no PostgreSQL under /usr/lib/postgresql")
	}
	bin := bins[len(bins)-1]
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, "", err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	asPostgres := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		return cmd
	}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(pwfile, []byte(PostgresPassword+"\n"), 0o600); err != nil {
		return nil, "", err
	}
	for _, f := range []string{dir, pwfile} {
		if err := os.Chown(f, uid, gid); err != nil {
			return nil, "", err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := asPostgres("initdb", "-D", data, "-U", "postgres", "--pwfile", pwfile,
		"--auth-host", "scram-sha-256", "--auth-local", "trust", "-E", "UTF8", "--locale", "C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("initdb: %w: %s", err, out)
	}
	p, ports, err := withPorts(1, func(ports []string) (*Process, error) {
		cmd := asPostgres("postgres", "-D", data, "-h", "127.0.0.1", "-p", ports[0], "-k", dir,
			"-c", "fsync=off", "-c", "max_connections=200")
		p, err := Start(cmd, "", time.Minute, func() error {
			return exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", ports[0]).Run()
		})
		if err == nil {
			// A fast shutdown: killed, the server would leave its
			// shared memory segments behind in /dev/shm.
			p.quit = os.Interrupt
		}
		return p, err
	})
	if err != nil {
		return nil, "", err
	}
	return p, "postgres://postgres:" + PostgresPassword + "@127.0.0.1:" + ports[0] + "/postgres?sslmode=disable", nil
}

// PostgresPassword is the password of the superuser of the server
// Postgres starts.
const PostgresPassword = "writefence-secret"

// pgVersion is the major version in a path /usr/lib/postgresql/N/bin.
func pgVersion(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return n
}

// httpReady returns a readiness check: a request with method to url gets
// an answer, one with status 200 and a body containing want unless want
// is "". (An empty want accepts any status: some servers refuse the
// anonymous request and are ready all the same.)
func httpReady(method, url, want string) func() error {
	c := &http.Client{Timeout: 2 * time.Second}
	return func() error {
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if want != "" && (resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want)) {
			return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, body)
		}
		return nil
	}
}

// Shared starts the servers a whole run of the tests shares, each with
// its data under dir, which it lets every user pass through: Valkey,
// a Valkey cluster of three primaries with a replica each, MinIO,
// fake-gcs-server, etcd, dynalite, Azurite and PostgreSQL, all at once.
// It returns the environment that names them to testserver, with
// WRITEFENCE_REQUIRE_SERVERS set, and a function that stops them all.
// On an error it has stopped those it started.
func Shared(dir string) (env []string, stop func(), err error) {
	var (
		mu    sync.Mutex // guards procs, env and errs
		procs []*Process
		errs  []error
		wg    sync.WaitGroup
	)
	stop = func() {
		var stops sync.WaitGroup
		for _, p := range procs {
			stops.Go(p.Stop)
		}
		stops.Wait()
	}
	// run starts one server (or several) and records what it returns:
	// the processes, and the environment naming them as name=value pairs.
	run := func(name string, start func() ([]*Process, []string, error)) {
		wg.Go(func() {
			ps, vars, err := start()
			mu.Lock()
			defer mu.Unlock()
			procs = append(procs, ps...)
			env = append(env, vars...)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		})
	}
	one := func(p *Process, vars []string, err error) ([]*Process, []string, error) {
		if err != nil {
			return nil, nil, err
		}
		return []*Process{p}, vars, nil
	}
	if err := os.Chmod(dir, 0o711); err != nil { // for PostgreSQL's user
		return nil, nil, err
	}
	sub := func(name string) string { return filepath.Join(dir, name) }
	run("valkey", func() ([]*Process, []string, error) {
		p, addr, err := Valkey(mkdir(sub("valkey")), "", func() []string { return nil })
		return one(p, []string{"WRITEFENCE_VALKEY_ADDR=" + addr}, err)
	})
	run("valkey cluster", func() ([]*Process, []string, error) { return valkeyCluster(sub) })
	run("minio", func() ([]*Process, []string, error) {
		p, endpoint, err := MinIO(mkdir(sub("minio")))
		return one(p, []string{"WRITEFENCE_S3_ENDPOINT=" + endpoint,
			"WRITEFENCE_S3_ACCESS_KEY=" + S3AccessKey, "WRITEFENCE_S3_SECRET_KEY=" + S3SecretKey}, err)
	})
	run("fake-gcs-server", func() ([]*Process, []string, error) {
		p, url, err := FakeGCS()
		return one(p, []string{"WRITEFENCE_GCS_ENDPOINT=" + url}, err)
	})
	run("etcd", func() ([]*Process, []string, error) {
		p, url, err := Etcd()
		return one(p, []string{"WRITEFENCE_ETCD_ENDPOINT=" + url}, err)
	})
	run("dynalite", func() ([]*Process, []string, error) {
		p, url, err := Dynalite()
		return one(p, []string{"WRITEFENCE_DYNAMODB_ENDPOINT=" + url}, err)
	})
	run("azurite", func() ([]*Process, []string, error) {
		p, url, err := Azurite()
		return one(p, []string{"WRITEFENCE_AZURITE_ENDPOINT=" + url,
			"WRITEFENCE_AZURITE_ACCOUNT=" + AzuriteAccount, "WRITEFENCE_AZURITE_KEY=" + AzuriteKey}, err)
	})
	run("postgres", func() ([]*Process, []string, error) {
		p, url, err := Postgres(sub("postgres"))
		return one(p, []string{"WRITEFENCE_POSTGRES_URL=" + url}, err)
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stop()
		return nil, nil, err
	}
	slices.Sort(env)
	return append(env, "WRITEFENCE_REQUIRE_SERVERS=1"), stop, nil
}

// valkeyCluster starts the shared cluster: three primaries with one
// replica each, named by WRITEFENCE_VALKEY_CLUSTER, comma-separated.
func valkeyCluster(sub func(string) string) ([]*Process, []string, error) {
	var procs []*Process
	var nodes []ValkeyNode
	for i := range 6 {
		p, n, err := StartValkeyNode(mkdir(sub(fmt.Sprint("valkey-cluster-", i))))
		if err != nil {
			return procs, nil, err
		}
		procs, nodes = append(procs, p), append(nodes, n)
	}
	if err := FormValkeyCluster(nodes[:3], nodes[3:]); err != nil {
		return procs, nil, err
	}
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	return procs, []string{"WRITEFENCE_VALKEY_CLUSTER=" + strings.Join(addrs, ",")}, nil
}

// mkdir makes dir, whose parent exists, and returns it; a failure shows
// when the server that was to use it starts.
func mkdir(dir string) string {
	_ = os.Mkdir(dir, 0o700)
	return dir
}
