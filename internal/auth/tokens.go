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

// redactYAMLError says where a token file does not parse and what kind of
// mistake it is, with none of the file's text but a key shorter than any
// token can be (a misspelt field's name): a token written as a key
// ("- s3cr3t...: alice") or quoted as a value would otherwise be printed.
func redactYAMLError(err error) error {
	if !strings.HasPrefix(err.Error(), "yaml:") {
		return err // decodeOne's own, which quotes nothing of the file
	}
	var out []string
	for _, line := range strings.Split(err.Error(), "\n") {
		where := lineRE.FindString(line)
		var what string
		switch {
		case unknownRE.MatchString(line):
			key := unknownRE.FindStringSubmatch(line)[1]
			what = "unknown field (name withheld: it could be a token)"
			if len(key) < minTokenLen && !strings.ContainsAny(key, " \t") {
				what = fmt.Sprintf("unknown field %q", key)
			}
		case strings.Contains(line, "already defined"):
			what = "a key given twice (withheld: it could be a token)"
		case strings.Contains(line, "cannot unmarshal"):
			what = "cannot unmarshal a value of the wrong type (value withheld)"
		case where != "":
			what = "not valid YAML"
		default:
			continue
		}
		if where != "" {
			what = where + ": " + what
		}
		out = append(out, what)
	}
	if len(out) == 0 {
		return errors.New("not valid YAML for a list of {token|sha256, principal, groups} entries")
	}
	return errors.New(strings.Join(out, "; "))
}

var (
	lineRE    = regexp.MustCompile(`line \d+`)
	unknownRE = regexp.MustCompile(`field (.*) not found in type`)
)
