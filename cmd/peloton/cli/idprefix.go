package cli

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Unique id prefixes: wherever a command takes a job, federated job,
// federated service or update id, a unique prefix of one will do
// ("peloton job get a2f9"). One wrapper does it for every command, found by
// the argument names in the commands' Use lines, so a command added later
// with JOBID in its Use takes prefixes without code of its own.

// minIDPrefix is the shortest prefix looked up: shorter ones match too
// much to be worth a scan.
const minIDPrefix = 4

// maxPrefixMatches is how many matches end the scan: two already make the
// prefix ambiguous.
const maxPrefixMatches = 2

// idKind is a kind of id a command argument can hold: how to tell that an
// id exists, and how to page through the ids there are.
type idKind struct {
	noun string
	// exists fetches id exactly; a NotFound error means it does not exist.
	exists func(ctx context.Context, id string) error
	// pages calls each with every page of ids, in turn, until each says
	// stop or the pages end.
	pages func(ctx context.Context, each func(ids []string) (stop bool)) error
}

// resolveID is the id arg stands for: arg itself when it exists (or when
// looking it up fails for another reason than NotFound, left to the
// command to report), else the one id it is a prefix of. No match is the
// NotFound of the exact look-up; several are an error naming two.
//
// An arg shorter than minIDPrefix is left as it is, unlooked-up: the
// command then checks its flags before it asks for it, as it does for a
// whole id, and shortHint explains its NotFound.
func resolveID(ctx context.Context, k idKind, arg string) (string, error) {
	if looksWhole(arg) || len(arg) < minIDPrefix {
		return arg, nil
	}
	err := k.exists(ctx, arg)
	if status.Code(err) != codes.NotFound {
		return arg, nil
	}
	var matches []string
	perr := k.pages(ctx, func(ids []string) bool {
		for _, id := range ids {
			if strings.HasPrefix(id, arg) && !containsString(matches, id) {
				matches = append(matches, id)
			}
		}
		return len(matches) >= maxPrefixMatches
	})
	switch {
	case perr != nil:
		return "", perr
	case len(matches) == 0:
		return "", err
	case len(matches) > 1:
		return "", status.Errorf(codes.InvalidArgument,
			"ambiguous %s id prefix %q: it matches %s and %s (at least); give more characters", k.noun, arg, matches[0], matches[1])
	}
	return matches[0], nil
}

func containsString(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// looksWhole reports whether id has the form of a whole id (a UUID, as
// Peloton makes them), which is used as it is, with no look-up.
func looksWhole(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i, c := range id {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// idKindFor is the kind of id the argument named arg of cmd holds, or
// false when it is no id: JOBID is a cluster job's, but under "fed job" a
// federated job's; SERVICEID a federated service's; UPDATEID an update's.
func (a *app) idKindFor(cmd *cobra.Command, arg string) (idKind, bool) {
	fed := cmd.Parent() != nil && cmd.Parent().Parent() != nil && cmd.Parent().Parent().Name() == "fed"
	switch {
	case arg == "JOBID" && fed:
		return a.fedJobIDs(), true
	case arg == "JOBID":
		return a.jobIDs(), true
	case arg == "SERVICEID":
		return a.serviceIDs(), true
	case arg == "UPDATEID":
		return a.updateIDs(), true
	}
	return idKind{}, false
}

// idArgs is, by position, the argument names of cmd's Use line: the words
// after the command's name up to the first flag or optional part.
func idArgs(cmd *cobra.Command) []string {
	words := strings.Fields(cmd.Use)
	var names []string
	for _, w := range words[min(1, len(words)):] {
		if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "[") {
			break
		}
		names = append(names, strings.TrimSuffix(w, "..."))
	}
	return names
}

// resolveIDPrefixes wraps the run function of every command under cmd
// that takes an id argument so that it gets the whole id of a prefix.
func (a *app) resolveIDPrefixes(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		a.resolveIDPrefixes(sub)
	}
	if cmd.RunE == nil {
		return
	}
	type pos struct {
		at   int
		kind idKind
	}
	var ids []pos
	for i, name := range idArgs(cmd) {
		if k, ok := a.idKindFor(cmd, name); ok {
			ids = append(ids, pos{i, k})
		}
	}
	if len(ids) == 0 {
		return
	}
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		short := ""
		for _, p := range ids {
			if p.at >= len(args) || looksWhole(args[p.at]) {
				continue
			}
			if len(args[p.at]) < minIDPrefix {
				short = args[p.at]
			}
			id, err := resolveID(c.Context(), p.kind, args[p.at])
			if err != nil {
				return err
			}
			args[p.at] = id
		}
		return shortHint(run(c, args), short)
	}
}

// shortHint adds to the NotFound of an id given by fewer characters than
// a prefix needs that a prefix that short is not looked up.
func shortHint(err error, short string) error {
	st, ok := status.FromError(err)
	if short == "" || !ok || st.Code() != codes.NotFound || !strings.Contains(st.Message(), short) {
		return err
	}
	return status.Errorf(codes.NotFound, "%s (an id prefix must be at least %d characters long)", st.Message(), minIDPrefix)
}

