package mesos

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/encoding"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/codecs"

	"github.com/peloton-sched/peloton/internal/store"
)

// BackendName is the backend's --backend value.
const BackendName = "mesos"

// Content types of --mesos-content-type: the two encodings the v1
// scheduler API speaks.
const (
	ContentTypeProtobuf = "protobuf"
	ContentTypeJSON     = "json"
)

// Defaults of Config's zero values.
const (
	DefaultFrameworkName      = "peloton"
	DefaultRole               = "*"
	DefaultFailoverTimeout    = 7 * 24 * time.Hour
	DefaultPartitionAttribute = "peloton.io/partition"
	DefaultPartition          = "default"
	DefaultStartTimeout       = 30 * time.Second
	DefaultOfferHold          = 2 * time.Second
	DefaultDeclineFilter      = 5 * time.Second
	DefaultIdleSuppress       = 30 * time.Second
	DefaultHeartbeatMisses    = 3
	DefaultRecordRetention    = 24 * time.Hour
	DefaultGangWindow         = 200 * time.Millisecond
)

// Config configures the Mesos backend.
type Config struct {
	// Master is the leading master's base URL, http://HOST:5050; the
	// scheduler API is at /api/v1/scheduler under it.
	Master string
	// ContentType is "protobuf" (the default) or "json".
	ContentType string
	// FrameworkName, Role, Principal go into the FrameworkInfo.
	FrameworkName string
	Role          string
	Principal     string
	// User is the FrameworkInfo's user tasks run as (default: empty, which
	// Mesos takes as the agent's user).
	User string
	// FailoverTimeout is how long the master keeps the framework's tasks
	// while no scheduler is subscribed (default a week).
	FailoverTimeout time.Duration
	// Store keeps the framework ID and a record of every run, so that a
	// restarted or standby stack subscribes as the same framework and knows
	// its runs. Required.
	Store store.Store
	// PartitionAttribute is the agent attribute whose text value is the
	// host's partition (default peloton.io/partition); agents without it
	// are in DefaultPartition.
	PartitionAttribute string
	// StartTimeout bounds Start's wait for subscription, reconciliation
	// and the first offers (default 30s). Past it Start returns without
	// them, and without an error: the backend keeps subscribing.
	StartTimeout time.Duration
	// OfferHold is how long an offer no launch needs is kept before it is
	// declined with DeclineFilter (defaults 2s and 5s).
	OfferHold     time.Duration
	DeclineFilter time.Duration
	// IdleSuppress: with no launch waiting for this long and every offer
	// declined, offers are suppressed until a launch needs one (default 30s).
	IdleSuppress time.Duration
	// HeartbeatMisses is k: with no event for k times the heartbeat
	// interval the master advertised, the stream is dropped and the
	// backend subscribes again (default 3).
	HeartbeatMisses int
	// MinBackoff and MaxBackoff bound the wait between subscription
	// attempts, which doubles from one to the other while attempts fail
	// and never stops (defaults 100ms and 10s).
	MinBackoff, MaxBackoff time.Duration
	// RecordRetention is how long the record of an ended run is kept
	// (default 24h); Status answers for ended runs within it.
	RecordRetention time.Duration
	// GangWindow is how long the first member of a gang launched on an
	// agent waits for the others, to go with them in one LAUNCH_GROUP
	// (default 200ms; see enqueue).
	GangWindow time.Duration
	Logger     *slog.Logger
}

// ParseMaster checks a --mesos-master value: an http or https URL with a
// host and port and no path beyond "/". It returns the scheduler API's URL.
func ParseMaster(master string) (string, error) {
	if strings.TrimSpace(master) == "" {
		return "", fmt.Errorf("--mesos-master: required with --backend mesos (e.g. http://HOST:5050)")
	}
	u, err := url.Parse(master)
	if err != nil {
		return "", fmt.Errorf("--mesos-master %q: %v", master, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("--mesos-master %q: want an http:// or https:// URL, e.g. http://HOST:5050", master)
	}
	if u.Hostname() == "" || u.Port() == "" {
		return "", fmt.Errorf("--mesos-master %q: want a host and a port, e.g. http://HOST:5050", master)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("--mesos-master %q: want only scheme, host and port, e.g. http://HOST:5050", master)
	}
	return u.Scheme + "://" + u.Host + "/api/v1/scheduler", nil
}

// Codec returns the mesos-go codec of a --mesos-content-type value.
func Codec(contentType string) (encoding.Codec, error) {
	switch contentType {
	case "", ContentTypeProtobuf:
		return codecs.ByMediaType[codecs.MediaTypeProtobuf], nil
	case ContentTypeJSON:
		return codecs.ByMediaType[codecs.MediaTypeJSON], nil
	}
	return encoding.Codec{}, fmt.Errorf("--mesos-content-type %q: want %q or %q", contentType, ContentTypeProtobuf, ContentTypeJSON)
}

// Check checks the values that come from flags, naming the flag of each
// error; a zero Role is the default.
func (c Config) Check() error {
	if _, err := ParseMaster(c.Master); err != nil {
		return err
	}
	if _, err := Codec(c.ContentType); err != nil {
		return err
	}
	if c.FailoverTimeout < 0 {
		return fmt.Errorf("--mesos-failover-timeout %s: must not be negative", c.FailoverTimeout)
	}
	if r := c.Role; r != "" && (strings.ContainsAny(r, "/ \t\n") || r == "." || r == ".." || strings.HasPrefix(r, "-")) {
		return fmt.Errorf("--mesos-role %q: not a valid Mesos role name", r)
	}
	return nil
}

// withDefaults checks c and fills its zero values.
func (c Config) withDefaults() (Config, error) {
	if err := c.Check(); err != nil {
		return c, err
	}
	if c.Store == nil {
		return c, fmt.Errorf("mesos: Config.Store is required (it keeps the framework ID)")
	}
	if c.Role == "" {
		c.Role = DefaultRole
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.FrameworkName == "" {
		c.FrameworkName = DefaultFrameworkName
	}
	if c.FailoverTimeout == 0 {
		c.FailoverTimeout = DefaultFailoverTimeout
	}
	if c.PartitionAttribute == "" {
		c.PartitionAttribute = DefaultPartitionAttribute
	}
	def(&c.StartTimeout, DefaultStartTimeout)
	def(&c.OfferHold, DefaultOfferHold)
	def(&c.DeclineFilter, DefaultDeclineFilter)
	def(&c.IdleSuppress, DefaultIdleSuppress)
	def(&c.MinBackoff, 100*time.Millisecond)
	def(&c.MaxBackoff, 10*time.Second)
	def(&c.RecordRetention, DefaultRecordRetention)
	def(&c.GangWindow, DefaultGangWindow)
	if c.HeartbeatMisses <= 0 {
		c.HeartbeatMisses = DefaultHeartbeatMisses
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
