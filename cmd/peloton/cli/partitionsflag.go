package cli

import (
	"slices"
	"strconv"
	"strings"

	"github.com/peloton-sched/peloton/hostmgr/local"
)

// hostPartitions is the partition of each local virtual host, in host
// order, from --partitions ("batch=2,stateless=2": names and counts, in
// that order), or by default, from two hosts on, the advisor's batch
// partition for the first half (rounded up) and its stateless partition
// for the rest, so that the advisor has hosts to move. nil keeps every
// host in the local backend's one partition. hosts is --hosts, and
// hostsSet whether it was given: without it the counts say how many hosts
// there are; with it they must add up to it.
func hostPartitions(spec string, hosts int, hostsSet bool, backend, batch, stateless string) ([]string, int, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		if backend != "local" || hosts < 2 {
			return nil, hosts, nil
		}
		out := make([]string, hosts)
		for i := range out {
			out[i] = batch
			if i >= hosts-hosts/2 {
				out[i] = stateless
			}
		}
		return out, hosts, nil
	}
	if backend != "local" {
		return nil, 0, usageErrorf("invalid --partitions: only the local backend's virtual hosts take partitions (sim: --host-labels peloton.io/partition=NAME)")
	}
	var out, seen []string
	for _, entry := range strings.Split(spec, ",") {
		name, count, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok {
			return nil, 0, usageErrorf("invalid --partitions %q: want NAME=COUNT entries, comma-separated, e.g. batch=2,stateless=2", spec)
		}
		if err := local.ValidatePartition(name); err != nil {
			return nil, 0, usageErrorf("invalid --partitions: %v", err)
		}
		if slices.Contains(seen, name) {
			return nil, 0, usageErrorf("invalid --partitions: partition %s is named twice", name)
		}
		seen = append(seen, name)
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return nil, 0, usageErrorf("invalid --partitions: %s=%s: the count must be a whole number from 1 up", name, count)
		}
		for range n {
			out = append(out, name)
		}
	}
	if hostsSet && len(out) != hosts {
		return nil, 0, usageErrorf("invalid --partitions %s: %d hosts in all, but --hosts is %d; the counts must add up to --hosts (or leave --hosts out)", spec, len(out), hosts)
	}
	if len(out) > 1000 {
		return nil, 0, usageErrorf("invalid --partitions: %d hosts in all, at most 1000", len(out))
	}
	return out, len(out), nil
}
