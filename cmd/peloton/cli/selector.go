package cli

import (
	"strings"

	"github.com/spf13/cobra"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Label selectors (-l, --selector) on the lists of things that carry
// labels: jobs, federated jobs and services (their job's labels), hosts and
// clusters. A selector is terms joined by commas, every one of which must
// hold: key=value (also key==value), key!=value (true too when the key is
// absent), key (the key is present) and !key (it is absent).

// labelTerm is one term of a selector.
type labelTerm struct {
	key, value string
	op         string // "=", "!=", "exists" or "!exists"
}

// labelSelector is a parsed selector; the zero one selects everything.
type labelSelector []labelTerm

// selectorFlag registers -l/--selector on a list command; what says what
// carries the labels, for its help.
func selectorFlag(cmd *cobra.Command, sel *string, what string) {
	cmd.Flags().StringVarP(sel, "selector", "l", "",
		"only "+what+" whose labels match: key=value, key!=value, key (has it) or !key, comma-separated, all must hold")
}

// parseSelector reads -l's value, naming the first malformed term.
func parseSelector(s string) (labelSelector, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var sel labelSelector
	for _, raw := range strings.Split(s, ",") {
		t, ok := parseTerm(strings.TrimSpace(raw))
		if !ok {
			return nil, usageErrorf("invalid --selector (-l) %q: term %q is not key=value, key!=value, key or !key", s, raw)
		}
		sel = append(sel, t)
	}
	return sel, nil
}

func parseTerm(s string) (labelTerm, bool) {
	var t labelTerm
	switch {
	case strings.Contains(s, "!="):
		k, v, _ := strings.Cut(s, "!=")
		t = labelTerm{key: k, value: v, op: "!="}
	case strings.Contains(s, "=="):
		k, v, _ := strings.Cut(s, "==")
		t = labelTerm{key: k, value: v, op: "="}
	case strings.Contains(s, "="):
		k, v, _ := strings.Cut(s, "=")
		t = labelTerm{key: k, value: v, op: "="}
	case strings.HasPrefix(s, "!"):
		t = labelTerm{key: s[1:], op: "!exists"}
	default:
		t = labelTerm{key: s, op: "exists"}
	}
	t.key = strings.TrimSpace(t.key)
	t.value = strings.TrimSpace(t.value)
	if t.key == "" || strings.ContainsAny(t.key, "=!, ") || strings.ContainsAny(t.value, "=!") {
		return t, false
	}
	return t, true
}

// matches reports whether labels satisfy every term.
func (sel labelSelector) matches(labels map[string]string) bool {
	for _, t := range sel {
		v, ok := labels[t.key]
		switch t.op {
		case "=":
			if !ok || v != t.value {
				return false
			}
		case "!=":
			if ok && v == t.value {
				return false
			}
		case "exists":
			if !ok {
				return false
			}
		case "!exists":
			if ok {
				return false
			}
		}
	}
	return true
}

// equalities are the key=value terms, which a server that filters by
// exact labels can apply itself.
func (sel labelSelector) equalities() map[string]string {
	var out map[string]string
	for _, t := range sel {
		if t.op == "=" {
			if out == nil {
				out = map[string]string{}
			}
			out[t.key] = t.value
		}
	}
	return out
}

// filterLabeled keeps the items whose labels (labelsOf) sel matches.
func filterLabeled[T any](sel labelSelector, items []T, labelsOf func(T) map[string]string) []T {
	if len(sel) == 0 {
		return items
	}
	out := items[:0:0]
	for _, it := range items {
		if sel.matches(labelsOf(it)) {
			out = append(out, it)
		}
	}
	return out
}

// The labels of each kind of item a list can select by.
func jobLabels(j *pelotonv1.Job) map[string]string { return j.GetSpec().GetLabels() }
func fedJobLabels(j *pelotonv1.FederatedJob) map[string]string {
	return j.GetSpec().GetJob().GetLabels()
}
func fedServiceLabels(s *pelotonv1.FederatedService) map[string]string {
	return s.GetSpec().GetJob().GetLabels()
}
func hostLabels(h *pelotonv1.Host) map[string]string       { return h.GetLabels() }
func clusterLabels(c *pelotonv1.Cluster) map[string]string { return c.GetLabels() }
