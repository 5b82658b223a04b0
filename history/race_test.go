//go:build race

package history

// raceEnabled: the race detector makes protobuf's marshalling some ten
// times slower, so the 100,000-instance tests compare a sample of the
// instances in full under it (and every instance's main fields).
const raceEnabled = true
