// Package tenant identifies the tenant of each request and enforces its
// limits: input and output tokens per minute (token buckets) and requests
// in flight, on this replica alone or, given a Shared store, across every
// replica.
//
// A tenant is named by a header a gateway in front sets (tenants.header)
// or by its API key (`Authorization: Bearer KEY`). Keys are looked up by
// their SHA-256, so the lookup's timing tells nothing about a key's bytes.
//
// Concurrency: a Set is safe for concurrent use; its state is its Limiter's
// (limits.go), guarded there.
package tenant

import (
	"crypto/sha256"
	"errors"
	"strings"
)

// Tenant is one configured tenant.
type Tenant struct {
	// Name is the tenant's configured name.
	Name string
	// Class is its queue priority class ("" for the queue's default).
	Class string
	// IsolateCache keeps its prompts out of other tenants' cache credit.
	IsolateCache bool

	spec Spec
}

// ErrUnknown is a request no tenant claims while require_key is set.
var ErrUnknown = errors.New("no tenant claims the request")

// Set is the configured tenants. The zero of *Set (nil) has no tenants.
type Set struct {
	cfg    Config
	byName map[string]*Tenant
	byKey  map[[sha256.Size]byte]*Tenant
}

// NewSet builds the tenants of cfg, which must be valid.
func NewSet(cfg Config) *Set {
	s := &Set{cfg: cfg, byName: map[string]*Tenant{}, byKey: map[[sha256.Size]byte]*Tenant{}}
	for _, spec := range cfg.Tenants {
		t := &Tenant{Name: spec.Name, Class: spec.Class, IsolateCache: spec.IsolateCache, spec: spec}
		s.byName[spec.Name] = t
		for _, k := range spec.APIKeys {
			s.byKey[sha256.Sum256([]byte(k))] = t
		}
	}
	return s
}

// Enabled reports whether any tenant is configured.
func (s *Set) Enabled() bool { return s != nil && len(s.byName) > 0 }

// Identify returns the tenant of a request whose headers header returns
// ("" for an absent one): nil when none claims it and keys are not
// required, ErrUnknown when they are.
func (s *Set) Identify(header func(name string) string) (*Tenant, error) {
	if !s.Enabled() {
		return nil, nil
	}
	var t *Tenant
	if s.cfg.Header != "" {
		t = s.byName[header(s.cfg.Header)]
	} else if key, ok := bearer(header("Authorization")); ok {
		t = s.byKey[sha256.Sum256([]byte(key))]
	}
	if t == nil && s.cfg.RequireKey {
		return nil, ErrUnknown
	}
	return t, nil
}

// bearer returns the token of an `Authorization: Bearer TOKEN` value.
func bearer(v string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
