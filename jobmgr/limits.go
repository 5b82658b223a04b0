package jobmgr

import (
	"fmt"
	"sort"
	"unicode"
	"unicode/utf8"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// Sizes a job spec may have. They keep every answer that carries a spec
// (GetJob, the CLI's -o json) well under gRPC's default 4 MiB message
// limit, so that one job cannot make reading fail for everyone. They are
// listed in docs/api.md.
const (
	// MaxSpecBytes bounds a whole JobSpec, encoded. A 100,000-instance job
	// with an override on every tenth instance is about 0.6 MB.
	MaxSpecBytes = 2 << 20
	// MaxDescriptionBytes bounds spec.description.
	MaxDescriptionBytes = 64 << 10
	// MaxLabels, MaxLabelKeyBytes and MaxLabelValueBytes bound spec.labels.
	MaxLabels          = 64
	MaxLabelKeyBytes   = 253
	MaxLabelValueBytes = 1024
	// MaxCommandBytes bounds a task's command: its arguments together.
	MaxCommandBytes = 128 << 10
	// MaxEnvBytes bounds a task's environment: names and values together.
	MaxEnvBytes = 128 << 10
	// MaxImageBytes bounds a task's image reference.
	MaxImageBytes = 1024
)

// checkName refuses what cannot be shown safely: invalid UTF-8, control
// characters and other runes that do not print (a terminal would act on
// them when the CLI prints the name).
func checkName(field, s string) error {
	if !utf8.ValidString(s) {
		return apierr.Invalid(field, "must be valid UTF-8")
	}
	for i, r := range s {
		if !unicode.IsPrint(r) {
			return apierr.Invalid(field, "must not contain control or other non-printing characters (%U at byte %d)", r, i)
		}
	}
	return nil
}

// checkJobSizes checks the spec-wide limits: name, description, labels,
// and the encoded size.
func checkJobSizes(s *pelotonv1.JobSpec) error {
	if err := checkName("spec.name", s.Name); err != nil {
		return err
	}
	if n := len(s.Description); n > MaxDescriptionBytes {
		return apierr.Invalid("spec.description", "at most %d bytes, got %d", MaxDescriptionBytes, n)
	}
	if n := len(s.Labels); n > MaxLabels {
		return apierr.Invalid("spec.labels", "at most %d labels, got %d", MaxLabels, n)
	}
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field := fmt.Sprintf("spec.labels[%q]", k)
		switch {
		case k == "":
			return apierr.Invalid("spec.labels", "label keys must not be empty")
		case len(k) > MaxLabelKeyBytes:
			return apierr.Invalid(field, "the key is at most %d bytes, got %d", MaxLabelKeyBytes, len(k))
		case len(s.Labels[k]) > MaxLabelValueBytes:
			return apierr.Invalid(field, "the value is at most %d bytes, got %d", MaxLabelValueBytes, len(s.Labels[k]))
		}
		if err := checkName(field, k); err != nil {
			return err
		}
	}
	if n := proto.Size(s); n > MaxSpecBytes {
		return apierr.Invalid("spec", "at most %d bytes encoded, got %d; per-instance overrides are the usual cause", MaxSpecBytes, n)
	}
	return nil
}

// checkTaskSizes checks one task spec's command, environment and image.
func checkTaskSizes(t *pelotonv1.TaskSpec, field string) error {
	n := 0
	for _, a := range t.Command {
		n += len(a)
	}
	if n > MaxCommandBytes {
		return apierr.Invalid(field+".command", "at most %d bytes in all, got %d", MaxCommandBytes, n)
	}
	n = 0
	for k, v := range t.Env {
		n += len(k) + len(v)
	}
	if n > MaxEnvBytes {
		return apierr.Invalid(field+".env", "at most %d bytes of names and values in all, got %d", MaxEnvBytes, n)
	}
	if len(t.Image) > MaxImageBytes {
		return apierr.Invalid(field+".image", "at most %d bytes, got %d", MaxImageBytes, len(t.Image))
	}
	return nil
}
