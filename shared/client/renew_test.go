package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mediator/shared/client"
)

// credentialProcess is a credential_process for the AWS config file: it prints the credentials
// the test last wrote, as IAM Roles Anywhere's helper prints its own, and counts its runs.
const credentialProcess = `#!/bin/sh
echo run >>"$(dirname "$0")/runs"
cat "$(dirname "$0")/credentials.json"
`

// The signer renews what the chain hands it: credentials inside RenewBefore of their expiry
// are fetched again by the next request, and those further from it are reused, not fetched for
// every request. The chain is the SDK's own, reading a credential_process from the AWS config
// file as the agent of a lab machine does.
func TestSigV4RenewsExpiringCredentials(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "credentials")
	if err := os.WriteFile(script, []byte(credentialProcess), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config")
	if err := os.WriteFile(config, []byte("[default]\ncredential_process = "+script+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", config)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	hand := func(key string, expires time.Duration) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"Version": 1, "AccessKeyId": key, "SecretAccessKey": secretKey,
			"SessionToken": sessionToken, "Expiration": time.Now().Add(expires).UTC().Format(time.RFC3339)})
		if err := os.WriteFile(filepath.Join(dir, "credentials.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, cred, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
		key, _, _ := strings.Cut(cred, "/")
		mu.Lock()
		keys = append(keys, key)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"status":"ok"}`)
	}))
	defer srv.Close()
	signer, err := client.NewSigV4(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New("http://"+apiHost, client.WithAuth(signer), client.WithHTTPClient(toward(srv, nil)))
	if err != nil {
		t.Fatal(err)
	}
	health := func() {
		t.Helper()
		if _, err := c.Health(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	hand("ASIAFIRST", client.RenewBefore/2) // within the window: the next request renews them
	health()
	hand("ASIASECOND", time.Hour)
	health()
	hand("ASIATHIRD", time.Hour) // the second are good for an hour: not fetched again
	health()
	health()
	runs, _ := os.ReadFile(filepath.Join(dir, "runs"))
	if want := []string{"ASIAFIRST", "ASIASECOND", "ASIASECOND", "ASIASECOND"}; strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("requests signed with %v, want %v", keys, want)
	}
	if n := strings.Count(string(runs), "run"); n != 2 {
		t.Errorf("credential_process ran %d times, want 2", n)
	}
}