// jobIDs is the kind of a cluster job's id: live jobs first, then the
// archive's (when the cluster keeps one).
func (a *app) jobIDs() idKind {
	return idKind{
		noun: "job",
		exists: func(ctx context.Context, id string) error {
			return a.withClient(func(c *client) error {
				_, err := call(ctx, c, c.Jobs.GetJob, &pelotonv1.GetJobRequest{JobId: id})
				return err
			})
		},
		pages: func(ctx context.Context, each func([]string) bool) error {
			return a.withClient(func(c *client) error {
				for _, archived := range []bool{false, true} {
					stop, err := pageIDs(func(token string) ([]string, string, error) {
						resp, err := call(ctx, c, c.Jobs.ListJobs, &pelotonv1.ListJobsRequest{PageToken: token, Archived: archived})
						ids := make([]string, 0, len(resp.GetJobs()))
						for _, j := range resp.GetJobs() {
							ids = append(ids, j.GetId())
						}
						return ids, resp.GetNextPageToken(), err
					}, each)
					if archived && status.Code(err) == codes.FailedPrecondition {
						return nil // the cluster keeps no archive
					}
					if err != nil || stop {
						return err
					}
				}
				return nil
			})
		},
	}
}

// pageIDs calls each with every page page returns until each says stop.
func pageIDs(page func(token string) ([]string, string, error), each func([]string) bool) (bool, error) {
	token := ""
	for {
		ids, next, err := page(token)
		if err != nil {
			return false, err
		}
		if each(ids) {
			return true, nil
		}
		if next == "" {
			return false, nil
		}
		token = next
	}
}

// fedJobIDs is the kind of a federated job's id: live jobs first, then
// the federation's archive.
func (a *app) fedJobIDs() idKind {
	return idKind{
		noun: "federated job",
		exists: func(ctx context.Context, id string) error {
			return a.withFederation(func(f *fedClient) error {
				_, err := call(ctx, f, f.Jobs.GetFederatedJob, &pelotonv1.GetFederatedJobRequest{JobId: id})
				return err
			})
		},
		pages: func(ctx context.Context, each func([]string) bool) error {
			return a.withFederation(func(f *fedClient) error {
				for _, archived := range []bool{false, true} {
					stop, err := pageIDs(func(token string) ([]string, string, error) {
						resp, err := call(ctx, f, f.Jobs.ListFederatedJobs, &pelotonv1.ListFederatedJobsRequest{PageToken: token, Archived: archived})
						ids := make([]string, 0, len(resp.GetJobs()))
						for _, j := range resp.GetJobs() {
							ids = append(ids, j.GetId())
						}
						return ids, resp.GetNextPageToken(), err
					}, each)
					if archived && status.Code(err) == codes.FailedPrecondition {
						return nil
					}
					if err != nil || stop {
						return err
					}
				}
				return nil
			})
		},
	}
}

// serviceIDs is the kind of a federated service's id (live services).
func (a *app) serviceIDs() idKind {
	return idKind{
		noun: "federated service",
		exists: func(ctx context.Context, id string) error {
			return a.withFederation(func(f *fedClient) error {
				_, err := call(ctx, f, f.Services.GetFederatedService, &pelotonv1.GetFederatedServiceRequest{ServiceId: id})
				return err
			})
		},
		pages: func(ctx context.Context, each func([]string) bool) error {
			return a.withFederation(func(f *fedClient) error {
				_, err := pageIDs(func(token string) ([]string, string, error) {
					resp, err := call(ctx, f, f.Services.ListFederatedServices, &pelotonv1.ListFederatedServicesRequest{PageToken: token})
					ids := make([]string, 0, len(resp.GetServices()))
					for _, s := range resp.GetServices() {
						ids = append(ids, s.GetId())
					}
					return ids, resp.GetNextPageToken(), err
				}, each)
				return err
			})
		},
	}
}

// updateIDs is the kind of an update's id (one list of every job's).
func (a *app) updateIDs() idKind {
	return idKind{
		noun: "update",
		exists: func(ctx context.Context, id string) error {
			return a.withClient(func(c *client) error {
				_, err := call(ctx, c, c.Updates.GetUpdate, &pelotonv1.GetUpdateRequest{UpdateId: id})
				return err
			})
		},
		pages: func(ctx context.Context, each func([]string) bool) error {
			return a.withClient(func(c *client) error {
				resp, err := call(ctx, c, c.Updates.ListUpdates, &pelotonv1.ListUpdatesRequest{})
				if err != nil {
					return err
				}
				ids := make([]string, 0, len(resp.GetUpdates()))
				for _, u := range resp.GetUpdates() {
					ids = append(ids, u.GetId())
				}
				each(ids)
				return nil
			})
		},
	}
}
