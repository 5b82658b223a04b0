package auth

import (
	"strings"
	"testing"
)

// FuzzParsePolicy: any bytes as a policy file: no panic; an accepted
// policy has only known roles, each grant to a principal or a group, and
// pool patterns a pool path can match.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte("- {principal: alice, role: submitter, pools: [\"/a/**\"]}\n- {group: ops, role: operator}\n"))
	f.Add([]byte("- {principal: a, group: b, role: viewer}"))
	f.Add([]byte("- {principal: a, role: admin, pools: [\"/x\"]}"))
	f.Add([]byte("- {principal: a, role: viewer, pools: []}"))
	f.Add([]byte("- {principal: a, role: viewer, pools: [\"/a/*/b\"]}"))
	f.Add([]byte("{}"))
	f.Add([]byte("- {principal: a, role: viewer, extra: 1}"))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePolicy(b)
		if err != nil {
			return
		}
		for _, g := range p.grants {
			if (g.Principal == "") == (g.Group == "") || g.role == RoleNone {
				t.Fatalf("accepted grant %+v", g)
			}
			for _, pat := range g.Pools {
				if checkPattern(pat) != nil {
					t.Fatalf("accepted pattern %q", pat)
				}
			}
		}
		// Deciding never panics, whatever the identity.
		p.Allows(Identity{Principal: "alice", Groups: []string{"ops"}, Method: MethodToken}, Submitter, "/a/b")
		p.Allows(Identity{Principal: "", Method: MethodCertificate}, Admin, "")
	})
}

// FuzzParseTokens: any bytes as a token file: no panic, and no error
// message carries a token given in the file.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("- {token: \"secret-secret-secret-1\", principal: alice, groups: [a]}\n"))
	f.Add([]byte("- {token: \"secret-secret-secret-1\", principal: [x]}\n"))
	f.Add([]byte("- {token: \"secret-secret-secret-1\", sha256: \"00\", principal: a}\n"))
	f.Add([]byte("- {token: short, principal: a}\n"))
	f.Add([]byte("- {sha256: \"zz\", principal: a}\n"))
	f.Add([]byte("- token: \"secret-secret-secret-1\"\n  principal: a\n  bogus: \"secret-secret-secret-2\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tk, err := ParseTokens(b)
		if err == nil {
			for _, id := range tk.byDigest {
				if strings.TrimSpace(id.Principal) == "" || id.Method != MethodToken {
					t.Fatalf("accepted identity %+v", id)
				}
			}
			return
		}
		for _, w := range strings.FieldsFunc(string(b), func(r rune) bool { return strings.ContainsRune(" \n\t{}[]:,\"'", r) }) {
			if len(w) >= minTokenLen && strings.Contains(err.Error(), w) && !strings.Contains("principal token sha256 groups", w) {
				t.Fatalf("error %q carries %q from the file", err, w)
			}
		}
	})
}
