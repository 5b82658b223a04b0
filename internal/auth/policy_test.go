package auth

import (
	"strings"
	"testing"
)

func TestMatchPool(t *testing.T) {
	for _, tc := range []struct {
		pattern, pool string
		want          bool
	}{
		{"/**", "/", true},
		{"/**", "/a", true},
		{"/**", "/a/b/c", true},

		{"/a/**", "/a", true},
		{"/a/**", "/a/b", true},
		{"/a/**", "/a/b/c", true},
		{"/a/**", "/ab", false},
		{"/a/**", "/b/a", false},
		{"/a/**", "/", false},
		{"/a/b/**", "/a", false},

		{"/a/*", "/a/b", true},
		{"/a/*", "/a", false},
		{"/a/*", "/a/b/c", false},
		{"/a/*", "/ab", false},
		{"/*", "/a", true},
		{"/*", "/a/b", false},

		{"/a", "/a", true},
		{"/a", "/a/b", false},
		{"/a", "/ab", false},
		{"/a/b", "/a", false},
		{"/", "/", true},
		{"/", "/a", false},

		// Paths as the servers read them: leading and trailing slashes
		// do not matter.
		{"/a", "/a/", true},
		{"/a", "a", true},
		{"/a/**", "a/b", true},
		{"/a/*", "a/b/", true},
		{"/b/**", "a/b", false},
	} {
		if got := matchPool(tc.pattern, tc.pool); got != tc.want {
			t.Errorf("matchPool(%q, %q) = %v, want %v", tc.pattern, tc.pool, got, tc.want)
		}
	}
}

func TestRoleCovers(t *testing.T) {
	roles := []Role{Viewer, Submitter, Operator, Admin, Agent}
	want := map[Role][]Role{
		Viewer:    {Viewer},
		Submitter: {Viewer, Submitter},
		Operator:  {Viewer, Submitter, Operator},
		Admin:     {Viewer, Submitter, Operator, Admin, Agent},
		Agent:     {Agent},
	}
	for _, have := range roles {
		for _, need := range roles {
			w := false
			for _, r := range want[have] {
				w = w || r == need
			}
			if got := have.covers(need); got != w {
				t.Errorf("%s covers %s = %v, want %v", have, need, got, w)
			}
		}
	}
	for _, r := range roles {
		if p, err := ParseRole(r.String()); err != nil || p != r {
			t.Errorf("ParseRole(%q) = %v, %v", r.String(), p, err)
		}
	}
	if _, err := ParseRole("none"); err == nil {
		t.Error("ParseRole(none): no error")
	}
}

const testPolicy = `
- {principal: alice, role: submitter, pools: ["/a/**"]}
- {principal: bob, role: viewer, pools: ["/a/*", "/c"]}
- {group: ops, role: operator}
- {group: readers, role: viewer, pools: ["/**"]}
- {principal: root, role: admin}
- {principal: agent-1, role: agent}
- {principal: system:advisor, role: viewer}
`

