package mesos

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/apierrors"

	"github.com/peloton-sched/peloton/hostmgr"
)

// Whether the master is reachable is decided by the subscription loop
// alone: a SUBSCRIBED event makes it reachable, a subscription attempt
// that fails (no connection, an HTTP error, an answer that is not a
// master's) makes it unreachable. A stream that ends after SUBSCRIBED does
// not: the next attempt, a backoff later, says whether the master is gone.

// Substrate implements hostmgr.SubstrateReporter.
func (b *Backend) Substrate() hostmgr.SubstrateStatus { return *b.sub.Load() }

// observe records how a subscription attempt ended (err nil: SUBSCRIBED)
// and logs news only: the master went away or came back, or fails in
// another way than before. Only the subscription loop calls it, so the
// status has one writer.
func (b *Backend) observe(err error) {
	prev := b.Substrate()
	next, news := prev.Observe(err, time.Now())
	b.sub.Store(&next)
	switch {
	case err == nil && news && prev.Reason != hostmgr.ReasonNotConnected:
		b.log.Info("mesos: the master is reachable", "master", b.cfg.Master, "after", time.Since(prev.Since).Round(time.Second))
	case err == nil:
	case prev.WentAway(next):
		b.log.Warn("mesos: the master is not reachable; the stack serves without it and subscribes again until it answers",
			"master", b.cfg.Master, "reason", next.Reason)
		b.unreachableOnce.Do(func() { close(b.unreachable) })
	case news:
		b.log.Info("mesos: the master is still not reachable, now for another reason", "master", b.cfg.Master, "reason", next.Reason)
	default:
		b.log.Debug("mesos: the master is still not reachable", "master", b.cfg.Master, "reason", next.Reason)
	}
}

// notAMaster says that an answer mesos-go could not take (a 200 with a
// web page, say) is not a master's.
func notAMaster(err error) error {
	var pe httpcli.ProtocolError
	if errors.As(err, &pe) {
		return fmt.Errorf("not a Mesos master's answer: %w", err)
	}
	return err
}

// answerError is an HTTP error answer of whatever serves --mesos-master,
// cut to its status and the first line of its body (hostmgr.HTTPReason):
// what mesos-go makes of it carries up to 4 KiB of the body, a whole web
// page when the URL is not a master's. It wraps mesos-go's error, so that
// what tests for that error (errors.As, SubscriptionLoss) still works.
type answerError struct {
	reason string
	api    *apierrors.Error
}

func (e *answerError) Error() string { return e.reason }

func (e *answerError) Unwrap() error { return e.api }

// SubscriptionLoss is what httpsched asks of an error to learn that the
// master dropped the subscription.
func (e *answerError) SubscriptionLoss() bool { return e.api.SubscriptionLoss() }

// Temporary is mesos-go's word on whether the error clears by itself.
func (e *answerError) Temporary() bool { return e.api.Temporary() }

// mapAnswer is the HTTP client's error mapper (httpcli.ErrorMapper): an
// answer of 300 or more is an error. A redirect stays mesos-go's own
// error, which httpsched needs to follow it to the leading master.
func mapAnswer(res *http.Response) error {
	code := apierrors.Code(res.StatusCode)
	if !code.IsError() {
		return nil
	}
	var body []byte
	if res.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(res.Body, apierrors.MaxSizeDetails))
		_ = res.Body.Close()
	}
	detail := ""
	if strings.TrimSpace(string(body)) != "" {
		detail = hostmgr.ShortReason(string(body))
	}
	api, _ := code.Error(detail).(*apierrors.Error)
	if code == apierrors.CodeNotLeader {
		return api
	}
	return &answerError{reason: hostmgr.HTTPReason(res.StatusCode, body), api: api}
}
