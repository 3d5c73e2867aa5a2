package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"mediator/shared/client"
)

// The push connection's limits. IoT Core takes a keepalive of 30 to 1200 s and closes a
// connection idle past 1.5 times it; a ping every 30 s also finds a dead connection within a
// minute. The reconnect backoff is capped well below the lifetime of a connection so that an
// outage of the broker costs push no more than that once it is over; meanwhile the agent
// polls at its cadence.
const (
	pushKeepAlive      = 30 * time.Second
	pushConnectTimeout = 10 * time.Second
	pushBackoffCeiling = 30 * time.Second
	// pushPresignFor is how long a presigned URL is good for: it is used at once, for one
	// connect; IoT Core checks it at the connect only.
	pushPresignFor = 5 * time.Minute
	// iotSigningName is IoT Core's device gateway as SigV4 names it.
	iotSigningName = "iotdevicegateway"
)

// pusher keeps the agent subscribed to its own hint topic on the broker the heartbeat's
// answer offers, and tells the loop (hints, never blocking: a burst is one) when a message
// comes on it. Nothing in the message is read: it only moves the next heartbeat to now, and a
// forged or stale one costs one heartbeat. Only the loop calls offer and close.
type pusher struct {
	nodeID string
	log    *slog.Logger
	signer *client.SigV4 // nil: the API is not IAM's, and a wss:// URL is connected unsigned
	hints  chan struct{}
	cur    client.Push
	cancel context.CancelFunc
}

func newPusher(nodeID string, signer *client.SigV4, log *slog.Logger) *pusher {
	return &pusher{nodeID: nodeID, signer: signer, log: log, hints: make(chan struct{}, 1)}
}

// offer follows what the last heartbeat's answer offered: a new broker or topic replaces the
// connection, none ends it.
func (p *pusher) offer(o *client.Push) {
	if o != nil && p.cancel != nil && *o == p.cur {
		return
	}
	p.close()
	if o == nil {
		return
	}
	p.cur = *o
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.keep(ctx, *o)
}

// close ends the connection without waiting for it: a connect under way may take its whole
// timeout, and the agent's exit must not (a second signal's steps have their grace and a
// second). A connection it leaves for a moment only costs a hint the loop no longer reads.
func (p *pusher) close() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel, p.cur = nil, client.Push{}
}

// hint tells the loop to heartbeat now; one already waiting covers this one.
func (p *pusher) hint() {
	select {
	case p.hints <- struct{}{}:
	default:
	}
}

// keep connects, and connects again with capped exponential backoff and jitter whenever the
// connection is refused or lost, until ctx ends. A reconnect is followed by a hint: what was
// pushed while it was down is looked at now rather than at the next heartbeat.
func (p *pusher) keep(ctx context.Context, o client.Push) {
	failures, connected := 0, false
	for ctx.Err() == nil {
		lost := make(chan error, 1)
		c, err := p.connect(ctx, o, lost)
		if err == nil && ctx.Err() != nil {
			c.Disconnect(0)
			return
		}
		if err != nil {
			failures++
			wait := backoff(failures, pushBackoffCeiling)
			p.log.Warn("push: no connection to the broker; heartbeating at the cadence meanwhile", "url", redact(o.URL), "error", err.Error(),
				"failures", failures, "retry_in", wait.Round(time.Millisecond).String())
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			continue
		}
		p.log.Info("push connected", "url", redact(o.URL), "topic", o.Topic, "after_failures", failures)
		if connected || failures > 0 {
			p.hint()
		}
		connected, failures = true, 0
		select {
		case <-ctx.Done():
			c.Disconnect(250)
			return
		case err := <-lost:
			failures = 1
			p.log.Warn("push: the connection was lost; heartbeating at the cadence until it is back", "error", err.Error())
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff(failures, pushBackoffCeiling)):
		}
	}
}

// connect makes one connection, as client id the node's own (IoT Core's policy allows the
// node no other), and subscribes to the one topic.
func (p *pusher) connect(ctx context.Context, o client.Push, lost chan<- error) (paho.Client, error) {
	broker := o.URL
	if p.signer != nil {
		u, err := url.Parse(o.URL)
		if err == nil && u.Scheme == "wss" {
			if broker, err = p.presign(ctx, u); err != nil {
				return nil, fmt.Errorf("presign: %w", err)
			}
		}
	}
	opts := paho.NewClientOptions().AddBroker(broker).SetClientID(p.nodeID).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetKeepAlive(pushKeepAlive).
		SetConnectTimeout(pushConnectTimeout).SetWriteTimeout(pushConnectTimeout).SetOrderMatters(false).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			select {
			case lost <- err:
			default:
			}
		})
	c := paho.NewClient(opts)
	if err := wait(c.Connect()); err != nil {
		return nil, err
	}
	// QoS 0: a hint lost is a heartbeat at the cadence, and IoT Core meters every PUBACK a
	// device sends as a message of its own, which would double what push costs.
	tok := c.Subscribe(o.Topic, 0, func(paho.Client, paho.Message) { p.hint() })
	err := wait(tok)
	if err == nil {
		// A broker that refuses the topic (an IoT policy that does not allow it) says so in the
		// SUBACK's code, not by an error.
		if q, ok := tok.(*paho.SubscribeToken).Result()[o.Topic]; !ok || q > 1 {
			err = fmt.Errorf("the broker refused the subscription to %s", o.Topic)
		}
	}
	if err != nil {
		c.Disconnect(0)
		return nil, err
	}
	return c, nil
}

func wait(tok paho.Token) error {
	if !tok.WaitTimeout(pushConnectTimeout + time.Second) {
		return errors.New("timed out")
	}
	return tok.Error()
}

// iotHost is IoT Core's data endpoint, whose host names its region.
var iotHost = regexp.MustCompile(`\.iot\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$`)

// presign signs the broker's URL with the node's own credentials for IoT Core's device
// gateway, as its WebSocket connect takes them: SigV4 in the query, and the session token
// added after the signature, not signed (IoT Core's variant).
func (p *pusher) presign(ctx context.Context, u *url.URL) (string, error) {
	region := p.signer.Region
	if m := iotHost.FindStringSubmatch(u.Hostname()); m != nil {
		region = m[1]
	}
	if region == "" {
		region = p.signer.DefaultRegion
	}
	if region == "" {
		return "", errors.New("no region: the host is not <prefix>-ats.iot.<region>.amazonaws.com")
	}
	creds, err := p.signer.Credentials.Retrieve(ctx)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("X-Amz-Expires", fmt.Sprint(int(pushPresignFor.Seconds())))
	u2 := *u
	u2.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u2.String(), nil)
	if err != nil {
		return "", err
	}
	empty := sha256.Sum256(nil)
	signed, _, err := v4.NewSigner().PresignHTTP(ctx, creds, req, hex.EncodeToString(empty[:]), iotSigningName, region, time.Now(),
		func(o *v4.SignerOptions) { o.DisableSessionToken = true })
	if err != nil {
		return "", err
	}
	if creds.SessionToken != "" {
		signed += "&X-Amz-Security-Token=" + url.QueryEscape(creds.SessionToken)
	}
	return signed, nil
}

// redact is a URL without its query, which may hold a signature.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "?"
	}
	u.RawQuery = ""
	return u.String()
}
