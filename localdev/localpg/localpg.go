// Package localpg finds a PostgreSQL server for local work: DATABASE_URL when it is set,
// otherwise a throwaway cluster started from the installed server binaries. `make dev`, the
// test harness and `make bench` all come through here, so they agree on where the database is.
package localpg

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mediator/localdev/prerequisites"
)

// ErrNoPostgres says what to install; it is the whole message a newcomer needs.
var ErrNoPostgres = errors.New("no PostgreSQL found: set DATABASE_URL to a server you may create databases on, or " + prerequisites.Need("postgresql"))

// Options choose the cluster.
type Options struct {
	// Dir holds the cluster (data/, postgres.log, lock). It is created if missing.
	Dir string
	// Settings are extra `-c name=value` server settings (tests turn fsync off).
	Settings []string
	// Logf reports what was done (started, reused); nil is quiet.
	Logf func(format string, args ...any)
}

// Server is a reachable PostgreSQL. URL is an administrative connection (database postgres).
type Server struct {
	URL string
	// External is true when the server came from DATABASE_URL: nothing here may stop it.
	External bool
	// Started is true when this call started the cluster (rather than finding it running).
	Started bool
	dataDir string
	pgCtl   string
	cred    *syscall.Credential
}

// Ensure returns DATABASE_URL's server, or the cluster in opts.Dir, initialised and started
// if need be. Concurrent callers (parallel test binaries) share one cluster: a file lock
// makes one of them start it and the rest find it running.
func Ensure(ctx context.Context, opts Options) (*Server, error) {
	if url := os.Getenv("DATABASE_URL"); url != "" {
		return &Server{URL: url, External: true}, nil
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := usableDir(opts.Dir, cred, logf)
	if err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(dir, "lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()

	s := &Server{dataDir: filepath.Join(dir, "data"), pgCtl: filepath.Join(bin, "pg_ctl"), cred: cred}
	if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); err != nil {
		logf("localpg: creating a cluster in %s", s.dataDir)
		if err := s.run(ctx, filepath.Join(bin, "initdb"), "-D", s.dataDir, "-U", "postgres",
			"-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
			return nil, err
		}
	}
	if port, ok := s.runningPort(ctx); ok {
		s.URL = urlFor(port)
		logf("localpg: reusing the cluster on port %d", port)
		return s, nil
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	serverOpts := []string{"-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=''"}
	for _, kv := range opts.Settings {
		serverOpts = append(serverOpts, "-c", kv)
	}
	if err := s.run(ctx, s.pgCtl, "start", "-D", s.dataDir, "-w", "-t", "60",
		"-l", filepath.Join(dir, "postgres.log"), "-o", strings.Join(serverOpts, " ")); err != nil {
		return nil, fmt.Errorf("%w (see %s)", err, filepath.Join(dir, "postgres.log"))
	}
	s.URL, s.Started = urlFor(port), true
	logf("localpg: started PostgreSQL on 127.0.0.1:%d (data in %s)", port, s.dataDir)
	return s, nil
}

// ClusterDir is where cluster name lives: .localdev/pg-<name> at the root of the checkout
// (the folder whose go.mod is module mediator), from wherever the command runs.
func ClusterDir(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module mediator\n") {
			return filepath.Join(dir, ".localdev", "pg-"+name), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("localpg: not inside the mediator checkout")
		}
		dir = parent
	}
}

// StopDir stops the cluster kept in dir, if one is running there.
func StopDir(ctx context.Context, dir string) error {
	if os.Getenv("DATABASE_URL") != "" {
		return nil
	}
	bin, err := BinDir()
	if err != nil {
		return nil // nothing installed, so nothing of ours is running
	}
	cred, err := serverUser()
	if err != nil {
		return err
	}
	dir, err = usableDir(dir, cred, func(string, ...any) {})
	if err != nil {
		return err
	}
	s := &Server{dataDir: filepath.Join(dir, "data"), pgCtl: filepath.Join(bin, "pg_ctl"), cred: cred}
	if _, running := s.runningPort(ctx); !running {
		return nil
	}
	return s.Stop(ctx)
}

// Stop stops a cluster this package runs; a DATABASE_URL server is left alone.
func (s *Server) Stop(ctx context.Context) error {
	if s.External {
		return nil
	}
	return s.run(ctx, s.pgCtl, "stop", "-D", s.dataDir, "-m", "fast", "-w")
}

// runningPort reads the port of a running cluster from postmaster.pid (line 4).
func (s *Server) runningPort(ctx context.Context) (int, bool) {
	if s.run(ctx, s.pgCtl, "status", "-D", s.dataDir) != nil {
		return 0, false
	}
	raw, err := os.ReadFile(filepath.Join(s.dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(raw), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	return port, err == nil
}

// run runs a server binary as the server's user; its output is returned only on failure.
func (s *Server) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C"}
	cmd.Dir = "/"
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(name), args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// WithDatabase is serverURL naming database name instead, with its user, password and options.
func WithDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("localpg: %q is not a postgres:// URL", serverURL)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func urlFor(port int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// BinDir is the folder of the PostgreSQL server binaries a local cluster runs from: on PATH,
// else Debian's versioned folders, newest first.
func BinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	return "", ErrNoPostgres
}

func version(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// serverUser is who the server runs as: PostgreSQL refuses to run as root, so as root it is
// the postgres account (the server package creates it) or nobody.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("localpg: running as root and no unprivileged account (postgres or nobody) to run PostgreSQL as")
}

// usableDir creates dir and, as root, hands it to the server's user. When that user cannot
// reach it (a checkout under /root), the cluster goes to a folder under the temp dir instead.
func usableDir(dir string, cred *syscall.Credential, logf func(string, ...any)) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := prepareDir(abs, cred); err == nil && reachable(abs, cred) {
		return abs, nil
	}
	alt := filepath.Join(os.TempDir(), "mediator-pg-"+strconv.Itoa(int(hash(abs))))
	logf("localpg: %s is not reachable by the server's user; using %s", abs, alt)
	if err := prepareDir(alt, cred); err != nil {
		return "", err
	}
	return alt, nil
}

func prepareDir(dir string, cred *syscall.Credential) error {
	// The parents must be traversable by the server's user; only the cluster folder is private.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	if cred == nil {
		return nil
	}
	// Only the folder itself: what is inside was made by the server's user.
	return os.Chown(dir, int(cred.Uid), int(cred.Gid))
}

// reachable asks the kernel, as the server's user, whether dir can be written.
func reachable(dir string, cred *syscall.Credential) bool {
	if cred == nil {
		return true
	}
	cmd := exec.Command("/bin/sh", "-c", `test -w "$0" && test -x "$0"`, dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd.Run() == nil
}

func hash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lockFile takes an exclusive flock, waiting for another process that holds it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EINTR) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("localpg: lock %s: %w", path, err)
		}
	}
}