func TestAllows(t *testing.T) {
	p, err := ParsePolicy([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	tok := func(principal string, groups ...string) Identity {
		return Identity{Principal: principal, Groups: groups, Method: MethodToken}
	}
	cert := func(principal string, groups ...string) Identity {
		return Identity{Principal: principal, Groups: groups, Method: MethodCertificate}
	}
	inProc := func(principal string) Identity { return Identity{Principal: principal, Method: MethodInProcess} }
	for _, tc := range []struct {
		name string
		id   Identity
		need Role
		pool string
		want bool
	}{
		{"pool grant, pool below", tok("alice"), Submitter, "/a/x", true},
		{"pool grant, the pool itself", tok("alice"), Submitter, "/a", true},
		{"pool grant, deep below", tok("alice"), Submitter, "/a/x/y/z", true},
		{"pool grant covers lower roles", tok("alice"), Viewer, "/a/x", true},
		{"pool grant, not a higher role", tok("alice"), Operator, "/a/x", false},
		{"pool grant, sibling with the same prefix", tok("alice"), Viewer, "/ab", false},
		{"pool grant, other pool", tok("alice"), Viewer, "/b", false},
		{"pool grant is not cluster-wide", tok("alice"), Viewer, "", false},
		{"the same principal by certificate", cert("alice"), Submitter, "/a/x", true},

		{"children pattern, a child", tok("bob"), Viewer, "/a/x", true},
		{"children pattern, a grandchild", tok("bob"), Viewer, "/a/x/y", false},
		{"children pattern, the parent", tok("bob"), Viewer, "/a", false},
		{"exact pattern, second of the list", tok("bob"), Viewer, "/c", true},
		{"exact pattern, below", tok("bob"), Viewer, "/c/d", false},

		{"group grant, cluster-wide", tok("dave", "ops"), Operator, "", true},
		{"group grant, on any pool", tok("dave", "x", "ops"), Operator, "/z", true},
		{"group grant, not admin", tok("dave", "ops"), Admin, "", false},
		{"group grant, not agent", tok("dave", "ops"), Agent, "", false},
		{"group grant by certificate", cert("erin", "ops"), Submitter, "/q", true},
		{"no such group", tok("dave", "op"), Viewer, "/z", false},
		{"group name is not a principal", tok("ops"), Viewer, "/z", false},
		{"principal name is not a group", tok("frank", "alice"), Viewer, "/a", false},

		{"/** grant on every pool", tok("gina", "readers"), Viewer, "/any/pool", true},
		{"/** grant on the root pool", tok("gina", "readers"), Viewer, "/", true},
		{"/** grant is not cluster-wide", tok("gina", "readers"), Viewer, "", false},
		{"/** viewer cannot submit", tok("gina", "readers"), Submitter, "/x", false},

		{"admin, cluster", tok("root"), Admin, "", true},
		{"admin, pool", tok("root"), Submitter, "/x", true},
		{"admin, agent right", tok("root"), Agent, "", true},

		{"agent, its right", tok("agent-1"), Agent, "", true},
		{"agent stands apart: no read", tok("agent-1"), Viewer, "", false},
		{"agent stands apart: no read of a pool", tok("agent-1"), Viewer, "/a", false},

		{"nobody", tok("nobody"), Viewer, "/a", false},

		{"advisor in-process: operator", inProc(PrincipalAdvisor), Operator, "", true},
		{"advisor in-process: not admin", inProc(PrincipalAdvisor), Admin, "", false},
		{"advisor in-process: not agent", inProc(PrincipalAdvisor), Agent, "", false},
		{"host agent in-process: agent", inProc(PrincipalHostAgent), Agent, "", true},
		{"host agent in-process: no read", inProc(PrincipalHostAgent), Viewer, "", false},
		// System principals hold their roles only in-process: a token or
		// certificate with that name gets only what the policy grants it.
		{"advisor by certificate: not operator", cert(PrincipalAdvisor), Operator, "", false},
		{"advisor by certificate: its grant", cert(PrincipalAdvisor), Viewer, "", true},
		{"host agent by certificate", cert(PrincipalHostAgent), Agent, "", false},
		{"host agent by token", tok(PrincipalHostAgent), Agent, "", false},
	} {
		if got := p.Allows(tc.id, tc.need, tc.pool); got != tc.want {
			t.Errorf("%s: Allows(%+v, %s, %q) = %v, want %v", tc.name, tc.id, tc.need, tc.pool, got, tc.want)
		}
	}

	empty, err := ParsePolicy(nil)
	if err != nil {
		t.Fatalf("an empty policy: %v", err)
	}
	if empty.Allows(tok("root"), Viewer, "/a") {
		t.Error("an empty policy allowed something")
	}
	if !empty.Allows(inProc(PrincipalAdvisor), Operator, "") {
		t.Error("an empty policy refused the advisor in-process")
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   []string
	}{
		{"- {principal: a, role: viewer}\n- {role: viewer}", []string{"policy entry 2:", "principal or group is required"}},
		{"- {principal: a, group: g, role: viewer}", []string{"policy entry 1:", "principal or group, not both"}},
		{"- {principal: a, role: boss}", []string{"policy entry 1: role:", `unknown role "boss"`}},
		{"- {principal: a}", []string{"policy entry 1: role:", `unknown role ""`}},
		{"- {principal: a, role: viewer, pools: [team]}", []string{"policy entry 1: pools:", `"team"`, "starting with /"}},
		{"- {principal: a, role: viewer, pools: [/a/*/b]}", []string{"policy entry 1: pools:", "* may only end a pattern"}},
		{"- {principal: a, role: viewer, pools: [/a*]}", []string{"policy entry 1: pools:", "* may only end a pattern"}},
		{"- {principal: a, role: viewer, pools: [/a//b]}", []string{"policy entry 1: pools:", "empty segment"}},
		{"- {principal: a, role: viewer, pools: []}", []string{"policy entry 1: pools:", "an empty list grants nothing"}},
		// A list left empty must not become a cluster-wide grant.
		{"- principal: a\n  role: operator\n  pools:\n", []string{"policy entry 1: pools:", "an empty list grants nothing"}},
		{"- {principal: a, role: viewer}\n- {principal: b, role: operator, pools: ~}", []string{"policy entry 2: pools:"}},
		{"- {principal: a, role: admin, pools: [/a]}", []string{"policy entry 1:", "admin is cluster-wide only"}},
		{"- {principal: a, role: agent, pools: [/a]}", []string{"policy entry 1:", "agent is cluster-wide only"}},
		{"- {principal: a, role: viewer, pool: /a}", []string{"line 1", "field pool not found"}},
		{"principal: a\nrole: viewer\n", []string{"policy:", "cannot unmarshal"}},
		{"- {principal: a, role: viewer}\n---\n- {principal: b, role: admin}\n", []string{"policy:", "one YAML document"}},
		{"- {principal: a, role: [viewer]}", []string{"policy:", "line 1"}},
	} {
		_, err := ParsePolicy([]byte(tc.policy))
		if err == nil {
			t.Errorf("ParsePolicy(%q): no error, want one saying %q", tc.policy, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParsePolicy(%q): %q does not say %q", tc.policy, err, w)
			}
		}
	}
	// Comments and an empty file are fine.
	for _, ok := range []string{"", "# nobody yet\n", "[]", "- {principal: a, role: viewer, pools: [/a, /b/*, /c/**, /**, /]}"} {
		if _, err := ParsePolicy([]byte(ok)); err != nil {
			t.Errorf("ParsePolicy(%q): %v", ok, err)
		}
	}
}
