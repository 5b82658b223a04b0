package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// tokenEntry is one entry of a token file.
type tokenEntry struct {
	Token     string   `yaml:"token"`
	SHA256    string   `yaml:"sha256"`
	Principal string   `yaml:"principal"`
	Groups    []string `yaml:"groups"`
}

// Tokens maps bearer tokens to the identities they stand for. Only the
// tokens' SHA-256 digests are kept in memory.
type Tokens struct {
	byDigest map[[sha256.Size]byte]Identity
}

// minTokenLen is the shortest token a file may give in clear: anything
// shorter can be guessed.
const minTokenLen = 16

// ParseTokens reads a token file: a YAML list of entries
//
//   - {token: "...", principal: alice, groups: [team-a]}
//   - {sha256: "<hex digest of the token>", principal: ci}
//
// Every mistake is an error naming the entry and the field; no token
// appears in an error.
func ParseTokens(b []byte) (*Tokens, error) {
	var entries []tokenEntry
	if err := decodeOne(b, &entries); err != nil {
		return nil, fmt.Errorf("tokens: %w", redactYAMLError(err))
	}
	t := &Tokens{byDigest: make(map[[sha256.Size]byte]Identity, len(entries))}
	for i, e := range entries {
		where := fmt.Sprintf("token entry %d", i+1)
		var d [sha256.Size]byte
		// Presented tokens are read without surrounding blanks (see
		// bearerToken); so are these, or such an entry would never match.
		e.Token = strings.TrimSpace(e.Token)
		switch {
		case e.Token != "" && e.SHA256 != "":
			return nil, fmt.Errorf("%s: give token or sha256, not both", where)
		case e.Token != "":
			if len(e.Token) < minTokenLen {
				return nil, fmt.Errorf("%s: token: must be at least %d characters", where, minTokenLen)
			}
			d = sha256.Sum256([]byte(e.Token))
		case e.SHA256 != "":
			h, err := hex.DecodeString(strings.TrimSpace(e.SHA256))
			if err != nil || len(h) != sha256.Size {
				return nil, fmt.Errorf("%s: sha256: must be %d hex digits (sha256sum of the token)", where, 2*sha256.Size)
			}
			copy(d[:], h)
		default:
			return nil, fmt.Errorf("%s: token or sha256 is required", where)
		}
		if strings.TrimSpace(e.Principal) == "" {
			return nil, fmt.Errorf("%s: principal is required", where)
		}
		if strings.HasPrefix(e.Principal, "system:") {
			return nil, fmt.Errorf("%s: principal %q: names starting with system: belong to Peloton's own components", where, e.Principal)
		}
		if _, dup := t.byDigest[d]; dup {
			return nil, fmt.Errorf("%s: the same token as an earlier entry", where)
		}
		t.byDigest[d] = Identity{Principal: e.Principal, Groups: e.Groups, Method: MethodToken}
	}
	return t, nil
}

// Lookup returns the identity a token stands for.
func (t *Tokens) Lookup(token string) (Identity, bool) {
	id, ok := t.byDigest[sha256.Sum256([]byte(token))]
	return id, ok
}

// redactYAMLError drops from a YAML error what could be a token: the
// values it quotes (`...`), and the keys it names (an unknown field, a
// key given twice) unless shorter than any token can be - a token
// written as a key ("- s3cr3t...: alice") would otherwise be printed.
func redactYAMLError(err error) error {
	msg := yamlValue.ReplaceAllString(err.Error(), "(value withheld)")
	msg = yamlKey.ReplaceAllStringFunc(msg, func(m string) string {
		sub := yamlKey.FindStringSubmatch(m)
		key := sub[2] + sub[3]
		if len(key) < minTokenLen {
			return m
		}
		return strings.Replace(m, sub[1], "(key withheld)", 1)
	})
	return errors.New(msg)
}

var (
	yamlValue = regexp.MustCompile("`[^`]*`")
	// "field X not found in type T", "mapping key "X" already defined".
	yamlKey = regexp.MustCompile(`(?:field |mapping key )("((?:[^"\\]|\\.)*)"|(\S+?))(?: not found| already defined)`)
)
