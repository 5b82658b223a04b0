// Package auth decides who may call what on a Peloton daemon: it
// authenticates callers (bearer tokens from a token file, mutual-TLS client
// certificates, or an identity that the daemon's own REST gateway
// forwards), authorizes each call against a policy of roles granted to
// principals and groups per pool subtree or cluster-wide, limits each
// principal's rate, bounds every handler by a deadline, and writes an
// audit line for every mutating or refused call.
//
// A daemon describes its API to this package as Rules: for each gRPC
// method, the role it needs and where (the pools it acts on, or the
// cluster). Everything else - files, reloading, the order of checks, the
// codes returned - is decided here once, for the cluster stack and the
// federation alike.
//
// It knows gRPC and nothing of Peloton's domain.
package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Role is a set of rights. Viewer < Submitter < Operator < Admin, each
// holding the rights of those before it; Agent stands apart, the one right
// to report a host's usage, for the host agents' identities.
type Role int

const (
	RoleNone Role = iota
	// Viewer reads: jobs, tasks, logs, pools, updates, hosts, partitions.
	Viewer
	// Submitter creates, changes and stops jobs and their updates.
	Submitter
	// Operator also manages pools, and cluster-wide: hosts, maintenance,
	// partitions and the host advisor's advice.
	Operator
	// Admin holds every right, the federation's registry of clusters
	// included.
	Admin
	// Agent may only report a host's usage (HostAgentService).
	Agent
)

var roleNames = map[Role]string{Viewer: "viewer", Submitter: "submitter", Operator: "operator", Admin: "admin", Agent: "agent"}

func (r Role) String() string {
	if n, ok := roleNames[r]; ok {
		return n
	}
	return "none"
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for r, n := range roleNames {
		if n == s {
			return r, nil
		}
	}
	return RoleNone, fmt.Errorf("unknown role %q (want viewer, submitter, operator, admin or agent)", s)
}

// covers says whether holding r gives the right need.
func (r Role) covers(need Role) bool {
	switch {
	case r == Admin:
		return true
	case r == Agent || need == Agent:
		return r == need
	default:
		return r >= need
	}
}

// Grant gives a role to a principal or to a group, on pools or
// cluster-wide.
type Grant struct {
	Principal string   `yaml:"principal"`
	Group     string   `yaml:"group"`
	Role      string   `yaml:"role"`
	Pools     []string `yaml:"pools"`

	role Role
}

// Policy is the list of grants. A call is allowed when one grant to the
// caller (its principal or one of its groups) holds the right the call
// needs, cluster-wide (a grant without pools) or on every pool the call
// acts on (a grant whose patterns match the pool).
type Policy struct {
	grants []Grant
}

// ParsePolicy reads a policy file: a YAML list of grants, e.g.
//
//   - {principal: alice, role: submitter, pools: ["/team-a/**"]}
//   - {group: ops, role: operator}
//
// Every mistake is an error naming the entry and the field.
func ParsePolicy(b []byte) (*Policy, error) {
	var grants []Grant
	if err := decodeOne(b, &grants); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	// "pools:" with nothing after it decodes as no pools at all, which is
	// a cluster-wide grant: a forgotten list must not widen a grant.
	nullPools, err := nullKeys(b, "pools")
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	for i := range grants {
		g := &grants[i]
		where := fmt.Sprintf("policy entry %d", i+1)
		switch {
		case g.Principal == "" && g.Group == "":
			return nil, fmt.Errorf("%s: principal or group is required", where)
		case g.Principal != "" && g.Group != "":
			return nil, fmt.Errorf("%s: give principal or group, not both", where)
		}
		r, err := ParseRole(g.Role)
		if err != nil {
			return nil, fmt.Errorf("%s: role: %w", where, err)
		}
		g.role = r
		for _, p := range g.Pools {
			if err := checkPattern(p); err != nil {
				return nil, fmt.Errorf("%s: pools: %w", where, err)
			}
		}
		if (i < len(nullPools) && nullPools[i]) || (g.Pools != nil && len(g.Pools) == 0) {
			return nil, fmt.Errorf("%s: pools: an empty list grants nothing; leave pools out for a cluster-wide grant", where)
		}
		if len(g.Pools) > 0 && (r == Admin || r == Agent) {
			return nil, fmt.Errorf("%s: role %s is cluster-wide only: leave pools out", where, r)
		}
	}
	return &Policy{grants: grants}, nil
}

// checkPattern says what is wrong with a pool pattern: a pool path
// ("/a/b"), optionally ending in "/*" (the pool's children) or "/**" (the
// pool and everything below it); "/**" is every pool.
func checkPattern(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q: a pattern is a pool path starting with /, like /team-a/**", p)
	}
	body := strings.TrimSuffix(strings.TrimSuffix(p, "/**"), "/*")
	if strings.Contains(body, "*") {
		return fmt.Errorf("%q: * may only end a pattern, as /* or /**", p)
	}
	if strings.Contains(p, "//") {
		return fmt.Errorf("%q: an empty segment (//) matches no pool", p)
	}
	return nil
}

// matchPool says whether pattern covers the pool path. The path is read
// as the servers read it: without its leading and trailing slashes,
// "team-a/x/" is /team-a/x.
func matchPool(pattern, pool string) bool {
	pool = "/" + strings.Trim(pool, "/")
	switch {
	case pattern == "/**":
		return true
	case strings.HasSuffix(pattern, "/**"):
		base := strings.TrimSuffix(pattern, "/**")
		return pool == base || strings.HasPrefix(pool, base+"/")
	case strings.HasSuffix(pattern, "/*"):
		base := strings.TrimSuffix(pattern, "/*")
		rest, ok := strings.CutPrefix(pool, base+"/")
		return ok && rest != "" && !strings.Contains(rest, "/")
	default:
		return "/"+strings.Trim(pattern, "/") == pool
	}
}

// Allows says whether id holds need on pool ("" for the cluster itself:
// hosts, partitions, the federation's clusters).
func (p *Policy) Allows(id Identity, need Role, pool string) bool {
	if r, ok := systemRoles[id.Principal]; ok && id.Method == MethodInProcess {
		return r.covers(need)
	}
	for _, g := range p.grants {
		if !g.role.covers(need) || !g.appliesTo(id) {
			continue
		}
		if len(g.Pools) == 0 {
			return true
		}
		if pool == "" {
			continue
		}
		for _, pat := range g.Pools {
			if matchPool(pat, pool) {
				return true
			}
		}
	}
	return false
}

func (g Grant) appliesTo(id Identity) bool {
	if g.Principal != "" {
		return g.Principal == id.Principal
	}
	return slices.Contains(id.Groups, g.Group)
}

// decodeOne decodes the one YAML document of b into v, refusing unknown
// fields and a second document (which would otherwise be ignored). An
// empty b leaves v as it is.
func decodeOne(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return errors.New("the file must hold one YAML document, a list")
	}
	return nil
}

// nullKeys says, for each entry of the YAML list in b, whether it gives
// key with no value.
func nullKeys(b []byte, key string) ([]bool, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.SequenceNode {
		return nil, nil
	}
	out := make([]bool, len(doc.Content[0].Content))
	for i, e := range doc.Content[0].Content {
		if e.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(e.Content); j += 2 {
			if e.Content[j].Value == key && e.Content[j+1].Tag == "!!null" {
				out[i] = true
			}
		}
	}
	return out, nil
}
