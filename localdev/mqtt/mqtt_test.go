package mqtt_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	paho "github.com/eclipse/paho.mqtt.golang"

	"mediator/localdev/mqtt"
	"mediator/shared/push"
)

// A hint sent through the real Hinter reaches a subscriber of the node's topic on a real
// mosquitto, and only that node's; with the broker stopped the hint is dropped, logged, within
// push.Budget; once it is back the next hint goes through.
func TestHintReachesTheNodesTopicOnly(t *testing.T) {
	b, err := mqtt.Start(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	dp, err := mqtt.ServeDataPlane(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp.Close)
	got := make(chan string, 16)
	c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("n-1").SetAutoReconnect(true).
		SetOnConnectHandler(func(c paho.Client) {
			c.Subscribe(push.Topic("n-1"), 1, func(_ paho.Client, m paho.Message) { got <- m.Topic() })
		}))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	h, err := push.New(dp.URL(), "us-east-1", credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The subscription is made on connect, asynchronously: hint until one arrives.
	deadline := time.After(10 * time.Second)
	for arrived := false; !arrived; {
		h.Hint(context.Background(), "n-2", "n-1")
		select {
		case topic := <-got:
			if topic != push.Topic("n-1") {
				t.Fatalf("got a hint on %s", topic)
			}
			arrived = true
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no hint arrived")
		}
	}
	b.Stop()
	start := time.Now()
	h.Hint(context.Background(), "n-1")
	if d := time.Since(start); d > push.Budget+100*time.Millisecond {
		t.Fatalf("a hint with the broker down took %v", d)
	}
	if err := b.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	for n := dp.Published(); dp.Published() == n; {
		h.Hint(context.Background(), "n-1")
		select {
		case <-deadline:
			t.Fatal("the data plane never published again")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
