// Package mqtt plays AWS IoT Core on 127.0.0.1 for `make dev` and the tests: a real MQTT
// broker (mosquitto, a process of its own with its own config file and no persistence) that
// the agents subscribe to, and a stand-in of IoT's data plane (DataPlane: POST
// /topics/{topic}?qos=N, as the handlers' push.Hinter sends it) that republishes onto the
// broker. What differs from IoT Core: the broker authenticates nobody (anyone on the machine
// may publish any topic, which is what the tests' forged hints use), and the data plane takes
// any SigV4 signature, as long as the request carries one.
package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"mediator/localdev/prerequisites"
)

// ErrNoMosquitto says what to install.
var ErrNoMosquitto = errors.New("no mosquitto found: " + prerequisites.Need("mosquitto"))

// Binary is the mosquitto executable: on PATH, or where Debian and Homebrew put it (sbin, often
// not on a user's PATH).
func Binary() (string, error) {
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mosquitto", "/opt/homebrew/sbin/mosquitto", "/usr/local/sbin/mosquitto"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", ErrNoMosquitto
}

// Broker is a mosquitto listening on 127.0.0.1.
type Broker struct {
	dir  string
	port int
	bin  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a broker on a free port of 127.0.0.1, its config file and log in dir (created if
// missing; a temporary directory when ""). Stop ends it.
func Start(ctx context.Context, dir string) (*Broker, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "mediator-mqtt-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b := &Broker{dir: dir, bin: bin}
	// A free port, taken from the kernel and handed over: another process may take it first,
	// and then the broker fails to listen and another one is tried.
	for try := 0; ; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		b.port = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if err = b.Resume(ctx); err == nil || try == 4 {
			return b, err
		}
	}
}

// URL is where MQTT clients connect: tcp://127.0.0.1:port.
func (b *Broker) URL() string { return "tcp://" + b.Addr() }

// Addr is the broker's host:port.
func (b *Broker) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// Resume starts the broker again on its port after a Stop (tests play an outage with them),
// and returns once it accepts connections.
func (b *Broker) Resume(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		return nil
	}
	conf := filepath.Join(b.dir, "mosquitto.conf")
	// persistence false: a hint is worth nothing once it is late, and nothing may survive a
	// restart of the broker but the clients' own reconnects.
	text := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest file %s\nlog_type error\nlog_type warning\nlog_type notice\n",
		b.port, filepath.Join(b.dir, "mosquitto.log"))
	if os.Geteuid() == 0 {
		// As root it would switch to the user mosquitto, who may not write the log here.
		text += "user root\n"
	}
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(b.bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.Addr(), time.Second)
		if err == nil {
			_ = c.Close()
			b.cmd, b.done = cmd, done
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(b.dir, "mosquitto.log"))
			return fmt.Errorf("mosquitto on %s exited: %s", b.Addr(), log)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("mosquitto on %s did not listen within 10 s", b.Addr())
		}
	}
}

// Stop ends the broker, dropping every client's connection, and waits for it to exit.
func (b *Broker) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Kill()
	<-b.done
	b.cmd, b.done = nil, nil
}
