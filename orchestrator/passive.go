package orchestrator

import (
	"errors"
	"net/http"

	"github.com/duet-serve/duet/router"
	"go.uber.org/zap"
)

// observe feeds passive health with the outcome of one call to ep: err is
// the transport error (nil when the worker answered with status). An
// answer below 500 proves the worker alive (a 4xx is the request's fault,
// a 429 a busy worker); a 5xx counts toward ejection; a connect error,
// reset or close ejects at once. A timeout or an exhausted connection pool
// says the worker is slow or duet is busy, not that it is dead, a call
// cancelled because its client left says nothing, and one given up because
// the worker was found down was counted already: none of them counts.
func (o *Orchestrator) observe(ep *router.Endpoint, status int, err error) {
	switch {
	case err == nil && status < http.StatusInternalServerError:
		o.router.ReportSuccess(ep)
	case err == nil:
		o.eject(ep, router.FailureServer, nil)
	case errors.Is(err, errTimeout), errors.Is(err, errPoolBusy), errors.Is(err, errCancelled), errors.Is(err, errWorkerDown):
		o.router.ReportInconclusive(ep)
	default:
		o.eject(ep, router.FailureConnect, err)
	}
}

// eject reports a failure and logs the ejection it causes.
func (o *Orchestrator) eject(ep *router.Endpoint, f router.Failure, cause error) {
	if d := o.router.ReportFailure(ep, f); d > 0 {
		o.log.Warn("worker ejected by passive health", zap.String("worker", ep.ID), zap.String("failure", f.String()),
			zap.Duration("for", d), zap.Error(cause))
	}
}
