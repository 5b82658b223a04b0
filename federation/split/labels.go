package split

import (
	"regexp"
	"sort"
	"strings"

	"github.com/peloton-sched/peloton/internal/apierr"
)

// The label language of clusters lives here because a selector is what a
// split reads to choose clusters; the federation checks a cluster's labels
// with the same rules when it registers one.

var (
	labelKeyRE   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_./]{0,61}[A-Za-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
)

// ValidateLabels checks cluster labels (and selectors): Kubernetes-style
// keys and values, at most 64 pairs. field names the map in errors.
func ValidateLabels(labels map[string]string, field string) error {
	if len(labels) > 64 {
		return apierr.Invalid(field, "at most 64 labels, got %d", len(labels))
	}
	for _, k := range sortedKeys(labels) {
		if !labelKeyRE.MatchString(k) {
			return apierr.Invalid(field, "key %q must be 1 to 63 letters, digits, '-', '_', '.' or '/', starting and ending with a letter or digit", k)
		}
		if v := labels[k]; !labelValueRE.MatchString(v) {
			return apierr.Invalid(field+"."+k, "value %q must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", v)
		}
	}
	return nil
}

// Matches reports whether labels hold every pair of selector; an empty
// selector matches every cluster.
func Matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// FormatLabels writes labels as users see them in errors: {k=v,...}, keys
// sorted.
func FormatLabels(m map[string]string) string {
	keys := sortedKeys(m)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
