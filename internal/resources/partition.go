package resources

// ByPartition is an amount per host partition: hostmgr reports the capacity
// of its hosts in service this way, and resmgr admits work that targets a
// partition against that partition's share only. Hosts without a partition
// are under "".
type ByPartition map[string]Resources

// Total is the sum over every partition.
func (b ByPartition) Total() Resources {
	var t Resources
	for _, r := range b {
		t = t.Add(r)
	}
	return t
}

// Equal reports whether b and o hold the same amounts; a partition with a
// zero amount equals an absent one.
func (b ByPartition) Equal(o ByPartition) bool {
	for k, r := range b {
		if o[k] != r {
			return false
		}
	}
	for k, r := range o {
		if b[k] != r {
			return false
		}
	}
	return true
}
