// Package push tells nodes to look now: after a handler's commit gives a node work or takes it
// away, a Hinter publishes a tiny message on the node's own MQTT topic through AWS IoT Core's
// data plane (Publish: POST /topics/{topic}?qos=1, signed with SigV4 for the service iotdata),
// and the node's agent, subscribed to that topic, heartbeats at once. The hint carries nothing
// the node acts on: the heartbeat's answer stays the only truth, so a hint lost, duplicated,
// late or forged changes nothing but when the node looks, and a node without a connection
// polls at its cadence as before.
//
// The data plane is reached with the SDK's own signer over net/http rather than the SDK's
// iotdataplane client: the one operation is a signed POST, and the module is not among those
// this project's builds can fetch. `make dev` and the tests point it at localdev/mqtt's
// stand-in, which speaks the same protocol and republishes onto a local mosquitto.
package push

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Budget bounds a handler's hints after its wake: a dead or slow data plane costs an answer at
// most this, and the nodes it did not reach look at their next heartbeat, as without push.
const Budget = 200 * time.Millisecond

// MaxInFlight bounds the hints being published at once. A handler's are a few; a reaper's
// sweep after a lab lost its power can be thousands, which go out in waves within the same
// Budget rather than as thousands of connections at once.
const MaxInFlight = 64

// Payload is every hint: it says nothing but "look now".
var Payload = []byte(`{"look":"now"}`)

// SigningName is IoT Core's data plane as SigV4 names it.
const SigningName = "iotdata"

// Topic is where the hints for nodeID go, and the only topic its agent subscribes to (the node
// role's IoT policy allows it no other: infra/access.yaml).
func Topic(nodeID string) string { return "mediator/nodes/" + nodeID + "/hint" }

// Hinter publishes hints to one IoT data endpoint. A nil Hinter sends nothing (push is off).
type Hinter struct {
	endpoint *url.URL
	region   string
	creds    aws.CredentialsProvider
	http     *http.Client
	signer   *v4.Signer
	log      *slog.Logger
}

// New is a Hinter publishing to endpoint (https://<prefix>-ats.iot.<region>.amazonaws.com, or a
// local stand-in's http URL), signing for region with creds.
func New(endpoint, region string, creds aws.CredentialsProvider, log *slog.Logger) (*Hinter, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("IOT_DATA_ENDPOINT must be an http(s) URL, not %q", endpoint)
	}
	if region == "" {
		return nil, fmt.Errorf("IOT_DATA_ENDPOINT is set but AWS_REGION is not: hints are signed for a region")
	}
	if log == nil {
		log = slog.Default()
	}
	return &Hinter{endpoint: u, region: region, creds: creds, http: &http.Client{}, signer: v4.NewSigner(), log: log}, nil
}

// Hint tells each node to look now, MaxInFlight at a time, within ctx and Budget. It never
// fails: what it could not send it logs in one line (how many, the first node and its error),
// and those nodes find their work at their next heartbeat.
func (h *Hinter) Hint(ctx context.Context, nodeIDs ...string) {
	if h == nil || len(nodeIDs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, Budget)
	defer cancel()
	seen := make(map[string]bool, len(nodeIDs))
	slots := make(chan struct{}, MaxInFlight)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		unsent    int
		firstNode string
		firstErr  error
	)
	fail := func(id string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if unsent++; firstErr == nil {
			firstNode, firstErr = id, err
		}
	}
	for _, id := range nodeIDs {
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			fail(id, context.Cause(ctx))
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := h.publish(ctx, Topic(id)); err != nil {
				fail(id, err)
			}
		})
	}
	wg.Wait()
	if unsent > 0 {
		h.log.Warn("hints not sent: those nodes look at their next heartbeat", "nodes", unsent, "node_id", firstNode, "error", firstErr.Error())
	}
}

func (h *Hinter) publish(ctx context.Context, topic string) error {
	u := *h.endpoint
	// The topic is one path segment, its slashes escaped, as the SDK's client sends it.
	u.Path = strings.TrimSuffix(u.Path, "/") + "/topics/" + topic
	u.RawPath = strings.TrimSuffix(h.endpoint.EscapedPath(), "/") + "/topics/" + url.PathEscape(topic)
	u.RawQuery = "qos=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(Payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	creds, err := h.creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	sum := sha256.Sum256(Payload)
	if err := h.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), SigningName, h.region, time.Now()); err != nil {
		return err
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("publish %s: %d %s", topic, resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}
