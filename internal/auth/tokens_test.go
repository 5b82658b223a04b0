package auth

import (
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

const (
	aliceToken = "alice-0123456789abcdef"
	ciToken    = "ci-token-fedcba9876543210"
)

func sha(tok string) string {
	d := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(d[:])
}

func TestParseTokens(t *testing.T) {
	file := fmt.Sprintf(`
# people
- {token: %q, principal: alice, groups: [team-a, ops]}
# CI holds only the digest
- {sha256: %q, principal: ci}
- {token: "  padded-token-0123456789  ", principal: pad}
`, aliceToken, strings.ToUpper(sha(ciToken)))
	toks, err := ParseTokens([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token, principal string
		groups           []string
	}{
		{aliceToken, "alice", []string{"team-a", "ops"}},
		{ciToken, "ci", nil},
		{"padded-token-0123456789", "pad", nil},
	} {
		id, ok := toks.Lookup(tc.token)
		if !ok || id.Principal != tc.principal || !slices.Equal(id.Groups, tc.groups) || id.Method != MethodToken {
			t.Errorf("Lookup(%q) = %+v, %v; want %s %v by token", tc.token, id, ok, tc.principal, tc.groups)
		}
	}
	for _, bad := range []string{"", "alice", aliceToken + "x", aliceToken[1:], sha(ciToken), strings.ToUpper(aliceToken)} {
		if id, ok := toks.Lookup(bad); ok {
			t.Errorf("Lookup(%q) = %+v, want no identity", bad, id)
		}
	}
}

func TestParseTokensErrors(t *testing.T) {
	secret := "s3cr3t-value-0123456789"
	for _, tc := range []struct {
		file string
		want []string
	}{
		{fmt.Sprintf("- {token: %q, principal: a}\n- {token: short, principal: b}", secret),
			[]string{"token entry 2: token:", "at least 16 characters"}},
		{fmt.Sprintf("- {token: %q, sha256: %q, principal: a}", secret, sha(secret)),
			[]string{"token entry 1:", "token or sha256, not both"}},
		{"- {principal: a}", []string{"token entry 1:", "token or sha256 is required"}},
		{fmt.Sprintf("- {token: %q}", secret), []string{"token entry 1:", "principal is required"}},
		{fmt.Sprintf("- {token: %q, principal: '  '}", secret), []string{"token entry 1:", "principal is required"}},
		{"- {sha256: abc, principal: a}", []string{"token entry 1: sha256:", "64 hex digits"}},
		{"- {sha256: " + strings.Repeat("zz", 32) + ", principal: a}", []string{"token entry 1: sha256:", "64 hex digits"}},
		{fmt.Sprintf("- {token: %q, principal: 'system:advisor'}", secret), []string{"token entry 1:", "system:", "Peloton's own components"}},
		{fmt.Sprintf("- {token: %q, principal: a}\n- {token: %q, principal: b}", secret, secret),
			[]string{"token entry 2:", "same token as an earlier entry"}},
		{fmt.Sprintf("- {token: %q, principal: a}\n- {sha256: %q, principal: b}", secret, sha(secret)),
			[]string{"token entry 2:", "same token as an earlier entry"}},
		{fmt.Sprintf("- {token: %q, principal: a, group: x}", secret), []string{"tokens:", "line 1", `unknown field "group"`}},
		{fmt.Sprintf("- {token: %q, principal: a}\n---\n- {token: %q, principal: b}", secret, secret+"x"), []string{"tokens:", "one YAML document"}},
		{"token: x\nprincipal: a\n", []string{"tokens:", "cannot unmarshal"}},
		// Mistakes that put a token where YAML quotes it back.
		{fmt.Sprintf("- {token: %q, principal: a, groups: %q}", "x"+secret, secret), []string{"tokens:", "line 1", "withheld"}},
		{fmt.Sprintf("- {%s: alice}", secret), []string{"tokens:", "line 1", "withheld"}},
		{fmt.Sprintf("- {token: %q, principal: a, token: %q}", secret, secret), []string{"tokens:", "line 1"}},
		{fmt.Sprintf("- {%q: a, %q: b}", secret, secret), []string{"tokens:", "line 1", "withheld"}},
		{fmt.Sprintf("- {token: [%q], principal: a}", secret), []string{"tokens:", "line 1"}},
		{fmt.Sprintf("- {token: %q, principal: a", secret), []string{"tokens:"}},
	} {
		_, err := ParseTokens([]byte(tc.file))
		if err == nil {
			t.Errorf("ParseTokens(%q): no error, want one saying %q", tc.file, tc.want)
			continue
		}
		msg := err.Error()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("ParseTokens(%q): %q does not say %q", tc.file, msg, w)
			}
		}
		// No token, nor a piece of one long enough to help guess it.
		for _, part := range []string{secret, secret[:7], sha(secret)[:16], url.QueryEscape(secret)} {
			if strings.Contains(msg, part) {
				t.Errorf("ParseTokens(%q): the error %q shows %q of a token", tc.file, msg, part)
			}
		}
	}
	// A short unknown field is named, to help fix a typo.
	_, err := ParseTokens([]byte(fmt.Sprintf("- {tokn: %q, principal: a}", secret)))
	if err == nil || !strings.Contains(err.Error(), `unknown field "tokn"`) {
		t.Errorf("a typo in a field name: %v, want it named", err)
	}
}

func TestCertIdentity(t *testing.T) {
	u, _ := url.Parse("spiffe://example.org/ci")
	for _, tc := range []struct {
		name string
		cert x509.Certificate
		want string
		ok   bool
	}{
		{"common name", x509.Certificate{Subject: pkix.Name{CommonName: "alice"}, DNSNames: []string{"a.example"}}, "alice", true},
		{"DNS name", x509.Certificate{DNSNames: []string{"agent-1.example", "b"}, URIs: []*url.URL{u}}, "agent-1.example", true},
		{"URI", x509.Certificate{URIs: []*url.URL{u}, EmailAddresses: []string{"ci@example.org"}}, "spiffe://example.org/ci", true},
		{"e-mail", x509.Certificate{EmailAddresses: []string{"ci@example.org"}}, "ci@example.org", true},
		{"nothing", x509.Certificate{Subject: pkix.Name{Organization: []string{"ops"}}}, "", false},
		{"blank name", x509.Certificate{Subject: pkix.Name{CommonName: "  "}}, "", false},
	} {
		tc.cert.Subject.Organization = append(tc.cert.Subject.Organization, "team-a")
		id, ok := certIdentity(&tc.cert)
		if ok != tc.ok || id.Principal != tc.want {
			t.Errorf("%s: certIdentity = %+v, %v; want %q, %v", tc.name, id, ok, tc.want, tc.ok)
			continue
		}
		if ok && (id.Method != MethodCertificate || !slices.Contains(id.Groups, "team-a")) {
			t.Errorf("%s: %+v, want method certificate and the organizations as groups", tc.name, id)
		}
	}
}
