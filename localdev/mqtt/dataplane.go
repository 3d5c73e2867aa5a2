package mqtt

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// DataPlane is IoT Core's data-plane Publish on 127.0.0.1, onto a Broker: what the handlers'
// push.Hinter reaches as IOT_DATA_ENDPOINT. It keeps one MQTT connection to the broker and
// takes it up again when the broker comes back; while it is down, a publish is answered 503,
// as a throttled or unreachable data plane would fail.
type DataPlane struct {
	client    paho.Client
	server    *http.Server
	url       string
	published atomic.Int64
}

// ServeDataPlane listens on a free port of 127.0.0.1 and publishes onto b.
func ServeDataPlane(b *Broker) (*DataPlane, error) {
	opts := paho.NewClientOptions().AddBroker(b.URL()).SetClientID("mediator-local-dataplane").
		SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(100 * time.Millisecond).
		SetMaxReconnectInterval(100 * time.Millisecond).SetCleanSession(true).SetOrderMatters(false)
	d := &DataPlane{client: paho.NewClient(opts)}
	d.client.Connect() // retries in the background until the broker answers
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		d.client.Disconnect(0)
		return nil, err
	}
	d.url = "http://" + ln.Addr().String()
	d.server = &http.Server{Handler: http.HandlerFunc(d.publish), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.server.Serve(ln) }()
	return d, nil
}

// URL is the data plane's endpoint.
func (d *DataPlane) URL() string { return d.url }

// Connected says whether it holds its connection to the broker: after the broker's restart
// it publishes again only once this holds.
func (d *DataPlane) Connected() bool { return d.client.IsConnectionOpen() }

// Published is how many hints it has put on the broker.
func (d *DataPlane) Published() int64 { return d.published.Load() }

// Close stops serving and drops the broker's connection.
func (d *DataPlane) Close() {
	_ = d.server.Close()
	d.client.Disconnect(0)
}

// publish serves POST /topics/{topic}?qos=N with IoT's answers: 200 and {} when the broker
// took it.
func (d *DataPlane) publish(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"message":"`+msg+`"}`)
	}
	topic, ok := strings.CutPrefix(r.URL.Path, "/topics/")
	if r.Method != http.MethodPost || !ok || topic == "" {
		fail(http.StatusNotFound, "only Publish is served here")
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		fail(http.StatusForbidden, "Missing Authentication Token")
		return
	}
	qos, err := strconv.Atoi(r.URL.Query().Get("qos"))
	if r.URL.Query().Get("qos") == "" {
		qos, err = 0, nil
	}
	if err != nil || qos < 0 || qos > 1 {
		fail(http.StatusBadRequest, "qos must be 0 or 1")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 128<<10))
	if err != nil {
		fail(http.StatusBadRequest, "unreadable body")
		return
	}
	if !d.client.IsConnectionOpen() {
		fail(http.StatusServiceUnavailable, "the broker is unreachable")
		return
	}
	tok := d.client.Publish(topic, byte(qos), false, body)
	if !tok.WaitTimeout(2*time.Second) || tok.Error() != nil {
		fail(http.StatusServiceUnavailable, "the broker did not take the message")
		return
	}
	d.published.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, "{}")
}
