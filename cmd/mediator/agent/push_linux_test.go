package agent

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"mediator/shared/client"
)

// The push URL is presigned as IoT Core's device gateway takes a WebSocket connect: SigV4 in
// the query for service iotdevicegateway in the endpoint's region, no header signed but the
// host, and the session token after the signature, outside it.
func TestPushPresignsForIoTCore(t *testing.T) {
	p := newPusher("n-1", &client.SigV4{Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "TOKEN/+=")}, slog.Default())
	u, _ := url.Parse("wss://abc123-ats.iot.eu-west-1.amazonaws.com/mqtt")
	signed, err := p.presign(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	got, err := url.Parse(signed)
	if err != nil {
		t.Fatal(err)
	}
	q := got.Query()
	if got.Scheme != "wss" || got.Host != u.Host || got.Path != "/mqtt" || q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" ||
		!strings.HasSuffix(q.Get("X-Amz-Credential"), "/eu-west-1/iotdevicegateway/aws4_request") ||
		q.Get("X-Amz-SignedHeaders") != "host" || len(q.Get("X-Amz-Signature")) != 64 || q.Get("X-Amz-Expires") != "300" {
		t.Fatalf("presigned: %s", signed)
	}
	if !strings.HasSuffix(got.RawQuery, "&X-Amz-Security-Token="+url.QueryEscape("TOKEN/+=")) || q.Get("X-Amz-Security-Token") != "TOKEN/+=" {
		t.Fatalf("the session token must come after the signature: %s", got.RawQuery)
	}
	if redact(signed) != "wss://abc123-ats.iot.eu-west-1.amazonaws.com/mqtt" {
		t.Fatalf("redacted: %s", redact(signed))
	}
	// A host that does not name its region takes the signer's.
	p.signer.DefaultRegion = "us-east-2"
	u, _ = url.Parse("wss://push.example.com/mqtt")
	if signed, err = p.presign(context.Background(), u); err != nil || !strings.Contains(signed, "%2Fus-east-2%2Fiotdevicegateway%2F") {
		t.Fatalf("%s %v", signed, err)
	}
}
