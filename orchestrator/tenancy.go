package orchestrator

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/duet-serve/duet/orchestrator/tenant"
	"github.com/duet-serve/duet/proto/openai"
)

// HeaderPriority names the request's priority class (queue.classes). With
// a tenant whose class is set, it may lower the class, never raise it.
const HeaderPriority = "X-Duet-Priority"

// identify returns the request's tenant: nil when no tenant claims it
// (and keys are not required), a 401 when one must.
func (o *Orchestrator) identify(in Incoming) (*tenant.Tenant, error) {
	if !o.tenants.Enabled() || in.Header == nil {
		return nil, nil
	}
	t, err := o.tenants.Identify(in.Header)
	if errors.Is(err, tenant.ErrUnknown) {
		return nil, &Error{Status: http.StatusUnauthorized, Type: openai.ErrTypeInvalidRequest, Code: "invalid_api_key",
			Message: "no tenant is known by this API key: send Authorization: Bearer <a configured key>", Err: err}
	}
	return t, err
}

// priorityClass returns the request's queue class: the X-Duet-Priority
// header's, capped at its tenant's class (the queue's default_class for a
// tenant without one); else the tenant's; else "" (the queue's default).
// An unknown class is a 400.
func (o *Orchestrator) priorityClass(in Incoming, t *tenant.Tenant) (string, error) {
	asked := ""
	if in.Header != nil {
		asked = strings.TrimSpace(in.Header(HeaderPriority))
	}
	ceiling := ""
	if t != nil {
		ceiling = t.Class
		if ceiling == "" && o.queue != nil {
			ceiling = o.queue.Config().DefaultClass
		}
	}
	if asked == "" || o.queue == nil {
		return ceiling, nil
	}
	cfg := o.queue.Config()
	if !cfg.HasClass(asked) {
		return "", &Error{Status: http.StatusBadRequest, Type: openai.ErrTypeInvalidRequest, Code: "invalid_priority",
			Message: fmt.Sprintf("%s: unknown priority class %q (valid: %s)", HeaderPriority, asked, strings.Join(cfg.ClassNames(), ", "))}
	}
	if ceiling != "" && classRank(cfg.ClassNames(), asked) < classRank(cfg.ClassNames(), ceiling) {
		return ceiling, nil // a tenant may not raise its own class
	}
	return asked, nil
}

// classRank is name's position in classes, highest first.
func classRank(classes []string, name string) int {
	for i, c := range classes {
		if c == name {
			return i
		}
	}
	return len(classes)
}

// TenantName is the request's tenant's name, "" when none claims it.
func (r *Request) TenantName() string {
	if r.Tenant == nil {
		return ""
	}
	return r.Tenant.Name
}

// tenantIdentity scopes a request's session key and, with isolate_cache,
// its block hashes to its tenant, so that two tenants' sessions never meet
// and an isolated tenant's prompts match nothing of another's. It returns
// the salt that seeds the block hashes: salt, the request's own, scoped.
func tenantIdentity(t *tenant.Tenant, req *Request, salt string) string {
	if t == nil {
		return salt
	}
	if req.SessionKey != "" {
		req.SessionKey = t.Name + "/" + req.SessionKey
	}
	if req.ParentSession != "" {
		req.ParentSession = t.Name + "/" + req.ParentSession
	}
	if !t.IsolateCache {
		return salt
	}
	return "tenant\x00" + t.Name + "\x00" + salt
}

// chargeTenant checks and charges the request's tenant limits before it
// waits for admission: a request over them is a 429 with Retry-After and
// OpenAI's rate-limit error.
func (o *Orchestrator) chargeTenant(f *flight) error {
	grant, err := o.limits.Admit(f.req.Tenant, len(f.req.Tokens), f.req.MaxTokens)
	var over *tenant.LimitError
	if errors.As(err, &over) {
		o.metrics.tenantRejected.WithLabelValues(over.Tenant, over.Limit).Inc()
		kind := "tokens"
		if over.Limit == tenant.LimitConcurrency {
			kind = "requests"
		}
		return &Error{Status: http.StatusTooManyRequests, Type: kind, Code: "rate_limit_exceeded", RetryAfter: over.RetryAfter,
			Message: fmt.Sprintf("Rate limit reached for tenant %s on %s: limit %d. Please try again in %ds.",
				over.Tenant, over.Limit, over.Value, int(over.RetryAfter.Seconds())), Err: err}
	}
	f.grant = grant
	return err
}
