package gateway

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"mediator/shared/auth"
)

// Tokens authenticates `Authorization: Bearer` tokens for local development, playing the part
// of API Gateway's authorizer. Tokens are kept only as SHA-256 digests and compared in
// constant time.
//
// Without a tokens file the development defaults apply (DESIGN.md, Who may do what): dev-admin (admin),
// dev-client (client dev-client), dev-client-<name> (client <name>), dev-node-<node_id>
// (node <node_id>). They exist only here; nothing deployed accepts them.
type Tokens struct {
	entries []tokenEntry
	devMode bool
}

type tokenEntry struct {
	digest [sha256.Size]byte
	who    auth.Principal
}

// DevTokens are the development defaults (DESIGN.md, Who may do what).
func DevTokens() *Tokens {
	t := &Tokens{devMode: true}
	t.add("dev-admin", auth.Principal{Kind: auth.Admin, ID: "dev-admin"})
	t.add("dev-client", auth.Principal{Kind: auth.Client, ID: "dev-client"})
	return t
}

// LoadTokens reads a tokens file: one `<sha256 hex> <client|node|admin> <id>` per line,
// blank lines and # comments ignored.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t := &Tokens{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		digest, err := hex.DecodeString(strings.TrimPrefix(fields[0], "sha256:"))
		if len(fields) != 3 || err != nil || len(digest) != sha256.Size {
			return nil, fmt.Errorf("%s:%d: want `<sha256 hex> <kind> <id>`", path, n)
		}
		e := tokenEntry{who: auth.Principal{Kind: auth.Kind(fields[1]), ID: fields[2]}}
		copy(e.digest[:], digest)
		t.entries = append(t.entries, e)
	}
	return t, sc.Err()
}

func (t *Tokens) add(token string, who auth.Principal) {
	t.entries = append(t.entries, tokenEntry{digest: sha256.Sum256([]byte(token)), who: who})
}

// Authenticate maps an Authorization header to a principal.
func (t *Tokens) Authenticate(header string) (auth.Principal, bool) {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return auth.Principal{}, false
	}
	digest := sha256.Sum256([]byte(token))
	found, who := 0, auth.Principal{}
	for _, e := range t.entries { // every entry, so the time does not say which matched
		if subtle.ConstantTimeCompare(digest[:], e.digest[:]) == 1 {
			found, who = 1, e.who
		}
	}
	if found == 1 {
		return who, true
	}
	if t.devMode {
		if name, ok := strings.CutPrefix(token, "dev-client-"); ok && name != "" {
			return auth.Principal{Kind: auth.Client, ID: name}, true
		}
		if node, ok := strings.CutPrefix(token, "dev-node-"); ok && node != "" {
			return auth.Principal{Kind: auth.Node, ID: node}, true
		}
	}
	return auth.Principal{}, false
}

// Describe is the start-up banner's list of who can call.
func (t *Tokens) Describe() string {
	if !t.devMode {
		return fmt.Sprintf("%d token(s) from the tokens file", len(t.entries))
	}
	return "Authorization: Bearer dev-admin | dev-client | dev-client-<name> | dev-node-<node_id>"
}
