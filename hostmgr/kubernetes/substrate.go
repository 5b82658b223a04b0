package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/peloton-sched/peloton/hostmgr"
)

// The apiserver is reachable when it answers the lists the informers make
// (a node, with the node selector, and a pod: address, credentials and
// rights at once) and the informers have listed the cluster once, so that
// the backend knows the nodes and the runs' pods. The apiserver watcher
// (watchAPIServer) asks every ProbeEvery while it answers, and with
// backoff from minProbeBackoff doubling to MaxProbeBackoff while it does
// not; a watch that fails makes it ask at once. The informers retry their
// lists and watches by themselves, with client-go's own backoff.

// minProbeBackoff is the first wait before asking an apiserver that did
// not answer again.
const minProbeBackoff = 200 * time.Millisecond

// errNotListed is the reason of an apiserver that answers while the
// informers have not listed the cluster yet.
var errNotListed = errors.New("the apiserver answers; nodes and pods are not listed yet")

// Substrate implements hostmgr.SubstrateReporter.
func (b *Backend) Substrate() hostmgr.SubstrateStatus { return *b.sub.Load() }

// probe asks the apiserver once for what the informers need.
func (b *Backend) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	_, err := b.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: b.cfg.NodeSelector, Limit: 1})
	if err == nil {
		_, err = b.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
	}
	return err
}

// fromAPIServer reports whether err is the apiserver's own answer (a
// Status: forbidden, say), not a connection's failure or the answer of
// something else at its address.
func fromAPIServer(err error) bool {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Code == 0 {
		return false
	}
	if d := se.ErrStatus.Details; d != nil {
		for _, c := range d.Causes {
			if c.Type == metav1.CauseTypeUnexpectedServerResponse {
				return false
			}
		}
	}
	return true
}

// synced reports whether both informers have listed the cluster once.
func (b *Backend) synced() bool { return b.nodeInf.HasSynced() && b.podInf.HasSynced() }

// observe records how an attempt to reach the apiserver ended and logs news
// only: it went away (the one warning of an outage) or came back, or fails
// in another way than before.
// Start, then the apiserver watcher alone, call it: the status has one
// writer at a time.
func (b *Backend) observe(err error) {
	prev := b.Substrate()
	next, news := prev.Observe(err, time.Now())
	b.sub.Store(&next)
	switch {
	case err == nil && news && prev.Reason != hostmgr.ReasonNotConnected:
		b.log.Info("the apiserver is reachable", "apiserver", b.host, "after", time.Since(prev.Since).Round(time.Second))
	case err == nil:
	case prev.WentAway(next):
		b.log.Warn("the apiserver is not reachable; the stack serves without it and asks again until it answers",
			"apiserver", b.host, "reason", next.Reason)
	case news:
		// Within an outage: e.g. it answers again but is not listed yet.
		b.log.Info("the apiserver is still not reachable, now for another reason", "apiserver", b.host, "reason", next.Reason)
	default:
		b.log.Debug("the apiserver is still not reachable", "apiserver", b.host, "reason", next.Reason)
	}
}

// watchAPIServer asks the apiserver whether it answers, every ProbeEvery
// while it does and with capped exponential backoff while it does not,
// until Close. Namespaces that Start could not check are checked once it
// answers.
func (b *Backend) watchAPIServer(nsChecked bool) {
	defer b.wg.Done()
	ctx := b.stopCtx
	backoff := min(minProbeBackoff, b.cfg.ProbeEvery)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wait := b.cfg.ProbeEvery
		if !b.Substrate().Reachable {
			wait, backoff = backoff, min(2*backoff, b.cfg.MaxProbeBackoff)
		} else {
			backoff = min(minProbeBackoff, b.cfg.ProbeEvery)
		}
		timer.Reset(wait)
		select {
		case <-b.stop:
			return
		case <-b.probeNow:
		case <-timer.C:
		}
		err := b.probe(ctx)
		if ctx.Err() != nil {
			return
		}
		if (err == nil || fromAPIServer(err)) && !nsChecked {
			nsChecked = b.checkNamespacesLate(ctx)
		}
		if err == nil && !b.synced() {
			err = errNotListed
		}
		b.observe(apiReason(err))
	}
}

// checkNamespacesLate is ensureNamespaces for a backend that started while
// the apiserver was away: a namespace missing that Peloton may not create
// is logged (launches into it are then blocked, saying why) rather than
// refused, since the stack already serves. It reports whether the check is
// done.
func (b *Backend) checkNamespacesLate(ctx context.Context) bool {
	err := b.ensureNamespaces(ctx)
	switch {
	case err == nil:
		return true
	case errors.Is(err, errNamespaceRefused):
		b.log.Error("a namespace pods go to is missing; launches into it are blocked until it exists", "err", err)
		return true
	}
	b.log.Debug("checking the namespaces; trying again", "err", hostmgr.ShortReason(err.Error()))
	return false
}

// onWatchError is the informers' watch error handler. It replaces
// client-go's, which logs every failed list and watch through klog, each
// retry again. A failure other than a watch's normal end makes the
// apiserver watcher ask at once, so that an apiserver that went away is
// reported without waiting for the next probe.
func (b *Backend) onWatchError(what string) cache.WatchErrorHandler {
	return func(_ *cache.Reflector, err error) {
		if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return
		}
		b.log.Debug("the "+what+" informer lists and watches again", "err", hostmgr.ShortReason(err.Error()))
		select {
		case b.probeNow <- struct{}{}:
		default:
		}
	}
}

// apiReason cuts an apiserver error to its status and the first line of
// the answer: client-go keeps up to 2 KiB of an answer that is not the
// apiserver's (an HTML page) in the error's causes.
func apiReason(err error) error {
	var se *apierrors.StatusError
	if err == nil || !errors.As(err, &se) || se.ErrStatus.Code == 0 {
		return err
	}
	st := se.ErrStatus
	body := st.Message
	if d := st.Details; d != nil {
		for _, c := range d.Causes {
			if c.Type == metav1.CauseTypeUnexpectedServerResponse && strings.TrimSpace(c.Message) != "" && c.Message != "unknown" {
				body = c.Message
				break
			}
		}
	}
	return fmt.Errorf("%s", hostmgr.HTTPReason(int(st.Code), []byte(body)))
}
